package app

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/internal/tlsserver"
)

// Config is the whole configuration of a bridge. cmd/mcpbridge reads it (viper: file,
// environment, flags); keys are the mapstructure tags joined with "."; config.yaml at the
// repository root documents each one. Nothing here reads configuration: the bridge is handed
// plain values.
type Config struct {
	GRPC        GRPCConfig      `mapstructure:"grpc"`
	HTTP        HTTPConfig      `mapstructure:"http"`
	Log         LogConfig       `mapstructure:"log"`
	Sources     SourcesConfig   `mapstructure:"sources"`
	Sink        SinkConfig      `mapstructure:"sink"`
	Store       StoreConfig     `mapstructure:"store"`
	XDS         XDSConfig       `mapstructure:"xds"`
	Translate   TranslateConfig `mapstructure:"translate"`
	Linkerd     LinkerdConfig   `mapstructure:"linkerd"`
	Memory      MemoryConfig    `mapstructure:"memory"`
	Authz       AuthzConfig     `mapstructure:"authz"`
	Limits      LimitsConfig    `mapstructure:"limits"`
	Collections []string        `mapstructure:"collections"`
	// Downstreams are ResourceSinks the bridge dials and pushes to.
	Downstreams []dial.Target `mapstructure:"downstreams"`
	// Exports keeps files of what the bridge serves up to date (package source/export).
	Exports ExportsConfig `mapstructure:"exports"`
}

// ExportsConfig is the filesystem export: files that Envoy's path_config_source (or anything
// else that reads files) follows.
type ExportsConfig struct {
	// Files are the DiscoveryResponse files to keep up to date.
	Files []ExportFile `mapstructure:"files"`
	// Directory, if set, is kept holding Kubernetes-style Istio YAML of every stored
	// collection of a known kind, one file per collection (PLURAL.GROUP.yaml), versions as
	// resourceVersion: what mcpbridge validate accepts and the file source loads back into
	// the same resources. Empty: none.
	Directory string `mapstructure:"directory"`
	// Debounce gathers a burst of changes into one write of each file. 100ms, as
	// sources.file_debounce; 0s writes at once.
	Debounce time.Duration `mapstructure:"debounce"`
	// RetryInterval is how long a failed write (permissions, a full disk) waits before it is
	// tried again; positive. 5s.
	RetryInterval time.Duration `mapstructure:"retry_interval"`
}

// ExportFile is one exported file: what a state-of-the-world client of this node and type
// would receive, as a DiscoveryResponse.
type ExportFile struct {
	// Path of the file; written by write-temp-then-rename in its directory.
	Path string `mapstructure:"path"`
	// TypeURL is the xDS type (type.googleapis.com/envoy.config.cluster.v3.Cluster, or an
	// MCP collection's xDS type URL).
	TypeURL string `mapstructure:"type_url"`
	// Format is json (default) or yaml.
	Format string `mapstructure:"format"`
	// Node is the node the file is for: its id (sidecar~..., router~...) and metadata
	// decide the views (listeners by node kind, a gateway's class, namespaces).
	Node ExportNode `mapstructure:"node"`
	// ResourceNames narrows the file to these names; empty: every resource (wildcard) of a
	// type that allows it.
	ResourceNames []string `mapstructure:"resource_names"`
}

// ExportNode is an exported file's node, as an xDS client would name itself.
type ExportNode struct {
	ID string `mapstructure:"id"`
	// Labels are the workload labels (node metadata LABELS): a gateway's class.
	Labels map[string]string `mapstructure:"labels"`
	// Namespaces narrows namespaced resources (node metadata MCPBRIDGE_NAMESPACES).
	Namespaces []string `mapstructure:"namespaces"`
}

// AuthzConfig is what each peer may do, by the SPIFFE ID of its verified client certificate
// (package authz). No rules: everything is allowed, as on a loopback development setup.
type AuthzConfig struct {
	Rules []authz.Rule `mapstructure:"rules"`
}

