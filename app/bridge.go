// Package app is the composition root: it wires a whole mcpbridge from its configuration: the store, the sink side
// (ResourceSink, upstreams, file source), the source engine with its MCP and xDS adapters,
// downstream pushes, metrics and the admin HTTP endpoints. cmd/mcpbridge serves one from the
// command line; package bridgetest starts one in a test. Nothing here reads configuration.
package app

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/app/admin"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/buildinfo"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/tlsserver"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/csds"
	"github.com/mcpbridge/mcpbridge/source/linkerd"
	"github.com/mcpbridge/mcpbridge/source/rest"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/store/etcdbackend"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
)

// Bridge is every component of a serving bridge, wired from the configuration.
type Bridge struct {
	cfg     *Config
	log     *slog.Logger
	store   *store.Store
	metrics *metrics.Metrics
	grpc    *grpc.Server
	health  *health.Server
	engine  *source.Engine
	xds     *xds.Server
	linkerd *linkerd.Server
	sink    *sink.Server
	files   *filesource.Source // nil without sources.files
	ready   *admin.Readiness
	http    http.Handler
	runners []runner
	// grpcTLS and httpTLS serve each listener's TLS files, reloaded when they change; nil
	// for a plaintext listener.
	grpcTLS, httpTLS *tlsserver.Server
	// translator derives the Envoy resources; nil when translate.enabled is false.
	translator *envoy.Controller
	// translationFaults reports the translation's faults to the metrics and the status page.
	translationFaults metrics.FaultsFunc
	// rest serves REST-JSON polling on the HTTP port; nil when http.rest.enabled is false.
	rest *rest.Server
	// guard holds the limits of every stream and unary call, and the per-peer request
	// buckets REST polls draw on too.
	guard *limits.Guard
	// authz is the compiled authz.rules (no rules: everything allowed).
	authz *authz.Policy
	// writer takes the producers' writes: the store, or etcd in front of it.
	writer store.Writer
	// etcd is the replicated backend (store.backend: etcd); nil with memory.
	etcd *etcdbackend.Backend
	// ingestedFiles is the file source of this replica's current term as the elected
	// ingester (etcd backend), for its faults; nil when it is not the ingester.
	ingestedFiles atomic.Pointer[filesource.Source]
	// followed are the sources following outside systems that run now (this replica's, or its
	// term's as the elected ingester), for sourceReports.
	followed atomic.Pointer[[]followed]
	// etcdLoaded is closed once this replica has loaded etcd's state.
	etcdLoaded chan struct{}
	// starting is the readiness condition from New until Serve has registered the others: a
	// bridge is never ready before it started serving (bridgetest.Start waits on it).
	starting func()
}

// runner is a long-running component: a producer the bridge reads or a sink it pushes to.
type runner struct {
	name  string
	run   func(context.Context) error
	ready <-chan struct{} // nil: not a readiness condition
}

// New builds every component; nothing listens or runs before Serve. A bad configuration is a
// *ConfigError.
func New(cfg *Config, log *slog.Logger) (*Bridge, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := metrics.New()
	b := &Bridge{
		cfg: cfg, log: log, metrics: m, ready: admin.NewReadiness(log.With("component", "readiness")),
		store: store.New(store.Options{
			Validate:           kinds.ValidateResource,
			TombstoneRetention: cfg.Store.TombstoneRetention,
			Logger:             log.With("component", "store"),
		}),
	}
	m.Declare(metrics.RoleSource, source.ProtocolResourceSource, source.ProtocolDownstream, source.ProtocolAMCS,
		source.ProtocolAMCSIncr, xds.ProtocolSotW, xds.ProtocolDelta, xds.ProtocolSotWV2, xds.ProtocolDeltaV2, linkerd.ProtocolLinkerd, linkerd.ProtocolConduit)
	m.Declare(metrics.RoleSink, sink.ProtocolResourceSink, sink.ProtocolUpstream)
	m.DeclareLimits(limits.Names...)
	if err := storeMeshConfig(cfg.XDS.MeshConfigFile, b.store); err != nil {
		return nil, err
	}
	policy, err := authz.Compile(cfg.Authz.Rules, xds.CollectionOf)
	if err != nil {
		return nil, ConfigErrorf("%v", err)
	}
	b.authz = policy
	if policy.Enabled() || cfg.HTTP.TLS.ClientCAFile != "" {
		m.DeclareAuthz()
	}
	if err := b.wireStoreBackend(); err != nil {
		return nil, err
	}
	if err := b.wireSink(); err != nil {
		return nil, err
	}
	if err := b.wireTLS(); err != nil {
		return nil, err
	}
	ttls, err := ResolveTTLs(cfg.XDS.TTL)
	if err != nil {
		return nil, err
	}
	b.wireSource(ttls)
	if err := b.wireSources(); err != nil {
		return nil, err
	}
	if err := b.wireTranslation(); err != nil {
		return nil, err
	}
	if err := b.wireREST(); err != nil {
		return nil, err
	}
	if err := b.wireExports(); err != nil {
		return nil, err
	}
	if err := b.wireAdmin(); err != nil {
		return nil, err
	}
	b.starting = b.ready.Wait("starting")
	return b, nil
}

