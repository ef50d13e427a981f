package scale

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/internal/freeport"
)

var (
	scaleN         = flag.Int("scale.n", 10000, "ServiceEntries in the scale benchmark")
	scaleFiles     = flag.Int("scale.files", 100, "files they are spread over")
	memoryLimit    = flag.String("scale.memory-limit", "", "the bridge's memory.limit (empty: its default)")
	cpuProfile     = flag.String("scale.cpu-profile", "", "BenchmarkScaleFromFiles: save the bridge's CPU profile of its first -scale.cpu-seconds into this file")
	editCPUProfile = flag.String("scale.edit-cpu-profile", "", "BenchmarkScaleFromFiles: save the bridge's CPU profile of 3 s from just before the edit into this file")
	largest        = flag.Bool("scale.largest", false, "BenchmarkScaleFromFiles: once the clients hold everything, report the size of the largest resource of each Envoy type (the port's route configuration holds a virtual host for every host)")
	cpuSeconds     = flag.Int("scale.cpu-seconds", 20, "BenchmarkScaleFromFiles: how long the CPU profile runs")
	deliveryCPU    = flag.String("scale.delivery-cpu-profile", "", "BenchmarkScaleFromFiles: save the bridge's CPU profile of -scale.cpu-seconds from /readyz 200 (the delivery to the clients) into this file")
	bridgeLogLevel = flag.String("scale.log-level", "warn", "the bridge process's log.level (debug shows each translation and what it took)")
	timelineEvery  = flag.Duration("scale.cpu-timeline", 0, "BenchmarkScaleFromFiles: log the CPU cores the bridge and the benchmark's clients used in each interval of this length, and the bridge's resident set, from the bridge's start to both clients holding everything (0: none); where the bridge uses fewer cores than the machine has, its work is serial")
	bridgeBin      = flag.String("scale.bin", "", "an mcpbridge binary to run (empty: build ./cmd/mcpbridge); for machines with no Go toolchain")
)

const (
	seType       = "networking.istio.io/v1alpha3/ServiceEntry"
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	routeType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
)

