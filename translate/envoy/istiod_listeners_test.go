package envoy

import (
	"slices"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	corspb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
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

// A gateway listener is istiod's buildGatewayListener: OUTBOUND, one connection accepted per
// socket event, every chain with a 15s transport socket connect timeout and no name, the TLS
// inspector reading 512 bytes where chains are chosen by SNI.
func TestGatewayListenersAreIstiods(t *testing.T) {
	got := buildClasses(t, listenerFiltersYAML, ingressClass)
	prefix := GatewayClassPrefix(ingressClass.ID())
	for _, c := range []struct {
		name      string
		inspector bool
	}{{prefix + "0.0.0.0_80", false}, {prefix + "0.0.0.0_443", true}} {
		l := got.listeners[c.name]
		if l == nil {
			t.Fatalf("no listener %s", c.name)
		}
		if err := l.ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if l.GetTrafficDirection() != corepb.TrafficDirection_OUTBOUND {
			t.Errorf("%s: traffic_direction %v, want OUTBOUND", c.name, l.GetTrafficDirection())
		}
		if n := l.GetMaxConnectionsToAcceptPerSocketEvent(); n == nil || n.GetValue() != 1 {
			t.Errorf("%s: max_connections_to_accept_per_socket_event %v, want 1", c.name, n)
		}
		if l.GetListenerFiltersTimeout() != nil || l.GetBindToPort() != nil || l.GetDefaultFilterChain() != nil {
			t.Errorf("%s: %v; istiod sets no listener filter timeout, bind_to_port or default chain on gateways", c.name, l)
		}
		if !proto.Equal(l.GetAddress(), socketAddress("0.0.0.0", l.GetAddress().GetSocketAddress().GetPortValue())) {
			t.Errorf("%s: address %v", c.name, l.GetAddress())
		}
		if len(l.GetFilterChains()) != 1 {
			t.Fatalf("%s: %d chains, want 1", c.name, len(l.GetFilterChains()))
		}
		for _, fc := range l.GetFilterChains() {
			if fc.GetName() != "" || fc.GetTransportSocketConnectTimeout().AsDuration() != gatewayChainConnectTimeout {
				t.Errorf("%s: chain name %q, transport_socket_connect_timeout %v; want none and 15s", c.name, fc.GetName(), fc.GetTransportSocketConnectTimeout())
			}
		}
		var want []*listenerpb.ListenerFilter
		if c.inspector {
			want = []*listenerpb.ListenerFilter{{Name: tlsInspectorName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{
				TypedConfig: mustPack(t, &tlsinspectorpb.TlsInspector{InitialReadBufferSize: wrapperspb.UInt32(512)})}}}
		}
		if !slices.EqualFunc(l.GetListenerFilters(), want, func(a, b *listenerpb.ListenerFilter) bool { return proto.Equal(a, b) }) {
			t.Errorf("%s: listener filters %v, want %v", c.name, l.GetListenerFilters(), want)
		}
	}
}

// An HTTPS server's TLS context is istiod's BuildListenerTLSContext, field by field, for each
// way a server names its certificates and each mode.
func TestGatewayTLSContextIsIstiods(t *testing.T) {
	alpn := []string{"h2", "http/1.1"}
	ads := func(name string) *tlspb.SdsSecretConfig {
		return &tlspb.SdsSecretConfig{Name: name, SdsConfig: &corepb.ConfigSource{
			ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}, ResourceApiVersion: corepb.ApiVersion_V3}}
	}
	agent := func(name string, wait bool) *tlspb.SdsSecretConfig {
		s := &tlspb.SdsSecretConfig{Name: name, SdsConfig: &corepb.ConfigSource{
			ResourceApiVersion: corepb.ApiVersion_V3,
			ConfigSourceSpecifier: &corepb.ConfigSource_ApiConfigSource{ApiConfigSource: &corepb.ApiConfigSource{
				ApiType: corepb.ApiConfigSource_GRPC, TransportApiVersion: corepb.ApiVersion_V3, SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corepb.GrpcService{{TargetSpecifier: &corepb.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: "sds-grpc"}}}},
			}},
		}}
		if wait {
			s.SdsConfig.InitialFetchTimeout = durationpb.New(0)
		}
		return s
	}
	sans := []*matcherpb.StringMatcher{{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "client.example.com"}}}
	combined := func(vc *tlspb.CertificateValidationContext, ca *tlspb.SdsSecretConfig) *tlspb.CommonTlsContext_CombinedValidationContext {
		return &tlspb.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: vc, ValidationContextSdsSecretConfig: ca}}
	}
	cases := []struct {
		name string
		tls  *networking.ServerTLSSettings
		want *tlspb.DownstreamTlsContext
	}{
		{"SIMPLE credentialName: no TLS parameters", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: "cert"},
			&tlspb.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(false), CommonTlsContext: &tlspb.CommonTlsContext{
				AlpnProtocols: alpn, TlsCertificateSdsSecretConfigs: []*tlspb.SdsSecretConfig{ads("kubernetes://cert")}}}},
		{"SIMPLE credentialName with SANs and versions", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: "cert",
			SubjectAltNames: []string{"client.example.com"}, MinProtocolVersion: networking.ServerTLSSettings_TLSV1_3, CipherSuites: []string{"ECDHE-RSA-AES256-GCM-SHA384"}},
			&tlspb.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(false), CommonTlsContext: &tlspb.CommonTlsContext{
				AlpnProtocols: alpn, TlsCertificateSdsSecretConfigs: []*tlspb.SdsSecretConfig{ads("kubernetes://cert")},
				ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{MatchSubjectAltNames: sans}},
				TlsParams:             &tlspb.TlsParameters{TlsMinimumProtocolVersion: tlspb.TlsParameters_TLSv1_3, CipherSuites: []string{"ECDHE-RSA-AES256-GCM-SHA384"}}}}},
		{"MUTUAL credentialName", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_MUTUAL, CredentialName: "cert",
			SubjectAltNames: []string{"client.example.com"}, MinProtocolVersion: networking.ServerTLSSettings_TLSV1_2, VerifyCertificateHash: []string{"abababababababababababababababababababababababababababababababab"}},
			&tlspb.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlspb.CommonTlsContext{
				AlpnProtocols: alpn, TlsCertificateSdsSecretConfigs: []*tlspb.SdsSecretConfig{ads("kubernetes://cert")},
				ValidationContextType: combined(&tlspb.CertificateValidationContext{MatchSubjectAltNames: sans, VerifyCertificateHash: []string{"abababababababababababababababababababababababababababababababab"}}, ads("kubernetes://cert-cacert")),
				TlsParams:             &tlspb.TlsParameters{TlsMinimumProtocolVersion: tlspb.TlsParameters_TLSv1_2}}}},
		{"OPTIONAL_MUTUAL credentialNames and caCertCredentialName", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_OPTIONAL_MUTUAL,
			CredentialNames: []string{"rsa", "ecdsa"}, CaCertCredentialName: "cas", InsecureSkipVerify: wrapperspb.Bool(true)},
			&tlspb.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(false), CommonTlsContext: &tlspb.CommonTlsContext{
				AlpnProtocols: alpn, TlsCertificateSdsSecretConfigs: []*tlspb.SdsSecretConfig{ads("kubernetes://rsa"), ads("kubernetes://ecdsa")},
				ValidationContextType: combined(&tlspb.CertificateValidationContext{TrustChainVerification: tlspb.CertificateValidationContext_ACCEPT_UNTRUSTED}, ads("kubernetes://cas"))}}},
		{"MUTUAL files", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_MUTUAL, ServerCertificate: "/c.pem", PrivateKey: "/k.pem",
			CaCertificates: "/ca.pem", CaCrl: "/crl.pem"},
			&tlspb.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlspb.CommonTlsContext{
				AlpnProtocols: alpn, TlsCertificateSdsSecretConfigs: []*tlspb.SdsSecretConfig{agent("file-cert:/c.pem~/k.pem", false)},
				ValidationContextType: combined(&tlspb.CertificateValidationContext{Crl: &corepb.DataSource{Specifier: &corepb.DataSource_Filename{Filename: "/crl.pem"}}},
					agent("file-root:/ca.pem", false))}}},
		{"ISTIO_MUTUAL", &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_ISTIO_MUTUAL, SubjectAltNames: []string{"client.example.com"},
			MinProtocolVersion: networking.ServerTLSSettings_TLSV1_3},
			&tlspb.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlspb.CommonTlsContext{
				AlpnProtocols: alpn, TlsCertificateSdsSecretConfigs: []*tlspb.SdsSecretConfig{agent("default", true)},
				ValidationContextType: combined(&tlspb.CertificateValidationContext{MatchSubjectAltNames: sans}, agent("ROOTCA", true))}}},
	}
	for _, c := range cases {
		if err := checkServerTLS(c.tls); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		got := gatewayTLSContext(c.tls)
		if err := got.ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !proto.Equal(got, c.want) {
			t.Errorf("%s:\n%v\nwant\n%v", c.name, got, c.want)
		}
	}
	for _, bad := range []*networking.ServerTLSSettings{
		{Mode: networking.ServerTLSSettings_SIMPLE},
		{Mode: networking.ServerTLSSettings_MUTUAL, ServerCertificate: "/c.pem", PrivateKey: "/k.pem"},
		{Mode: networking.ServerTLSSettings_OPTIONAL_MUTUAL, TlsCertificates: []*networking.ServerTLSSettings_TLSCertificate{{ServerCertificate: "/c", PrivateKey: "/k"}}},
	} {
		if err := checkServerTLS(bad); err == nil {
			t.Errorf("%v: accepted; Istio's validation refuses it", bad)
		}
	}
}

