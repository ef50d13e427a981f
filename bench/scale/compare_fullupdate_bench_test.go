package scale

// BenchmarkCompareFullUpdate: mcpbridge against go-control-plane's LinearCache on one workload
// (from the issue tracker), each server in its own process, one after the other in the same run:
//
//	go test -run '^$' -bench CompareFullUpdate -benchtime 3x ./bench/scale/
//
// A full update of 1,000 services of 10 endpoints each (every endpoint changes: its port and
// its version label) reaches 200 delta ADS streams, each subscribed explicitly to the 1,000
// ClusterLoadAssignments outbound|8080||HOST. The streams are 200 gRPC connections, one each
// (as 200 proxies would be), in the benchmark's process; they read only type URL, nonce,
// names and versions of the responses (withLeanCodec), so that they take little of the two
// cores the servers are measured on, and ACK every response. A stream holds the update once
// every one of its 1,000 names has a version (delta Resource.version) other than the one it
// held before the update.
//
// What is timed, and what the server CPU covers, per side:
//
//   - mcpbridge (a real `mcpbridge serve`, config: loopback addresses, no files): the update is
//     a producer's push of all 1,000 ServiceEntries, generation g+1 (a full state) to its
//     istio.mcp.v1alpha1.ResourceSink. The push message is built and encoded before the timer
//     (grpc.PreparedMsg); the timer starts as it is written to the stream. In the interval
//     the bridge receives and decodes the push, validates and stores the ServiceEntries, ACKs
//     the producer, translates them (clusters, routes and listeners come out unchanged; the
//     1,000 ClusterLoadAssignments all change), versions, encodes and stores what changed,
//     and sends it to the 200 streams.
//   - go-control-plane (bench/scale/gcpserver: its ADS server, pkg/server/v3, over a
//     LinearCache of ClusterLoadAssignments): the update is an HTTP POST /apply?gen=G on
//     loopback; the timer starts as it is sent. In the interval the server builds the 1,000
//     assignments of generation G (the same messages mcpbridge derives, checked at setup) and
//     calls UpdateResources once, which computes each stream's response (encoding each
//     assignment once, deterministically, and hashing it into its delta version); the streams
//     send them. It neither receives, decodes, validates nor translates Istio config: there
//     is none.
//
// Both intervals end when the last of the 200 streams holds the new version of all 1,000
// assignments. Server CPU is the server process's user+system time (/proc/PID/stat, in 10 ms
// ticks) over that interval; settle CPU runs on until the server is idle again (below 4 ms of
// CPU over 200 ms), so it adds what the update left to do after the last delivery: the 200
// ACKs, and a garbage collection if one runs by then. Before each update the streams hold the
// previous generation, each server is idle (every ACK processed; go-control-plane: a watch
// open per stream), and the benchmark's process has collected its garbage. Both servers have
// gRPC's default transport settings and GOMAXPROCS (the machine's cores); mcpbridge has its
// default configuration otherwise (xds.push_interval 100ms: the update is the first change
// after a quiet interval, so it goes at once).
//
// Metrics per server (medians over the iterations):
//   - last-ms: from the update's start to the last stream holding it (ns/op: its mean);
//     first-ms: to the first stream holding it.
//   - server-cpu-ms: the server's CPU over that interval; settle-cpu-ms: on until idle.
//   - ack-ms: the update's call returning (mcpbridge: the producer's ACK, once the push is
//     stored; go-control-plane: the HTTP answer, once UpdateResources returned).
//   - client-cpu-ms: the benchmark's process over the interval (the 200 streams, mostly).
//   - others-cpu-ms: every other process on the machine, and steal, over the interval
//     (/proc/stat less the server's and the benchmark's processes): when it is not near 0, someone else ran and the
//     times are suspect.
//   - resp/op, res/op, MB/op: responses, resources and bytes the 200 streams received.
//
// A last sub-benchmark reports the ratios mcpbridge / go-control-plane of the medians.
//
// -scale.compare-profiles DIR saves each server's CPU profile (/debug/pprof/profile, 3 s from
// just before the update) of each update (generation G) as DIR/mcpbridge-cpu-G.pb.gz and
// DIR/go-control-plane-cpu-G.pb.gz; go tool pprof merges several. Profiling costs a little
// CPU: compare those runs' figures with care.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/freeport"
)

