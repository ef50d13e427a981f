package envoy

import (
	"testing"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/translate"
)

// The xDS server picks listeners by these names (xds.ListenerView): the two must agree.
// A gateway gets its own class's listeners: those of the labels it has; a sidecar the outbound
// ones, of 0.0.0.0 and of the VIPs of non-HTTP ports, and istiod's capture listeners
// virtualOutbound and virtualInbound, which no gateway, proxyless gRPC client (even under a
// sidecar's node ID) or other node gets.
func TestListenerViewFollowsTheNodeKind(t *testing.T) {
	ingress := map[string]string{"istio": "ingressgateway"}
	class := translate.GatewayClass{Labels: ingress}.ID()
	other := translate.GatewayClass{Labels: map[string]string{"istio": "egressgateway"}}.ID()
	names := []string{OutboundListenerName(9080), GatewayListenerName(class, 80), APIListenerName("reviews.bookinfo.svc.cluster.local", 9080), GatewayListenerName(other, 80),
		listenerName("10.96.0.20", 27017), listenerName("fd00::20", 5432), VirtualOutboundListenerName, VirtualInboundListenerName}
	cases := []struct {
		node source.Node
		want []bool // per name above
	}{
		{source.Node{ID: "sidecar~10.0.0.1~reviews-v1.bookinfo~bookinfo.svc.cluster.local"}, []bool{true, false, false, false, true, true, true, true}},
		{source.Node{ID: "router~10.0.0.2~ingress.istio-system~istio-system.svc.cluster.local", Labels: ingress}, []bool{false, true, false, false, false, false, false, false}},
		{source.Node{ID: "sidecar~10.0.0.3~client.apps~apps.svc.cluster.local", Generator: "grpc"}, []bool{true, false, false, false, true, true, false, false}},
		{source.Node{ID: "my-envoy"}, []bool{true, true, true, true, true, true, false, false}},
	}
	for _, c := range cases {
		view, include := xds.ListenerView(c.node)
		if (view == "") != (include == nil) {
			t.Errorf("%s: view %q with include %v", c.node.ID, view, include != nil)
		}
		for i, name := range names {
			if got := include == nil || include(name); got != c.want[i] {
				t.Errorf("%s: %s included = %v, want %v", c.node.ID, name, got, c.want[i])
			}
		}
	}
}

// The xDS server leaves istiod's capture passthrough clusters out of a gateway's clusters
// (xds.ClusterView), by these names; sidecars and other nodes get every cluster.
func TestClusterViewLeavesCapturePassthroughOutOfGateways(t *testing.T) {
	names := []string{PassthroughClusterName, InboundPassthroughCluster, BlackHoleClusterName, "outbound|9080||reviews.bookinfo.svc.cluster.local"}
	router := source.Node{ID: "router~10.0.0.2~ingress.istio-system~istio-system.svc.cluster.local"}
	view, include := xds.ClusterView(router)
	if view == "" || include == nil {
		t.Fatalf("a gateway's cluster view is the whole collection")
	}
	for i, want := range []bool{false, false, true, true} {
		if got := include(names[i]); got != want {
			t.Errorf("gateway: %s included = %v, want %v", names[i], got, want)
		}
	}
	for _, n := range []source.Node{{ID: "sidecar~10.0.0.1~reviews-v1.bookinfo~bookinfo.svc.cluster.local"}, {ID: "my-envoy"}} {
		if view, include := xds.ClusterView(n); view != "" || include != nil {
			t.Errorf("%s: cluster view %q narrowed; want every cluster", n.ID, view)
		}
	}
}