// wireTranslation runs the controller that derives Envoy clusters, endpoints, routes and
// listeners from the Istio config and writes them back to the store.
func (b *Bridge) wireTranslation() error {
	if !b.cfg.Translate.Enabled {
		return nil
	}
	policy, err := envoy.ParseOutboundTrafficPolicy(b.cfg.Translate.OutboundTrafficPolicy)
	if err != nil {
		return fmt.Errorf("translate.outbound_traffic_policy: %w", err)
	}
	ctrl := envoy.New(envoy.Options{Store: b.store, Logger: b.log, DomainSuffix: b.cfg.Translate.DomainSuffix, OutboundTrafficPolicy: policy})
	// Not a readiness condition of its own: readiness waits for the translation of the
	// sources' first state (startRunners), not for a first build that may precede it.
	b.runners = append(b.runners, runner{name: "translate", run: ctrl.Run})
	b.translator = ctrl
	b.xds.Views = ctrl // proxies' views (gateway classes, namespaces) are built while they are connected
	b.translationFaults = metrics.FaultsFrom(ctrl)
	return nil
}

func (b *Bridge) wireSink() error {
	node := sink.SinkNode{ID: b.cfg.Sink.NodeID, Annotations: b.cfg.Sink.NodeAnnotations}
	s, err := sink.NewServer(sink.Options{
		Store: b.store, Writer: b.writer, Collections: sinkCollections(b.cfg), SinkNode: node, Expiry: b.cfg.Sink.Expiry, AnonymousExpiry: b.cfg.Sink.AnonymousExpiry,
		Logger: b.log, Metrics: b.metrics, Authz: b.authz, MaxResourcesPerProducer: b.cfg.Limits.ResourcesPerProducer,
		DomainSuffix: b.cfg.Translate.DomainSuffix,
	})
	if err != nil {
		return ConfigErrorf("collections: %v", err)
	}
	b.sink = s
	return nil
}

func (b *Bridge) wireSource(ttls *xds.TTLs) {
	b.guard = b.streamGuard()
	b.grpc = grpc.NewServer(serverOptions(b.cfg.GRPC, b.grpcTLS, b.guard)...)
	b.health = health.NewServer()
	b.engine = source.New(source.Options{
		Store: b.store, Logger: b.log.With("component", "source"),
		SendTimeout: b.cfg.XDS.SendTimeout, MaxResponseSize: b.cfg.XDS.MaxResponseSize, PushInterval: b.cfg.XDS.PushInterval,
		Metrics: b.metrics, Authz: b.authz, NamespaceOf: namespaceOf(b.cfg.Translate.DomainSuffix),
		MaxSubscriptions: b.cfg.Limits.SubscriptionsPerStream, Derived: derivedInputs(b.cfg.Translate.Enabled),
		CatchUp: b.catchUp(),
	})
	healthpb.RegisterHealthServer(b.grpc, b.health)
	reflection.Register(b.grpc)
	mcp.RegisterResourceSinkServer(b.grpc, b.sink)
	mcp.RegisterResourceSourceServer(b.grpc, &source.ResourceSource{Engine: b.engine})
	mcp.RegisterAggregatedMeshConfigServiceServer(b.grpc, &source.AggregatedMeshConfig{Engine: b.engine})
	b.xds = &xds.Server{Engine: b.engine, TTL: ttls, DisableV2: !b.cfg.XDS.ServeV2}
	b.xds.Register(b.grpc)
	// Client status (CSDS): what every client above holds, for mcpbridge status and istioctl-like tools.
	(&csds.Server{Engine: b.engine, Authz: b.authz, Metrics: b.metrics, Logger: b.log.With("component", "csds")}).Register(b.grpc)
	b.wireLinkerd()
}