var (
	compareProfiles     = flag.String("scale.compare-profiles", "", "BenchmarkCompareFullUpdate: save each server's CPU profile of each update into this directory")
	comparePushInterval = flag.String("scale.compare-push-interval", "", "BenchmarkCompareFullUpdate: mcpbridge's xds.push_interval (empty: its default)")
	compareBridgeBin    = flag.String("scale.compare-bin", "", "BenchmarkCompareFullUpdate: an mcpbridge binary to run (empty: build ./cmd/mcpbridge)")
)

const (
	fuServices = 1000
	fuStreams  = 200
	// fuDeadline bounds every wait: start-up, a delivery, the server settling, shutdown.
	fuDeadline = time.Minute
)

// fuNames are the assignments' names, Cluster(i).
var fuNames = func() []string {
	out := make([]string, fuServices)
	for i := range out {
		out[i] = Cluster(i)
	}
	return out
}()

// fuResult is one server's medians.
type fuResult struct{ last, cpu, settleCPU float64 }

func BenchmarkCompareFullUpdate(b *testing.B) {
	defer goleak.VerifyNone(b, goleak.IgnoreCurrent())
	dir := b.TempDir() // binaries, config and the processes' files live as long as the benchmark
	results := map[string]fuResult{}
	servers := []struct {
		name  string
		start func(b *testing.B, e *fuEnv, dir string)
	}{
		{"mcpbridge", startFUBridge},
		{"go-control-plane", startFUGCP},
	}
	for _, s := range servers {
		// The framework may call a sub-benchmark more than once (N=1, then N=3 for -benchtime
		// 3x): the server and its streams are set up at the first call, and stopped after the
		// last.
		var env *fuEnv
		b.Run(s.name, func(b *testing.B) {
			b.StopTimer()
			if env == nil {
				env = &fuEnv{name: s.name, failed: make(chan struct{})}
				s.start(b, env, dir)
			}
			results[s.name] = env.run(b)
		})
		if env != nil {
			env.close(b)
		}
	}
	m, ok1 := results["mcpbridge"]
	g, ok2 := results["go-control-plane"]
	if !ok1 || !ok2 {
		return
	}
	logged := false
	b.Run("mcpbridge-over-go-control-plane", func(b *testing.B) {
		b.ReportMetric(m.last/g.last, "last-x")
		b.ReportMetric(m.cpu/g.cpu, "server-cpu-x")
		b.ReportMetric(m.settleCPU/g.settleCPU, "settle-cpu-x")
		if logged {
			return
		}
		logged = true
		b.Logf("last delivery: mcpbridge %.0f ms, go-control-plane %.0f ms (x%.2f); server CPU to it: %.0f ms, %.0f ms (x%.2f); to idle: %.0f ms, %.0f ms (x%.2f)",
			m.last, g.last, m.last/g.last, m.cpu, g.cpu, m.cpu/g.cpu, m.settleCPU, g.settleCPU, m.settleCPU/g.settleCPU)
	})
}

// fuEnv is one server process with its producer (or control endpoint) and 200 streams.
type fuEnv struct {
	name    string
	proc    *fuProcess
	closers []func() // undo the setup, last first
	// prepare builds, before the timer, what the update of generation gen sends; the function
	// it returns sends it and waits for the server's answer.
	prepare func(b *testing.B, gen int) func() error
	// settled reports whether the server has processed every ACK, as far as it tells (nil: no
	// way to ask but its CPU).
	settled func() (bool, string)
	clients []*fuClient
	gen     int // the generation last applied

	responses, resources, removed, bytes atomic.Int64

	failOnce sync.Once
	failed   chan struct{}
	err      error // set before failed closes
}

func (e *fuEnv) fail(err error) {
	e.failOnce.Do(func() {
		e.err = err
		close(e.failed)
	})
}

