package envoy

import (
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// httpFilters is the HTTP filter chain: the fault filter when a route injects faults (its
// per-route configuration does the work; the filter's own is empty), for Envoy proxies the
// CORS filter (CORSFilter), and the router, which must be last (Envoy and grpc-go both reject
// a chain that does not end with it).
func httpFilters(usesFault, envoy bool) ([]*hcmpb.HttpFilter, error) {
	if filterConfigs.err != nil {
		return nil, filterConfigs.err
	}
	router := &hcmpb.HttpFilter{Name: routerFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: filterConfigs.router}}
	var out []*hcmpb.HttpFilter
	if usesFault {
		out = append(out, &hcmpb.HttpFilter{Name: faultFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: filterConfigs.fault}})
	}
	if envoy {
		cors, err := CORSFilter()
		if err != nil {
			return nil, err
		}
		out = append(out, cors)
	}
	return append(out, router), nil
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
		c.tlsInspector, c.err = pack(&tlsinspectorpb.TlsInspector{})
	}
	return c
}()

// connectionManager is an HttpConnectionManager that takes its routes by RDS over ADS, for an
// Envoy proxy or (envoy false) a proxyless gRPC client.
func connectionManager(statPrefix, routeName string, usesFault, envoy bool) (*anypb.Any, error) {
	filters, err := httpFilters(usesFault, envoy)
	if err != nil {
		return nil, err
	}
	return pack(&hcmpb.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmpb.HttpConnectionManager_Rds{Rds: &hcmpb.Rds{
			ConfigSource: adsSource(), RouteConfigName: routeName,
		}},
		HttpFilters: filters,
	})
}

// apiListener is the listener a proxyless gRPC client resolves xds:///HOST:PORT with: no
// address, only an HttpConnectionManager in api_listener whose RDS names the host's route
// configuration.
func apiListener(host string, port uint32, usesFault bool) (*listenerpb.Listener, error) {
	name := APIListenerName(host, port)
	hcm, err := connectionManager(name, HostRouteName(host, port), usesFault, false)
	if err != nil {
		return nil, err
	}
	return &listenerpb.Listener{Name: name, ApiListener: &listenerpb.ApiListener{ApiListener: hcm}}, nil
}

// outboundListener is an Envoy sidecar's listener for one port: every HTTP host on that port,
// told apart by the Host header in the route configuration named by the port.
func outboundListener(port uint32, usesFault bool) (*listenerpb.Listener, error) {
	name := OutboundListenerName(port)
	return httpListener(name, "outbound_"+name, OutboundRouteName(port), port, corepb.TrafficDirection_OUTBOUND, usesFault)
}

func httpListener(name, statPrefix, routeName string, port uint32, dir corepb.TrafficDirection, usesFault bool) (*listenerpb.Listener, error) {
	hcm, err := connectionManager(statPrefix, routeName, usesFault, true)
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
		TrafficDirection: corepb.TrafficDirection_INBOUND,
		ListenerFilters: []*listenerpb.ListenerFilter{{
			Name: tlsInspectorName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{TypedConfig: filterConfigs.tlsInspector},
		}},
		FilterChains: chains,
	}, nil
}

// httpsFilterChain terminates an HTTPS server's TLS and routes by its own route
// configuration: matched by its hosts as SNI names (any name, when one is "*").
func httpsFilterChain(ms mergedServer, usesFault bool) (*listenerpb.FilterChain, error) {
	certs, err := serverCertificates(ms.s.GetTls())
	if err != nil {
		return nil, err
	}
	tlsContext, err := pack(downstreamTLS(ms.s.GetTls(), certs, []string{"h2", "http/1.1"}))
	if err != nil {
		return nil, err
	}
	hcm, err := connectionManager(ms.route, ms.route, usesFault, true)
	if err != nil {
		return nil, err
	}
	return &listenerpb.FilterChain{
		Name:             ms.route,
		FilterChainMatch: &listenerpb.FilterChainMatch{ServerNames: sniHosts(ms.s)},
		TransportSocket: &corepb.TransportSocket{
			Name: tlsTransportSocketName, ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: tlsContext},
		},
		Filters: []*listenerpb.Filter{{Name: hcmFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: hcm}}},
	}, nil
}