// A credentialName's secret is fetched over ADS, as istiod serves it; the bridge serves no
// secrets, so the Gateway reports each one (the built-in credential, the proxy's own
// certificate from its agent, is not).
func TestCredentialSecretsAreFetchedOverADS(t *testing.T) {
	yaml := listenerFiltersYAML + `---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: builtin, namespace: grpc}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [echo.example.com]
    tls: {mode: SIMPLE, credentialName: "builtin://"}
`
	got := buildClasses(t, yaml, ingressClass)
	var msgs []string
	for _, f := range got.faults {
		if f.Kind == kindGateway {
			msgs = append(msgs, f.Name+": "+f.Message)
		}
	}
	want := []string{`grpc/gw: servers[1].tls: credential "echo-cert" is fetched over ADS as istiod names it (kubernetes://echo-cert), but the bridge serves no secrets: the gateway proxy's filter chain has no certificate until a server of secrets answers`}
	if !slices.Equal(msgs, want) {
		t.Errorf("Gateway faults %q, want %q", msgs, want)
	}
	l := got.listeners[GatewayClassPrefix(ingressClass.ID())+"0.0.0.0_8443"]
	if l == nil {
		t.Fatal("no listener on 8443")
	}
	ctx := &tlspb.DownstreamTlsContext{}
	if err := l.GetFilterChains()[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ctx.ValidateAll(); err != nil {
		t.Error(err)
	}
	if c := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(); len(c) != 1 || c[0].GetName() != "default" ||
		c[0].GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != sdsClusterName {
		t.Errorf("builtin:// certificate %v, want the agent's default", c)
	}
}
