package source_test

// The schedules of the model-based test: the world and clients a check starts with, the
// random actions (pgregory.net/rapid, so that a failure prints a seed and shrinks), and the
// end of each schedule (one last write giving everything a fresh version, then every client
// answers everything until the server is quiet, then convergence).

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
)

// modelOptions are what differs between transports.
type modelOptions struct {
	// TTL is the xds TTL of the schedules that have one (heartbeats every TTL/2).
	TTL time.Duration
	// New builds the transport over the model's server.
	New func(t failer, s modelServer) modelTransport
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// modelNamespaceOf is the engine's NamespaceOf as the bridge wires it: the translation's
// Namespacer for the Envoy types, "namespace/name" for everything else.
func modelNamespaceOf() source.NamespaceFunc {
	ns := envoy.NewNamespacer("cluster.local")
	return func(coll, name string) (string, bool) {
		if slices.Contains(envoyTypes, coll) {
			return ns.NamespaceOf(name)
		}
		return authz.NamespaceOf(name)
	}
}

// setup is a schedule's world and server, before any client.
type setup struct {
	Policy      *policySpec
	TTL         time.Duration
	MaxResponse int // Options.MaxResponseSize; 0: the default (no split)
	Producers   int
}

// newModel builds the store, the engine, the transport and the initial world.
func newModel(t failer, o modelOptions, su setup) *model {
	t.Helper()
	clock := &modelClock{}
	st := store.New(store.Options{Validate: kinds.ValidateResource, Logger: discardLogger()})
	var pol *authz.Policy
	if su.Policy.rules != nil {
		var err error
		if pol, err = authz.Compile(su.Policy.rules, xds.CollectionOf); err != nil {
			t.Fatalf("policy: %v", err)
		}
	}
	eng := source.New(source.Options{
		Store: st, Logger: discardLogger(), MaxResponseSize: su.MaxResponse, Authz: pol,
		NamespaceOf: modelNamespaceOf(),
		Derived:     map[string][]string{ownerTranslate: envoy.InputCollections()},
	})
	var ttls *xds.TTLs
	if su.TTL > 0 {
		ttls = &xds.TTLs{Default: su.TTL}
	}
	srv := modelServer{Store: st, Engine: eng, TTL: ttls, Clock: clock,
		Sink: sink.Options{Store: st, Collections: []sink.Collection{{Name: collSE, Incremental: true}}, Authz: pol, Logger: discardLogger()}}
	m := &model{t: t, clock: clock, w: newWorld(clock, st), eng: eng, policy: su.Policy, ttl: su.TTL, skipped: map[string]int{}}
	m.tr = o.New(t, srv)
	if err := m.w.writeEnvoy(initialEnvoy()); err != nil {
		t.Fatalf("initial write: %v", err)
	}
	m.tr.Written()
	for i := range su.Producers {
		p := newProducer(i)
		p.conn = m.tr.Producer(p.id)
		m.w.producers = append(m.w.producers, p)
	}
	return m
}

// close ends the transport (and the engine's streams).
func (m *model) close() {
	m.tr.Close()
	m.eng.Stop()
}

// step ends an action: the server has answered everything (sockets: it has been quiet), the
// world's changes are sure, every response is read and checked, and the status view agrees.
func (m *model) step() {
	m.t.Helper()
	m.tr.Settle()
	m.w.settled()
	for _, p := range m.w.producers {
		if p.goneAt != 0 {
			p.absent = append(p.absent, [2]int64{m.clock.Tick(), 0})
			p.holdingsAt = append(p.holdingsAt, len(p.held))
			p.goneAt = 0
		}
	}
	m.drain()
	m.checkStatus(false)
	for _, c := range m.clients {
		for _, s := range c.subs {
			s.forgetDropped()
		}
	}
}

// ---- producers ----

// resourceAt rebuilds the resource a producer holds at a version, from the world's history.
func (m *model) resourceAt(name, ver string) *mcpapi.Resource {
	h := m.w.version(collSE, name, ver)
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name, Version: ver},
		Body: &anypb.Any{TypeUrl: h.btype, Value: h.body}}
}

// connectProducer opens a producer's stream with a full state: the names it holds, bumped
// ones at a new version.
func (m *model) connectProducer(p *mproducer, names []string, bump map[string]bool) {
	m.t.Helper()
	if n := len(p.absent); n > 0 && p.absent[n-1][1] == 0 {
		p.absent[n-1][1] = m.clock.Tick() // from now it may be back
	}
	next, state := m.producerState(p, names, bump)
	m.logf("producer %s connects with %v", p.id, next)
	m.w.change(func() { m.setProducerState(p, next) })
	if err := p.conn.Connect(state); err != nil {
		m.fail("producer", "%s: connect: %v", p.id, err)
	}
	m.tr.Written()
	p.connected = true
}

