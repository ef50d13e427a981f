package envoy

import (
	"slices"
	"strconv"
	"strings"

	"github.com/mcpbridge/mcpbridge/translate"
)

// Envoy resource type URLs. They are also the store collections that hold the derived
// resources, as source/xds serves them.
const (
	ClusterType  = translate.EnvoyClusterType
	EndpointType = translate.EnvoyEndpointType
	ListenerType = translate.EnvoyListenerType
	RouteType    = translate.EnvoyRouteType
	// VirtualHostType is VHDS's (vhds.go).
	VirtualHostType = translate.EnvoyVirtualHostType
)

// outputTypes are the derived collections, in the order the controller writes them: the four
// Envoy types, the proxyless gRPC clients' clusters (GRPCClusterType) and VHDS's virtual
// hosts (VirtualHostType).
var outputTypes = [...]string{ClusterType, EndpointType, ListenerType, RouteType, GRPCClusterType, VirtualHostType}

// OutputTypes returns the derived collections: those named by their Envoy type URLs
// (clusters, load assignments, listeners, route configurations), then GRPCClusterType, then
// VirtualHostType.
func OutputTypes() []string { return slices.Clone(outputTypes[:]) }

// The order in which an aggregated stream delivers these types is translate.EnvoyOrder.

// Owner is the store owner under which the controller writes the derived collections.
const Owner = "translate"

// DefaultDomainSuffix completes short host names: "reviews" in namespace "bookinfo" is
// "reviews.bookinfo.svc.cluster.local", as in a Kubernetes cluster with Istio's defaults.
// The bridge passes translate.domain_suffix; this is its default in app.DefaultConfig, for
// an empty suffix from the translation's other users (its tests and benchmarks).
const DefaultDomainSuffix = "cluster.local"

// ClusterName is Istio's outbound cluster name: "outbound|PORT|SUBSET|HOST", with an empty
// subset for the service as a whole ("outbound|9080||reviews.bookinfo.svc.cluster.local").
// The ClusterLoadAssignment of an EDS cluster has the same name.
func ClusterName(port uint32, subset, host string) string {
	var num [10]byte // the number on the stack: one allocation, the name (every host's build names several)
	return "outbound|" + string(strconv.AppendUint(num[:0], uint64(port), 10)) + "|" + subset + "|" + host
}

// HostRouteName is the route configuration of one host and port that a proxyless gRPC
// client's API listener names: the cluster name without a subset, as Istio names it.
func HostRouteName(host string, port uint32) string { return ClusterName(port, "", host) }

// APIListenerName is the listener a proxyless gRPC client asks for when it dials
// xds:///HOST:PORT.
func APIListenerName(host string, port uint32) string {
	var num [10]byte
	return host + ":" + string(strconv.AppendUint(num[:0], uint64(port), 10))
}

// OutboundListenerName is an Envoy sidecar's outbound listener for a port: "0.0.0.0_9080".
func OutboundListenerName(port uint32) string {
	return "0.0.0.0_" + strconv.FormatUint(uint64(port), 10)
}

// OutboundRouteName is the route configuration of an outbound listener, named by the port
// alone ("9080"): it holds one virtual host per host on that port.
func OutboundRouteName(port uint32) string { return strconv.FormatUint(uint64(port), 10) }

// Gateway outputs belong to a gateway class (translate.GatewayClass): the gateway workloads of
// one set of labels (and namespaces), which get the merge of every Gateway that selects them,
// as istiod computes it for each gateway proxy. A class's outputs are named under its prefix,
// "gateway.CLASS/", with Istio's own names after it: listeners "0.0.0.0_PORT", route
// configurations "http.PORT" (a port's plaintext HTTP servers, merged) and
// "https.PORT.PORTNAME.GATEWAY.NAMESPACE" (one HTTPS server's). The prefix keeps classes apart
// from each other and from the sidecar outbound listeners in the one collection every client
// reads; a Kubernetes namespace has no ".", so it is never taken for one (Namespacer).

// GatewayClassPrefix is what every output name of a gateway class starts with.
func GatewayClassPrefix(class string) string { return translate.GatewayClassPrefix(class) }

// GatewayListenerName is a gateway class's listener for a port: "gateway.CLASS/0.0.0.0_PORT".
func GatewayListenerName(class string, port uint32) string {
	return GatewayClassPrefix(class) + OutboundListenerName(port)
}

// GatewayHTTPRouteName is the route configuration of a class's plaintext HTTP servers on a
// port: "gateway.CLASS/http.PORT".
func GatewayHTTPRouteName(class string, port uint32) string {
	return GatewayClassPrefix(class) + "http." + strconv.FormatUint(uint64(port), 10)
}

