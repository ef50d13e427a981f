package envoy

import (
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/source"
	xdsserver "github.com/mcpbridge/mcpbridge/source/xds"
)

// TestGRPCClientIsUnaffectedByTTLs: gRPC's xDS client announces that it unwraps Resource
// wrappers (xds.config.resource-in-sotw) but not TTL support, and it does not implement
// TTLs: it would take a bodiless heartbeat for a resource of no type and refuse it. With
// xds.ttl set for every type, it is sent plain bodies and no heartbeats: its calls go on
// over several TTLs and it refuses nothing. Its bootstrap's node.client_features cannot
// change that (gRPC replaces them with its own).
func TestGRPCClientIsUnaffectedByTTLs(t *testing.T) {
	const ttl = time.Second
	b := startBridgeTTL(t, nil, source.Options{Derived: map[string][]string{Owner: InputCollections()}}, &xdsserver.TTLs{Default: ttl})
	bs := startBackends(t, "v1-a")
	b.setConfig(echoService(bs["v1-a"]))
	c := b.client(e2eTarget)
	eventually(t, c, "the endpoint answers", func(id string) bool { return id == "v1-a" })
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if got := answers(t, c, 5); got["v1-a"] != 5 {
			t.Fatalf("answers %v; want every call to reach v1-a", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := b.eng.Stats().Heartbeats; n != 0 {
		t.Fatalf("%d heartbeats sent to a client that does not announce TTL support", n)
	}
	// assertNoNACK runs at cleanup (b.client).
}
