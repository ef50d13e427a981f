package xds

import (
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// When the client NACKs the make half of a make-before-break clusters update, the break half
// is not sent (it would resend the refused version); the next change carries on as usual.
func TestNACKOfTheMakeHalfSendsNoBreakUntilTheNextChange(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("A"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	c.ack(c.recv())
	waitAllAcknowledged(t, s.engine)
	if _, err := s.store.Apply("test", clusterUpdate(clusters("B"), "A")); err != nil {
		t.Fatal(err)
	}
	first := c.recv()
	assertNames(t, "make half", sotwNames(t, first), "A", "B")
	c.nack(first)
	c.quiet(300 * time.Millisecond)
	s.putEnvoy(t, ClusterType, clusters("C"))
	assertNames(t, "next change", sotwNames(t, c.recv()), "B", "C")
}

// Over delta, removals held back for a NACKed addition go out with the next change.
func TestDeltaRemovalsHeldBackForANACKedAdditionGoWithTheNextChange(t *testing.T) {
	s, c, m := deltaClustersMovedFromAToB(t)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: m.Nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "bad B"}})
	c.quiet(300 * time.Millisecond)
	s.putEnvoy(t, ClusterType, clusters("C"))
	m = c.recv()
	assertNames(t, "next change", deltaNames(m), "C")
	// The removal of A may be held back again behind the addition of C (make before break).
	removed := m.RemovedResources
	if len(removed) == 0 {
		c.ack(m)
		removed = c.recv().RemovedResources
	}
	assertNames(t, "removed", removed, "A")
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
func deltaClustersMovedFromAToB(t *testing.T) (*server, *deltaClient, *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("A"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	c.ack(c.recv())
	waitAllAcknowledged(t, s.engine)
	if _, err := s.store.Apply("test", clusterUpdate(clusters("B"), "A")); err != nil {
		t.Fatal(err)
	}
	m := c.recv()
	assertNames(t, "addition", deltaNames(m), "B")
	return s, c, m
}
