package envoy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxypb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// These tests hold the merge of Gateways per gateway class to what istiod does for a gateway
// proxy (its MergeGateways and gateway listener building), for the common cases.

var (
	ingressClass = translate.GatewayClass{Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}}
	egressClass  = translate.GatewayClass{Labels: map[string]string{"istio": "egressgateway"}}
)

// gatewayYAML is a Gateway created at minute created (older Gateways win conflicts), with the
// given selector and servers (YAML list items under servers).
func gatewayYAML(ns, name string, created int, selector, servers string) string {
	return fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: %s, namespace: %s, creationTimestamp: "2026-01-01T00:%02d:00Z"}
spec:
  selector: {%s}
  servers:
%s`, name, ns, created, selector, servers)
}

// meshYAML: the services gateways route to.
const meshYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: shop}
spec:
  hosts: [a.shop.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}, {number: 8443, name: tls, protocol: TLS}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b, namespace: shop}
spec:
  hosts: [b.shop.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.2}]
`

// routeYAML is a VirtualService of namespace shop bound to gateways, routing its hosts to dest.
func routeYAML(name, hosts, gateways, dest string) string {
	return fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %s, namespace: shop}
spec:
  hosts: [%s]
  gateways: [%s]
  http:
  - route: [{destination: {host: %s, port: {number: 8080}}}]
