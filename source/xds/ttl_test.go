package xds

import (
	"fmt"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

// testTTL is short, so that heartbeats (every testTTL/2) come several times a second.
const testTTL = 600 * time.Millisecond

func ttlServer(t *testing.T, opts source.Options) *server {
	t.Helper()
	opts.Logger = testLogger(t)
	return startServerTTL(t, opts, &TTLs{Default: testTTL})
}

// nodeWith is a node announcing client features.
func nodeWith(features ...string) *core.Node {
	return &core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", ClientFeatures: features}
}

// putAs stores clusters under an owner.
func (s *server) putAs(t *testing.T, owner string, names ...string) {
	t.Helper()
	var rs []*mcpapi.Resource
	for name, m := range clusters(names...) {
		rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: anyOf(m)})
	}
	if _, err := s.store.Apply(owner, store.Update{Collection: ClusterType, Resources: rs}); err != nil {
		t.Fatal(err)
	}
}

func (s *server) present(t *testing.T, owner string, present bool) {
	t.Helper()
	if _, err := s.store.SetOwnerPresent(owner, present); err != nil {
		t.Fatal(err)
	}
}

// deltaTTLClient opens a delta stream announcing TTL support and takes the first response to
// a wildcard cluster subscription, ACKed.
func deltaTTLClient(t *testing.T, s *server) (*deltaClient, *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeWith(FeatureResourceTTL), TypeUrl: ClusterType})
	first := c.recv()
	c.ack(first)
	return c, first
}

// deltaShape is name → whether the resource carries a body, of every resource of a response.
func deltaShape(m *discovery.DeltaDiscoveryResponse) map[string]bool {
	out := map[string]bool{}
	for _, r := range m.Resources {
		out[r.Name] = r.Resource != nil
	}
	return out
}

func isHeartbeat(m *discovery.DeltaDiscoveryResponse) bool {
	for _, r := range m.Resources {
		if r.Resource != nil {
			return false
		}
	}
	return len(m.Resources) > 0
}

// nextHeartbeat ACKs and skips responses until a heartbeat naming exactly names arrives.
func (c *deltaClient) nextHeartbeat(names ...string) *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	for range 20 {
		m := c.recv()
		c.ack(m)
		got := slices.Sorted(mapKeys(deltaShape(m)))
		if isHeartbeat(m) && slices.Equal(got, names) {
			return m
		}
	}
	c.t.Fatalf("no heartbeat naming exactly %v", names)
	return nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestDeltaResourcesCarryTTL: every resource of a delta response carries the configured TTL
// beside its body.
func TestDeltaResourcesCarryTTL(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "p", "a", "b")
	_, first := deltaTTLClient(t, s)
	if len(first.Resources) != 2 {
		t.Fatalf("first response has %d resources, want 2", len(first.Resources))
	}
	for _, r := range first.Resources {
		if r.Resource == nil || r.Ttl.AsDuration() != testTTL {
			t.Fatalf("resource %s: body %v, ttl %v; want a body and ttl %s", r.Name, r.Resource != nil, r.Ttl, testTTL)
		}
	}
}

// TestHeartbeatCarriesNoBody: before the TTL runs out the client gets a heartbeat: each
// resource it holds, with the version it holds and the TTL, and no body; and again after it.
func TestHeartbeatCarriesNoBody(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "p", "a", "b")
	c, first := deltaTTLClient(t, s)
	sent := time.Now()
	versions := map[string]string{}
	for _, r := range first.Resources {
		versions[r.Name] = r.Version
	}
	for range 3 {
		hb := c.recv()
		if since := time.Since(sent); since >= testTTL {
			t.Fatalf("heartbeat came %s after the last renewal; the TTL is %s", since, testTTL)
		}
		sent = time.Now()
		if len(hb.Resources) != 2 {
			t.Fatalf("heartbeat names %v, want a and b", deltaShape(hb))
		}
		for _, r := range hb.Resources {
			if r.Resource != nil || r.Version != versions[r.Name] || r.Ttl.AsDuration() != testTTL {
				t.Fatalf("heartbeat resource %s: body %v, version %q (sent %q), ttl %v; want no body, the version sent, ttl %s",
					r.Name, r.Resource != nil, r.Version, versions[r.Name], r.Ttl, testTTL)
			}
		}
		c.ack(hb)
	}
}

