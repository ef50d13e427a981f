package source

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/store"
)

// fleet is n ResourceSource sinks over a few loopback connections, each ACKing every response
// and reporting when it received a given resource version.
type fleet struct {
	streams  []grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources]
	received chan time.Time
	want     atomic.Value // map[string]bool: the versions to report
	wg       sync.WaitGroup
	cancel   context.CancelFunc
}

func startFleet(tb testing.TB, addr string, n, conns int) *fleet {
	return startFleetWith(tb, addr, n, conns, nil)
}

// startFleetWith starts a fleet whose sink i sends the annotations annotate(i) (nil: none).
func startFleetWith(tb testing.TB, addr string, n, conns int, annotate func(i int) map[string]string) *fleet {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{received: make(chan time.Time, n), cancel: cancel}
	f.expect()
	var cc []*grpc.ClientConn
	for range conns {
		cc = append(cc, dialTB(tb, addr))
	}
	firsts := make(chan struct{}, n)
	for i := range n {
		stream, err := mcp.NewResourceSourceClient(cc[i%conns]).EstablishResourceStream(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		node := &mcp.SinkNode{Id: fmt.Sprint("sink-", i)}
		if annotate != nil {
			node.Annotations = annotate(i)
		}
		stream.Send(&mcp.RequestResources{Collection: seColl, Incremental: true, SinkNode: node})
		f.streams = append(f.streams, stream)
		f.wg.Go(func() { f.serve(stream, firsts) })
	}
	for range n {
		select {
		case <-firsts:
		case <-time.After(30 * time.Second):
			tb.Fatal("fleet did not receive its first responses")
		}
	}
	return f
}

func (f *fleet) serve(stream grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources], firsts chan<- struct{}) {
	first := true
	for {
		m, err := stream.Recv()
		if err != nil {
			return
		}
		want := f.want.Load().(map[string]bool)
		for _, r := range m.Resources {
			if want[r.Metadata.Version] {
				f.received <- time.Now()
			}
		}
		stream.Send(&mcp.RequestResources{Collection: m.Collection, ResponseNonce: m.Nonce})
		if first {
			first = false
			firsts <- struct{}{}
		}
	}
}

// expect sets the versions whose arrival each stream reports.
func (f *fleet) expect(versions ...string) {
	want := map[string]bool{}
	for _, v := range versions {
		want[v] = true
	}
	f.want.Store(want)
}

func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
}

func dialTB(tb testing.TB, addr string) *grpc.ClientConn { return dialTest(tb, addr) }

// Each body is marshalled once per version (by the store), and each response once per
// revision range, however many streams receive it.
func TestEachChangeIsEncodedOnceForEveryStream(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a")
	const n = 50
	f := startFleet(t, b.addr, n, 5)
	defer f.stop()
	waitIdle(t, b.engine, n)

	before, storeBefore := b.engine.Stats(), b.store.Stats()
	r := b.store
	res := serviceEntry("ns/changed", "changed.example")
	f.expect(versionOf(t, res))
	if _, err := r.Apply("test", store.Update{Collection: seColl, Resources: []*mcpapi.Resource{res}}); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case <-f.received:
		case <-time.After(10 * time.Second):
			t.Fatal("not every stream received the change")
		}
	}
	after, storeAfter := b.engine.Stats(), b.store.Stats()
	if got := storeAfter.Marshals - storeBefore.Marshals; got != 1 {
		t.Errorf("the changed resource was marshalled %d times, want once", got)
	}
	if got := after.Encodes - before.Encodes; got != 1 {
		t.Errorf("the response was encoded %d times for %d streams, want once", got, n)
	}
	if got := after.FrameHits - before.FrameHits; got != n-1 {
		t.Errorf("%d streams reused the encoded response, want %d", got, n-1)
	}
}