func (m *model) producerState(p *mproducer, names []string, bump map[string]bool) (map[string]string, []*mcpapi.Resource) {
	next := map[string]string{}
	var state []*mcpapi.Resource
	for _, n := range names {
		var r *mcpapi.Resource
		if v, ok := p.held[n]; ok && !bump[n] {
			r = m.resourceAt(n, v)
		} else {
			r = m.w.seResource(p, n)
		}
		next[n] = r.Metadata.Version
		state = append(state, r)
	}
	return next, state
}

func (m *model) setProducerState(p *mproducer, next map[string]string) {
	for n := range p.held {
		if _, ok := next[n]; !ok {
			m.w.unset(collSE, n)
		}
	}
	for n, v := range next {
		m.w.set(collSE, n, v)
	}
	p.held = next
}

// pushProducer sends a producer's new state, as a full state or as an increment.
func (m *model) pushProducer(p *mproducer, names []string, bump map[string]bool, incremental bool) {
	m.t.Helper()
	next, state := m.producerState(p, names, bump)
	var upserts []*mcpapi.Resource
	var removed []string
	if incremental {
		for _, r := range state {
			if p.held[r.Metadata.Name] != r.Metadata.Version {
				upserts = append(upserts, r)
			}
		}
		for n := range p.held {
			if _, ok := next[n]; !ok {
				removed = append(removed, n)
			}
		}
		slices.Sort(removed)
	} else {
		upserts = state
	}
	m.logf("producer %s pushes %v (incremental %v: +%d -%v)", p.id, next, incremental, len(upserts), removed)
	m.w.change(func() { m.setProducerState(p, next) })
	if err := p.conn.Push(incremental, upserts, removed); err != nil {
		m.fail("producer", "%s: push: %v", p.id, err)
	}
	m.tr.Written()
}

func (m *model) disconnectProducer(p *mproducer) {
	m.t.Helper()
	m.logf("producer %s disconnects", p.id)
	m.clock.Tick()
	if err := p.conn.Disconnect(); err != nil {
		m.fail("producer", "%s: disconnect: %v", p.id, err)
	}
	m.tr.Written()
	p.connected = false
	p.goneAt = m.clock.Tick()
}

// ---- clients ----

func (m *model) addClient(kind protoKind, fixed string) *mclient {
	c := &mclient{m: m, id: len(m.clients), kind: kind, fixed: fixed, subs: map[string]*msub{}}
	m.clients = append(m.clients, c)
	return c
}

// open opens a new stream; every type the client had is to be resumed on it.
func (c *mclient) open() {
	c.m.t.Helper()
	c.gen++
	if c.sidecar {
		c.node = fmt.Sprintf("sidecar~10.0.%d.%d~c%dg%d.n0~n0.svc.cluster.local", c.id, c.gen, c.id, c.gen)
	} else {
		c.node = fmt.Sprintf("model-c%d-g%d", c.id, c.gen)
	}
	st, err := c.m.tr.Open(methodOf(c.kind, c.fixed), nil)
	if err != nil {
		c.m.fail("stream", "%s: open: %v", c, err)
	}
	c.st, c.sendAt, c.batchEnd, c.nonces = st, nil, nil, map[string]bool{}
	for _, s := range c.subs {
		s.resetStream()
		s.resume = true
	}
	c.m.logf("%s opens stream %d as %s (narrowing %v, ttl %v, incremental %v)", c, c.gen, c.node, c.narrow, c.ttl, c.incr)
}

func (c *mclient) disconnect() {
	c.m.logf("%s disconnects", c)
	c.st.Close()
	c.st = nil
	for _, s := range c.subs {
		s.pending = nil // never answered: the client did not apply it
	}
}

// resume asks again for subscriptions on a new stream, in one batch: a delta client (and an
// incremental MCP or AMCS one) with the versions it holds (initial_resource_versions), unless
// fresh, when it starts over holding nothing.
func (c *mclient) resume(subs []*msub, fresh bool) {
	var batch []out
	for _, s := range subs {
		var initial map[string]string
		if fresh {
			clear(s.held)
			s.nackedRemovals = nil
		} else if s.delta {
			want := s.state()
			want.active = true
			for n, v := range s.held {
				if s.covers(want, n) {
					if initial == nil {
						initial = map[string]string{}
					}
					initial[n] = v
				}
			}
		}
		s.resume = false
		batch = append(batch, c.firstRequest(s, initial))
	}
	c.send(batch...)
}

// subscribeNew subscribes to a type the client has not had.
func (c *mclient) subscribeNew(key string, wild, legacy bool, names []string) {
	s := c.sub(key)
	s.wild, s.legacy = wild, legacy
	s.names = map[string]bool{}
	for _, n := range names {
		s.names[n] = true
	}
	s.resume = false
	c.send(c.firstRequest(s, nil))
}

