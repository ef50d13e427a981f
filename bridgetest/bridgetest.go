// Package bridgetest starts a whole mcpbridge in a Go test, on loopback, for tests of your own
// producers and consumers: the real wiring of mcpbridge serve (store, ResourceSink,
// ResourceSource, AggregatedMeshConfigService, xDS, file source, upstreams, downstreams, admin
// HTTP), with nothing to install and nothing left running after the test.
//
//	func TestMySinkGetsReviews(t *testing.T) {
//		b := bridgetest.Start(t)
//		b.LoadYAML(t, `
//	apiVersion: networking.istio.io/v1
//	kind: ServiceEntry
//	metadata: {name: reviews, namespace: shop}
//	spec: {hosts: [reviews.shop.example], ports: [{number: 80, name: http, protocol: HTTP}]}`)
//		startMySink(t, b.GRPCAddr()) // subscribes with node id "my-sink"
//		b.WaitSynced(t, "my-sink", "istio/networking/v1alpha3/serviceentries")
//	}
//
// Versions: the bridge versions a collection by its store revision, a decimal number that
// only grows; it is what clients receive as system_version_info or version_info. Waiting for
// version v is satisfied by any acknowledged version at or after v.
package bridgetest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/app"
	"github.com/mcpbridge/mcpbridge/app/admin"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

// Owner is the producer ID under which Load and LoadYAML store what the test loads.
const Owner = "bridgetest"

// Bridge is a running mcpbridge. Its methods take the calling test's testing.TB, so that one
// bridge can serve the subtests of a test.
type Bridge struct {
	b        *app.Bridge
	grpcAddr string
	httpAddr string
	wait     time.Duration
}

// options are what the Options of Start set.
type options struct {
	cfg  *app.Config
	log  *slog.Logger
	wait time.Duration
}

// Option configures Start.
type Option func(*options)

// WithFiles serves files or directories of Istio YAML, watched as mcpbridge serve --files does.
func WithFiles(paths ...string) Option {
	return func(o *options) { o.cfg.Sources.Files = append(o.cfg.Sources.Files, paths...) }
}

// WithUpstreams makes the bridge dial these ResourceSources as a sink (sources.upstreams).
func WithUpstreams(addrs ...string) Option {
	return func(o *options) {
		for _, a := range addrs {
			o.cfg.Sources.Upstreams = append(o.cfg.Sources.Upstreams, dial.Target{Address: a})
		}
	}
}

// WithDownstreams makes the bridge dial these ResourceSinks and push to them (downstreams).
func WithDownstreams(addrs ...string) Option {
	return func(o *options) {
		for _, a := range addrs {
			o.cfg.Downstreams = append(o.cfg.Downstreams, dial.Target{Address: a})
		}
	}
}

// WithCollections sets the collections the bridge asks producers for (collections).
func WithCollections(names ...string) Option {
	return func(o *options) { o.cfg.Collections = append(o.cfg.Collections, names...) }
}

// WithFullStateFromProducers asks producers for full state only (sink.incremental: false).
func WithFullStateFromProducers() Option {
	return func(o *options) { o.cfg.Sink.Incremental = false }
}

// WithLogger sends the bridge's logs to log; by default they are discarded.
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// WithWaitTimeout bounds Start's wait for readiness and every Wait method. Default 10s.
func WithWaitTimeout(d time.Duration) Option { return func(o *options) { o.wait = d } }

// Start serves a bridge on two loopback ports and returns once it is ready (/readyz: the gRPC
// port serves and every source delivered its first state). It stops when the test ends.
func Start(t testing.TB, opts ...Option) *Bridge {
	t.Helper()
	o := &options{cfg: app.DefaultConfig(), log: slog.New(slog.DiscardHandler), wait: 10 * time.Second}
	o.cfg.GRPC.ShutdownGrace = time.Second
	for _, opt := range opts {
		opt(o)
	}
	// A source that never delivers (an unreachable upstream) is ready anyway when Start stops
	// waiting, as mcpbridge serve is after sources.startup_timeout.
	o.cfg.Sources.StartupTimeout = o.wait
	b, err := app.New(o.cfg, o.log)
	if err != nil {
		t.Fatalf("bridgetest: %v", err)
	}
	grpcLis := listen(t)
	httpLis := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, grpcLis, httpLis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bridgetest: the bridge failed: %v", err)
		}
	})
	tb := &Bridge{b: b, grpcAddr: grpcLis.Addr().String(), httpAddr: httpLis.Addr().String(), wait: o.wait}
	tb.waitReady(t, done)
	return tb
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("bridgetest: listen on loopback: %v", err)
	}
	return lis
}

