package source

import (
	"context"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
)

func TestFirstResponseIsFullStateAndNothingIsResentAfterACK(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a", "ns/b")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl})
	m := c.recv()
	if m.Collection != seColl || m.Incremental || m.Nonce == "" || m.SystemVersionInfo == "" {
		t.Fatalf("first response: collection %q incremental %v nonce %q version %q", m.Collection, m.Incremental, m.Nonce, m.SystemVersionInfo)
	}
	assertNames(t, "resources", resourceNames(m.Resources), "ns/a", "ns/b")
	for _, r := range m.Resources {
		if r.Metadata.Version == "" {
			t.Fatalf("%s has no version", r.Metadata.Name)
		}
		var se networking.ServiceEntry
		if err := r.Body.UnmarshalTo(&se); err != nil || len(se.Hosts) != 1 {
			t.Fatalf("%s body: %v %v", r.Metadata.Name, &se, err)
		}
	}
	c.ack(m)
	c.quiet(300 * time.Millisecond)
}

func TestChangeArrivesWithoutPolling(t *testing.T) {
	b := startBridge(t)
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl})
	c.ack(c.recv())
	start := time.Now()
	b.put(t, seColl, "ns/new")
	m := c.recv()
	assertNames(t, "resources after a change", resourceNames(m.Resources), "ns/new")
	// The engine has no timer: the change is pushed by the store's topic at once.
	if d := time.Since(start); d > time.Second {
		t.Fatalf("change took %s to arrive", d)
	}
}

func TestSeveralCollectionsOnOneStream(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/se")
	b.put(t, vsColl, "ns/vs1", "ns/vs2")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl})
	c.send(&mcp.RequestResources{Collection: vsColl})
	got := map[string]*mcp.Resources{}
	for range 2 {
		m := c.recv()
		got[m.Collection] = m
	}
	assertNames(t, "serviceentries", resourceNames(got[seColl].Resources), "ns/se")
	assertNames(t, "virtualservices", resourceNames(got[vsColl].Resources), "ns/vs1", "ns/vs2")
	c.ack(got[seColl])
	c.ack(got[vsColl])
	b.put(t, vsColl, "ns/vs3")
	m := c.recv()
	if m.Collection != vsColl {
		t.Fatalf("change to virtualservices arrived as %s", m.Collection)
	}
	c.quiet(200 * time.Millisecond)
}

func TestIncrementalSendsChangesAndRemovedResources(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a", "ns/b")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl, Incremental: true})
	first := c.recv()
	if first.Incremental {
		t.Fatal("first response to a new incremental subscription must be the full state (incremental=false)")
	}
	assertNames(t, "first", resourceNames(first.Resources), "ns/a", "ns/b")
	c.ack(first)

	b.put(t, seColl, "ns/c")
	b.remove(t, seColl, "ns/a")
	m := c.recv()
	if !m.Incremental {
		t.Fatal("follow-up response is not incremental")
	}
	// Both changes may coalesce into one response or come as two.
	added, removed := resourceNames(m.Resources), m.RemovedResources
	if len(removed) == 0 {
		c.ack(m)
		m2 := c.recv()
		added, removed = append(added, resourceNames(m2.Resources)...), m2.RemovedResources
	}
	assertNames(t, "upserted", added, "ns/c")
	assertNames(t, "removed", removed, "ns/a")
}

func TestAtMostOneUnacknowledgedResponseAndCoalescing(t *testing.T) {
	b := startBridge(t)
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl, Incremental: true})
	first := c.recv()
	for _, n := range []string{"ns/1", "ns/2", "ns/3"} {
		b.put(t, seColl, n)
	}
	c.quiet(300 * time.Millisecond) // the first response is not acknowledged yet
	c.ack(first)
	m := c.recv()
	assertNames(t, "coalesced", resourceNames(m.Resources), "ns/1", "ns/2", "ns/3")
	c.ack(m)
	c.quiet(200 * time.Millisecond)
}