// startFUBridge starts `mcpbridge serve` with no files, a producer pushing generation 0 to its
// ResourceSink, and the streams.
func startFUBridge(b *testing.B, e *fuEnv, dir string) {
	bin := *compareBridgeBin
	if bin == "" {
		bin = goBuild(b, dir, "mcpbridge", "github.com/mcpbridge/mcpbridge/cmd/mcpbridge")
	}
	addrs := freeport.Addrs(b, 2)
	grpcAddr, httpAddr := addrs[0], addrs[1]
	cfg := fmt.Sprintf("grpc:\n  address: %s\nhttp:\n  address: %s\nlog:\n  level: warn\n", grpcAddr, httpAddr)
	if *comparePushInterval != "" {
		cfg += fmt.Sprintf("xds:\n  push_interval: %s\n", *comparePushInterval)
	}
	cfgPath := filepath.Join(dir, "mcpbridge.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	e.proc = startFUProcess(b, e, "mcpbridge", grpcAddr, httpAddr, bin, "serve", "--config", cfgPath)
	e.proc.waitReady(b)

	p := dialProducer(b, grpcAddr)
	e.closers = append(e.closers, p.close)
	e.prepare = func(b *testing.B, gen int) func() error {
		rs := make([]*mcpapi.Resource, fuServices)
		for i := range rs {
			body := &anypb.Any{}
			if err := anypb.MarshalFrom(body, FullUpdateServiceEntry(i, gen), proto.MarshalOptions{Deterministic: true}); err != nil {
				b.Fatal(err)
			}
			rs[i] = &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: Name(i)}, Body: body}
		}
		p.nonce++
		nonce := strconv.Itoa(p.nonce)
		msg := &grpc.PreparedMsg{}
		if err := msg.Encode(p.stream, &mcp.Resources{Collection: seCollection, Nonce: nonce, Resources: rs}); err != nil {
			b.Fatal(err)
		}
		return func() error {
			if err := p.stream.SendMsg(msg); err != nil {
				return err
			}
			for {
				m, err := p.stream.Recv()
				if err != nil {
					return err
				}
				if m.ResponseNonce == nonce {
					if m.ErrorDetail != nil {
						return fmt.Errorf("NACK: %s", m.ErrorDetail.Message)
					}
					return nil
				}
			}
		}
	}
	e.setUp(b)
}

// startFUGCP starts the go-control-plane server program, has it apply generation 0, and
// starts the streams.
func startFUGCP(b *testing.B, e *fuEnv, dir string) {
	bin := goBuild(b, dir, "gcpserver", "github.com/mcpbridge/mcpbridge/bench/scale/gcpserver")
	addrs := freeport.Addrs(b, 2)
	grpcAddr, httpAddr := addrs[0], addrs[1]
	e.proc = startFUProcess(b, e, "go-control-plane", grpcAddr, httpAddr, bin,
		"-grpc", grpcAddr, "-http", httpAddr, "-n", strconv.Itoa(fuServices))
	e.proc.waitReady(b)
	e.prepare = func(_ *testing.B, gen int) func() error {
		return func() error {
			_, err := e.proc.call(http.MethodPost, "/apply?gen="+strconv.Itoa(gen))
			return err
		}
	}
	e.settled = func() (bool, string) {
		body, err := e.proc.call(http.MethodGet, "/watches")
		if err != nil {
			return false, err.Error()
		}
		n, _ := strconv.Atoi(string(body))
		return n == fuStreams, fmt.Sprintf("%d of %d watches open", n, fuStreams)
	}
	e.setUp(b)
}

// setUp applies generation 0, checks two of the assignments the server serves, starts the
// streams and waits until each holds all 1,000 and the server is idle.
func (e *fuEnv) setUp(b *testing.B) {
	b.Helper()
	if err := e.prepare(b, e.gen)(); err != nil {
		b.Fatalf("generation 0: %v", err)
	}
	e.checkServed(b, 0, fuServices-1)
	ph := newFUPhase()
	for i := range fuStreams {
		conn, err := grpc.NewClient(e.proc.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.ForceCodecV2(fuCodec{&e.bytes})))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &fuClient{env: e, id: i, conn: conn, cancel: cancel, exited: make(chan struct{}), have: make(map[string]string, fuServices)}
		c.expect(ph)
		e.clients = append(e.clients, c)
		go c.run(ctx)
	}
	if err := e.await(ph); err != nil {
		b.Fatalf("initial state: %v", err)
	}
	if err := e.settle(); err != nil {
		b.Fatalf("initial state: %v", err)
	}
}

