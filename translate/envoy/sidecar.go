package envoy

import (
	"fmt"
	"math"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	originaldstpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxypb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A sidecar's traffic-capture plumbing, as istiod builds it for every sidecar (listener_builder.go
// buildVirtualOutboundListener and buildOutboundCatchAllNetworkFilterChains, listener_inbound.go
// buildInboundPassthroughChains, listener.go's PassthroughFilterChain, cluster_builder.go
// buildBlackHoleCluster, buildDefaultPassthroughCluster and buildInboundPassthroughCluster), with
// iptables capture (outbound connections redirected to 15001, inbound ones to 15006) and istiod's
// MeshConfig defaults (proxyListenPort 15001, proxyInboundListenPort 15006, connectTimeout 10s,
// an IPv4 proxy):
//
//   - virtualOutbound, 0.0.0.0:15001 with use_original_dst: it hands each captured connection to
//     the listener of its original destination (VIP_PORT, else 0.0.0.0_PORT, which do not bind:
//     bind_to_port false); what none takes goes to the catch-all chain
//     "virtualOutbound-catchall-tcp", a tcp_proxy to PassthroughCluster under
//     outboundTrafficPolicy ALLOW_ANY, to BlackHoleCluster under REGISTRY_ONLY. A connection to
//     15001 itself ("virtualOutbound-blackhole") goes to BlackHoleCluster, never back to itself.
//   - The outbound listeners' default chain "PassthroughFilterChain", to the same cluster, on
//     every outbound listener without a chain that matches everything.
//   - virtualInbound, 0.0.0.0:15006 with the original_dst listener filter, and only istiod's
//     inbound passthrough chains, which are the same for every workload: 15006 itself to
//     BlackHoleCluster ("virtualInbound-blackhole"), plaintext HTTP to an HTTP connection
//     manager whose one route sends everything to InboundPassthroughCluster
//     ("virtualInbound-catchall-http"), and other plaintext and TLS connections to a tcp_proxy to
//     InboundPassthroughCluster ("virtualInbound"). istiod's chains per inbound port need the
//     proxy's own workload and the Services that select it, which a configuration every sidecar
//     shares cannot know; its mutual TLS chains (PeerAuthentication, istiod's default PERMISSIVE)
//     terminate Istio mTLS, which the bridge's clients do not originate (no auto mTLS): both are
//     left out (doc.go).
//   - Clusters PassthroughCluster (ORIGINAL_DST, the original destination), BlackHoleCluster
//     (STATIC without endpoints: every connection fails) and InboundPassthroughCluster (the
//     original destination from 127.0.0.6, which istio-iptables lets through to the
//     application).
//
// They are built once per Translator: they depend on its outbound traffic policy alone.

// Names istiod gives its plumbing (pilot/pkg/model and networking/util).
const (
	VirtualOutboundListenerName = "virtualOutbound"
	VirtualInboundListenerName  = "virtualInbound"
	PassthroughClusterName      = "PassthroughCluster"
	BlackHoleClusterName        = "BlackHoleCluster"
	InboundPassthroughCluster   = "InboundPassthroughCluster"

	passthroughFilterChainName               = "PassthroughFilterChain"
	virtualOutboundBlackholeChainName        = "virtualOutbound-blackhole"
	virtualOutboundCatchAllTCPName           = "virtualOutbound-catchall-tcp"
	virtualInboundBlackholeChainName         = "virtualInbound-blackhole"
	virtualInboundCatchAllHTTPName           = "virtualInbound-catchall-http"
	originalDstFilterName                    = "envoy.filters.listener.original_dst"
	tlsTransport                             = "tls"
	proxyListenPort                   uint32 = 15001
	proxyInboundListenPort            uint32 = 15006
	// inboundPassthroughBindIPv4 is the source address of InboundPassthroughCluster's
	// connections, which istio-iptables does not capture again.
	inboundPassthroughBindIPv4 = "127.0.0.6"
)

// OutboundTrafficPolicy is MeshConfig's outboundTrafficPolicy.mode: where a sidecar sends a
// connection to a destination the mesh does not know.
type OutboundTrafficPolicy uint8

const (
	// AllowAny, istiod's default: to its original destination (PassthroughCluster).
	AllowAny OutboundTrafficPolicy = iota
	// RegistryOnly: nowhere (BlackHoleCluster).
	RegistryOnly
)

// ParseOutboundTrafficPolicy reads a mode as MeshConfig spells it: ALLOW_ANY (or empty, the
// default) or REGISTRY_ONLY.
func ParseOutboundTrafficPolicy(s string) (OutboundTrafficPolicy, error) {
	switch s {
	case "", "ALLOW_ANY":
		return AllowAny, nil
	case "REGISTRY_ONLY":
		return RegistryOnly, nil
	}
	return AllowAny, fmt.Errorf("%q is not ALLOW_ANY or REGISTRY_ONLY", s)
}

func (p OutboundTrafficPolicy) String() string {
	if p == RegistryOnly {
		return "REGISTRY_ONLY"
	}
	return "ALLOW_ANY"
}

// egressCluster is where the policy sends unknown destinations.
func (p OutboundTrafficPolicy) egressCluster() string {
	if p == RegistryOnly {
		return BlackHoleClusterName
	}
	return PassthroughClusterName
}

// tcpProxyTo is istiod's tcp_proxy filter of its plumbing: to a cluster, under the cluster's
// name as stat prefix.
func tcpProxyTo(cluster string) (*listenerpb.Filter, error) {
	typed, err := pack(&tcpproxypb.TcpProxy{StatPrefix: cluster, ClusterSpecifier: &tcpproxypb.TcpProxy_Cluster{Cluster: cluster}})
	if err != nil {
		return nil, err
	}
	return &listenerpb.Filter{Name: tcpProxyFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: typed}}, nil
}

