package xds

// A side-by-side benchmark of mcpbridge's xDS server and go-control-plane's LinearCache server
// on the same EDS workload, in the same run, with the same clients:
//
//	go test -run '^$' -bench CompareEDS -benchtime 3x ./source/xds/
//
// Workload (from the issue): 1,000 ClusterLoadAssignments of 10 endpoints each, 200 ADS
// streams per protocol, each subscribing to all 1,000 names explicitly (as Envoy does for EDS).
// all-1000 is one update of every assignment; one-change is an update of a single one. Clients
// run over loopback TCP, one connection each, decode every resource with go-control-plane's
// generated types and ACK every response (state of the world: version_info, response_nonce and
// the same resource_names; delta: response_nonce). A stream is done when it holds the new
// generation of every resource the phase changed.
//
// Connections, streams and the initial ACKed state are set up outside the timer; so are the
// inputs to each write and, after each iteration, the wait until the server has processed every
// ACK (so that the next write is sent at once on every stream). Each iteration is timed from the
// write to the last stream holding it.
//
// Metrics:
//   - last-ms: time from the write to the last stream holding it, median over iterations.
//   - B/op, allocs/op: b.ReportAllocs, process-wide while the timer runs: they include the 200
//     clients receiving and decoding every response, and the gRPC transports on both sides,
//     not only the server.
//   - resp/op: responses received by all streams per iteration, from the write until the
//     server settled (the ideal is one per stream: 200).
//   - res/op: resources received by all streams per iteration.
//   - resent/op: of those, resources a stream already held at that very generation: bytes the
//     server sent that the client did not need.
//   - ns/op is the mean of the timed section (write to last delivery); last-ms is the figure.

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcpresource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

const (
	cmpResources = 1000
	cmpEndpoints = 10
	cmpStreams   = 200
	// cmpDeadline bounds every wait: a phase's delivery, the server settling, setup, teardown.
	cmpDeadline = 60 * time.Second
)

// cmpNames are the cluster names, sorted.
var cmpNames = func() []string {
	out := make([]string, cmpResources)
	for i := range out {
		out[i] = fmt.Sprintf("cluster-%04d", i)
	}
	return out
}()

// cmpAssignment is generation gen of one ClusterLoadAssignment: 10 endpoints, the generation
// in the locality's sub_zone (which the clients read back) and in the ports.
func cmpAssignment(name string, index int, gen uint64) *endpoint.ClusterLoadAssignment {
	lbs := make([]*endpoint.LbEndpoint, cmpEndpoints)
	for j := range lbs {
		lbs[j] = &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address:       fmt.Sprintf("10.%d.%d.%d", index/250, index%250, j+1),
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(10000 + gen%50000)},
			}}},
		}}}
	}
	return &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{
		Locality:    &core.Locality{Region: "bench", Zone: "bench-a", SubZone: strconv.FormatUint(gen, 10)},
		LbEndpoints: lbs,
	}}}
}

func cmpIndex(name string) int {
	i, _ := slices.BinarySearch(cmpNames, name)
	return i
}

// BenchmarkCompareEDS: mcpbridge against go-control-plane's LinearCache, state of the world and
// delta, all-1000 and one-change. Each protocol's 200 streams are set up once and serve both
// phases (all-1000 first, then one-change).
func BenchmarkCompareEDS(b *testing.B) {
	servers := []struct {
		name  string
		start func(testing.TB) cmpServer
	}{
		{"mcpbridge", startCmpBridge},
		{"go-control-plane", startCmpGCP},
	}
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) {
			for _, delta := range []bool{false, true} {
				protocol := "sotw"
				if delta {
					protocol = "delta"
				}
				b.Run(protocol, func(b *testing.B) {
					env := newCmpEnv(b, srv.start(b), delta)
					defer env.close(b)
					b.Run("all-1000", func(b *testing.B) { env.run(b, false) })
					b.Run("one-change", func(b *testing.B) { env.run(b, true) })
				})
			}
		})
	}
}

// cmpServer is one xDS server under test.
type cmpServer interface {
	addr() string
	// input builds, outside the timer, what write hands to the server: generation gen of names.
	input(gen uint64, names []string) any
	write(in any) error
	// settled reports whether the server has processed every ACK the clients sent (acks), so
	// that a write now is sent at once on every stream; else, what it is waiting for.
	settled(acks uint64) (bool, string)
	stop()
}

// cmpBridge is mcpbridge: store, engine, and the xDS adapter on its own gRPC server.
type cmpBridge struct {
	store  *store.Store
	engine *source.Engine
	srv    *grpc.Server
	lis    net.Listener
	served chan struct{}
}

