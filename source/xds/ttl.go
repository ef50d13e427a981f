package xds

import (
	"slices"
	"time"

	"github.com/mcpbridge/mcpbridge/source"
)

// Client features (node.client_features) that gate TTLs (xds-protocol.rst, "TTL" and
// "SotW TTL"). The seed names them xds.config.supports-resource-ttl and
// xds.config.supports-resource-in-sotw; clients in the field announce the wrapper as
// xds.config.resource-in-sotw (gRPC's xDS clients, Envoy's client_features list) and older
// Envoy documentation uses the envoy.config prefix: each spelling is accepted.
const (
	FeatureResourceTTL    = "xds.config.supports-resource-ttl"
	FeatureResourceInSotW = "xds.config.supports-resource-in-sotw"
)

var (
	ttlFeatures  = []string{FeatureResourceTTL, "envoy.config.supports-resource-ttl"}
	wrapFeatures = []string{FeatureResourceInSotW, "xds.config.resource-in-sotw", "envoy.config.resource-in-sotw"}
)

// TTLs is the TTL of each collection's resources (xds.ttl): a resource sent with a TTL is
// dropped by the client when the TTL runs out unless renewed, and the bridge renews it (a
// heartbeat every TTL/2) only while its producer is connected. Zero: no TTL.
type TTLs struct {
	Default time.Duration
	// ByCollection overrides Default, by store collection (an Envoy type URL, or the
	// canonical MCP collection of an Istio kind).
	ByCollection map[string]time.Duration
}

func (t *TTLs) of(collection string) time.Duration {
	if t == nil {
		return 0
	}
	if d, ok := t.ByCollection[collection]; ok {
		return d
	}
	return t.Default
}

// clientTTL is what one stream's client announced of TTLs, from the first request that names
// its node (later requests may leave the node out).
type clientTTL struct {
	seen      bool
	ttl, wrap bool
	ttls      *TTLs
}

// apply sets the request's TTL when the client takes TTLs in this protocol: delta, when it
// announces TTL support; state of the world, when it also announces it unwraps Resource
// wrappers, since only the wrapper carries a TTL there. A client that announces neither
// gets plain bodies and no heartbeats: a bodiless heartbeat would read as "does not exist"
// to a delta client that does not know TTLs, and gRPC's xDS client, which unwraps SotW
// resources but ignores TTLs, would refuse a wrapper without a body.
func (c *clientTTL) apply(req *source.Request, node nodeMessage) {
	if node != nil && !c.seen {
		c.seen = true
		features := node.GetClientFeatures()
		c.ttl = slices.ContainsFunc(ttlFeatures, func(f string) bool { return slices.Contains(features, f) })
		c.wrap = slices.ContainsFunc(wrapFeatures, func(f string) bool { return slices.Contains(features, f) })
	}
	stateOfTheWorld := req.Mode == source.StateOfTheWorld
	if !c.ttl || (stateOfTheWorld && !c.wrap) {
		return
	}
	req.TTL = c.ttls.of(req.Collection)
	req.Wrap = stateOfTheWorld && req.TTL > 0
}
