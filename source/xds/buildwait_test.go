package xds

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/mcpbridge/mcpbridge/source"
)

// shortBuildWaits shortens the bounds of waitBuilt for a test.
func shortBuildWaits(t *testing.T, wait, max time.Duration) {
	t.Helper()
	was, wasMax := scopeBuildWait, scopeBuildWaitMax
	scopeBuildWait, scopeBuildWaitMax = wait, max
	t.Cleanup(func() { scopeBuildWait, scopeBuildWaitMax = was, wasMax })
}

// slowViews builds a port's route configuration (and, with scope set, a namespace's view)
// only when the test says so, while it says a translation runs.
type slowViews struct {
	countingViews
	built       chan struct{}
	scope       chan struct{}
	host        chan struct{} // a host's proxyless outputs
	translating atomic.Bool
}

func (v *slowViews) AcquireProxylessHost(host string) (func(), <-chan struct{}) {
	release, _ := v.countingViews.AcquireProxylessHost(host)
	return release, v.host
}

func (v *slowViews) AcquirePortRoute(port uint32) (func(), <-chan struct{}) {
	release, _ := v.countingViews.AcquirePortRoute(port)
	return release, v.built
}
func (v *slowViews) AcquireScope(ns string) (func(), <-chan struct{}, bool) {
	release, _, ok := v.countingViews.AcquireScope(ns)
	return release, v.scope, ok
}
func (v *slowViews) TranslationProgress() (bool, uint64) { return v.translating.Load(), 0 }

// sidecar is the node of a sidecar of namespace ns (its view is the namespace's).
func sidecar() *core.Node { return &core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"} }

// responseTypes receives for d and returns the types of the responses that came, ACKing each.
func responseTypes(c *deltaClient, d time.Duration) []string {
	var types []string
	deadline := time.After(d)
	for {
		select {
		case <-deadline:
			return types
		case m := <-c.Responses():
			types = append(types, m.TypeUrl)
			c.ack(m)
		}
	}
}

// startSlowServer starts a server whose streams hold views of views, which say a translation
// runs, with waits of 20 ms up to 10 s.
func startSlowServer(t *testing.T, views *slowViews) *server {
	t.Helper()
	shortBuildWaits(t, 20*time.Millisecond, 10*time.Second)
	views.translating.Store(true)
	return startServerOf(t, source.Options{Logger: testLogger(t)}, Server{Views: views})
}

// heldBackUntil checks that c is sent nothing while release is open, then closes it and
// checks that the responses that come are of the types want (in any order).
func heldBackUntil(t *testing.T, c *deltaClient, release chan struct{}, want ...string) {
	t.Helper()
	if got := responseTypes(c, 300*time.Millisecond); len(got) != 0 {
		t.Fatalf("while held back, the responses were %v, want none", got)
	}
	close(release)
	got := responseTypes(c, 300*time.Millisecond)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("once released, the responses were %v, want %v", got, want)
	}
}

// A request for a port's route configuration that takes longer to build than ScopeBuildWait
// (4–5 s at a million hosts) is answered once it is built, while the translation runs:
// answered before it, the client would be told that the route does not exist. The stream's
// other types go on meanwhile: the listeners asked for after it are sent before it is built
// (an Envoy's clusters and endpoints, still arriving, do not wait for its routes).
func TestARequestWaitsForWhatItHoldsWhileOtherTypesGoOn(t *testing.T) {
	views := &slowViews{built: make(chan struct{})}
	s := startSlowServer(t, views)
	s.putEnvoy(t, ClusterType, bigClusters(3))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: sidecar(), TypeUrl: ClusterType})
	if got := responseTypes(c, 200*time.Millisecond); !slices.Equal(got, []string{ClusterType}) {
		t.Fatalf("the first responses were %v, want the clusters'", got)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RouteType, ResourceNamesSubscribe: []string{"8080"}})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ListenerType})
	if got := responseTypes(c, 300*time.Millisecond); !slices.Equal(got, []string{ListenerType}) {
		t.Fatalf("while the route configuration is built, the responses were %v, want the listeners' alone", got)
	}
	close(views.built)
	if got := responseTypes(c, 300*time.Millisecond); !slices.Equal(got, []string{RouteType}) {
		t.Fatalf("once the route configuration is built, the responses were %v, want the routes'", got)
	}
}

