package envoy

import (
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// httpFilters is the HTTP filter chain as istiod builds it, whether or not a route uses the
// filters (their per-route configurations do the work; their own are empty): for Envoy proxies
// (buildHTTPConnectionManager) the fault filter, the CORS filter (CORSFilter) and the router;
// for proxyless gRPC clients (grpcgen's supportedFilters) the fault filter and the router. The
// router must be last (Envoy and grpc-go both reject a chain that does not end with it). The
// chain is the same for every connection manager of a class: built once (envoyFilters,
// proxylessFilters), shared and only read.
//
// Left out, as istiod's are telemetry, policy or proxy specific (connectionManager): the
// metadata exchange, stats, gRPC stats, ALPN, authn/authz and gRPC-Web filters.
func httpFilters(envoy bool) ([]*hcmpb.HttpFilter, error) {
	if envoy {
		return envoyFilters.filters, envoyFilters.err
	}
	return proxylessFilters.filters, proxylessFilters.err
}

type filterChain struct {
	filters []*hcmpb.HttpFilter
	err     error
}

var (
	envoyFilters = func() filterChain {
		if filterConfigs.err != nil {
			return filterChain{err: filterConfigs.err}
		}
		cors, err := CORSFilter()
		if err != nil {
			return filterChain{err: err}
		}
		return filterChain{filters: []*hcmpb.HttpFilter{faultFilter(), cors, routerFilter()}}
	}()
	proxylessFilters = func() filterChain {
		if filterConfigs.err != nil {
			return filterChain{err: filterConfigs.err}
		}
		return filterChain{filters: []*hcmpb.HttpFilter{faultFilter(), routerFilter()}}
	}()
)

func faultFilter() *hcmpb.HttpFilter {
	return &hcmpb.HttpFilter{Name: faultFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: filterConfigs.fault}}
}

func routerFilter() *hcmpb.HttpFilter {
	return &hcmpb.HttpFilter{Name: routerFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: filterConfigs.router}}
}

// filterConfigs are the filters' typed configurations, the same for every listener: encoded
// once, and only ever read (concurrent host builds marshal them).
var filterConfigs = func() (c struct {
	router, fault, tlsInspector *anypb.Any
	err                         error
}) {
	if c.router, c.err = pack(&routerpb.Router{}); c.err == nil {
		c.fault, c.err = pack(&faultpb.HTTPFault{})
	}
	if c.err == nil {
		// istiod's TLS inspector (xdsfilters.TLSInspector): 512 bytes read for the client hello.
		c.tlsInspector, c.err = pack(&tlsinspectorpb.TlsInspector{InitialReadBufferSize: wrapperspb.UInt32(512)})
	}
	return c
}()

// hcmClass is which of istiod's connection managers a listener gets: a sidecar's outbound
// one, a gateway's, or a proxyless gRPC client's API listener.
type hcmClass uint8

const (
	hcmSidecar hcmClass = iota
	hcmGateway
	hcmProxyless
)

// rdsSource is the config source of a connection manager's route configuration, as istiod
// writes it for Envoy (ADS, v3, no initial fetch timeout). Shared, only read.
var rdsSource = &corepb.ConfigSource{
	ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
	InitialFetchTimeout:   durationpb.New(0),
	ResourceApiVersion:    corepb.ApiVersion_V3,
}

// connectionManager is an HttpConnectionManager that takes its routes by RDS over ADS, with
// the settings istiod gives its class (listener_builder.go buildHTTPConnectionManager, and
// buildSidecarOutboundHTTPListenerOpts or gateway.go buildGatewayConnectionManager), under
// MeshConfig and ProxyConfig defaults:
//
//   - Envoy (sidecar and gateway): WebSocket upgrades allowed, no stream idle timeout (0s),
//     paths normalized (pathNormalization DEFAULT: normalize_path, escaped slashes kept as
//     they are, slashes not merged), 100-continue proxied (ENABLE_100_CONTINUE_HEADERS), the
//     Server header overwritten; RDS without an initial fetch timeout.
//   - Sidecar: use_remote_address false (PILOT_SIDECAR_USE_REMOTE_ADDRESS), Envoy's own server
//     name ("envoy", istiod sets none).
//   - Gateway: use_remote_address true, no trusted XFF hops, client certificate details
//     SANITIZE_SET with subject, certificate, DNS and URI SANs set (XFCC), server name
//     "istio-envoy", HTTP/1 options present.
//   - Proxyless (grpcgen's API listener): the filters and RDS over ADS only, and a stat
//     prefix (Envoy's validation requires one; grpc-go ignores it).
//
// Left out: access logs, tracing and the request ID extension, and the filters istiod adds for
// telemetry (istio.metadata_exchange, istio.stats, grpc_stats), authentication and
// authorization (RBAC, JWT) and istio.alpn and grpc_web: a standalone bridge has no
// telemetry, policies or Istio proxy build to pair them with.
//
// The fault filter is on every connection manager, as istiod has it, whether or not a route
// injects faults.
func connectionManager(statPrefix, routeName string, class hcmClass) (*anypb.Any, error) {
	filters, err := httpFilters(class != hcmProxyless)
	if err != nil {
		return nil, err
	}
	if class == hcmProxyless {
		return pack(&hcmpb.HttpConnectionManager{
			StatPrefix: statPrefix,
			RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
				ConfigSource: grpcADSSource, RouteConfigName: routeName,
			}},
			HttpFilters: filters,
		})
	}
	m := &hcmpb.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			ConfigSource: rdsSource, RouteConfigName: routeName,
		}},
		HttpFilters:                  filters,
		PathWithEscapedSlashesAction: hcmpb.HttpConnectionManager_KEEP_UNCHANGED,
		NormalizePath:                wrapperspb.Bool(true),
		UseRemoteAddress:             wrapperspb.Bool(class == hcmGateway),
		UpgradeConfigs:               websocketUpgrade,
		StreamIdleTimeout:            durationpb.New(0),
		ServerHeaderTransformation:   hcmpb.HttpConnectionManager_OVERWRITE,
		Proxy_100Continue:            true,
	}
	if class == hcmGateway {
		m.ForwardClientCertDetails = hcmpb.HttpConnectionManager_SANITIZE_SET
		m.SetCurrentClientCertDetails = &hcmpb.HttpConnectionManager_SetCurrentClientCertDetails{
			Subject: wrapperspb.Bool(true), Cert: true, Dns: true, Uri: true,
		}
		m.ServerName = "istio-envoy"
		m.HttpProtocolOptions = &corepb.Http1ProtocolOptions{}
	}
	return pack(m)
}

