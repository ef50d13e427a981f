package xds

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

func TestDeltaSubscribeAndUnsubscribeIgnoringPhantoms(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a", "b"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, Node: &core.Node{Id: "n"}, ResourceNamesSubscribe: []string{"a"}})
	m := c.recv()
	assertNames(t, "subscribed", deltaNames(m), "a")
	c.ack(m)
	// Subscribe to b (sent at once), and unsubscribe from a name never subscribed (phantom).
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"b"}, ResourceNamesUnsubscribe: []string{"never"}})
	m = c.recv()
	assertNames(t, "newly subscribed", deltaNames(m), "b")
	c.ack(m)
	// Unsubscribed names are no longer sent.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{"a"}})
	waitNames(t, s.engine, EndpointType, "b")
	s.putEnvoy(t, EndpointType, loadAssignments("v2", "a"))
	c.quiet(300 * time.Millisecond)
	s.putEnvoy(t, EndpointType, loadAssignments("v2", "b"))
	assertNames(t, "still subscribed", deltaNames(c.recv()), "b")
}

func TestDeltaResubscribingResendsEvenIfUnchanged(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	c.ack(c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	assertNames(t, "resent", deltaNames(c.recv()), "a")
}

func TestDeltaNonexistentNameIsAnsweredWithNameOnly(t *testing.T) {
	s := startServer(t)
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RouteType, ResourceNamesSubscribe: []string{"missing"}})
	m := c.recv()
	if len(m.Resources) != 1 || m.Resources[0].Name != "missing" || m.Resources[0].Resource != nil {
		t.Fatalf("want one Resource with only the name, got %v", m.Resources)
	}
	c.ack(m)
	// When it springs into existence, it is sent.
	s.putEnvoy(t, RouteType, routes("missing"))
	m = c.recv()
	if len(m.Resources) != 1 || m.Resources[0].Resource == nil {
		t.Fatalf("created resource: %v", m.Resources)
	}
}

func TestDeltaRemovedResourcesAndPerResourceVersions(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a", "b"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}) // wildcard
	m := c.recv()
	assertNames(t, "wildcard", deltaNames(m), "a", "b")
	for _, r := range m.Resources {
		if r.Version == "" || r.Resource == nil || r.Resource.TypeUrl != ClusterType {
			t.Fatalf("resource %s: version %q, body %v", r.Name, r.Version, r.Resource)
		}
	}
	if m.SystemVersionInfo == "" {
		t.Fatal("no system_version_info")
	}
	c.ack(m)
	s.removeEnvoy(t, ClusterType, "a")
	m = c.recv()
	if len(m.Resources) != 0 || len(m.RemovedResources) != 1 || m.RemovedResources[0] != "a" {
		t.Fatalf("removal: resources %v removed %v", deltaNames(m), m.RemovedResources)
	}
}

// Make before break over delta: when routes move from one cluster to another in one write,
// the new cluster goes first, then the routes, and the old cluster's removal only after the
// routes no longer name it (and the clusters' response in flight is acknowledged).
func TestDeltaClusterRemovalFollowsTheRoutesThatMovedOff(t *testing.T) {
	s, c, m := deltaClustersMovedFromAToB(t)
	c.ack(m)
	m = c.recv()
	if m.TypeUrl != ClusterType || len(m.Resources) != 0 || len(m.RemovedResources) != 1 || m.RemovedResources[0] != "A" {
		t.Fatalf("second half: %s %v removed %v", m.TypeUrl, deltaNames(m), m.RemovedResources)
	}
	_ = s
}

// Without route or listener subscriptions on the stream nothing can still name a cluster
// that goes: its removal travels with the addition.
func TestDeltaClusterRemovalWithoutDependentsIsNotHeldBack(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("old"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	c.ack(c.recv())
	waitAllAcknowledged(t, s.engine)
	if _, err := s.store.Apply("test", clusterUpdate(clusters("new"), "old")); err != nil {
		t.Fatal(err)
	}
	m := c.recv()
	assertNames(t, "added", deltaNames(m), "new")
	assertNames(t, "removed", m.RemovedResources, "old")
}

func TestDeltaReconnectWithInitialResourceVersions(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("same", "changed", "gone"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	held := map[string]string{}
	for _, r := range c.recv().Resources {
		held[r.Name] = r.Version
	}
	c.cancel()

	s.putEnvoy(t, ClusterType, map[string]proto.Message{"changed": &cluster.Cluster{Name: "changed", ConnectTimeout: durationpb.New(2 * time.Second)}})
	s.putEnvoy(t, ClusterType, clusters("added"))
	s.removeEnvoy(t, ClusterType, "gone")

	c2 := newDelta(t, s.addr)
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, InitialResourceVersions: held})
	m := c2.recv()
	assertNames(t, "resent", deltaNames(m), "added", "changed")
	// Clusters are removed after the listeners and routes that may name them: the client
	// resumes those in the same burst, before it answers this response, so the removal
	// follows the answer (source.TestDeltaResumeKeepsMakeBeforeBreak).
	assertNames(t, "removed with the first response", m.RemovedResources)
	c2.ack(m)
	m = c2.recv()
	assertNames(t, "sent after the answer", deltaNames(m))
	assertNames(t, "removed after the answer", m.RemovedResources, "gone")
}

// A resumed type whose removals wait for no other type sends them with its first response.
func TestDeltaResumeRemovesAtOnceWhenNothingMustGoFirst(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a", "gone"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a", "gone"}})
	held := map[string]string{}
	for _, r := range c.recv().Resources {
		held[r.Name] = r.Version
	}
	c.cancel()
	s.removeEnvoy(t, EndpointType, "gone")
	c2 := newDelta(t, s.addr)
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a", "gone"}, InitialResourceVersions: held})
	m := c2.recv()
	assertNames(t, "resent", deltaNames(m))
	assertNames(t, "removed", m.RemovedResources, "gone")
}

func clusterUpdate(add map[string]proto.Message, remove ...string) store.Update {
	u := store.Update{Collection: ClusterType, Removed: remove}
	for name, m := range add {
		u.Resources = append(u.Resources, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: anyOf(m)})
	}
	return u
}