// MemoryConfig bounds the Go heap, so that the garbage collector works harder before the
// process outgrows its container.
type MemoryConfig struct {
	// Limit is the Go memory limit: "auto" (90% of the container's cgroup memory limit when
	// there is one, else none), "off", or a size such as "900MiB". GOMEMLIMIT, when set,
	// wins over it.
	Limit string `mapstructure:"limit"`
	// GCPercent is the garbage collector's GOGC: a collection starts when the heap has grown
	// this many percent over what the last one left live. A bridge's live heap is large and
	// long-lived (the stores' encodings), so the heap it may reach is mostly this margin: lower
	// keeps the process smaller for more collections' CPU. GOGC, when set, wins over it. 75:
	// at 100,000 ServiceEntries it keeps the bridge's peak RSS a sixth lower than Go's 100,
	// for about 8% more CPU in a full load, and next to nothing at rest.
	GCPercent int `mapstructure:"gc_percent"`
}

// LimitsConfig bounds what one client may take of the bridge, on every gRPC service. A
// refusal is the gRPC status ResourceExhausted (for a producer's push, a NACK with that code,
// nothing of it applied), counted in mcpbridge_limit_refusals_total{limit} and logged at most
// once a second per limit; it refuses or ends one stream and never touches another. Every
// value must be positive: to lift a limit, set it far above what any client needs. The
// defaults sit well above what a real mesh's clients send, so that only a broken or hostile
// client meets them.
type LimitsConfig struct {
	// Streams bounds the streams open at once, of every gRPC service (xDS, MCP source and
	// sink, AMCS, health's Watch, reflection). 100,000, as istiod's ISTIO_GPRC_MAXSTREAMS:
	// above a large mesh's proxies (one ADS stream each), and a bound on the goroutines and
	// memory a flood of streams would take.
	Streams int `mapstructure:"streams"`
	// StreamsPerPeer bounds one peer's streams: its verified SPIFFE ID, else its IP address.
	// 1,000: a proxy opens one ADS stream (or one per type), istiod a few; the rest is room
	// for clients behind one address (a NAT, a node-local proxy). Raise it toward Streams
	// when every client comes through one proxy or load balancer that hides their addresses.
	StreamsPerPeer int `mapstructure:"streams_per_peer"`
	// SubscriptionsPerStream bounds the types plus the explicitly subscribed names on one
	// stream (a wildcard counts as its type). 200,000: Envoy subscribes to each cluster's
	// endpoints by name, 100,000 names in a mesh of 100,000 services; twice that.
	SubscriptionsPerStream int `mapstructure:"subscriptions_per_stream"`
	// RequestsPerSecond and RequestBurst bound the messages one peer sends (its verified
	// SPIFFE ID, else its IP): on all its streams (a consumer's requests and ACKs, a
	// producer's Resources), its unary calls (CSDS) and its REST polls together, a token
	// bucket of RequestBurst refilled at RequestsPerSecond, as istiod's
	// PILOT_MAX_REQUESTS_PER_SECOND bounds its requests; per peer, not per stream, so that
	// reopening streams does not reset it. 100/s and 1,000: Envoy sends one ACK per
	// response, and a stream gets at most one response per type every xds.push_interval
	// (10/s at 100ms); a reconnecting client's subscriptions come at once, well under 1,000.
	// Behind a NAT that hides many clients' addresses, raise both.
	RequestsPerSecond float64 `mapstructure:"requests_per_second"`
	RequestBurst      int     `mapstructure:"request_burst"`
	// ResourcesPerProducer bounds the resources one producer of the ResourceSink holds in
	// all collections together (its owner: mcp-producer-id, SPIFFE ID or IP). 1,000,000:
	// ten times the 100,000 ServiceEntries the scale benchmark loads. Files, upstreams and
	// the translation are the operator's and are not bounded.
	ResourcesPerProducer int `mapstructure:"resources_per_producer"`
	// FirstRequestTimeout ends a stream whose client sends nothing within it, so that idle
	// connections cannot hold stream slots. 10s: real clients send their first request at
	// once; as xds.send_timeout. ResourceExhausted like every limit (the client held a
	// slot it did not use), not DeadlineExceeded.
	FirstRequestTimeout time.Duration `mapstructure:"first_request_timeout"`
	// Connections and ConnectionsPerPeer bound the connections of the gRPC and HTTP ports
	// together, and those of one IP address (counted before any handshake, so by address):
	// one over is closed as soon as it is accepted. 100,000 (as Streams) and 10,000: a
	// client needs one connection; the rest is room for clients behind one address and for
	// HTTP/1.1 pollers.
	Connections        int `mapstructure:"connections"`
	ConnectionsPerPeer int `mapstructure:"connections_per_peer"`
}