// GatewayHTTPSRouteName is the route configuration of one HTTPS server that terminates TLS:
// "gateway.CLASS/https.PORT.PORTNAME.NAME.NAMESPACE", Istio's name for it.
func GatewayHTTPSRouteName(class string, port uint32, portName, gateway string) string {
	ns, name, _ := strings.Cut(gateway, "/")
	return GatewayClassPrefix(class) + "https." + strconv.FormatUint(uint64(port), 10) + "." + portName + "." + name + "." + ns
}

// classSelects reports whether a Gateway applies to a class: its selector is satisfied by the
// class's labels (an empty selector selects every gateway workload), and its namespace is one
// the class takes.
func classSelects(c translate.GatewayClass, gw *gateway) bool {
	if c.Namespaces != nil {
		if _, ok := slices.BinarySearch(c.Namespaces, gw.Namespace); !ok {
			return false
		}
	}
	for k, v := range gw.spec.GetSelector() {
		if got, ok := c.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Filter names, as Envoy and grpc-go know them.
const (
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
	faultFilterName  = "envoy.filters.http.fault"
	routerFilterName = "envoy.filters.http.router"
	// previousHostsName is the retry host predicate that makes a retry pick another host.
	previousHostsName = "envoy.retry_host_predicates.previous_hosts"
	// httpProtocolOptionsKey is the cluster's typed_extension_protocol_options key for HTTP
	// upstream settings.
	httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// isWildcard reports whether a host is a pattern ("*" or "*.example.com") rather than a name.
func isWildcard(host string) bool { return strings.HasPrefix(host, "*") }

// moreSpecific returns whichever of two matching hosts is narrower: a name over a pattern,
// a longer pattern over a shorter one.
func moreSpecific(a, b string) string {
	switch {
	case !isWildcard(a):
		return a
	case !isWildcard(b):
		return b
	case len(a) >= len(b):
		return a
	default:
		return b
	}
}

// splitKey splits "namespace/name".
func splitKey(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "/"); ok {
		return ns, n
	}
	return "", key
}

// Namespacer tells the namespace of a derived Envoy resource, for consumers limited to some
// namespaces (authz views). It is a function of the name alone, so that a name never moves
// between views (a client would be left holding what it may no longer see):
//
//   - a gateway's listeners and route configurations (NAMESPACE/NAME/...) are of the
//     Gateway's namespace;
//   - a host's cluster, load assignment, route configuration and API listener
//     (outbound|PORT|SUBSET|HOST, HOST:PORT) are of the namespace the host names when it is
//     a Kubernetes service's, NAME.NAMESPACE.svc.DOMAIN_SUFFIX (the form short hosts are
//     completed to);
//   - everything else is cluster-scoped, seen only by consumers of every namespace: the
//     per-port outbound listeners and route configurations (0.0.0.0_PORT, PORT), which hold
//     every namespace's hosts, and the resources of other hosts (api.example.com), which any
//     namespace's ServiceEntry may declare.
type Namespacer struct {
	// svcSuffix is ".svc." + the domain suffix.
	svcSuffix string
}

// NewNamespacer returns the Namespacer of a domain suffix ("" is DefaultDomainSuffix).
func NewNamespacer(domainSuffix string) Namespacer {
	if domainSuffix == "" {
		domainSuffix = DefaultDomainSuffix
	}
	return Namespacer{svcSuffix: ".svc." + domainSuffix}
}

// NamespaceOf returns the namespace of a resource of a derived collection, or namespaced
// false for a cluster-scoped one.
func (n Namespacer) NamespaceOf(name string) (namespace string, namespaced bool) {
	if ns, _, ok := strings.Cut(name, "/"); ok {
		if strings.Contains(ns, ".") {
			return "", false // a gateway class's: its Gateways may be of any namespace
		}
		return ns, true
	}
	host := name
	if rest, ok := strings.CutPrefix(name, "outbound|"); ok {
		i := strings.LastIndexByte(rest, '|')
		if i < 0 {
			return "", false
		}
		host = rest[i+1:]
	} else if i := strings.LastIndexByte(name, ':'); i >= 0 {
		host = name[:i] // an API listener, HOST:PORT
	}
	return n.hostNamespace(host)
}

// hostNamespace reads NAMESPACE from NAME.NAMESPACE.svc.SUFFIX.
func (n Namespacer) hostNamespace(host string) (string, bool) {
	head, ok := strings.CutSuffix(host, n.svcSuffix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(head, '.')
	if i <= 0 || i == len(head)-1 || strings.IndexByte(head[:i], '.') >= 0 {
		return "", false
	}
	return head[i+1:], true
}