// spontaneous changes names outside an answer: a delta request without nonce, or a SotW
// request with the latest nonce (the one already answered), as Envoy sends them.
func (c *mclient) spontaneous(s *msub, ch *nameChange) out {
	return out{s: s, what: fmt.Sprintf("names %s%s", shortType(s.t.key), ch),
		build: func(first bool) proto.Message {
			if c.kind.deltaXDS() {
				return &discovery.DeltaDiscoveryRequest{TypeUrl: s.typeURL(), ResourceNamesSubscribe: ch.subscribe, ResourceNamesUnsubscribe: ch.unsubscribe}
			}
			last := ""
			if n := len(s.nonces); n > 0 {
				last = s.nonces[n-1]
			}
			return &discovery.DiscoveryRequest{TypeUrl: s.typeURL(), VersionInfo: s.lastAcked, ResourceNames: ch.sotw, ResponseNonce: last}
		},
		apply: func(idx int) { s.changeNames(ch, idx) }}
}

// stale sends a request with a nonce that is not the latest (or one never sent), which
// changes names or refuses: the server must ignore it (CONTRACT.md section 6; xds-protocol.rst:
// a request with a stale nonce gets no response).
func (c *mclient) stale(s *msub, nonce string, names []string, nack bool) out {
	var detail = errDetail("stale refusal")
	if !nack {
		detail = nil
	}
	return out{what: fmt.Sprintf("stale %s nonce %s names %v nack %v", shortType(s.t.key), nonce, names, nack),
		build: func(first bool) proto.Message {
			switch c.kind {
			case kADSSotW, kTypeSotW:
				return &discovery.DiscoveryRequest{TypeUrl: s.typeURL(), ResourceNames: names, ResponseNonce: nonce, ErrorDetail: detail}
			case kADSDelta, kTypeDelta:
				return &discovery.DeltaDiscoveryRequest{TypeUrl: s.typeURL(), ResourceNamesSubscribe: names, ResponseNonce: nonce, ErrorDetail: detail}
			case kMCP:
				return &mcp.RequestResources{SinkNode: c.sinkNode(), Collection: s.t.key, ResponseNonce: nonce, ErrorDetail: detail, Incremental: c.incr}
			case kAMCSSotW:
				return &mcp.MeshConfigRequest{SinkNode: c.sinkNode(), TypeUrl: s.t.key, ResponseNonce: nonce, ErrorDetail: detail}
			default:
				return &mcp.IncrementalMeshConfigRequest{SinkNode: c.sinkNode(), TypeUrl: s.t.key, ResponseNonce: nonce, ErrorDetail: detail}
			}
		}}
}

// pendingSubs are the client's types with a response it has not answered.
func (c *mclient) pendingSubs() []*msub {
	var out []*msub
	for _, k := range c.keys {
		if s := c.subs[k]; s.pending != nil {
			out = append(out, s)
		}
	}
	return out
}

// answerable are the pending types whose answer the schedule does not hold.
func (c *mclient) answerable() []*msub {
	var out []*msub
	for _, s := range c.pendingSubs() {
		if !s.holdAck {
			out = append(out, s)
		}
	}
	return out
}

// ---- the end of a schedule ----

// converge ends a schedule in two phases. First every producer and client comes back and
// answers everything until the server is quiet: then every name a delta client subscribed to
// must have been answered (the server owes nothing and sends nothing more). Then one write
// gives everything a fresh version (so that nothing refused stays refused), everything is
// answered until the server is quiet again, and every client must hold exactly what the store
// holds for it, as the status view must say.
func (m *model) converge() {
	m.t.Helper()
	m.logf("converge: everyone back")
	for _, p := range m.w.producers {
		if !p.connected {
			m.connectProducer(p, slices.Sorted(maps.Keys(p.held)), nil)
		}
	}
	for _, c := range m.clients {
		if !c.connected() {
			c.open()
		}
		var subs []*msub
		for _, k := range resumeOrder(c.keys) {
			if s := c.subs[k]; s.resume {
				subs = append(subs, s)
			}
		}
		if len(subs) > 0 {
			c.resume(subs, false)
		}
	}
	m.answerUntilQuiet()
	m.checkSubscribedNamesSent()

	m.logf("converge: a fresh version of everything")
	for _, p := range m.w.producers {
		if len(p.held) > 0 {
			names := slices.Sorted(maps.Keys(p.held))
			bump := map[string]bool{}
			for _, n := range names {
				bump[n] = true
			}
			m.pushProducer(p, names, bump, false)
		}
	}
	next := m.w.env.clone()
	for coll, names := range m.w.envSpec {
		next.touched[coll] = map[string]bool{}
		for n := range names {
			next.touched[coll][n] = true
		}
	}
	if err := m.w.writeEnvoy(next); err != nil {
		m.fail("write", "%v", err)
	}
	m.tr.Written()
	m.answerUntilQuiet()
	m.checkConverged()
	m.checkStatus(true)
}

