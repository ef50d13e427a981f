package translate

import (
	"maps"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// GatewayClass is the gateway workloads that share labels and, if they narrow it, the
// namespaces they take Gateways from: every Gateway whose selector their labels satisfy (an
// empty selector selects every gateway workload), of those namespaces, is merged into one set
// of listeners and routes for them, as istiod merges the Gateways of one gateway proxy. The
// xDS server learns a gateway proxy's class from its node (metadata LABELS) and the
// translation builds the classes of the proxies connected.
type GatewayClass struct {
	Labels map[string]string
	// Namespaces, when set, are the only namespaces whose Gateways apply (sorted).
	Namespaces []string
}

// ID names the class by its content: the same labels and namespaces give the same ID
// wherever it is computed (the xDS server picks a node's listeners by it, the translation
// names outputs by it). It is 16 hex digits of a 64-bit hash.
func (c GatewayClass) ID() string {
	h := xxhash.New()
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		h.WriteString(k)
		h.WriteString("=")
		h.WriteString(c.Labels[k])
		h.WriteString("\x00")
	}
	h.WriteString("\x01")
	for _, ns := range c.Namespaces {
		h.WriteString(ns)
		h.WriteString("\x00")
	}
	return strconv.FormatUint(h.Sum64()|1<<63, 16) // the top bit set: always 16 digits
}

// GatewayClassPrefix is what the names of a gateway class's Envoy outputs start with:
// "gateway.CLASS/".
func GatewayClassPrefix(class string) string { return "gateway." + class + "/" }
