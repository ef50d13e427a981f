package sink

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
)

func TestStreamOpensWithARequestPerConfiguredCollection(t *testing.T) {
	node := SinkNode{ID: "bridge-1", Annotations: map[string]string{"zone": "a"}}
	b := startSink(t, Options{
		Collections: []Collection{{Name: seAlias, Incremental: true}, {Name: vsColl}, {Name: opaqueColl, Incremental: true}},
		SinkNode:    node,
	})
	p := dialProducer(t, b.addr, "p")
	reqs := p.requests(3)
	want := []struct {
		coll        string
		incremental bool
	}{{seAlias, true}, {vsColl, false}, {opaqueColl, true}}
	for i, w := range want {
		r := reqs[i]
		if r.Collection != w.coll || r.Incremental != w.incremental || r.ResponseNonce != "" || r.ErrorDetail != nil {
			t.Fatalf("request %d: collection %q incremental %v nonce %q error %v; want %q incremental %v, no nonce",
				i, r.Collection, r.Incremental, r.ResponseNonce, r.ErrorDetail, w.coll, w.incremental)
		}
		if r.SinkNode.GetId() != "bridge-1" || r.SinkNode.GetAnnotations()["zone"] != "a" {
			t.Fatalf("request %d: sink_node %v, want id bridge-1 with zone=a", i, r.SinkNode)
		}
	}
}

func TestDefaultCollectionsAreEveryKnownKindIncremental(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "p")
	want := DefaultCollections()
	for i, r := range p.requests(len(want)) {
		if r.Collection != want[i].Name || !r.Incremental {
			t.Fatalf("request %d: %q incremental %v, want %q incremental", i, r.Collection, r.Incremental, want[i].Name)
		}
	}
}

func TestFullStateIsACKedAfterItIsApplied(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	m := full(seColl, ses("a", "b")...)
	m.SystemVersionInfo = "v1"
	reply := p.push(m)
	if reply.ErrorDetail != nil {
		t.Fatalf("NACK: %v", reply.ErrorDetail)
	}
	// Read right after the ACK, with no wait: the ACK promises the write is done.
	assertNames(t, b.store, seColl, "ns/a", "ns/b")
	if e := b.store.View().Get(seColl, "ns/a"); e.Owner != "producer:p" || e.Version == "" {
		t.Fatalf("ns/a stored with owner %q version %q, want owner producer:p and a version", e.Owner, e.Version)
	}
	// And an MCP sink that subscribes to the bridge after the ACK is served it.
	got := subscribeOnce(t, startSource(t, b.store, "127.0.0.1:0").addr, seColl)
	if len(got.Resources) != 2 {
		t.Fatalf("a subscriber after the ACK got %d resources, want 2", len(got.Resources))
	}
}

