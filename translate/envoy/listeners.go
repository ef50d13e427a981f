package envoy

import (
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// httpFilters is the HTTP filter chain: the fault filter when a route injects faults (its
// per-route configuration does the work; the filter's own is empty), and the router, which
// must be last (Envoy and grpc-go both reject a chain that does not end with it).
func httpFilters(usesFault bool) ([]*hcmpb.HttpFilter, error) {
	if filterConfigs.err != nil {
		return nil, filterConfigs.err
	}
	router := &hcmpb.HttpFilter{Name: routerFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: filterConfigs.router}}
	if !usesFault {
		return []*hcmpb.HttpFilter{router}, nil
	}
	fault := &hcmpb.HttpFilter{Name: faultFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: filterConfigs.fault}}
	return []*hcmpb.HttpFilter{fault, router}, nil
}

// filterConfigs are the filters' typed configurations, the same for every listener: encoded
// once, and only ever read (concurrent host builds marshal them).
var filterConfigs = func() (c struct {
	router, fault *anypb.Any
	err           error
}) {
	if c.router, c.err = pack(&routerpb.Router{}); c.err == nil {
		c.fault, c.err = pack(&faultpb.HTTPFault{})
	}
	return c
}()

// connectionManager is an HttpConnectionManager that takes its routes by RDS over ADS.
func connectionManager(statPrefix, routeName string, usesFault bool) (*anypb.Any, error) {
	filters, err := httpFilters(usesFault)
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
	hcm, err := connectionManager(name, HostRouteName(host, port), usesFault)
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

// gatewayListener is the listener of one gateway's servers on one port.
func gatewayListener(gateway string, port uint32, usesFault bool) (*listenerpb.Listener, error) {
	name := GatewayListenerName(gateway, port)
	return httpListener(name, name, GatewayRouteName(gateway, port), port, corepb.TrafficDirection_INBOUND, usesFault)
}

func httpListener(name, statPrefix, routeName string, port uint32, dir corepb.TrafficDirection, usesFault bool) (*listenerpb.Listener, error) {
	hcm, err := connectionManager(statPrefix, routeName, usesFault)
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
