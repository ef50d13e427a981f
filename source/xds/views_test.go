package xds

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/translate"
)

// labelsMetadata is node metadata with LABELS, as Istio's agent sends a workload's labels.
func labelsMetadata(labels map[string]string) *structpb.Struct {
	if labels == nil {
		return nil
	}
	fields := map[string]any{}
	for k, v := range labels {
		fields[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{"LABELS": fields})
	if err != nil {
		panic(err)
	}
	return md
}

func listenerNames(t *testing.T, m *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range m.Resources {
		var l listener.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Name)
	}
	return out
}

// A wildcard listener subscription gets the listeners meant for the kind of proxy its node ID
// names: a sidecar the outbound ones, a gateway its gateway listeners, anything else all but
// the capture listeners. The node may come on the stream's first request for another type.
func TestWildcardListenersFollowTheNodesKind(t *testing.T) {
	s := startServer(t)
	ingress := map[string]string{"istio": "ingressgateway"}
	egress := map[string]string{"istio": "egressgateway"}
	ingressPrefix := translate.GatewayClassPrefix(translate.GatewayClass{Labels: ingress}.ID())
	egressPrefix := translate.GatewayClassPrefix(translate.GatewayClass{Labels: egress}.ID())
	outbound, api := "0.0.0.0_9080", "reviews.bookinfo.svc.cluster.local:9080"
	gateway, otherGateway := ingressPrefix+"0.0.0.0_80", egressPrefix+"0.0.0.0_80"
	vout, vin := "virtualOutbound", "virtualInbound"
	s.putEnvoy(t, ListenerType, map[string]proto.Message{
		outbound: &listener.Listener{Name: outbound}, gateway: &listener.Listener{Name: gateway}, api: &listener.Listener{Name: api},
		otherGateway: &listener.Listener{Name: otherGateway}, vout: &listener.Listener{Name: vout}, vin: &listener.Listener{Name: vin},
	})
	cases := []struct {
		node   string
		labels map[string]string
		want   []string
	}{
		{"sidecar~10.0.0.1~reviews-v1.bookinfo~bookinfo.svc.cluster.local", nil, []string{outbound, vin, vout}},
		{"router~10.0.0.2~ingress.istio-system~istio-system.svc.cluster.local", ingress, []string{gateway}},
		{"router~10.0.0.3~egress.istio-system~istio-system.svc.cluster.local", egress, []string{otherGateway}},
		{"plain-envoy", nil, []string{outbound, gateway, otherGateway, api}},
	}
	for _, tc := range cases {
		c := newSotW(t, s.addr)
		c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, Node: &core.Node{Id: tc.node, Metadata: labelsMetadata(tc.labels)}})
		c.ack(c.recv())
		c.send(&discovery.DiscoveryRequest{TypeUrl: ListenerType})
		m := c.recv()
		assertNames(t, tc.node, listenerNames(t, m), tc.want...)
		c.ack(m)
	}

	// A sidecar is not woken by a change to listeners outside its view, and is by one inside.
	sidecar := newSotW(t, s.addr)
	sidecar.send(&discovery.DiscoveryRequest{TypeUrl: ListenerType, Node: &core.Node{Id: cases[0].node}})
	sidecar.ack(sidecar.recv())
	waitAllAcknowledged(t, s.engine)
	s.putEnvoy(t, ListenerType, map[string]proto.Message{api: &listener.Listener{Name: api, StatPrefix: "changed"}})
	sidecar.quiet(300 * time.Millisecond)
	s.putEnvoy(t, ListenerType, map[string]proto.Message{outbound: &listener.Listener{Name: outbound, StatPrefix: "changed"}})
	assertNames(t, "sidecar after its listener changed", listenerNames(t, sidecar.recv()), outbound, vin, vout)

	// Delta: the same view.
	d := newDelta(t, s.addr)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ListenerType, Node: &core.Node{Id: cases[0].node}})
	assertNames(t, "delta sidecar", deltaNames(d.recv()), outbound, vin, vout)

	// Proxyless gRPC asks for its API listener by name, whatever its node ID says.
	g := newSotW(t, s.addr)
	g.send(&discovery.DiscoveryRequest{TypeUrl: ListenerType, ResourceNames: []string{api}, Node: &core.Node{Id: cases[0].node}})
	assertNames(t, "named API listener", listenerNames(t, g.recv()), api)

	if got := s.engine.Clients()[0].Subscriptions; len(got) == 0 {
		t.Fatal("no subscriptions in the debug view")
	}
}