// SinkConfig is how the bridge asks producers (ResourceSink service and upstreams).
type SinkConfig struct {
	NodeID          string            `mapstructure:"node_id"`
	NodeAnnotations map[string]string `mapstructure:"node_annotations"`
	// Incremental asks producers for incremental updates of every collection.
	Incremental bool `mapstructure:"incremental"`
	// Expiry deletes a disconnected producer's resources after this long; 0 keeps them.
	Expiry time.Duration `mapstructure:"expiry"`
	// AnonymousExpiry is the expiry of a producer known only by its IP address, when
	// Expiry is 0 or longer.
	AnonymousExpiry time.Duration `mapstructure:"anonymous_expiry"`
}

// XDSConfig configures the xDS and MCP source side.
type XDSConfig struct {
	// MeshConfigFile is a YAML or JSON istio.mesh.v1alpha1.MeshConfig served to istiod under
	// core/v1alpha1/MeshConfig; empty serves an empty MeshConfig.
	MeshConfigFile string `mapstructure:"mesh_config_file"`
	// SendTimeout resets a stream whose one send takes longer; positive.
	SendTimeout time.Duration `mapstructure:"send_timeout"`
	// MaxResponseSize is the client's likely receive limit: larger delta answers are split,
	// larger whole answers logged; positive.
	MaxResponseSize int `mapstructure:"max_response_size"`
	// PushInterval is the shortest time between two pushes of store changes on one stream;
	// changes within it go together. Zero: every change at once.
	PushInterval time.Duration `mapstructure:"push_interval"`
	// ServeV2 serves the xDS v2 services (envoy.service.discovery.v2 ADS and the envoy.api.v2
	// per-type services) beside v3, for Envoy before 1.17 and grpc-go before 1.36.
	ServeV2 bool `mapstructure:"serve_v2"`
	// TTL gives resources a TTL, renewed while their producer is connected (ttl.go).
	TTL TTLConfig `mapstructure:"ttl"`
}

// LinkerdConfig configures Linkerd's Destination service (source/linkerd).
type LinkerdConfig struct {
	// KeepaliveInterval is the longest a Destination.Get stream goes without a message: after
	// it, an empty `add` (the seed's ADDRESS_UPDATE_INTERVAL, which the controller chooses)
	// tells the proxy the bridge is alive. 30s: well under the idle timeouts of load
	// balancers and NAT tables between a proxy and the bridge.
	KeepaliveInterval time.Duration `mapstructure:"keepalive_interval"`
}

// TranslateConfig configures the derivation of Envoy resources from the Istio config.
type TranslateConfig struct {
	// Enabled runs the translation; off, the bridge serves only what producers give it.
	Enabled bool `mapstructure:"enabled"`
	// DomainSuffix completes short hosts in VirtualServices and DestinationRules
	// ("reviews" in namespace "bookinfo" is reviews.bookinfo.svc.SUFFIX).
	DomainSuffix string `mapstructure:"domain_suffix"`
	// OutboundTrafficPolicy is MeshConfig's outboundTrafficPolicy.mode for every sidecar:
	// ALLOW_ANY (istiod's default) sends connections to destinations the mesh does not know
	// to their original destination (PassthroughCluster), REGISTRY_ONLY nowhere
	// (BlackHoleCluster).
	OutboundTrafficPolicy string `mapstructure:"outbound_traffic_policy"`
}

