package source_test

// Deterministic reproductions, over sockets, of engine bugs the model is meant to find:
// each follows the protocol step by step and asserts what xds-protocol.rst requires.

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
)

// reproServer is a bridge over sockets with the model's world, and no authz, TTL or split.
func reproServer(t *testing.T) (*world, *socketTransport) {
	return reproServerWith(t, source.Options{})
}

func reproServerWith(t *testing.T, opts source.Options) (*world, *socketTransport) {
	t.Helper()
	clock := &modelClock{}
	st := store.New(store.Options{Validate: kinds.ValidateResource, Logger: discardLogger()})
	opts.Store, opts.Logger, opts.NamespaceOf = st, discardLogger(), modelNamespaceOf()
	opts.Derived = map[string][]string{ownerTranslate: envoy.InputCollections()}
	eng := source.New(opts)
	tr := newSocketTransport(t, modelServer{Store: st, Engine: eng, Clock: clock,
		Sink: sink.Options{Store: st, Collections: []sink.Collection{{Name: collSE, Incremental: true}}, Logger: discardLogger()}}).(*socketTransport)
	t.Cleanup(tr.Close)
	return newWorld(clock, st), tr
}

// deltaHolder is a delta ADS client's view: per type, name → version; and every response in
// order of arrival.
type deltaHolder struct {
	t    *testing.T
	st   modelStream
	held map[string]map[string]string
	seen []*discovery.DeltaDiscoveryResponse
}

func newDeltaHolder(t *testing.T, tr *socketTransport) *deltaHolder {
	st, err := tr.Open(methodADSDelta, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &deltaHolder{t: t, st: st, held: map[string]map[string]string{}}
}

func (h *deltaHolder) send(reqs ...proto.Message) {
	h.t.Helper()
	if err := h.st.Send(reqs...); err != nil {
		h.t.Fatal(err)
	}
}

// take waits for the server to be quiet and returns what came.
func (h *deltaHolder) take(tr *socketTransport) []*discovery.DeltaDiscoveryResponse {
	h.t.Helper()
	tr.Settle()
	if err := h.st.Err(); err != nil {
		h.t.Fatalf("stream ended: %v", err)
	}
	var out []*discovery.DeltaDiscoveryResponse
	for _, a := range h.st.Take() {
		m := a.Msg.(*discovery.DeltaDiscoveryResponse)
		out = append(out, m)
		h.seen = append(h.seen, m)
	}
	return out
}

func (h *deltaHolder) apply(m *discovery.DeltaDiscoveryResponse) {
	if h.held[m.TypeUrl] == nil {
		h.held[m.TypeUrl] = map[string]string{}
	}
	for _, r := range m.Resources {
		if r.Resource == nil {
			delete(h.held[m.TypeUrl], r.Name)
			continue
		}
		h.held[m.TypeUrl][r.Name] = r.Version
	}
	for _, n := range m.RemovedResources {
		delete(h.held[m.TypeUrl], n)
	}
}

func ack(m *discovery.DeltaDiscoveryResponse) *discovery.DeltaDiscoveryRequest {
	return &discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce}
}

// settleAll applies and ACKs every response until the server is quiet.
func (h *deltaHolder) settleAll(tr *socketTransport) {
	h.t.Helper()
	for range 50 {
		got := h.take(tr)
		if len(got) == 0 {
			return
		}
		for _, m := range got {
			h.apply(m)
			h.send(ack(m))
		}
	}
	h.t.Fatal("the server never went quiet")
}

func describeDelta(m *discovery.DeltaDiscoveryResponse) string {
	var parts []string
	for _, r := range m.Resources {
		if r.Resource == nil {
			parts = append(parts, "∄"+r.Name)
		} else {
			parts = append(parts, r.Name+"@"+r.Version)
		}
	}
	for _, n := range m.RemovedResources {
		parts = append(parts, "-"+n)
	}
	return shortType(m.TypeUrl) + " nonce " + m.Nonce + " [" + strings.Join(parts, " ") + "]"
}

