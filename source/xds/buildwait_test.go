package xds

import (
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/mcpbridge/mcpbridge/source"
)

// shortBuildWaits shortens the bounds of waitBuilt for a test.
func shortBuildWaits(t *testing.T, wait, max time.Duration) {
	t.Helper()
	was, wasMax := scopeBuildWait, scopeBuildWaitMax
	scopeBuildWait, scopeBuildWaitMax = wait, max
	t.Cleanup(func() { scopeBuildWait, scopeBuildWaitMax = was, wasMax })
}

// slowViews builds a port's route configuration only when the test says so, while it says a
// translation runs.
type slowViews struct {
	countingViews
	built       chan struct{}
	translating atomic.Bool
}

func (v *slowViews) AcquirePortRoute(port uint32) (func(), <-chan struct{}) {
	release, _ := v.countingViews.AcquirePortRoute(port)
	return release, v.built
}
func (v *slowViews) TranslationProgress() (bool, uint64) { return v.translating.Load(), 0 }

// A request for a port's route configuration that takes longer to build than ScopeBuildWait
// (4–5 s at a million hosts) waits for it while the translation runs: answered before it,
// the client would be told that the route does not exist.
func TestARequestWaitsForWhatItHoldsWhileATranslationRuns(t *testing.T) {
	shortBuildWaits(t, 20*time.Millisecond, 10*time.Second)
	views := &slowViews{built: make(chan struct{})}
	views.translating.Store(true)
	built := time.AfterFunc(200*time.Millisecond, func() { close(views.built) })
	defer built.Stop()
	h := viewHold{views: views}
	start := time.Now()
	h.see(&source.Request{Key: RouteType, Names: []string{"8080"}, Node: nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"})})
	select {
	case <-views.built:
	default:
		t.Fatalf("the request went on after %v, before its route configuration was built (ScopeBuildWait %v)", time.Since(start), scopeBuildWait)
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

// A request waiting for what it holds stops waiting when its stream ends: its goroutine does
// not outlive the stream by ScopeBuildWaitMax.
func TestARequestStopsWaitingWhenItsStreamEnds(t *testing.T) {
	shortBuildWaits(t, 20*time.Millisecond, time.Minute)
	views := &slowViews{built: make(chan struct{})}
	views.translating.Store(true)
	h := viewHold{views: views}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		h.see(&source.Request{Key: RouteType, Names: []string{"8080"}, Node: nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"})})
	}()
	time.Sleep(100 * time.Millisecond) // waiting, past ScopeBuildWait
	h.end()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the request still waits after its stream ended")
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