// wireLinkerd serves Linkerd's Destination.Get (both packages) from the ServiceEntries and
// WorkloadEntries, under the same authorization and limits as every other stream. A stream's
// first message waits for readiness: a proxy keeps its last answers until then, and a "does
// not exist" sent before the sources are loaded would make it drop them.
func (b *Bridge) wireLinkerd() {
	b.linkerd = linkerd.New(linkerd.Options{
		Store: b.store, Logger: b.log.With("component", "linkerd"), Metrics: b.metrics, Authz: b.authz,
		KeepaliveInterval: b.cfg.Linkerd.KeepaliveInterval, DomainSuffix: b.cfg.Translate.DomainSuffix,
		SendTimeout: b.cfg.XDS.SendTimeout,
		Ready:       b.ready.Ready(),
		CatchUp:     b.engine.CatchUp,
	})
	b.linkerd.Register(b.grpc)
	b.runners = append(b.runners, runner{name: "linkerd", run: b.linkerd.Run})
}

// derivedInputs says whose resources inherit the liveness of others for TTL heartbeats: the
// translation's, of its Istio inputs (a derived resource is renewed only while no
// disconnected producer holds any input).
func derivedInputs(translating bool) map[string][]string {
	if !translating {
		return nil
	}
	return map[string][]string{envoy.Owner: envoy.InputCollections()}
}

// namespaceOf is the namespace of a resource for consumers' views: the Envoy resources the
// translation derives have theirs from their names (envoy.Namespacer); every other resource
// is named "namespace/name".
func namespaceOf(domainSuffix string) source.NamespaceFunc {
	derived := envoy.NewNamespacer(domainSuffix)
	outputs := envoy.OutputTypes()
	return func(collection, name string) (string, bool) {
		for _, t := range outputs {
			if collection == t {
				return derived.NamespaceOf(name)
			}
		}
		return authz.NamespaceOf(name)
	}
}

// wireTLS loads each listener's TLS files and watches them (a runner each), so that a
// rotated certificate or CA serves without a restart.
func (b *Bridge) wireTLS() error {
	var err error
	if b.grpcTLS, err = b.serverTLS("grpc", b.cfg.GRPC.TLS, nil); err != nil {
		return err
	}
	// HTTP/2 and HTTP/1.1: the config of each handshake is ours, and ALPN reads it there.
	b.httpTLS, err = b.serverTLS("http", b.cfg.HTTP.TLS, []string{"h2", "http/1.1"})
	return err
}

// tlsDebounce gathers a burst of changes to a listener's TLS files (a rotation writes the
// certificate, the key and the CAs one after the other) into one reload. It is not a
// configuration key: a rotation is rare, and a tenth of a second is all it waits.
const tlsDebounce = 100 * time.Millisecond

// serverTLS is a listener's TLS, or nil for plaintext. Its files are checked here: one that
// cannot be loaded at start is a configuration error naming the key and the file.
func (b *Bridge) serverTLS(listener string, cfg tlsserver.Config, protos []string) (*tlsserver.Server, error) {
	key := listener + ".tls"
	if !cfg.Enabled() {
		if err := cfg.Validate(key); err != nil {
			return nil, ConfigErrorf("%v", err)
		}
		return nil, nil
	}
	s, err := tlsserver.New(tlsserver.Options{
		Key: key, Config: cfg, NextProtos: protos, Debounce: tlsDebounce, Logger: b.log.With("component", "tls"),
		Reloaded: func(err error) { b.metrics.TLSReloaded(listener, err) },
	})
	if err != nil {
		return nil, ConfigErrorf("%v", err)
	}
	b.metrics.DeclareTLS(listener)
	b.runners = append(b.runners, runner{name: key, run: s.Run})
	return s, nil
}

