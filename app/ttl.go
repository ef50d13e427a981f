package app

import (
	"fmt"
	"time"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

// TTLConfig gives resources a TTL for xDS clients that announce TTL support (xds.ttl;
// xds-protocol.rst, "TTL"): such a client drops a resource when its TTL runs out, and the
// bridge renews it (a heartbeat every TTL/2) only while the resource's producer is connected.
type TTLConfig struct {
	// Default is the TTL of every type without one of its own; 0s: none.
	Default time.Duration `mapstructure:"default"`
	// Types are TTLs of single types, over Default (0s: none for that type).
	Types []TypeTTL `mapstructure:"types"`
}

// TypeTTL is one type's TTL. A list, not a map: type URLs hold dots, which configuration
// keys cannot.
type TypeTTL struct {
	// Type is a type URL as clients ask for it (type.googleapis.com/envoy.config.cluster.v3.Cluster,
	// networking.istio.io/v1/ServiceEntry, any version alias) or an MCP collection.
	Type string        `mapstructure:"type"`
	TTL  time.Duration `mapstructure:"ttl"`
}

// MinTTL is the shortest TTL allowed: heartbeats go every TTL/2, and a shorter TTL would
// leave a client too little time to get one across a busy network or a paced push.
const MinTTL = time.Second

// ResolveTTLs checks xds.ttl and returns it by store collection; nil when no type has a TTL.
// Its errors name the key.
func ResolveTTLs(c TTLConfig) (*xds.TTLs, error) {
	if err := checkTTL("xds.ttl.default", c.Default); err != nil {
		return nil, err
	}
	out := &xds.TTLs{Default: c.Default, ByCollection: map[string]time.Duration{}}
	some := c.Default > 0
	for i, t := range c.Types {
		coll, ok := ttlCollection(t.Type)
		if !ok {
			return nil, ConfigErrorf("xds.ttl.types[%d].type: %q is neither an Envoy type URL the bridge serves nor an Istio kind's type URL or collection", i, t.Type)
		}
		if err := checkTTL(fmt.Sprintf("xds.ttl.types[%d].ttl", i), t.TTL); err != nil {
			return nil, err
		}
		if _, dup := out.ByCollection[coll]; dup {
			return nil, ConfigErrorf("xds.ttl.types[%d].type: %q names a type listed before", i, t.Type)
		}
		out.ByCollection[coll] = t.TTL
		some = some || t.TTL > 0
	}
	if !some {
		return nil, nil
	}
	return out, nil
}

func checkTTL(key string, d time.Duration) error {
	switch {
	case d < 0:
		return ConfigErrorf("%s: must not be negative, got %s", key, d)
	case d > 0 && d < MinTTL:
		return ConfigErrorf("%s: %s is shorter than the minimum of %s (heartbeats go every TTL/2); 0s turns TTLs off", key, d, MinTTL)
	}
	return nil
}

// ttlCollection is the store collection of a type named in xds.ttl.types.
func ttlCollection(name string) (string, bool) {
	switch name {
	case xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType, kinds.MeshConfigTypeURL:
		return name, true
	}
	if k, ok := kinds.ByXDSTypeURL(name); ok {
		return k.Collection, true
	}
	if k, ok := kinds.ByCollection(name); ok {
		return k.Collection, true
	}
	return "", false
}
