package source

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// The model-based test of the subscription machine. A randomized driver interleaves store
// writes, subscriptions, name changes (with and without "*"), ACKs, NACKs, stale requests and
// reconnects with initial versions, for state-of-the-world and incremental clients on one
// aggregated stream carrying four dependent types (clusters, endpoints, listeners, routes, as
// translate.EnvoyOrder declares them) and an independent one. After every step it checks the
// invariants; at the end, once everything is acknowledged, that each client holds exactly what
// the store holds for its subscription.
//
// `make test` runs it with rapid's default number of schedules (100); `make fuzz` runs
// thousands (-rapid.checks). A failure prints the seed to replay it (-rapid.seed).

// The model's views: resources of C, E, L and R are in namespace n0 or n1 by the parity of
// their number; M's are cluster-scoped. A run may have an authz rule for unauthenticated
// peers (what every client of the run may read), and each client may narrow its view with
// its node (NodeNamespaces). The model decides what a client may see on its own
// (modelAccess.visible), not with the engine's code.
func modelNamespaceOf(collection, name string) (string, bool) {
	if collection == "M" {
		return "", false
	}
	return "n" + strconv.Itoa(int(name[len(name)-1]-'0')%2), true
}

// modelAccess is a run's authz rule, in plain terms, and the policy the engine is given.
type modelAccess struct {
	policy      *authz.Policy // nil: no rules
	collections []string      // what the rule lets read; "*" for all
	namespaces  []string      // in which namespaces; "*" for all, cluster-scoped included
}