// subscribeOnce asks a ResourceSource for a collection and returns its first response.
func subscribeOnce(t *testing.T, addr, coll string) *mcp.Resources {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	stream, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&mcp.RequestResources{Collection: coll}); err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNACKNamesTheFaultAndAppliesNothing(t *testing.T) {
	badBytes := serviceEntry("ns/x", "x.example")
	badBytes.Body = &anypb.Any{TypeUrl: "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry", Value: []byte{0x0a, 0x05, 'a'}}
	cases := []struct {
		name  string
		msg   *mcp.Resources
		parts []string // the NACK message names these
	}{
		{"body type does not match the collection's kind",
			full(seColl, serviceEntry("ns/ok", "ok.example"), virtualService("ns/vs", "vs.example")),
			[]string{seColl, "ns/vs", "does not match"}},
		{"body does not unmarshal",
			full(seColl, badBytes),
			[]string{seColl, "ns/x", "does not unmarshal"}},
		{"name is empty",
			full(seColl, serviceEntry("ns/ok", "ok.example"), serviceEntry("", "e.example")),
			[]string{seColl, "resource 1", "no metadata.name"}},
		{"name appears twice",
			full(seColl, serviceEntry("ns/d", "1.example"), serviceEntry("ns/d", "2.example")),
			[]string{seColl, "ns/d", "appears twice"}},
		{"incremental though full state was asked for",
			&mcp.Resources{Collection: vsColl, Incremental: true, Resources: []*mcpapi.Resource{virtualService("ns/v", "v.example")}},
			[]string{vsColl, "incremental", "full state"}},
		{"collection was not asked for",
			full(gwColl),
			[]string{gwColl, "not asked for"}},
		{"opaque collection was not asked for",
			full(opaqueColl, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "w"}}),
			[]string{opaqueColl, "not asked for"}},
		{"a resource istiod's validation refuses, after good ones",
			full(seColl, serviceEntry("ns/ok", "ok.example"), serviceEntry("ns/empty", "")),
			[]string{seColl, `resource "ns/empty"`, "field spec.hosts[0]: empty domain name not allowed"}},
		{"an incremental upsert istiod's validation refuses",
			&mcp.Resources{Collection: seColl, Incremental: true, Resources: []*mcpapi.Resource{serviceEntry("ns/a", "a_b.example")}},
			[]string{seColl, `resource "ns/a"`, "field spec.hosts[0]", `label "a_b" invalid`}},
		{"incremental removal of an empty name",
			&mcp.Resources{Collection: seColl, Incremental: true, RemovedResources: []string{""}},
			[]string{seColl, "empty name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := startSink(t, Options{Collections: []Collection{{Name: seColl, Incremental: true}, {Name: vsColl}}})
			p := dialProducer(t, b.addr, "p")
			p.requests(2)
			p.mustACK(full(seColl, ses("a")...))
			p.mustACK(full(vsColl, virtualService("ns/v0", "v0.example")))
			before := dump(b.store)

			reply := p.push(tc.msg)
			if reply.ErrorDetail == nil {
				t.Fatal("ACK, want NACK")
			}
			if c := codes.Code(reply.ErrorDetail.Code); c != codes.InvalidArgument {
				t.Fatalf("NACK code %v, want InvalidArgument", c)
			}
			for _, part := range tc.parts {
				if !strings.Contains(reply.ErrorDetail.Message, part) {
					t.Fatalf("NACK message %q does not name %q", reply.ErrorDetail.Message, part)
				}
			}
			if after := dump(b.store); after != before {
				t.Fatalf("store changed by a NACKed message:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			// The stream goes on.
			p.mustACK(full(seColl, ses("b")...))
			assertNames(t, b.store, seColl, "ns/b")
		})
	}
}

func TestResourcesWithoutNonceIsNACKed(t *testing.T) {
	b := startSink(t, Options{Collections: []Collection{{Name: seColl}}})
	p := dialProducer(t, b.addr, "p")
	p.requests(1)
	if err := p.stream.Send(full(seColl, ses("a")...)); err != nil {
		t.Fatal(err)
	}
	reply := p.recv()
	if reply.ErrorDetail == nil || codes.Code(reply.ErrorDetail.Code) != codes.InvalidArgument || !strings.Contains(reply.ErrorDetail.Message, "nonce") {
		t.Fatalf("answer %v, want an InvalidArgument NACK about the nonce", reply)
	}
	assertNames(t, b.store, seColl)
}

func TestFullStateReplacesTheProducersPreviousSet(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	p.mustACK(full(seColl, ses("a", "b")...))
	p.mustACK(full(seColl, ses("b", "c")...))
	assertNames(t, b.store, seColl, "ns/b", "ns/c")
	p.mustACK(full(seColl))
	assertNames(t, b.store, seColl)
}

func TestFullStateIgnoresRemovedResources(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	m := full(seColl, ses("a", "b")...)
	m.RemovedResources = []string{"ns/a"}
	p.mustACK(m)
	assertNames(t, b.store, seColl, "ns/a", "ns/b")
}

func TestIncrementalUpsertsAndRemoves(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	p.mustACK(full(seColl, ses("a", "b")...))
	p.mustACK(&mcp.Resources{Collection: seColl, Incremental: true,
		Resources: []*mcpapi.Resource{serviceEntry("ns/b", "b2.example"), serviceEntry("ns/c", "c.example")}})
	assertNames(t, b.store, seColl, "ns/a", "ns/b", "ns/c")
	if _, got := b.store.View().Get(seColl, "ns/b").Body(); !strings.Contains(string(got), "b2.example") {
		t.Fatal("incremental upsert did not replace ns/b")
	}
	p.mustACK(&mcp.Resources{Collection: seColl, Incremental: true, RemovedResources: []string{"ns/a", "ns/never-held"}})
	assertNames(t, b.store, seColl, "ns/b", "ns/c")
}