// streamGuard enforces the limits of every stream, whatever its service: streams in total
// and per peer, messages per second, the wait for a first message (limits.*).
func (b *Bridge) streamGuard() *limits.Guard {
	l := b.cfg.Limits
	return limits.NewGuard(limits.StreamOptions{
		Streams: l.Streams, StreamsPerPeer: l.StreamsPerPeer,
		RequestsPerSecond: l.RequestsPerSecond, RequestBurst: l.RequestBurst,
		FirstRequestTimeout: l.FirstRequestTimeout, MaxRecvMsgSize: b.cfg.GRPC.MaxRecvMsgSize,
		Identity: sink.PeerIdentity, Metrics: b.metrics, Logger: b.log,
	})
}

// serverOptions are the gRPC server's options from its configuration; tlsServer nil serves
// plaintext.
func serverOptions(cfg GRPCConfig, tlsServer *tlsserver.Server, guard *limits.Guard) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainStreamInterceptor(guard.Intercept),
		grpc.ChainUnaryInterceptor(guard.InterceptUnary),
		grpc.ForceServerCodecV2(wire.Codec{}), // pre-encoded responses pass through
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		// A connection's write buffer is taken from a pool while it writes, not held by
		// every idle connection (a proxy each: 32 KiB times 10,000).
		grpc.SharedWriteBuffer(true),
		// Accept the keepalive pings of real clients (istiod's xds:// config source, Envoy,
		// grpc-go), also on connections without streams, instead of gRPC's default of one
		// every 5 minutes with streams only; ping idle connections to find dead peers.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.Keepalive.MinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.Keepalive.Time, Timeout: cfg.Keepalive.Timeout}),
	}
	if tlsServer != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsServer.TLSConfig())))
	}
	return opts
}

// wireSources adds the producers the bridge reads (files, upstreams) and the sinks it pushes to.
// With the etcd backend, one elected replica at a time reads the files and dials the
// upstreams (wireIngest); the others receive what it writes through etcd.
func (b *Bridge) wireSources() error {
	cfg := b.cfg
	shared, files, followed, err := b.sharedSources()
	if err != nil {
		return err
	}
	if b.etcd != nil {
		b.wireIngest(len(shared) > 0)
	} else {
		b.files = files
		b.followed.Store(&followed)
		b.runners = append(b.runners, shared...)
	}
	for i, t := range cfg.Downstreams {
		if t.Authz != nil {
			return ConfigErrorf("downstreams[%d].authz: only upstreams have one (what they may produce); a downstream is sent what the bridge serves", i)
		}
		d := &source.Downstream{Target: t, Engine: b.engine, Logger: b.log.With("component", "downstream")}
		b.runners = append(b.runners, runner{name: "downstream " + t.Address, run: d.Run})
	}
	return nil
}

// sharedSources builds the producers every replica would share: the file source, the
// upstreams and the sources that follow outside systems (Kubernetes, ZooKeeper), writing to
// the store's writer. Each call builds new ones (an elected ingester builds its own for each
// term).
func (b *Bridge) sharedSources() ([]runner, *filesource.Source, []followed, error) {
	cfg := b.cfg
	out, followed, err := b.registrySources()
	if err != nil {
		return nil, nil, nil, err
	}
	var files *filesource.Source
	if len(cfg.Sources.Files) > 0 {
		files = filesource.New(filesource.Options{
			Paths: cfg.Sources.Files, Debounce: cfg.Sources.FileDebounce, Store: b.writer, Logger: b.log,
		})
		out = append(out, runner{name: "sources.files", run: files.Run, ready: files.Ready()})
	}
	node := sink.SinkNode{ID: cfg.Sink.NodeID, Annotations: cfg.Sink.NodeAnnotations}
	for i, t := range cfg.Sources.Upstreams {
		if t.Authz != nil { // checked here, where the error can name the key
			if _, err := authz.ScopeGrant("", *t.Authz, kinds.CollectionOf); err != nil {
				return nil, nil, nil, ConfigErrorf("sources.upstreams[%d].authz.%v", i, err)
			}
		}
		up, err := sink.NewUpstream(sink.UpstreamOptions{
			Target: t, Store: b.store, Writer: b.writer, Collections: sinkCollections(cfg), SinkNode: node,
			Logger: b.log, Metrics: b.metrics, DomainSuffix: cfg.Translate.DomainSuffix,
		})
		if err != nil {
			return nil, nil, nil, ConfigErrorf("sources.upstreams[%d]: %v", i, err)
		}
		out = append(out, runner{name: "upstream " + t.Address, run: up.Run, ready: up.Ready()})
	}
	return out, files, followed, nil
}

