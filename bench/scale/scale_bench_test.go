package scale

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	scaleN      = flag.Int("scale.n", 10000, "ServiceEntries in the scale benchmark")
	scaleFiles  = flag.Int("scale.files", 100, "files they are spread over")
	memoryLimit = flag.String("scale.memory-limit", "", "the bridge's memory.limit (empty: its default)")
)

const (
	seType       = "networking.istio.io/v1alpha3/ServiceEntry"
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// BenchmarkScaleFromFiles is the black-box scale run: N ServiceEntries in files, a real
// mcpbridge process, and a delta ADS client (as Envoy and istiod subscribe: ServiceEntries and
// clusters by wildcard, endpoints by the clusters' names). It reports time from process start
// to /readyz and to the client holding every ServiceEntry, cluster and endpoint assignment;
// peak RSS and CPU seconds for that; and the time from rewriting one file (its ServiceEntries
// each get one more endpoint) to the client holding the new ServiceEntries and endpoints.
func BenchmarkScaleFromFiles(b *testing.B) {
	bin := buildBridge(b)
	n, files := *scaleN, *scaleFiles
	for range b.N {
		dir := b.TempDir()
		if err := Write(dir, n, files); err != nil {
			b.Fatal(err)
		}
		p := startBridge(b, bin, dir)
		c := dialClient(b, p.grpcAddr)
		ready := p.waitReady(b, 5*time.Minute)
		c.waitHolding(b, n, nil, 5*time.Minute)
		held := time.Since(p.started)
		rss, _ := PeakRSS(p.cmd.Process.Pid)
		cpu, _ := CPU(p.cmd.Process.Pid)
		if *profilesInto != "" {
			p.saveProfiles(b, *profilesInto, "heap", "goroutine")
			p.saveMetrics(b, *profilesInto)
		}
		b.ReportMetric(ready.Seconds(), "s-to-ready")
		b.ReportMetric(held.Seconds(), "s-to-held")
		b.ReportMetric(float64(rss)/(1<<20), "MiB-peak-RSS")
		b.ReportMetric(cpu.Seconds(), "CPU-s")

		// Edit one file, once the bridge is idle (as an operator's edit finds it): every
		// ServiceEntry in it gets a fourth endpoint.
		waitIdle(p.cmd.Process.Pid, 10*time.Second)
		editAndWait(b, c, dir, n, files)
		p.stop(b)
		c.close()
	}
}

// editAndWait rewrites file 0 (each of its ServiceEntries gets one more endpoint) and
// reports the time until the client holds the new ServiceEntries and endpoints.
func editAndWait(b *testing.B, c *client, dir string, n, files int) {
	before := c.versions()
	edited := time.Now()
	count, err := WriteFile(dir, n, files, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	c.waitHolding(b, n, func(h *holdings) bool { return h.changedIn(before, 0, files, n) == count }, time.Minute)
	b.ReportMetric(time.Since(edited).Seconds()*1000, "ms-edit-to-served")
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

// buildBridge builds the mcpbridge binary once per run.
func buildBridge(b *testing.B) string {
	b.Helper()
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

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startBridge starts mcpbridge serve on free loopback ports, with the files of dir as its
// source (none when dir is empty).
func startBridge(b *testing.B, bin, dir string) *bridgeProcess {
	b.Helper()
	return startBridgeWith(b, bin, dir, "")
}

// startBridgeWith is startBridge with more configuration (YAML, top-level keys).
func startBridgeWith(b *testing.B, bin, dir, extra string) *bridgeProcess {
	b.Helper()
	p := &bridgeProcess{grpcAddr: freeAddr(b), httpAddr: freeAddr(b), exited: make(chan struct{})}
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	files := ""
	if dir != "" {
		files = fmt.Sprintf("  files: [%s]\n", dir)
	}
	os.WriteFile(cfg, fmt.Appendf(nil, `grpc:
  address: %s
http:
  address: %s
log:
  level: warn
sources:
%s  startup_timeout: 5m
limits:
  # Every client here comes from loopback, standing for proxies on many machines (10,000
  # idle streams), and the producer pushes as fast as it is answered: the per-peer and
  # per-stream limits would measure themselves.
  streams_per_peer: 100000
  requests_per_second: 1000000
  request_burst: 1000000
%s`, p.grpcAddr, p.httpAddr, files, extra), 0o644)
	p.cmd = exec.Command(bin, "serve", "--config", cfg)
	if *memoryLimit != "" {
		p.cmd.Env = append(os.Environ(), "MCPBRIDGE_MEMORY_LIMIT="+*memoryLimit)
	}
	p.cmd.Stderr = os.Stderr
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
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
		resp, err := http.Get("http://" + p.httpAddr + "/debug/pprof/" + name)
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".pb.gz"), data, 0o644); err != nil {
			b.Fatal(err)
		}
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

func (h *holdings) changedIn(before map[string]map[string]string, file, files, n int) int {
	changed := 0
	for i := file; i < n; i += files {
		name, cluster := Name(i), Cluster(i)
		se, ok1 := h.held[seType][name]
		cla, ok2 := h.held[endpointType][cluster]
		if ok1 && ok2 && se != before[seType][name] && cla != before[endpointType][cluster] {
			changed++
		}
	}
	return changed
}

// client is one delta ADS stream that ACKs every response and follows the clusters with
// endpoint subscriptions, as Envoy does.
type client struct {
	conn    *grpc.ClientConn
	cancel  context.CancelFunc
	mu      sync.Mutex
	h       holdings
	updated chan struct{}
	err     error
	done    chan struct{}
}

func dialClient(b *testing.B, addr string) *client {
	b.Helper()
	// The client dials before the bridge listens, as a proxy started with it would; it retries
	// every few milliseconds, not after gRPC's default backoff (1 s at first), which would be
	// the client's time, not the bridge's.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)), withLeanCodec(),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 20 * time.Millisecond}}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{conn: conn, cancel: cancel, updated: make(chan struct{}, 1), done: make(chan struct{}),
		h: holdings{held: map[string]map[string]string{seType: {}, clusterType: {}, endpointType: {}}}}
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
	node := &discovery.DeltaDiscoveryRequest{}
	_ = node
	for _, t := range []string{seType, clusterType} {
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

func (c *client) holdsAll(n int) bool {
	if len(c.h.held[seType]) < n || len(c.h.held[clusterType]) < n || len(c.h.held[endpointType]) < n {
		return false
	}
	// The counts may include other resources: check the generated ones by name (first, last).
	for _, i := range []int{0, n - 1} {
		if _, ok := c.h.held[seType][Name(i)]; !ok {
			return false
		}
		if _, ok := c.h.held[endpointType][Cluster(i)]; !ok {
			return false
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