// BenchmarkScaleFromFiles is the black-box scale run (make bench-scale): N ServiceEntries in
// files, a real mcpbridge process, and two delta ADS clients on connections of their own, as
// the bridge's two kinds of consumers subscribe: an MCP-over-xDS client (istiod's
// configSources xds://: ServiceEntries by wildcard) and an Envoy-like client (clusters by
// wildcard, then the endpoints of every cluster by name, as Envoy subscribes). It reports
//
//   - s-to-ready: process start to /readyz 200;
//   - s-mcp-held, s-envoy-held: process start to each client holding every ServiceEntry, or
//     every cluster and endpoint assignment;
//   - s-ready-early: how long before the later client holds everything /readyz said 200
//     (negative: ready after);
//   - s-servable-after-ready: from /readyz 200 to a third client, which then asks by name for
//     outputs of the load (servableProbe), holding them; n-servable-missing, how many of
//     them it was first told do not exist (0: all were servable when asked);
//   - CPU-s and MiB-peak-RSS of the bridge up to then (CPU-s-kernel: the part of CPU-s spent
//     in the kernel, mostly page faults of fresh memory);
//   - ms-edit-to-served: from rewriting one file (each of its ServiceEntries gets one more
//     endpoint), the bridge idle, to both clients holding the new ServiceEntries and endpoints.
//
// With -scale.largest (make bench-scale sets it), after the edit, it also reports the
// figures of a client that takes port 8080's virtual hosts on demand (VHDS): s-vhds-route and
// B-vhds-route (its route configuration, which has none), s-vhds-all-held (every virtual
// host, from asking), B-largest-virtual-host, B-largest-vhds-response, MiB-RSS-with-vhds
// (the bridge's resident memory then), and ms-vhds-add-host and B-vhds-add-host-sent (one
// more ServiceEntry written to a new file: the time until the client holds its virtual host,
// and the bytes it was sent for it); then the largest resource of each Envoy type.
//
// -scale.cpu-profile FILE saves the bridge's CPU profile of its first -scale.cpu-seconds;
// -scale.delivery-cpu-profile FILE, of -scale.cpu-seconds from ready (what it takes the
// clients to be sent everything).
func BenchmarkScaleFromFiles(b *testing.B) {
	bin := buildBridge(b)
	n, files := *scaleN, *scaleFiles
	for range b.N {
		dir := b.TempDir()
		if err := Write(dir, n, files); err != nil {
			b.Fatal(err)
		}
		// Default limits: the Envoy client subscribes to every cluster's endpoints by name on
		// one stream (1,000,000 names at 1M), and both clients' requests count against one
		// peer's bucket (they share the loopback address).
		p := startBridgeWith(b, bin, dir, "", true)
		profiled := p.profileCPU(b, *cpuProfile, *cpuSeconds)
		timeline := startTimeline(p, *timelineEvery)
		mcpc := dialClientFor(b, p.grpcAddr, followMCP, n)
		envoyc := dialClientFor(b, p.grpcAddr, followEnvoy, n)
		probe := dialProbe(b, p.grpcAddr)
		ready := p.waitReady(b, 10*time.Minute)
		if *profilesInto != "" {
			// What was allocated up to the load, so that a diff with the heap profile saved at
			// the end shows the delivery's allocations, which set the peak RSS (-diff_base).
			p.saveProfileAs(b, *profilesInto, "allocs", "allocs-at-ready")
		}
		servable := probe.run(n)
		delivered := p.profileCPU(b, *deliveryCPU, *cpuSeconds)
		mcpHeld, envoyHeld := waitBoth(b, p, mcpc, envoyc, n)
		timeline.report(ready, mcpHeld, envoyHeld)
		rss, _ := PeakRSS(p.cmd.Process.Pid)
		user, system, _ := CPUTimes(p.cmd.Process.Pid)
		cpu := user + system
		if *profilesInto != "" {
			p.saveProfiles(b, *profilesInto, "heap", "goroutine")
			p.saveMetrics(b, *profilesInto)
		}
		b.ReportMetric(ready.Seconds(), "s-to-ready")
		b.ReportMetric(mcpHeld.Seconds(), "s-mcp-held")
		b.ReportMetric(envoyHeld.Seconds(), "s-envoy-held")
		b.ReportMetric((max(mcpHeld, envoyHeld) - ready).Seconds(), "s-ready-early")
		probed := <-servable
		if probed.err != nil {
			b.Fatalf("the probe of what is servable once ready: %v", probed.err)
		}
		b.ReportMetric(probed.took.Seconds(), "s-servable-after-ready")
		b.ReportMetric(float64(probed.missing), "n-servable-missing")
		b.ReportMetric(float64(rss)/(1<<20), "MiB-peak-RSS")
		b.ReportMetric(float64(rss)/float64(n), "B-RSS-per-SE")
		b.ReportMetric(cpu.Seconds(), "CPU-s")
		b.ReportMetric(system.Seconds(), "CPU-s-kernel")
		// The collector's part of it, as the runtime estimates it (an overestimate: pauses
		// count every P), up to its last cycle.
		if gc, err := p.metric("go_cpu_classes_gc_total_cpu_seconds_total"); err == nil {
			b.ReportMetric(gc, "GC-CPU-s")
		} else {
			b.Logf("no garbage collector CPU: %v", err)
		}
		<-profiled
		<-delivered

		// Edit one file, once the bridge is idle (as an operator's edit finds it): every
		// ServiceEntry in it gets a fourth endpoint.
		waitIdle(p.cmd.Process.Pid, time.Minute)
		editProfiled := p.profileCPU(b, *editCPUProfile, 3)
		if *editCPUProfile != "" {
			time.Sleep(200 * time.Millisecond) // the profile has started
		}
		editAndWait(b, []*client{mcpc, envoyc}, dir, n, files)
		<-editProfiled
		if *largest {
			// A client that takes port 8080's virtual hosts on demand (VHDS), after the
			// edit, so that the figures above are those of the two clients alone, and before
			// anything asks for the port's whole route configuration, so that adding a host
			// costs what it costs VHDS alone.
			vc := startVHDS(b, p.grpcAddr, n)
			if rss, err := RSS(p.cmd.Process.Pid); err == nil {
				b.ReportMetric(float64(rss)/(1<<20), "MiB-RSS-with-vhds")
			}
			vc.addHost(b, dir, n, files)
			vc.close()
			reportLargest(b, p.grpcAddr)
		}
		p.stop(b)
		mcpc.close()
		envoyc.close()
	}
}

