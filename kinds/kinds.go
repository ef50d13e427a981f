// Package kinds names the Istio config kinds mcpbridge knows and checks their bodies.
//
// One kind has three names, one per generation of Istio's config protocols: an MCP collection
// (istio/networking/v1alpha3/serviceentries), an xDS type URL for MCP over xDS
// (networking.istio.io/v1alpha3/ServiceEntry), and an AggregatedMeshConfigService type URL,
// which is the Any type URL of the body message
// (type.googleapis.com/istio.networking.v1alpha3.ServiceEntry). The bridge stores a resource once,
// under the canonical collection, and answers to all three names.
//
// The table holds every kind of istio.io/api that istiod reads from a config source: the
// collections of Istio's collections.Pilot (pkg/config/schema/collections), which is what istiod
// subscribes to on an xds:// config source (pkg/adsc ConfigInitialRequests), each by the type
// URL of its schema's preferred version: networking.istio.io/v1/ServiceEntry,
// security.istio.io/v1/AuthorizationPolicy, telemetry.istio.io/v1/Telemetry,
// networking.istio.io/v1beta1/ProxyConfig, extensions.istio.io/v1alpha1/WasmPlugin, and so on.
//
// Aliases: Istio serves the networking kinds under v1alpha3, v1beta1 and v1, the security kinds
// under v1beta1 and, since Istio 1.22, v1, and Telemetry under v1alpha1 and v1. In istio.io/api
// the newer versions are Go type aliases of the oldest one, so every version of a kind has one
// body message; the collection and xDS type URL of every version therefore resolve to the same
// Kind. The canonical version of a kind is the one of its message's package. EnvoyFilter,
// ProxyConfig (v1beta1), WasmPlugin and TrafficExtension (v1alpha1) have one version each.
package kinds