// The first request that names the node is how the engine learns it: when it waits (here for
// a port's route configuration), every request after it waits too, of any type; answered
// first, a request would be subscribed without the node's view (a namespace's clusters, a
// proxyless client's).
func TestTheFirstRequestNamingTheNodeHoldsBackEveryRequestAfterIt(t *testing.T) {
	views := &slowViews{built: make(chan struct{})}
	s := startSlowServer(t, views)
	s.putEnvoy(t, ClusterType, bigClusters(3))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: sidecar(), TypeUrl: RouteType, ResourceNamesSubscribe: []string{"8080"}})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	heldBackUntil(t, c, views.built, ClusterType, RouteType)
}

// A view the first request that held it gave up waiting for (past ScopeBuildWaitMax) is not
// waited for again by every later request that names it: they are served what is built, as
// that request was.
func TestALaterRequestDoesNotWaitAgainForAViewGivenUpOn(t *testing.T) {
	shortBuildWaits(t, 20*time.Millisecond, 300*time.Millisecond)
	views := &slowViews{host: make(chan struct{})} // never built
	views.translating.Store(true)
	s := startServerOf(t, source.Options{Logger: testLogger(t)}, Server{Views: views})
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "tool"}, TypeUrl: ListenerType, ResourceNamesSubscribe: []string{"h.example:8080"}})
	if got := responseTypes(c, time.Second); !slices.Equal(got, []string{ListenerType}) {
		t.Fatalf("after ScopeBuildWaitMax, the responses were %v, want the listeners'", got)
	}
	start := time.Now()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RouteType, ResourceNamesSubscribe: []string{"outbound|8080||h.example"}})
	m := c.recv()
	if took := time.Since(start); m.TypeUrl != RouteType || took > 150*time.Millisecond {
		t.Fatalf("the route request was answered with %s after %v: it waited again for the view given up on (ScopeBuildWaitMax %v)", m.TypeUrl, took, scopeBuildWaitMax)
	}
}

// A client that sends its request and closes its side of the stream is answered: the end of
// its requests reaches the engine after the request that waits, not before it (which would
// end the stream unanswered).
func TestAClientThatClosesItsSideIsAnsweredWhatItWaitsFor(t *testing.T) {
	views := &slowViews{built: make(chan struct{})}
	s := startSlowServer(t, views)
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: sidecar(), TypeUrl: ClusterType})
	if got := responseTypes(c, 200*time.Millisecond); !slices.Equal(got, []string{ClusterType}) {
		t.Fatalf("the first responses were %v, want the clusters'", got)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RouteType, ResourceNamesSubscribe: []string{"8080"}})
	c.CloseSend()
	c.quiet(200 * time.Millisecond) // waiting for the route configuration
	close(views.built)
	if m := c.recv(); m.TypeUrl != RouteType {
		t.Fatalf("got %s, want the route configurations", m.TypeUrl)
	}
}

// A request that waits for its node's view (a namespace's, which every type reads) holds back
// every request after it, of any type: none is answered before the view is built.
func TestARequestWaitingForItsNodesViewHoldsBackEveryType(t *testing.T) {
	views := &slowViews{scope: make(chan struct{})}
	s := startSlowServer(t, views)
	s.putEnvoy(t, ClusterType, bigClusters(3))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{Node: sidecar(), TypeUrl: ListenerType})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	heldBackUntil(t, c, views.scope, ListenerType, ClusterType)
}