type GRPCConfig struct {
	Address string `mapstructure:"address"`
	// TLS serves the gRPC port over TLS (mutual with a client CA); plaintext when unset.
	TLS tlsserver.Config `mapstructure:"tls"`
	// Insecure allows a plaintext Address that is not loopback; without it, such an address
	// is a configuration error, so that mesh config never crosses a network in the clear by
	// oversight.
	Insecure bool `mapstructure:"insecure"`
	// MaxRecvMsgSize bounds one message a client or producer sends, in bytes.
	MaxRecvMsgSize int `mapstructure:"max_recv_msg_size"`
	// ShutdownGrace is how long a stop waits for streams to end before closing connections.
	ShutdownGrace time.Duration   `mapstructure:"shutdown_grace"`
	Keepalive     KeepaliveConfig `mapstructure:"keepalive"`
}

// KeepaliveConfig is the gRPC server's HTTP/2 keepalive: the pings it accepts from clients and
// the pings it sends on idle connections.
type KeepaliveConfig struct {
	// MinPingInterval is the shortest interval between client pings the server accepts, with
	// or without open streams; a client pinging faster is ended with GOAWAY
	// ENHANCE_YOUR_CALM ("too_many_pings"). gRPC's own default (5 minutes, and no pings
	// without streams) ends istiod's and Envoy's keepalives; grpc-go clients never ping more
	// often than every 10s.
	MinPingInterval time.Duration `mapstructure:"min_ping_interval"`
	// Time is how long a connection may be idle before the server pings it; Timeout how long
	// it waits for the answer before closing a dead connection.
	Time    time.Duration `mapstructure:"time"`
	Timeout time.Duration `mapstructure:"timeout"`
}

type HTTPConfig struct {
	Address string `mapstructure:"address"`
	// TLS serves HTTPS (mutual with a client CA); plaintext when unset.
	TLS tlsserver.Config `mapstructure:"tls"`
	// Insecure allows a plaintext Address that is not loopback, as GRPCConfig.Insecure.
	Insecure bool `mapstructure:"insecure"`
	// REST is xDS over REST-JSON long polling on this port (package source/rest).
	REST RESTConfig `mapstructure:"rest"`
	// IdleTimeout closes a keep-alive connection with no request for this long; ReadTimeout
	// bounds the reading of one request, headers and body (a long poll's wait comes after).
	// 2m and 30s: a poller's next request comes within http.rest.poll_timeout; a request is
	// at most http.rest.max_request_bytes. Without them an idle or trickling client holds a
	// connection for ever.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	ReadTimeout time.Duration `mapstructure:"read_timeout"`
	// DebugWithoutClientAuth serves /debug/*, the profiles and the status page on an Address
	// that is not loopback although TLS names no client CA, so that anyone who reaches the
	// port may read them. Off: they answer 404 with a hint there (see Bridge.adminCheck).
	DebugWithoutClientAuth bool `mapstructure:"debug_without_client_auth"`
}

// IsLoopback reports whether a listen address stays on this host: 127.0.0.0/8, ::1 or
// localhost. An empty host is every interface, and any other name may resolve anywhere.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// RESTConfig configures REST-JSON polling (POST /v3/discovery:clusters and the others).
type RESTConfig struct {
	// Enabled serves the REST endpoints. On by default: they read only what gRPC clients
	// may, under the same authz.rules.
	Enabled bool `mapstructure:"enabled"`
	// PollTimeout is the longest a poll waits for a change before it is answered 304 Not
	// Modified. 30s: long enough that an idle poller costs a request every half minute;
	// Envoy's api_config_source.request_timeout must be longer (its default is 1s).
	PollTimeout time.Duration `mapstructure:"poll_timeout"`
	// MaxConcurrentPolls bounds the polls waiting at once; one more is answered 503 with
	// Retry-After and counted in mcpbridge_limit_refusals_total{limit="max_concurrent_polls"}.
	// 10,000: each waiting poll holds a connection and a goroutine.
	MaxConcurrentPolls int `mapstructure:"max_concurrent_polls"`
	// MaxRequestBytes bounds a request's JSON body; larger is answered 413. 1 MiB: a
	// request names resources, and 1 MiB is some 10,000 endpoint names.
	MaxRequestBytes int64 `mapstructure:"max_request_bytes"`
	// MaxPollsPerPeer bounds one peer's polls waiting at once (its verified SPIFFE ID, else
	// its IP), so that one peer cannot hold every poll of MaxConcurrentPolls; one more is
	// answered 503 with Retry-After, counted as max_polls_per_peer. 100: a poller holds one
	// poll per type.
	MaxPollsPerPeer int `mapstructure:"max_polls_per_peer"`
}