`, name, hosts, gateways, dest)
}

type classOutputs struct {
	listeners map[string]*listenerpb.Listener
	routes    map[string]*routepb.RouteConfiguration
	faults    []Fault
}

// buildClasses translates the YAML for some gateway classes and returns each output, checked
// by Envoy's validation.
func buildClasses(t *testing.T, yaml string, classes ...translate.GatewayClass) classOutputs {
	t.Helper()
	outs, faults := Build(decodeYAML(t, yaml), TranslatorOptions{GatewayClasses: classes})
	got := classOutputs{listeners: map[string]*listenerpb.Listener{}, routes: map[string]*routepb.RouteConfiguration{}, faults: faults}
	for _, r := range outs {
		if err := validateDeep(r.Body()); err != nil {
			t.Errorf("%s %q fails validation: %v", typeName(r.TypeURL), r.Name, err)
		}
		switch r.TypeURL {
		case ListenerType:
			l := &listenerpb.Listener{}
			mustUnmarshal(t, r, l)
			got.listeners[r.Name] = l
		case RouteType:
			rc := &routepb.RouteConfiguration{}
			mustUnmarshal(t, r, rc)
			got.routes[r.Name] = rc
		}
	}
	return got
}

func mustUnmarshal(t *testing.T, r Resource, m proto.Message) {
	t.Helper()
	if err := r.Body().UnmarshalTo(m); err != nil {
		t.Fatal(err)
	}
}

// gatewayListeners are the listener names of a class, without its prefix.
func (o classOutputs) gatewayListeners(c translate.GatewayClass) []string {
	var out []string
	for name := range o.listeners {
		if rest, ok := strings.CutPrefix(name, GatewayClassPrefix(c.ID())); ok {
			out = append(out, rest)
		}
	}
	slices.Sort(out)
	return out
}

func vhostDomains(rc *routepb.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		out = append(out, vh.GetDomains()[0])
	}
	slices.Sort(out)
	return out
}

// faultMessages are a resource's faults, but for the secrets of credentialName that the
// bridge does not serve (reported for every such server, TestCredentialSecretsAreFetchedOverADS).
func faultMessages(fs []Fault, kind, name string) []string {
	var out []string
	for _, f := range fs {
		if f.Kind == kind && f.Name == name && !strings.Contains(f.Message, "serves no secrets") {
			out = append(out, f.Message)
		}
	}
	return out
}

// A gateway proxy gets the Gateways whose selector its labels satisfy, and only those; a
// Gateway without a selector applies to every gateway proxy.
func TestGatewayClassTakesTheGatewaysItsLabelsSelect(t *testing.T) {
	yaml := meshYAML +
		gatewayYAML("shop", "ingress", 1, "istio: ingressgateway", "  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: [\"a.example.com\"]\n") +
		gatewayYAML("shop", "egress", 2, "istio: egressgateway", "  - port: {number: 81, name: http, protocol: HTTP}\n    hosts: [\"b.example.com\"]\n") +
		gatewayYAML("shop", "everywhere", 3, "", "  - port: {number: 82, name: http, protocol: HTTP}\n    hosts: [\"*\"]\n") +
		routeYAML("a", "a.example.com", "ingress", "a")
	got := buildClasses(t, yaml, ingressClass, egressClass)
	if l := got.gatewayListeners(ingressClass); !slices.Equal(l, []string{"0.0.0.0_80", "0.0.0.0_82"}) {
		t.Errorf("ingress class listeners %v, want 0.0.0.0_80 and 0.0.0.0_82", l)
	}
	if l := got.gatewayListeners(egressClass); !slices.Equal(l, []string{"0.0.0.0_81", "0.0.0.0_82"}) {
		t.Errorf("egress class listeners %v, want 0.0.0.0_81 and 0.0.0.0_82", l)
	}
	if d := vhostDomains(got.routes[GatewayHTTPRouteName(ingressClass.ID(), 80)]); !slices.Equal(d, []string{"a.example.com"}) {
		t.Errorf("ingress http.80 virtual hosts %v", d)
	}
}

// The bookinfo case: two Gateways with plaintext HTTP servers on port 80 merge into one
// listener and one route configuration, http.80, holding both Gateways' virtual hosts.
func TestHTTPServersOfSeveralGatewaysOnOnePortMerge(t *testing.T) {
	yaml := meshYAML +
		gatewayYAML("shop", "one", 1, "istio: ingressgateway", "  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: [\"a.example.com\"]\n") +
		gatewayYAML("shop", "two", 2, "istio: ingressgateway", "  - port: {number: 80, name: http2, protocol: HTTP}\n    hosts: [\"b.example.com\"]\n") +
		routeYAML("a", "a.example.com", "one", "a") + routeYAML("b", "b.example.com", "two", "b")
	got := buildClasses(t, yaml, ingressClass)
	if l := got.gatewayListeners(ingressClass); !slices.Equal(l, []string{"0.0.0.0_80"}) {
		t.Fatalf("listeners %v, want one on port 80", l)
	}
	l := got.listeners[GatewayListenerName(ingressClass.ID(), 80)]
	if n := len(l.GetFilterChains()); n != 1 {
		t.Fatalf("%d filter chains, want 1", n)
	}
	if d := vhostDomains(got.routes[GatewayHTTPRouteName(ingressClass.ID(), 80)]); !slices.Equal(d, []string{"a.example.com", "b.example.com"}) {
		t.Errorf("http.80 virtual hosts %v, want both Gateways'", d)
	}
	if len(got.faults) != 0 {
		t.Errorf("faults: %v", got.faults)
	}
}

// Two Gateways sharing 443 with different hosts: one listener whose filter chains are told
// apart by SNI, each terminating with its own certificate (by SDS over ADS, as istiod)
// and routing by its own route configuration, https.443.PORTNAME.GATEWAY.NAMESPACE.
func TestHTTPSServersOfTwoGatewaysOn443AreFilterChainsBySNI(t *testing.T) {
	yaml := meshYAML +
		gatewayYAML("shop", "a-gw", 1, "istio: ingressgateway", "  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [\"a.example.com\"]\n    tls: {mode: SIMPLE, credentialName: a-cert}\n") +
		gatewayYAML("shop", "b-gw", 2, "istio: ingressgateway", "  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [\"b.example.com\"]\n    tls: {mode: MUTUAL, credentialName: b-cert}\n") +
		routeYAML("a", "a.example.com", "a-gw", "a") + routeYAML("b", "b.example.com", "b-gw", "b")
	got := buildClasses(t, yaml, ingressClass)
	class := ingressClass.ID()
	l := got.listeners[GatewayListenerName(class, 443)]
	if l == nil {
		t.Fatalf("no listener on 443: %v", got.gatewayListeners(ingressClass))
	}
	if fs := l.GetListenerFilters(); len(fs) != 1 || fs[0].GetName() != tlsInspectorName {
		t.Errorf("listener filters %v, want the TLS inspector", fs)
	}
	want := []struct {
		sni, route, cert, ca string
	}{
		{"a.example.com", GatewayHTTPSRouteName(class, 443, "https", "shop/a-gw"), "kubernetes://a-cert", ""},
		{"b.example.com", GatewayHTTPSRouteName(class, 443, "https", "shop/b-gw"), "kubernetes://b-cert", "kubernetes://b-cert-cacert"},
	}
	if len(l.GetFilterChains()) != len(want) {
		t.Fatalf("%d filter chains, want %d", len(l.GetFilterChains()), len(want))
	}
	for i, w := range want {
		fc := l.GetFilterChains()[i]
		if sn := fc.GetFilterChainMatch().GetServerNames(); !slices.Equal(sn, []string{w.sni}) {
			t.Errorf("chain %d matches %v, want SNI %s", i, sn, w.sni)
		}
		ctx := &tlspb.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		common := ctx.GetCommonTlsContext()
		if c := common.GetTlsCertificateSdsSecretConfigs(); len(c) != 1 || c[0].GetName() != w.cert || c[0].GetSdsConfig().GetAds() == nil {
			t.Errorf("chain %d certificate %v, want %s over ADS", i, c, w.cert)
		}
		ca := common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()
		if got := ca.GetName(); got != w.ca || ctx.GetRequireClientCertificate().GetValue() != (w.ca != "") || (w.ca != "" && ca.GetSdsConfig().GetAds() == nil) {
			t.Errorf("chain %d client CA %q (required %v), want %q", i, got, ctx.GetRequireClientCertificate().GetValue(), w.ca)
		}
		rc := got.routes[w.route]
		if d := vhostDomains(rc); !slices.Equal(d, []string{w.sni}) {
			t.Errorf("route %s virtual hosts %v, want %s only", w.route, d, w.sni)
		}
	}
}

// A server on a port that an older Gateway's server took with another kind of protocol is
// left out, for that class, with a fault naming both; the older one keeps the port. Which is
// older decides, not the names.
func TestConflictingProtocolOnOnePortIsLeftOutDeterministically(t *testing.T) {
	plain := "  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: [\"a.example.com\"]\n"
	tls := "  - port: {number: 80, name: https, protocol: HTTPS}\n    hosts: [\"b.example.com\"]\n    tls: {mode: SIMPLE, credentialName: b-cert}\n"
	for _, c := range []struct {
		name                 string
		plainAge, tlsAge     int
		winner, loser, chain string
	}{
		{"plaintext older", 1, 2, "shop/plain", "shop/secure", ""},
		{"TLS older", 2, 1, "shop/secure", "shop/plain", "b.example.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := meshYAML + gatewayYAML("shop", "plain", c.plainAge, "istio: ingressgateway", plain) +
				gatewayYAML("shop", "secure", c.tlsAge, "istio: ingressgateway", tls) +
				routeYAML("a", "a.example.com", "plain", "a") + routeYAML("b", "b.example.com", "secure", "b")
			for range 3 { // the same every time
				got := buildClasses(t, yaml, ingressClass)
				l := got.listeners[GatewayListenerName(ingressClass.ID(), 80)]
				if l == nil || len(l.GetFilterChains()) != 1 {
					t.Fatalf("listener on 80: %v", l)
				}
				sni := l.GetFilterChains()[0].GetFilterChainMatch().GetServerNames()
				if c.chain == "" && len(sni) != 0 || c.chain != "" && !slices.Equal(sni, []string{c.chain}) {
					t.Fatalf("the port is served as %v, want %q's", sni, c.winner)
				}
				msgs := faultMessages(got.faults, kindGateway, c.loser)
				if len(msgs) != 1 || !strings.Contains(msgs[0], "port 80") || !strings.Contains(msgs[0], c.winner) ||
					!strings.Contains(msgs[0], "istio=ingressgateway") || !strings.Contains(msgs[0], "left out") {
					t.Fatalf("faults of %s: %q, want one naming port 80, %s and the class", c.loser, msgs, c.winner)
				}
				if msgs := faultMessages(got.faults, kindGateway, c.winner); len(msgs) != 0 {
					t.Fatalf("the winner has faults: %q", msgs)
				}
			}
		})
	}
}

// A TLS host that a server of the port already has is left out (Envoy rejects two filter
// chains with one match); a different host on the same port is served.
func TestDuplicateTLSHostOnAPortIsLeftOut(t *testing.T) {
	server := func(host, cred string) string {
		return fmt.Sprintf("  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [%q]\n    tls: {mode: SIMPLE, credentialName: %s}\n", host, cred)
	}
	yaml := meshYAML +
		gatewayYAML("shop", "first", 1, "istio: ingressgateway", server("a.example.com", "one")) +
		gatewayYAML("shop", "second", 2, "istio: ingressgateway", server("a.example.com", "two")+server("b.example.com", "three")) +
		routeYAML("a", "a.example.com", "first", "a")
	got := buildClasses(t, yaml, ingressClass)
	l := got.listeners[GatewayListenerName(ingressClass.ID(), 443)]
	var snis []string
	for _, fc := range l.GetFilterChains() {
		snis = append(snis, fc.GetFilterChainMatch().GetServerNames()...)
	}
	if !slices.Equal(snis, []string{"a.example.com", "b.example.com"}) {
		t.Errorf("SNI matches %v, want a.example.com (first's) and b.example.com", snis)
	}
	if msgs := faultMessages(got.faults, kindGateway, "shop/second"); len(msgs) != 1 || !strings.Contains(msgs[0], `"a.example.com"`) || !strings.Contains(msgs[0], "shop/first") {
		t.Errorf("faults of shop/second: %q", msgs)
	}
}

// TLS passthrough: each SNI host a VirtualService's tls route names goes, unopened, to a TCP
// proxy of its destination; HTTPS termination may share the port.
func TestPassthroughServersRouteSNIToTCPProxies(t *testing.T) {
	yaml := meshYAML +
		gatewayYAML("shop", "edge", 1, "istio: ingressgateway",
			"  - port: {number: 443, name: tls, protocol: TLS}\n    hosts: [\"*.pass.example.com\"]\n    tls: {mode: PASSTHROUGH}\n"+
				"  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [\"web.example.com\"]\n    tls: {mode: SIMPLE, credentialName: web}\n") + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: pass, namespace: shop}
spec:
  hosts: ["a.pass.example.com"]
  gateways: [edge]
  tls:
  - match: [{sniHosts: [a.pass.example.com], port: 443}]
    route: [{destination: {host: a, port: {number: 8443}}}]
` + routeYAML("web", "web.example.com", "edge", "b")
	got := buildClasses(t, yaml, ingressClass)
	l := got.listeners[GatewayListenerName(ingressClass.ID(), 443)]
	if len(l.GetFilterChains()) != 2 {
		t.Fatalf("filter chains %v, want the passthrough one and the HTTPS one", l.GetFilterChains())
	}
	pass := l.GetFilterChains()[0]
	if sn := pass.GetFilterChainMatch().GetServerNames(); !slices.Equal(sn, []string{"a.pass.example.com"}) {
		t.Errorf("passthrough chain matches %v", sn)
	}
	proxy := &tcpproxypb.TcpProxy{}
	if f := pass.GetFilters(); len(f) != 1 || f[0].GetName() != tcpProxyFilterName || f[0].GetTypedConfig().UnmarshalTo(proxy) != nil {
		t.Fatalf("passthrough chain filters %v, want one TCP proxy", f)
	}
	if c := proxy.GetCluster(); c != ClusterName(8443, "", "a.shop.svc.cluster.local") {
		t.Errorf("TCP proxy to %q", c)
	}
	if pass.GetTransportSocket() != nil {
		t.Error("a passthrough chain terminates TLS")
	}
	if sn := l.GetFilterChains()[1].GetFilterChainMatch().GetServerNames(); !slices.Equal(sn, []string{"web.example.com"}) {
		t.Errorf("HTTPS chain matches %v", sn)
	}
	if msgs := faultMessages(got.faults, kindGateway, "shop/edge"); len(msgs) != 0 || len(got.faults) != 1 {
		t.Errorf("faults: %v, want the credential's alone", got.faults)
	}
}