func TestAliasCollectionIsStoredCanonicallyAndAnsweredByItsName(t *testing.T) {
	b := startSink(t, Options{}) // asks for the canonical v1alpha3 collection
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	reply := p.push(full(seAlias, ses("a")...))
	if reply.ErrorDetail != nil || reply.Collection != seAlias {
		t.Fatalf("answer for %s: collection %q error %v, want an ACK naming %s", seAlias, reply.Collection, reply.ErrorDetail, seAlias)
	}
	assertNames(t, b.store, seColl, "ns/a")
	assertNames(t, b.store, seAlias)
}

func TestTwoProducersOnOneCollectionEachReplaceOnlyTheirOwn(t *testing.T) {
	b := startSink(t, Options{})
	pa := dialProducer(t, b.addr, "a")
	pb := dialProducer(t, b.addr, "b")
	pa.requests(len(DefaultCollections()))
	pb.requests(len(DefaultCollections()))
	pa.mustACK(full(seColl, ses("a1", "a2")...))
	pb.mustACK(full(seColl, ses("b1")...))
	pa.mustACK(full(seColl, ses("a3")...))
	assertNames(t, b.store, seColl, "ns/a3", "ns/b1")
	pb.mustACK(full(seColl))
	assertNames(t, b.store, seColl, "ns/a3")
	if e := b.store.View().Get(seColl, "ns/a3"); e.Owner != "producer:a" {
		t.Fatalf("ns/a3 owner %q, want producer:a", e.Owner)
	}
}

func TestDisconnectedProducerKeepsItsStateAndReconnectReplacesOnlyItsOwn(t *testing.T) {
	b := startSink(t, Options{})
	pa := dialProducer(t, b.addr, "a")
	pb := dialProducer(t, b.addr, "b")
	pa.requests(len(DefaultCollections()))
	pb.requests(len(DefaultCollections()))
	pa.mustACK(full(seColl, ses("a1", "a2")...))
	pb.mustACK(full(seColl, ses("b1")...))

	pa.close()
	// The bridge has no event to wait for here; check over a while that nothing goes away.
	assertStaysFor(t, 200*time.Millisecond, func() bool { return len(names(b.store, seColl)) == 3 })

	again := dialProducer(t, b.addr, "a")
	again.requests(len(DefaultCollections()))
	again.mustACK(full(seColl, ses("a3")...))
	assertNames(t, b.store, seColl, "ns/a3", "ns/b1")
}

func TestStreamsFromOneIPWithoutProducerIDAreOneOwner(t *testing.T) {
	b := startSink(t, Options{})
	p1 := dialProducer(t, b.addr, "")
	p2 := dialProducer(t, b.addr, "") // a second connection, so a second source port
	p1.requests(len(DefaultCollections()))
	p2.requests(len(DefaultCollections()))
	p1.mustACK(full(seColl, ses("x", "y")...))
	if e := b.store.View().Get(seColl, "ns/x"); e.Owner != "ip:127.0.0.1" {
		t.Fatalf("owner %q, want ip:127.0.0.1", e.Owner)
	}
	p2.mustACK(full(seColl, ses("z")...))
	assertNames(t, b.store, seColl, "ns/z")
}

func TestConcurrentStreamsOfOneProducerIDAreOneOwner(t *testing.T) {
	b := startSink(t, Options{})
	p1 := dialProducer(t, b.addr, "same")
	p2 := dialProducer(t, b.addr, "same")
	p1.requests(len(DefaultCollections()))
	p2.requests(len(DefaultCollections()))
	p1.mustACK(full(seColl, ses("x", "y")...))
	p2.mustACK(&mcp.Resources{Collection: seColl, Incremental: true, RemovedResources: []string{"ns/x"}})
	assertNames(t, b.store, seColl, "ns/y")
	p2.mustACK(full(seColl, ses("z")...))
	assertNames(t, b.store, seColl, "ns/z")
}

