package source_test

// A model-based test of the subscription engine that shares no code with it: the model below
// is written from the protocols (shared/seeds/xds-protocol.rst, the MCP proto), the contract
// (CONTRACT.md sections 5 and 6) and what docs/architecture.md promises ("The source side: one
// engine", "TTLs and heartbeats", "Views"), and decides by itself what is correct. It only uses
// the engine's exported API, through the wire.
//
// A schedule (model_rapid_test.go) builds a world (model_world_test.go): Envoy resources
// written straight to the store, ServiceEntries pushed by real producers; clients of every
// protocol the engine serves; and random actions: writes, pushes, producers leaving and
// coming back, subscriptions and their changes, ACKs, NACKs, held ACKs, stale nonces,
// unknown types, reconnects that resume with initial_resource_versions, heartbeats. After
// every action the model reads every response that came, in order, checks it against the
// invariants below, and applies it to what the client holds. At the end, one last write gives
// everything a fresh version, every client answers everything until the server is quiet, and
// the model checks that every client holds exactly what the store holds for its subscription
// and view, and that the engine's status view agrees.
//
// What a response may contain depends on which requests the server had read when it made it.
// The model knows only bounds: a response of a type is made after the server read the
// client's answer to the previous response of that type (the protocol allows one
// unacknowledged response per type), and before it arrived, so it may reflect any
// subscription the client held between the two (its window). What exists in the store is
// likewise known at each moment only as "surely" or "perhaps": a change is sure once the step
// that made it settled.
//
// The invariants, each a function below citing its rule:
//   - on every response: checkOneUnacknowledged, checkNoDuplicateNames, checkVersions (non-empty
//     versions the world wrote with those bodies, no regression, fresh nonces),
//     checkInView, checkSubscribed, checkRefusedTypeCarriesDenial, checkNotExistIsTrue,
//     checkHeartbeat (and checkResendRenewsOnlyLive), checkNackedNotResent,
//     checkStateOfTheWorldComplete, checkMakeBeforeBreak (checkMakeBeforeBreakOnResume when
//     what still names the cluster was kept from before a reconnect), and, while decoding,
//     checkTTLFeature and checkIncremental;
//   - stale nonces change nothing: the model ignores a request with a stale nonce (it neither
//     answers a response nor changes names), so a server that took one shows as a name sent that
//     was not asked for (checkSubscribed), a second unacknowledged response
//     (checkOneUnacknowledged), or a refusal the client never made (checkNackedNotResent,
//     checkStatus);
//   - after every step: checkStatus (the engine's status view agrees with the clients);
//   - at the end: checkSubscribedNamesSent (once the server is quiet), checkConverged, and
//     checkStatus(final).
//
// Choices the docs leave open, and what the model assumes (each also where it is used):
//   - A client applies a response when it ACKs it, and keeps what it held when it NACKs it
//     (Envoy keeps its last good configuration). A NACKed removal may therefore stay with the
//     client: the server need not resend a removal (the version is not resent).
//   - Make before break is judged on what the server told the client on the stream (its
//     latest version of each resource, NACKed or not: the gates count what was sent), plus what
//     a reconnecting delta client said it holds (initial_resource_versions); a client that
//     NACKed a route's update still runs the old route, and the server cannot wait for it.
//   - Requests sent back to back, before the client reads (a reconnecting Envoy resumes every
//     type at once), are treated as having arrived together: a type subscribed in the same
//     batch is on the stream when the server answers any of them.
//   - A legacy wildcard (a first request naming nothing) stays, and the client names nothing
//     more for that type (the seed: names in later requests are ignored).
//   - A state-of-the-world response of heartbeats only (every resource a wrapper without a
//     body) renews TTLs and removes nothing; within any response a heartbeat keeps the
//     resource as the client holds it.
//   - State-of-the-world endpoints and route configurations by name carry what changed
//     (xds-protocol.rst, "Grouping Resources into Responses"): the client merges them, and a
//     name that no longer exists may stay with it (SotW has no removal for those types).
//   - The client does not expire resources whose TTL passed (it would only ever drop more);
//     heartbeats are checked against what it holds.

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/source"
)

// failer is what the model fails through: a *rapid.T or a *testing.T.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// ---- protocols and types ----

type protoKind int

const (
	kADSSotW   protoKind = iota // xDS v3 ADS, state of the world
	kADSDelta                   // xDS v3 ADS, delta
	kTypeSotW                   // one of the per-type services (CDS, EDS, LDS, RDS), state of the world
	kTypeDelta                  // the same, delta
	kMCP                        // istio.mcp.v1alpha1.ResourceSource
	kAMCSSotW                   // AggregatedMeshConfigService/StreamAggregatedResources
	kAMCSIncr                   // AggregatedMeshConfigService/IncrementalAggregatedResources
)

func (k protoKind) String() string {
	return [...]string{"ads-sotw", "ads-delta", "type-sotw", "type-delta", "mcp", "amcs-sotw", "amcs-incr"}[k]
}

func (k protoKind) xds() bool        { return k <= kTypeDelta }
func (k protoKind) aggregated() bool { return k == kADSSotW || k == kADSDelta }
func (k protoKind) deltaXDS() bool   { return k == kADSDelta || k == kTypeDelta }
func (k protoKind) sotwXDS() bool    { return k == kADSSotW || k == kTypeSotW }
func (k protoKind) named() bool      { return k.xds() } // clients name resources; MCP and AMCS take whole collections

// mtype is a type as a client names it.
type mtype struct {
	key          string // the client's name: type URL, collection
	coll         string // the store collection behind it
	wildcardable bool   // LDS, CDS, the MCP collections (and unknown types, served like them)
	partial      bool   // SotW by name carries only what changed (endpoints, route configurations)
	envoy        bool
}

func typeOf(key string) mtype {
	switch key {
	case typeCluster, typeListener:
		return mtype{key: key, coll: key, wildcardable: true, envoy: true}
	case typeEndpoint, typeRoute:
		return mtype{key: key, coll: key, partial: true, envoy: true}
	case xdsSE, collSE, amcsSE:
		return mtype{key: key, coll: collSE, wildcardable: true}
	}
	return mtype{key: key, coll: key, wildcardable: true} // unknown: an empty opaque collection
}

func methodOf(k protoKind, fixed string) string {
	switch k {
	case kADSSotW:
		return methodADSSotW
	case kADSDelta:
		return methodADSDelta
	case kMCP:
		return methodMCPSource
	case kAMCSSotW:
		return methodAMCSSotW
	case kAMCSIncr:
		return methodAMCSIncrement
	}
	sotw := k == kTypeSotW
	pick := func(s, d string) string {
		if sotw {
			return s
		}
		return d
	}
	switch fixed {
	case typeCluster:
		return pick(methodCDSSotW, methodCDSDelta)
	case typeEndpoint:
		return pick(methodEDSSotW, methodEDSDelta)
	case typeListener:
		return pick(methodLDSSotW, methodLDSDelta)
	}
	return pick(methodRDSSotW, methodRDSDelta)
}

// typesOf are the types a client of a protocol may subscribe to.
func typesOf(k protoKind, fixed string) []string {
	switch k {
	case kADSSotW, kADSDelta:
		return []string{typeCluster, typeEndpoint, typeListener, typeRoute, xdsSE, xdsUnknown}
	case kMCP:
		return []string{collSE, mcpUnknown}
	case kAMCSSotW:
		return []string{amcsSE, amcsUnknown}
	}
	return []string{fixed}
}

// ---- responses, as the model reads them ----

type nres struct {
	name, version string
	body          []byte // the resource's body Any value
	btype         string // and its type URL
	hasBody       bool
	heartbeat     bool // a TTL renewal: name, version, TTL, no body
	notExist      bool // delta: "does not exist" (a name and nothing else)
	ttl           *durationpb.Duration
	wrapped       bool // SotW: inside an envoy.service.discovery.v3.Resource
}

