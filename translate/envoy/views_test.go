package envoy

import (
	"testing"

	"github.com/mcpbridge/mcpbridge/source/xds"
)

// The xDS server picks listeners by these names (xds.ListenerView): the two must agree.
func TestListenerViewFollowsTheNodeKind(t *testing.T) {
	names := []string{OutboundListenerName(9080), GatewayListenerName("bookinfo/gw", 80), APIListenerName("reviews.bookinfo.svc.cluster.local", 9080)}
	cases := []struct {
		node, view string
		want       []bool // per name above
	}{
		{"sidecar~10.0.0.1~reviews-v1.bookinfo~bookinfo.svc.cluster.local", "sidecar", []bool{true, false, false}},
		{"router~10.0.0.2~ingress.istio-system~istio-system.svc.cluster.local", "router", []bool{false, true, false}},
		{"my-envoy", "", []bool{true, true, true}},
	}
	for _, c := range cases {
		view, include := xds.ListenerView(c.node)
		if view != c.view {
			t.Errorf("%s: view %q, want %q", c.node, view, c.view)
		}
		for i, name := range names {
			if got := include == nil || include(name); got != c.want[i] {
				t.Errorf("%s: %s included = %v, want %v", c.node, name, got, c.want[i])
			}
		}
	}
}