import (
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	extensions "istio.io/api/extensions/v1alpha1"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

const (
	// MeshConfigTypeURL is the xDS type URL under which istiod asks a config source for its
	// MeshConfig. It is not a collection of the store.
	MeshConfigTypeURL = "core/v1alpha1/MeshConfig"
	// MeshConfigMessage is the full name of the message served under MeshConfigTypeURL.
	MeshConfigMessage = "istio.mesh.v1alpha1.MeshConfig"
)

// anyPrefix is the host part of every Any type URL the bridge writes and accepts.
const anyPrefix = "type.googleapis.com/"

// Kind is one Istio config kind and its names. Kinds are shared and must not be modified.
type Kind struct {
	Kind    string // "ServiceEntry"
	Group   string // "networking.istio.io"
	Version string // canonical version: "v1alpha3", or "v1beta1" for the security kinds
	// Collection is the canonical MCP collection: "istio/networking/v1alpha3/serviceentries".
	Collection string
	// XDSTypeURL is the canonical type URL for MCP over xDS: "networking.istio.io/v1alpha3/ServiceEntry".
	XDSTypeURL string
	// AMCSTypeURL is the AggregatedMeshConfigService type URL, which is also the type URL of the
	// body's Any: "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry".
	AMCSTypeURL string
	// Message is the full name of the body message.
	Message protoreflect.FullName
	// New returns an empty body message.
	New func() proto.Message
	// desc describes the body message.
	desc protoreflect.MessageDescriptor
	// check is the kind's validation, istiod's ValidateXxx for it (validate_*.go).
	check func(v *validator, spec proto.Message)
	// fastValid, if set, says whether a well-formed body is surely valid, reading it in
	// place (validate_fast.go); false sends it to check.
	fastValid func(md *mcpapi.Metadata, value []byte) bool

	plural  string   // lower-case plural, the last segment of the collection
	aliases []string // versions other than Version under which Istio serves the kind
}

// Descriptor describes the body message, without making one.
func (k *Kind) Descriptor() protoreflect.MessageDescriptor { return k.desc }

// networkingAliases, securityAliases and telemetryAliases are the versions Istio serves besides
// the canonical one (the VersionAliases and Version of the kinds' schemas in Istio's
// pkg/config/schema/collections).
var (
	networkingAliases = []string{"v1beta1", "v1"}
	securityAliases   = []string{"v1"}
	telemetryAliases  = []string{"v1"}
)

// table is the naming table, in the order of the contract. It is built once and never modified.
var table = []*Kind{
	newKind("networking.istio.io", "v1alpha3", "ServiceEntry", "serviceentries", &networking.ServiceEntry{}, networkingAliases, rule(validateServiceEntry)),
	newKind("networking.istio.io", "v1alpha3", "VirtualService", "virtualservices", &networking.VirtualService{}, networkingAliases, rule(validateVirtualService)),
	newKind("networking.istio.io", "v1alpha3", "DestinationRule", "destinationrules", &networking.DestinationRule{}, networkingAliases, rule(validateDestinationRule)),
	newKind("networking.istio.io", "v1alpha3", "Gateway", "gateways", &networking.Gateway{}, networkingAliases, rule(validateGateway)),
	newKind("networking.istio.io", "v1alpha3", "Sidecar", "sidecars", &networking.Sidecar{}, networkingAliases, rule(validateSidecar)),
	newKind("networking.istio.io", "v1alpha3", "EnvoyFilter", "envoyfilters", &networking.EnvoyFilter{}, nil, rule(validateEnvoyFilter)),
	newKind("networking.istio.io", "v1alpha3", "WorkloadEntry", "workloadentries", &networking.WorkloadEntry{}, networkingAliases, rule(validateWorkloadEntry)),
	newKind("networking.istio.io", "v1alpha3", "WorkloadGroup", "workloadgroups", &networking.WorkloadGroup{}, networkingAliases, rule(validateWorkloadGroup)),
	newKind("security.istio.io", "v1beta1", "AuthorizationPolicy", "authorizationpolicies", &security.AuthorizationPolicy{}, securityAliases, rule(validateAuthorizationPolicy)),
	newKind("security.istio.io", "v1beta1", "PeerAuthentication", "peerauthentications", &security.PeerAuthentication{}, securityAliases, rule(validatePeerAuthentication)),
	newKind("security.istio.io", "v1beta1", "RequestAuthentication", "requestauthentications", &security.RequestAuthentication{}, securityAliases, rule(validateRequestAuthentication)),
	newKind("networking.istio.io", "v1beta1", "ProxyConfig", "proxyconfigs", &networkingv1beta1.ProxyConfig{}, nil, rule(validateProxyConfig)),
	newKind("telemetry.istio.io", "v1alpha1", "Telemetry", "telemetries", &telemetry.Telemetry{}, telemetryAliases, rule(validateTelemetry)),
	newKind("extensions.istio.io", "v1alpha1", "WasmPlugin", "wasmplugins", &extensions.WasmPlugin{}, nil, rule(validateWasmPlugin)),
	newKind("extensions.istio.io", "v1alpha1", "TrafficExtension", "trafficextensions", &extensions.TrafficExtension{}, nil, rule(validateTrafficExtension)),
}

// index maps every name of every kind, canonical or alias, to its Kind.
type index struct {
	collection map[string]*Kind
	xds        map[string]*Kind
	amcs       map[string]*Kind
}

var byName = buildIndex(table)

func init() {
	// Set here, not in the table: the fast path is an optimisation of check, not a name.
	se, _ := ByAMCSTypeURL(anyPrefix + string((&networking.ServiceEntry{}).ProtoReflect().Descriptor().FullName()))
	se.fastValid = fastServiceEntryValid
}

func newKind(group, version, kind, plural string, prototype proto.Message, aliases []string, check func(*validator, proto.Message)) *Kind {
	mt := prototype.ProtoReflect().Type()
	name := mt.Descriptor().FullName()
	return &Kind{
		Kind:        kind,
		Group:       group,
		Version:     version,
		Collection:  collectionName(group, version, plural),
		XDSTypeURL:  xdsTypeURL(group, version, kind),
		AMCSTypeURL: anyPrefix + string(name),
		Message:     name,
		New:         func() proto.Message { return mt.New().Interface() },
		desc:        mt.Descriptor(),
		check:       check,
		plural:      plural,
		aliases:     aliases,
	}
}

// rule adapts a kind's validation of its own message to the table's signature.
func rule[M proto.Message](f func(*validator, M)) func(*validator, proto.Message) {
	return func(v *validator, spec proto.Message) { f(v, spec.(M)) }
}

// collectionName follows Istio's scheme: "istio/" + the group without ".istio.io" + version + plural.
func collectionName(group, version, plural string) string {
	return "istio/" + shortGroup(group) + "/" + version + "/" + plural
}

func xdsTypeURL(group, version, kind string) string { return group + "/" + version + "/" + kind }

// shortGroup is "networking" for "networking.istio.io".
func shortGroup(group string) string {
	short, _, _ := strings.Cut(group, ".")
	return short
}

func buildIndex(kinds []*Kind) index {
	idx := index{
		collection: map[string]*Kind{},
		xds:        map[string]*Kind{},
		amcs:       map[string]*Kind{},
	}
	for _, k := range kinds {
		idx.amcs[k.AMCSTypeURL] = k
		for _, v := range append([]string{k.Version}, k.aliases...) {
			idx.collection[collectionName(k.Group, v, k.plural)] = k
			idx.xds[xdsTypeURL(k.Group, v, k.Kind)] = k
		}
	}
	return idx
}

// Kinds returns the known kinds in the order of the naming table.
func Kinds() []*Kind {
	return append([]*Kind(nil), table...)
}

// ByCollection returns the kind of a canonical or alias MCP collection.
func ByCollection(name string) (*Kind, bool) {
	k, ok := byName.collection[name]
	return k, ok
}

// ByXDSTypeURL returns the kind of a canonical or alias xDS type URL.
func ByXDSTypeURL(url string) (*Kind, bool) {
	k, ok := byName.xds[url]
	return k, ok
}

// ByAMCSTypeURL returns the kind of an AggregatedMeshConfigService type URL.
func ByAMCSTypeURL(url string) (*Kind, bool) {
	k, ok := byName.amcs[url]
	return k, ok
}

// ByGroupVersionKind returns the kind of a Kubernetes-style apiVersion ("networking.istio.io/v1")
// and kind ("ServiceEntry"), canonical or alias version. Both are case-sensitive, as in Kubernetes.
func ByGroupVersionKind(apiVersion, kind string) (*Kind, bool) {
	if strings.Contains(kind, "/") {
		return nil, false // else "g" + "v/Kind" would pass for "g/v" + "Kind"
	}
	// An xDS type URL is exactly group/version/Kind. The key is made on the stack: a map
	// index by string(bytes) copies nothing, and every document of every file is looked up.
	var room [96]byte
	key := append(append(append(room[:0], apiVersion...), '/'), kind...)
	k, ok := byName.xds[string(key)]
	return k, ok
}

// CanonicalCollection maps an alias collection to its canonical one. A canonical collection and
// a collection the table does not name (opaque) are returned unchanged.
func CanonicalCollection(name string) string {
	if k, ok := ByCollection(name); ok {
		return k.Collection
	}
	return name
}

// CollectionOf is the store collection behind any name of a kind: its MCP collection names,
// its xDS type URLs and its AggregatedMeshConfigService type URL; any other name (an Envoy
// type URL, an opaque collection) is its own collection. Authorization rules name
// collections this way.
func CollectionOf(name string) string {
	if k, ok := ByCollection(name); ok {
		return k.Collection
	}
	if k, ok := ByXDSTypeURL(name); ok {
		return k.Collection
	}
	if k, ok := ByAMCSTypeURL(name); ok {
		return k.Collection
	}
	return name
}

// DefaultCollections returns the canonical collections of every known kind, in table order:
// what the bridge asks producers for when the configuration does not say otherwise.
func DefaultCollections() []string {
	out := make([]string, len(table))
	for i, k := range table {
		out[i] = k.Collection
	}
	return out
}