type LogConfig struct {
	Level  string `mapstructure:"level"`
	Format string `mapstructure:"format"`
}

type SourcesConfig struct {
	Files []string `mapstructure:"files"`
	// FileDebounce gathers a burst of file events into one reload; 0s reloads at once.
	FileDebounce time.Duration `mapstructure:"file_debounce"`
	// StartupTimeout bounds how long /readyz waits for a source's first full state.
	StartupTimeout time.Duration `mapstructure:"startup_timeout"`
	// Upstreams are ResourceSources the bridge dials as a sink.
	Upstreams []dial.Target `mapstructure:"upstreams"`
	// Kubernetes reads Istio config (and optionally Services) from a Kubernetes API server;
	// nil: not read.
	Kubernetes *KubernetesSourceConfig `mapstructure:"kubernetes"`
	// Zookeeper are service registries in ZooKeeper (Dubbo, Spring Cloud) to serve as
	// ServiceEntries.
	Zookeeper []ZookeeperSourceConfig `mapstructure:"zookeeper"`
}

// KubernetesSourceConfig is sources.kubernetes (sink/kubesource).
type KubernetesSourceConfig struct {
	// Kubeconfig is a kubeconfig file; empty: the pod's in-cluster configuration.
	Kubeconfig string `mapstructure:"kubeconfig"`
	// Namespaces and NamespaceSelector (a label selector) choose the namespaces read, their
	// union; both empty: all.
	Namespaces        []string `mapstructure:"namespaces"`
	NamespaceSelector string   `mapstructure:"namespace_selector"`
	// Services serves Kubernetes Services and their EndpointSlices as ServiceEntries.
	Services bool `mapstructure:"services"`
}

// ZookeeperSourceConfig is one entry of sources.zookeeper (sink/zksource).
type ZookeeperSourceConfig struct {
	// Name names the source: its owner is zookeeper:NAME and its ServiceEntries are in the
	// namespace NAME.
	Name           string        `mapstructure:"name"`
	Servers        []string      `mapstructure:"servers"`
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	DubboRoot      string        `mapstructure:"dubbo_root"`
	SpringRoot     string        `mapstructure:"spring_root"`
}

type StoreConfig struct {
	// TombstoneRetention is how long deletions are kept for incremental readers; positive.
	TombstoneRetention time.Duration `mapstructure:"tombstone_retention"`
	// Backend is memory (each bridge alone) or etcd (replicas sharing one state, and a warm
	// restart).
	Backend string     `mapstructure:"backend"`
	Etcd    EtcdConfig `mapstructure:"etcd"`
}

// EtcdConfig is store.etcd: the etcd cluster replicas share their state through.
type EtcdConfig struct {
	Endpoints []string `mapstructure:"endpoints"`
	// Prefix is where the bridge's keys are; replicas with the same prefix serve the same
	// config, so two meshes can share one etcd.
	Prefix string `mapstructure:"prefix"`
	// Replica names this replica (presence keys, /debug/replica, logs). Empty: the host name
	// (a pod's name).
	Replica        string        `mapstructure:"replica"`
	DialTimeout    time.Duration `mapstructure:"dial_timeout"`
	RequestTimeout time.Duration `mapstructure:"request_timeout"`
	// SessionTTL is how long a replica cut off from etcd still counts as holding its
	// producers' streams.
	SessionTTL time.Duration `mapstructure:"session_ttl"`
	// MaxTxnOps and MaxTxnBytes bound one etcd transaction: a write beyond them is committed
	// in chunks under one commit record. At most etcd's --max-txn-ops and
	// --max-request-bytes, less the few keys the bridge adds.
	MaxTxnOps   int     `mapstructure:"max_txn_ops"`
	MaxTxnBytes int     `mapstructure:"max_txn_bytes"`
	TLS         EtcdTLS `mapstructure:"tls"`
}