func drawModelAccess(t *rapid.T) modelAccess {
	if rapid.IntRange(0, 2).Draw(t, "authz") == 0 {
		return modelAccess{}
	}
	keys := []string{"*"}
	for _, mt := range modelTypes {
		keys = append(keys, mt.key)
	}
	a := modelAccess{
		collections: rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 1, 4, rapid.ID[string]).Draw(t, "consume collections"),
		namespaces:  rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"*", "n0", "n1", "n2"}), 1, 2, rapid.ID[string]).Draw(t, "consume namespaces"),
	}
	p, err := authz.Compile([]authz.Rule{{Identity: authz.Unauthenticated, Consume: authz.Scope{Collections: a.collections, Namespaces: a.namespaces}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.policy = p
	return a
}

// grant is what every (unauthenticated) client of the run may do; nil without rules.
func (a modelAccess) grant(t *rapid.T) *authz.Grant {
	if a.policy == nil {
		return nil
	}
	g, err := a.policy.Grant("")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// denied tells whether a client may read nothing of a type.
func (a modelAccess) denied(key string) bool {
	return a.policy != nil && !slices.Contains(a.collections, "*") && !slices.Contains(a.collections, key)
}

// visible tells whether a client narrowed to node (nil: not narrowed) may see a resource.
func (a modelAccess) visible(node []string, key, name string) bool {
	if a.denied(key) {
		return false
	}
	allNS := a.policy == nil || slices.Contains(a.namespaces, "*")
	ns, namespaced := modelNamespaceOf(key, name)
	if !namespaced {
		return allNS
	}
	return (allNS || slices.Contains(a.namespaces, ns)) && (node == nil || slices.Contains(node, ns))
}

// modelType is one type of the test world.
type modelType struct {
	key             string
	wildcardCapable bool
	partial         bool // state of the world sends only what changed (endpoints, routes)
	after, remove   []string
	priority        int
	universe        []string
}

var modelTypes = []modelType{
	{key: "C", wildcardCapable: true, remove: []string{"L", "R"}, priority: 0, universe: []string{"c0", "c1", "c2", "c3"}},
	{key: "E", partial: true, after: []string{"C"}, priority: 1, universe: []string{"c0", "c1", "c2", "c3"}},
	{key: "L", wildcardCapable: true, after: []string{"C", "E"}, priority: 2, universe: []string{"l0", "l1"}},
	{key: "R", partial: true, after: []string{"C", "E", "L"}, priority: 3, universe: []string{"r0", "r1", "r2"}},
	{key: "M", wildcardCapable: true, priority: 5, universe: []string{"m0", "m1", "m2"}},
}

func modelTypeOf(key string) modelType {
	for _, t := range modelTypes {
		if t.key == key {
			return t
		}
	}
	panic(key)
}

// refsOf reads the names a test resource refers to (clusters, for routes, listeners and
// endpoints).
func refsOf(e *store.Entry) []string {
	_, body := e.Body()
	v := string(body)
	_, refs, _ := strings.Cut(v, "|")
	if refs == "" {
		return nil
	}
	return strings.Split(refs, ",")
}

func modelResource(name string, gen int, refs []string) *mcpapi.Resource {
	return &mcpapi.Resource{
		Metadata: &mcpapi.Metadata{Name: name},
		Body:     &anypb.Any{TypeUrl: "type.test/ref", Value: fmt.Appendf(nil, "%d|%s", gen, strings.Join(refs, ","))},
	}
}

// world writes random, referentially consistent states to a real store, each in one write, as
// the translator does: routes, listeners and endpoints name only clusters that exist.
type world struct {
	st  *store.Store
	gen int
}

func (w *world) write(t *rapid.T, bumpAll bool) []string {
	w.gen++
	v := w.st.View()
	// pick draws which names of a universe exist after the write; bumpAll keeps the sets.
	pick := func(coll string, universe []string) []string {
		if bumpAll {
			return names(entriesOf(v, coll))
		}
		var out []string
		for _, n := range universe {
			if rapid.Bool().Draw(t, coll+" has "+n) {
				out = append(out, n)
			}
		}
		return out
	}
	state := map[string][]*mcpapi.Resource{}
	// add keeps a resource as it is when its references stay and the draw says so; otherwise
	// it writes a new version.
	add := func(coll, name string, refs []string) {
		old := v.Get(coll, name)
		if old != nil && !bumpAll && slices.Equal(refsOf(old), refs) && rapid.IntRange(0, 2).Draw(t, "keep "+coll+name) > 0 {
			kept, err := old.Decode()
			if err != nil {
				t.Fatal(err)
			}
			state[coll] = append(state[coll], kept)
			return
		}
		state[coll] = append(state[coll], modelResource(name, w.gen, refs))
	}
	clusters := pick("C", modelTypeOf("C").universe)
	for _, c := range clusters {
		add("C", c, nil)
	}
	for _, c := range pick("E", clusters) {
		add("E", c, []string{c})
	}
	for _, coll := range []string{"R", "L"} {
		for _, n := range pick(coll, modelTypeOf(coll).universe) {
			var refs []string
			switch {
			case bumpAll:
				refs = refsOf(v.Get(coll, n))
			case len(clusters) > 0:
				refs = rapid.SliceOfNDistinct(rapid.SampledFrom(clusters), 0, 2, rapid.ID[string]).Draw(t, "refs of "+n)
				slices.Sort(refs)
			}
			add(coll, n, refs)
		}
	}
	for _, n := range pick("M", modelTypeOf("M").universe) {
		add("M", n, nil)
	}
	var updates []store.Update
	for _, mt := range modelTypes {
		updates = append(updates, store.Update{Collection: mt.key, Full: true, Resources: state[mt.key]})
	}
	for _, u := range updates {
		var desc []string
		for _, r := range u.Resources {
			desc = append(desc, r.GetMetadata().GetName()+":"+string(r.GetBody().GetValue()))
		}
		t.Logf("store %s = %v", u.Collection, desc)
	}
	res, err := w.st.Apply("model", updates...)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return res.Collections
}

func entriesOf(v *store.View, coll string) []*store.Entry {
	_, es := v.Snapshot(coll)
	return es
}

func names(es []*store.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// held is what a client holds of one resource.
type held struct {
	version string
	refs    []string
}

// modelSub is a client's side of one type.
type modelSub struct {
	mt               modelType
	wildcard, legacy bool
	names            map[string]bool
	holds            map[string]held // what the client accepted
	sent             map[string]held // what it was sent on this stream, accepted or not
	pending          *clientResponse
	accepted         map[string]held // holds once the pending response is ACKed
	lastNonce        string
	nackedRemovals   map[string]bool
	stale            []string // nonces of answered responses, for stale requests
	// lastNACKed: the client's latest answer on this stream's subscription was a NACK.
	lastNACKed bool
	// onStream: subscribed on the current stream. After a reconnect the server cannot know
	// what the client holds of a type before the client subscribes to it again.
	onStream bool
	// visible is what the client may see of the type (modelAccess.visible); denied: nothing.
	visible func(name string) bool
	denied  bool
}

func (s *modelSub) wants(name string) bool { return s.visible(name) && (s.wildcard || s.names[name]) }

// modelClient is one client stream and what serves it.
type modelClient struct {
	name string
	mode Mode
	// mcp: an MCP sink (ResourceSource or AggregatedMeshConfigService) rather than xDS: whole
	// collections only, a request without nonce starts a subscription over, an incremental
	// response may be a full state, and nothing is ordered across collections.
	mcp  bool
	conn modelConn
	subs map[string]*modelSub
	// node narrows the client's view (NodeNamespaces); nil: not narrowed.
	node []string
}

// modelConn is a client's stream to what serves it: the machine in-process, or a real engine
// over a loopback socket (machine_model_socket_test.go).
type modelConn interface {
	// send sends one request; received returns the responses that arrived since, in order
	// (settle: the driver is about to check convergence, so wait for stragglers).
	send(t *rapid.T, req *typedRequest)
	received(t *rapid.T, settle bool) []clientResponse
	// changed tells of a store write (the in-process machine has no watch of its own).
	changed(collections []string)
	// reconnect ends the stream and opens a new one.
	reconnect(t *rapid.T)
	// heartbeat returns the TTL heartbeats due at now, and the responses that follow them
	// (in-process only: over sockets heartbeats follow the wall clock, and the run sets no TTL).
	heartbeat(t *rapid.T, now time.Time) []clientResponse
}

// clientResponse is one response as the client reads it.
type clientResponse struct {
	key, nonce, version string
	resources           []receivedResource
	removed, missing    []string
	errors              []wire.ResourceError
	full                bool      // MCP: a full state (incremental false), which replaces
	share               *frameKey // in-process only: the key under which the encoding is shared
	heartbeat           bool      // a TTL heartbeat: renews what the client holds, changes nothing
}

type receivedResource struct {
	name, version string
	refs          []string
}

func (r clientResponse) names() []string {
	out := make([]string, len(r.resources))
	for i, e := range r.resources {
		out[i] = e.name
	}
	return out
}

func (r clientResponse) String() string {
	return fmt.Sprintf("type %s nonce %s resources %v removed %v missing %v", r.key, r.nonce, r.names(), r.removed, r.missing)
}

// machineConn serves a client with the machine itself.
type machineConn struct {
	st    *store.Store
	d     *directMachine
	m     *machine
	grant *authz.Grant
	// clock, in a run with TTLs, is the run's clock, by which heartbeats fall due.
	clock *time.Time
	// out are the responses the events since the last received made.
	out []outgoing
}

func newMachineConn(st *store.Store, grant *authz.Grant) *machineConn {
	c := &machineConn{st: st, grant: grant}
	c.reconnect(nil)
	return c
}

func (c *machineConn) now() time.Time {
	if c.clock == nil {
		return time.Time{}
	}
	return *c.clock
}

func (c *machineConn) send(t *rapid.T, req *typedRequest) {
	fx, sends := c.d.send(req, c.st.View(), c.now())
	if fx.refuse != nil {
		t.Fatalf("refused: %s", fx.refuse.msg)
	}
	c.out = append(c.out, sends...)
	// The count limits.subscriptions_per_stream bounds, kept request by request, is the
	// stream's types and explicit names.
	want := 0
	for _, sub := range c.m.subs {
		want += 1 + len(sub.want.names)
	}
	if got := c.m.subscriptionCount(); got != want {
		t.Fatalf("subscription count %d, want %d (types and names)", got, want)
	}
}

func (c *machineConn) changed(collections []string) {
	_, sends := c.d.handle(event{changed: collections, view: c.st.View(), now: c.now()})
	c.out = append(c.out, sends...)
}

func (c *machineConn) reconnect(*rapid.T) {
	c.d = newDirectMachine("model", access{grant: c.grant, namespaceOf: modelNamespaceOf})
	c.m, c.out = c.d.m, nil
}

// received is what the stream sent since the last look: the responses the events made,
// then what a look at the same view finds (heartbeats due by the run's clock, with TTLs).
func (c *machineConn) received(t *rapid.T, _ bool) []clientResponse {
	out := append(c.out, c.d.flush(c.st.View(), c.now())...)
	c.out = nil
	// Nothing is sent when nothing changed: a second look at the same view finds nothing.
	if again := c.d.flush(c.st.View(), c.now()); len(again) > 0 {
		t.Fatalf("sent again with nothing changed: %s", fromOutgoing(again[0]))
	}
	var got []clientResponse
	for _, r := range out {
		got = append(got, fromOutgoing(r))
	}
	return got
}

func (c *machineConn) heartbeat(t *rapid.T, now time.Time) []clientResponse {
	*c.clock = now
	return c.received(t, false)
}

func fromOutgoing(r outgoing) clientResponse {
	r.p.materialize()
	got := clientResponse{key: r.sub.key, nonce: r.nonce, version: r.p.msg.Version, removed: r.p.msg.Removed, share: r.p.share,
		full: !r.p.msg.Incremental, errors: r.p.msg.Errors, heartbeat: r.p.heartbeat}
	if r.sub.Mode == Incremental { // only delta tells of missing names
		got.missing = r.p.msg.Missing
	}
	for _, e := range r.p.msg.Resources {
		got.resources = append(got.resources, receivedResource{e.Name, e.Version, refsOf(e)})
	}
	return got
}

type modelRun struct {
	w       *world
	access  modelAccess
	clients []*modelClient
	shared  map[frameKey]string // content of every shareable response, by its key
	// splitAt, when not 0, makes delta xDS responses larger than it go in parts (a few
	// resources each in this world), as the engine does above xds.max_response_size.
	splitAt int
	// ttl gives xDS subscriptions a TTL, so that heartbeats are drawn (in-process only); now
	// is the clock they are due by, and absent whether the store's one owner is disconnected.
	ttl    bool
	now    time.Time
	absent bool
}

// modelTTL is the TTL of xDS subscriptions in a run with TTLs.
const modelTTL = 30 * time.Second

func (r *modelRun) request(t *rapid.T, c *modelClient, mt modelType, build func(*Request)) {
	req := &typedRequest{Request: Request{Key: mt.key}, Type: testType(mt.key, c.mode)}
	if c.name != "" {
		req.Node = &Node{ID: c.name, Namespaces: c.node}
	}
	if c.mcp { // as source/mcp.go types them: whole collections, no order between them
		req.Form, req.WildcardCapable, req.FullOnLoss, req.Priority = wire.FormMCPResource, true, true, 0
		req.PartialStateOfTheWorld, req.After, req.RemoveAfter = false, nil, nil
	}
	if c.mode == Incremental && !c.mcp && r.splitAt > 0 { // as the engine sets it for delta xDS
		req.Splittable, req.splitAt = true, r.splitAt
	}
	if r.ttl && !c.mcp { // as the xDS adapter sets them for clients announcing TTL support
		req.TTL, req.Wrap = modelTTL, c.mode == StateOfTheWorld
	}
	build(&req.Request)
	if c.mcp {
		req.Restart = req.Nonce == "" // ResourceSource: a request without nonce starts over
	}
	t.Logf("%s sends %s names %v subscribe %v unsubscribe %v nonce %q nack %v initial %v", c.name, req.Key, req.Names, req.Subscribe, req.Unsubscribe, req.Nonce, req.ErrorDetail != nil, req.InitialVersions)
	c.conn.send(t, req)
	r.flush(t, c)
}

// flush delivers the responses that arrived to the client, checking each; it tells how many.
func (r *modelRun) flush(t *rapid.T, c *modelClient) int { return r.deliver(t, c, false) }

func (r *modelRun) deliver(t *rapid.T, c *modelClient, settle bool) int {
	got := c.conn.received(t, settle)
	for _, resp := range got {
		r.receive(t, c, r.w.st.View(), resp)
	}
	return len(got)
}

func (r *modelRun) receive(t *rapid.T, c *modelClient, v *store.View, resp clientResponse) {
	sub := c.subs[resp.key]
	if sub == nil {
		t.Fatalf("%s: response for a type never subscribed: %s", c.name, resp)
	}
	if sub.pending != nil {
		t.Fatalf("%s: a second unacknowledged response for %s: %s", c.name, resp.key, resp)
	}
	t.Logf("%s receives %s", c.name, resp)
	r.checkShared(t, resp)
	seen := map[string]bool{}
	for _, n := range append(resp.names(), resp.missing...) {
		if seen[n] {
			t.Fatalf("%s: name %s twice in one response: %s", c.name, n, resp)
		}
		seen[n] = true
	}
	r.checkView(t, c, sub, resp)
	sub.pending = &resp
	sub.lastNonce = resp.nonce
	if resp.heartbeat {
		r.checkHeartbeat(t, c, sub, resp)
		sub.accepted = maps.Clone(sub.holds)
		return
	}
	apply := func(state map[string]held) map[string]held {
		next := map[string]held{}
		if (c.mode == Incremental && !(c.mcp && resp.full)) || (sub.mt.partial && !c.mcp) {
			next = maps.Clone(state)
		}
		for _, e := range resp.resources {
			if sub.wants(e.name) {
				next[e.name] = held{e.version, e.refs}
			}
		}
		for _, n := range append(slices.Clone(resp.removed), resp.missing...) {
			delete(next, n)
		}
		if c.mode == StateOfTheWorld && sub.mt.partial && !c.mcp {
			// State of the world tells no deletion of endpoints and routes: the parents stop
			// naming them and the client drops them. Model that as of this response.
			for n := range next {
				if v.Get(sub.mt.key, n) == nil {
					delete(next, n)
				}
			}
		}
		return next
	}
	before := sub.sent
	sub.sent = apply(sub.sent)
	sub.accepted = apply(sub.holds) // what the client holds if it ACKs
	r.checkReferences(t, c, v, resp, before)
}

// checkHeartbeat: a heartbeat names only resources the client holds, each at the version it
// holds (else the client would take it for a different resource, or as "does not exist"),
// and none while their producer is disconnected.
func (r *modelRun) checkHeartbeat(t *rapid.T, c *modelClient, sub *modelSub, resp clientResponse) {
	if r.absent {
		t.Fatalf("%s: heartbeat while the producer is disconnected: %s", c.name, resp)
	}
	for _, e := range resp.resources {
		if h, ok := sub.holds[e.name]; !ok || h.version != e.version {
			t.Fatalf("%s: heartbeat renews %s %s at version %s; the client holds %v (held: %v)", c.name, resp.key, e.name, e.version, h.version, ok)
		}
	}
}

// checkView: nothing outside the client's view is sent; a refused type's responses carry a
// PermissionDenied resource error, and no other type's do.
func (r *modelRun) checkView(t *rapid.T, c *modelClient, sub *modelSub, resp clientResponse) {
	for _, e := range resp.resources {
		if !sub.visible(e.name) {
			t.Fatalf("%s: sent %s %s, outside its view: %s", c.name, resp.key, e.name, resp)
		}
	}
	if !sub.denied {
		if len(resp.errors) > 0 {
			t.Fatalf("%s: resource errors on a type it may read: %v", c.name, resp.errors)
		}
		return
	}
	if len(resp.errors) == 0 {
		t.Fatalf("%s: a response of refused type %s without its resource error: %s", c.name, resp.key, resp)
	}
	for _, e := range resp.errors {
		if e.Code != int32(codes.PermissionDenied) {
			t.Fatalf("%s: resource error %+v, want PermissionDenied", c.name, e)
		}
	}
}

// checkShared: responses that share an encoding must have the same content.
func (r *modelRun) checkShared(t *rapid.T, resp clientResponse) {
	if resp.share == nil {
		return
	}
	var b strings.Builder
	for _, e := range resp.resources {
		fmt.Fprintf(&b, "%s=%s ", e.name, e.version)
	}
	fmt.Fprintf(&b, "removed %v missing %v version %s errors %v", resp.removed, resp.missing, resp.version, resp.errors)
	if prev, ok := r.shared[*resp.share]; ok && prev != b.String() {
		t.Fatalf("two responses under one shared key differ:\n%s\n%s", prev, b.String())
	}
	r.shared[*resp.share] = b.String()
}

// checkReferences: on an aggregated stream nothing the client is sent names a cluster it has
// not been sent, and no cluster is taken away while something it was sent (and that still
// exists) names it.
func (r *modelRun) checkReferences(t *rapid.T, c *modelClient, v *store.View, resp clientResponse, before map[string]held) {
	clusters := c.subs["C"]
	if c.mcp || clusters == nil || !clusters.wildcard {
		return
	}
	key := resp.key
	if key == "E" || key == "L" || key == "R" {
		for _, e := range resp.resources {
			for _, ref := range e.refs {
				if !clusters.visible(ref) {
					continue // a cluster outside the client's view: it is never sent
				}
				if _, ok := clusters.sent[ref]; !ok {
					t.Fatalf("%s: %s %s names cluster %s, not yet sent (clusters sent: %v)", c.name, key, e.name, ref, slices.Sorted(maps.Keys(clusters.sent)))
				}
			}
		}
	}
	if key != "C" {
		return
	}
	for name := range before {
		if _, still := clusters.sent[name]; still {
			continue
		}
		for _, dep := range []string{"L", "R"} {
			ds := c.subs[dep]
			if ds == nil || !ds.onStream {
				continue
			}
			for n, h := range ds.sent {
				if v.Get(dep, n) != nil && slices.Contains(h.refs, name) {
					t.Fatalf("%s: cluster %s removed while %s %s (sent) still names it", c.name, name, dep, n)
				}
			}
		}
	}
}

// dropImplicitlyDeleted: state of the world tells no deletion of endpoints and routes; the
// parents that stop naming them (in the same write, in this world) make the client drop them.
func (r *modelRun) dropImplicitlyDeleted() {
	v := r.w.st.View()
	for _, c := range r.clients {
		for _, sub := range c.subs {
			if c.mode != StateOfTheWorld || !sub.mt.partial || c.mcp {
				continue
			}
			for _, m := range []map[string]held{sub.holds, sub.sent, sub.accepted} {
				for n := range m {
					if v.Get(sub.mt.key, n) == nil {
						delete(m, n)
					}
				}
			}
		}
	}
}

// answer ACKs or NACKs a type's pending response.
func (r *modelRun) answer(t *rapid.T, c *modelClient, key string, nack bool) {
	sub := c.subs[key]
	resp := sub.pending
	sub.pending = nil
	sub.stale = append(sub.stale, resp.nonce)
	sub.lastNACKed = nack
	switch {
	case resp.heartbeat: // renews, changes nothing the client holds, even refused
	case nack:
		// The client keeps what it held; removals it refused must still reach it some day.
		if len(resp.resources) == 0 { // else the server owes the removals again
			for _, n := range append(slices.Clone(resp.removed), resp.missing...) {
				sub.nackedRemovals[n] = true
			}
		}
		if c.mode == StateOfTheWorld && (!sub.mt.partial || c.mcp) || c.mcp && resp.full {
			for n := range sub.holds {
				if !slices.Contains(resp.names(), n) {
					sub.nackedRemovals[n] = true
				}
			}
		}
	default:
		sub.holds = sub.accepted
		for _, n := range append(resp.names(), resp.removed...) {
			delete(sub.nackedRemovals, n)
		}
	}
	r.request(t, c, sub.mt, func(req *Request) {
		req.Nonce = resp.nonce
		if nack {
			req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "rejected by the model"}
		}
		if c.mode == StateOfTheWorld {
			req.Names = sub.requestNames()
		}
	})
}

func (s *modelSub) requestNames() []string {
	if s.legacy {
		return nil
	}
	out := slices.Sorted(maps.Keys(s.names))
	if s.wildcard {
		out = append(out, Wildcard)
	}
	return out
}

// dropUnwanted: a client forgets what it no longer asks for.
func (s *modelSub) dropUnwanted() {
	for _, m := range []map[string]held{s.holds, s.sent, s.accepted} {
		for n := range m {
			if !s.wants(n) {
				delete(m, n)
			}
		}
	}
}

func newModelClient(name string, mode Mode, conn modelConn) *modelClient {
	return &modelClient{name: name, mode: mode, conn: conn, subs: map[string]*modelSub{}}
}

func (r *modelRun) subscribe(t *rapid.T, c *modelClient, mt modelType) {
	sub := &modelSub{mt: mt, names: map[string]bool{}, holds: map[string]held{}, sent: map[string]held{}, nackedRemovals: map[string]bool{},
		visible: func(name string) bool { return r.access.visible(c.node, mt.key, name) }, denied: r.access.denied(mt.key)}
	c.subs[mt.key] = sub
	sub.onStream = true
	if c.mcp { // MCP subscribes to whole collections
		sub.legacy, sub.wildcard = true, true
		r.request(t, c, mt, func(*Request) {})
		return
	}
	asked := rapid.SliceOfDistinct(rapid.SampledFrom(mt.universe), rapid.ID[string]).Draw(t, "names")
	for _, n := range asked {
		sub.names[n] = true
	}
	if mt.wildcardCapable {
		switch rapid.IntRange(0, 2).Draw(t, "wildcard") {
		case 0:
			sub.names = map[string]bool{}
		case 1:
			sub.wildcard = true
		}
		// Asking for nothing at first is the wildcard that stays (xds-protocol.rst).
		if !sub.wildcard && len(sub.names) == 0 {
			sub.legacy, sub.wildcard = true, true
		}
	}
	r.request(t, c, mt, func(req *Request) {
		if c.mode == Incremental {
			req.Subscribe = sub.requestNames()
		} else {
			req.Names = sub.requestNames()
		}
	})
}

// changeNames changes an explicit subscription (SotW: only between responses, with the latest
// nonce, as clients do; delta: at any time, without a nonce).
func (r *modelRun) changeNames(t *rapid.T, c *modelClient, key string) {
	sub := c.subs[key]
	if sub.legacy {
		return
	}
	mt := sub.mt
	if c.mode == StateOfTheWorld {
		if sub.pending != nil {
			return
		}
		next := map[string]bool{}
		for _, n := range rapid.SliceOfDistinct(rapid.SampledFrom(mt.universe), rapid.ID[string]).Draw(t, "names") {
			next[n] = true
		}
		sub.names = next
		if mt.wildcardCapable {
			sub.wildcard = rapid.Bool().Draw(t, "star")
		}
		sub.dropUnwanted()
		r.request(t, c, mt, func(req *Request) { req.Names, req.Nonce = sub.requestNames(), sub.lastNonce })
		return
	}
	subscribe := rapid.SliceOfDistinct(rapid.SampledFrom(mt.universe), rapid.ID[string]).Draw(t, "subscribe")
	unsubscribe := rapid.SliceOfDistinct(rapid.SampledFrom(mt.universe), rapid.ID[string]).Draw(t, "unsubscribe")
	unsubscribe = slices.DeleteFunc(unsubscribe, func(n string) bool { return slices.Contains(subscribe, n) })
	if mt.wildcardCapable {
		switch rapid.IntRange(0, 2).Draw(t, "star") {
		case 1:
			subscribe = append(subscribe, Wildcard)
			sub.wildcard = true
		case 2:
			unsubscribe = append(unsubscribe, Wildcard)
			sub.wildcard = false
		}
	}
	for _, n := range subscribe {
		if n != Wildcard {
			sub.names[n] = true
		}
	}
	for _, n := range unsubscribe {
		delete(sub.names, n)
	}
	sub.dropUnwanted()
	r.request(t, c, mt, func(req *Request) { req.Subscribe, req.Unsubscribe = subscribe, unsubscribe })
}

// reconnect opens a new stream: an incremental client says what it holds.
func (r *modelRun) reconnect(t *rapid.T, c *modelClient) {
	c.conn.reconnect(t)
	for _, sub := range c.subs {
		sub.onStream = false
	}
	for _, mt := range modelTypes {
		sub := c.subs[mt.key]
		if sub == nil {
			continue
		}
		if !sub.wildcard && len(sub.names) == 0 {
			delete(c.subs, mt.key) // nothing to ask for: not subscribed on the new stream
			continue
		}
		sub.onStream = true
		sub.pending, sub.lastNonce, sub.stale, sub.lastNACKed = nil, "", nil, false
		sub.sent = maps.Clone(sub.holds)
		r.request(t, c, mt, func(req *Request) {
			if c.mode == StateOfTheWorld {
				req.Names = sub.requestNames()
				return
			}
			req.Subscribe = sub.requestNames()
			req.InitialVersions = map[string]string{}
			for n, h := range sub.holds {
				req.InitialVersions[n] = h.version
			}
		})
	}
}

// quiesce acknowledges every response until none is due, and none is still on its way.
func (r *modelRun) quiesce(t *rapid.T) {
	for range 100 {
		answered := false
		for _, c := range r.clients {
			for _, mt := range modelTypes {
				if sub := c.subs[mt.key]; sub != nil && sub.pending != nil {
					r.answer(t, c, mt.key, false)
					answered = true
				}
			}
		}
		if answered {
			continue
		}
		late := 0
		for _, c := range r.clients {
			late += r.deliver(t, c, true)
		}
		if late == 0 {
			return
		}
	}
	t.Fatal("responses kept coming after 100 rounds of acknowledgements")
}

// checkConverged: each client holds exactly what the store holds for its subscription.
func (r *modelRun) checkConverged(t *rapid.T) {
	v := r.w.st.View()
	for _, c := range r.clients {
		for _, mt := range modelTypes {
			sub := c.subs[mt.key]
			if sub == nil {
				continue
			}
			want := map[string]string{}
			for _, e := range entriesOf(v, mt.key) {
				if sub.wants(e.Name) {
					want[e.Name] = e.Version
				}
			}
			for n, h := range sub.holds {
				w, live := want[n]
				switch {
				case live && w != h.version:
					t.Fatalf("%s (%s): %s %s at version %s, store has %s", c.name, c.mode, mt.key, n, h.version, w)
				case !live && c.mode == StateOfTheWorld && mt.partial:
					// State of the world has no removal for endpoints and routes: their parents stop naming them.
				case !live && sub.nackedRemovals[n]:
					// The client refused the response that removed it.
				case !live:
					t.Fatalf("%s (%s): still holds %s %s, which the store deleted", c.name, c.mode, mt.key, n)
				}
			}
			for n, w := range want {
				if _, ok := sub.holds[n]; !ok {
					t.Fatalf("%s (%s): lacks %s %s (version %s)", c.name, c.mode, mt.key, n, w)
				}
			}
		}
	}
}

func TestMachineAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := store.New(store.Options{})
		acc := drawModelAccess(t)
		runModel(t, st, acc, func(t *rapid.T) modelConn { return newMachineConn(st, acc.grant(t)) }, true, rapid.Bool().Draw(t, "ttl"))
	})
}

