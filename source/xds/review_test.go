package xds

import (
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// When the client NACKs the make half of a make-before-break clusters update, the removal it
// held back still goes (nothing depends on the cluster any more), under a version other than
// the refused one, which is never resent; the next change carries on as usual.
func TestNACKOfTheMakeHalfStillSendsTheRemovalUnderANewVersion(t *testing.T) {
	s := serverWithRouteOnA(t)
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	c.ack(c.recv())
	c.send(&discovery.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"r"}})
	c.ack(c.recv(), "r")
	waitAllAcknowledged(t, s.engine)
	s.moveRoute(t, "A", "B")
	first := c.recv()
	assertNames(t, "make half", sotwNames(t, first), "A", "B")
	routes := c.recv()
	if routes.TypeUrl != RouteType {
		t.Fatalf("after the make half: %s, want the routes", routes.TypeUrl)
	}
	c.ack(routes, "r")
	c.nack(first)
	removal := c.recv()
	assertNames(t, "after the NACK", sotwNames(t, removal), "B")
	if removal.VersionInfo == first.VersionInfo {
		t.Fatalf("the refused version %q was sent again", first.VersionInfo)
	}
	c.nack(removal)
	c.quiet(300 * time.Millisecond) // nothing changed since: nothing more to send
	s.putEnvoy(t, ClusterType, clusters("C"))
	assertNames(t, "next change", sotwNames(t, c.recv()), "B", "C")
}

// NACK stalls unrelated work: over delta, removals held back behind a response the client
// NACKs go at once, not with some later, unrelated change.
func TestNACKDoesNotHoldBackRemovals(t *testing.T) {
	_, c, m := deltaClustersMovedFromAToB(t)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: m.Nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "bad B"}})
	m = c.recv()
	if m.TypeUrl != ClusterType || len(m.Resources) != 0 {
		t.Fatalf("after the NACK: %s %v, want only the removal", m.TypeUrl, deltaNames(m))
	}
	assertNames(t, "removed", m.RemovedResources, "A")
}

// A held-back removal is dropped when the cluster came back before the ACK.
func TestDeltaHeldBackRemovalOfAClusterThatCameBackIsNotSent(t *testing.T) {
	s, c, m := deltaClustersMovedFromAToB(t)
	s.putEnvoy(t, ClusterType, clusters("A")) // A is back before the client ACKs
	c.ack(m)
	deadline := time.After(time.Second)
	for {
		select {
		case m, ok := <-c.Responses():
			if !ok {
				t.Fatal("stream ended")
			}
			for _, n := range m.RemovedResources {
				if n == "A" {
					t.Fatalf("removed A, which is live: %v", m)
				}
			}
			c.ack(m)
		case <-deadline:
			return
		}
	}
}

// Nonces belong to a stream: one for a type this stream never answered is a new subscription,
// not a stale request (a client that kept its last nonce across a reconnect still gets served).
func TestFirstRequestCarryingANonceStartsASubscription(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("A"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: "17", VersionInfo: "3"})
	assertNames(t, "clusters", sotwNames(t, c.recv()), "A")
}

// A delta request that only unsubscribes, for a type never subscribed, is a phantom
// unsubscription: it must not start a wildcard subscription.
func TestDeltaUnsubscribeOnlyRequestSubscribesToNothing(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("A", "B"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesUnsubscribe: []string{"A"}})
	c.quiet(300 * time.Millisecond)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"B"}})
	assertNames(t, "after a real subscription", deltaNames(c.recv()), "B")
}

// deltaClustersMovedFromAToB has a delta client hold clusters {A}, then replaces A by B in one
// write and returns the make half the client received (B added, A's removal held back).
// serverWithRouteOnA serves cluster A and route configuration r, which sends to A.
func serverWithRouteOnA(t *testing.T) *server {
	t.Helper()
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("A"))
	s.putEnvoy(t, RouteType, map[string]proto.Message{"r": routeTo("r", "A")})
	return s
}

// deltaClustersAndRoute opens a delta stream subscribed to every cluster (first answer
// ACKed) and to route r, whose first answer it returns unacknowledged.
func deltaClustersAndRoute(t *testing.T, s *server) (*deltaClient, *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	c.ack(c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RouteType, ResourceNamesSubscribe: []string{"r"}})
	return c, c.recv()
}

func deltaClustersMovedFromAToB(t *testing.T) (*server, *deltaClient, *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	s := serverWithRouteOnA(t)
	c, first := deltaClustersAndRoute(t, s)
	c.ack(first)
	waitAllAcknowledged(t, s.engine)
	s.moveRoute(t, "A", "B")
	m := c.recv()
	assertNames(t, "addition", deltaNames(m), "B")
	if len(m.RemovedResources) != 0 {
		t.Fatalf("removal sent with the addition: %v", m.RemovedResources)
	}
	routes := c.recv()
	if routes.TypeUrl != RouteType {
		t.Fatalf("after the addition: %s, want the routes", routes.TypeUrl)
	}
	c.ack(routes)
	return s, c, m
}

// The debug view (and bridgetest, which waits on it) does not call a subscription acknowledged
// while a deletion is still held back for it: the client does not hold the store's state yet.
func TestHeldBackDeletionIsNotReportedAcknowledged(t *testing.T) {
	s := serverWithRouteOnA(t)
	c, routes := deltaClustersAndRoute(t, s) // routes left unacknowledged: they cannot move yet
	s.moveRoute(t, "A", "B")
	addition := c.recv()
	assertNames(t, "addition", deltaNames(addition), "B")
	c.ack(addition)
	clustersAcked := func() bool {
		for _, sub := range s.engine.Clients()[0].Subscriptions {
			if sub.Type == ClusterType {
				return sub.Acked
			}
		}
		return false
	}
	c.quiet(200 * time.Millisecond) // A's removal waits for the routes
	if clustersAcked() {
		t.Fatal("clusters reported acknowledged while A's removal is held back")
	}
	c.ack(routes)
	c.ack(c.recv()) // the routes, moved to B
	removal := c.recv()
	assertNames(t, "removed", removal.RemovedResources, "A")
	c.ack(removal)
	waitAllAcknowledged(t, s.engine)
	if !clustersAcked() {
		t.Fatal("clusters not reported acknowledged once A's removal was")
	}
}