// cpuTimeline samples the CPU time of the bridge and of this process (the clients) at each
// tick, to show which stretches of a load run on fewer cores than the machine has.
type cpuTimeline struct {
	every   time.Duration
	stop    chan struct{}
	done    chan struct{}
	samples []cpuSample
}

// cpuSample is the CPU time each side had used when the bridge had run for at, and the
// bridge's resident set then (VmRSS at the tick, to show when the peak comes; the peak itself,
// which may fall between ticks, is the benchmark's peak-RSS).
type cpuSample struct {
	at, bridge, clients time.Duration
	rss                 int64
}

func startTimeline(p *bridgeProcess, every time.Duration) *cpuTimeline {
	if every <= 0 {
		return nil
	}
	t := &cpuTimeline{every: every, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			bridge, _ := CPU(p.cmd.Process.Pid)
			clients, _ := CPU(os.Getpid())
			rss, _ := RSS(p.cmd.Process.Pid)
			t.samples = append(t.samples, cpuSample{time.Since(p.started), bridge, clients, rss})
			select {
			case <-t.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return t
}

// report stops the sampling and logs, per interval between samples, the cores each side used,
// with the moments the run measures (from the bridge's start) marked in their interval.
func (t *cpuTimeline) report(marks ...time.Duration) {
	if t == nil {
		return
	}
	close(t.stop)
	<-t.done
	names := []string{"ready", "mcp held", "envoy held"}
	var out strings.Builder
	fmt.Fprintf(&out, "CPU timeline (cores used in each interval of about %v, ending at the time shown, from the bridge's start; the bridge's resident set at its end):\n", t.every)
	for i := 1; i < len(t.samples); i++ {
		prev, cur := t.samples[i-1], t.samples[i]
		span := float64(cur.at - prev.at)
		fmt.Fprintf(&out, "%7.2fs bridge %4.2f clients %4.2f RSS %5.0f MiB", cur.at.Seconds(), float64(cur.bridge-prev.bridge)/span, float64(cur.clients-prev.clients)/span, float64(cur.rss)/(1<<20))
		for j, m := range marks {
			if m > prev.at && m <= cur.at {
				fmt.Fprintf(&out, "  <- %s", names[j])
			}
		}
		out.WriteByte('\n')
	}
	fmt.Fprint(os.Stderr, out.String()) // b.Log keeps ten lines of a benchmark's log
}

// reportLargest asks, on a stream of its own and decoding the responses whole, for the
// resources of each Envoy type that grow with the mesh or stand for a host's: the port's
// route configuration (a virtual host per HTTP host), its outbound listener, and host 0's
// cluster, load assignment, route configuration and API listener; and reports each type's
// largest resource in bytes, and how many of the names were first answered as missing (0: each
// was waited for until built).
func reportLargest(b *testing.B, addr string) {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	want := map[string][]string{
		routeType:    {"8080", Cluster(0)},
		listenerType: {"0.0.0.0_8080", Host(0) + ":8080"},
		clusterType:  {Cluster(0)},
		endpointType: {Cluster(0)},
	}
	for typ, names := range want {
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: &corepb.Node{Id: "bench~largest"}, TypeUrl: typ, ResourceNamesSubscribe: names}); err != nil {
			b.Fatal(err)
		}
	}
	sizes := map[string]int{}
	seen := map[string]int{}
	missing := map[string]bool{} // the names answered without a body at least once
	asked := 0
	for _, names := range want {
		asked += len(names)
	}
	for len(seen) < asked {
		resp, err := stream.Recv()
		if err != nil {
			b.Fatalf("largest: %v (have %v)", err, seen)
		}
		for _, r := range resp.Resources {
			if r.GetResource() == nil {
				// Sent as missing: what a request holds was not built before the request
				// went on (it waits while the bridge translates, up to ScopeBuildWaitMax).
				// It follows once written; a real proxy would have been told meanwhile that
				// the resource does not exist.
				missing[resp.TypeUrl+" "+r.Name] = true
				continue
			}
			n := proto.Size(r.GetResource())
			sizes[resp.TypeUrl] = max(sizes[resp.TypeUrl], n)
			seen[resp.TypeUrl+" "+r.Name] = n
		}
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}); err != nil {
			b.Fatal(err)
		}
	}
	for typ, unit := range map[string]string{routeType: "B-largest-route", listenerType: "B-largest-listener", clusterType: "B-largest-cluster", endpointType: "B-largest-endpoints"} {
		b.ReportMetric(float64(sizes[typ]), unit)
	}
	b.ReportMetric(float64(len(missing)), "n-largest-sent-missing")
	b.Logf("largest resources: %v", seen)
}