// runModel runs one random schedule over a store, with clients connected by dial; mcp
// allows MCP clients besides xDS ones.
//
// ttl gives the xDS subscriptions a TTL, and draws heartbeats and the producer's presence.
func runModel(t *rapid.T, st *store.Store, acc modelAccess, dial func(*rapid.T) modelConn, mcp, ttl bool) {
	r := &modelRun{w: &world{st: st}, access: acc, shared: map[frameKey]string{}, ttl: ttl, now: time.Unix(1e9, 0)}
	r.splitAt = rapid.SampledFrom([]int{0, 100, 250}).Draw(t, "splitAt")
	r.w.write(t, false)
	for i := range rapid.IntRange(1, 3).Draw(t, "clients") {
		mode := StateOfTheWorld
		if rapid.Bool().Draw(t, "incremental") {
			mode = Incremental
		}
		c := newModelClient(fmt.Sprintf("client%d", i), mode, dial(t))
		c.mcp = mcp && rapid.Bool().Draw(t, "mcp")
		c.node = rapid.SampledFrom([][]string{nil, nil, {"n0"}, {"n1"}, {"n0", "n1"}}).Draw(t, "node namespaces")
		if mc, ok := c.conn.(*machineConn); ok && ttl {
			mc.clock = &r.now
		}
		r.clients = append(r.clients, c)
	}
	client := func(t *rapid.T) *modelClient { return rapid.SampledFrom(r.clients).Draw(t, "client") }
	subscribedKey := func(t *rapid.T, c *modelClient, pending bool) (string, bool) {
		var keys []string
		for _, mt := range modelTypes {
			if sub := c.subs[mt.key]; sub != nil && (!pending || sub.pending != nil) {
				keys = append(keys, mt.key)
			}
		}
		if len(keys) == 0 {
			return "", false
		}
		return rapid.SampledFrom(keys).Draw(t, "type"), true
	}
	t.Repeat(map[string]func(*rapid.T){
		"": func(t *rapid.T) { r.checkStatus(t, false) },
		"heartbeat": func(t *rapid.T) {
			if !r.ttl {
				t.Skip("no TTLs in this run")
			}
			c := client(t)
			if rapid.Bool().Draw(t, "answer first") { // heartbeats go to idle types only
				for _, mt := range modelTypes {
					if sub := c.subs[mt.key]; sub != nil && sub.pending != nil {
						r.answer(t, c, mt.key, false)
					}
				}
			}
			r.now = r.now.Add(time.Duration(rapid.IntRange(1, 3).Draw(t, "quarter TTLs")) * modelTTL / 4)
			t.Logf("%s heartbeats at %s", c.name, r.now)
			for _, resp := range c.conn.heartbeat(t, r.now) {
				r.receive(t, c, r.w.st.View(), resp)
			}
		},
		"presence": func(t *rapid.T) {
			if !r.ttl {
				t.Skip("no TTLs in this run")
			}
			r.absent = !r.absent
			t.Logf("the producer is absent: %v", r.absent)
			if _, err := r.w.st.SetOwnerPresent("model", !r.absent); err != nil {
				t.Fatal(err)
			}
		},
		"write": func(t *rapid.T) {
			changed := r.w.write(t, false)
			r.dropImplicitlyDeleted()
			for _, c := range r.clients {
				c.conn.changed(changed)
				r.flush(t, c)
			}
		},
		"subscribe": func(t *rapid.T) {
			c := client(t)
			mt := rapid.SampledFrom(modelTypes).Draw(t, "type")
			if c.subs[mt.key] != nil {
				t.Skip("already subscribed")
			}
			r.subscribe(t, c, mt)
		},
		"ack": func(t *rapid.T) {
			c := client(t)
			if key, ok := subscribedKey(t, c, true); ok {
				r.answer(t, c, key, false)
			}
		},
		"nack": func(t *rapid.T) {
			c := client(t)
			if key, ok := subscribedKey(t, c, true); ok {
				r.answer(t, c, key, true)
			}
		},
		"names": func(t *rapid.T) {
			c := client(t)
			if key, ok := subscribedKey(t, c, false); ok {
				r.changeNames(t, c, key)
			}
		},
		"stale": func(t *rapid.T) {
			c := client(t)
			key, ok := subscribedKey(t, c, false)
			if !ok || len(c.subs[key].stale) == 0 {
				t.Skip("no stale nonce")
			}
			sub := c.subs[key]
			old := rapid.SampledFrom(sub.stale).Draw(t, "stale nonce")
			if old == sub.lastNonce {
				t.Skip("the latest nonce is not stale")
			}
			r.request(t, c, sub.mt, func(req *Request) {
				req.Nonce = old
				req.Names = sub.requestNames()
			})
		},
		"reconnect": func(t *rapid.T) { r.reconnect(t, client(t)) },
		"restart": func(t *rapid.T) {
			c := client(t)
			key, ok := subscribedKey(t, c, false)
			if !c.mcp || !ok {
				t.Skip("only an MCP sink starts a subscription over on its stream")
			}
			sub := c.subs[key]
			if sub.pending != nil { // answered by nothing: its nonce is stale now
				sub.stale = append(sub.stale, sub.pending.nonce)
			}
			sub.pending, sub.lastNACKed = nil, false
			sub.sent = maps.Clone(sub.holds)
			r.request(t, c, sub.mt, func(*Request) {})
		},
	})
	// Quiescence: one last write gives every live resource a version no client refused, then
	// every response is acknowledged.
	changed := r.w.write(t, true)
	for _, c := range r.clients {
		c.conn.changed(changed)
		r.flush(t, c)
	}
	r.quiesce(t)
	r.checkConverged(t)
	r.checkStatus(t, true)
}

