package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	conduitcommon "github.com/mcpbridge/mcpbridge/api/linkerd/conduit/common"
	linkerdpb "github.com/mcpbridge/mcpbridge/api/linkerd/destination"
	"github.com/mcpbridge/mcpbridge/source/linkerd"
)

// linkerdGet opens a Destination.Get stream (today's package, or the seed's with conduit) and
// returns its next message, or the error that ended it.
type linkerdStream struct {
	t    *testing.T
	recv func() (*linkerd.Update, error)
}

func linkerdGet(t *testing.T, conn grpc.ClientConnInterface, conduit bool, path string) *linkerdStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	recv, err := linkerd.Get(ctx, conn, conduit, path)
	if err != nil {
		t.Fatalf("Get %s: %v", path, err)
	}
	return &linkerdStream{t: t, recv: recv}
}

func (s *linkerdStream) next() *linkerd.Update {
	s.t.Helper()
	u, err := s.recv()
	if err != nil {
		s.t.Fatalf("stream ended: %v", err)
	}
	return u
}

func (s *linkerdStream) end() error {
	s.t.Helper()
	u, err := s.recv()
	if err == nil {
		s.t.Fatalf("got %v where the stream should end", u)
	}
	return err
}

func staticSE(name, host string, addrs ...string) *mcpapi.Resource {
	se := &networking.ServiceEntry{Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{Number: 9080, Name: "http", Protocol: "HTTP"}}}
	for _, a := range addrs {
		se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{Address: a})
	}
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, se, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

func assertAddrs(t *testing.T, u *linkerd.Update, kind string, want ...string) {
	t.Helper()
	var got []string
	for _, a := range u.Addrs {
		got = append(got, a.Addr)
	}
	slices.Sort(got)
	if u.Kind != kind || !slices.Equal(got, want) {
		t.Fatalf("got %v, want %s %v", u, kind, want)
	}
}

// rawCodec reads a stream's messages as the bytes sent: to compare two answers byte for byte.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return proto.Marshal(v.(proto.Message)) }
func (rawCodec) Unmarshal(b []byte, v any) error { *(v.(*[]byte)) = slices.Clone(b); return nil }
func (rawCodec) Name() string                    { return "proto" }

// linkerdFirstBytes opens a Get stream and returns its first message as sent, and whether the
// stream is still open a moment later.
func linkerdFirstBytes(t *testing.T, conn *grpc.ClientConn, conduit bool, path string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	method, req := "/io.linkerd.proxy.destination.Destination/Get", proto.Message(&linkerdpb.GetDestination{Scheme: "k8s", Path: path})
	if conduit {
		method, req = "/conduit.proxy.destination.Destination/Get", &conduitcommon.Destination{Scheme: "k8s", Path: path}
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(req); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var b []byte
	if err := stream.RecvMsg(&b); err != nil {
		t.Fatalf("Get %s: %v", path, err)
	}
	return b
}

// Consumer authorization: a peer resolves only services whose ServiceEntry its consume rules
// let it read; a service it may not read is answered byte for byte as a service that does not
// exist (no oracle: the peer cannot tell it exists), and the refusal counted; a peer no rule
// matches is refused before anything.
func TestLinkerdAuthzConsumeRules(t *testing.T) {
	s := startSecured(t, nil)
	if _, err := s.Store().ReplaceOwner("test", map[string][]*mcpapi.Resource{seColl: {
		staticSE("payments/ledger", "ledger.payments.svc.cluster.local", "10.0.0.1"),
		staticSE("other/secret", "secret.other.svc.cluster.local", "10.0.0.2"),
	}}); err != nil {
		t.Fatal(err)
	}
	for _, conduit := range []bool{false, true} {
		app := s.conn(t, idApp)
		assertAddrs(t, linkerdGet(t, app, conduit, "ledger.payments.svc.cluster.local:9080").next(), "add", "10.0.0.1:9080")
		if u := linkerdGet(t, app, conduit, "unknown.payments.svc.cluster.local:9080").next(); u.Kind != "no_endpoints" || u.Exists {
			t.Fatalf("unknown service: %v", u)
		}
		hidden := linkerdFirstBytes(t, app, conduit, "secret.other.svc.cluster.local:9080")
		absent := linkerdFirstBytes(t, app, conduit, "absent.other.svc.cluster.local:9080")
		if !bytes.Equal(hidden, absent) || len(hidden) == 0 {
			t.Fatalf("conduit %v: a hidden service is answered %x, a missing one %x: want the same bytes", conduit, hidden, absent)
		}
		if u := linkerdGet(t, app, conduit, "secret.other.svc.cluster.local:9080").next(); u.Kind != "no_endpoints" || u.Exists {
			t.Fatalf("a service of another namespace: %v, want no_endpoints{exists: false}", u)
		}
		assertStatus(t, "a peer no rule matches", linkerdGet(t, s.conn(t, idStranger), conduit, "ledger.payments.svc.cluster.local:9080").end(),
			codes.PermissionDenied, "no authorization rule")
		assertAddrs(t, linkerdGet(t, s.conn(t, idIstiod), conduit, "secret.other.svc.cluster.local:9080").next(), "add", "10.0.0.2:9080")
	}
	eventually(t, s.running, 4, "mcpbridge_authz_refusals_total", "role", "source", "reason", "collection")
	eventually(t, s.running, 2, "mcpbridge_authz_refusals_total", "role", "source", "reason", "no_rule")
}

// The limits hold for Destination.Get as for every stream: a peer over limits.streams_per_peer
// is refused ResourceExhausted naming the key.
func TestLinkerdStreamsPerPeerLimit(t *testing.T) {
	b := start(t, func(c *Config) { c.Limits.StreamsPerPeer = 2 })
	conn := dialConn(t, b.grpcAddr)
	for range 2 {
		linkerdGet(t, conn, false, "a.example.com:80").next()
	}
	assertStatus(t, "a third stream", linkerdGet(t, conn, true, "a.example.com:80").end(), codes.ResourceExhausted, "limits.streams_per_peer")
	eventually(t, b, 1, "mcpbridge_limit_refusals_total", "limit", "streams_per_peer")
}

// End to end from a file: the bridge serving a directory of Istio YAML answers a proxy's
// Get from it, and an edit of the file reaches the stream as an add and a remove.
func TestLinkerdFileEditAddsAndRemoves(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "reviews.yaml")
	write := func(addrs ...string) {
		t.Helper()
		y := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: reviews
  namespace: bookinfo
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
`
		for _, a := range addrs {
			y += "  - address: " + a + "\n"
		}
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("10.0.0.1", "10.0.0.2")
	b := start(t, func(c *Config) { c.Sources.Files = []string{dir} })
	conn := dialConn(t, b.grpcAddr)
	for _, conduit := range []bool{false, true} {
		s := linkerdGet(t, conn, conduit, "reviews.bookinfo.svc.cluster.local:9080")
		assertAddrs(t, s.next(), "add", "10.0.0.1:9080", "10.0.0.2:9080")
		write("10.0.0.2", "10.0.0.3")
		assertAddrs(t, s.next(), "add", "10.0.0.3:9080")
		assertAddrs(t, s.next(), "remove", "10.0.0.1:9080")
		write("10.0.0.1", "10.0.0.2") // back, for the next client
		assertAddrs(t, s.next(), "add", "10.0.0.1:9080")
		assertAddrs(t, s.next(), "remove", "10.0.0.3:9080")
	}
	// Each change's latency from the store write to the stream is measured, per package (the
	// first stream, still open, took the second one's two changes too).
	eventually(t, b, 4, "mcpbridge_push_latency_seconds", "protocol", "linkerd-destination")
	eventually(t, b, 2, "mcpbridge_push_latency_seconds", "protocol", "conduit-destination")
}

// linkerd.keepalive_interval reaches the streams: an empty add after each quiet interval.
func TestLinkerdKeepaliveIntervalFromConfig(t *testing.T) {
	b := start(t, func(c *Config) { c.Linkerd.KeepaliveInterval = 100 * time.Millisecond })
	s := linkerdGet(t, dialConn(t, b.grpcAddr), false, "a.example.com:80")
	if u := s.next(); u.Kind != "no_endpoints" {
		t.Fatalf("first message %v", u)
	}
	start := time.Now()
	if u := s.next(); u.Kind != "add" || len(u.Addrs) != 0 {
		t.Fatalf("got %v, want the empty add of the keep-alive", u)
	}
	if since := time.Since(start); since > 5*time.Second {
		t.Fatalf("keep-alive after %s", since)
	}
}