// checkServed fetches the named assignments on a stream of its own, decoding them in full,
// and checks that they are FullUpdateAssignment's (the same on both sides).
func (e *fuEnv) checkServed(b *testing.B, indexes ...int) {
	b.Helper()
	conn, err := grpc.NewClient(e.proc.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), fuDeadline)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	want := map[string]*endpoint.ClusterLoadAssignment{}
	var names []string
	for _, i := range indexes {
		want[Cluster(i)] = FullUpdateAssignment(i, e.gen)
		names = append(names, Cluster(i))
	}
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: endpointType, ResourceNamesSubscribe: names}); err != nil {
		b.Fatal(err)
	}
	for len(want) > 0 {
		m, err := stream.Recv()
		if err != nil {
			b.Fatalf("%s: checking the served assignments: %v", e.name, err)
		}
		for _, r := range m.Resources {
			if r.Resource == nil {
				continue // does not exist (yet: mcpbridge ACKs the push before translating it)
			}
			got := &endpoint.ClusterLoadAssignment{}
			if err := r.Resource.UnmarshalTo(got); err != nil {
				b.Fatalf("%s: %s: %v", e.name, r.Name, err)
			}
			if !proto.Equal(got, want[r.Name]) {
				b.Fatalf("%s serves %s as\n%s\nwant\n%s", e.name, r.Name, prototext.Format(got), prototext.Format(want[r.Name]))
			}
			delete(want, r.Name)
		}
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce}); err != nil {
			b.Fatal(err)
		}
	}
}

// run is b.N updates, each timed from the update's start to the last stream holding it.
func (e *fuEnv) run(b *testing.B) fuResult {
	b.StopTimer()
	var first, last, cpu, settleCPU, ack, clientCPU, othersCPU []float64
	resp0, res0, removed0, bytes0 := e.responses.Load(), e.resources.Load(), e.removed.Load(), e.bytes.Load()
	pid := e.proc.cmd.Process.Pid
	for range b.N {
		e.gen++
		send := e.prepare(b, e.gen)
		ph := newFUPhase()
		for _, c := range e.clients {
			c.expect(ph)
		}
		var profiled chan error
		if *compareProfiles != "" {
			profiled = e.proc.profile(filepath.Join(*compareProfiles, fmt.Sprintf("%s-cpu-%d.pb.gz", e.name, e.gen)), 3)
			time.Sleep(100 * time.Millisecond) // the profile has started
		}
		runtime.GC() // none of the benchmark's garbage collected on the update's time
		cpu0, err := CPU(pid)
		if err != nil {
			b.Fatal(err)
		}
		self0, busy0 := cpuTime(), machineBusy()
		b.StartTimer()
		start := time.Now()
		err = send()
		acked := time.Since(start)
		if err == nil {
			err = e.await(ph)
		}
		b.StopTimer()
		cpu1, _ := CPU(pid)
		self1, busy1 := cpuTime(), machineBusy()
		if err != nil {
			b.Fatalf("%s generation %d: %v", e.name, e.gen, err)
		}
		var done, firstDone time.Time
		for _, c := range e.clients {
			c.mu.Lock()
			if c.doneAt.After(done) {
				done = c.doneAt
			}
			if firstDone.IsZero() || c.doneAt.Before(firstDone) {
				firstDone = c.doneAt
			}
			c.mu.Unlock()
		}
		if err := e.settle(); err != nil {
			b.Fatalf("%s generation %d: %v", e.name, e.gen, err)
		}
		cpu2, _ := CPU(pid)
		if profiled != nil {
			if err := <-profiled; err != nil {
				b.Fatal(err)
			}
		}
		last = append(last, ms(done.Sub(start)))
		first = append(first, ms(firstDone.Sub(start)))
		cpu = append(cpu, ms(cpu1-cpu0))
		settleCPU = append(settleCPU, ms(cpu2-cpu0))
		ack = append(ack, ms(acked))
		clientCPU = append(clientCPU, ms(self1-self0))
		othersCPU = append(othersCPU, ms(busy1-busy0-(cpu1-cpu0)-(self1-self0)))
	}
	n := float64(b.N)
	r := fuResult{last: median(last), cpu: median(cpu), settleCPU: median(settleCPU)}
	b.ReportMetric(median(first), "first-ms")
	b.ReportMetric(r.last, "last-ms")
	b.ReportMetric(r.cpu, "server-cpu-ms")
	b.ReportMetric(r.settleCPU, "settle-cpu-ms")
	b.ReportMetric(median(ack), "ack-ms")
	b.ReportMetric(median(clientCPU), "client-cpu-ms")
	b.ReportMetric(median(othersCPU), "others-cpu-ms")
	b.ReportMetric(float64(e.responses.Load()-resp0)/n, "resp/op")
	b.ReportMetric(float64(e.resources.Load()-res0)/n, "res/op")
	b.ReportMetric(float64(e.bytes.Load()-bytes0)/n/1e6, "MB/op")
	if r := e.removed.Load() - removed0; r > 0 {
		b.Errorf("%d removed_resources received, none expected", r)
	}
	return r
}