func (b *Bridge) waitReady(t testing.TB, done chan error) {
	t.Helper()
	deadline := time.Now().Add(b.wait)
	for pending := b.b.Ready().Pending(); len(pending) > 0; pending = b.b.Ready().Pending() {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("bridgetest: the bridge stopped before it was ready: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridgetest: not ready within %s: waiting for %s", b.wait, strings.Join(pending, ", "))
		}
	}
}

// GRPCAddr is the address of every gRPC service (grpc.address).
func (b *Bridge) GRPCAddr() string { return b.grpcAddr }

// HTTPAddr is the address of /healthz, /readyz, /metrics, /debug and the status page.
func (b *Bridge) HTTPAddr() string { return b.httpAddr }

// URL is the base URL of the HTTP endpoints: "http://127.0.0.1:PORT".
func (b *Bridge) URL() string { return "http://" + b.httpAddr }

// Dial returns a plaintext client connection to the gRPC port, closed when the test ends.
func (b *Bridge) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(b.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("bridgetest: dial %s: %v", b.grpcAddr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Store is the bridge's store, to read or write directly.
func (b *Bridge) Store() *store.Store { return b.b.Store() }

// Clients returns the connected consumer streams, as /debug/clients shows them.
func (b *Bridge) Clients() []source.ClientInfo { return b.b.Engine().Clients() }

// LoadYAML makes the Istio YAML (several documents, as in a file) the test's whole state: it
// replaces what earlier Load or LoadYAML calls stored. A fault in the YAML fails the test.
func (b *Bridge) LoadYAML(t testing.TB, yaml string) {
	t.Helper()
	objs, faults := filesource.Decode([]byte(yaml), "LoadYAML")
	if len(faults) > 0 {
		t.Fatalf("bridgetest: LoadYAML: %v", faults)
	}
	state := map[string][]*mcpapi.Resource{}
	for _, o := range objs {
		state[o.Kind.Collection] = append(state[o.Kind.Collection], o.Resource)
	}
	b.replace(t, state)
}

// Object is one Istio config object for Load.
type Object struct {
	// Namespace defaults to "default".
	Namespace, Name string
	// Spec is the body: an istio.io/api message (*networkingv1alpha3.ServiceEntry, ...); its
	// type gives the kind and collection.
	Spec proto.Message
}

// Load makes the objects the test's whole state, like LoadYAML.
func (b *Bridge) Load(t testing.TB, objs ...Object) {
	t.Helper()
	state := map[string][]*mcpapi.Resource{}
	for _, o := range objs {
		k, ok := kinds.ByAMCSTypeURL("type.googleapis.com/" + string(o.Spec.ProtoReflect().Descriptor().FullName()))
		if !ok {
			t.Fatalf("bridgetest: Load %s/%s: %T is not an Istio kind the bridge serves", o.Namespace, o.Name, o.Spec)
		}
		body, err := anypb.New(o.Spec)
		if err != nil {
			t.Fatalf("bridgetest: Load %s/%s: %v", o.Namespace, o.Name, err)
		}
		ns := o.Namespace
		if ns == "" {
			ns = "default"
		}
		r := &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: ns + "/" + o.Name}, Body: body}
		state[k.Collection] = append(state[k.Collection], r)
	}
	b.replace(t, state)
}