// wireAdmin registers the collectors that read the store and the fault reporters at scrape
// time, and builds the HTTP handler.
func (b *Bridge) wireAdmin() error {
	var fileFaults func() []error
	if b.files != nil {
		fileFaults = b.files.Faults
	}
	if b.etcd != nil && len(b.cfg.Sources.Files) > 0 {
		fileFaults = b.ingestedFileFaults
	}
	for _, err := range []error{
		b.metrics.WatchStore(b.store),
		b.metrics.WatchFileFaults(fileFaults),
		b.metrics.WatchSources(b.sourceReports),
		b.metrics.WatchTranslationFaults(b.translationFaults),
		b.watchScopes(),
	} {
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	mux := admin.Handler(admin.Options{
		Ready: b.ready, Metrics: b.metrics, Store: b.store, Engine: b.engine, Sink: b.sink,
		FileFaults: fileFaults, Sources: b.sourceReports, TranslationFaults: b.translationFaults,
		Version: buildinfo.String(), Logger: b.log.With("component", "admin"),
		Admin: b.adminCheck(), NotServed: b.debugNotServed(), GatewayClasses: b.gatewayClasses(), Replica: b.replicaStatus(),
	})
	if b.rest != nil {
		b.rest.Register(mux)
	}
	b.http = mux
	return nil
}

// gatewayClasses lists the translation's gateway classes for /debug/gateways; nil without
// translation.
func (b *Bridge) gatewayClasses() func() []envoy.GatewayClassInfo {
	if b.translator == nil {
		return nil
	}
	return b.translator.GatewayClasses
}

// adminCheck guards the debug views and the status page when the HTTP port authenticates its
// clients (http.tls.client_ca_file): they show every resource and every client, so only an
// administrator may read them (authz.Policy.CheckAdmin). Without a client CA the port cannot
// tell who asks, and stays open, as on loopback.
func (b *Bridge) adminCheck() func(*http.Request) error {
	if b.cfg.HTTP.TLS.ClientCAFile == "" {
		return nil
	}
	return func(r *http.Request) error { return b.authz.CheckAdmin(r.TLS) }
}

// debugNotServed is why the debug views are not served, or "" when they are: on an HTTP
// address off loopback whose TLS names no client CA nobody can be told apart, and what they
// show (every resource, every client, profiles of the process) would be open to whoever
// reaches the port, unless http.debug_without_client_auth says so.
func (b *Bridge) debugNotServed() string {
	h := b.cfg.HTTP
	if h.TLS.ClientCAFile != "" || h.DebugWithoutClientAuth || IsLoopback(h.Address) {
		return ""
	}
	return "not served: the debug views, profiles and status page need administrators' client certificates on an HTTP port off loopback; set http.tls.client_ca_file (and an authz rule with admin: true), or http.debug_without_client_auth: true to serve them to anyone who reaches " + h.Address
}

// Store is the bridge's store.
func (b *Bridge) Store() *store.Store { return b.store }

// Engine is the source engine every consumer stream is served by.
func (b *Bridge) Engine() *source.Engine { return b.engine }

// Sink is the ResourceSink service.
func (b *Bridge) Sink() *sink.Server { return b.sink }

// Metrics are the bridge's metrics.
func (b *Bridge) Metrics() *metrics.Metrics { return b.metrics }

// Ready tracks /readyz.
func (b *Bridge) Ready() *admin.Readiness { return b.ready }

// Serve serves gRPC and HTTP on the listeners and runs every source until ctx ends, then stops
// gracefully: it stops accepting, ends streams with Unavailable, and returns nil. An error is a
// run-time failure (a source that cannot run, a listener that fails). It closes the listeners.
func (b *Bridge) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Both ports' connections count against limits.connections, and each peer address's
	// against limits.connections_per_peer.
	conns := limits.NewConns(b.cfg.Limits.Connections, b.cfg.Limits.ConnectionsPerPeer, limits.NewRefuser(b.metrics), b.log)
	grpcLis, httpLis = conns.Listen(grpcLis), conns.Listen(httpLis)
	grpcReady := b.ready.Wait("grpc")
	httpServer := &http.Server{Handler: b.http, ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpErrorLog(b.log),
		ReadTimeout: b.cfg.HTTP.ReadTimeout, IdleTimeout: b.cfg.HTTP.IdleTimeout}

	var wg sync.WaitGroup
	errs := make(chan error, 3+len(b.runners))
	wg.Go(func() { b.store.Run(ctx) })
	wg.Go(func() {
		if err := b.grpc.Serve(grpcLis); err != nil {
			errs <- fmt.Errorf("grpc server: %w", err)
		}
	})
	wg.Go(func() {
		if err := b.serveHTTP(httpServer, httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("http server: %w", err)
		}
	})
	b.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	grpcReady()
	b.startRunners(ctx, &wg, errs)
	b.starting() // every condition is registered
	b.log.Info("mcpbridge serving", "version", buildinfo.String(),
		"grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"grpc_tls", b.grpcTLS != nil, "http_tls", b.httpTLS != nil, "files", b.cfg.Sources.Files,
		"upstreams", len(b.cfg.Sources.Upstreams), "kubernetes", b.cfg.Sources.Kubernetes != nil,
		"zookeeper", len(b.cfg.Sources.Zookeeper), "downstreams", len(b.cfg.Downstreams))

	var runErr error
	select {
	case <-ctx.Done():
		b.log.Info("stopping")
	case runErr = <-errs:
		b.log.Error("stopping after a failure", "error", runErr)
	}
	cancel()
	b.stop()
	stopGRPC(b.grpc, b.cfg.GRPC.ShutdownGrace)
	shutdownCtx, done := context.WithTimeout(context.Background(), b.cfg.GRPC.ShutdownGrace)
	httpServer.Shutdown(shutdownCtx)
	done()
	wg.Wait()
	return runErr
}