// routeClusters decodes a route configuration and returns the clusters its routes name.
func routeClusters(t *testing.T, r *discovery.Resource) []string {
	t.Helper()
	var rc routev3.RouteConfiguration
	if err := r.Resource.UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, vh := range rc.VirtualHosts {
		for _, route := range vh.Routes {
			out = append(out, route.GetRoute().GetCluster())
		}
	}
	return out
}

// TestDeltaResumeKeepsMakeBeforeBreak: a delta ADS client holds route configuration "80",
// whose route for host x goes to cluster Y, cluster Y, and listener 0.0.0.0_80 (learned and
// ACKed on a first stream), and goes away. Meanwhile the route moves to cluster Z and Y is
// deleted, in one store write. The client comes back and resumes CDS and LDS (wildcard) and
// RDS ("80") with initial_resource_versions, sending the three requests before it reads, then
// ACKs each response as it arrives. No response may remove Y before the client has been sent
// the route update that stops naming Y: the client holds the route from before (it said so in
// initial_resource_versions), and removing the cluster first blackholes its traffic
// (xds-protocol.rst, "Eventual consistency considerations": make before break).
func TestDeltaResumeKeepsMakeBeforeBreak(t *testing.T) {
	w, tr := reproServer(t)
	x, y, z := modelHosts[0], modelHosts[2], modelHosts[3]
	if err := w.writeEnvoy(envoyState{
		clusters:  map[string]bool{y: true},
		routes:    map[string]map[string]string{portRoute: {x: y}},
		listeners: map[string]bool{portListener: true},
	}); err != nil {
		t.Fatal(err)
	}

	first := newDeltaHolder(t, tr)
	first.send(
		&discovery.DeltaDiscoveryRequest{Node: nodeOf("resume-a"), TypeUrl: typeCluster},
		&discovery.DeltaDiscoveryRequest{TypeUrl: typeListener},
		&discovery.DeltaDiscoveryRequest{TypeUrl: typeRoute, ResourceNamesSubscribe: []string{portRoute}},
	)
	first.settleAll(tr)
	held := first.held
	if held[typeCluster][clusterOf(y)] == "" || held[typeRoute][portRoute] == "" || held[typeListener][portListener] == "" {
		t.Fatalf("the first stream did not deliver Y, route 80 and listener 0.0.0.0_80: %v", held)
	}
	first.st.Close()

	// While the client is away: route 80 moves x from Y to Z, and Y goes; one write.
	if err := w.writeEnvoy(envoyState{
		clusters:  map[string]bool{z: true},
		routes:    map[string]map[string]string{portRoute: {x: z}},
		listeners: map[string]bool{portListener: true},
	}); err != nil {
		t.Fatal(err)
	}

	again := newDeltaHolder(t, tr)
	again.held = held
	again.send(
		&discovery.DeltaDiscoveryRequest{Node: nodeOf("resume-a"), TypeUrl: typeCluster, InitialResourceVersions: maps.Clone(held[typeCluster])},
		&discovery.DeltaDiscoveryRequest{TypeUrl: typeListener, InitialResourceVersions: maps.Clone(held[typeListener])},
		&discovery.DeltaDiscoveryRequest{TypeUrl: typeRoute, ResourceNamesSubscribe: []string{portRoute}, InitialResourceVersions: map[string]string{portRoute: held[typeRoute][portRoute]}},
	)
	routeNamesY := true // the route the client holds (declared at resume) names Y
	var log []string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got := again.take(tr)
		if len(got) == 0 && !routeNamesY {
			break
		}
		for _, m := range got {
			log = append(log, describeDelta(m))
			switch m.TypeUrl {
			case typeRoute:
				for _, r := range m.Resources {
					if r.Name == portRoute && r.Resource != nil {
						routeNamesY = slices.Contains(routeClusters(t, r), clusterOf(y))
					}
				}
			case typeCluster:
				removed := slices.Contains(m.RemovedResources, clusterOf(y))
				for _, r := range m.Resources {
					removed = removed || (r.Name == clusterOf(y) && r.Resource == nil)
				}
				if removed && routeNamesY {
					t.Fatalf("a CDS response removes cluster Y (%s) while route configuration 80, which the client holds "+
						"(declared in initial_resource_versions at %s), still names it: the route update moving x to Z has not been sent.\n"+
						"responses since the resume, in order:\n  %s", clusterOf(y), held[typeRoute][portRoute], joinLines(log))
				}
			}
			again.apply(m)
			again.send(ack(m))
		}
	}
	if routeNamesY {
		t.Fatalf("the route update moving x to Z never came; responses: %v", log)
	}
}