// machineBusy is the CPU time all processors have spent not idle (/proc/stat: user, nice,
// system, irq, softirq, steal), in 10 ms ticks.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	fields := strings.Fields(string(line))
	var busy int64
	for i, f := range fields {
		if i == 0 || i == 4 || i == 5 || i > 8 { // "cpu", idle, iowait, guest (counted in user)
			continue
		}
		n, _ := strconv.ParseInt(f, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// await waits until every stream holds the phase's update.
func (e *fuEnv) await(ph *fuPhase) error {
	t := time.NewTimer(fuDeadline)
	defer t.Stop()
	select {
	case <-ph.done:
		return nil
	case <-e.failed:
		return e.err
	case <-e.proc.exited:
		return fmt.Errorf("%s exited", e.name)
	case <-t.C:
		return fmt.Errorf("%d of %d streams do not hold the update after %s", ph.left.Load(), fuStreams, fuDeadline)
	}
}

// settle waits until the server says it has processed every ACK (when it can tell) and its
// CPU is idle: below 4 ms over 200 ms, as waitIdle.
func (e *fuEnv) settle() error {
	deadline := time.Now().Add(fuDeadline)
	for e.settled != nil {
		ok, state := e.settled()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not settled after %s: %s", e.name, fuDeadline, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
	pid := e.proc.cmd.Process.Pid
	last, err := CPU(pid)
	if err != nil {
		return err
	}
	for time.Now().Before(deadline) {
		select {
		case <-e.failed:
			return e.err
		case <-time.After(200 * time.Millisecond):
		}
		now, err := CPU(pid)
		if err != nil {
			return err
		}
		if now-last < 4*time.Millisecond {
			return nil
		}
		last = now
	}
	return fmt.Errorf("%s still busy after %s", e.name, fuDeadline)
}

// close ends the streams and their connections, then the producer, then the server.
func (e *fuEnv) close(b *testing.B) {
	for _, c := range e.clients {
		c.cancel()
	}
	for _, c := range e.clients {
		select {
		case <-c.exited:
		case <-time.After(fuDeadline):
			b.Errorf("%s: stream %d did not end", e.name, c.id)
		}
		c.conn.Close()
	}
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// fuPhase is what the streams wait for: every stream holding a new version of every name.
type fuPhase struct {
	left atomic.Int64 // streams not done yet
	done chan struct{}
}

func newFUPhase() *fuPhase {
	ph := &fuPhase{done: make(chan struct{})}
	ph.left.Store(fuStreams)
	return ph
}

// fuClient is one delta ADS stream on a connection of its own, subscribed to the 1,000
// assignments by name, ACKing every response.
type fuClient struct {
	env    *fuEnv
	id     int
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	exited chan struct{}

	mu      sync.Mutex
	have    map[string]string // version held, per name
	pending map[string]string // names of the phase not yet held anew: the version held before
	ph      *fuPhase
	doneAt  time.Time
}

// expect makes ph what the client waits for: a version other than the one held now, of
// every name.
func (c *fuClient) expect(ph *fuPhase) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ph, c.doneAt = ph, time.Time{}
	c.pending = make(map[string]string, len(fuNames))
	for _, n := range fuNames {
		c.pending[n] = c.have[n]
	}
}

func (c *fuClient) receive(m *discovery.DeltaDiscoveryResponse) {
	c.env.responses.Add(1)
	c.env.resources.Add(int64(len(m.Resources)))
	c.env.removed.Add(int64(len(m.RemovedResources)))
	c.mu.Lock()
	finished := false
	for _, r := range m.Resources {
		c.have[r.Name] = r.Version
		if old, ok := c.pending[r.Name]; ok && r.Version != old {
			delete(c.pending, r.Name)
			if len(c.pending) == 0 {
				c.doneAt = time.Now()
				finished = true
			}
		}
	}
	for _, n := range m.RemovedResources {
		delete(c.have, n)
	}
	ph := c.ph
	c.mu.Unlock()
	if finished && ph.left.Add(-1) == 0 {
		close(ph.done)
	}
}

func (c *fuClient) run(ctx context.Context) {
	defer close(c.exited)
	ended := func(err error) {
		if ctx.Err() == nil {
			c.env.fail(fmt.Errorf("stream %d: %w", c.id, err))
		}
	}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		ended(err)
		return
	}
	err = stream.Send(&discovery.DeltaDiscoveryRequest{
		Node: &core.Node{Id: fmt.Sprintf("bench-%d", c.id)}, TypeUrl: endpointType, ResourceNamesSubscribe: fuNames,
	})
	if err != nil {
		ended(err)
		return
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			ended(err)
			return
		}
		if m.TypeUrl != endpointType {
			c.env.fail(fmt.Errorf("stream %d: a response of type %q", c.id, m.TypeUrl))
			return
		}
		c.receive(m)
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce}); err != nil {
			ended(err)
			return
		}
	}
}