// A request that names what an earlier request of the stream holds, of another type, waits
// for it too: the route configuration outbound|8080||h.example (and, in one case, the port's,
// 8080) is asked for after the API listener h.example:8080, whose request holds the host's
// outputs; the routes are answered only once the host's outputs are built (the port's route
// configuration is built first), not told that outbound|8080||h.example does not exist.
func TestARequestWaitsForWhatAnEarlierRequestHolds(t *testing.T) {
	for _, routes := range [][]string{{"8080", "outbound|8080||h.example"}, {"outbound|8080||h.example"}} {
		t.Run(strings.Join(routes, ","), func(t *testing.T) {
			views := &slowViews{built: make(chan struct{}), host: make(chan struct{})}
			s := startSlowServer(t, views)
			c := newDelta(t, s.addr)
			c.send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "tool"}, TypeUrl: ListenerType, ResourceNamesSubscribe: []string{"h.example:8080"}})
			c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RouteType, ResourceNamesSubscribe: routes})
			close(views.built)
			heldBackUntil(t, c, views.host, ListenerType, RouteType)
		})
	}
}

// A request's wait ends when its stream ends: its goroutine does not outlive the stream by
// ScopeBuildWaitMax.
func TestARequestStopsWaitingWhenItsStreamEnds(t *testing.T) {
	shortBuildWaits(t, 20*time.Millisecond, time.Minute)
	views := &slowViews{built: make(chan struct{})}
	views.translating.Store(true)
	h := viewHold{views: views}
	waits, _, ended := h.see(&source.Request{Key: RouteType, Names: []string{"8080"}, Node: nodeFields(sidecar())})
	if len(waits) != 1 {
		t.Fatalf("the request waits for %d views, want its route configuration", len(waits))
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		waitBuilt(waits, views.TranslationProgress, ended)
	}()
	time.Sleep(100 * time.Millisecond) // waiting, past ScopeBuildWait
	h.end()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the request still waits after its stream ended")
	}
}

// While no translation runs, nothing will build what a request waits for: it goes on after
// ScopeBuildWait, served what is built.
func TestARequestWaitsScopeBuildWaitWhenNothingTranslates(t *testing.T) {
	shortBuildWaits(t, 20*time.Millisecond, 10*time.Second)
	never := make(chan struct{})
	start := time.Now()
	waitBuilt([]<-chan struct{}{never}, func() (bool, uint64) { return false, 7 }, nil)
	if took := time.Since(start); took < scopeBuildWait || took > 2*time.Second {
		t.Fatalf("waited %v, want about %v", took, scopeBuildWait)
	}
}

// A translation that never ends (or builds the view forever) holds a request ScopeBuildWaitMax
// at most.
func TestARequestWaitsScopeBuildWaitMaxAtMost(t *testing.T) {
	shortBuildWaits(t, 20*time.Millisecond, 150*time.Millisecond)
	never := make(chan struct{})
	start := time.Now()
	waitBuilt([]<-chan struct{}{never}, func() (bool, uint64) { return true, 7 }, nil)
	if took := time.Since(start); took < scopeBuildWaitMax || took > 3*time.Second {
		t.Fatalf("waited %v, want about %v", took, scopeBuildWaitMax)
	}
}

// A look that falls between two translations (the one that ran ended, the next that builds
// the view has not started yet) sees that one started since the last look, and waits on.
func TestARequestWaitsOnWhenATranslationRanBetweenTwoLooks(t *testing.T) {
	shortBuildWaits(t, 20*time.Millisecond, 10*time.Second)
	var started atomic.Uint64
	stopTicking := make(chan struct{})
	defer close(stopTicking)
	go func() { // a translation starts, and ends at once, every 5 ms: never running when looked at
		for {
			select {
			case <-stopTicking:
				return
			case <-time.After(5 * time.Millisecond):
				started.Add(1)
			}
		}
	}()
	built := make(chan struct{})
	closeLater := time.AfterFunc(200*time.Millisecond, func() { close(built) })
	defer closeLater.Stop()
	waitBuilt([]<-chan struct{}{built}, func() (bool, uint64) { return false, started.Load() }, nil)
	select {
	case <-built:
	default:
		t.Fatal("the request went on while translations kept starting, before its view was built")
	}
}