// waitBoth waits until each client holds everything, and returns the times from the
// process's start at which each did.
func waitBoth(b *testing.B, p *bridgeProcess, mcpc, envoyc *client, n int) (mcpHeld, envoyHeld time.Duration) {
	b.Helper()
	mcpc.waitHolding(b, n, nil, 10*time.Minute)
	envoyc.waitHolding(b, n, nil, 10*time.Minute)
	return mcpc.heldAllAt(b).Sub(p.started), envoyc.heldAllAt(b).Sub(p.started)
}

// editAndWait rewrites file 0 (each of its ServiceEntries gets one more endpoint) and
// reports the time until every client holds what it follows of the new ServiceEntries and
// endpoints.
func editAndWait(b *testing.B, cs []*client, dir string, n, files int) {
	befores := make([]map[string]map[string]string, len(cs))
	for i, c := range cs {
		befores[i] = c.versions()
	}
	edited := time.Now()
	count, err := WriteFile(dir, n, files, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	for i, c := range cs {
		c.waitHolding(b, n, func(h *holdings) bool { return h.changedIn(befores[i], 0, files, n) == count }, time.Minute)
	}
	b.ReportMetric(time.Since(edited).Seconds()*1000, "ms-edit-to-served")
}

// profileCPU saves the bridge's CPU profile of its first seconds into file (nothing when
// file is empty); the channel closes once it is saved.
func (p *bridgeProcess) profileCPU(b *testing.B, file string, seconds int) <-chan struct{} {
	done := make(chan struct{})
	if file == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.httpAddr, seconds)
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			resp, err := http.Get(url)
			if err != nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				err = os.WriteFile(file, data, 0o644)
			}
			if err != nil {
				b.Errorf("CPU profile: %v", err)
			}
			return
		}
		b.Errorf("CPU profile: the bridge's HTTP server did not answer")
	}()
	return done
}

// waitIdle waits until the process uses less than 2% of a CPU over 200 ms, or timeout.
func waitIdle(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	last, _ := CPU(pid)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		now, _ := CPU(pid)
		if now-last < 4*time.Millisecond {
			return
		}
		last = now
	}
}