// fuCodec is leanCodec, counting the bytes of the messages it reads.
type fuCodec struct{ n *atomic.Int64 }

func (fuCodec) Name() string { return leanCodec{}.Name() }

func (fuCodec) Marshal(v any) (mem.BufferSlice, error) { return leanCodec{}.Marshal(v) }

func (c fuCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.n.Add(int64(data.Len()))
	return leanCodec{}.Unmarshal(data, v)
}

// goBuild builds a main package into dir/name.
func goBuild(b *testing.B, dir, name, pkg string) string {
	b.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("go build %s: %v", pkg, err)
	}
	return bin
}

// fuProcess is a server process with a gRPC and an HTTP address on loopback.
type fuProcess struct {
	name               string
	cmd                *exec.Cmd
	grpcAddr, httpAddr string
	exited             chan struct{}
	client             *http.Client
}

// startFUProcess starts a server; the env's closers stop it. It dies with the benchmark's
// thread that started it (Pdeathsig), so that a killed benchmark leaves no server behind.
func startFUProcess(b *testing.B, e *fuEnv, name, grpcAddr, httpAddr, bin string, args ...string) *fuProcess {
	b.Helper()
	p := &fuProcess{name: name, grpcAddr: grpcAddr, httpAddr: httpAddr, exited: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{}, Timeout: fuDeadline}}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = os.Stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	e.closers = append(e.closers, func() { p.stop(b) })
	return p
}

// call makes an HTTP request of the server and returns the body of its 2xx answer.
func (p *fuProcess) call(method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode/100 != 2 {
		err = fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(body))
	}
	return body, err
}

// waitReady asks /readyz every 5 ms until it answers 200.
func (p *fuProcess) waitReady(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(fuDeadline)
	for {
		_, err := p.call(http.MethodGet, "/readyz")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not ready after %s: %v", p.name, fuDeadline, err)
		}
		select {
		case <-p.exited:
			b.Fatalf("%s exited", p.name)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// profile saves the server's CPU profile over the next seconds into path.
func (p *fuProcess) profile(path string, seconds int) chan error {
	done := make(chan error, 1)
	go func() {
		body, err := p.call(http.MethodGet, "/debug/pprof/profile?seconds="+strconv.Itoa(seconds))
		if err == nil {
			err = os.WriteFile(path, body, 0o644)
		}
		done <- err
	}()
	return done
}

// stop stops the server with SIGINT, or kills it after fuDeadline.
func (p *fuProcess) stop(b *testing.B) {
	p.client.CloseIdleConnections()
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(fuDeadline):
		p.cmd.Process.Kill()
		<-p.exited
		b.Errorf("%s did not stop on SIGINT", p.name)
	}
	if st := p.cmd.ProcessState; st != nil && !st.Success() {
		b.Logf("%s: %v", p.name, st)
	}
}