func TestTriggerCollectionIsAnsweredUnimplementedAndTheStreamGoesOn(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "istio-source")
	// Istio's source clients open with the trigger before anything else, without a nonce.
	if err := p.stream.Send(&mcp.Resources{Collection: mcp.TriggerCollection}); err != nil {
		t.Fatal(err)
	}
	p.requests(len(DefaultCollections()))
	reply := p.recv()
	if reply.Collection != mcp.TriggerCollection || reply.ErrorDetail == nil ||
		codes.Code(reply.ErrorDetail.Code) != codes.Unimplemented {
		t.Fatalf("answer to the trigger: %v, want a NACK with code Unimplemented", reply)
	}
	p.mustACK(full(seColl, ses("a")...))
	assertNames(t, b.store, seColl, "ns/a")
}

func TestExpiryDeletesAnAbsentProducersResources(t *testing.T) {
	const expiry = 200 * time.Millisecond
	b := startSink(t, Options{Expiry: expiry})
	gone := dialProducer(t, b.addr, "gone")
	stays := dialProducer(t, b.addr, "stays")
	gone.requests(len(DefaultCollections()))
	stays.requests(len(DefaultCollections()))
	gone.mustACK(full(seColl, ses("g1", "g2")...))
	stays.mustACK(full(seColl, ses("s")...))

	closed := time.Now()
	gone.close()
	waitFor(t, b.store, "absent producer's resources deleted", func() bool { return len(names(b.store, seColl)) == 1 })
	if d := time.Since(closed); d < expiry {
		t.Fatalf("deleted %s after the disconnect, before the expiry of %s", d, expiry)
	}
	assertNames(t, b.store, seColl, "ns/s")
}

// A producer known only by its IP address expires after sink.anonymous_expiry even where named
// producers are kept for ever (sink.expiry 0).
func TestProducerKnownOnlyByItsAddressExpiresAfterTheAnonymousExpiry(t *testing.T) {
	const anonymous = 200 * time.Millisecond
	b := startSink(t, Options{AnonymousExpiry: anonymous})
	named := dialProducer(t, b.addr, "named")
	anon := dialProducer(t, b.addr, "")
	named.requests(len(DefaultCollections()))
	anon.requests(len(DefaultCollections()))
	named.mustACK(full(seColl, ses("n")...))
	anon.mustACK(full(seColl, ses("a")...))
	if owner := b.store.View().Get(seColl, "ns/a").Owner; owner != "ip:127.0.0.1" {
		t.Fatalf("anonymous producer's owner %q, want ip:127.0.0.1", owner)
	}

	closed := time.Now()
	anon.close()
	named.close()
	waitFor(t, b.store, "the anonymous producer's resources deleted", func() bool { return len(names(b.store, seColl)) == 1 })
	if d := time.Since(closed); d < anonymous {
		t.Fatalf("deleted %s after the disconnect, before the anonymous expiry of %s", d, anonymous)
	}
	assertStaysFor(t, 3*anonymous, func() bool { return len(names(b.store, seColl)) == 1 })
	assertNames(t, b.store, seColl, "ns/n")
}

func TestReconnectBeforeExpiryKeepsTheResources(t *testing.T) {
	const expiry = 200 * time.Millisecond
	b := startSink(t, Options{Expiry: expiry})
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	p.mustACK(full(seColl, ses("a")...))
	p.close()

	again := dialProducer(t, b.addr, "p")
	again.requests(len(DefaultCollections())) // the bridge counts the stream before it asks
	assertStaysFor(t, 3*expiry, func() bool { return len(names(b.store, seColl)) == 1 })

	// The reconnected stream's end arms the expiry again.
	again.close()
	waitFor(t, b.store, "resources deleted after the second disconnect", func() bool { return len(names(b.store, seColl)) == 0 })
}

func TestStopEndsStreamsWithUnavailable(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	b.server.Stop()
	select {
	case _, ok := <-p.got:
		if ok {
			t.Fatal("a message after Stop")
		}
	case <-time.After(waitTimeout):
		t.Fatal("stream still open after Stop")
	}
	<-p.done
	if status.Code(p.err) != codes.Unavailable {
		t.Fatalf("stream ended with %v, want Unavailable", p.err)
	}
}