// TestDeltaNameResubscribedBeforeResumedFirstResponseIsSent: a delta ADS client resumes CDS
// with initial versions and holds its ACK; a store change makes EDS's first response wait for
// CDS. On EDS the client subscribes X with initial version V (X's current version), then
// unsubscribes X, then subscribes X again: it has dropped X meanwhile, and a name subscribed
// after the first request must be sent even if the server believes the client has it
// (xds-protocol.rst, "Subscribing to Resources": the server *must* still provide it). Once the
// client ACKs CDS (and everything after), X's endpoints must arrive.
func TestDeltaNameResubscribedBeforeResumedFirstResponseIsSent(t *testing.T) {
	w, tr := reproServer(t)
	a, x, b := modelHosts[0], modelHosts[2], modelHosts[3]
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{a: true, x: true}}); err != nil {
		t.Fatal(err)
	}

	first := newDeltaHolder(t, tr)
	first.send(
		&discovery.DeltaDiscoveryRequest{Node: nodeOf("resume-b"), TypeUrl: typeCluster},
		&discovery.DeltaDiscoveryRequest{TypeUrl: typeEndpoint, ResourceNamesSubscribe: []string{clusterOf(x)}},
	)
	first.settleAll(tr)
	held := first.held
	v := held[typeEndpoint][clusterOf(x)]
	if v == "" || v != w.cur[typeEndpoint][clusterOf(x)] {
		t.Fatalf("the first stream did not deliver X's endpoints at their current version: %v", held)
	}
	first.st.Close()

	again := newDeltaHolder(t, tr)
	again.held = held
	again.send(&discovery.DeltaDiscoveryRequest{Node: nodeOf("resume-b"), TypeUrl: typeCluster, InitialResourceVersions: maps.Clone(held[typeCluster])})
	cds := again.take(tr)
	if len(cds) != 1 || cds[0].TypeUrl != typeCluster {
		t.Fatalf("want the first CDS response of the resumed stream, got %d responses", len(cds))
	}
	// Its ACK is held. A new cluster (and its endpoints) come: CDS owes it, and EDS's first
	// response, at the new revision, has to wait for CDS.
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{a: true, x: true, b: true}}); err != nil {
		t.Fatal(err)
	}
	tr.Settle()
	eds := func(sub, unsub []string, initial map[string]string) {
		again.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeEndpoint, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub, InitialResourceVersions: initial})
		for _, m := range again.take(tr) {
			t.Logf("while CDS is unacknowledged: %s", describeDelta(m))
			again.apply(m)
			again.send(ack(m))
		}
	}
	eds([]string{clusterOf(x)}, nil, map[string]string{clusterOf(x): v})
	eds(nil, []string{clusterOf(x)}, nil) // the client drops X
	delete(again.held[typeEndpoint], clusterOf(x))
	eds([]string{clusterOf(x)}, nil, nil) // and asks for it again

	again.send(ack(cds[0]))
	var log []string
	for range 20 {
		got := again.take(tr)
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			log = append(log, describeDelta(m))
			again.apply(m)
			again.send(ack(m))
		}
	}
	if again.held[typeEndpoint][clusterOf(x)] == "" {
		t.Fatalf("X's endpoints (%s), subscribed again after the client dropped them, never arrived.\n"+
			"responses after the CDS ACK, in order:\n  %s\nthe client holds: %v", clusterOf(x), joinLines(log), again.held)
	}
}

func nodeOf(id string) *corev3.Node { return &corev3.Node{Id: id} }

func joinLines(lines []string) string { return strings.Join(lines, "\n  ") }