func TestReconnectWithInitialVersionsReceivesOnlyChangesAndRemovals(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/same", "ns/changed", "ns/gone")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl, Incremental: true})
	held := map[string]string{}
	for _, r := range c.recv().Resources {
		held[r.Metadata.Name] = r.Metadata.Version
	}
	c.cancel() // disconnect

	b.put(t, seColl, "ns/changed", "ns/added")
	b.remove(t, seColl, "ns/gone")

	c2 := newSinkClient(t, b.addr)
	c2.send(&mcp.RequestResources{Collection: seColl, Incremental: true, InitialResourceVersions: held})
	m := c2.recv()
	if !m.Incremental {
		t.Fatal("a reconnect with initial_resource_versions must be answered incrementally")
	}
	assertNames(t, "resent", resourceNames(m.Resources), "ns/added", "ns/changed")
	assertNames(t, "removed", m.RemovedResources, "ns/gone")
}

func TestNACKedVersionIsNotResentAndTheNextChangeArrives(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl})
	c.nack(c.recv(), "cannot apply ns/a")
	c.quiet(500 * time.Millisecond)
	if b.engine.Stats().NACKs != 1 {
		t.Fatalf("NACKs recorded = %d", b.engine.Stats().NACKs)
	}
	b.put(t, seColl, "ns/b")
	m := c.recv()
	assertNames(t, "after the next change", resourceNames(m.Resources), "ns/a", "ns/b")
}

func TestStaleNonceIsIgnored(t *testing.T) {
	b := startBridge(t)
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl, Incremental: true})
	first := c.recv()
	c.ack(first)
	b.put(t, seColl, "ns/a")
	second := c.recv()
	// ACK the old nonce again: stale, so the second response stays unacknowledged and a new
	// change must not be sent.
	c.ack(first)
	b.put(t, seColl, "ns/b")
	c.quiet(300 * time.Millisecond)
	c.ack(second)
	assertNames(t, "after the real ACK", resourceNames(c.recv().Resources), "ns/b")
}

func TestUnknownCollectionIsEmptyAndKeepsTheStream(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: "no/such/collection"})
	m := c.recv()
	if m.Collection != "no/such/collection" || len(m.Resources) != 0 {
		t.Fatalf("unknown collection: %q with %d resources", m.Collection, len(m.Resources))
	}
	c.ack(m)
	c.send(&mcp.RequestResources{Collection: seColl})
	assertNames(t, "known collection on the same stream", resourceNames(c.recv().Resources), "ns/a")
}

func TestAliasCollectionServesTheSameResources(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: "istio/networking/v1/serviceentries"})
	m := c.recv()
	if m.Collection != "istio/networking/v1/serviceentries" {
		t.Fatalf("response names %q, want the collection as asked", m.Collection)
	}
	assertNames(t, "alias", resourceNames(m.Resources), "ns/a")
}

func TestAggregatedMeshConfigStateOfTheWorld(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := mcp.NewAggregatedMeshConfigServiceClient(dialTest(t, b.addr)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&mcp.MeshConfigRequest{TypeUrl: seAMCS, SinkNode: &mcp.SinkNode{Id: "amcs"}})
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.TypeUrl != seAMCS || m.VersionInfo == "" || m.Nonce == "" {
		t.Fatalf("response: %v", m)
	}
	assertNames(t, "first", resourceNames(m.Resources), "ns/a")
	stream.Send(&mcp.MeshConfigRequest{TypeUrl: seAMCS, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce})
	b.put(t, seColl, "ns/b")
	m2, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	assertNames(t, "state of the world after a change", resourceNames(m2.Resources), "ns/a", "ns/b")
	if m2.VersionInfo == m.VersionInfo {
		t.Fatal("version_info did not change")
	}
}

func TestAggregatedMeshConfigIncremental(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a", "ns/b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := mcp.NewAggregatedMeshConfigServiceClient(dialTest(t, b.addr)).IncrementalAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&mcp.IncrementalMeshConfigRequest{TypeUrl: seAMCS, SinkNode: &mcp.SinkNode{Id: "amcs"}})
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	assertNames(t, "first", resourceNames(m.Resources), "ns/a", "ns/b")
	stream.Send(&mcp.IncrementalMeshConfigRequest{TypeUrl: seAMCS, ResponseNonce: m.Nonce})
	b.remove(t, seColl, "ns/a")
	m2, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	assertNames(t, "upserts", resourceNames(m2.Resources))
	assertNames(t, "removed", m2.RemovedResources, "ns/a")
}
