package source_test

import (
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/mcpbridge/mcpbridge/source"
)

// TestAStreamEndingMidSplitDropsThePartEncodedAhead: a client that goes away while the next
// part of a split response is encoded ahead for it leaves nothing holding that part's frame
// (its stream drops it as it ends), so that the frame's pooled bytes go back to the pool once
// the memo lets the frame go, rather than to the garbage collector.
func TestAStreamEndingMidSplitDropsThePartEncodedAhead(t *testing.T) {
	w, tr := reproServerWith(t, source.Options{MaxResponseSize: 150}) // one load assignment per part
	a, b := modelHosts[0], modelHosts[2]
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{a: true, b: true}}); err != nil {
		t.Fatal(err)
	}
	eng := tr.eng
	before := eng.Stats()
	c := newDeltaHolder(t, tr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeOf("split"), TypeUrl: typeEndpoint,
		ResourceNamesSubscribe: []string{clusterOf(a), clusterOf(b)}})
	if part1 := c.take(tr); len(part1) != 1 {
		t.Fatalf("want the first part, got %d responses", len(part1))
	}
	deadline := time.Now().Add(10 * time.Second)
	for eng.Stats().Prefetches == before.Prefetches || source.FrameHolds(eng) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the second part not encoded ahead and held after 10s: %d holds", source.FrameHolds(eng))
		}
		time.Sleep(time.Millisecond)
	}
	c.st.Close()
	for source.FrameHolds(eng) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d holds on the memo's frames 10s after the only stream ended, want none", source.FrameHolds(eng))
		}
		time.Sleep(time.Millisecond)
	}
}
