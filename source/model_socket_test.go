package source_test

// The model over sockets: a real grpc.Server on loopback serving every protocol of the engine
// and the ResourceSink, the generated clients, and after each action a wait until the server
// has been quiet for a while.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

var modelQuiet = flag.Duration("model.quiet", 25*time.Millisecond,
	"model test over sockets: how long the server must be quiet before the model reads what came")

// TestEngineAgainstModelOverSockets runs random schedules against the engine over loopback
// gRPC, every protocol at once: xDS ADS and per-type (SotW and delta), MCP ResourceSource,
// AggregatedMeshConfigService (both), with producers pushing over the ResourceSink. 25
// schedules unless -rapid.checks says otherwise.
func TestEngineAgainstModelOverSockets(t *testing.T) {
	defer defaultRapidChecks(25)()
	rapid.Check(t, func(rt *rapid.T) {
		runModel(rt, modelOptions{TTL: 400 * time.Millisecond, New: newSocketTransport})
	})
}

// defaultRapidChecks sets -rapid.checks to n, and -rapid.seed to a fixed seed, unless either
// was given (flags, or RAPID_CHECKS / RAPID_SEED), and returns what restores them. So make
// test runs the same schedules every time: a run that fails fails again, and its failure is
// the code's, not the draw's. make fuzz-model gives -rapid.checks and explores new schedules.
func defaultRapidChecks(n int) func() {
	explicit := os.Getenv("RAPID_CHECKS") != "" || os.Getenv("RAPID_SEED") != ""
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.checks" || f.Name == "rapid.seed" {
			explicit = true
		}
	})
	checks, seed := flag.Lookup("rapid.checks"), flag.Lookup("rapid.seed")
	if explicit || checks == nil || seed == nil {
		return func() {}
	}
	oldChecks, oldSeed := checks.Value.String(), seed.Value.String()
	_ = checks.Value.Set(strconv.Itoa(n))
	_ = seed.Value.Set(strconv.FormatUint(modelSeed, 10))
	return func() {
		_ = checks.Value.Set(oldChecks)
		_ = seed.Value.Set(oldSeed)
	}
}

// modelSeed is make test's seed of the model's schedules.
const modelSeed = 20261126

// socketTransport is modelTransport over loopback gRPC.
type socketTransport struct {
	t     failer
	srv   *grpc.Server
	sink  *sink.Server
	eng   *source.Engine
	conn  *grpc.ClientConn
	clock *modelClock
	quiet time.Duration

	mu        sync.Mutex
	last      time.Time
	streams   []*socketStream
	producers []*socketProducer
}

func newSocketTransport(t failer, s modelServer) modelTransport {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	(&xds.Server{Engine: s.Engine, TTL: s.TTL}).Register(srv)
	mcp.RegisterResourceSourceServer(srv, &source.ResourceSource{Engine: s.Engine})
	mcp.RegisterAggregatedMeshConfigServiceServer(srv, &source.AggregatedMeshConfig{Engine: s.Engine})
	sk, err := sink.NewServer(s.Sink)
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	mcp.RegisterResourceSinkServer(srv, sk)
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return &socketTransport{t: t, srv: srv, sink: sk, eng: s.Engine, conn: conn, clock: s.Clock, quiet: *modelQuiet, last: time.Now()}
}

func (tr *socketTransport) touch() {
	tr.mu.Lock()
	tr.last = time.Now()
	tr.mu.Unlock()
}

func (tr *socketTransport) Open(method string, md map[string]string) (modelStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	if len(md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(md))
	}
	ads := discovery.NewAggregatedDiscoveryServiceClient(tr.conn)
	var cs grpc.ClientStream
	var err error
	switch method {
	case methodADSSotW:
		cs, err = ads.StreamAggregatedResources(ctx)
	case methodADSDelta:
		cs, err = ads.DeltaAggregatedResources(ctx)
	case methodCDSSotW:
		cs, err = clusterservice.NewClusterDiscoveryServiceClient(tr.conn).StreamClusters(ctx)
	case methodCDSDelta:
		cs, err = clusterservice.NewClusterDiscoveryServiceClient(tr.conn).DeltaClusters(ctx)
	case methodEDSSotW:
		cs, err = endpointservice.NewEndpointDiscoveryServiceClient(tr.conn).StreamEndpoints(ctx)
	case methodEDSDelta:
		cs, err = endpointservice.NewEndpointDiscoveryServiceClient(tr.conn).DeltaEndpoints(ctx)
	case methodLDSSotW:
		cs, err = listenerservice.NewListenerDiscoveryServiceClient(tr.conn).StreamListeners(ctx)
	case methodLDSDelta:
		cs, err = listenerservice.NewListenerDiscoveryServiceClient(tr.conn).DeltaListeners(ctx)
	case methodRDSSotW:
		cs, err = routeservice.NewRouteDiscoveryServiceClient(tr.conn).StreamRoutes(ctx)
	case methodRDSDelta:
		cs, err = routeservice.NewRouteDiscoveryServiceClient(tr.conn).DeltaRoutes(ctx)
	case methodMCPSource:
		cs, err = mcp.NewResourceSourceClient(tr.conn).EstablishResourceStream(ctx)
	case methodAMCSSotW:
		cs, err = mcp.NewAggregatedMeshConfigServiceClient(tr.conn).StreamAggregatedResources(ctx)
	case methodAMCSIncrement:
		cs, err = mcp.NewAggregatedMeshConfigServiceClient(tr.conn).IncrementalAggregatedResources(ctx)
	default:
		err = fmt.Errorf("unknown method %s", method)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s := &socketStream{tr: tr, method: method, cs: cs, cancel: cancel, done: make(chan struct{})}
	go s.receive()
	tr.mu.Lock()
	tr.streams = append(tr.streams, s)
	tr.mu.Unlock()
	return s, nil
}