type nresp struct {
	key      string
	nonce    string
	version  string
	full     bool // replaces what the client holds of the type
	res      []nres
	removed  []string
	denied   bool // carries a PermissionDenied resource error
	incrFlag bool // MCP Resources.incremental
	arr      arrival
	lo       int64 // the clock of the client's answer before it: the response was made after
}

func (r *nresp) heartbeatOnly() bool {
	if len(r.res) == 0 {
		return false
	}
	for _, x := range r.res {
		if !x.heartbeat {
			return false
		}
	}
	return true
}

func (r *nresp) String() string {
	var parts []string
	for _, x := range r.res {
		switch {
		case x.heartbeat:
			parts = append(parts, "♥"+x.name+"@"+x.version)
		case x.notExist:
			parts = append(parts, "∄"+x.name)
		default:
			parts = append(parts, x.name+"@"+x.version)
		}
	}
	for _, n := range r.removed {
		parts = append(parts, "-"+n)
	}
	kind := "diff"
	if r.full {
		kind = "full"
	}
	return fmt.Sprintf("%s %s nonce=%s version=%s [%s]%s", shortType(r.key), kind, r.nonce, r.version, strings.Join(parts, " "),
		map[bool]string{true: " DENIED", false: ""}[r.denied])
}

func shortType(key string) string {
	switch key {
	case typeCluster:
		return "CDS"
	case typeEndpoint:
		return "EDS"
	case typeListener:
		return "LDS"
	case typeRoute:
		return "RDS"
	case xdsSE, collSE, amcsSE:
		return "SE"
	}
	return key
}

// ---- clients ----

// subState is a subscription as the client held it after one of its requests.
type subState struct {
	idx    int // the request after which it holds
	active bool
	wild   bool
	legacy bool
	names  map[string]bool
}

// msub is one type on one client: what it asked for, and what it holds.
type msub struct {
	c     *mclient
	t     mtype
	delta bool // incremental: delta xDS, AMCS incremental, MCP asking for increments

	// The subscription as the client wants it now, and its history on the current stream.
	active, wild, legacy bool
	names                map[string]bool
	hist                 []subState
	resume               bool // the stream was reopened and this type not asked for again yet

	firstIdx    int // the request that started the subscription on this stream
	answeredIdx int // the request that answered the latest response (firstIdx before the first)
	pending     *nresp
	responses   int
	nonces      []string // the nonces of this type on this stream, in order

	held     map[string]string // what the client holds (applied on ACK), across reconnects
	eff      map[string]string // what the server told it on this stream, NACKed or not, and what it said it held when it resumed
	declared map[string]string // initial_resource_versions on this stream

	nacked         map[string]string // name → version refused on this stream, not asked for again since
	subscribedAt   map[string]int    // delta: the latest request that subscribed to each name by name
	nackedSig      string            // the content of the latest refused whole response
	nackedSince    int64             // the clock after which the refused whole response may have been made
	nackedRemovals map[string]bool   // removals the client refused, and may still hold
	obligations    map[string]int    // delta: names subscribed that must be answered, by the request that asked
	mayAnswerAgain map[string]bool   // delta: names whose obligation a response answered that the server may have made before it read the request that asked: the next response carrying the name may answer it once more
	anew           map[string]int    // names asked anew (SotW, or held when "*" was newly subscribed), by that request: the server may send them again
	wildAnewAt     int               // delta: the latest request that newly subscribed to "*" (-1: none)
	ackedVersions  map[string]bool   // versions of the responses ACKed on this stream
	lastAcked      string            // the version of the latest response ACKed
	dropped        map[string]bool   // names the client stopped asking for, the server may not have read it yet (true: an answer carried it since)
	holdAck        bool              // the schedule holds the pending response's answer until it releases it
	holdNext       bool              // and will hold the next response's
}

func (s *msub) state() subState {
	return subState{active: s.active, wild: s.wild, legacy: s.legacy, names: maps.Clone(s.names)}
}

// covers: a subscription state asks for the name (wildcard in its scope, or by name).
func (s *msub) covers(st subState, name string) bool {
	if !st.active {
		return false
	}
	if st.wild && s.c.inScope(s.t, name) {
		return true
	}
	return st.names[name]
}

func (s *msub) coversNow(name string) bool { return s.covers(s.state(), name) }

// statesIn are the subscription states in effect after any request from..to (inclusive).
func (s *msub) statesIn(from, to int) []subState {
	var out []subState
	var last *subState
	for i := range s.hist {
		h := &s.hist[i]
		if h.idx <= from {
			last = h
			continue
		}
		if h.idx <= to {
			out = append(out, *h)
		}
	}
	if last != nil {
		out = append([]subState{*last}, out...)
	}
	return out
}

func (s *msub) coveredSometime(name string, from, to int, byName bool) bool {
	for _, st := range s.statesIn(from, to) {
		if byName && st.active && st.names[name] {
			return true
		}
		if !byName && s.covers(st, name) {
			return true
		}
	}
	return false
}

func (s *msub) coveredThroughout(name string, from, to int) bool {
	states := s.statesIn(from, to)
	if len(states) == 0 {
		return false
	}
	for _, st := range states {
		if !s.covers(st, name) {
			return false
		}
	}
	return true
}

// mclient is one client: one stream at a time, reopened by reconnects.
type mclient struct {
	m        *model
	id       int
	kind     protoKind
	fixed    string // the one type of a per-type stream, or of an AMCS incremental one
	sidecar  bool   // node ID of an Istio sidecar: a wildcard listener subscription gets the outbound ones
	narrow   []string
	ttl      bool // announces TTL support (and, for SotW, the Resource wrapper)
	incr     bool // MCP: asks for increments
	omitType bool // per-type stream: requests leave type_url empty

	gen      int
	node     string
	st       modelStream
	sendAt   []int64 // the clock of each request sent on the current stream
	batchEnd []int   // the last request of each request's batch
	nonces   map[string]bool
	subs     map[string]*msub
	keys     []string
}

func (c *mclient) String() string {
	return fmt.Sprintf("c%d(%s%s)", c.id, c.kind, map[bool]string{true: " " + shortType(c.fixed), false: ""}[c.fixed != ""])
}

func (c *mclient) connected() bool { return c.st != nil }

// inScope: a wildcard listener subscription of a sidecar gets the outbound listeners only
// (architecture.md, "Other rules"; source/xds views).
func (c *mclient) inScope(t mtype, name string) bool {
	if t.coll == typeListener && c.sidecar {
		return strings.HasPrefix(name, "0.0.0.0_")
	}
	return true
}

// visible: the client may see the resource (CONTRACT.md section 8: consume rules; the node's
// own narrowing, NodeNamespacesKey, narrows namespaced resources only).
func (c *mclient) visible(coll, name string) bool {
	ns, namespaced := modelNamespace(coll, name)
	if !c.m.policy.allows(coll, ns, namespaced) {
		return false
	}
	if namespaced && c.narrow != nil && !slices.Contains(c.narrow, ns) {
		return false
	}
	return true
}

func (c *mclient) sub(key string) *msub {
	if s := c.subs[key]; s != nil {
		return s
	}
	t := typeOf(key)
	delta := c.kind.deltaXDS() || c.kind == kAMCSIncr || (c.kind == kMCP && c.incr)
	s := &msub{c: c, t: t, delta: delta, names: map[string]bool{}, held: map[string]string{}, dropped: map[string]bool{}}
	s.resetStream()
	c.subs[key] = s
	c.keys = append(c.keys, key)
	return s
}