// Views do not multiply the encoding by the streams: streams of one view share its response,
// so a change is encoded once per distinct view, and each stream gets only its namespace's.
func TestEachChangeIsEncodedOncePerView(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns-0/a")
	const n, views = 50, 5
	f := startFleetWith(t, b.addr, n, 5, func(i int) map[string]string {
		return map[string]string{NodeNamespacesKey: fmt.Sprint("ns-", i%views)}
	})
	defer f.stop()
	waitIdle(t, b.engine, n)

	before := b.engine.Stats()
	var rs []*mcpapi.Resource
	var versions []string
	for v := range views {
		res := serviceEntry(fmt.Sprintf("ns-%d/changed", v), fmt.Sprintf("changed-%d.example", v))
		rs, versions = append(rs, res), append(versions, versionOf(t, res))
	}
	f.expect(versions...)
	if _, err := b.store.Apply("test", store.Update{Collection: seColl, Resources: rs}); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case <-f.received:
		case <-time.After(10 * time.Second):
			t.Fatal("not every stream received its namespace's change")
		}
	}
	waitIdle(t, b.engine, n)
	select {
	case <-f.received:
		t.Fatal("a stream received a change outside its view")
	default:
	}
	after := b.engine.Stats()
	if got := after.Encodes - before.Encodes; got != views {
		t.Errorf("the change was encoded %d times for %d streams in %d views, want once a view", got, n, views)
	}
	if got := after.FrameHits - before.FrameHits; got != n-views {
		t.Errorf("%d streams reused an encoded response, want %d", got, n-views)
	}
}

// versionOf is the version the store gives a resource without one: its content hash.
func versionOf(t testing.TB, r *mcpapi.Resource) string {
	t.Helper()
	s := store.New(store.Options{})
	res, err := s.Apply("x", store.Update{Collection: "c", Resources: []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: r.Metadata.Name}, Body: r.Body}}})
	if err != nil || res.Changed != 1 {
		t.Fatal(err)
	}
	return s.View().Get("c", r.Metadata.Name).Version
}

// waitIdle waits until n streams are connected with nothing unacknowledged.
func waitIdle(tb testing.TB, eng *Engine, n int) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		clients := eng.Clients()
		idle := 0
		for _, c := range clients {
			if len(c.Subscriptions) == 1 && c.Subscriptions[0].Pending == "" && c.Subscriptions[0].SentVersion != "" {
				idle++
			}
		}
		if idle == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.Fatalf("streams not idle within 30s")
}

// BenchmarkFanOut1000Streams: one change delivered to 1,000 subscribed ResourceSource streams
// over loopback gRPC. Reports p50, p99 and the last stream's delivery time. Allocations and
// bytes are the whole process's (server and the 1,000 clients decoding) per delivered resource.
func BenchmarkFanOut1000Streams(b *testing.B) { benchFanOut(b, 0) }

// BenchmarkFanOut1000StreamsViews: the same 1,000 streams, each narrowed to one of 10
// namespaces (100 streams a view, MCPBRIDGE_NAMESPACES), and a change of one resource in each
// namespace: every stream receives the one of its view. BenchmarkFanOut1000Streams10Changes
// is the same change without views (every stream receives all 10): the cost of views is the
// difference. encodes/op counts the responses encoded per change: one per distinct view.
func BenchmarkFanOut1000StreamsViews(b *testing.B)     { benchFanOut(b, 10) }
func BenchmarkFanOut1000Streams10Changes(b *testing.B) { benchFanOut(b, -10) }

