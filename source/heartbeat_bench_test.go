package source

import (
	"fmt"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

var benchDeltaLayout = wire.NewLayout(&discovery.DeltaDiscoveryResponse{}, wire.Roles{
	Version: "system_version_info", Resources: "resources", Key: "type_url", Removed: "removed_resources",
	Nonce: "nonce", DeltaResource: &discovery.Resource{},
})

// BenchmarkHeartbeatRound10kResources1000Streams: one heartbeat round of 1,000 delta streams,
// each holding the same 10,000 resources by wildcard: per stream, the machine's heartbeat,
// the shared encoding (read and encoded once for all), the nonce, and the client's ACK. What
// gRPC then spends writing the frames is not in it (a frame per stream, its size reported).
// absent: half the resources belong to a disconnected producer and are left out. cold: the
// heartbeat is not in the frame cache (the state changed since the last round, or the cache
// moved on), so one stream reads the collection and encodes it; warm, every stream reuses the
// last round's encoding, as it does while nothing changes.
func BenchmarkHeartbeatRound10kResources1000Streams(b *testing.B) {
	for _, cold := range []bool{false, true} {
		for _, absent := range []bool{false, true} {
			b.Run(fmt.Sprintf("cold=%v/absent=%v", cold, absent), func(b *testing.B) { benchHeartbeatRound(b, 10_000, 1_000, absent, cold) })
		}
	}
}

func benchHeartbeatRound(b *testing.B, resources, streams int, absent, cold bool) {
	const coll, ttl = "type.googleapis.com/bench.Resource", 30 * time.Second
	st := store.New(store.Options{})
	var byOwner [2][]*mcpapi.Resource
	for i := range resources {
		body, _ := anypb.New(wrapperspb.String(fmt.Sprintf("body of resource %d, about a hundred bytes long like a small cluster ......", i)))
		byOwner[i%2] = append(byOwner[i%2], &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: fmt.Sprintf("ns-%d/resource-%d", i%100, i)}, Body: body})
	}
	for i, owner := range []string{"even", "odd"} {
		if _, err := st.Apply(owner, store.Update{Collection: coll, Resources: byOwner[i]}); err != nil {
			b.Fatal(err)
		}
	}
	if absent {
		if _, err := st.SetOwnerPresent("odd", false); err != nil {
			b.Fatal(err)
		}
	}
	v := st.View()
	var frames frameCache
	frames.init(256, 16<<20)
	machines := make([]*machine, streams)
	for i := range machines {
		m := newMachine("bench")
		m.request(&Request{Key: coll, Collection: coll, Known: true, Mode: Incremental, Form: wire.FormAnyBody, WildcardCapable: true, TTL: ttl}, time.Time{})
		due, err := m.due(v)
		if err != nil || len(due) != 1 {
			b.Fatalf("first response: %v, %d", err, len(due))
		}
		m.request(&Request{Key: coll, Collection: coll, Mode: Incremental, Nonce: due[0].nonce}, time.Time{})
		machines[i] = m
	}
	now := time.Now()
	for _, m := range machines { // schedules the first heartbeat
		m.heartbeats(v, now, nil)
	}
	frameBytes := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(ttl / 2)
		if cold {
			frames.init(256, 16<<20)
		}
		for _, m := range machines {
			due, _ := m.heartbeats(v, now, func() *liveness { return livenessOf(v, nil) })
			for _, c := range due {
				sub, p := c.sub, c.p
				body, n := frames.get(sub.withTTL(p.share), func() ([]byte, counts) {
					p.materialize()
					p.msg.TTL = sub.ttl
					return benchDeltaLayout.Encode(&p.msg, sub.form), counts{resources: len(p.msg.Resources), withheld: p.withheld}
				})
				if n.resources == 0 {
					b.Fatal("empty heartbeat")
				}
				frameBytes = len(body)
				nonce := m.heartbeatSent(sub)
				_ = benchDeltaLayout.Tail(nonce)
				m.request(&Request{Key: coll, Collection: coll, Mode: Incremental, Nonce: nonce}, time.Time{})
			}
		}
	}
	b.ReportMetric(float64(frameBytes), "frame-bytes")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(streams), "ns/stream")
}