// TestModelFoundRefusedSplitPartResent reproduces what the random model found
// (checkNackedNotResent; see the report of the model's runs): a delta response split in parts
// (Options.MaxResponseSize) whose later part was read again from the current view carried a
// newer version than the response's revision; the client NACKed that part; the next response,
// the diff from the subscription's revision, carried the refused version again. CONTRACT.md
// section 6: "A NACK is recorded ... and the same version is not resent". A part now leaves
// out what changed since the split (its new version goes in the next response, a change); the
// test refuses whatever carries b's new version and checks it never comes again.
func TestModelFoundRefusedSplitPartResent(t *testing.T) {
	w, tr := reproServerWith(t, source.Options{MaxResponseSize: 150}) // one load assignment per part
	a, b := modelHosts[0], modelHosts[2]
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{a: true, b: true}}); err != nil {
		t.Fatal(err)
	}
	c := newDeltaHolder(t, tr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeOf("split"), TypeUrl: typeEndpoint,
		ResourceNamesSubscribe: []string{clusterOf(a), clusterOf(b)}})
	part1 := c.take(tr)
	if len(part1) != 1 {
		t.Fatalf("want the first part, got %d responses", len(part1))
	}
	// b changes while the second part waits for the first one's ACK.
	next := w.env.clone()
	next.touched[typeEndpoint] = map[string]bool{clusterOf(b): true}
	if err := w.writeEnvoy(next); err != nil {
		t.Fatal(err)
	}
	tr.Settle()
	c.send(ack(part1[0]))
	refused := w.cur[typeEndpoint][clusterOf(b)]
	var log []string
	nacked := false
	for range 6 {
		for _, m := range c.take(tr) {
			log = append(log, describeDelta(m))
			carries := false
			for _, r := range m.Resources {
				if r.Name == clusterOf(b) && r.Version == refused && r.Resource != nil {
					if nacked {
						t.Fatalf("%s@%s, refused by the client, was sent again; responses since the split:\n  %s", clusterOf(b), refused, joinLines(log))
					}
					carries = true
				}
			}
			if carries {
				nacked = true
				c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeEndpoint, ResponseNonce: m.Nonce, ErrorDetail: errDetail("refused by the test")})
				continue
			}
			c.send(ack(m))
		}
	}
	if !nacked {
		t.Fatalf("%s@%s was never sent; responses since the split:\n  %s", clusterOf(b), refused, joinLines(log))
	}
}

func descr(ms []*discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, m := range ms {
		out = append(out, describeDelta(m)+" version "+m.SystemVersionInfo)
	}
	return out
}

// TestModelFoundSplitPartLeavesDeletedRouteOut reproduces what the random model found
// (checkMakeBeforeBreak): route configuration 80 changes and rb moves from cluster y to x,
// and y goes, in one write; the RDS response is split (Options.MaxResponseSize), and while its
// first part is unacknowledged rb is deleted. The second part, read again from the current
// view, leaves rb out (deleted since) without removing it, and RDS then counts as caught up:
// the removal of y goes while the client still holds rb's old version, which names y
// (xds-protocol.rst, "Eventual consistency considerations": make before break).
func TestModelFoundSplitPartLeavesDeletedRouteOut(t *testing.T) {
	w, tr := reproServerWith(t, source.Options{MaxResponseSize: 200}) // one route configuration per part
	x, y := modelHosts[0], modelHosts[2]
	rb := hostRouteOf(x)
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{x: true, y: true},
		routes: map[string]map[string]string{portRoute: {x: x}, rb: {x: y}}}); err != nil {
		t.Fatal(err)
	}
	c := newDeltaHolder(t, tr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeOf("split-deleted"), TypeUrl: typeCluster},
		&discovery.DeltaDiscoveryRequest{TypeUrl: typeRoute, ResourceNamesSubscribe: []string{portRoute, rb}})
	c.settleAll(tr)
	if c.held[typeRoute][rb] == "" || c.held[typeCluster][clusterOf(y)] == "" {
		t.Fatalf("the client does not hold %s and cluster y: %v", rb, c.held)
	}
	// One write: 80 changes, rb moves from y to x, y goes.
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{x: true},
		routes: map[string]map[string]string{portRoute: {x: x, y: x}, rb: {x: x}}}); err != nil {
		t.Fatal(err)
	}
	var part1 *discovery.DeltaDiscoveryResponse
	var log []string
	for _, m := range c.take(tr) {
		log = append(log, describeDelta(m))
		c.apply(m)
		if m.TypeUrl == typeRoute && part1 == nil {
			part1 = m // its ACK held
			continue
		}
		c.send(ack(m))
	}
	if part1 == nil {
		t.Fatalf("no RDS response after the move: %v", log)
	}
	for _, m := range c.take(tr) {
		log = append(log, describeDelta(m))
		c.apply(m)
		c.send(ack(m))
	}
	// rb goes while the second part waits.
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{x: true},
		routes: map[string]map[string]string{portRoute: {x: x, y: x}}}); err != nil {
		t.Fatal(err)
	}
	tr.Settle()
	c.send(ack(part1))
	for range 6 {
		for _, m := range c.take(tr) {
			log = append(log, describeDelta(m))
			if m.TypeUrl == typeCluster && slices.Contains(m.RemovedResources, clusterOf(y)) {
				if v, ok := c.held[typeRoute][rb]; ok {
					t.Fatalf("a CDS response removes cluster y (%s) while the client holds %s@%s, which names it, and was "+
						"neither updated nor removed; responses since the move, in order:\n  %s", clusterOf(y), rb, v, joinLines(log))
				}
			}
			c.apply(m)
			c.send(ack(m))
		}
	}
}