// buildBridge builds the mcpbridge binary once per run, or returns -scale.bin's.
func buildBridge(b *testing.B) string {
	b.Helper()
	if *bridgeBin != "" {
		bin, err := filepath.Abs(*bridgeBin)
		if err != nil {
			b.Fatalf("-scale.bin: %v", err)
		}
		if _, err := os.Stat(bin); err != nil {
			b.Fatalf("-scale.bin: %v", err)
		}
		return bin
	}
	bin := filepath.Join(b.TempDir(), "mcpbridge")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/mcpbridge/mcpbridge/cmd/mcpbridge")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("go build: %v", err)
	}
	return bin
}

type bridgeProcess struct {
	cmd                *exec.Cmd
	started            time.Time
	grpcAddr, httpAddr string
	exited             chan struct{}
}

// startBridge starts mcpbridge serve on free loopback ports, with the files of dir as its
// source (none when dir is empty).
func startBridge(b *testing.B, bin, dir string) *bridgeProcess {
	b.Helper()
	return startBridgeWith(b, bin, dir, "", false)
}

// loopbackLimits lift the per-peer limits for benchmarks whose many clients all come from
// loopback, standing for proxies on many machines (10,000 idle streams), or whose producer
// pushes as fast as it is answered: the limits would measure themselves.
const loopbackLimits = `limits:
  streams_per_peer: 100000
  requests_per_second: 1000000
  request_burst: 1000000
`

// startBridgeWith is startBridge with more configuration (YAML, top-level keys), and the
// default limits when defaultLimits is true (else loopbackLimits).
func startBridgeWith(b *testing.B, bin, dir, extra string, defaultLimits bool) *bridgeProcess {
	b.Helper()
	addrs := freeport.Addrs(b, 2)
	p := &bridgeProcess{grpcAddr: addrs[0], httpAddr: addrs[1], exited: make(chan struct{})}
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	files := ""
	if dir != "" {
		files = fmt.Sprintf("  files: [%s]\n", dir)
	}
	limits := loopbackLimits
	if defaultLimits {
		limits = ""
	}
	os.WriteFile(cfg, fmt.Appendf(nil, `grpc:
  address: %s
http:
  address: %s
log:
  level: %s
sources:
%s  startup_timeout: 5m
%s%s`, p.grpcAddr, p.httpAddr, *bridgeLogLevel, files, limits, extra), 0o644)
	p.cmd = exec.Command(bin, "serve", "--config", cfg)
	if *memoryLimit != "" {
		p.cmd.Env = append(os.Environ(), "MCPBRIDGE_MEMORY_LIMIT="+*memoryLimit)
	}
	p.cmd.Stderr = os.Stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with a killed benchmark
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	// A benchmark that fails before stop leaves no bridge behind, loaded with a million
	// services and taking the CPU of every run after it.
	b.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitReady asks /readyz every 5 ms (a client's view of readiness; the bridge itself does not poll).
func (p *bridgeProcess) waitReady(b *testing.B, timeout time.Duration) time.Duration {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.httpAddr + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(p.started)
			}
		}
		select {
		case <-p.exited:
			b.Fatal("mcpbridge exited")
		case <-time.After(5 * time.Millisecond):
		}
	}
	b.Fatal("not ready")
	return 0
}

// saveProfiles saves the bridge's profiles (/debug/pprof/NAME) as DIR/NAME.pb.gz.
func (p *bridgeProcess) saveProfiles(b *testing.B, dir string, names ...string) {
	b.Helper()
	for _, name := range names {
		p.saveProfileAs(b, dir, name, name)
	}
}

// saveProfileAs saves the bridge's profile name as DIR/FILE.pb.gz.
func (p *bridgeProcess) saveProfileAs(b *testing.B, dir, name, file string) {
	b.Helper()
	query := ""
	if name == "heap" {
		query = "?gc=1" // what is live now: without a collection first, as of the last one
	}
	resp, err := http.Get("http://" + p.httpAddr + "/debug/pprof/" + name + query)
	if err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file+".pb.gz"), data, 0o644); err != nil {
		b.Fatal(err)
	}
}