// answerUntilQuiet ACKs every response until none comes and the engine waits for no answer.
func (m *model) answerUntilQuiet() {
	m.t.Helper()
	quiet := 0
	for round := 0; round < 100 && quiet < 3; round++ {
		m.step()
		answered := false
		for _, c := range m.clients {
			var batch []out
			for _, s := range c.pendingSubs() {
				batch = append(batch, c.answer(s, false, nil))
			}
			if len(batch) > 0 {
				c.send(batch...)
				answered = true
			}
		}
		if answered || !m.serverIdle() {
			quiet = 0
		} else {
			quiet++
		}
	}
}

// serverIdle: the engine has no response waiting for an answer.
func (m *model) serverIdle() bool {
	for _, ci := range m.eng.Clients() {
		for _, s := range ci.Subscriptions {
			if s.Pending != "" {
				return false
			}
		}
	}
	return true
}

// resumeOrder is the order in which Envoy resumes its types: clusters, endpoints, listeners,
// routes, then the others.
func resumeOrder(keys []string) []string {
	rank := func(k string) int {
		if i := slices.Index(envoyTypes, k); i >= 0 {
			return i
		}
		return len(envoyTypes)
	}
	out := slices.Clone(keys)
	slices.SortStableFunc(out, func(a, b string) int { return rank(a) - rank(b) })
	return out
}

// ---- random schedules ----

