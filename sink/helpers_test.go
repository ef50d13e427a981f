package sink

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	seColl      = "istio/networking/v1alpha3/serviceentries"
	seAlias     = "istio/networking/v1/serviceentries"
	vsColl      = "istio/networking/v1alpha3/virtualservices"
	gwColl      = "istio/networking/v1alpha3/gateways"
	opaqueColl  = "example.com/v1/widgets"
	waitTimeout = 5 * time.Second
)

func newStore() *store.Store {
	return store.New(store.Options{Validate: kinds.ValidateResource})
}

func serviceEntry(name, host string) *mcpapi.Resource {
	return resource(name, &networking.ServiceEntry{Hosts: []string{host}})
}

func virtualService(name, host string) *mcpapi.Resource {
	// A route: istiod refuses a VirtualService without one.
	return resource(name, &networking.VirtualService{Hosts: []string{host}, Http: []*networking.HTTPRoute{{
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host}}},
	}}})
}

func resource(name string, body proto.Message) *mcpapi.Resource {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, body, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: a}
}

// dump renders the whole served state of a store, so that "unchanged" is one comparison.
func dump(st *store.Store) string {
	v := st.View()
	var b strings.Builder
	fmt.Fprintf(&b, "revision %d\n", v.Revision())
	for _, c := range v.Collections() {
		_, entries := v.Snapshot(c.Name)
		for _, e := range entries {
			fmt.Fprintf(&b, "%s %s owner=%s version=%s\n", c.Name, e.Name, e.Owner, e.Version)
		}
	}
	return b.String()
}

// names lists a collection's served names, sorted.
func names(st *store.Store, coll string) []string {
	_, entries := st.View().Snapshot(coll)
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

func assertNames(t *testing.T, st *store.Store, coll string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	slices.Sort(want)
	if got := names(st, coll); !slices.Equal(got, want) {
		t.Fatalf("%s holds %v, want %v", coll, got, want)
	}
}

// waitFor waits, woken by the store's watch rather than by polling, until cond holds.
func waitFor(t *testing.T, st *store.Store, what string, cond func() bool) {
	t.Helper()
	w := st.Watch()
	defer w.Close()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-w.C():
		case <-deadline.C:
			t.Fatalf("%s: not within %s", what, waitTimeout)
		}
	}
}

// eventually polls cond for state that has no change notification (counters, connection
// state), with a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sinkBridge is a store and a ResourceSink server on a real loopback socket.
type sinkBridge struct {
	store  *store.Store
	server *Server
	addr   string
}

func startSink(t *testing.T, opts Options, serverOpts ...grpc.ServerOption) *sinkBridge {
	t.Helper()
	if opts.Store == nil {
		opts.Store = newStore()
	}
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(serverOpts...)
	mcp.RegisterResourceSinkServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(func() {
		srv.Stop()
		gs.Stop()
	})
	return &sinkBridge{store: opts.Store, server: srv, addr: lis.Addr().String()}
}

// producer is a client of the ResourceSink service, as a config producer would be, on its own
// connection.
type producer struct {
	t      *testing.T
	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources]
	cancel context.CancelFunc
	got    chan *mcp.RequestResources
	done   chan struct{}
	nonce  int
	once   sync.Once
	err    error // why the stream ended; read after done is closed
}

type dialOpts struct {
	id    string // mcp-producer-id; empty sends none
	creds credentials.TransportCredentials
}

func dialProducer(t *testing.T, addr, id string) *producer {
	t.Helper()
	return dialProducerWith(t, addr, dialOpts{id: id})
}

func dialProducerWith(t *testing.T, addr string, o dialOpts) *producer {
	t.Helper()
	creds := o.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if o.id != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, ProducerIDKey, o.id)
	}
	stream, err := mcp.NewResourceSinkClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		cancel()
		conn.Close()
		t.Fatal(err)
	}
	p := &producer{t: t, conn: conn, stream: stream, cancel: cancel,
		got: make(chan *mcp.RequestResources, 100), done: make(chan struct{})}
	go p.receive()
	t.Cleanup(p.close)
	return p
}

func (p *producer) receive() {
	defer close(p.done)
	defer close(p.got)
	for {
		m, err := p.stream.Recv()
		if err != nil {
			p.err = err
			return
		}
		p.got <- m
	}
}