// collectGarbage makes the bridge run a garbage collection (a heap profile with gc=1 runs one
// first), as an idle process does every two minutes.
func (p *bridgeProcess) collectGarbage(b *testing.B) {
	b.Helper()
	resp, err := http.Get("http://" + p.httpAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// saveMetrics saves the bridge's /metrics as DIR/metrics.txt (the Go runtime's memory
// figures are there: stacks, heap, GC).
func (p *bridgeProcess) saveMetrics(b *testing.B, dir string) {
	b.Helper()
	resp, err := http.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.txt"), data, 0o644); err != nil {
		b.Fatal(err)
	}
}

// metric reads one unlabelled sample of the bridge's /metrics.
func (p *bridgeProcess) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return strconv.ParseFloat(value, 64)
		}
	}
	return 0, fmt.Errorf("%s is not in /metrics", name)
}

func (p *bridgeProcess) stop(b *testing.B) {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		b.Error("mcpbridge did not stop on SIGINT")
	}
}

// holdings is what the client holds: per type, name → version.
type holdings struct {
	held map[string]map[string]string
}

// changedIn counts the ServiceEntries of file whose every followed form (ServiceEntry,
// endpoint assignment) the holdings hold at a version other than before's.
func (h *holdings) changedIn(before map[string]map[string]string, file, files, n int) int {
	changed := 0
	for i := file; i < n; i += files {
		if h.changed(before, seType, Name(i)) && h.changed(before, endpointType, Cluster(i)) {
			changed++
		}
	}
	return changed
}

// changed is true when typ is not followed, or name is held at another version than before.
func (h *holdings) changed(before map[string]map[string]string, typ, name string) bool {
	held, followed := h.held[typ]
	if !followed {
		return true
	}
	v, ok := held[name]
	return ok && v != before[typ][name]
}

// follow is what a client subscribes to.
type follow int

const (
	// followAll: ServiceEntries and clusters by wildcard, endpoints by cluster name.
	followAll follow = iota
	// followMCP: ServiceEntries by wildcard (istiod's configSources xds://).
	followMCP
	// followEnvoy: clusters by wildcard, endpoints by cluster name (Envoy).
	followEnvoy
)

// types are the wildcard subscriptions of f and the types it holds.
func (f follow) types() (wildcard, held []string) {
	switch f {
	case followMCP:
		return []string{seType}, []string{seType}
	case followEnvoy:
		return []string{clusterType}, []string{clusterType, endpointType}
	}
	return []string{seType, clusterType}, []string{seType, clusterType, endpointType}
}

// client is one delta ADS stream that ACKs every response and follows the clusters with
// endpoint subscriptions, as Envoy does.
type client struct {
	follow follow
	// heldAll is when the client first held every resource of the workload (n), as its
	// stream saw it (the waiter may look later).
	heldAll time.Time
	n       int
	conn    *grpc.ClientConn
	cancel  context.CancelFunc
	mu      sync.Mutex
	h       holdings
	updated chan struct{}
	err     error
	done    chan struct{}
}

// retryQuickly has a client that dials before the bridge listens try again every few
// milliseconds, not after gRPC's default backoff (1 s at first), which would be the
// client's time, not the bridge's.
var retryQuickly = grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 20 * time.Millisecond}})

// dialClient dials a client that follows everything (followAll).
func dialClient(b *testing.B, addr string) *client { return dialClientFor(b, addr, followAll, 0) }