func startCmpBridge(tb testing.TB) cmpServer {
	tb.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	eng := source.New(source.Options{Store: st})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	(&Server{Engine: eng}).Register(srv)
	s := &cmpBridge{store: st, engine: eng, srv: srv, lis: lis, served: make(chan struct{})}
	go func() {
		defer close(s.served)
		srv.Serve(lis)
	}()
	return s
}

func (s *cmpBridge) addr() string { return s.lis.Addr().String() }

func (s *cmpBridge) input(gen uint64, names []string) any {
	rs := make([]*mcpapi.Resource, len(names))
	for i, n := range names {
		rs[i] = &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: n}, Body: anyOf(cmpAssignment(n, cmpIndex(n), gen))}
	}
	return rs
}

func (s *cmpBridge) write(in any) error {
	_, err := s.store.Apply("bench", store.Update{Collection: EndpointType, Resources: in.([]*mcpapi.Resource)})
	return err
}

func (s *cmpBridge) settled(acks uint64) (bool, string) {
	st := s.engine.Stats()
	return st.ACKs == acks, fmt.Sprintf("mcpbridge processed %d of the %d ACKs sent (engine stats %+v)", st.ACKs, acks, st)
}

func (s *cmpBridge) stop() {
	s.engine.Stop()
	s.srv.Stop()
	<-s.served
}

// cmpGCP is go-control-plane: a LinearCache for the EDS type behind its ADS server.
type cmpGCP struct {
	cache  *gcpcache.LinearCache
	srv    *grpc.Server
	lis    net.Listener
	cancel context.CancelFunc
	served chan struct{}
}

func startCmpGCP(tb testing.TB) cmpServer {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := gcpcache.NewLinearCache(gcpresource.EndpointType)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, gcpserver.NewServer(ctx, c, nil))
	s := &cmpGCP{cache: c, srv: srv, lis: lis, cancel: cancel, served: make(chan struct{})}
	go func() {
		defer close(s.served)
		srv.Serve(lis)
	}()
	return s
}

func (s *cmpGCP) addr() string { return s.lis.Addr().String() }

func (s *cmpGCP) input(gen uint64, names []string) any {
	m := make(map[string]types.Resource, len(names))
	for _, n := range names {
		m[n] = cmpAssignment(n, cmpIndex(n), gen)
	}
	return m
}

func (s *cmpGCP) write(in any) error {
	return s.cache.UpdateResources(in.(map[string]types.Resource), nil)
}

// settled: the cache answers a watch once and forgets it; the stream opens the next one when
// it processes the client's ACK. Every stream subscribes to every name, so each name has one
// watch per stream once every ACK is in.
func (s *cmpGCP) settled(uint64) (bool, string) {
	n := s.cache.NumWatches(cmpNames[0])
	return n == cmpStreams, fmt.Sprintf("go-control-plane has %d of %d watches open", n, cmpStreams)
}

func (s *cmpGCP) stop() {
	s.srv.Stop()
	s.cancel()
	<-s.served
}

// cmpEnv is one server with its 200 client streams of one protocol.
type cmpEnv struct {
	srv     cmpServer
	clients []*cmpClient
	gen     uint64 // the generation last written

	acks, responses, resources, resent, removed atomic.Uint64

	failOnce sync.Once
	failed   chan struct{}
	err      error // set before failed closes
}

func (e *cmpEnv) fail(err error) {
	e.failOnce.Do(func() {
		e.err = err
		close(e.failed)
	})
}

// cmpPhase is what the streams wait for: generation target of the names in want (nil: all).
type cmpPhase struct {
	target uint64
	want   map[string]bool
	left   atomic.Int64 // streams not done yet
	done   chan struct{}
}

func newCmpPhase(target uint64, names []string) *cmpPhase {
	ph := &cmpPhase{target: target, done: make(chan struct{})}
	if len(names) != cmpResources {
		ph.want = make(map[string]bool, len(names))
		for _, n := range names {
			ph.want[n] = true
		}
	}
	ph.left.Store(cmpStreams)
	return ph
}

func (ph *cmpPhase) wants(name string) bool { return ph.want == nil || ph.want[name] }

// cmpClient is one Envoy-like ADS client on its own connection.
type cmpClient struct {
	env    *cmpEnv
	id     int
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	exited chan struct{}

	mu        sync.Mutex
	have      map[string]uint64 // generation held, per name
	ph        *cmpPhase
	remaining int // names of ph not yet held at its target
	doneAt    time.Time
}

