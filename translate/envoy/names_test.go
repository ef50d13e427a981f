package envoy

import (
	"slices"
	"testing"

	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"google.golang.org/grpc/codes"
)

func TestNamesFollowIstio(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{ClusterName(9080, "", "reviews.bookinfo.svc.cluster.local"), "outbound|9080||reviews.bookinfo.svc.cluster.local"},
		{ClusterName(9080, "v1", "reviews.bookinfo.svc.cluster.local"), "outbound|9080|v1|reviews.bookinfo.svc.cluster.local"},
		{HostRouteName("a.example.com", 80), "outbound|80||a.example.com"},
		{APIListenerName("a.example.com", 80), "a.example.com:80"},
		{OutboundListenerName(9080), "0.0.0.0_9080"},
		{OutboundRouteName(9080), "9080"},
		{GatewayListenerName("c1", 443), "gateway.c1/0.0.0.0_443"},
		{GatewayHTTPRouteName("c1", 80), "gateway.c1/http.80"},
		{GatewayHTTPSRouteName("c1", 443, "https-edge", "ingress/edge"), "gateway.c1/https.443.https-edge.edge.ingress"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestShortHostsAreCompletedInTheNamespace(t *testing.T) {
	for _, c := range []struct{ host, want string }{
		{"reviews", "reviews.bookinfo.svc.cluster.local"},
		{"reviews.other", "reviews.other"}, // a dot: taken as written, as Istio does
		{"*.example.com", "*.example.com"},
		{"*", "*"},
		{"", ""},
	} {
		if got := hostname.Complete(c.host, "bookinfo", DefaultDomainSuffix); got != c.want {
			t.Errorf("hostname.Complete(%q) = %q, want %q", c.host, got, c.want)
		}
	}
}

func TestWildcardHostsMatchTheirSuffix(t *testing.T) {
	for _, c := range []struct {
		pattern, host string
		want          bool
	}{
		{"*", "anything.example.com", true},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "*.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "a.example.org", false},
		{"a.example.com", "a.example.com", true},
		{"a.example.com", "*.example.com", false},
	} {
		if got := hostname.Matches(c.pattern, c.host); got != c.want {
			t.Errorf("hostname.Matches(%q, %q) = %v, want %v", c.pattern, c.host, got, c.want)
		}
	}
}

// A ServiceEntry port's protocol is its protocol field alone, as istiod reads it
// (protocol.Parse): the name does not count, and unset or unknown is sniffing (protoAuto).
func TestServiceEntryPortProtocolIsTheFieldAlone(t *testing.T) {
	for _, c := range []struct {
		declared string
		want     protocol
	}{
		{"GRPC", protoHTTP2},
		{"grpc-web", protoHTTP2},
		{"http2", protoHTTP2},
		{"Http", protoHTTP},
		{"TCP", protoOther},
		{"TLS", protoOther},
		{"HTTPS", protoOther},
		{"", protoAuto},
		{"WEB", protoAuto},
	} {
		if got := parseProtocol(c.declared); got != c.want {
			t.Errorf("parseProtocol(%q) = %v, want %v", c.declared, got, c.want)
		}
	}
	// The name is not read: a port named "grpc" without a protocol is sniffed.
	se := &serviceEntry{ports: []servicePort{{number: 80, name: "grpc"}, {number: 81, name: "tcp-db"}}}
	for _, p := range servicePorts(se, &faults{}) {
		if p.protocol != protoAuto {
			t.Errorf("port %d named %q: protocol %v, want protoAuto (sniffed)", p.number, p.name, p.protocol)
		}
	}
}

func TestRetryOnSplitsStatusCodesFromConditions(t *testing.T) {
	// As istiod splits them: conditions as written, in order, repeats kept; a number that is no
	// HTTP status (599) is a condition. retriable-status-codes is retryPolicy's to add.
	conds, codes := parseRetryOn("503, gateway-error,unavailable,429,gateway-error,599,")
	if conds != "gateway-error,unavailable,gateway-error,599" || !slices.Equal(codes, []uint32{503, 429}) {
		t.Errorf("got %q and %v", conds, codes)
	}
}

func TestGRPCStatusIsReadByNameOrNumber(t *testing.T) {
	for _, c := range []struct {
		in   string
		want codes.Code
		ok   bool
	}{
		{"UNAVAILABLE", codes.Unavailable, true},
		{"14", codes.Unavailable, true},
		{"OK", codes.OK, true},
		{"unavailable", 0, false},
		{"17", 0, false},
		{"", 0, false},
	} {
		got, ok := grpcCode(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("grpcCode(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestNamespacerReadsTheNamespaceFromTheNameAlone(t *testing.T) {
	n := NewNamespacer("")
	for _, c := range []struct {
		name       string
		ns         string
		namespaced bool
	}{
		{ClusterName(80, "", "reviews.bookinfo.svc.cluster.local"), "bookinfo", true},
		{ClusterName(80, "v1", "reviews.bookinfo.svc.cluster.local"), "bookinfo", true},
		{APIListenerName("reviews.bookinfo.svc.cluster.local", 9080), "bookinfo", true},
		{HostRouteName("reviews.bookinfo.svc.cluster.local", 9080), "bookinfo", true},
		{GatewayListenerName("c1", 80), "", false}, // a gateway class's: its Gateways may be of any namespace
		{GatewayHTTPRouteName("c1", 80), "", false},
		{"ns/name", "ns", true},
		{OutboundListenerName(80), "", false},
		{OutboundRouteName(80), "", false},
		{ClusterName(443, "", "api.example.com"), "", false},
		{APIListenerName("api.example.com", 443), "", false},
		{ClusterName(80, "", "a.b.c.svc.cluster.local"), "", false}, // not NAME.NAMESPACE
		{ClusterName(80, "", ".bookinfo.svc.cluster.local"), "", false},
		{ClusterName(80, "", "reviews.bookinfo.svc.example.org"), "", false}, // another suffix
		{"outbound", "", false},
	} {
		ns, namespaced := n.NamespaceOf(c.name)
		if ns != c.ns || namespaced != c.namespaced {
			t.Errorf("NamespaceOf(%q) = %q, %v; want %q, %v", c.name, ns, namespaced, c.ns, c.namespaced)
		}
	}
	if ns, ok := NewNamespacer("example.org").NamespaceOf(ClusterName(80, "", "reviews.bookinfo.svc.example.org")); !ok || ns != "bookinfo" {
		t.Errorf("with suffix example.org: %q, %v", ns, ok)
	}
}