// passthroughChains are the default chains of outbound listeners, per policy: istiod's
// PassthroughFilterChain (an empty match, the egress cluster's tcp_proxy). Built once; shared
// by every listener and only read.
var passthroughChains = func() (c struct {
	byPolicy [2]*listenerpb.FilterChain
	err      error
}) {
	for _, p := range []OutboundTrafficPolicy{AllowAny, RegistryOnly} {
		f, err := tcpProxyTo(p.egressCluster())
		if err != nil {
			c.err = err
			return c
		}
		c.byPolicy[p] = &listenerpb.FilterChain{
			Name:             passthroughFilterChainName,
			FilterChainMatch: &listenerpb.FilterChainMatch{},
			Filters:          []*listenerpb.Filter{f},
		}
	}
	return c
}()

// passthroughChain is an outbound listener's default chain under the Translator's policy.
func (t *Translator) passthroughChain() (*listenerpb.FilterChain, error) {
	return passthroughChains.byPolicy[t.outboundPolicy], passthroughChains.err
}

// buildSidecarPlumbing builds the unit of the plumbing: its clusters and listeners.
func (t *Translator) buildSidecarPlumbing() *unitState {
	b := newBuild(t, "Mesh", "sidecar plumbing")
	for _, c := range plumbingClusters() {
		b.put(ClusterType, c.GetName(), c)
	}
	if l, err := virtualOutboundListener(t.outboundPolicy); err != nil {
		b.invalid("Listener", VirtualOutboundListenerName, err)
	} else {
		b.put(ListenerType, l.GetName(), l)
	}
	if l, err := virtualInboundListener(); err != nil {
		b.invalid("Listener", VirtualInboundListenerName, err)
	} else {
		b.put(ListenerType, l.GetName(), l)
	}
	return b.done()
}

// passthroughProtocolOptions are istiod's upstream HTTP options of its passthrough clusters:
// the downstream protocol, idle connections closed after 5 minutes.
func passthroughProtocolOptions() (*anypb.Any, error) {
	return pack(&upstreamhttp.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corepb.HttpProtocolOptions{IdleTimeout: durationpb.New(passthroughIdleTimeout)},
		UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &upstreamhttp.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions: &corepb.Http1ProtocolOptions{}, Http2ProtocolOptions: &corepb.Http2ProtocolOptions{},
			},
		},
	})
}

const passthroughIdleTimeout = 5 * time.Minute