// resetStream forgets what belongs to the stream; what the client holds stays.
func (s *msub) resetStream() {
	s.active = false
	s.hist = nil
	s.pending = nil
	s.holdAck, s.holdNext = false, false
	s.responses = 0
	s.nonces = nil
	s.eff = map[string]string{}
	s.declared = map[string]string{}
	s.nacked = map[string]string{}
	s.nackedSig = ""
	s.obligations = map[string]int{}
	s.mayAnswerAgain = map[string]bool{}
	s.anew = map[string]int{}
	s.wildAnewAt = -1
	s.subscribedAt = map[string]int{}
	s.ackedVersions = map[string]bool{}
	s.lastAcked = ""
	s.firstIdx, s.answeredIdx = -1, -1
}

// ---- model ----

type model struct {
	t       failer
	clock   *modelClock
	w       *world
	tr      modelTransport
	eng     *source.Engine
	policy  *policySpec
	ttl     time.Duration // xds TTL, 0: none
	clients []*mclient
	trace   []string
	skipped map[string]int
}

func (m *model) logf(format string, args ...any) {
	m.trace = append(m.trace, fmt.Sprintf("[%d] ", m.clock.Now())+fmt.Sprintf(format, args...))
}

// modelSkip names checks whose failures are logged rather than failing the schedule: for
// exploring past a known bug (-model.skip=checkMakeBeforeBreakOnResume,checkSubscribedNameSent).
var modelSkip = flag.String("model.skip", "", "model test: comma-separated checks that only log")

// fail reports a broken invariant with the trace of the schedule so far.
func (m *model) fail(check string, format string, args ...any) {
	m.t.Helper()
	if slices.Contains(strings.Split(*modelSkip, ","), check) {
		m.logf("SKIPPED %s: %s", check, fmt.Sprintf(format, args...))
		m.skipped[check]++
		return
	}
	tail := m.trace
	if len(tail) > 80 {
		tail = tail[len(tail)-80:]
	}
	m.t.Fatalf("%s: %s\npolicy: %s, ttl %s\ntrace (latest last):\n  %s", check, fmt.Sprintf(format, args...),
		m.policy.label, m.ttl, strings.Join(tail, "\n  "))
}

// ---- requests ----

func (c *mclient) xdsNode() *corev3.Node {
	n := &corev3.Node{Id: c.node}
	if c.narrow != nil {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			nodeNamespaceKey: structpb.NewStringValue(strings.Join(c.narrow, ","))}}
	}
	if c.ttl {
		n.ClientFeatures = []string{"xds.config.supports-resource-ttl", "xds.config.resource-in-sotw"}
	}
	return n
}

func (c *mclient) sinkNode() *mcp.SinkNode {
	n := &mcp.SinkNode{Id: c.node}
	if c.narrow != nil {
		n.Annotations = map[string]string{nodeNamespaceKey: strings.Join(c.narrow, ",")}
	}
	return n
}

// out is one request to send, and what sending it does to the client's model.
type out struct {
	s     *msub
	build func(first bool) proto.Message // first: the stream's first request (xDS sends the node)
	apply func(idx int)                  // the client's state change, once the request has an index
	what  string
}

// send sends requests as one batch. Each takes the next index on the stream; the model's
// state changes are applied in order, each recorded in its type's history.
func (c *mclient) send(batch ...out) {
	m := c.m
	var msgs []proto.Message
	start := len(c.sendAt)
	for i, o := range batch {
		idx := start + i
		c.sendAt = append(c.sendAt, m.clock.Tick())
		c.batchEnd = append(c.batchEnd, start+len(batch)-1)
		msgs = append(msgs, o.build(idx == 0))
		if o.apply != nil {
			o.apply(idx)
		}
		if o.s != nil {
			st := o.s.state()
			st.idx = idx
			o.s.hist = append(o.s.hist, st)
		}
		m.logf("%s #%d → %s", c, idx, o.what)
	}
	if err := c.st.Send(msgs...); err != nil {
		m.fail("stream", "%s: send: %v", c, err)
	}
}

func (s *msub) typeURL() string {
	if s.c.omitType {
		return ""
	}
	return s.t.key
}

