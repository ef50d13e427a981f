package xds

import (
	"maps"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpbridge/mcpbridge/source"
)

// waitForStats waits until the engine's counters satisfy ok, and fails the test after 10 s.
func waitForStats(t *testing.T, s *server, what string, ok func(source.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(s.engine.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s; stats %+v", what, s.engine.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNextPartIsEncodedWhileTheClientReadsThePartBefore: while a delta client reads one part of
// a split response (and before it answers), the bridge encodes the next, so that the client's
// round trip hides the encoding; the next part's send then uses that encoding. Every part is
// encoded once, and the client holds every cluster once, as sent without the prefetch.
func TestNextPartIsEncodedWhileTheClientReadsThePartBefore(t *testing.T) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	s.putEnvoy(t, ClusterType, bigClusters(300))
	before := s.engine.Stats()
	c := newLimitedDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	held := map[string]bool{}
	parts := 0
	for len(held) < 300 {
		m := c.recv()
		parts++
		for _, r := range m.Resources {
			if held[r.Name] {
				t.Fatalf("part %d sends %s again", parts, r.Name)
			}
			held[r.Name] = true
		}
		if len(held) < 300 {
			waitForStats(t, s, "the next part encoded before the client answers", func(st source.Stats) bool {
				return st.Encodes-before.Encodes == uint64(parts+1) && st.Prefetches-before.Prefetches == uint64(parts)
			})
		}
		c.ack(m)
	}
	c.quiet(100 * time.Millisecond)
	after := s.engine.Stats()
	if parts < 5 {
		t.Fatalf("300 KiB of clusters in %d responses of at most 64 KiB", parts)
	}
	if enc, hits := after.Encodes-before.Encodes, after.FrameHits-before.FrameHits; enc != uint64(parts) || hits != uint64(parts-1) {
		t.Fatalf("%d parts: %d encodes and %d sends of an encoding made ahead, want %d and %d", parts, enc, hits, parts, parts-1)
	}
}

// TestAPartChangedAfterItWasEncodedAheadIsReadAgain: a cluster of the next part changes after
// that part was encoded ahead and before the client answers: the part then sent leaves it out
// (nextPart's rule, CONTRACT.md's "a later change goes in the next response"), and the next
// response carries its new version. The encoding made ahead, with the old version, is never sent.
func TestAPartChangedAfterItWasEncodedAheadIsReadAgain(t *testing.T) {
	s, c, names, part1 := secondPartEncodedAhead(t, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	changed := names[len(part1.Resources)] // the first cluster of the second part
	s.putEnvoy(t, ClusterType, map[string]proto.Message{changed: &cluster.Cluster{Name: changed, ConnectTimeout: durationpb.New(7 * time.Second)}})
	c.ack(part1)
	timeouts := map[string]time.Duration{}
	for _, r := range part1.Resources {
		timeouts[r.Name] = connectTimeout(t, r)
	}
	for len(timeouts) < 300 || timeouts[changed] != 7*time.Second {
		m := c.recv()
		for _, r := range m.Resources {
			if r.Name == changed && connectTimeout(t, r) != 7*time.Second {
				t.Fatalf("%s sent at its version before the change, encoded ahead (%s)", changed, connectTimeout(t, r))
			}
			timeouts[r.Name] = connectTimeout(t, r)
		}
		c.ack(m)
	}
}

// TestAPartEncodedAheadIsNotSentWhenTheClientDroppedSomeOfIt: the client gives up a cluster of
// the next part after that part was encoded ahead: the part sent leaves it out.
func TestAPartEncodedAheadIsNotSentWhenTheClientDroppedSomeOfIt(t *testing.T) {
	_, c, names, part1 := secondPartEncodedAhead(t, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: bigClusterNames(300)})
	dropped := names[len(part1.Resources)+1]
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesUnsubscribe: []string{dropped}})
	c.ack(part1)
	held := len(part1.Resources)
	for held < 299 {
		m := c.recv()
		for _, r := range m.Resources {
			if r.Name == dropped {
				t.Fatalf("%s sent after the client gave it up", dropped)
			}
		}
		held += len(m.Resources)
		c.ack(m)
	}
	c.quiet(100 * time.Millisecond)
}