// TestHeartbeatsStopAfterProducerDisconnectAndResumeOnReconnect: a disconnected producer's
// resources are left out of heartbeats (the client drops them when the TTL passes) while a
// connected one's go on; when it comes back its resources are sent again with their bodies,
// and heartbeated again.
func TestHeartbeatsStopAfterProducerDisconnectAndResumeOnReconnect(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "live", "a")
	s.putAs(t, "gone", "b")
	c, _ := deltaTTLClient(t, s)
	c.nextHeartbeat("a", "b")

	s.present(t, "gone", false)
	c.nextHeartbeat("a")
	if subs := s.engine.Clients()[0].Subscriptions; subs[0].TTL != testTTL.String() || !slices.Equal(subs[0].Unrenewed, []string{"gone"}) {
		t.Fatalf("debug view: ttl %q, unrenewed %v; want %s and [gone]", subs[0].TTL, subs[0].Unrenewed, testTTL)
	}
	for range 3 { // and from then on, never b
		hb := c.recv()
		if !isHeartbeat(hb) || !slices.Equal(slices.Sorted(mapKeys(deltaShape(hb))), []string{"a"}) {
			t.Fatalf("after its producer left, got %v; want heartbeats of a alone", deltaShape(hb))
		}
		c.ack(hb)
	}

	s.present(t, "gone", true)
	for range 10 {
		m := c.recv()
		c.ack(m)
		if shape := deltaShape(m); shape["b"] {
			for _, r := range m.Resources {
				if r.Name == "b" && r.Ttl.AsDuration() != testTTL {
					t.Fatalf("b came back without its TTL: %v", r.Ttl)
				}
			}
			c.nextHeartbeat("a", "b")
			return
		}
	}
	t.Fatal("b was not sent again with its body after its producer came back")
}

// TestNoHeartbeatWhenEveryProducerLeft: with every producer of what the client holds gone,
// nothing is sent (an empty state-of-the-world response would delete everything; an empty
// heartbeat renews nothing).
func TestNoHeartbeatWhenEveryProducerLeft(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "gone", "a")
	c, _ := deltaTTLClient(t, s)
	c.nextHeartbeat("a")
	s.present(t, "gone", false)
	// A heartbeat may have been on its way.
	deadline := time.After(testTTL)
	for {
		select {
		case m := <-c.Responses():
			c.ack(m)
			continue
		case <-deadline:
		}
		break
	}
	c.quiet(2 * testTTL)
}

// TestHeartbeatNeverOverlapsAResponseInFlight: a heartbeat is a response; none goes while
// the type has one unacknowledged, and the one due goes once the client answers.
func TestHeartbeatNeverOverlapsAResponseInFlight(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "p", "a")
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeWith(FeatureResourceTTL), TypeUrl: ClusterType})
	first := c.recv()
	c.quiet(2 * testTTL) // not acknowledged: nothing more
	c.ack(first)
	hb := c.recv()
	if !isHeartbeat(hb) {
		t.Fatalf("after the ACK, got %v; want the heartbeat that fell due", deltaShape(hb))
	}
}

// TestDeltaTTLOnlyWithClientFeature: a delta client that does not announce TTL support gets
// no TTL and no heartbeat (a bodiless resource would tell it the resource does not exist).
func TestDeltaTTLOnlyWithClientFeature(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "p", "a")
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeWith(FeatureResourceInSotW), TypeUrl: ClusterType})
	first := c.recv()
	if r := first.Resources[0]; r.Ttl != nil || r.Resource == nil {
		t.Fatalf("got ttl %v, body %v; want a body and no TTL", r.Ttl, r.Resource != nil)
	}
	c.ack(first)
	c.quiet(2 * testTTL)
}

