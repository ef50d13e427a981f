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
	frames := newMemo(256, 16<<20, frameSize)
	beats := newMemo[beatContent](256, 0, nil)
	typ := Type{Collection: coll, Known: true, Mode: Incremental, Form: wire.FormAnyBody, WildcardCapable: true, TTL: ttl}
	machines := make([]*machine, streams)
	now := time.Now()
	for i := range machines { // the first response, ACKed: the first heartbeat is scheduled
		m := newMachine(machineConfig{protocol: "bench", types: func(*Request, *Node) Type { return typ }, beats: beats}, access{})
		fx := m.handle(event{req: &Request{Key: coll}, view: v, now: now})
		fx = m.handle(event{watched: fx.watch, view: v, now: now})
		if fx.refuse != nil || len(fx.sends) != 1 {
			b.Fatalf("first response: %v, %d", fx.refuse, len(fx.sends))
		}
		if fx = m.handle(event{req: &Request{Key: coll, Nonce: fx.sends[0].nonce}, view: v, now: now}); len(fx.sends) != 0 {
			b.Fatalf("%d responses to the ACK", len(fx.sends))
		}
		machines[i] = m
	}
	frameBytes := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(ttl / 2)
		if cold {
			frames = newMemo(256, 16<<20, frameSize)
			beats = newMemo[beatContent](256, 0, nil)
			for _, m := range machines {
				m.beats = beats
			}
		}
		for _, m := range machines {
			fx := m.handle(event{view: v, now: now})
			if len(fx.sends) != 1 {
				b.Fatalf("%d heartbeats in a round", len(fx.sends))
			}
			for _, o := range fx.sends {
				sub, p := o.sub, o.p
				f := frames.get(sub.withTTL(p.share), func() frame {
					p.msg.TTL = sub.ttl()
					return frame{body: benchDeltaLayout.Encode(&p.msg, sub.Form), resources: len(p.msg.Resources)}
				})
				if f.resources == 0 {
					b.Fatal("empty heartbeat")
				}
				frameBytes = len(f.body)
				_ = benchDeltaLayout.Tail(o.nonce)
				m.handle(event{req: &Request{Key: coll, Nonce: o.nonce}, view: v, now: now})
			}
		}
	}
	b.ReportMetric(float64(frameBytes), "frame-bytes")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(streams), "ns/stream")
}