// close ends the stream and the connection, and waits for the receiver to stop.
func (p *producer) close() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
		p.conn.Close()
	})
}

// recv waits for the next message from the bridge.
func (p *producer) recv() *mcp.RequestResources {
	p.t.Helper()
	select {
	case m, ok := <-p.got:
		if !ok {
			p.t.Fatal("stream ended")
		}
		return m
	case <-time.After(waitTimeout):
		p.t.Fatalf("nothing from the bridge within %s", waitTimeout)
	}
	return nil
}

// requests reads the n requests the bridge sends when the stream opens.
func (p *producer) requests(n int) []*mcp.RequestResources {
	p.t.Helper()
	out := make([]*mcp.RequestResources, n)
	for i := range out {
		out[i] = p.recv()
	}
	return out
}

// push sends m (with a fresh nonce unless it has one) and returns the bridge's answer to it.
func (p *producer) push(m *mcp.Resources) *mcp.RequestResources {
	p.t.Helper()
	if m.Nonce == "" {
		p.nonce++
		m.Nonce = fmt.Sprintf("n%d", p.nonce)
	}
	if err := p.stream.Send(m); err != nil {
		p.t.Fatalf("send: %v", err)
	}
	reply := p.recv()
	if reply.ResponseNonce != m.Nonce || reply.Collection != m.Collection {
		p.t.Fatalf("answer to %s nonce %s is for %s nonce %s", m.Collection, m.Nonce, reply.Collection, reply.ResponseNonce)
	}
	return reply
}

// mustACK pushes m and fails unless it is ACKed.
func (p *producer) mustACK(m *mcp.Resources) {
	p.t.Helper()
	if reply := p.push(m); reply.ErrorDetail != nil {
		p.t.Fatalf("NACK for %s: %v", m.Collection, reply.ErrorDetail)
	}
}

func full(coll string, rs ...*mcpapi.Resource) *mcp.Resources {
	return &mcp.Resources{Collection: coll, Resources: rs}
}

// ses builds ServiceEntries named ns/<n> for each n.
func ses(ns ...string) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, len(ns))
	for i, n := range ns {
		out[i] = serviceEntry("ns/"+n, n+".example")
	}
	return out
}

// upstreamSource is a real source.ResourceSource over loopback: the remote end of an Upstream.
type upstreamSource struct {
	store    *store.Store
	engine   *source.Engine
	srv      *grpc.Server
	addr     string
	recorder *requestRecorder
}

// startSource serves st on addr ("127.0.0.1:0" for any port). Stop it with stop.
func startSource(t *testing.T, st *store.Store, addr string) *upstreamSource {
	t.Helper()
	lis := listen(t, addr)
	eng := source.New(source.Options{Store: st})
	rec := &requestRecorder{}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}), grpc.StreamInterceptor(rec.intercept))
	mcp.RegisterResourceSourceServer(srv, &source.ResourceSource{Engine: eng})
	go srv.Serve(lis)
	s := &upstreamSource{store: st, engine: eng, srv: srv, addr: lis.Addr().String(), recorder: rec}
	t.Cleanup(s.stop)
	return s
}

func (s *upstreamSource) stop() {
	s.engine.Stop()
	s.srv.Stop()
}

// listen binds addr, retrying briefly: the port of a server just stopped may not be free yet.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil {
			return lis
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requestRecorder keeps every RequestResources a source receives, so tests can see what an
// Upstream asked for.
type requestRecorder struct {
	mu   sync.Mutex
	reqs []*mcp.RequestResources
}

func (r *requestRecorder) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &recordingStream{ServerStream: ss, r: r})
}

// opening returns the first request without a nonce for a collection.
func (r *requestRecorder) opening(coll string) *mcp.RequestResources {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.reqs {
		if m.Collection == coll && m.ResponseNonce == "" {
			return m
		}
	}
	return nil
}

type recordingStream struct {
	grpc.ServerStream
	r *requestRecorder
}

func (s *recordingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if req, ok := m.(*mcp.RequestResources); ok {
		s.r.mu.Lock()
		s.r.reqs = append(s.r.reqs, proto.Clone(req).(*mcp.RequestResources))
		s.r.mu.Unlock()
	}
	return nil
}

// runUpstream runs u until the test ends.
func runUpstream(t *testing.T, u *Upstream) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitClosed(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitTimeout):
		t.Fatalf("%s: not within %s", what, waitTimeout)
	}
}
