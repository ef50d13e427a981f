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

// withTTL sets a type's TTL when the client takes TTLs in its protocol: delta, when its node
// announces TTL support; state of the world, when it also announces it unwraps Resource
// wrappers, since only the wrapper carries a TTL there. A client that announces neither (or
// whose node is not known yet) gets plain bodies and no heartbeats: a bodiless heartbeat would
// read as "does not exist" to a delta client that does not know TTLs, and gRPC's xDS client,
// which unwraps SotW resources but ignores TTLs, would refuse a wrapper without a body.
func withTTL(typ *source.Type, ttls *TTLs, node *source.Node) {
	if ttls == nil || node == nil {
		return
	}
	announced := func(spellings []string) bool {
		return slices.ContainsFunc(spellings, func(f string) bool { return slices.Contains(node.Features, f) })
	}
	stateOfTheWorld := typ.Mode == source.StateOfTheWorld
	if !announced(ttlFeatures) || (stateOfTheWorld && !announced(wrapFeatures)) {
		return
	}
	typ.TTL = ttls.of(typ.Collection)
	typ.Wrap = stateOfTheWorld && typ.TTL > 0
}