// sotwNames is what a state-of-the-world request names: nothing for a legacy wildcard.
func (s *msub) sotwNames() []string {
	if s.legacy {
		return nil
	}
	out := slices.Sorted(maps.Keys(s.names))
	if s.wild {
		out = append([]string{source.Wildcard}, out...)
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func errDetail(msg string) *rpcstatus.Status {
	return &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg}
}

// firstRequest starts a subscription on the current stream: names (or a wildcard), and for an
// incremental one the versions the client holds (initial_resource_versions) when it resumes.
func (c *mclient) firstRequest(s *msub, initial map[string]string) out {
	if c.kind.named() && s.t.wildcardable && !s.wild && len(s.names) == 0 {
		// A first request naming nothing is the legacy wildcard (xds-protocol.rst), whatever
		// the client meant: a resumed subscription whose names all went asks for everything.
		s.wild, s.legacy = true, true
	}
	if s.legacy {
		s.names = map[string]bool{}
	}
	subscribe := []string(nil)
	if !s.legacy {
		subscribe = slices.Sorted(maps.Keys(s.names))
		if s.wild {
			subscribe = append([]string{source.Wildcard}, subscribe...)
		}
	}
	what := fmt.Sprintf("subscribe %s %s", shortType(s.t.key), describeSub(s))
	if len(initial) > 0 {
		what += fmt.Sprintf(" initial %v", initial)
	}
	return out{s: s, what: what,
		build: func(first bool) proto.Message {
			switch c.kind {
			case kADSSotW, kTypeSotW:
				r := &discovery.DiscoveryRequest{TypeUrl: s.typeURL(), ResourceNames: s.sotwNames()}
				if first {
					r.Node = c.xdsNode()
				}
				return r
			case kADSDelta, kTypeDelta:
				r := &discovery.DeltaDiscoveryRequest{TypeUrl: s.typeURL(), ResourceNamesSubscribe: subscribe, InitialResourceVersions: initial}
				if first {
					r.Node = c.xdsNode()
				}
				return r
			case kMCP:
				return &mcp.RequestResources{SinkNode: c.sinkNode(), Collection: s.t.key, Incremental: c.incr, InitialResourceVersions: initial}
			case kAMCSSotW:
				return &mcp.MeshConfigRequest{SinkNode: c.sinkNode(), TypeUrl: s.t.key}
			default:
				return &mcp.IncrementalMeshConfigRequest{SinkNode: c.sinkNode(), TypeUrl: s.t.key, InitialResourceVersions: initial}
			}
		},
		apply: func(idx int) {
			s.active = true
			s.firstIdx, s.answeredIdx = idx, idx
			s.declared = maps.Clone(initial)
			if s.declared == nil {
				s.declared = map[string]string{}
			}
			s.eff = maps.Clone(s.declared)
			if !s.delta {
				// State of the world: the first request asks for each name anew (the server
				// cannot know what the client holds from an earlier stream).
				for n := range s.names {
					s.anew[n] = idx
				}
			}
			if s.delta && c.kind.named() && !s.legacy {
				// xds-protocol.rst, "Knowing When a Requested Resource Does Not Exist": a delta
				// name is answered, with the resource or "does not exist"; a name the client
				// said it holds (initial_resource_versions) need not be resent.
				for n := range s.names {
					if _, held := initial[n]; !held {
						s.obligations[n] = idx
					}
				}
			}
		}}
}

func describeSub(s *msub) string {
	switch {
	case s.legacy:
		return "(legacy wildcard)"
	case s.wild:
		return fmt.Sprintf("* + %v", slices.Sorted(maps.Keys(s.names)))
	}
	return fmt.Sprintf("%v", slices.Sorted(maps.Keys(s.names)))
}

// nameChange is a change of names: delta subscribe/unsubscribe, or a SotW request's new list.
type nameChange struct {
	subscribe, unsubscribe []string
	sotw                   []string // SotW: the whole new list ("*" included); nil: unchanged
	sotwSet                bool
}

func (ch *nameChange) String() string {
	if ch == nil {
		return ""
	}
	if ch.sotwSet {
		return fmt.Sprintf(" names %v", ch.sotw)
	}
	return fmt.Sprintf(" +%v -%v", ch.subscribe, ch.unsubscribe)
}

// changeNames applies a name change to the client's subscription: what it no longer asks for
// it forgets (held and told), and a delta name it asks for is owed an answer.
func (s *msub) changeNames(ch *nameChange, idx int) {
	if ch == nil {
		return
	}
	before := s.state()
	if ch.sotwSet {
		s.wild = false
		s.names = map[string]bool{}
		for _, n := range ch.sotw {
			if n == source.Wildcard {
				s.wild = true
			} else {
				s.names[n] = true
			}
		}
	} else {
		for _, n := range ch.unsubscribe {
			if n == source.Wildcard {
				s.wild = false
			} else {
				delete(s.names, n)
			}
			delete(s.obligations, n)
			delete(s.mayAnswerAgain, n)
		}
		for _, n := range ch.subscribe {
			if n == source.Wildcard {
				if !before.wild {
					// Asked for everything anew, as a first request would: what the client
					// holds may come again, and a refused version with it.
					for held := range s.held {
						s.anew[held] = idx
					}
					for told := range s.eff { // told on this stream, answered or not
						s.anew[told] = idx
					}
					s.wildAnewAt = idx
				}
				s.wild = true
				s.nacked = map[string]string{}
				continue
			}
			s.names[n] = true
			// xds-protocol.rst, "Subscribing to Resources": the server must provide a
			// subscribed name even if it believes the client already has it.
			s.obligations[n] = idx
			s.subscribedAt[n] = idx
			delete(s.nacked, n)
			delete(s.mayAnswerAgain, n)
		}
	}
	after := s.state()
	if after.wild != before.wild || !maps.Equal(after.names, before.names) {
		// Asked anew: the server answers the new subscription, which may hold what was
		// refused (a whole response must hold everything asked for).
		s.nackedSig = ""
	}
	// A SotW name newly asked for is sent even if unchanged (newly requested names), so a
	// refused version of it may come again.
	for n := range after.names {
		if !before.names[n] {
			if ch.sotwSet {
				s.anew[n] = idx
			}
			delete(s.nacked, n)
		}
	}
	if after.wild && !before.wild {
		s.nacked = map[string]string{}
	}
	for _, m := range []map[string]string{s.held, s.eff} {
		for n := range m {
			if !s.covers(after, n) {
				delete(m, n)
				s.dropped[n] = false
			}
		}
	}
}

// forgetDropped ends the tolerance of the status view for names the client stopped asking for:
// a delta request is always read; a state-of-the-world request with the latest nonce may find a
// newer response on its way and be ignored (stale), so its names count only once an answer,
// which carries them, was sent.
func (s *msub) forgetDropped() {
	for n, confirmed := range s.dropped {
		if confirmed || s.delta || !s.c.kind.sotwXDS() {
			delete(s.dropped, n)
		}
	}
}

// answer ACKs or NACKs the pending response, with a name change if any.
func (c *mclient) answer(s *msub, nack bool, ch *nameChange) out {
	r := s.pending
	verb := "ACK"
	if nack {
		verb = "NACK"
	}
	what := fmt.Sprintf("%s %s %s%s", verb, shortType(s.t.key), r.nonce, ch)
	return out{s: s, what: what,
		build: func(first bool) proto.Message {
			var detail *rpcstatus.Status
			version := r.version
			if nack {
				detail = errDetail("refused by the model")
				version = s.lastAcked
			}
			switch c.kind {
			case kADSSotW, kTypeSotW:
				names := s.sotwNames()
				if ch != nil && ch.sotwSet {
					names = ch.sotw
				}
				return &discovery.DiscoveryRequest{TypeUrl: s.typeURL(), VersionInfo: version, ResourceNames: names,
					ResponseNonce: r.nonce, ErrorDetail: detail}
			case kADSDelta, kTypeDelta:
				q := &discovery.DeltaDiscoveryRequest{TypeUrl: s.typeURL(), ResponseNonce: r.nonce, ErrorDetail: detail}
				if ch != nil {
					q.ResourceNamesSubscribe, q.ResourceNamesUnsubscribe = ch.subscribe, ch.unsubscribe
				}
				return q
			case kMCP:
				return &mcp.RequestResources{SinkNode: c.sinkNode(), Collection: s.t.key, ResponseNonce: r.nonce, ErrorDetail: detail, Incremental: c.incr}
			case kAMCSSotW:
				return &mcp.MeshConfigRequest{SinkNode: c.sinkNode(), TypeUrl: s.t.key, VersionInfo: version, ResponseNonce: r.nonce, ErrorDetail: detail}
			default:
				return &mcp.IncrementalMeshConfigRequest{SinkNode: c.sinkNode(), TypeUrl: s.t.key, ResponseNonce: r.nonce, ErrorDetail: detail}
			}
		},
		apply: func(idx int) {
			s.pending = nil
			s.holdAck = false
			s.answeredIdx = idx
			for n := range s.dropped {
				s.dropped[n] = true
			}
			if nack {
				s.refuse(r, c.sendAt)
			} else {
				s.accept(r)
			}
			s.changeNames(ch, idx)
		}}
}

// accept applies an ACKed response to what the client holds.
func (s *msub) accept(r *nresp) {
	s.ackedVersions[r.version] = true
	s.lastAcked = r.version
	if r.heartbeatOnly() {
		return
	}
	applyResponse(s.held, r, s.coversNow)
	if s.wildAnewAt >= 0 && r.arr.Sent <= s.wildAnewAt {
		// The server sent this before it read the request that last subscribed to "*" anew
		// (the client accepts it only now): what it carries is owed again once the server
		// reads that request, as what the client held then is, and may come again.
		for _, x := range r.res {
			if _, ok := s.anew[x.name]; !ok && x.hasBody {
				s.anew[x.name] = s.wildAnewAt
			}
		}
	}
	if r.full {
		// The client holds another whole state now: a later response equal to the one it
		// refused before is a change back, not the refused response resent.
		s.nackedSig = ""
	}
	for _, x := range r.res {
		delete(s.nackedRemovals, x.name)
		if x.hasBody && s.nacked[x.name] != x.version {
			delete(s.nacked, x.name) // it holds another version now: the refused one may come back as a change
		}
	}
	for _, n := range r.removed {
		delete(s.nackedRemovals, n)
	}
	if r.full {
		for n := range s.nackedRemovals {
			if _, ok := s.held[n]; !ok {
				delete(s.nackedRemovals, n)
			}
		}
	}
}

// refuse records a NACK: the client keeps what it held; the refused versions are not to be
// sent again (CONTRACT.md section 6: "the same version is not resent").
func (s *msub) refuse(r *nresp, sendAt []int64) {
	if r.heartbeatOnly() {
		return
	}
	if r.full {
		s.nackedSig, s.nackedSince = contentSig(r), r.lo
	}
	for _, x := range r.res {
		// A name the client subscribed to again after this response arrived is owed anyway
		// ("the server *must* still provide" it): sending the version it then refused answers
		// that request, which the refusal did not take back. So may be one subscribed to again
		// after the answer before this response (r.lo) but before the response arrived: the
		// server may have taken that request after it made the response (over a socket, or
		// while the response waited to be read), and then it owes the name anew, as it cannot
		// tell that the client asked before it saw the response.
		idx, ok := s.subscribedAt[x.name]
		anew := ok && (idx >= r.arr.Sent || idx < len(sendAt) && sendAt[idx] > r.lo)
		if x.hasBody && !anew && s.wildAnewAt < r.arr.Sent {
			s.nacked[x.name] = x.version
		}
	}
	if s.nackedRemovals == nil {
		s.nackedRemovals = map[string]bool{}
	}
	for _, n := range removals(s.held, r, s.coversNow) {
		s.nackedRemovals[n] = true
	}
}

func contentSig(r *nresp) string {
	var parts []string
	for _, x := range r.res {
		if x.hasBody {
			parts = append(parts, x.name+"@"+x.version)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// applyResponse applies a response to a state (name → version): a whole response replaces it
// (heartbeats keep what they renew), a diff upserts and removes; names the subscription no
// longer covers are left out (the client ignores them).
func applyResponse(state map[string]string, r *nresp, covered func(string) bool) {
	if r.heartbeatOnly() {
		return
	}
	if r.full {
		next := map[string]string{}
		for _, x := range r.res {
			switch {
			case x.heartbeat:
				if v, ok := state[x.name]; ok {
					next[x.name] = v
				}
			case x.hasBody && covered(x.name):
				next[x.name] = x.version
			}
		}
		clear(state)
		maps.Copy(state, next)
		return
	}
	for _, x := range r.res {
		switch {
		case x.heartbeat:
		case x.notExist:
			delete(state, x.name)
		case covered(x.name):
			state[x.name] = x.version
		}
	}
	for _, n := range r.removed {
		delete(state, n)
	}
}

// removals are the names of state a response takes away.
func removals(state map[string]string, r *nresp, covered func(string) bool) []string {
	if r.heartbeatOnly() {
		return nil
	}
	after := maps.Clone(state)
	applyResponse(after, r, covered)
	var out []string
	for n := range state {
		if _, ok := after[n]; !ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// ---- reading responses ----

// drain reads every response that came on every client's stream and checks each.
func (m *model) drain() {
	m.t.Helper()
	for _, c := range m.clients {
		if c.st == nil {
			continue
		}
		for _, a := range c.st.Take() {
			c.onArrival(a)
		}
		if err := c.st.Err(); err != nil {
			m.fail("stream ended", "%s: the server ended the stream: %v", c, err)
		}
	}
}

func (c *mclient) onArrival(a arrival) {
	m := c.m
	m.t.Helper()
	r := c.normalize(a)
	m.logf("%s ← %s (sent %d)", c, r, a.Sent)
	s := c.subs[r.key]
	if s == nil || !s.active {
		m.fail("checkSubscribed", "%s got a response for %s, which it has not subscribed to on this stream: %s", c, r.key, r)
	}
	lo, hi := c.sendAt[s.answeredIdx], a.At
	r.lo = lo

	c.checkOneUnacknowledged(s, r)
	c.checkNoDuplicateNames(s, r)
	c.checkVersions(s, r)
	c.checkInView(s, r)
	c.checkSubscribed(s, r)
	c.checkRefusedTypeCarriesDenial(s, r)
	c.checkNotExistIsTrue(s, r, lo, hi)
	c.checkHeartbeat(s, r, lo, hi)
	c.checkNackedNotResent(s, r)
	c.checkStateOfTheWorldComplete(s, r)
	if c.kind.aggregated() {
		c.checkMakeBeforeBreak(s, r, lo, hi)
	}

	// The one answer more a name may get (mayAnswerAgain) is this response's or none: any
	// later response that carries the name, other than as a heartbeat, uses it up.
	for _, x := range r.res {
		if !x.heartbeat {
			delete(s.mayAnswerAgain, x.name)
		}
	}
	// Obligations answered: the name came (resource, "does not exist", or removal) in a
	// response that arrived after the request that asked for it.
	for _, x := range r.res {
		if idx, ok := s.obligations[x.name]; ok && !x.heartbeat && a.Sent > idx {
			delete(s.obligations, x.name)
			// The request was sent after the one this response answers: the server may have
			// made the response before it read it (over a socket, or while the response
			// waited to be read), and then answers the name again once it does.
			if c.sendAt[idx] > lo {
				s.mayAnswerAgain[x.name] = true
			}
		}
		if idx, ok := s.anew[x.name]; ok && !x.heartbeat && a.Sent > idx {
			delete(s.anew, x.name)
		}
	}
	for _, n := range r.removed {
		if idx, ok := s.obligations[n]; ok && a.Sent > idx {
			delete(s.obligations, n)
		}
	}
	applyResponse(s.eff, r, s.coversNow)
	s.pending = r
	if s.holdNext {
		s.holdNext, s.holdAck = false, true
		m.logf("%s holds its answer to %s", c, r)
	}
	s.responses++
	s.nonces = append(s.nonces, r.nonce)
}

// normalize reads a response of any protocol into the model's terms, checking on the way that
// it is well formed for the client (the TTL features it announced).
func (c *mclient) normalize(a arrival) *nresp {
	m := c.m
	m.t.Helper()
	r := &nresp{arr: a}
	expectTTL := m.ttl > 0 && c.ttl && c.kind.xds()
	switch msg := a.Msg.(type) {
	case *discovery.DiscoveryResponse:
		r.key, r.nonce, r.version = msg.TypeUrl, msg.Nonce, msg.VersionInfo
		t := typeOf(r.key)
		r.full = !t.partial
		for _, e := range msg.ResourceErrors {
			if e.GetErrorDetail().GetCode() == int32(codes.PermissionDenied) {
				r.denied = true
			}
		}
		for _, any := range msg.Resources {
			var x nres
			if any.TypeUrl == xdsWrapperType {
				if !expectTTL {
					m.fail("checkTTLFeature", "%s: a SotW resource in a Resource wrapper, though the client did not announce it unwraps them (xds-protocol.rst, \"SotW TTL\")", c)
				}
				var w discovery.Resource
				if err := any.UnmarshalTo(&w); err != nil {
					m.fail("decode", "%s: wrapper: %v", c, err)
				}
				x = nres{name: w.Name, version: w.Version, ttl: w.Ttl, wrapped: true}
				if w.Resource == nil {
					x.heartbeat = true
				} else {
					c.decodeBody(t, w.Resource, &x)
				}
			} else {
				if expectTTL {
					m.fail("checkTTLFeature", "%s: a SotW resource without its Resource wrapper, though the client takes TTLs and there is one", c)
				}
				c.decodeBody(t, any, &x)
			}
			r.res = append(r.res, x)
		}
	case *discovery.DeltaDiscoveryResponse:
		r.key, r.nonce, r.version = msg.TypeUrl, msg.Nonce, msg.SystemVersionInfo
		t := typeOf(r.key)
		for _, e := range msg.ResourceErrors {
			if e.GetErrorDetail().GetCode() == int32(codes.PermissionDenied) {
				r.denied = true
			}
		}
		for _, d := range msg.Resources {
			x := nres{name: d.Name, version: d.Version, ttl: d.Ttl}
			switch {
			case d.Resource != nil:
				named := x.name
				c.decodeBody(t, d.Resource, &x)
				if x.name != named {
					m.fail("decode", "%s: delta resource named %q carries a body named %q", c, named, x.name)
				}
				x.version = d.Version
			case d.Version != "":
				x.heartbeat = true
			default:
				x.notExist = true
			}
			if expectTTL && !x.notExist && x.ttl.AsDuration() != m.ttl {
				m.fail("checkTTLFeature", "%s: resource %s carries TTL %v, want %s (the client announced TTL support)", c, x.name, x.ttl, m.ttl)
			}
			if !expectTTL && x.ttl != nil {
				m.fail("checkTTLFeature", "%s: resource %s carries a TTL the client did not ask for", c, x.name)
			}
			r.res = append(r.res, x)
		}
		r.removed = msg.RemovedResources
	case *mcp.Resources:
		r.key, r.nonce, r.version, r.incrFlag = msg.Collection, msg.Nonce, msg.SystemVersionInfo, msg.Incremental
		r.full = !msg.Incremental
		if msg.Incremental && !c.incr {
			m.fail("checkIncremental", "%s: an incremental response to a sink that did not ask for increments (mcp.proto: \"The source should only send incremental updates if the sink requested them\")", c)
		}
		for _, res := range msg.Resources {
			r.res = append(r.res, c.mcpResource(res))
		}
		r.removed = msg.RemovedResources
	case *mcp.MeshConfigResponse:
		r.key, r.nonce, r.version, r.full = msg.TypeUrl, msg.Nonce, msg.VersionInfo, true
		for _, res := range msg.Resources {
			r.res = append(r.res, c.mcpResource(res))
		}
	case *mcp.IncrementalMeshConfigResponse:
		r.key, r.nonce, r.version = c.fixed, msg.Nonce, msg.SystemVersionInfo
		for _, res := range msg.Resources {
			r.res = append(r.res, c.mcpResource(res))
		}
		r.removed = msg.RemovedResources
	default:
		m.fail("decode", "%s: unexpected message %T", c, a.Msg)
	}
	if c.fixed != "" && r.key != c.fixed {
		m.fail("checkSubscribed", "%s: a response for %q on a stream of %q", c, r.key, c.fixed)
	}
	return r
}

func (c *mclient) mcpResource(res *mcpapi.Resource) nres {
	x := nres{name: res.GetMetadata().GetName(), version: res.GetMetadata().GetVersion(), hasBody: true}
	x.body, x.btype = res.GetBody().GetValue(), res.GetBody().GetTypeUrl()
	return x
}

// decodeBody reads a resource's body Any: an MCP Resource (MCP collections over xDS) or an
// Envoy message, whose name is in its body and whose version the model finds by its bytes.
func (c *mclient) decodeBody(t mtype, any *anypb.Any, x *nres) {
	m := c.m
	m.t.Helper()
	x.hasBody = true
	if any.TypeUrl == mcpResourceType {
		var res mcpapi.Resource
		if err := any.UnmarshalTo(&res); err != nil {
			m.fail("decode", "%s: %v", c, err)
		}
		y := c.mcpResource(&res)
		if x.name != "" && x.name != y.name {
			m.fail("decode", "%s: resource %q carries a body named %q", c, x.name, y.name)
		}
		if x.version != "" && x.version != y.version {
			m.fail("decode", "%s: resource %s has version %q outside and %q inside", c, y.name, x.version, y.version)
		}
		x.name, x.version, x.body, x.btype = y.name, y.version, y.body, y.btype
		return
	}
	x.body, x.btype = any.Value, any.TypeUrl
	if any.TypeUrl != t.coll {
		m.fail("decode", "%s: a %s body in a %s response", c, any.TypeUrl, t.key)
	}
	msg, err := any.UnmarshalNew()
	if err != nil {
		m.fail("decode", "%s: %v", c, err)
	}
	name := ""
	switch b := msg.(type) {
	case *clusterv3.Cluster:
		name = b.Name
	case *endpointv3.ClusterLoadAssignment:
		name = b.ClusterName
	case *listenerv3.Listener:
		name = b.Name
	case *routev3.RouteConfiguration:
		name = b.Name
	default:
		m.fail("decode", "%s: unexpected body %T", c, msg)
	}
	if x.name != "" && x.name != name {
		m.fail("decode", "%s: resource %q carries a body named %q", c, x.name, name)
	}
	x.name = name
	if x.version == "" {
		if v, ok := m.w.versionOfBody(t.coll, name, any.Value); ok {
			x.version = v
		} else {
			m.fail("checkVersions", "%s: %s %s was sent with a body the world never wrote", c, shortType(t.key), name)
		}
	}
}

// ---- invariants, checked on every response ----

// checkOneUnacknowledged: at most one unacknowledged response per type per stream
// (CONTRACT.md section 6; xds-protocol.rst, ACK/NACK): a response of a type arrives only after
// the client answered the previous one of that type.
func (c *mclient) checkOneUnacknowledged(s *msub, r *nresp) {
	c.m.t.Helper()
	if s.pending != nil {
		c.m.fail("checkOneUnacknowledged", "%s: %s arrived while %s was still unanswered", c, r, s.pending)
	}
	if r.arr.Sent <= s.answeredIdx {
		c.m.fail("checkOneUnacknowledged", "%s: %s arrived before the client sent request #%d, which answers the previous response of the type (or starts it)", c, r, s.answeredIdx)
	}
}

// checkNoDuplicateNames: a response never holds the same name twice (xds-protocol.rst,
// "Duplicate Resource Names"; CONTRACT.md section 6), nor removes a name it also sends.
func (c *mclient) checkNoDuplicateNames(s *msub, r *nresp) {
	c.m.t.Helper()
	seen := map[string]bool{}
	for _, x := range r.res {
		if seen[x.name] {
			c.m.fail("checkNoDuplicateNames", "%s: %s names %s twice", c, r, x.name)
		}
		seen[x.name] = true
	}
	for _, n := range r.removed {
		if seen[n] {
			c.m.fail("checkNoDuplicateNames", "%s: %s names %s twice (sent or removed)", c, r, n)
		}
		seen[n] = true
	}
}

// checkVersions: every resource sent carries a non-empty version (CONTRACT.md section 6), one
// the world wrote for that name with that very body; a response is never older than what the
// stream was told before (architecture.md, split responses: "a part is never older than what
// the client was told meanwhile"); every response has a fresh non-empty nonce, and a
// state-of-the-world response a version (xds-protocol.rst, ACK/NACK).
func (c *mclient) checkVersions(s *msub, r *nresp) {
	m := c.m
	m.t.Helper()
	if r.nonce == "" || c.nonces[r.nonce] {
		m.fail("checkVersions", "%s: %s: the nonce is empty or was used before on this stream", c, r)
	}
	c.nonces[r.nonce] = true
	if r.version == "" && (c.kind.sotwXDS() || c.kind == kAMCSSotW) {
		m.fail("checkVersions", "%s: %s has no version_info", c, r)
	}
	for _, x := range r.res {
		if x.notExist {
			continue
		}
		if x.version == "" {
			m.fail("checkVersions", "%s: %s sends %s without a version", c, r, x.name)
		}
		if x.heartbeat {
			continue
		}
		h := m.w.version(s.t.coll, x.name, x.version)
		if h == nil || string(h.body) != string(x.body) || h.btype != x.btype {
			m.fail("checkVersions", "%s: %s sends %s@%s, which the world never wrote with that body", c, r, x.name, x.version)
		}
		if old, ok := s.eff[x.name]; ok {
			if o := m.w.version(s.t.coll, x.name, old); o != nil && o.ord > h.ord {
				m.fail("checkVersions", "%s: %s sends %s@%s, older than %s which the stream was told before", c, r, x.name, x.version, old)
			}
		}
	}
}

// checkInView: nothing outside the client's view is ever sent (CONTRACT.md section 8: "a
// consumer limited to namespaces sees only theirs, on every protocol"; the node's own
// narrowing; architecture.md "Views").
func (c *mclient) checkInView(s *msub, r *nresp) {
	c.m.t.Helper()
	for _, x := range r.res {
		if (x.hasBody || x.heartbeat) && !c.visible(s.t.coll, x.name) {
			c.m.fail("checkInView", "%s: %s sends %s, outside the client's view (narrowing %v)", c, r, x.name, c.narrow)
		}
	}
}

// checkSubscribed: what is sent was asked for, by wildcard (within the node's scope) or by
// name, at some moment of the response's window (xds-protocol.rst, "How the client specifies
// what resources to return"; a "does not exist" answers a name asked for by name).
func (c *mclient) checkSubscribed(s *msub, r *nresp) {
	c.m.t.Helper()
	from, to := s.answeredIdx, max(s.answeredIdx, r.arr.Sent-1)
	for _, x := range r.res {
		if !s.coveredSometime(x.name, from, to, x.notExist) {
			c.m.fail("checkSubscribed", "%s: %s sends %s, which the client did not ask for between requests #%d and #%d", c, r, x.name, from, to)
		}
	}
}

// checkRefusedTypeCarriesDenial: a type the consumer may not read is served empty, with a
// PermissionDenied resource error where the protocol has the field (xDS v3) (CONTRACT.md
// section 8; source.Options.Authz).
func (c *mclient) checkRefusedTypeCarriesDenial(s *msub, r *nresp) {
	c.m.t.Helper()
	if !c.m.policy.refused(s.t.coll) {
		return
	}
	for _, x := range r.res {
		if x.hasBody || x.heartbeat {
			c.m.fail("checkRefusedTypeCarriesDenial", "%s: %s of a refused type sends %s", c, r, x.name)
		}
	}
	if c.kind.xds() && !r.denied {
		c.m.fail("checkRefusedTypeCarriesDenial", "%s: %s answers a refused type without a PermissionDenied resource error", c, r)
	}
}

// checkNotExistIsTrue: "does not exist" is said only of a name that did not exist (or that
// the client may not see) at some moment the response could have been made
// (xds-protocol.rst, "Knowing When a Requested Resource Does Not Exist").
func (c *mclient) checkNotExistIsTrue(s *msub, r *nresp, lo, hi int64) {
	c.m.t.Helper()
	for _, x := range r.res {
		if x.notExist && c.visible(s.t.coll, x.name) && c.m.w.existsThroughout(s.t.coll, x.name, lo, hi) {
			c.m.fail("checkNotExistIsTrue", "%s: %s says %s does not exist; it existed all along", c, r, x.name)
		}
	}
}

// checkHeartbeat: a heartbeat (xds-protocol.rst, "TTL") goes only to a client that takes TTLs,
// names only what the client holds, at the version it holds, and nothing whose producer was
// away all the while (architecture.md, "TTLs and heartbeats": renewed only while the
// producer is connected; the translation's while no absent producer holds its inputs).
func (c *mclient) checkHeartbeat(s *msub, r *nresp, lo, hi int64) {
	m := c.m
	m.t.Helper()
	for _, x := range r.res {
		if !x.heartbeat {
			continue
		}
		if !(m.ttl > 0 && c.ttl && c.kind.xds()) {
			m.fail("checkHeartbeat", "%s: %s: a heartbeat to a client that does not take TTLs", c, r)
		}
		// Against what the client holds, for a name it asked for all along: one it stopped
		// asking for meanwhile (a request the server had not read yet) it ignores.
		from, to := s.answeredIdx, max(s.answeredIdx, r.arr.Sent-1)
		if held, ok := s.held[x.name]; s.coveredThroughout(x.name, from, to) && (!ok || held != x.version) {
			m.fail("checkHeartbeat", "%s: %s renews %s@%s; the client holds %q", c, r, x.name, x.version, s.held[x.name])
		}
		if owner := m.w.ownerOf(s.t.coll, x.name); m.w.deadThroughout(owner, lo, hi) {
			m.fail("checkHeartbeat", "%s: %s renews %s of %s, which was away all the while", c, r, x.name, owner)
		}
	}
	// Resending a resource the client holds, unchanged, with its body renews its TTL as well
	// (xds-protocol.rst, "TTL": "the management server resends the resource with a new TTL"):
	// in a diff, where nothing forces it, that too is a renewal, unless the client asked for
	// the name anew.
	if r.full || !(m.ttl > 0 && c.ttl && c.kind.xds()) {
		return
	}
	for _, x := range r.res {
		if !x.hasBody || s.held[x.name] != x.version {
			continue
		}
		if _, asked := s.obligations[x.name]; asked {
			continue
		}
		if s.mayAnswerAgain[x.name] {
			continue // used up after the checks of this response
		}
		if idx, asked := s.anew[x.name]; asked && r.arr.Sent > idx {
			continue // "*" subscribed anew: everything goes as in a first response
		}
		if owner := m.w.ownerOf(s.t.coll, x.name); m.w.deadThroughout(owner, lo, hi) {
			m.fail("checkResendRenewsOnlyLive", "%s: %s resends %s@%s, which the client holds, with its body and TTL: a renewal of a resource of %s, which was away all the while", c, r, x.name, x.version, owner)
		}
	}
}

// checkNackedNotResent: a NACKed version is not resent (CONTRACT.md section 6), unless the
// client asked for the name anew (xds-protocol.rst: newly requested names are sent): a
// diff never carries a refused name@version again, and a whole response is never the refused
// one again.
func (c *mclient) checkNackedNotResent(s *msub, r *nresp) {
	c.m.t.Helper()
	if r.heartbeatOnly() {
		return
	}
	if r.full {
		// After a change of the collection, the current state is sent as usual, even if it is
		// what the client refused before the change (something created and deleted since).
		if s.nackedSig != "" && contentSig(r) == s.nackedSig && !c.m.w.changedSince(s.t.coll, s.nackedSince) {
			c.m.fail("checkNackedNotResent", "%s: %s is the whole response the client refused, sent again", c, r)
		}
		return
	}
	for _, x := range r.res {
		if x.hasBody && s.nacked[x.name] == x.version {
			c.m.fail("checkNackedNotResent", "%s: %s resends %s@%s, which the client refused", c, r, x.name, x.version)
		}
	}
}

// checkStateOfTheWorldComplete: a whole response (SotW listeners and clusters, MCP full state,
// AMCS) holds every resource the client asked for that surely existed, visible to it, since the
// subscription started (xds-protocol.rst, "Grouping Resources into Responses": "the server
// must include the complete state of the world").
func (c *mclient) checkStateOfTheWorldComplete(s *msub, r *nresp) {
	m := c.m
	m.t.Helper()
	if !r.full || r.heartbeatOnly() {
		return
	}
	in := map[string]bool{}
	for _, x := range r.res {
		in[x.name] = true
	}
	from, to := s.answeredIdx, max(s.answeredIdx, r.arr.Sent-1)
	for _, n := range m.poolOf(s.t.coll) {
		if !in[n] && s.coveredThroughout(n, from, to) && c.visible(s.t.coll, n) &&
			m.w.existsThroughout(s.t.coll, n, c.sendAt[s.firstIdx], r.arr.At) {
			m.fail("checkStateOfTheWorldComplete", "%s: %s leaves out %s, which the client asked for and which existed all along", c, r, n)
		}
	}
}

// checkMakeBeforeBreak, on one aggregated stream (xds-protocol.rst, "Eventual consistency
// considerations"; architecture.md, "Dependencies are data"):
//   - nothing the client is sent names a cluster it does not hold or has not been sent on
//     this stream (clusters first; endpoints after their clusters; listeners and routes after
//     the clusters they name);
//   - no cluster is removed while a listener or route the client holds (told on this stream,
//     or kept from before a reconnect and declared in initial_resource_versions) still names
//     it.
//
// Both apply to the clusters the stream's cluster subscription asks for and the client may
// see, and only to types subscribed on the stream when the response's window began (counting
// requests sent in the same batch).
func (c *mclient) checkMakeBeforeBreak(s *msub, r *nresp, lo, hi int64) {
	m := c.m
	m.t.Helper()
	bs := c.batchEnd[s.answeredIdx]
	end := max(bs, r.arr.Sent-1)
	cds := c.subs[typeCluster]
	switch s.t.key {
	case typeEndpoint, typeListener, typeRoute:
		if cds == nil || m.policy.refused(typeCluster) {
			return
		}
		for _, x := range r.res {
			if !x.hasBody {
				continue
			}
			for _, cl := range m.w.version(s.t.coll, x.name, x.version).refs {
				if !cds.coveredThroughout(cl, bs, end) || !c.visible(typeCluster, cl) {
					continue
				}
				_, held := cds.held[cl]
				_, told := cds.eff[cl]
				if !held && !told {
					m.fail("checkMakeBeforeBreak", "%s: %s sends %s@%s, which names cluster %s before the client holds or was sent it", c, r, x.name, x.version, cl)
				}
			}
		}
	case typeCluster:
		before := maps.Clone(s.eff)
		maps.Copy(before, s.held)
		for _, cl := range removals(before, r, s.coversNow) {
			for _, key := range []string{typeListener, typeRoute} {
				ts := c.subs[key]
				if ts == nil || !ts.active || ts.firstIdx > bs {
					continue
				}
				for name, ver := range ts.eff {
					if ts.t.partial && !ts.delta && (!m.w.existsThroughout(key, name, lo, hi) || m.w.deletedSince(key, name, ver)) {
						// SotW cannot remove it: the client may keep it, unused (also a copy
						// from before a deletion, when the name came back since).
						continue
					}
					if slices.Contains(m.w.version(key, name, ver).refs, cl) {
						check, how := "checkMakeBeforeBreak", "told on this stream"
						if v, declared := ts.declared[name]; declared && v == ver {
							// Kept from before the reconnect: the client said so in
							// initial_resource_versions, and was told nothing newer since.
							check, how = "checkMakeBeforeBreakOnResume", "kept from before the reconnect, declared in initial_resource_versions"
						}
						m.fail(check, "%s: %s removes cluster %s while %s %s@%s, which the client holds (%s), still names it",
							c, r, cl, shortType(key), name, ver, how)
					}
				}
			}
		}
	}
}

// poolOf is every name a client might ask for in a collection.
func (m *model) poolOf(coll string) []string {
	switch coll {
	case typeCluster, typeEndpoint, typeListener, typeRoute:
		return envoyNames(coll)
	case collSE:
		var out []string
		for _, p := range m.w.producers {
			out = append(out, p.names...)
		}
		return append(out, "n0/ghost")
	}
	return []string{"n0/nothing", "nothing"}
}

// ---- the status view ----

// checkStatus: the engine's status view (what CSDS serves) agrees with the clients: a resource
// reported SYNCED is held by its client, and the version given is that of a response the
// client ACKed of that type on that stream. final: after convergence, everything a client asked
// for that exists is SYNCED.
func (m *model) checkStatus(final bool) {
	m.t.Helper()
	byNode := map[string]*mclient{}
	for _, c := range m.clients {
		if c.connected() {
			byNode[c.node] = c
		}
	}
	seen := map[*mclient]map[string]map[string]source.ResourceStatus{}
	for _, cs := range m.eng.Status(source.StatusOptions{Resources: true}) {
		c := byNode[cs.Node]
		if c == nil {
			continue // a stream that ended, or is ending
		}
		if seen[c] == nil {
			seen[c] = map[string]map[string]source.ResourceStatus{}
		}
		for _, ts := range cs.Types {
			s := c.subs[ts.Type]
			if s == nil || !s.active {
				m.fail("checkStatus", "%s: status reports type %s, which the client has not subscribed to", c, ts.Type)
			}
			seen[c][ts.Type] = map[string]source.ResourceStatus{}
			for _, rs := range ts.Resources {
				seen[c][ts.Type][rs.Name] = rs
				if rs.State != source.StateSynced || rs.Missing {
					continue
				}
				if _, held := s.held[rs.Name]; !held && !has(s.dropped, rs.Name) {
					m.fail("checkStatus", "%s: status says %s %s is SYNCED at %s; the client does not hold it", c, shortType(ts.Type), rs.Name, rs.Version)
				}
				if !s.ackedVersions[rs.Version] {
					m.fail("checkStatus", "%s: status says %s %s is SYNCED at %s; the client ACKed no response of that version on this stream (ACKed %v)",
						c, shortType(ts.Type), rs.Name, rs.Version, slices.Sorted(maps.Keys(s.ackedVersions)))
				}
			}
		}
	}
	if !final {
		return
	}
	for _, c := range m.clients {
		for _, key := range c.keys {
			s := c.subs[key]
			for name := range m.expected(c, s) {
				rs, ok := seen[c][key][name]
				if !ok || rs.State != source.StateSynced {
					m.fail("checkStatus", "%s: after convergence, status reports %s %s as %v (listed: %v), want SYNCED", c, shortType(key), name, rs.State, ok)
				}
			}
		}
	}
}

// ---- convergence ----

// checkSubscribedNamesSent: once every response is answered and the server is quiet, every
// name a delta client subscribed to has been answered, with the resource or "does not exist"
// (xds-protocol.rst, "Subscribing to Resources": a name subscribed after the first request is
// sent even if the client said it held that version, "the server *must* still provide those
// resources"; "Knowing When a Requested Resource Does Not Exist").
func (m *model) checkSubscribedNamesSent() {
	m.t.Helper()
	for _, c := range m.clients {
		for _, key := range c.keys {
			s := c.subs[key]
			for _, n := range slices.Sorted(maps.Keys(s.obligations)) {
				m.fail("checkSubscribedNameSent", "%s: %s %s, subscribed by request #%d, was never sent, and the server is quiet", c, shortType(key), n, s.obligations[n])
			}
		}
	}
}

// expected is what a client should hold of a type once everything is acknowledged: what the
// store holds that it asked for and may see.
func (m *model) expected(c *mclient, s *msub) map[string]string {
	out := map[string]string{}
	for name, ver := range m.w.cur[s.t.coll] {
		if s.coversNow(name) && c.visible(s.t.coll, name) {
			out[name] = ver
		}
	}
	return out
}

// checkConverged: every client holds exactly what the store holds for its subscription and
// view (CONTRACT.md section 6: "A change in the store reaches every subscribed stream"), allowing
// only what the protocol cannot take away (a removal the client refused; SotW endpoints or
// route configurations that no longer exist); every subscription had its first response; every
// name a delta client subscribed to was answered.
func (m *model) checkConverged() {
	m.t.Helper()
	for _, c := range m.clients {
		for _, key := range c.keys {
			s := c.subs[key]
			if !s.active {
				m.fail("checkConverged", "%s: %s not subscribed at the end", c, key)
			}
			if s.responses == 0 {
				m.fail("checkConverged", "%s: %s never had its first response (CONTRACT.md section 6: sent even when empty)", c, shortType(key))
			}
			if s.pending != nil {
				m.fail("checkConverged", "%s: %s still pending", c, s.pending)
			}
			want := m.expected(c, s)
			for n, v := range want {
				if s.held[n] != v {
					m.fail("checkConverged", "%s: holds %s %s at %q; the store has %s (client holds %v)", c, shortType(key), n, s.held[n], v, s.held)
				}
			}
			for n, v := range s.held {
				if _, ok := want[n]; ok {
					continue
				}
				stale := s.nackedRemovals[n] || (s.t.partial && c.kind.sotwXDS() && m.w.cur[s.t.coll][n] == "")
				if !stale {
					m.fail("checkConverged", "%s: holds %s %s@%s, which it should not (store has %q; visible %v)", c, shortType(key), n, v, m.w.cur[s.t.coll][n], c.visible(s.t.coll, n))
				}
			}
		}
	}
}

func has[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }
