package sink

import (
	"context"
	"log/slog"
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/store"
)

// fastBackoff keeps reconnect tests short.
var fastBackoff = dial.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}

func newUpstream(t *testing.T, addr string, st *store.Store, colls ...Collection) *Upstream {
	t.Helper()
	u, err := NewUpstream(UpstreamOptions{
		Target: dial.Target{Address: addr}, Store: st, Collections: colls,
		SinkNode: SinkNode{ID: "bridge-1"}, Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// putSE writes ServiceEntries into a source's store as its own producer would.
func putSE(t *testing.T, st *store.Store, rs ...*mcpapi.Resource) {
	t.Helper()
	if _, err := st.Apply("origin", store.Update{Collection: seColl, Resources: rs}); err != nil {
		t.Fatal(err)
	}
}

func removeSE(t *testing.T, st *store.Store, names ...string) {
	t.Helper()
	if _, err := st.Apply("origin", store.Update{Collection: seColl, Removed: names}); err != nil {
		t.Fatal(err)
	}
}

func TestUpstreamAppliesFullStateFromASourceACKsItAndFollowsChanges(t *testing.T) {
	upstream := newStore()
	putSE(t, upstream, ses("a", "b")...)
	src := startSource(t, upstream, "127.0.0.1:0")

	local := newStore()
	u := newUpstream(t, src.addr, local, Collection{Name: seColl, Incremental: true}, Collection{Name: vsColl})
	runUpstream(t, u)
	waitClosed(t, "ready", u.Ready())

	assertNames(t, local, seColl, "ns/a", "ns/b")
	if e := local.View().Get(seColl, "ns/a"); e.Owner != "upstream:"+src.addr {
		t.Fatalf("owner %q, want upstream:%s", e.Owner, src.addr)
	}
	if !u.Connected() {
		t.Fatal("not connected while the stream is open")
	}
	eventually(t, "source saw both ACKs", func() bool { return src.engine.Stats().ACKs >= 2 })
	if n := src.engine.Stats().NACKs; n != 0 {
		t.Fatalf("%d NACKs", n)
	}
	for _, c := range []struct {
		coll        string
		incremental bool
	}{{seColl, true}, {vsColl, false}} {
		r := src.recorder.opening(c.coll)
		if r == nil || r.Incremental != c.incremental || r.SinkNode.GetId() != "bridge-1" || len(r.InitialResourceVersions) != 0 {
			t.Fatalf("opening request for %s: %v, want incremental %v, sink node bridge-1, no initial versions", c.coll, r, c.incremental)
		}
	}

	putSE(t, upstream, ses("c")...)
	waitFor(t, local, "upsert arrives", func() bool { return len(names(local, seColl)) == 3 })
	removeSE(t, upstream, "ns/a")
	waitFor(t, local, "removal arrives", func() bool { return len(names(local, seColl)) == 2 })
	assertNames(t, local, seColl, "ns/b", "ns/c")
}

func TestUpstreamReconnectResumesWithInitialVersionsAndReceivesOnlyChanges(t *testing.T) {
	upstream := newStore()
	putSE(t, upstream, ses("a", "b", "c")...)
	first := startSource(t, upstream, "127.0.0.1:0")
	addr := first.addr

	local := newStore()
	u := newUpstream(t, addr, local, Collection{Name: seColl, Incremental: true})
	runUpstream(t, u)
	waitClosed(t, "ready", u.Ready())
	held := map[string]string{}
	for _, n := range []string{"ns/a", "ns/b", "ns/c"} {
		held[n] = local.View().Get(seColl, n).Version
	}

	first.stop()
	eventually(t, "disconnected", func() bool { return !u.Connected() })
	putSE(t, upstream, serviceEntry("ns/b", "b-changed.example"), serviceEntry("ns/d", "d.example"))
	removeSE(t, upstream, "ns/c")

	second := startSource(t, upstream, addr)
	waitFor(t, local, "changes after the reconnect", func() bool {
		e := local.View().Get(seColl, "ns/b")
		return e != nil && e.Version != held["ns/b"] && len(names(local, seColl)) == 3
	})
	assertNames(t, local, seColl, "ns/a", "ns/b", "ns/d")

	r := second.recorder.opening(seColl)
	if r == nil || !maps.Equal(r.InitialResourceVersions, held) {
		t.Fatalf("resumed with initial_resource_versions %v, want %v", r.GetInitialResourceVersions(), held)
	}
	// Only ns/b and ns/d crossed the wire again; ns/a, unchanged, did not.
	eventually(t, "resumed response ACKed", func() bool { return second.engine.Stats().ACKs >= 1 })
	if n := second.engine.Stats().Resources; n != 2 {
		t.Fatalf("the source resent %d resources after the reconnect, want 2 (the changed and the new)", n)
	}
}

func TestUpstreamNACKsAnInvalidResponseAndKeepsItsLastGoodState(t *testing.T) {
	// The upstream's own store does not validate, so it can serve a body of the wrong kind.
	upstream := store.New(store.Options{})
	putSE(t, upstream, ses("a")...)
	src := startSource(t, upstream, "127.0.0.1:0")
	local := newStore()
	u := newUpstream(t, src.addr, local, Collection{Name: seColl, Incremental: true})
	runUpstream(t, u)
	waitClosed(t, "ready", u.Ready())
	before := dump(local)

	putSE(t, upstream, virtualService("ns/wrong", "w.example"))
	eventually(t, "source saw a NACK", func() bool { return src.engine.Stats().NACKs == 1 })
	if after := dump(local); after != before {
		t.Fatalf("store changed by a NACKed response:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// The next good change is applied as usual.
	removeSE(t, upstream, "ns/wrong")
	putSE(t, upstream, ses("b")...)
	waitFor(t, local, "next change applied", func() bool { return len(names(local, seColl)) == 2 })
}

// scriptedSource is a ResourceSource whose streams run a test's function.
type scriptedSource struct {
	mcp.UnimplementedResourceSourceServer
	script func(stream grpc.BidiStreamingServer[mcp.RequestResources, mcp.Resources]) error
}

func (s *scriptedSource) EstablishResourceStream(stream grpc.BidiStreamingServer[mcp.RequestResources, mcp.Resources]) error {
	return s.script(stream)
}

func startScripted(t *testing.T, s *scriptedSource) string {
	t.Helper()
	lis := listen(t, "127.0.0.1:0")
	srv := grpc.NewServer()
	mcp.RegisterResourceSourceServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func TestUpstreamBackoffDoesNotSpinOnAFailingSource(t *testing.T) {
	s := &scriptedSource{script: func(grpc.BidiStreamingServer[mcp.RequestResources, mcp.Resources]) error {
		return status.Error(codes.Unavailable, "always failing")
	}}
	waits := runWithWaits(t, s, 4)
	// 50ms doubling with ±20% jitter: each wait at least 2×0.8/1.2 ≈ 1.33 times the one before.
	if waits[0] < 40*time.Millisecond {
		t.Fatalf("first wait %s, want about 50ms", waits[0])
	}
	for i := 1; i < len(waits); i++ {
		if float64(waits[i]) < 1.3*float64(waits[i-1]) {
			t.Fatalf("waits %v do not grow: the upstream would spin on a failing source", waits)
		}
	}
}

func TestUpstreamBackoffResetsAfterAStreamThatDelivered(t *testing.T) {
	s := &scriptedSource{script: func(stream grpc.BidiStreamingServer[mcp.RequestResources, mcp.Resources]) error {
		if _, err := stream.Recv(); err != nil {
			return err
		}
		if err := stream.Send(&mcp.Resources{Collection: seColl, Nonce: "1"}); err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil { // the ACK
			return err
		}
		return status.Error(codes.Unavailable, "delivered, then failing")
	}}
	// Without the reset the waits would double: 50, 100, 200ms...
	for i, w := range runWithWaits(t, s, 4) {
		if w > 60*time.Millisecond { // base 50ms + 20% jitter
			t.Fatalf("reconnect %d waits %s after a stream that delivered: the backoff did not reset", i+1, w)
		}
	}
}

// runWithWaits runs an Upstream with a 50ms doubling backoff against s and returns the first n
// waits it chooses before reconnecting, read from its log: the test depends on the backoff's
// decisions, not on how fast a loaded machine runs.
func runWithWaits(t *testing.T, s *scriptedSource, n int) []time.Duration {
	t.Helper()
	waits := &reconnectWaits{c: make(chan time.Duration, 100)}
	u, err := NewUpstream(UpstreamOptions{Target: dial.Target{Address: startScripted(t, s)}, Store: newStore(),
		Collections: []Collection{{Name: seColl}}, Backoff: dial.Backoff{Base: 50 * time.Millisecond, Max: 5 * time.Second},
		Logger: slog.New(waits)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var out []time.Duration
	for range n {
		select {
		case w := <-waits.c:
			out = append(out, w)
		case <-time.After(20 * time.Second):
			t.Fatalf("the upstream did not reconnect; waits so far %v", out)
		}
	}
	return out
}

// reconnectWaits is a slog handler that reports the "in" of each reconnect log line.
type reconnectWaits struct{ c chan time.Duration }

func (h *reconnectWaits) Enabled(context.Context, slog.Level) bool { return true }
func (h *reconnectWaits) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *reconnectWaits) WithGroup(string) slog.Handler            { return h }
func (h *reconnectWaits) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "in" {
			h.c <- a.Value.Duration()
		}
		return true
	})
	return nil
}

func TestUpstreamIsReadyOnlyWhenEveryCollectionHasItsFirstState(t *testing.T) {
	release := make(chan struct{})
	s := &scriptedSource{script: func(stream grpc.BidiStreamingServer[mcp.RequestResources, mcp.Resources]) error {
		for range 2 { // the two opening requests
			if _, err := stream.Recv(); err != nil {
				return err
			}
		}
		if err := stream.Send(&mcp.Resources{Collection: seColl, Nonce: "1"}); err != nil {
			return err
		}
		select {
		case <-release:
		case <-stream.Context().Done():
			return nil
		}
		if err := stream.Send(&mcp.Resources{Collection: vsColl, Nonce: "2"}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	}}
	addr := startScripted(t, s)
	u := newUpstream(t, addr, newStore(), Collection{Name: seColl}, Collection{Name: vsColl})
	runUpstream(t, u)
	eventually(t, "connected", u.Connected)
	select {
	case <-u.Ready():
		t.Fatal("ready before the second collection's first state")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	waitClosed(t, "ready after every collection", u.Ready())
}

func TestUpstreamRunFailsAtOnceForAnUnusableTarget(t *testing.T) {
	u, err := NewUpstream(UpstreamOptions{Store: newStore(),
		Target: dial.Target{Address: "127.0.0.1:1", TLS: &dial.TLS{CAFile: "/nonexistent/ca.pem"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Run(context.Background()); err == nil {
		t.Fatal("Run accepted a CA file that does not exist")
	}
}

// An upstream's authz scope bounds what it may write: the bridge asks it only for the
// collections in scope, and a message with a resource outside is NACKed PermissionDenied with
// nothing of it applied, until the upstream sends one within.
func TestUpstreamOutsideItsAuthzScopeIsRefusedWhole(t *testing.T) {
	upstream := newStore()
	putSE(t, upstream, serviceEntry("ns/a", "a.example"), serviceEntry("other/x", "x.example"))
	src := startSource(t, upstream, "127.0.0.1:0")

	local := newStore()
	u, err := NewUpstream(UpstreamOptions{
		Target: dial.Target{Address: src.addr, Authz: &authz.Scope{Collections: []string{seColl}, Namespaces: []string{"ns"}}},
		Store:  local, Collections: []Collection{{Name: seColl, Incremental: true}, {Name: vsColl}},
		SinkNode: SinkNode{ID: "bridge-1"}, Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUpstream(t, u)
	eventually(t, "the source saw a NACK", func() bool { return src.engine.Stats().NACKs >= 1 })
	if r := src.recorder.opening(vsColl); r != nil {
		t.Fatalf("asked for %s, outside the upstream's scope: %v", vsColl, r)
	}
	assertNames(t, local, seColl)

	removeSE(t, upstream, "other/x")
	waitClosed(t, "ready", u.Ready())
	assertNames(t, local, seColl, "ns/a")
}

// A source does not resend what a refused message carried, so after an incremental NACK the
// bridge resumes the stream once the upstream's state changes, and receives the valid
// resources of the refused message too.
func TestUpstreamResumesAfterARefusedIncrementalMessage(t *testing.T) {
	upstream := newStore()
	putSE(t, upstream, serviceEntry("ns/a", "a.example"))
	src := startSource(t, upstream, "127.0.0.1:0")

	local := newStore()
	u, err := NewUpstream(UpstreamOptions{
		Target: dial.Target{Address: src.addr, Authz: &authz.Scope{Collections: []string{"*"}, Namespaces: []string{"ns"}}},
		Store:  local, Collections: []Collection{{Name: seColl, Incremental: true}},
		SinkNode: SinkNode{ID: "bridge-1"}, Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUpstream(t, u)
	waitClosed(t, "ready", u.Ready())

	// One message: a valid change and a resource outside the scope. Refused whole.
	putSE(t, upstream, serviceEntry("ns/a", "a2.example"), serviceEntry("other/x", "x.example"))
	eventually(t, "the source saw a NACK", func() bool { return src.engine.Stats().NACKs >= 1 })
	if got := hostOf(t, local, "ns/a"); got != "a.example" {
		t.Fatalf("ns/a host %q after the refused message, want the old a.example", got)
	}
	// The upstream mends its fault: the change to ns/a, which the source does not resend,
	// arrives with the resumed stream.
	removeSE(t, upstream, "other/x")
	waitFor(t, local, "ns/a changed", func() bool { return hostOf(t, local, "ns/a") == "a2.example" })
	assertNames(t, local, seColl, "ns/a")
}

func hostOf(t *testing.T, st *store.Store, name string) string {
	t.Helper()
	e := st.View().Get(seColl, name)
	if e == nil {
		return ""
	}
	r, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	var se networking.ServiceEntry
	if err := r.Body.UnmarshalTo(&se); err != nil {
		t.Fatal(err)
	}
	return se.Hosts[0]
}
