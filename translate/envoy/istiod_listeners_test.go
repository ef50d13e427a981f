package envoy

import (
	"slices"
	"testing"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	corspb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// These tests hold listeners and connection managers to what istiod builds
// (listener_builder.go buildHTTPConnectionManager, gateway.go and listener.go
// buildGatewayListener, grpcgen/lds.go buildOutboundListeners), field by field.

// listenerFiltersYAML: an HTTP host with an address, one without, and a gateway serving one of
// them over HTTP and HTTPS; no route injects a fault or sets CORS.
const listenerFiltersYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: grpc}
spec:
  hosts: [echo.grpc.svc.cluster.local]
  addresses: [10.10.4.1]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.1.12.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: noaddr, namespace: grpc}
spec:
  hosts: [noaddr.grpc.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.1.12.2}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: grpc}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: [echo.example.com]
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [echo.example.com]
    tls: {mode: SIMPLE, credentialName: echo-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: grpc}
spec:
  hosts: [echo.example.com]
  gateways: [gw]
  http:
  - route: [{destination: {host: echo.grpc.svc.cluster.local}}]
`

// listenerHCM is a listener's connection manager: its API listener's, or its first filter chain's
// last filter.
func listenerHCM(t *testing.T, l *listenerpb.Listener, chain int) *hcmpb.HttpConnectionManager {
	t.Helper()
	a := l.GetApiListener().GetApiListener()
	if a == nil {
		fs := l.GetFilterChains()[chain].GetFilters()
		a = fs[len(fs)-1].GetTypedConfig()
	}
	m := &hcmpb.HttpConnectionManager{}
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatalf("%s: %v", l.GetName(), err)
	}
	return m
}

// Every Envoy connection manager (a sidecar's, a gateway's plaintext and HTTPS ones) has
// istiod's fault, CORS and router filters, with empty configurations, whether or not a route
// uses them; a proxyless client's API listener has grpcgen's fault and router.
func TestConnectionManagersHaveIstiodsHTTPFilters(t *testing.T) {
	got := buildClasses(t, listenerFiltersYAML, ingressClass)
	fault, cors, router := mustPack(t, &faultpb.HTTPFault{}), mustPack(t, &corspb.Cors{}), mustPack(t, &routerpb.Router{})
	envoy := []*hcmpb.HttpFilter{
		{Name: faultFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: fault}},
		{Name: corsFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: cors}},
		{Name: routerFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: router}},
	}
	proxyless := []*hcmpb.HttpFilter{envoy[0], envoy[2]}
	prefix := GatewayClassPrefix(ingressClass.ID())
	cases := []struct {
		listener string
		want     []*hcmpb.HttpFilter
	}{
		{OutboundListenerName(7070), envoy},
		{prefix + "0.0.0.0_80", envoy},
		{prefix + "0.0.0.0_443", envoy},
		{APIListenerName("echo.grpc.svc.cluster.local", 7070), proxyless},
		{APIListenerName("noaddr.grpc.svc.cluster.local", 7070), proxyless},
	}
	for _, c := range cases {
		l, ok := got.listeners[c.listener]
		if !ok {
			t.Errorf("no listener %s; have %v", c.listener, sortedKeys(got.listeners))
			continue
		}
		if err := l.ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.listener, err)
		}
		m := listenerHCM(t, l, 0)
		if err := m.ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.listener, err)
		}
		if !slices.EqualFunc(m.GetHttpFilters(), c.want, func(a, b *hcmpb.HttpFilter) bool { return proto.Equal(a, b) }) {
			t.Errorf("%s: http filters %v, want %v", c.listener, m.GetHttpFilters(), c.want)
		}
	}
}

// A proxyless client's API listener has the service's address and port, as grpcgen gives it
// (Service.GetAddressForProxy): the ServiceEntry's first address, 0.0.0.0 without one.
func TestAPIListenerHasTheServiceAddress(t *testing.T) {
	got := buildClasses(t, listenerFiltersYAML)
	for host, addr := range map[string]string{"echo.grpc.svc.cluster.local": "10.10.4.1", "noaddr.grpc.svc.cluster.local": "0.0.0.0"} {
		name := APIListenerName(host, 7070)
		l, ok := got.listeners[name]
		if !ok {
			t.Errorf("no listener %s", name)
			continue
		}
		if err := l.ValidateAll(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		want := &listenerpb.Listener{Name: name, Address: socketAddress(addr, 7070), ApiListener: l.GetApiListener()}
		if !proto.Equal(l, want) {
			t.Errorf("%s:\n%v\nwant\n%v", name, l, want)
		}
		if rds := listenerHCM(t, l, 0).GetRds(); rds.GetRouteConfigName() != HostRouteName(host, 7070) || rds.GetConfigSource().GetAds() == nil {
			t.Errorf("%s: rds %v", name, rds)
		}
	}
}

func mustPack(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
