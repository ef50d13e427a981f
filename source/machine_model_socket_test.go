package source

import (
	"context"
	"flag"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/rpcpeer"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// The model-based test end to end: the same random schedules and checks as
// TestMachineAgainstModel, with every client a real aggregated xDS stream (state of the world
// or delta, go-control-plane's messages) over a loopback socket to a real Engine. The test
// world's types are served under their keys as type URLs with the model's policies, each
// resource an Any of istio.mcp.v1alpha1.Resource so that a state-of-the-world client reads
// its name and version. Fewer, shorter schedules: after each step the client waits until
// the stream has been quiet for a moment.
func TestMachineAgainstModelOverSockets(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end model run skipped in -short mode")
	}
	defer setFlag(t, "rapid.checks", "25")()
	defer setFlag(t, "rapid.steps", "20")()
	rapid.Check(t, func(t *rapid.T) {
		st := store.New(store.Options{})
		acc := drawModelAccess(t)
		addr := serveModelADS(t, st, acc.policy)
		runModel(t, st, acc, func(t *rapid.T) modelConn { return dialModelADS(t, addr) }, false, false)
	})
}

// setFlag sets a flag for one test and returns what restores it.
func setFlag(t *testing.T, name, value string) func() {
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if f.Value.String() == f.DefValue { // an explicit -rapid.checks wins
		if err := flag.Set(name, value); err != nil {
			t.Fatal(err)
		}
	}
	return func() { flag.Set(name, old) }
}

// modelADS serves the model's types over xDS ADS, as source/xds serves Envoy's: a thin
// adapter from go-control-plane's messages to engine requests.
type modelADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	engine *Engine
}

var (
	modelSotWLayout = wire.NewLayout(&discovery.DiscoveryResponse{}, wire.Roles{
		Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce", Errors: "resource_errors",
	})
	modelDeltaLayout = wire.NewLayout(&discovery.DeltaDiscoveryResponse{}, wire.Roles{
		Version: "system_version_info", Resources: "resources", Key: "type_url",
		Removed: "removed_resources", Nonce: "nonce", DeltaResource: &discovery.Resource{}, Errors: "resource_errors",
	})
)

func serveModelADS(t *rapid.T, st *store.Store, policy *authz.Policy) string {
	// Delta responses above a few resources go in parts (see modelRun.splitAt); store changes
	// are pushed at once or, as the bridge does by default, at most once per interval.
	interval := rapid.SampledFrom([]time.Duration{0, 20 * time.Millisecond}).Draw(t, "pushInterval")
	eng := New(Options{Store: st, MaxResponseSize: responseEnvelope + 100, PushInterval: interval,
		Authz: policy, NamespaceOf: modelNamespaceOf}) // plaintext: every client is unauthenticated
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, &modelADS{engine: eng})
	go srv.Serve(lis)
	t.Cleanup(func() {
		eng.Stop()
		srv.Stop()
	})
	return lis.Addr().String()
}

func (a *modelADS) StreamAggregatedResources(s grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	return a.engine.Serve(s.Context(), &modelAdapter{layout: modelSotWLayout, mode: StateOfTheWorld, send: s.SendMsg, recv: func() (*Request, error) {
		m, err := s.Recv()
		if err != nil {
			return nil, err
		}
		return &Request{Key: m.TypeUrl, Names: m.ResourceNames, Nonce: m.ResponseNonce, ErrorDetail: m.ErrorDetail, Node: modelNodeOf(m.GetNode())}, nil
	}}, "model-sotw", rpcpeer.Addr(s.Context()))
}

func (a *modelADS) DeltaAggregatedResources(s grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	return a.engine.Serve(s.Context(), &modelAdapter{layout: modelDeltaLayout, mode: Incremental, send: s.SendMsg, recv: func() (*Request, error) {
		m, err := s.Recv()
		if err != nil {
			return nil, err
		}
		req := &Request{Key: m.TypeUrl, Subscribe: m.ResourceNamesSubscribe, Unsubscribe: m.ResourceNamesUnsubscribe,
			Nonce: m.ResponseNonce, ErrorDetail: m.ErrorDetail, Node: modelNodeOf(m.GetNode())}
		if len(m.InitialResourceVersions) > 0 {
			req.InitialVersions = m.InitialResourceVersions
		}
		return req, nil
	}}, "model-delta", rpcpeer.Addr(s.Context()))
}

// modelNodeOf reads the node and its narrowing from node metadata, as source/xds does.
func modelNodeOf(n *core.Node) *Node {
	if n.GetId() == "" {
		return nil
	}
	return &Node{ID: n.GetId(), Namespaces: ParseNodeNamespaces(n.GetMetadata().GetFields()[NodeNamespacesKey].GetStringValue())}
}

// modelNode is the node a client sends on its first request: its ID and narrowing.
func modelNode(req *typedRequest) *core.Node {
	n := &core.Node{Id: req.Node.ID}
	if req.Node.Namespaces != nil {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{NodeNamespacesKey: structpb.NewStringValue(strings.Join(req.Node.Namespaces, ","))}}
	}
	return n
}

type modelAdapter struct {
	layout *wire.Layout
	mode   Mode
	send   func(any) error
	recv   func() (*Request, error)
}

// Type is the model world's type of a key, split as the xDS adapter splits delta (the
// engine's MaxResponseSize decides where).
func (a *modelAdapter) Type(req *Request, _ *Node) Type {
	typ := testType(req.Key, a.mode)
	typ.Form, typ.Splittable = wire.FormAnyMCPResource, a.mode == Incremental
	return typ
}

func (a *modelAdapter) Recv() (*Request, error)  { return a.recv() }
func (a *modelAdapter) Send(f *wire.Frame) error { return a.send(f) }
func (a *modelAdapter) Layout() *wire.Layout     { return a.layout }