// newCmpEnv starts the server's initial state, the 200 streams, and waits until every stream
// holds it and the server has processed every ACK.
func newCmpEnv(b *testing.B, srv cmpServer, delta bool) *cmpEnv {
	b.Helper()
	e := &cmpEnv{srv: srv, failed: make(chan struct{}), gen: 1}
	if err := srv.write(srv.input(e.gen, cmpNames)); err != nil {
		srv.stop()
		b.Fatal(err)
	}
	ph := newCmpPhase(e.gen, cmpNames)
	for i := range cmpStreams {
		conn, err := grpc.NewClient(srv.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			e.close(b)
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &cmpClient{env: e, id: i, conn: conn, cancel: cancel, exited: make(chan struct{}), have: make(map[string]uint64, cmpResources)}
		c.expect(ph)
		e.clients = append(e.clients, c)
		if delta {
			go c.runDelta(ctx)
		} else {
			go c.runSotW(ctx)
		}
	}
	if err := e.await(ph); err != nil {
		e.close(b)
		b.Fatalf("initial state: %v", err)
	}
	if err := e.settle(); err != nil {
		e.close(b)
		b.Fatalf("initial state: %v", err)
	}
	return e
}

// run is one sub-benchmark: b.N writes of all names (one=false) or of one name, each timed
// from the write to the last stream holding it.
func (e *cmpEnv) run(b *testing.B, one bool) {
	b.ReportAllocs()
	b.StopTimer()
	lat := make([]float64, 0, b.N)
	resp0, res0, resent0, removed0 := e.responses.Load(), e.resources.Load(), e.resent.Load(), e.removed.Load()
	for i := 0; i < b.N; i++ {
		e.gen++
		names := cmpNames
		if one {
			names = []string{cmpNames[(e.gen*7)%cmpResources]}
		}
		in := e.srv.input(e.gen, names)
		ph := newCmpPhase(e.gen, names)
		for _, c := range e.clients {
			c.expect(ph)
		}
		runtime.GC() // no garbage of the previous iteration (or server) collected on this one's time
		b.StartTimer()
		start := time.Now()
		if err := e.srv.write(in); err != nil {
			b.Fatal(err)
		}
		err := e.await(ph)
		b.StopTimer()
		if err != nil {
			b.Fatalf("generation %d: %v", e.gen, err)
		}
		var last time.Time
		for _, c := range e.clients {
			c.mu.Lock()
			if c.doneAt.After(last) {
				last = c.doneAt
			}
			c.mu.Unlock()
		}
		lat = append(lat, float64(last.Sub(start))/float64(time.Millisecond))
		if err := e.settle(); err != nil {
			b.Fatalf("generation %d: %v", e.gen, err)
		}
	}
	slices.Sort(lat)
	med := lat[len(lat)/2]
	if len(lat)%2 == 0 {
		med = (lat[len(lat)/2-1] + lat[len(lat)/2]) / 2
	}
	n := float64(b.N)
	b.ReportMetric(med, "last-ms")
	b.ReportMetric(float64(e.responses.Load()-resp0)/n, "resp/op")
	b.ReportMetric(float64(e.resources.Load()-res0)/n, "res/op")
	b.ReportMetric(float64(e.resent.Load()-resent0)/n, "resent/op")
	if r := e.removed.Load() - removed0; r > 0 {
		b.Logf("%d removed_resources received, none expected", r)
	}
}

// await waits until every stream holds the phase's generation.
func (e *cmpEnv) await(ph *cmpPhase) error {
	t := time.NewTimer(cmpDeadline)
	defer t.Stop()
	select {
	case <-ph.done:
		return nil
	case <-e.failed:
		return e.err
	case <-t.C:
		return fmt.Errorf("%d of %d streams did not receive generation %d within %s", ph.left.Load(), cmpStreams, ph.target, cmpDeadline)
	}
}

// settle waits until the server has processed every ACK sent.
func (e *cmpEnv) settle() error {
	deadline := time.Now().Add(cmpDeadline)
	for {
		ok, state := e.srv.settled(e.acks.Load())
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not settled within %s: %s", cmpDeadline, state)
		}
		select {
		case <-e.failed:
			return e.err
		case <-time.After(time.Millisecond):
		}
	}
}

// close ends every stream and connection, then the server, and waits for the clients'
// goroutines.
func (e *cmpEnv) close(tb testing.TB) {
	for _, c := range e.clients {
		c.cancel()
	}
	deadline := time.NewTimer(cmpDeadline)
	defer deadline.Stop()
	for _, c := range e.clients {
		select {
		case <-c.exited:
		case <-deadline.C:
			tb.Errorf("client %d did not stop within %s", c.id, cmpDeadline)
			return
		}
		c.conn.Close()
	}
	e.srv.stop()
}