// TestModelFoundSharedSplitPartLosesResource reproduces what the random model found
// (checkStatus, then checkMakeBeforeBreak and convergence): two delta clients subscribe to
// every cluster with "*", and the response (three clusters) is split in parts
// (Options.MaxResponseSize). One client takes "*" back in its ACK of the first part, so its
// next and last part is empty. The other client's last part, which should carry the third
// cluster, comes out empty too, as if the first client's encoding were shared with it: it
// never receives the cluster (and the status view reports it SYNCED).
func TestModelFoundSharedSplitPartLosesResource(t *testing.T) {
	w, tr := reproServerWith(t, source.Options{MaxResponseSize: 251}) // one cluster per part
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{modelHosts[0]: true, modelHosts[2]: true, modelHosts[4]: true}}); err != nil {
		t.Fatal(err)
	}
	c1, c2 := newDeltaHolder(t, tr), newDeltaHolder(t, tr)
	c1.send(&discovery.DeltaDiscoveryRequest{Node: nodeOf("c1"), TypeUrl: typeCluster, ResourceNamesSubscribe: []string{"*"}})
	c2.send(&discovery.DeltaDiscoveryRequest{Node: nodeOf("c2"), TypeUrl: typeCluster, ResourceNamesSubscribe: []string{"*"}})
	tr.Settle()
	first1, first2 := c1.take(tr), c2.take(tr)
	if len(first1) != 1 || len(first2) != 1 {
		t.Fatalf("want one first part each: %v, %v", descr(first1), descr(first2))
	}
	c1.apply(first1[0])
	c2.apply(first2[0])
	// c1 takes "*" back as it ACKs its first part: it wants nothing more.
	c1.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeCluster, ResponseNonce: first1[0].Nonce, ResourceNamesUnsubscribe: []string{"*"}})
	log := []string{"c1: " + describeDelta(first1[0]), "c2: " + describeDelta(first2[0])}
	for _, m := range c1.take(tr) {
		log = append(log, "c1: "+describeDelta(m))
		c1.send(ack(m))
	}
	c2.send(ack(first2[0]))
	for range 4 {
		for _, m := range c2.take(tr) {
			log = append(log, "c2: "+describeDelta(m))
			c2.apply(m)
			c2.send(ack(m))
		}
	}
	for _, h := range []string{modelHosts[0], modelHosts[2], modelHosts[4]} {
		if c2.held[typeCluster][clusterOf(h)] == "" {
			t.Fatalf("c2 never received cluster %s, though it asked for every cluster; responses, in order:\n  %s", clusterOf(h), joinLines(log))
		}
	}
}