// socketConn is one client's ADS stream over loopback.
type socketConn struct {
	addr    string
	conn    *grpc.ClientConn
	cancel  context.CancelFunc
	sotw    grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	delta   grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	got     chan clientResponse
	decoded func(t *rapid.T) // set by open: reports a decode failure seen by the reader
	mode    Mode
}

func dialModelADS(t *rapid.T, addr string) modelConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// The mode is the model client's; it is fixed when the first request is sent.
	return &socketConn{addr: addr, conn: conn, mode: -1}
}

// open starts a stream of the client's mode and a goroutine reading it.
func (c *socketConn) open(t *rapid.T, mode Mode) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.mode = cancel, mode
	got := make(chan clientResponse, 64)
	c.got = got
	failed := make(chan error, 1)
	c.decoded = func(t *rapid.T) {
		select {
		case err := <-failed:
			t.Fatalf("reading a response: %v", err)
		default:
		}
	}
	client := discovery.NewAggregatedDiscoveryServiceClient(c.conn)
	var next func() (clientResponse, error)
	if mode == Incremental {
		s, err := client.DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.delta = s
		next = func() (clientResponse, error) {
			m, err := s.Recv()
			if err != nil {
				return clientResponse{}, err
			}
			return fromDelta(m)
		}
	} else {
		s, err := client.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.sotw = s
		next = func() (clientResponse, error) {
			m, err := s.Recv()
			if err != nil {
				return clientResponse{}, err
			}
			return fromSotW(m)
		}
	}
	go func() {
		defer close(got)
		for {
			r, err := next()
			if err != nil {
				if ctx.Err() == nil {
					select {
					case failed <- err:
					default:
					}
				}
				return
			}
			got <- r
		}
	}()
	t.Cleanup(cancel)
}

func (c *socketConn) send(t *rapid.T, req *typedRequest) {
	var node *core.Node
	if c.cancel == nil {
		c.open(t, req.Mode)
		node = modelNode(req) // on the first request of a stream, as Envoy sends it
	}
	var err error
	if c.mode == Incremental {
		err = c.delta.Send(&discovery.DeltaDiscoveryRequest{
			TypeUrl: req.Key, ResourceNamesSubscribe: req.Subscribe, ResourceNamesUnsubscribe: req.Unsubscribe,
			InitialResourceVersions: req.InitialVersions, ResponseNonce: req.Nonce, ErrorDetail: req.ErrorDetail, Node: node,
		})
	} else {
		err = c.sotw.Send(&discovery.DiscoveryRequest{
			TypeUrl: req.Key, ResourceNames: req.Names, ResponseNonce: req.Nonce, ErrorDetail: req.ErrorDetail, Node: node,
		})
	}
	if err != nil {
		t.Fatalf("send: %v", err)
	}
}

// received waits until the stream has been quiet for a moment (longer when the driver
// settles before checking convergence) and returns what arrived.
func (c *socketConn) received(t *rapid.T, settle bool) []clientResponse {
	if c.got == nil {
		return nil
	}
	quiet := 15 * time.Millisecond
	if settle {
		quiet = 250 * time.Millisecond
	}
	var out []clientResponse
	for {
		select {
		case r, ok := <-c.got:
			if !ok {
				c.decoded(t)
				t.Fatal("the server ended the stream")
			}
			out = append(out, r)
		case <-time.After(quiet):
			c.decoded(t)
			return out
		}
	}
}

func (c *socketConn) changed([]string) {} // the engine watches the store itself

func (c *socketConn) heartbeat(*rapid.T, time.Time) []clientResponse { return nil } // no TTLs over sockets

func (c *socketConn) reconnect(t *rapid.T) {
	if c.cancel != nil {
		c.cancel()
		for range c.got { // the old stream's last responses are gone with it
		}
		c.cancel, c.got = nil, nil
	}
}

func fromSotW(m *discovery.DiscoveryResponse) (clientResponse, error) {
	r := clientResponse{key: m.TypeUrl, nonce: m.Nonce, version: m.VersionInfo, errors: resourceErrors(m.ResourceErrors)}
	for _, a := range m.Resources {
		res := &mcpapi.Resource{}
		if err := a.UnmarshalTo(res); err != nil {
			return r, err
		}
		r.resources = append(r.resources, modelReceived(res))
	}
	return r, nil
}

func fromDelta(m *discovery.DeltaDiscoveryResponse) (clientResponse, error) {
	r := clientResponse{key: m.TypeUrl, nonce: m.Nonce, version: m.SystemVersionInfo, removed: m.RemovedResources, errors: resourceErrors(m.ResourceErrors)}
	for _, dr := range m.Resources {
		if dr.Resource == nil {
			r.missing = append(r.missing, dr.Name)
			continue
		}
		res := &mcpapi.Resource{}
		if err := dr.Resource.UnmarshalTo(res); err != nil {
			return r, err
		}
		got := modelReceived(res)
		got.version = dr.Version
		r.resources = append(r.resources, got)
	}
	return r, nil
}

func resourceErrors(errs []*discovery.ResourceError) []wire.ResourceError {
	var out []wire.ResourceError
	for _, e := range errs {
		out = append(out, wire.ResourceError{Name: e.GetResourceName().GetName(), Code: e.GetErrorDetail().GetCode(), Message: e.GetErrorDetail().GetMessage()})
	}
	return out
}

func modelReceived(res *mcpapi.Resource) receivedResource {
	b, err := proto.Marshal(res)
	if err != nil {
		panic(err) // a message just decoded
	}
	e := &store.Entry{Bytes: b}
	return receivedResource{name: res.GetMetadata().GetName(), version: res.GetMetadata().GetVersion(), refs: refsOf(e)}
}