// checkStatus holds the status view (status.go) of each in-process client to what the model
// client holds: a resource reported SYNCED is held by the client at its current version, at
// every step; once everything is acknowledged, every resource the client asked for is
// reported, and SYNCED, and so is every type.
func (r *modelRun) checkStatus(t *rapid.T, converged bool) {
	v := r.w.st.View()
	snaps := &snapshots{v: v}
	for _, c := range r.clients {
		mc, ok := c.conn.(*machineConn)
		if !ok {
			continue // over sockets the machine is the engine's, out of reach
		}
		for _, st := range mc.m.statusState() {
			ts := st.evaluate(snaps, true)
			sub := c.subs[ts.Type]
			if sub == nil || !sub.onStream {
				continue
			}
			// A type whose latest answer was a NACK, with nothing sent since, stays ERROR.
			if want := StateSynced; converged && sub.lastNACKed && ts.State != StateError {
				t.Fatalf("%s (%s): type %s is %s, its latest answer a NACK", c.name, c.mode, ts.Type, ts.State)
			} else if converged && !sub.lastNACKed && ts.State != want {
				t.Fatalf("%s (%s): type %s is %s after everything was acknowledged", c.name, c.mode, ts.Type, ts.State)
			}
			listed := map[string]bool{}
			for _, rs := range ts.Resources {
				if rs.Missing {
					continue
				}
				listed[rs.Name] = true
				e := v.Get(ts.Collection, rs.Name)
				if rs.State == StateSynced {
					if h, ok := sub.holds[rs.Name]; !ok || h.version != e.Version {
						t.Fatalf("%s (%s): %s %s reported SYNCED at version %s; the client holds %+v (held: %v)", c.name, c.mode, ts.Type, rs.Name, e.Version, h, ok)
					}
				}
				if converged && rs.State != StateSynced {
					t.Fatalf("%s (%s): %s %s is %s after everything was acknowledged", c.name, c.mode, ts.Type, rs.Name, rs.State)
				}
			}
			if converged {
				for _, e := range entriesOf(v, ts.Collection) {
					if sub.wants(e.Name) && !listed[e.Name] {
						t.Fatalf("%s (%s): %s %s is asked for and not in the status view", c.name, c.mode, ts.Type, e.Name)
					}
				}
			}
		}
	}
}

func describe(r outgoing) string { return fromOutgoing(r).String() }