// TestModelFoundNameAskedAnewAfterALaterPartCarriedItIsSent reproduces what the random model
// found (checkSubscribedNameSent): a delta client asks for two clusters by name, and the
// response goes in parts (Options.MaxResponseSize). In its ACK of the first part it subscribes
// to "*", so everything is owed again, and the second part carries y: the client holds y as of
// that part, and the response that owes everything left y out. Before that response went, the
// client unsubscribed y and subscribed to it again: a name asked anew, which must be sent
// (the client may have dropped it), but the part's record still left it out, and the client
// never got y back.
func TestModelFoundNameAskedAnewAfterALaterPartCarriedItIsSent(t *testing.T) {
	tr, c, part2, y := wildcardEnteredDuringParts(t, "asked-anew")
	// y is taken back, and asked for again, before the second part is answered.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeCluster, ResourceNamesUnsubscribe: []string{y}})
	delete(c.held[typeCluster], y)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeCluster, ResourceNamesSubscribe: []string{y}})
	c.send(ack(part2))
	c.settleAll(tr)
	if _, ok := c.held[typeCluster][y]; !ok {
		t.Fatalf("%s, asked for anew, was never sent again; responses:\n  %s", y, joinLines(descr(c.seen)))
	}
}

// TestWildcardLeftAndEnteredAgainSendsWhatALaterPartCarried: as in
// TestModelFoundNameAskedAnewAfterALaterPartCarriedItIsSent (a review found this way to it),
// the second part carries y while everything is owed (the client entered "*" in its ACK of the
// first). The client then drops y by name and leaves the wildcard (it no longer asks for y at
// all, and drops it), and enters the wildcard again before answering the part: y is owed
// with everything, and must be sent, though the part's record said the client held it.
func TestWildcardLeftAndEnteredAgainSendsWhatALaterPartCarried(t *testing.T) {
	tr, c, part2, y := wildcardEnteredDuringParts(t, "wildcard-again")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeCluster, ResourceNamesUnsubscribe: []string{y}})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeCluster, ResourceNamesUnsubscribe: []string{"*"}})
	delete(c.held[typeCluster], y)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeCluster, ResourceNamesSubscribe: []string{"*"}})
	c.send(ack(part2))
	c.settleAll(tr)
	if _, ok := c.held[typeCluster][y]; !ok {
		t.Fatalf("%s, covered anew by the wildcard, was never sent again; responses:\n  %s", y, joinLines(descr(c.seen)))
	}
}

// wildcardEnteredDuringParts: a delta client asks for two clusters, x and y, by name; the
// response goes in parts (Options.MaxResponseSize: one cluster a part), and the client enters
// "*" in its ACK of the first, so everything is owed again while the second part, carrying y,
// goes. It returns the client, holding both parts, the second unanswered, and y.
func wildcardEnteredDuringParts(t *testing.T, node string) (*socketTransport, *deltaHolder, *discovery.DeltaDiscoveryResponse, string) {
	t.Helper()
	w, tr := reproServerWith(t, source.Options{MaxResponseSize: 150})
	x, y := clusterOf(modelHosts[0]), clusterOf(modelHosts[2])
	if err := w.writeEnvoy(envoyState{clusters: map[string]bool{modelHosts[0]: true, modelHosts[2]: true}}); err != nil {
		t.Fatal(err)
	}
	c := newDeltaHolder(t, tr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: nodeOf(node), TypeUrl: typeCluster, ResourceNamesSubscribe: []string{x, y}})
	part1 := c.take(tr)
	if len(part1) != 1 || len(part1[0].Resources) != 1 || part1[0].Resources[0].Name != x {
		t.Fatalf("want the first part, with %s alone: %v", x, descr(part1))
	}
	c.apply(part1[0])
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeCluster, ResponseNonce: part1[0].Nonce, ResourceNamesSubscribe: []string{"*"}})
	part2 := c.take(tr)
	if len(part2) != 1 || len(part2[0].Resources) != 1 || part2[0].Resources[0].Name != y {
		t.Fatalf("want the second part, with %s alone: %v", y, descr(part2))
	}
	c.apply(part2[0])
	return tr, c, part2[0], y
}
