package envoy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"pgregory.net/rapid"
)

// istioHostPattern is what Istio accepts as a host (DNS labels, optionally behind "*.", or
// "*"), as the expression validHost replaced.
var istioHostPattern = regexp.MustCompile(`^(\*|(\*\.)?[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?)*)$`)

// TestValidHostIsThePattern holds validHost to the expression: random strings over the
// characters that matter (and some that do not belong), and the edges written out.
func TestValidHostIsThePattern(t *testing.T) {
	check := func(t interface{ Fatalf(string, ...any) }, h string) {
		want := len(h) <= 253 && istioHostPattern.MatchString(h)
		if got := validHost(h); got != want {
			t.Fatalf("validHost(%q) = %v, the pattern says %v", h, got, want)
		}
	}
	for _, h := range []string{"", "*", "**", "*.", ".", "*.a", "*a", "a*", "a.*", "a.b.c", "a..b", "a.", ".a",
		"-a", "a-", "a-b", "_a", "a_", "a_b", "a\n", "A9.z-0_Z.example", "*.*.a", "a b", "ä.example",
		strings.Repeat("a", 253), strings.Repeat("a", 254), "*." + strings.Repeat("a", 251), "*." + strings.Repeat("a", 252)} {
		check(t, h)
	}
	rapid.Check(t, func(rt *rapid.T) {
		h := rapid.StringOfN(rapid.SampledFrom([]rune("aZ09-_.*. \n/é")), 0, 20, -1).Draw(rt, "host")
		check(rt, h)
	})
}

// TestAnEndpointListedTwiceIsServedOnce: a ServiceEntry that lists an address twice for a
// port gets it once in the port's load assignment, the first, and a fault naming the second;
// a few endpoints and many (past the point where they are told apart by a map) alike.
func TestAnEndpointListedTwiceIsServedOnce(t *testing.T) {
	for _, n := range []int{3, 40} {
		var eps strings.Builder
		var want []string
		for i := range n {
			fmt.Fprintf(&eps, "  - {address: 10.0.0.%d}\n", i)
			want = append(want, fmt.Sprintf("10.0.0.%d", i))
		}
		eps.WriteString("  - {address: 10.0.0.1}\n  - {address: 10.0.0.1, ports: {http: 9090}}\n")
		want = append(want, "10.0.0.1") // on its own port 9090: another endpoint
		by, faults := built(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
`+eps.String())
		r, ok := by[EndpointType][ClusterName(9080, "", "reviews.bookinfo.svc.cluster.local")]
		if !ok {
			t.Fatalf("%d endpoints: no load assignment", n)
		}
		cla := &endpointpb.ClusterLoadAssignment{}
		mustUnmarshal(t, r, cla)
		var got []string
		for _, l := range cla.GetEndpoints() {
			for _, ep := range l.GetLbEndpoints() {
				got = append(got, ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d endpoints: served %v, want %v", n, got, want)
		}
		var twice []string
		for _, f := range faults {
			if strings.Contains(f.Message, "listed twice") {
				twice = append(twice, f.Message)
			}
		}
		if len(twice) != 1 || !strings.Contains(twice[0], fmt.Sprintf("endpoints[%d]: endpoint 10.0.0.1:9080 of port 9080 is listed twice", n)) {
			t.Errorf("%d endpoints: faults %q, want one naming endpoints[%d]", n, twice, n)
		}
	}
}