// A class's outputs go when the class does.
func TestRemovingAGatewayClassRemovesItsOutputs(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	for coll, rs := range decodeYAML(t, meshYAML+gatewayYAML("shop", "gw", 1, "istio: ingressgateway", "  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: [\"a.example.com\"]\n")) {
		in := make([]Input, len(rs))
		for i, r := range rs {
			in[i] = InputOf(r)
		}
		tr.Update(coll, in, nil)
	}
	tr.SetGatewayClass(ingressClass)
	d, _ := tr.Translate()
	if !slices.ContainsFunc(d.Upserts[ListenerType], func(e store.Encoded) bool { return e.Name() == GatewayListenerName(ingressClass.ID(), 80) }) {
		t.Fatal("the class's listener was not built")
	}
	tr.RemoveGatewayClass(ingressClass.ID())
	d, _ = tr.Translate()
	if !slices.Contains(d.Removed[ListenerType], GatewayListenerName(ingressClass.ID(), 80)) || !slices.Contains(d.Removed[RouteType], GatewayHTTPRouteName(ingressClass.ID(), 80)) {
		t.Fatalf("removed %v, want the class's listener and route", d.Removed)
	}
}

// The controller builds a class while a proxy of it holds it, and drops it after the grace.
func TestControllerBuildsAGatewayClassWhileItIsHeld(t *testing.T) {
	st := newStore()
	ctrl := New(Options{Store: st, Logger: testLogger(t), GatewayClassGrace: 50 * time.Millisecond})
	h := runController(t, st, ctrl)
	h.apply(upserts(decodeYAML(t, meshYAML+gatewayYAML("shop", "gw", 1, "istio: ingressgateway", "  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: [\"a.example.com\"]\n")))...)
	name := GatewayListenerName(ingressClass.ID(), 80)
	present := func() bool { return st.View().Get(ListenerType, name) != nil }
	if present() {
		t.Fatal("a class nobody holds was built")
	}
	release := ctrl.AcquireGatewayClass(ingressClass)
	again := ctrl.AcquireGatewayClass(ingressClass) // a second proxy of the class
	waitUntil(t, "the class's listener is served", present)
	release()
	time.Sleep(150 * time.Millisecond)
	if !present() {
		t.Fatal("the class was dropped while a proxy still holds it")
	}
	again()
	waitUntil(t, "the class's listener is dropped after the grace", func() bool { return !present() })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