func (tr *socketTransport) Producer(id string) modelProducer {
	p := &socketProducer{tr: tr, id: id}
	tr.mu.Lock()
	tr.producers = append(tr.producers, p)
	tr.mu.Unlock()
	return p
}

// Settle waits until nothing has been sent or received for the quiet period.
func (tr *socketTransport) Settle() {
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	for {
		time.Sleep(2 * time.Millisecond)
		tr.mu.Lock()
		last := tr.last
		tr.mu.Unlock()
		if last.Before(start) {
			last = start
		}
		if time.Since(last) >= tr.quiet || time.Now().After(deadline) {
			return
		}
	}
}

func (tr *socketTransport) Written()                {}
func (tr *socketTransport) Advance(d time.Duration) { time.Sleep(d) }

func (tr *socketTransport) Close() {
	tr.mu.Lock()
	streams, producers := tr.streams, tr.producers
	tr.mu.Unlock()
	for _, s := range streams {
		s.Close()
	}
	for _, p := range producers {
		p.close()
	}
	tr.eng.Stop()
	tr.sink.Stop()
	tr.srv.Stop()
	tr.conn.Close()
}

// socketStream is one client stream; a goroutine receives into got.
type socketStream struct {
	tr     *socketTransport
	method string
	cs     grpc.ClientStream
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	sent   int
	got    []arrival
	err    error
	closed bool
}

func (s *socketStream) receive() {
	defer close(s.done)
	for {
		msg := modelResponse(s.method)
		err := s.cs.RecvMsg(msg)
		s.mu.Lock()
		if err != nil {
			if !s.closed {
				if errors.Is(err, io.EOF) {
					err = errors.New("the server ended the stream (EOF)")
				}
				s.err = err
			}
			s.mu.Unlock()
			return
		}
		s.got = append(s.got, arrival{Msg: msg, Sent: s.sent, At: s.tr.clock.Now()})
		s.mu.Unlock()
		s.tr.touch()
	}
}

func (s *socketStream) Send(reqs ...proto.Message) error {
	for _, r := range reqs {
		s.mu.Lock()
		s.sent++
		s.mu.Unlock()
		if err := s.cs.SendMsg(r); err != nil {
			if errors.Is(err, io.EOF) {
				<-s.done // the server ended the stream: Err says how
				return nil
			}
			return err
		}
	}
	s.tr.touch()
	return nil
}

func (s *socketStream) Take() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.got
	s.got = nil
	return out
}

func (s *socketStream) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
}

func (s *socketStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.err
}

// socketProducer pushes ServiceEntries over the ResourceSink service, as a producer with an
// mcp-producer-id: it answers the bridge's request with a full state and waits for each ACK.
type socketProducer struct {
	tr     *socketTransport
	id     string
	stream grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources]
	cancel context.CancelFunc
	nonce  int
}

const producerWait = 5 * time.Second

func (p *socketProducer) Connect(state []*mcpapi.Resource) error {
	ctx, cancel := context.WithCancel(context.Background())
	ctx = metadata.AppendToOutgoingContext(ctx, sink.ProducerIDKey, p.id)
	st, err := mcp.NewResourceSinkClient(p.tr.conn).EstablishResourceStream(ctx)
	if err != nil {
		cancel()
		return err
	}
	p.stream, p.cancel = st, cancel
	// The bridge asks first: one request per collection it wants, the ServiceEntries here.
	req, err := p.recv()
	if err != nil {
		return fmt.Errorf("the bridge's request: %w", err)
	}
	if req.Collection != collSE || req.ResponseNonce != "" {
		return fmt.Errorf("the bridge asked %v", req)
	}
	return p.Push(false, state, nil)
}

func (p *socketProducer) Push(incremental bool, resources []*mcpapi.Resource, removed []string) error {
	p.nonce++
	nonce := fmt.Sprintf("%s-%d", p.id, p.nonce)
	if err := p.stream.Send(&mcp.Resources{Collection: collSE, Resources: resources, RemovedResources: removed,
		Nonce: nonce, Incremental: incremental}); err != nil {
		return err
	}
	ack, err := p.recv()
	if err != nil {
		return fmt.Errorf("the answer to %s: %w", nonce, err)
	}
	if ack.ResponseNonce != nonce || ack.ErrorDetail != nil {
		return fmt.Errorf("answer %v to %s", ack, nonce)
	}
	return nil
}

func (p *socketProducer) recv() (*mcp.RequestResources, error) {
	type result struct {
		m   *mcp.RequestResources
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := p.stream.Recv()
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-time.After(producerWait):
		return nil, errors.New("no answer from the bridge")
	}
}

func (p *socketProducer) Disconnect() error {
	p.close()
	deadline := time.Now().Add(producerWait)
	for time.Now().Before(deadline) {
		gone := true
		for _, info := range p.tr.sink.Producers() {
			// The bridge's owner of the id: "producer:ID", or, under authz rules, scoped to
			// the identity sending it, "producer:IDENTITY#ID" (sink.ProducerOwner).
			if (info.Owner == "producer:"+p.id || strings.HasSuffix(info.Owner, "#"+p.id)) && info.Connected {
				gone = false
			}
		}
		if gone {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("the bridge still counts the producer as connected")
}

func (p *socketProducer) close() {
	if p.cancel != nil {
		p.cancel()
		p.cancel = nil
	}
}