// TestStreamsSharingPartsShareTheirEncodingAhead: two clients at the same revision are sent the
// same parts; each part is encoded once for both, ahead or not.
func TestStreamsSharingPartsShareTheirEncodingAhead(t *testing.T) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	s.putEnvoy(t, ClusterType, bigClusters(300))
	before := s.engine.Stats()
	a, b := newLimitedDelta(t, s.addr), newLimitedDelta(t, s.addr)
	a.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	b.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	parts := 0
	for held := 0; held < 300; {
		ma, mb := a.recv(), b.recv()
		if !proto.Equal(ma, mb) {
			t.Fatalf("part %d differs between the clients", parts+1)
		}
		parts++
		held += len(ma.Resources)
		a.ack(ma)
		b.ack(mb)
	}
	if enc := s.engine.Stats().Encodes - before.Encodes; enc != uint64(parts) {
		t.Fatalf("%d parts to two clients: %d encodes, want %d", parts, enc, parts)
	}
}

// secondPartEncodedAhead serves 300 clusters in parts to a client that asks with req, and
// returns once it holds the first part and the second was encoded ahead; names are the
// clusters' names, sorted.
func secondPartEncodedAhead(t *testing.T, req *discovery.DeltaDiscoveryRequest) (s *server, c *deltaClient, names []string, part1 *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	s = startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	s.putEnvoy(t, ClusterType, bigClusters(300))
	before := s.engine.Stats()
	c = newLimitedDelta(t, s.addr)
	c.send(req)
	part1 = c.recv()
	waitForStats(t, s, "the second part encoded ahead", func(st source.Stats) bool {
		return st.Prefetches-before.Prefetches == 1 && st.Encodes-before.Encodes == 2
	})
	return s, c, bigClusterNames(300), part1
}

// bigClusterNames are the names of bigClusters(n), sorted.
func bigClusterNames(n int) []string { return slices.Sorted(maps.Keys(bigClusters(n))) }

func connectTimeout(t *testing.T, r *discovery.Resource) time.Duration {
	t.Helper()
	var c cluster.Cluster
	if err := r.Resource.UnmarshalTo(&c); err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	return c.ConnectTimeout.AsDuration()
}

// TestAPartEncodedAheadSurvivesTheFrameCacheBounds: the frame memo keeps few frames
// (Options.FrameCacheBytes), and streams sending parts of their own push each other's out.
// A part encoded ahead is held by its stream until sent, so no part is encoded twice.
func TestAPartEncodedAheadSurvivesTheFrameCacheBounds(t *testing.T) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit, FrameCacheBytes: 1})
	s.putEnvoy(t, ClusterType, bigClusters(300))
	names := bigClusterNames(300)
	before := s.engine.Stats()
	// Different names, so different keys: nothing is shared between the two.
	a, b := newLimitedDelta(t, s.addr), newLimitedDelta(t, s.addr)
	a.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: names[:290]})
	b.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: names[10:]})
	parts := 0
	heldA, heldB := 0, 0
	for heldA < 290 || heldB < 290 {
		if heldA < 290 {
			m := a.recv()
			heldA += len(m.Resources)
			parts++
			a.ack(m)
		}
		if heldB < 290 {
			m := b.recv()
			heldB += len(m.Resources)
			parts++
			b.ack(m)
		}
	}
	after := s.engine.Stats()
	if after.Prefetches-before.Prefetches == 0 {
		t.Fatal("no part was encoded ahead")
	}
	if enc := after.Encodes - before.Encodes; enc != uint64(parts) {
		t.Fatalf("%d parts to two clients with a frame cache of one frame: %d encodes, want %d", parts, enc, parts)
	}
}