// benchFanOut: views > 0 narrows the streams to that many namespaces and changes one resource
// in each; views < 0 changes -views resources in as many namespaces, without views; 0 changes
// one resource.
func benchFanOut(b *testing.B, views int) {
	br := startBridge(b)
	const n = 1000
	br.put(b, seColl, "ns/a")
	changes := max(views, -views, 1)
	var annotate func(int) map[string]string
	if views > 0 {
		annotate = func(i int) map[string]string { return map[string]string{NodeNamespacesKey: fmt.Sprint("ns-", i%views)} }
	}
	f := startFleetWith(b, br.addr, n, 20, annotate)
	defer f.stop()
	waitIdle(b, br.engine, n)
	received := n // reports per change: each stream reports every expected version it gets
	if views < 0 {
		received = n * changes
	}

	var p50s, p99s, lasts []time.Duration
	encodes := br.engine.Stats().Encodes
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		var rs []*mcpapi.Resource
		var versions []string
		for c := range changes {
			name := "ns/changed"
			if changes > 1 {
				name = fmt.Sprintf("ns-%d/changed", c)
			}
			res := serviceEntry(name, fmt.Sprintf("changed-%d-%d.example", i, c))
			rs, versions = append(rs, res), append(versions, versionOf(b, res))
		}
		f.expect(versions...)
		b.StartTimer()
		start := time.Now()
		if _, err := br.store.Apply("test", store.Update{Collection: seColl, Resources: rs}); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, received)
		for range received {
			select {
			case at := <-f.received:
				lat = append(lat, at.Sub(start))
			case <-time.After(30 * time.Second):
				b.Fatal("not every stream received the change")
			}
		}
		b.StopTimer()
		slices.Sort(lat)
		p50s, p99s, lasts = append(p50s, lat[len(lat)/2]), append(p99s, lat[len(lat)*99/100]), append(lasts, lat[len(lat)-1])
		waitIdle(b, br.engine, n) // every ACK in before the next change
		b.StartTimer()
	}
	b.ReportMetric(ms(median(p50s)), "p50-ms")
	b.ReportMetric(ms(median(p99s)), "p99-ms")
	b.ReportMetric(ms(median(lasts)), "last-ms")
	b.ReportMetric(float64(br.engine.Stats().Encodes-encodes)/float64(b.N), "encodes/op")
	b.ReportMetric(0, "ns/op") // the per-op time includes the waits; the latencies above are the figures
}

// BenchmarkFirstFullState10k: the first full state of 10,000 ServiceEntries to one new stream:
// time to the response, and the peak heap growth while it is built and sent.
func BenchmarkFirstFullState10k(b *testing.B) {
	br := startBridge(b)
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%d/svc-%d", i%50, i)
	}
	br.put(b, seColl, names...)
	conn := dialTest(b, br.addr)
	var peak uint64
	b.ReportAllocs()
	for b.Loop() {
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		stopSampling := sampleHeap(&peak)
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx, grpc.MaxCallRecvMsgSize(64<<20))
		if err != nil {
			b.Fatal(err)
		}
		stream.Send(&mcp.RequestResources{Collection: seColl})
		m, err := stream.Recv()
		if err != nil || len(m.Resources) != 10000 {
			b.Fatalf("first response: %d resources, %v", len(m.GetResources()), err)
		}
		cancel()
		stopSampling()
		if peak > base.HeapAlloc {
			b.ReportMetric(float64(peak-base.HeapAlloc)/(1<<20), "peak-heap-MiB")
		}
	}
}

// sampleHeap records the highest HeapAlloc until stopped. (A benchmark's own measurement; no
// part of the bridge polls.)
func sampleHeap(peak *uint64) func() {
	*peak = 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > *peak {
				*peak = ms.HeapAlloc
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkIdleStreamMemory: memory held per idle subscribed stream, once 1,000 ResourceSource
// streams have their first response ACKed. The figure is process-wide, so it is an upper bound
// for the bridge: it includes both ends of each stream (the client and its gRPC buffers live in
// this process too).
func BenchmarkIdleStreamMemory(b *testing.B) {
	const n = 1000
	for b.Loop() {
		br := startBridge(b)
		br.put(b, seColl, "ns/a", "ns/b", "ns/c")
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		f := startFleet(b, br.addr, n, 20)
		waitIdle(b, br.engine, n)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/idle-stream")
		// Goroutine stacks are not heap: the bridge runs three per stream (handler, loop, receiver).
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-bytes/idle-stream")

		f.stop()
	}
}
