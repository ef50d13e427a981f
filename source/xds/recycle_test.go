package xds

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpbridge/mcpbridge/source"
)

// TestLargePartsAreWrittenFromRecycledBytesIntact: the parts of a large response are encoded
// into pooled bytes that go back to the pool once gRPC has written them to every stream that
// got them, and later parts are encoded into those bytes. Three clients (two sharing their
// parts, one asking for other names) read two deliveries of 2,000 clusters, through a frame
// cache of one frame so that parts leave it while streams still send them: every cluster
// each client reads is the one the store holds at that delivery. Under the race detector
// freed bytes are overwritten (framepool_race.go), so a part read after its bytes were
// recycled would not decode, or would decode as other clusters.
func TestLargePartsAreWrittenFromRecycledBytesIntact(t *testing.T) {
	const limit, n = 256 << 10, 2000
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: limit, FrameCacheBytes: 1})
	want := bigClusters(n)
	s.putEnvoy(t, ClusterType, want)
	names := bigClusterNames(n)
	before := s.engine.Stats()
	a, b, c := newDeltaReceiving(t, s.addr, limit), newDeltaReceiving(t, s.addr, limit), newDeltaReceiving(t, s.addr, limit)
	a.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	b.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: names[100:]})
	clients := []*deltaClient{a, b, c}
	counts := []int{n, n, n - 100}
	readAll := func(delivery int) {
		t.Helper()
		held := make([]map[string]bool, len(clients))
		for i := range held {
			held[i] = map[string]bool{}
		}
		for done := false; !done; {
			done = true
			for i, cl := range clients {
				if len(held[i]) == counts[i] {
					continue
				}
				done = false
				m := cl.recv()
				for _, r := range m.Resources {
					var got cluster.Cluster
					if err := r.Resource.UnmarshalTo(&got); err != nil {
						t.Fatalf("delivery %d, client %d: %s does not decode: %v", delivery, i, r.Name, err)
					}
					if !proto.Equal(&got, want[r.Name]) {
						t.Fatalf("delivery %d, client %d: %s is not the stored cluster", delivery, i, r.Name)
					}
					held[i][r.Name] = true
				}
				cl.ack(m)
			}
		}
	}
	readAll(1)
	// Every cluster changes: the second delivery is encoded while, and after, the first one's
	// parts are written.
	for _, m := range want {
		m.(*cluster.Cluster).ConnectTimeout = durationpb.New(2 * time.Second)
	}
	s.putEnvoy(t, ClusterType, want)
	readAll(2)
	after := s.engine.Stats()
	encodes := after.Encodes - before.Encodes
	if encodes < 16 {
		t.Fatalf("2 MB of clusters, twice, in %d encodes of parts of at most 256 KiB", encodes)
	}
	if reused := after.FrameBuffersReused - before.FrameBuffersReused; reused == 0 {
		t.Fatalf("%d parts encoded, none into recycled bytes (%d allocated)", encodes, after.FrameBuffersAllocated-before.FrameBuffersAllocated)
	}
}