// serveHTTP serves plaintext, or TLS with the listener's reloading config.
func (b *Bridge) serveHTTP(s *http.Server, lis net.Listener) error {
	if b.httpTLS == nil {
		return s.Serve(lis)
	}
	s.TLSConfig = b.httpTLS.TLSConfig()
	return s.ServeTLS(lis, "", "") // the certificate comes from TLSConfig
}

// httpErrorLog puts the HTTP server's own log lines in the bridge's log. A refused TLS
// handshake (no or a wrong client certificate, a plaintext client, a scanner) is the
// client's fault and, from scanners, noise: debug, as gRPC's are. The rest is a warning.
func httpErrorLog(log *slog.Logger) *stdlog.Logger {
	return stdlog.New(httpLogWriter{log.With("component", "http")}, "", 0)
}

type httpLogWriter struct{ log *slog.Logger }

func (w httpLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}

func (b *Bridge) startRunners(ctx context.Context, wg *sync.WaitGroup, errs chan<- error) {
	var sources sync.WaitGroup // every source's first full state stored (or its timeout passed)
	var translated func()
	if b.translator != nil {
		translated = b.ready.Wait(translationCondition)
	}
	for _, r := range b.runners {
		var done func()
		if r.ready != nil {
			done = b.ready.Wait(r.name)
		}
		wg.Go(func() {
			if err := r.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", r.name, err)
			}
		})
		if r.ready != nil {
			sources.Add(1)
			wg.Go(func() {
				defer sources.Done()
				waitReady(ctx, b.log, r.name, r.ready, b.cfg.Sources.StartupTimeout, done)
			})
		}
	}
	if translated != nil {
		wg.Go(func() { b.waitTranslated(ctx, &sources, translated) })
	}
}