// EtcdTLS is the client side of TLS to etcd: the CA that signed etcd's certificates, and this
// replica's client certificate when etcd requires one.
type EtcdTLS struct {
	CAFile   string `mapstructure:"ca_file"`
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
}

// DefaultConfig is the configuration when nothing sets a key, and the one place its defaults
// are written. cmd/mcpbridge derives viper's defaults from it, one key per leaf (the
// mapstructure tags joined with "."), and config.yaml shows each: cmd/mcpbridge's tests hold
// both to it. The bridge hands every value to its components; the few that fill in a zero
// value of their own do so because they are also used as libraries outside the bridge (the
// store, the source engine, Linkerd's server, the etcd backend, the translation), and say
// which default here they mirror. The fields' comments say why a value is what it is.
func DefaultConfig() *Config {
	return &Config{
		GRPC: GRPCConfig{Address: "127.0.0.1:15010", MaxRecvMsgSize: 4 << 20, ShutdownGrace: 5 * time.Second,
			Keepalive: KeepaliveConfig{MinPingInterval: 5 * time.Second, Time: 30 * time.Second, Timeout: 10 * time.Second}},
		HTTP: HTTPConfig{Address: "127.0.0.1:15014", IdleTimeout: 2 * time.Minute, ReadTimeout: 30 * time.Second,
			REST: RESTConfig{Enabled: true, PollTimeout: 30 * time.Second, MaxConcurrentPolls: 10_000, MaxRequestBytes: 1 << 20,
				MaxPollsPerPeer: 100}},
		Log: LogConfig{Level: "info", Format: "text"},
		Sources: SourcesConfig{
			Files: []string{}, FileDebounce: 100 * time.Millisecond, StartupTimeout: 30 * time.Second,
			Upstreams: []dial.Target{}, Zookeeper: []ZookeeperSourceConfig{},
		},
		Sink: SinkConfig{NodeID: "mcpbridge", NodeAnnotations: map[string]string{}, Incremental: true, AnonymousExpiry: time.Hour},
		Store: StoreConfig{TombstoneRetention: 5 * time.Minute, Backend: "memory", Etcd: EtcdConfig{
			Endpoints: []string{}, Prefix: "/mcpbridge/", DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second, SessionTTL: 10 * time.Second,
			MaxTxnOps: 100, MaxTxnBytes: 1 << 20,
		}},
		XDS: XDSConfig{SendTimeout: 10 * time.Second, MaxResponseSize: 4 << 20, PushInterval: 100 * time.Millisecond, ServeV2: true,
			TTL: TTLConfig{Types: []TypeTTL{}}},
		Translate: TranslateConfig{Enabled: true, DomainSuffix: "cluster.local", OutboundTrafficPolicy: "ALLOW_ANY"},
		Linkerd:   LinkerdConfig{KeepaliveInterval: 30 * time.Second},
		Memory:    MemoryConfig{Limit: "auto", GCPercent: 75},
		Authz:     AuthzConfig{Rules: []authz.Rule{}},
		Limits: LimitsConfig{
			Streams: 100_000, StreamsPerPeer: 1_000, SubscriptionsPerStream: 200_000,
			RequestsPerSecond: 100, RequestBurst: 1_000, ResourcesPerProducer: 1_000_000,
			FirstRequestTimeout: 10 * time.Second, Connections: 100_000, ConnectionsPerPeer: 10_000,
		},
		Collections: []string{},
		Downstreams: []dial.Target{},
		Exports:     ExportsConfig{Files: []ExportFile{}, Debounce: 100 * time.Millisecond, RetryInterval: 5 * time.Second},
	}
}

// ConfigError is a bad command line or configuration: exit status 2, one line naming the key.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

// ConfigErrorf returns a *ConfigError.
func ConfigErrorf(format string, args ...any) error {
	return &ConfigError{msg: fmt.Sprintf(format, args...)}
}
