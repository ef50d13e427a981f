package rest

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/mcpbridge/mcpbridge/source/xds"
)

// buildingViews never finishes building a namespace's view, and says a translation runs: a
// poller's wait for the view would last xds.ScopeBuildWaitMax.
type buildingViews struct{ classes }

func (v *buildingViews) AcquireScope(string) (func(), <-chan struct{}, bool) {
	return func() {}, make(chan struct{}), true
}
func (v *buildingViews) TranslationProgress() (bool, uint64) { return true, 0 }

// A poller whose request ends stops waiting for its namespace's view: the first, which
// acquires it, and one waiting for the first. Gone, each would otherwise count against the
// poll limits for up to xds.ScopeBuildWaitMax.
func TestAPollerWhoseRequestEndsStopsWaitingForItsView(t *testing.T) {
	h := &classHolds{classes: &buildingViews{}, linger: time.Minute}
	defer h.releaseAll()
	req, _ := xds.PollRequest(&discovery.DiscoveryRequest{Node: &core.Node{Id: "sidecar~10.0.0.1~a.b~b.svc.cluster.local"}, TypeUrl: xds.ClusterType})
	firstCtx, endFirst := context.WithCancel(context.Background())
	defer endFirst()
	firstBack := make(chan func())
	go func() { firstBack <- h.hold(firstCtx, req) }()
	time.Sleep(50 * time.Millisecond) // the first is acquiring
	secondCtx, endSecond := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer endSecond()
	start := time.Now()
	h.hold(secondCtx, req)()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the second poller waited %v after its request ended", took)
	}
	endFirst()
	select {
	case done := <-firstBack:
		done()
	case <-time.After(2 * time.Second):
		t.Fatal("the first poller still waits after its request ended")
	}
}