// translationCondition is how /readyz names the wait for the translated Envoy resources.
const translationCondition = "translate: the Envoy resources of the sources' first state"

// waitTranslated marks the translation ready once every output derived from the sources'
// first state is written: the store revision R when the last source became ready is
// translated. Until then a client asking for clusters would get what the store does not
// mean yet (with 100,000 ServiceEntries, tens of seconds of it).
func (b *Bridge) waitTranslated(ctx context.Context, sources *sync.WaitGroup, done func()) {
	loaded := make(chan struct{})
	go func() { sources.Wait(); close(loaded) }()
	select {
	case <-loaded:
	case <-ctx.Done():
		return
	}
	rev := b.store.View().Revision()
	b.log.Info("sources loaded; waiting for their translation", "revision", rev)
	select {
	case <-b.translator.Synced(rev):
		done()
	case <-ctx.Done():
	}
}

// stop ends every stream with Unavailable; the gRPC server stops after.
func (b *Bridge) stop() {
	b.health.Shutdown()
	b.engine.Stop()
	b.linkerd.Stop()
	b.sink.Stop()
	if b.rest != nil {
		b.rest.Stop() // waiting polls answer now, not after the poll timeout
	}
}

// stopGRPC stops accepting and lets streams end for up to grace, then closes what is left.
// Streams still open are ended by the cancelled serving context with Unavailable.
func stopGRPC(s *grpc.Server, grace time.Duration) {
	stopped := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		s.Stop()
		<-stopped
	}
}

// waitReady marks a source ready once it delivered its first full state, or when the start-up
// timeout passes (logged, so an operator knows readiness did not mean loaded).
func waitReady(ctx context.Context, log *slog.Logger, name string, srcReady <-chan struct{}, timeout time.Duration, done func()) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-srcReady:
		done()
	case <-t.C:
		log.Warn("source has not delivered its first full state; ready anyway", "source", name, "startup_timeout", timeout)
		done()
	case <-ctx.Done():
	}
}

func sinkCollections(cfg *Config) []sink.Collection {
	var out []sink.Collection
	for _, name := range cfg.Collections {
		out = append(out, sink.Collection{Name: name, Incremental: cfg.Sink.Incremental})
	}
	if len(out) == 0 {
		for _, c := range sink.DefaultCollections() {
			out = append(out, sink.Collection{Name: c.Name, Incremental: cfg.Sink.Incremental})
		}
	}
	return out
}

// storeMeshConfig serves the configured MeshConfig (YAML or JSON), or an empty one.
func storeMeshConfig(path string, st *store.Store) error {
	mc := &meshv1alpha1.MeshConfig{}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return ConfigErrorf("xds.mesh_config_file: %v", err)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return ConfigErrorf("xds.mesh_config_file %s: %v", path, err)
		}
		if err := protojson.Unmarshal(js, mc); err != nil {
			return ConfigErrorf("xds.mesh_config_file %s: not a MeshConfig: %v", path, err)
		}
	}
	return xds.StoreMeshConfig(st, mc)
}

// watchScopes reports the translation's namespaces' views, when it runs.
func (b *Bridge) watchScopes() error {
	if b.translator == nil {
		return nil
	}
	if err := b.metrics.WatchScopes(b.translator.Scopes, b.translator.ScopesRefused); err != nil {
		return err
	}
	return b.metrics.WatchHeldViews([]string{"proxyless_hosts", "proxyless_all", "port_routes", "port_routes_all"}, func() map[string]float64 {
		h := b.translator.Held()
		return map[string]float64{"proxyless_hosts": float64(h.ProxylessHosts), "proxyless_all": boolGauge(h.ProxylessAll),
			"port_routes": float64(h.PortRoutes), "port_routes_all": boolGauge(h.PortRoutesAll)}
	})
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
