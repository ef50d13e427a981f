package linkerd

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for a message.
const wait = 5 * time.Second

// fixture is a store and a Destination server on a real loopback socket.
type fixture struct {
	store *store.Store
	srv   *Server
	conn  *grpc.ClientConn
}

func start(t testing.TB, opts Options) *fixture {
	t.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	opts.Store = st
	srv := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { srv.Run(ctx); close(ran) }()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	srv.Register(g)
	go g.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		g.Stop()
		cancel()
		<-ran
	})
	return &fixture{store: st, srv: srv, conn: conn}
}

// stream is one Get stream, received in the background.
type stream struct {
	t      testing.TB
	got    chan *Update
	err    error // what ended it; read once got is closed
	cancel context.CancelFunc
}

func (f *fixture) get(t testing.TB, conduit bool, path string) *stream {
	t.Helper()
	return getOn(t, f.conn, conduit, path)
}

func getOn(t testing.TB, conn grpc.ClientConnInterface, conduit bool, path string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	recv, err := Get(ctx, conn, conduit, path)
	if err != nil {
		cancel()
		t.Fatalf("Get %s: %v", path, err)
	}
	s := &stream{t: t, got: make(chan *Update, 1000), cancel: cancel}
	go func() {
		defer close(s.got)
		for {
			u, err := recv()
			if err != nil {
				s.err = err
				return
			}
			s.got <- u
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() {
	s.cancel()
	for range s.got {
	}
}

// next returns the next message, failing the test when none comes.
func (s *stream) next() *Update {
	s.t.Helper()
	select {
	case u, ok := <-s.got:
		if !ok {
			s.t.Fatalf("stream ended: %v", s.err)
		}
		return u
	case <-time.After(wait):
		s.t.Fatal("no message")
	}
	return nil
}

// none asserts that no message comes within d.
func (s *stream) none(d time.Duration) {
	s.t.Helper()
	select {
	case u, ok := <-s.got:
		if ok {
			s.t.Fatalf("unexpected message %v", u)
		}
		s.t.Fatalf("stream ended: %v", s.err)
	case <-time.After(d):
	}
}

// end waits for the stream to end and returns why.
func (s *stream) end() error {
	s.t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case u, ok := <-s.got:
			if !ok {
				return s.err
			}
			s.t.Fatalf("message %v where the stream should end", u)
		case <-timeout:
			s.t.Fatal("the stream did not end")
		}
	}
}

// forBoth runs a test with a client of each package.
func forBoth(t *testing.T, test func(t *testing.T, conduit bool)) {
	t.Run("io.linkerd.proxy.destination", func(t *testing.T) { test(t, false) })
	t.Run("conduit.proxy.destination", func(t *testing.T) { test(t, true) })
}

// endpoint returns an inline endpoint (or a WorkloadEntry spec).
func ep(address string, weight uint32, labels map[string]string) *networking.WorkloadEntry {
	return &networking.WorkloadEntry{Address: address, Weight: weight, Labels: labels}
}

// serviceEntry is a STATIC ServiceEntry of one host and one HTTP port 9080.
func serviceEntry(host string, eps ...*networking.WorkloadEntry) *networking.ServiceEntry {
	return &networking.ServiceEntry{Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{Number: 9080, Name: "http", Protocol: "HTTP"}}, Endpoints: eps}
}

func resource(name string, m proto.Message) *mcpapi.Resource {
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// put writes resources of a collection for the owner "test", as a producer's push would.
func (f *fixture) put(t testing.TB, collection string, name string, m proto.Message) {
	t.Helper()
	if _, err := f.store.Apply("test", store.Update{Collection: collection, Resources: []*mcpapi.Resource{resource(name, m)}}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) remove(t testing.TB, collection string, names ...string) {
	t.Helper()
	if _, err := f.store.Apply("test", store.Update{Collection: collection, Removed: names}); err != nil {
		t.Fatal(err)
	}
}

// addrs lists an update's addresses.
func addrs(u *Update) []string {
	var out []string
	for _, a := range u.Addrs {
		out = append(out, a.Addr)
	}
	return out
}