// plumbingClusters are BlackHoleCluster, PassthroughCluster and InboundPassthroughCluster as
// istiod builds them: the passthrough clusters with MeshConfig's default traffic policy's
// connection pool, none, so unlimited circuit breakers (applyConnectionPool); istiod's
// istio.metadata_exchange filter on PassthroughCluster is telemetry, left out.
// InboundPassthroughCluster is PassthroughCluster renamed (its alt_stat_name stays
// "PassthroughCluster;", as istiod leaves it) and bound to 127.0.0.6.
func plumbingClusters() []*clusterpb.Cluster {
	blackhole := &clusterpb.Cluster{
		Name:                 BlackHoleClusterName,
		AltStatName:          BlackHoleClusterName + statPrefixDelimiter,
		ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(defaultConnectTimeout),
	}
	passthrough := func(name string) *clusterpb.Cluster {
		c := &clusterpb.Cluster{
			Name:                 name,
			AltStatName:          PassthroughClusterName + statPrefixDelimiter,
			ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_ORIGINAL_DST},
			ConnectTimeout:       durationpb.New(defaultConnectTimeout),
			LbPolicy:             clusterpb.Cluster_CLUSTER_PROVIDED,
			CircuitBreakers: &clusterpb.CircuitBreakers{Thresholds: []*clusterpb.CircuitBreakers_Thresholds{{
				MaxConnections:     wrapperspb.UInt32(math.MaxUint32),
				MaxPendingRequests: wrapperspb.UInt32(math.MaxUint32),
				MaxRequests:        wrapperspb.UInt32(math.MaxUint32),
				MaxRetries:         wrapperspb.UInt32(math.MaxUint32),
			}}},
		}
		if opts, err := passthroughProtocolOptions(); err == nil {
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: opts}
		}
		return c
	}
	inbound := passthrough(InboundPassthroughCluster)
	inbound.UpstreamBindConfig = &corepb.BindConfig{SourceAddress: &corepb.SocketAddress{
		Address: inboundPassthroughBindIPv4, PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: 0},
	}}
	return []*clusterpb.Cluster{blackhole, passthrough(PassthroughClusterName), inbound}
}

// virtualOutboundListener is istiod's virtualOutbound: 15001, handing connections to the
// listener of their original destination, the rest to the egress cluster of the policy.
func virtualOutboundListener(policy OutboundTrafficPolicy) (*listenerpb.Listener, error) {
	blackhole, err := tcpProxyTo(BlackHoleClusterName)
	if err != nil {
		return nil, err
	}
	egress, err := tcpProxyTo(policy.egressCluster())
	if err != nil {
		return nil, err
	}
	return &listenerpb.Listener{
		Name:             VirtualOutboundListenerName,
		Address:          socketAddress(wildcardBind, proxyListenPort),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: corepb.TrafficDirection_OUTBOUND,
		FilterChains: []*listenerpb.FilterChain{
			{
				Name:             virtualOutboundBlackholeChainName,
				FilterChainMatch: &listenerpb.FilterChainMatch{DestinationPort: wrapperspb.UInt32(proxyListenPort)},
				Filters:          []*listenerpb.Filter{blackhole},
			},
			{Name: virtualOutboundCatchAllTCPName, Filters: []*listenerpb.Filter{egress}},
		},
		MaxConnectionsToAcceptPerSocketEvent: wrapperspb.UInt32(1), // PILOT_MAX_CONNECTIONS_TO_ACCEPT_PER_SOCKET_EVENT
	}, nil
}