func TestNewServerRefusesTwoNamesOfOneCollection(t *testing.T) {
	_, err := NewServer(Options{Store: newStore(), Collections: []Collection{{Name: seColl}, {Name: seAlias}}})
	if err == nil || !strings.Contains(err.Error(), seAlias) || !strings.Contains(err.Error(), seColl) {
		t.Fatalf("error %v, want one naming %s and %s", err, seAlias, seColl)
	}
	for _, bad := range []string{"", mcp.TriggerCollection} {
		if _, err := NewServer(Options{Store: newStore(), Collections: []Collection{{Name: bad}}}); err == nil {
			t.Fatalf("collection %q accepted", bad)
		}
	}
}

// assertStaysFor checks cond over a whole period: for state that must not change.
func assertStaysFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !cond() {
			t.Fatal("state changed within the period it had to hold")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A producer that reconnects is told what the bridge still holds from it, for every
// incremental collection (initial_resource_versions), so that it can send the removal of
// what it deleted while away; without that the deleted resource stayed served for ever.
func TestSinkTellsReconnectingProducerWhatItHolds(t *testing.T) {
	b := startSink(t, Options{})
	p := dialProducer(t, b.addr, "p")
	p.requests(len(DefaultCollections()))
	p.mustACK(&mcp.Resources{Collection: seColl, Incremental: true, Resources: ses("a", "b")})
	p.mustACK(&mcp.Resources{Collection: vsColl, Incremental: true, Resources: []*mcpapi.Resource{virtualService("ns/v", "v.example")}})
	want := map[string]string{}
	for _, name := range []string{"ns/a", "ns/b"} {
		want[name] = b.store.View().Get(seColl, name).Version
	}
	p.close()

	again := dialProducer(t, b.addr, "p")
	opening := map[string]*mcp.RequestResources{}
	for _, r := range again.requests(len(DefaultCollections())) {
		opening[r.Collection] = r
	}
	if got := opening[seColl].GetInitialResourceVersions(); !maps.Equal(got, want) {
		t.Fatalf("%s opened with initial versions %v, want %v", seColl, got, want)
	}
	if got := opening[vsColl].GetInitialResourceVersions(); len(got) != 1 || got["ns/v"] == "" {
		t.Fatalf("%s opened with initial versions %v, want ns/v", vsColl, got)
	}
	if got := opening[gwColl].GetInitialResourceVersions(); len(got) != 0 {
		t.Fatalf("%s, where the producer holds nothing, opened with %v, want none (full state)", gwColl, got)
	}
	// The producer deleted ns/b while away: it says so, incrementally, and ns/b goes.
	again.mustACK(&mcp.Resources{Collection: seColl, Incremental: true, RemovedResources: []string{"ns/b"}})
	assertNames(t, b.store, seColl, "ns/a")
}

// Dead owners shadow live ones: with sink.expiry 0, producer "a" (whose ID sorts first) that
// disconnected kept shadowing live producer "b"'s copy of the same name. A connected owner
// wins over a disconnected one; when "a" is back, the ID order holds again.
func TestConnectedOwnerWinsOverDisconnected(t *testing.T) {
	b := startSink(t, Options{})
	pa := dialProducer(t, b.addr, "a")
	pb := dialProducer(t, b.addr, "b")
	pa.requests(len(DefaultCollections()))
	pb.requests(len(DefaultCollections()))
	pa.mustACK(full(seColl, serviceEntry("ns/x", "a.example")))
	pb.mustACK(full(seColl, serviceEntry("ns/x", "b.example")))
	owner := func() string { return b.store.View().Get(seColl, "ns/x").Owner }
	if got := owner(); got != "producer:a" {
		t.Fatalf("both connected: %s served, want producer:a", got)
	}
	pa.close()
	eventually(t, "producer:b served once producer:a is gone", func() bool { return owner() == "producer:b" })
	again := dialProducer(t, b.addr, "a")
	again.requests(len(DefaultCollections()))
	again.mustACK(full(seColl, serviceEntry("ns/x", "a2.example")))
	if got := owner(); got != "producer:a" {
		t.Fatalf("a back: %s served, want producer:a", got)
	}
}