// expect makes ph what the client waits for.
func (c *cmpClient) expect(ph *cmpPhase) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ph, c.doneAt, c.remaining = ph, time.Time{}, 0
	for _, n := range cmpNames {
		if ph.wants(n) && c.have[n] < ph.target {
			c.remaining++
		}
	}
	if c.remaining == 0 {
		c.env.fail(fmt.Errorf("client %d already holds generation %d", c.id, ph.target))
	}
}

// receive records one response's resources, and reports the client done when it first holds
// all of its phase.
func (c *cmpClient) receive(clas []*endpoint.ClusterLoadAssignment) {
	c.env.responses.Add(1)
	c.env.resources.Add(uint64(len(clas)))
	c.mu.Lock()
	resent := 0
	finished := false
	for _, cla := range clas {
		gen, _ := strconv.ParseUint(cla.GetEndpoints()[0].GetLocality().GetSubZone(), 10, 64)
		old := c.have[cla.ClusterName]
		if gen <= old {
			resent++
			continue
		}
		c.have[cla.ClusterName] = gen
		if ph := c.ph; c.remaining > 0 && old < ph.target && gen >= ph.target && ph.wants(cla.ClusterName) {
			c.remaining--
			if c.remaining == 0 {
				c.doneAt = time.Now()
				finished = true
			}
		}
	}
	ph := c.ph
	c.mu.Unlock()
	c.env.resent.Add(uint64(resent))
	if finished && ph.left.Add(-1) == 0 {
		close(ph.done)
	}
}

// cmpDecode decodes one resource as a ClusterLoadAssignment, with go-control-plane's types.
func cmpDecode(name string, value []byte, typeURL string) (*endpoint.ClusterLoadAssignment, error) {
	if typeURL != EndpointType {
		return nil, fmt.Errorf("resource %q has type %s", name, typeURL)
	}
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(value, cla); err != nil {
		return nil, fmt.Errorf("resource %q does not decode: %w", name, err)
	}
	if len(cla.Endpoints) != 1 || len(cla.Endpoints[0].LbEndpoints) != cmpEndpoints {
		return nil, fmt.Errorf("resource %q (%s) is not a whole assignment", name, cla.ClusterName)
	}
	return cla, nil
}

// ended reports a stream's end: expected once the benchmark cancelled it, a failure before.
func (c *cmpClient) ended(ctx context.Context, err error) {
	if ctx.Err() == nil {
		c.env.fail(fmt.Errorf("stream %d: %w", c.id, err))
	}
}

func (c *cmpClient) runSotW(ctx context.Context) {
	defer close(c.exited)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		c.ended(ctx, err)
		return
	}
	err = stream.Send(&discovery.DiscoveryRequest{
		Node: &core.Node{Id: fmt.Sprintf("bench-%d", c.id)}, TypeUrl: EndpointType, ResourceNames: cmpNames,
	})
	if err != nil {
		c.ended(ctx, err)
		return
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			c.ended(ctx, err)
			return
		}
		clas := make([]*endpoint.ClusterLoadAssignment, 0, len(m.Resources))
		for _, a := range m.Resources {
			cla, err := cmpDecode("", a.GetValue(), a.GetTypeUrl())
			if err != nil {
				c.env.fail(err)
				return
			}
			clas = append(clas, cla)
		}
		c.receive(clas)
		c.env.acks.Add(1)
		err = stream.Send(&discovery.DiscoveryRequest{
			TypeUrl: m.TypeUrl, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce, ResourceNames: cmpNames,
		})
		if err != nil {
			c.ended(ctx, err)
			return
		}
	}
}

func (c *cmpClient) runDelta(ctx context.Context) {
	defer close(c.exited)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		c.ended(ctx, err)
		return
	}
	err = stream.Send(&discovery.DeltaDiscoveryRequest{
		Node: &core.Node{Id: fmt.Sprintf("bench-%d", c.id)}, TypeUrl: EndpointType, ResourceNamesSubscribe: cmpNames,
	})
	if err != nil {
		c.ended(ctx, err)
		return
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			c.ended(ctx, err)
			return
		}
		clas := make([]*endpoint.ClusterLoadAssignment, 0, len(m.Resources))
		for _, r := range m.Resources {
			cla, err := cmpDecode(r.GetName(), r.GetResource().GetValue(), r.GetResource().GetTypeUrl())
			if err == nil && cla.ClusterName != r.GetName() {
				err = fmt.Errorf("resource %q holds the assignment of %q", r.GetName(), cla.ClusterName)
			}
			if err != nil {
				c.env.fail(err)
				return
			}
			clas = append(clas, cla)
		}
		c.env.removed.Add(uint64(len(m.RemovedResources)))
		c.receive(clas)
		c.env.acks.Add(1)
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce}); err != nil {
			c.ended(ctx, err)
			return
		}
	}
}