// virtualInboundListener is istiod's virtualInbound with its workload-independent passthrough
// chains, in istiod's order (the blackhole, then its PERMISSIVE options less the mTLS ones):
// the original destination restored by the original_dst listener filter, TLS and HTTP
// detected by the inspectors (not on connections to 15006 itself).
func virtualInboundListener() (*listenerpb.Listener, error) {
	if tcpListenerFilters.err != nil {
		return nil, tcpListenerFilters.err
	}
	blackhole, err := tcpProxyTo(BlackHoleClusterName)
	if err != nil {
		return nil, err
	}
	passthrough, err := tcpProxyTo(InboundPassthroughCluster)
	if err != nil {
		return nil, err
	}
	hcm, err := inboundPassthroughConnectionManager()
	if err != nil {
		return nil, err
	}
	originalDst, err := pack(&originaldstpb.OriginalDst{})
	if err != nil {
		return nil, err
	}
	notOnListenPort := &listenerpb.ListenerFilterChainMatchPredicate{
		Rule: &listenerpb.ListenerFilterChainMatchPredicate_DestinationPortRange{
			DestinationPortRange: &typepb.Int32Range{Start: int32(proxyInboundListenPort), End: int32(proxyInboundListenPort) + 1},
		},
	}
	return &listenerpb.Listener{
		Name:    VirtualInboundListenerName,
		Address: socketAddress(wildcardBind, proxyInboundListenPort),
		FilterChains: []*listenerpb.FilterChain{
			{
				Name:             virtualInboundBlackholeChainName,
				FilterChainMatch: &listenerpb.FilterChainMatch{DestinationPort: wrapperspb.UInt32(proxyInboundListenPort)},
				Filters:          []*listenerpb.Filter{blackhole},
			},
			{
				Name:             virtualInboundCatchAllHTTPName,
				FilterChainMatch: &listenerpb.FilterChainMatch{TransportProtocol: rawBufferTransport, ApplicationProtocols: plaintextHTTPALPNs},
				Filters:          []*listenerpb.Filter{{Name: hcmFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: hcm}}},
			},
			{
				Name:             VirtualInboundListenerName,
				FilterChainMatch: &listenerpb.FilterChainMatch{TransportProtocol: rawBufferTransport},
				Filters:          []*listenerpb.Filter{passthrough},
			},
			{
				Name:             VirtualInboundListenerName,
				FilterChainMatch: &listenerpb.FilterChainMatch{TransportProtocol: tlsTransport},
				Filters:          []*listenerpb.Filter{passthrough},
			},
		},
		ListenerFilters: []*listenerpb.ListenerFilter{
			{Name: originalDstFilterName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{TypedConfig: originalDst}},
			{
				Name: tlsInspectorName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{TypedConfig: tcpListenerFilters.tlsInspector},
				FilterDisabled: notOnListenPort,
			},
			{
				Name: httpInspectorName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{TypedConfig: tcpListenerFilters.httpInspector},
				FilterDisabled: notOnListenPort,
			},
		},
		ListenerFiltersTimeout:               durationpb.New(0), // MeshConfig protocolDetectionTimeout: 0s
		ContinueOnListenerFiltersTimeout:     true,
		TrafficDirection:                     corepb.TrafficDirection_INBOUND,
		MaxConnectionsToAcceptPerSocketEvent: wrapperspb.UInt32(1),
	}, nil
}

// inboundPassthroughConnectionManager is the connection manager of istiod's inbound
// passthrough HTTP chain (buildSidecarInboundHTTPOpts, with port 0 and the passthrough
// cluster): an inline route configuration "InboundPassthroughCluster" whose virtual host
// "inbound|http|0" sends every request there (BuildDefaultHTTPInboundRoute: no timeout, two
// retries on reset-before-request, the decorator ":0/*"); the client certificate details
// appended and forwarded (MeshConfig's default forwardClientCertDetails), server name
// "istio-envoy", and istiod's settings for every Envoy connection manager (connectionManager).
// The fault, CORS and router filters, as istiod lists them; its telemetry filters are left out.
func inboundPassthroughConnectionManager() (*anypb.Any, error) {
	filters, err := httpFilters(true)
	if err != nil {
		return nil, err
	}
	return pack(&hcmpb.HttpConnectionManager{
		StatPrefix: InboundPassthroughCluster + statPrefixDelimiter,
		RouteSpecifier: &hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &routepb.RouteConfiguration{
			Name: InboundPassthroughCluster,
			VirtualHosts: []*routepb.VirtualHost{{
				Name:    "inbound|http|0",
				Domains: []string{"*"},
				Routes: []*routepb.Route{{
					Name:  "default",
					Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routepb.Route_Route{Route: &routepb.RouteAction{
						ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: InboundPassthroughCluster},
						Timeout:          durationpb.New(0),
						RetryPolicy:      &routepb.RetryPolicy{RetryOn: "reset-before-request", NumRetries: wrapperspb.UInt32(2)},
						MaxStreamDuration: &routepb.RouteAction_MaxStreamDuration{
							MaxStreamDuration: durationpb.New(0), GrpcTimeoutHeaderMax: durationpb.New(0),
						},
					}},
					Decorator: &routepb.Decorator{Operation: ":0/*"},
				}},
			}},
			ValidateClusters: wrapperspb.Bool(false),
		}},
		HttpFilters:                  filters,
		ServerName:                   "istio-envoy",
		StreamIdleTimeout:            durationpb.New(0),
		UseRemoteAddress:             wrapperspb.Bool(false),
		ForwardClientCertDetails:     hcmpb.HttpConnectionManager_APPEND_FORWARD,
		SetCurrentClientCertDetails:  &hcmpb.HttpConnectionManager_SetCurrentClientCertDetails{Subject: wrapperspb.Bool(true), Dns: true, Uri: true},
		Proxy_100Continue:            true,
		UpgradeConfigs:               websocketUpgrade,
		NormalizePath:                wrapperspb.Bool(true),
		PathWithEscapedSlashesAction: hcmpb.HttpConnectionManager_KEEP_UNCHANGED,
	})
}