// websocketUpgrade is istiod's upgrade_configs: WebSocket allowed. Shared, only read.
var websocketUpgrade = []*hcmpb.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}

// apiListener is the listener a proxyless gRPC client resolves xds:///HOST:PORT with, as
// grpcgen builds it (buildOutboundListeners): the service's address and the port (grpc-go
// does not use it), 0.0.0.0 for a host without one (istiod's DefaultAddress; a proxyless
// client's auto-allocated address is left out, as the bridge allocates none), and an
// HttpConnectionManager in api_listener whose RDS names the host's route configuration.
func apiListener(host, vip string, port uint32) (*listenerpb.Listener, error) {
	name := APIListenerName(host, port)
	hcm, err := connectionManager(name, HostRouteName(host, port), hcmProxyless)
	if err != nil {
		return nil, err
	}
	if vip == "" {
		vip = "0.0.0.0"
	}
	return &listenerpb.Listener{Name: name, Address: socketAddress(vip, port), ApiListener: &listenerpb.ApiListener{ApiListener: hcm}}, nil
}

// outboundListener is an Envoy sidecar's listener for one port: every HTTP host on that port,
// told apart by the Host header in the route configuration named by the port.
func outboundListener(port uint32) (*listenerpb.Listener, error) {
	name := OutboundListenerName(port)
	return httpListener(name, "outbound_"+name, OutboundRouteName(port), port, corepb.TrafficDirection_OUTBOUND, hcmSidecar)
}

func httpListener(name, statPrefix, routeName string, port uint32, dir corepb.TrafficDirection, class hcmClass) (*listenerpb.Listener, error) {
	hcm, err := connectionManager(statPrefix, routeName, class)
	if err != nil {
		return nil, err
	}
	return &listenerpb.Listener{
		Name:             name,
		Address:          socketAddress("0.0.0.0", port),
		TrafficDirection: dir,
		FilterChains: []*listenerpb.FilterChain{{
			Filters: []*listenerpb.Filter{{Name: hcmFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: hcm}}},
		}},
	}, nil
}

// tlsListener is a gateway listener whose filter chains are chosen by SNI: the TLS inspector
// reads the client hello's server name before a chain is picked.
func tlsListener(name string, port uint32, chains []*listenerpb.FilterChain) (*listenerpb.Listener, error) {
	if filterConfigs.err != nil {
		return nil, filterConfigs.err
	}
	return &listenerpb.Listener{
		Name:             name,
		Address:          socketAddress("0.0.0.0", port),
		TrafficDirection: corepb.TrafficDirection_OUTBOUND, // istiod's, for gateways too
		ListenerFilters: []*listenerpb.ListenerFilter{{
			Name: tlsInspectorName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{TypedConfig: filterConfigs.tlsInspector},
		}},
		FilterChains: chains,
	}, nil
}

// httpsFilterChain terminates an HTTPS server's TLS and routes by its own route
// configuration: matched by its hosts as SNI names (any name, when one is "*").
func httpsFilterChain(ms mergedServer) (*listenerpb.FilterChain, error) {
	tlsContext, err := pack(gatewayTLSContext(ms.s.GetTls()))
	if err != nil {
		return nil, err
	}
	hcm, err := connectionManager(ms.route, ms.route, hcmGateway)
	if err != nil {
		return nil, err
	}
	return &listenerpb.FilterChain{
		FilterChainMatch: &listenerpb.FilterChainMatch{ServerNames: sniHosts(ms.s)},
		TransportSocket: &corepb.TransportSocket{
			Name: tlsTransportSocketName, ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: tlsContext},
		},
		Filters: []*listenerpb.Filter{{Name: hcmFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: hcm}}},
	}, nil
}