// TestSotWTTLOnlyWithClientFeature: a state-of-the-world client gets its resources wrapped in
// Resource with the TTL, and heartbeats, only when it announces both TTL support and that it
// unwraps Resource wrappers; without them, plain bodies and no heartbeats. gRPC's xDS client
// announces the wrapper alone: plain bodies too.
func TestSotWTTLOnlyWithClientFeature(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "p", "a")
	for _, features := range [][]string{nil, {FeatureResourceTTL}, {"xds.config.resource-in-sotw"}} {
		c := newSotW(t, s.addr)
		c.send(&discovery.DiscoveryRequest{Node: nodeWith(features...), TypeUrl: ClusterType})
		m := c.recv()
		if len(m.Resources) != 1 || m.Resources[0].TypeUrl != ClusterType {
			t.Fatalf("features %v: resources %v; want the plain cluster", features, m.Resources)
		}
		c.ack(m)
		c.quiet(2 * testTTL)
		c.Close()
	}

	for _, wrap := range []string{FeatureResourceInSotW, "xds.config.resource-in-sotw"} {
		c := newSotW(t, s.addr)
		c.send(&discovery.DiscoveryRequest{Node: nodeWith(FeatureResourceTTL, wrap), TypeUrl: ClusterType})
		first := c.recv()
		r := unwrap(t, first)
		if r.Name != "a" || r.Resource == nil || r.Resource.TypeUrl != ClusterType || r.Ttl.AsDuration() != testTTL {
			t.Fatalf("wrapped resource %v; want cluster a with its body and ttl %s", r, testTTL)
		}
		c.ack(first)
		hb := c.recv()
		h := unwrap(t, hb)
		if h.Name != "a" || h.Resource != nil || h.Version != r.Version || h.Ttl.AsDuration() != testTTL || hb.VersionInfo != first.VersionInfo {
			t.Fatalf("heartbeat %v (version_info %q); want a, no body, version %q, ttl %s, version_info %q",
				h, hb.VersionInfo, r.Version, testTTL, first.VersionInfo)
		}
		c.ack(hb)
		c.Close()
	}
}

// unwrap reads the one Resource wrapper of a state-of-the-world response.
func unwrap(t *testing.T, m *discovery.DiscoveryResponse) *discovery.Resource {
	t.Helper()
	if len(m.Resources) != 1 || m.Resources[0].TypeUrl != wire.ResourceWrapperTypeURL {
		t.Fatalf("resources %v; want one %s", m.Resources, wire.ResourceWrapperTypeURL)
	}
	var r discovery.Resource
	if err := proto.Unmarshal(m.Resources[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestTTLPerCollection: a collection's own TTL overrides the default; a collection with none
// is sent without TTL and not heartbeated, on the same stream.
func TestTTLPerCollection(t *testing.T) {
	s := startServerTTL(t, source.Options{Logger: testLogger(t)}, &TTLs{ByCollection: map[string]time.Duration{ClusterType: testTTL}})
	s.putAs(t, "p", "a")
	s.putEnvoy(t, EndpointType, loadAssignments("z", "a"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeWith(FeatureResourceTTL), TypeUrl: ClusterType})
	cds := c.recv()
	c.ack(cds)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	for seen := 0; seen < 4; seen++ {
		m := c.recv()
		c.ack(m)
		for _, r := range m.Resources {
			want := time.Duration(0)
			if m.TypeUrl == ClusterType {
				want = testTTL
			}
			if r.Ttl.AsDuration() != want {
				t.Fatalf("%s %s has ttl %v, want %s", m.TypeUrl, r.Name, r.Ttl, want)
			}
			if m.TypeUrl == EndpointType && r.Resource == nil {
				t.Fatal("an endpoint heartbeat was sent, though endpoints have no TTL")
			}
		}
	}
}

// TestHeartbeatLeavesOutRefusedResources: after a NACK the client holds an older version the
// bridge cannot name, so that resource is not heartbeated, until a version of it is accepted.
func TestHeartbeatLeavesOutRefusedResources(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "p", "a", "b")
	c, _ := deltaTTLClient(t, s)
	c.nextHeartbeat("a", "b")
	s.putCluster(t, "p", "b", 2*time.Second)
	for {
		m := c.recv()
		if !isHeartbeat(m) {
			if !deltaShape(m)["b"] {
				t.Fatalf("update %v; want b's new version", deltaShape(m))
			}
			c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce,
				ErrorDetail: &rpcstatus.Status{Code: 3, Message: "rejected by test"}})
			break
		}
		c.ack(m)
	}
	c.nextHeartbeat("a")
	c.nextHeartbeat("a")
	// A new version of b, accepted: heartbeated again.
	s.putCluster(t, "p", "b", 3*time.Second)
	c.nextHeartbeat("a", "b")
}