// dialClientFor dials a client of its own connection that follows f and, for n > 0, notes
// when it first holds the resources of n ServiceEntries (heldAllAt).
func dialClientFor(b *testing.B, addr string, f follow, n int) *client {
	b.Helper()
	// The client dials before the bridge listens, as a proxy started with it would.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)), withLeanCodec(), retryQuickly)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{follow: f, n: n, conn: conn, cancel: cancel, updated: make(chan struct{}, 1), done: make(chan struct{}),
		h: holdings{held: map[string]map[string]string{}}}
	_, held := f.types()
	for _, t := range held {
		// Sized for the workload: grown from empty, the maps of a million names were
		// rehashed over and over on the client's one receiving goroutine, which after
		// /readyz is what the delivery waits on.
		c.h.held[t] = make(map[string]string, n)
	}
	go func() {
		defer close(c.done)
		err := c.run(ctx)
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		c.notify()
	}()
	return c
}

func (c *client) notify() {
	select {
	case c.updated <- struct{}{}:
	default:
	}
}

func (c *client) run(ctx context.Context) error {
	var stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	var err error
	// The bridge may not listen yet: retry the stream until it does.
	for {
		stream, err = discovery.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	wildcard, _ := c.follow.types()
	for _, t := range wildcard {
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t}); err != nil {
			return err
		}
	}
	edsOpen := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		var newClusters []string
		c.mu.Lock()
		held := c.h.held[resp.TypeUrl]
		for _, r := range resp.Resources {
			if resp.TypeUrl == clusterType {
				if _, ok := held[r.Name]; !ok {
					newClusters = append(newClusters, r.Name)
				}
			}
			held[r.Name] = r.Version
		}
		for _, name := range resp.RemovedResources {
			delete(held, name)
		}
		if c.heldAll.IsZero() && c.n > 0 && c.holdsAll(c.n) {
			c.heldAll = time.Now()
		}
		c.mu.Unlock()
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}); err != nil {
			return err
		}
		if len(newClusters) > 0 || (resp.TypeUrl == clusterType && !edsOpen) {
			edsOpen = true
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: endpointType, ResourceNamesSubscribe: newClusters}); err != nil {
				return err
			}
		}
		c.notify()
	}
}

// waitHolding waits until the client holds n ServiceEntries, n of the generated clusters and
// their endpoints, and cond holds.
func (c *client) waitHolding(b *testing.B, n int, cond func(*holdings) bool, timeout time.Duration) {
	b.Helper()
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		ok := c.err == nil && c.holdsAll(n) && (cond == nil || cond(&c.h))
		err := c.err
		c.mu.Unlock()
		if ok {
			return
		}
		if err != nil {
			b.Fatalf("client stream: %v", err)
		}
		select {
		case <-c.updated:
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			b.Fatalf("after %v the client holds %d ServiceEntries, %d clusters, %d endpoint assignments (want %d)",
				timeout, len(c.h.held[seType]), len(c.h.held[clusterType]), len(c.h.held[endpointType]), n)
		}
	}
}

// heldAllAt is when the client first held the resources of the ServiceEntries it was dialled
// for (dialClientFor's n), as its stream saw them; call it once waitHolding returned.
func (c *client) heldAllAt(b *testing.B) time.Time {
	b.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.heldAll.IsZero() {
		b.Fatal("heldAllAt: the client never held everything it was dialled for")
	}
	return c.heldAll
}

func (c *client) holdsAll(n int) bool {
	for _, m := range c.h.held {
		if len(m) < n {
			return false
		}
	}
	// The counts may include other resources: check the generated ones by name (first, last).
	for _, i := range []int{0, n - 1} {
		for typ, name := range map[string]string{seType: Name(i), clusterType: Cluster(i), endpointType: Cluster(i)} {
			if m, followed := c.h.held[typ]; followed {
				if _, ok := m[name]; !ok {
					return false
				}
			}
		}
	}
	return true
}

func (c *client) versions() map[string]map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[string]string{}
	for t, m := range c.h.held {
		out[t] = make(map[string]string, len(m))
		for k, v := range m {
			out[t][k] = v
		}
	}
	return out
}

func (c *client) close() {
	c.cancel()
	<-c.done
	c.conn.Close()
}