func (b *Bridge) replace(t testing.TB, state map[string][]*mcpapi.Resource) {
	t.Helper()
	if _, err := b.b.Store().ReplaceOwner(Owner, state); err != nil {
		t.Fatalf("bridgetest: the store refused the state: %v", err)
	}
}

// Version is a collection's current version, as its subscribers are sent it. Any name of a
// kind works: MCP collection, alias, xDS or AMCS type URL.
func (b *Bridge) Version(collection string) string {
	name, _ := admin.CollectionOf(collection)
	return strconv.FormatUint(b.b.Store().View().Collection(name).Revision, 10)
}

// WaitAcked waits until a client with this node id has ACKed version (or a later one) of the
// collection (any of its names), and returns that client. It fails the test after the wait
// timeout, showing what every client holds.
func (b *Bridge) WaitAcked(t testing.TB, node, collection, version string) source.ClientInfo {
	t.Helper()
	rev, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		t.Fatalf("bridgetest: WaitAcked: version %q is not a bridge version (a decimal revision)", version)
	}
	name, _ := admin.CollectionOf(collection)
	ci, ok := b.poll(func() (source.ClientInfo, bool) {
		return b.find(node, name, func(s source.SubscriptionInfo) bool { return s.Acked && s.AckedRevision >= rev })
	})
	if !ok {
		t.Fatalf("bridgetest: no client %q ACKed %s version %s within %s; clients: %s", node, name, version, b.wait, b.describe())
	}
	return ci
}

// WaitSynced waits until a client with this node id has ACKed the collection's current
// version, read when WaitSynced is called.
func (b *Bridge) WaitSynced(t testing.TB, node, collection string) source.ClientInfo {
	t.Helper()
	return b.WaitAcked(t, node, collection, b.Version(collection))
}

// WaitNACK waits until a client with this node id has NACKed a version of the collection, and
// returns the client's error message.
func (b *Bridge) WaitNACK(t testing.TB, node, collection string) string {
	t.Helper()
	name, _ := admin.CollectionOf(collection)
	ci, ok := b.poll(func() (source.ClientInfo, bool) {
		return b.find(node, name, func(s source.SubscriptionInfo) bool { return s.LastNACK != nil })
	})
	if !ok {
		t.Fatalf("bridgetest: no client %q NACKed %s within %s; clients: %s", node, name, b.wait, b.describe())
	}
	for _, s := range ci.Subscriptions {
		if s.Collection == name && s.LastNACK != nil {
			return s.LastNACK.Message
		}
	}
	return ""
}

// poll checks cond every few milliseconds until it holds or the wait timeout passes. The
// engine keeps no history to wait on, so a short poll under a deadline is the honest wait.
func (b *Bridge) poll(cond func() (source.ClientInfo, bool)) (source.ClientInfo, bool) {
	deadline := time.Now().Add(b.wait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if ci, ok := cond(); ok {
			return ci, true
		}
		if time.Now().After(deadline) {
			return source.ClientInfo{}, false
		}
		<-tick.C
	}
}

func (b *Bridge) find(node, collection string, match func(source.SubscriptionInfo) bool) (source.ClientInfo, bool) {
	for _, ci := range b.Clients() {
		if ci.Node != node {
			continue
		}
		for _, s := range ci.Subscriptions {
			if s.Collection == collection && match(s) {
				return ci, true
			}
		}
	}
	return source.ClientInfo{}, false
}

// describe lists every client's subscriptions for a failure message.
func (b *Bridge) describe() string {
	var sb strings.Builder
	for _, ci := range b.Clients() {
		fmt.Fprintf(&sb, "\n  #%d %s node %q:", ci.ID, ci.Protocol, ci.Node)
		for _, s := range ci.Subscriptions {
			fmt.Fprintf(&sb, " %s sent %s acked %d", s.Collection, s.SentVersion, s.AckedRevision)
			if s.LastNACK != nil {
				fmt.Fprintf(&sb, " (NACK: %s)", s.LastNACK.Message)
			}
			sb.WriteString(";")
		}
	}
	if sb.Len() == 0 {
		return "none connected"
	}
	return sb.String()
}
