package app

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/translate"
)

const (
	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	routeType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// A bridge serving the examples derives Envoy clusters from them and serves them over ADS;
// with translate.enabled off it serves none.
func TestServedExamplesAreTranslatedIntoEnvoyClusters(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		b := start(t, func(c *Config) {
			c.Sources.Files = []string{"../examples"}
			c.Translate.Enabled = enabled
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(dialConn(t, b.grpcAddr)).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stream.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"})
		var names []string
		for { // the first response may come before the translation's first write
			m, err := stream.Recv()
			if err != nil {
				t.Fatalf("translate.enabled=%v: %v", enabled, err)
			}
			names = names[:0]
			for _, a := range m.Resources {
				var c cluster.Cluster
				if err := a.UnmarshalTo(&c); err != nil {
					t.Fatal(err)
				}
				names = append(names, c.Name)
			}
			if !enabled || len(withoutPlumbing(names)) > 0 {
				break
			}
			stream.Send(&discovery.DiscoveryRequest{TypeUrl: m.TypeUrl, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce})
		}
		cancel()
		const want = "outbound|9080|v2|reviews.bookinfo.svc.cluster.local"
		if enabled != slices.Contains(names, want) {
			t.Fatalf("translate.enabled=%v: clusters %v, %s expected: %v", enabled, names, want, enabled)
		}
	}
}

// A gateway proxy connecting over ADS makes its class's listeners and routes exist: those of
// the Gateways its labels (node metadata LABELS) select, merged; a proxy whose labels select
// none gets no gateway listener.
func TestGatewayProxyGetsItsClassBuiltOnConnect(t *testing.T) {
	b := start(t, func(c *Config) { c.Sources.Files = []string{"../examples"} })
	conn := dialConn(t, b.grpcAddr)
	listeners := func(node string, labels map[string]any) *streamtest.Client[discovery.DiscoveryRequest, discovery.DiscoveryResponse] {
		md, err := structpb.NewStruct(map[string]any{"LABELS": labels})
		if err != nil {
			t.Fatal(err)
		}
		st := ads(t, conn)
		st.Send(&discovery.DiscoveryRequest{TypeUrl: listenerType, Node: &core.Node{Id: node, Metadata: md}})
		return st
	}
	ingress := listeners("router~10.0.0.2~ingress-1.istio-system~istio-system.svc.cluster.local",
		map[string]any{"istio": "ingressgateway", "app": "istio-ingressgateway"})
	class := translate.GatewayClass{Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}}.ID()
	want := translate.GatewayClassPrefix(class) + "0.0.0.0_80"
	var got []string
	for !slices.Contains(got, want) { // empty until the class is built, a moment after the connect
		m := ingress.Recv()
		got = anyNames(t, m.Resources)
		ingress.Send(&discovery.DiscoveryRequest{TypeUrl: listenerType, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce})
	}
	assertNamesEqual(t, "the ingress gateway's listeners", got, want)

	// Its route configuration holds the bookinfo Gateway's virtual host.
	ingress.Send(&discovery.DiscoveryRequest{TypeUrl: routeType, ResourceNames: []string{translate.GatewayClassPrefix(class) + "http.80"}})
	rc := &route.RouteConfiguration{}
	if err := ingress.Recv().Resources[0].UnmarshalTo(rc); err != nil {
		t.Fatal(err)
	}
	if len(rc.VirtualHosts) != 1 || !slices.Contains(rc.VirtualHosts[0].Domains, "bookinfo.example.com") {
		t.Fatalf("route configuration %v, want the bookinfo virtual host", rc.VirtualHosts)
	}

	// /debug/gateways shows the class, its proxy, its Gateway and its listener: a moment after
	// the listener is served, as the translation publishes what it built once it has written
	// it to the store, where streams may read it first.
	var body string
	shows := func() bool {
		var code int
		code, body = httpGet(t, b.httpURL+"/debug/gateways")
		if code != http.StatusOK {
			t.Fatalf("/debug/gateways: %d %s", code, body)
		}
		var dbg struct {
			Classes []struct {
				ID        string
				Proxies   int
				Gateways  []string
				Listeners []string
			}
		}
		if err := json.Unmarshal([]byte(body), &dbg); err != nil {
			t.Fatal(err)
		}
		return len(dbg.Classes) == 1 && dbg.Classes[0].ID == class && dbg.Classes[0].Proxies == 1 &&
			slices.Equal(dbg.Classes[0].Gateways, []string{"bookinfo/bookinfo-gateway"}) && slices.Equal(dbg.Classes[0].Listeners, []string{want})
	}
	deadline := time.Now().Add(5 * time.Second)
	for !shows() {
		if time.Now().After(deadline) {
			t.Fatalf("/debug/gateways: %s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}

	other := listeners("router~10.0.0.3~edge-1.edge~edge.svc.cluster.local", map[string]any{"app": "edge"})
	if m := other.Recv(); len(m.Resources) != 0 {
		t.Fatalf("a gateway no Gateway selects got listeners %v", anyNames(t, m.Resources))
	}
	other.Quiet(300 * time.Millisecond)
}

// Sidecars of two namespaces, over ADS, get the route configuration of one port each as its
// namespace sees it, from their first response on: bookinfo's calls
// reviews.bookinfo.svc.cluster.local by its bare name, default's may not (istiod's domains
// for a proxy of another namespace).
func TestSidecarsOfTwoNamespacesGetTheirNamespacesDomains(t *testing.T) {
	b := start(t, func(c *Config) { c.Sources.Files = []string{"../examples"} })
	conn := dialConn(t, b.grpcAddr)
	const vhost = "reviews.bookinfo.svc.cluster.local:9080"
	domains := func(m *discovery.DiscoveryResponse) []string {
		for _, a := range m.Resources {
			rc := &route.RouteConfiguration{}
			if err := a.UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			for _, vh := range rc.VirtualHosts {
				if vh.Name == vhost {
					return vh.Domains
				}
			}
		}
		return nil
	}
	routes := func(node string) *streamtest.Client[discovery.DiscoveryRequest, discovery.DiscoveryResponse] {
		st := ads(t, conn)
		st.Send(&discovery.DiscoveryRequest{TypeUrl: routeType, ResourceNames: []string{"9080"}, Node: &core.Node{Id: node}})
		return st
	}
	// The translation of the examples is written before the first stream; the first
	// response then waits for the namespace's view (xds.HoldView): never the mesh-wide one.
	<-b.Ready().Ready()
	bookinfo := routes("sidecar~10.0.0.5~productpage-1.bookinfo~bookinfo.svc.cluster.local")
	got := domains(bookinfo.Recv())
	if want := []string{"reviews", "reviews.bookinfo.svc", "reviews.bookinfo"}; !slices.Equal(got[2:5], want) {
		t.Fatalf("bookinfo's sidecar: domains %q, want %q after the FQDN forms", got, want)
	}
	other := routes("sidecar~10.0.0.6~client-1.default~default.svc.cluster.local")
	got = domains(other.Recv())
	if len(got) == 0 || slices.Contains(got, "reviews") || !slices.Contains(got, "reviews.bookinfo") {
		t.Fatalf("default's sidecar: domains %q, want reviews.bookinfo and no bare name", got)
	}
	// Both namespaces' views are held, and the metrics say so.
	if code, body := httpGet(t, b.httpURL+"/metrics"); code != http.StatusOK ||
		!strings.Contains(body, "mcpbridge_translation_scopes 2") || !strings.Contains(body, "mcpbridge_translation_scopes_refused_total 0") {
		t.Fatalf("/metrics (%d) does not report the two namespaces' views held and none refused", code)
	}
	// Both sidecars asked for port 9080's route configuration: one port held, not every port's.
	if _, body := httpGet(t, b.httpURL+"/metrics"); !strings.Contains(body, `mcpbridge_translation_held_views{view="port_routes"} 1`) ||
		!strings.Contains(body, `mcpbridge_translation_held_views{view="port_routes_all"} 0`) ||
		!strings.Contains(body, `mcpbridge_translation_held_views{view="proxyless_hosts"} 0`) {
		t.Fatalf("/metrics does not report port 9080's route configuration held alone:\n%s", grepLines(body, "held_views"))
	}
}

// grepLines are the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