// drawSubset draws a subset of names.
func drawSubset(t *rapid.T, names []string, max int, label string) []string {
	if len(names) == 0 {
		return nil
	}
	n := rapid.IntRange(0, max).Draw(t, label+"-n")
	var out []string
	for range n {
		x := rapid.SampledFrom(names).Draw(t, label)
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

// drawSetup draws what a schedule runs under.
func drawSetup(t *rapid.T, o modelOptions) setup {
	policies := modelPolicies()
	su := setup{Policy: policies[0], Producers: rapid.IntRange(1, 2).Draw(t, "producers")}
	if rapid.IntRange(0, 9).Draw(t, "policy?") >= 6 {
		su.Policy = policies[rapid.IntRange(1, len(policies)-1).Draw(t, "policy")]
	}
	if rapid.Bool().Draw(t, "ttl") {
		su.TTL = o.TTL
	}
	if rapid.Bool().Draw(t, "split") {
		su.MaxResponse = rapid.IntRange(250, 900).Draw(t, "max-response")
	}
	return su
}

// drawClient draws a client of some protocol and the way it presents itself.
func (m *model) drawClient(t *rapid.T) *mclient {
	var kind protoKind
	switch k := rapid.IntRange(0, 15).Draw(t, "protocol"); {
	case k < 6:
		kind = kADSDelta
	case k < 9:
		kind = kADSSotW
	case k < 11:
		kind = kTypeDelta
	case k < 12:
		kind = kTypeSotW
	case k < 14:
		kind = kMCP
	case k < 15:
		kind = kAMCSSotW
	default:
		kind = kAMCSIncr
	}
	fixed := ""
	switch kind {
	case kTypeSotW, kTypeDelta:
		fixed = rapid.SampledFrom(envoyTypes).Draw(t, "per-type")
	case kAMCSIncr:
		fixed = rapid.SampledFrom([]string{amcsSE, amcsUnknown}).Draw(t, "amcs-type")
	}
	c := m.addClient(kind, fixed)
	if kind.xds() {
		c.sidecar = rapid.IntRange(0, 3).Draw(t, "sidecar") == 0
		c.ttl = m.ttl > 0 && rapid.IntRange(0, 3).Draw(t, "announces-ttl") > 0
		c.omitType = fixed != "" && rapid.Bool().Draw(t, "omit-type")
	}
	c.incr = kind == kMCP && rapid.Bool().Draw(t, "incremental")
	if rapid.IntRange(0, 4).Draw(t, "narrow?") == 0 {
		c.narrow = drawSubset(t, []string{"n0", "n1", "n2"}, 2, "narrow")
		if c.narrow == nil {
			c.narrow = []string{"n1"}
		}
	}
	return c
}

// drawSubscription draws how a client asks for a type: a legacy wildcard (naming nothing),
// "*" (with names or not), or names.
func (m *model) drawSubscription(t *rapid.T, c *mclient, key string) (wild, legacy bool, names []string) {
	ty := typeOf(key)
	if !c.kind.named() {
		return true, false, nil
	}
	pool := m.poolOf(ty.coll)
	if ty.wildcardable {
		switch rapid.IntRange(0, 9).Draw(t, "sub-mode") {
		case 0, 1, 2, 3:
			return true, true, nil
		case 4, 5:
			return true, false, nil
		case 6:
			return true, false, drawSubset(t, pool, 2, "sub-names")
		}
	}
	return false, false, drawSubset(t, pool, 3, "sub-names")
}

// newSubscription subscribes a client to a type it has not had, drawn.
func (m *model) newSubscription(t *rapid.T, c *mclient) bool {
	var free []string
	for _, k := range typesOf(c.kind, c.fixed) {
		if c.subs[k] == nil {
			free = append(free, k)
		}
	}
	if len(free) == 0 {
		return false
	}
	key := rapid.SampledFrom(free).Draw(t, "type")
	wild, legacy, names := m.drawSubscription(t, c, key)
	c.subscribeNew(key, wild, legacy, names)
	return true
}

// startClient opens a client's first stream and subscribes it to one to three types (the
// first ones in one batch, as a starting Envoy does).
func (m *model) startClient(t *rapid.T, c *mclient) {
	c.open()
	types := typesOf(c.kind, c.fixed)
	n := 1
	if len(types) > 1 {
		n = rapid.IntRange(1, min(len(types), 4)).Draw(t, "initial-types")
	}
	var picked []string
	if c.kind.aggregated() && rapid.Bool().Draw(t, "envoy-like") {
		picked = slices.Clone(envoyTypes) // as Envoy starts: clusters, endpoints, listeners, routes
	} else {
		for _, k := range resumeOrder(types) {
			if len(picked) < n && (len(types)-len(picked) <= n-len(picked) || rapid.Bool().Draw(t, "pick-"+shortType(k))) {
				picked = append(picked, k)
			}
		}
	}
	var batch []out
	for _, k := range picked {
		wild, legacy, names := m.drawSubscription(t, c, k)
		s := c.sub(k)
		s.wild, s.legacy, s.resume = wild, legacy, false
		for _, nm := range names {
			s.names[nm] = true
		}
		batch = append(batch, c.firstRequest(s, nil))
	}
	c.send(batch...)
}

// pickClient draws a client satisfying ok, or skips the action.
func pickClient(t *rapid.T, m *model, ok func(*mclient) bool) *mclient {
	var cs []*mclient
	for _, c := range m.clients {
		if ok(c) {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		t.SkipNow()
	}
	return cs[rapid.IntRange(0, len(cs)-1).Draw(t, "client")]
}

func pickSub(t *rapid.T, c *mclient, ok func(*msub) bool) *msub {
	var ss []*msub
	for _, k := range c.keys {
		if s := c.subs[k]; ok(s) {
			ss = append(ss, s)
		}
	}
	if len(ss) == 0 {
		t.SkipNow()
	}
	return ss[rapid.IntRange(0, len(ss)-1).Draw(t, "sub")]
}

// drawEnvoyChange draws one store write of the Envoy world: clusters come and go, routes move
// between clusters (a move: the new cluster, the routes, and the old cluster's removal in one
// write), route configurations and listeners come and go, resources change.
func (m *model) drawEnvoyChange(t *rapid.T) envoyState {
	next := m.w.env.clone()
	pick := func(hosts []string) string { return rapid.SampledFrom(hosts).Draw(t, "host") }
	n := rapid.IntRange(1, 3).Draw(t, "mutations")
	for range n {
		switch op := rapid.IntRange(0, 9).Draw(t, "mutation"); op {
		case 0: // a cluster comes
			next.clusters[pick(modelHosts)] = true
		case 1: // a cluster goes; what named it moves to another
			if live := next.liveHosts(); len(live) > 0 {
				delete(next.clusters, pick(live))
			}
		case 2, 3: // a move: everything naming Y now names Z, and Y goes
			live := next.liveHosts()
			if len(live) == 0 {
				break
			}
			y, z := pick(live), pick(modelHosts)
			if y == z {
				break
			}
			next.clusters[z] = true
			for _, vh := range next.routes {
				for h, target := range vh {
					if target == y {
						vh[h] = z
					}
				}
			}
			if next.tcp == y {
				next.tcp = z
			}
			delete(next.clusters, y)
		case 4: // a virtual host goes to another cluster, or comes
			live := next.liveHosts()
			if len(live) == 0 {
				break
			}
			rc := rapid.SampledFrom(append([]string{portRoute}, hostRoutes()...)).Draw(t, "route-config")
			if next.routes[rc] == nil {
				next.routes[rc] = map[string]string{}
			}
			next.routes[rc][pick(modelHosts)] = pick(live)
		case 5: // a route configuration goes (with its listeners)
			if len(next.routes) > 0 {
				delete(next.routes, rapid.SampledFrom(slices.Sorted(maps.Keys(next.routes))).Draw(t, "route-config"))
			}
		case 6: // a listener comes or goes
			l := rapid.SampledFrom(append([]string{portListener, tcpListenerName}, apiListeners()...)).Draw(t, "listener")
			switch {
			case l == tcpListenerName && next.tcp != "":
				next.tcp = ""
			case l == tcpListenerName:
				if live := next.liveHosts(); len(live) > 0 {
					next.tcp = pick(live)
				}
			case next.listeners[l]:
				delete(next.listeners, l)
			case next.routes[listenerRoute(l)] != nil:
				next.listeners[l] = true
			}
		default: // a resource changes (endpoints, mostly)
			coll := rapid.SampledFrom([]string{typeEndpoint, typeEndpoint, typeCluster, typeRoute, typeListener}).Draw(t, "touch-type")
			names := slices.Sorted(maps.Keys(m.w.envSpec[coll]))
			if len(names) > 0 {
				if next.touched[coll] == nil {
					next.touched[coll] = map[string]bool{}
				}
				next.touched[coll][rapid.SampledFrom(names).Draw(t, "touch")] = true
			}
		}
	}
	next.repair(pick)
	return next
}

func hostRoutes() []string {
	var out []string
	for _, h := range modelHosts {
		out = append(out, hostRouteOf(h))
	}
	return out
}

func apiListeners() []string {
	var out []string
	for _, h := range modelHosts {
		out = append(out, apiListenerOf(h))
	}
	return out
}

// runModel runs one schedule.
func runModel(t *rapid.T, o modelOptions) {
	su := drawSetup(t, o)
	m := newModel(t, o, su)
	defer m.close()
	m.logf("setup: policy %q, ttl %s, max response %d, %d producers", su.Policy.label, su.TTL, su.MaxResponse, su.Producers)
	for _, p := range m.w.producers {
		m.connectProducer(p, drawSubset(t, p.names, 3, "se"), nil)
	}
	for range rapid.IntRange(1, 4).Draw(t, "clients") {
		m.startClient(t, m.drawClient(t))
	}
	m.step()

	actions := map[string]func(*rapid.T){}
	add := func(name string, weight int, f func(*rapid.T)) {
		for i := range weight {
			actions[fmt.Sprintf("%s-%d", name, i)] = func(t *rapid.T) { f(t); m.step() }
		}
	}
	add("write", 4, func(t *rapid.T) {
		next := m.drawEnvoyChange(t)
		m.logf("write %s", describeEnvoy(&next))
		if err := m.w.writeEnvoy(next); err != nil {
			m.fail("write", "%v", err)
		}
		m.tr.Written()
	})
	add("push", 2, func(t *rapid.T) {
		p := m.w.producers[rapid.IntRange(0, len(m.w.producers)-1).Draw(t, "producer")]
		if !p.connected {
			t.SkipNow()
		}
		names := drawSubset(t, p.names, 3, "se")
		bump := map[string]bool{}
		for _, n := range drawSubset(t, names, 3, "bump") {
			bump[n] = true
		}
		m.pushProducer(p, names, bump, rapid.Bool().Draw(t, "incremental"))
	})
	add("producer-away-and-back", 1, func(t *rapid.T) {
		p := m.w.producers[rapid.IntRange(0, len(m.w.producers)-1).Draw(t, "producer")]
		if p.connected {
			m.disconnectProducer(p)
			return
		}
		names := slices.Sorted(maps.Keys(p.held))
		var bump map[string]bool
		if rapid.Bool().Draw(t, "changed-while-away") {
			names = drawSubset(t, p.names, 3, "se")
			bump = map[string]bool{}
			for _, n := range drawSubset(t, names, 3, "bump") {
				bump[n] = true
			}
		}
		m.connectProducer(p, names, bump)
	})
	add("subscribe", 2, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() })
		var resumable []*msub
		for _, k := range resumeOrder(c.keys) {
			if s := c.subs[k]; s.resume {
				resumable = append(resumable, s)
			}
		}
		if len(resumable) > 0 && rapid.IntRange(0, 3).Draw(t, "resume?") > 0 {
			s := resumable[rapid.IntRange(0, len(resumable)-1).Draw(t, "resume")]
			c.resume([]*msub{s}, false)
			if c.kind.deltaXDS() && !s.legacy && len(s.names) > 0 && rapid.Bool().Draw(t, "resubscribe-while-waiting") {
				// Its first response may wait behind another type's: the client drops a name
				// and asks for it again meanwhile.
				n := rapid.SampledFrom(slices.Sorted(maps.Keys(s.names))).Draw(t, "name")
				c.send(c.spontaneous(s, &nameChange{unsubscribe: []string{n}}))
				c.send(c.spontaneous(s, &nameChange{subscribe: []string{n}}))
			}
			return
		}
		if !m.newSubscription(t, c) {
			t.SkipNow()
		}
	})
	add("names", 3, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() && c.kind.named() })
		s := pickSub(t, c, func(s *msub) bool { return s.active && !s.legacy })
		pool := m.poolOf(s.t.coll)
		var ch nameChange
		if c.kind.deltaXDS() {
			ch.subscribe = drawSubset(t, pool, 2, "subscribe")
			if s.t.wildcardable && !s.wild && rapid.IntRange(0, 4).Draw(t, "sub-*") == 0 {
				ch.subscribe = append(ch.subscribe, source.Wildcard)
			}
			ch.unsubscribe = drawSubset(t, append(slices.Sorted(maps.Keys(s.names)), "n0/none"), 2, "unsubscribe")
			if s.wild && rapid.IntRange(0, 3).Draw(t, "unsub-*") == 0 {
				ch.unsubscribe = append(ch.unsubscribe, source.Wildcard)
			}
			if len(ch.subscribe)+len(ch.unsubscribe) == 0 {
				t.SkipNow()
			}
			for _, n := range ch.subscribe {
				ch.unsubscribe = slices.DeleteFunc(ch.unsubscribe, func(u string) bool { return u == n })
			}
			if s.pending != nil && rapid.Bool().Draw(t, "with-ack") {
				c.send(c.answer(s, false, &ch))
				return
			}
			c.send(c.spontaneous(s, &ch))
			return
		}
		ch.sotwSet = true
		ch.sotw = drawSubset(t, pool, 3, "names")
		if ch.sotw == nil {
			ch.sotw = []string{}
		}
		if s.t.wildcardable && rapid.IntRange(0, 3).Draw(t, "with-*") == 0 {
			ch.sotw = append([]string{source.Wildcard}, ch.sotw...)
		}
		if s.pending != nil {
			c.send(c.answer(s, false, &ch))
			return
		}
		c.send(c.spontaneous(s, &ch))
	})
	add("resubscribe", 2, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() && c.kind.deltaXDS() })
		s := pickSub(t, c, func(s *msub) bool { return s.active && !s.legacy })
		choices := m.poolOf(s.t.coll)
		if len(s.names) > 0 && rapid.IntRange(0, 3).Draw(t, "resub-held") > 0 {
			choices = slices.Sorted(maps.Keys(s.names))
		}
		n := rapid.SampledFrom(choices).Draw(t, "name")
		c.send(c.spontaneous(s, &nameChange{unsubscribe: []string{n}}), c.spontaneous(s, &nameChange{subscribe: []string{n}}))
	})
	add("ack", 5, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() && len(c.answerable()) > 0 })
		var batch []out
		for _, s := range c.answerable() {
			if rapid.IntRange(0, 3).Draw(t, "ack-"+shortType(s.t.key)) > 0 {
				batch = append(batch, c.answer(s, false, nil))
			}
		}
		if len(batch) == 0 {
			t.SkipNow()
		}
		c.send(batch...)
	})
	add("ack-all", 1, func(t *rapid.T) {
		for _, c := range m.clients {
			if !c.connected() {
				continue
			}
			var batch []out
			for _, s := range c.answerable() {
				batch = append(batch, c.answer(s, false, nil))
			}
			if len(batch) > 0 {
				c.send(batch...)
			}
		}
	})
	// A held ACK: a type's response left unanswered while the stream's other types go on, until
	// released.
	add("hold-ack", 1, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() && len(c.answerable()) > 0 })
		s := pickSub(t, c, func(s *msub) bool { return s.pending != nil && !s.holdAck })
		s.holdAck = true
		m.logf("%s holds its answer to %s", c, s.pending)
	})
	add("release-ack", 1, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool {
			return c.connected() && slices.ContainsFunc(c.pendingSubs(), func(s *msub) bool { return s.holdAck })
		})
		s := pickSub(t, c, func(s *msub) bool { return s.pending != nil && s.holdAck })
		c.send(c.answer(s, rapid.IntRange(0, 3).Draw(t, "release-nack") == 0, nil))
	})
	add("nack", 2, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() && len(c.pendingSubs()) > 0 })
		s := pickSub(t, c, func(s *msub) bool { return s.pending != nil })
		c.send(c.answer(s, true, nil))
	})
	add("stale", 1, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() })
		s := pickSub(t, c, func(s *msub) bool { return s.active })
		nonce := "bogus-nonce"
		var old []string
		for _, n := range s.nonces {
			if (s.pending == nil || n != s.pending.nonce) && n != s.nonces[len(s.nonces)-1] {
				old = append(old, n)
			}
		}
		if len(old) > 0 && rapid.IntRange(0, 3).Draw(t, "bogus?") > 0 {
			nonce = rapid.SampledFrom(old).Draw(t, "old-nonce")
		}
		var names []string
		if c.kind.named() {
			names = drawSubset(t, m.poolOf(s.t.coll), 2, "stale-names")
		}
		c.send(c.stale(s, nonce, names, rapid.Bool().Draw(t, "stale-nack")))
	})
	add("client-away", 1, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() })
		c.disconnect()
	})
	add("client-back", 2, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return !c.connected() })
		c.open()
		fresh := rapid.IntRange(0, 9).Draw(t, "fresh") == 0
		keys := resumeOrder(c.keys)
		if len(keys) > 1 && rapid.IntRange(0, 2).Draw(t, "resume-some") == 0 {
			// A staggered resume: the first types now, the others by later actions.
			n := 1
			if rapid.Bool().Draw(t, "resume-more-than-one") {
				n = rapid.IntRange(1, len(keys)-1).Draw(t, "resume-n")
			}
			keys = keys[:n]
		}
		var subs []*msub
		for _, k := range keys {
			subs = append(subs, c.subs[k])
		}
		if len(subs) > 0 {
			// A slow client: the first type's first response stays unanswered for a while,
			// and the types resumed later wait behind it.
			subs[0].holdNext = len(keys) < len(c.keys) && rapid.Bool().Draw(t, "hold-first")
			c.resume(subs, fresh)
		}
	})
	// A slow client comes back while the store changes: it resumes its first type and holds
	// its first answer; a write comes; it resumes the others, each maybe dropping a name and
	// asking for it again while its first response waits behind the held one.
	add("staggered-resume", 1, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return !c.connected() && c.kind.aggregated() && len(c.keys) > 1 })
		c.open()
		keys := resumeOrder(c.keys)
		first := c.subs[keys[0]]
		first.holdNext = true
		c.resume([]*msub{first}, false)
		m.step()
		next := m.drawEnvoyChange(t)
		m.logf("write %s", describeEnvoy(&next))
		if err := m.w.writeEnvoy(next); err != nil {
			m.fail("write", "%v", err)
		}
		m.tr.Written()
		m.step()
		for _, k := range keys[1:] {
			s := c.subs[k]
			c.resume([]*msub{s}, false)
			if c.kind.deltaXDS() && !s.legacy && len(s.names) > 0 && rapid.Bool().Draw(t, "resubscribe-while-waiting") {
				n := rapid.SampledFrom(slices.Sorted(maps.Keys(s.names))).Draw(t, "name")
				c.send(c.spontaneous(s, &nameChange{unsubscribe: []string{n}}))
				c.send(c.spontaneous(s, &nameChange{subscribe: []string{n}}))
			}
		}
	})
	add("restart", 1, func(t *rapid.T) {
		c := pickClient(t, m, func(c *mclient) bool { return c.connected() && c.kind == kMCP })
		s := pickSub(t, c, func(s *msub) bool { return s.active && s.pending == nil && s.responses > 0 })
		var initial map[string]string
		if s.delta && len(s.held) > 0 {
			initial = maps.Clone(s.held)
		}
		s.nacked, s.nackedSig = map[string]string{}, ""
		c.send(c.firstRequest(s, initial))
	})
	add("new-client", 1, func(t *rapid.T) {
		if len(m.clients) >= 5 {
			t.SkipNow()
		}
		m.startClient(t, m.drawClient(t))
	})
	if su.TTL > 0 {
		add("heartbeat", 1, func(t *rapid.T) {
			m.logf("time passes: %s", su.TTL/2)
			m.tr.Advance(su.TTL/2 + su.TTL/10)
		})
	}
	t.Repeat(actions)
	m.converge()
	if len(m.skipped) > 0 {
		// Exploring past known bugs (-model.skip): say what was seen.
		fmt.Fprintf(os.Stderr, "model: skipped checks %v\n", m.skipped)
	}
}

func describeEnvoy(e *envoyState) string {
	var parts []string
	for _, h := range e.liveHosts() {
		parts = append(parts, strings.Split(h, ".")[0])
	}
	s := "clusters " + strings.Join(parts, ",")
	for _, rc := range slices.Sorted(maps.Keys(e.routes)) {
		var vh []string
		for _, h := range slices.Sorted(maps.Keys(e.routes[rc])) {
			vh = append(vh, strings.Split(h, ".")[0]+"→"+strings.Split(e.routes[rc][h], ".")[0])
		}
		s += fmt.Sprintf("; route %s {%s}", rc, strings.Join(vh, " "))
	}
	s += fmt.Sprintf("; listeners %v tcp→%s", slices.Sorted(maps.Keys(e.listeners)), e.tcp)
	for coll, names := range e.touched {
		if len(names) > 0 {
			s += fmt.Sprintf("; touched %s %v", shortType(coll), slices.Sorted(maps.Keys(names)))
		}
	}
	return s
}