// putCluster stores one cluster under an owner, with a connect timeout that makes its version.
func (s *server) putCluster(t *testing.T, owner, name string, timeout time.Duration) {
	t.Helper()
	body := anyOf(&cluster.Cluster{Name: name, ConnectTimeout: durationpb.New(timeout)})
	if _, err := s.store.Apply(owner, store.Update{Collection: ClusterType,
		Resources: []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: name}, Body: body}}}); err != nil {
		t.Fatal(err)
	}
}

// TestDerivedResourcesInheritTheirInputsLiveness: resources of a derived owner (the
// translation) are heartbeated only while no disconnected producer holds one of the
// derivation's inputs; a disconnected producer of something else does not stop them.
func TestDerivedResourcesInheritTheirInputsLiveness(t *testing.T) {
	const seCollection = "istio/networking/v1alpha3/serviceentries"
	s := ttlServer(t, source.Options{Derived: map[string][]string{"translate": {seCollection}}})
	s.putAs(t, "translate", "derived")
	se := &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "ns/a"}, Body: anyOf(&networking.ServiceEntry{Hosts: []string{"a.example"}})}
	if _, err := s.store.Apply("producer", store.Update{Collection: seCollection, Resources: []*mcpapi.Resource{se}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Apply("elsewhere", store.Update{Collection: EndpointType, Resources: []*mcpapi.Resource{
		{Metadata: &mcpapi.Metadata{Name: "e"}, Body: anyOf(loadAssignments("z", "e")["e"])}}}); err != nil {
		t.Fatal(err)
	}
	c, _ := deltaTTLClient(t, s)
	c.nextHeartbeat("derived")

	s.present(t, "elsewhere", false) // holds no input: the derived cluster lives on
	c.nextHeartbeat("derived")
	c.nextHeartbeat("derived")

	s.present(t, "producer", false) // holds an input: the derived cluster is left to expire
	drain := time.After(testTTL)
	for done := false; !done; {
		select {
		case m := <-c.Responses():
			c.ack(m)
		case <-drain:
			done = true
		}
	}
	c.quiet(2 * testTTL)

	s.present(t, "producer", true)
	m := c.recv()
	if !deltaShape(m)["derived"] {
		t.Fatalf("got %v; want the derived cluster again with its body", deltaShape(m))
	}
	c.ack(m)
	c.nextHeartbeat("derived")
}

// TestLargeHeartbeatGoesInParts: a delta heartbeat larger than xds.max_response_size is
// split like any delta response: parts sent one after another, each after the client's
// answer, together renewing everything the client holds.
func TestLargeHeartbeatGoesInParts(t *testing.T) {
	s := ttlServer(t, source.Options{MaxResponseSize: 4096 + 200}) // 200 bytes of resources a part
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	s.putAs(t, "p", names...)
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeWith(FeatureResourceTTL), TypeUrl: ClusterType})
	renewed := map[string]bool{}
	parts := 0
	for len(renewed) < len(names) {
		m := c.recv()
		c.ack(m)
		if !isHeartbeat(m) {
			continue // the first response, in parts too
		}
		parts++
		if len(m.Resources) == len(names) {
			t.Fatalf("a heartbeat of %d resources went whole", len(m.Resources))
		}
		for _, r := range m.Resources {
			renewed[r.Name] = true
		}
	}
	if parts < 2 {
		t.Fatalf("%d heartbeat parts, want several", parts)
	}
}
