package xds

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/translate"
)

// ListenerView is the part of the listener collection a proxy is served when it subscribes to
// listeners by wildcard, chosen by Istio's node ID convention (TYPE~IP~ID~DOMAIN): a sidecar
// gets the outbound listeners (ADDRESS_PORT: 0.0.0.0_PORT, and the VIP_PORT ones of non-HTTP
// ports) and istiod's capture listeners virtualOutbound and virtualInbound, which hand them
// their connections; a gateway ("router") the listeners of its
// gateway class (gateway.CLASS/0.0.0.0_PORT: the merge of the Gateways whose selector its
// labels satisfy, see translate.GatewayClass); a proxyless gRPC client (Proxyless) under a
// sidecar's node ID the outbound listeners alone; any other node all of them but the capture
// listeners, which bind 15001 and 15006 for a sidecar's iptables capture alone (the API
// listeners among them are those of the hosts some client holds: translate/envoy
// SetProxylessHost). Without it an
// Envoy sidecar would also receive the API listeners meant for proxyless gRPC and the
// gateways' listeners, which bind the same ports. Proxyless gRPC clients ask for their API
// listener by name and are not affected. view names the part, for sharing responses between
// proxies of one kind.
func ListenerView(node source.Node) (view string, include func(name string) bool) {
	switch {
	case strings.HasPrefix(node.ID, "sidecar~") && Proxyless(node):
		return "sidecar-proxyless", isOutboundListener
	case strings.HasPrefix(node.ID, "sidecar~"):
		return "sidecar", func(name string) bool { return isOutboundListener(name) || isCaptureListener(name) }
	case isRouter(node.ID):
		prefix := translate.GatewayClassPrefix(GatewayClassOf(node).ID())
		return "router:" + prefix, func(name string) bool { return strings.HasPrefix(name, prefix) }
	}
	return "other", notCaptureListener
}

// ClusterView is the part of the cluster collection a proxy is served when it subscribes to
// clusters by wildcard: a gateway ("router") every cluster but istiod's passthrough clusters
// of a sidecar's capture (PassthroughCluster, InboundPassthroughCluster: istiod sends a
// gateway BlackHoleCluster alone of its plumbing); every other node all of them (no filter,
// so that the common case reads the collection whole).
func ClusterView(node source.Node) (view string, include func(name string) bool) {
	if isRouter(node.ID) {
		return "router", notCapturePassthrough
	}
	return "", nil
}

// notCapturePassthrough leaves out the clusters of a sidecar's capture that gateways do not
// get, by the names translate/envoy gives them (PassthroughClusterName,
// InboundPassthroughCluster; a test there holds the two together).
func notCapturePassthrough(name string) bool {
	return name != "PassthroughCluster" && name != "InboundPassthroughCluster"
}

// isCaptureListener tells istiod's listeners of a sidecar's traffic capture, by the names
// translate/envoy gives them (VirtualOutboundListenerName, VirtualInboundListenerName; a test
// there holds the two together).
func isCaptureListener(name string) bool {
	return name == "virtualOutbound" || name == "virtualInbound"
}

func notCaptureListener(name string) bool { return !isCaptureListener(name) }

func isRouter(nodeID string) bool { return strings.HasPrefix(nodeID, "router~") }

// GatewayClassOf is the gateway class of a gateway proxy's node: its labels, and the
// namespaces it narrows itself to.
func GatewayClassOf(node source.Node) translate.GatewayClass {
	return translate.GatewayClass{Labels: node.Labels, Namespaces: node.Namespaces}
}

// isOutboundListener tells an outbound listener's name, ADDRESS_PORT with an IP address
// (translate/envoy.OutboundListenerName and the VIP_PORT listeners of non-HTTP ports; a test
// there holds the two together), from an API listener's (HOST:PORT) and a gateway class's
// (gateway.CLASS/...).
func isOutboundListener(name string) bool {
	i := strings.LastIndexByte(name, '_')
	if i <= 0 {
		return false
	}
	if _, err := strconv.ParseUint(name[i+1:], 10, 16); err != nil {
		return false
	}
	_, err := netip.ParseAddr(name[:i])
	return err == nil
}

// Proxyless tells whether a node is a proxyless gRPC client as istiod tells it: node metadata
// GENERATOR "grpc", which Istio's agent writes into the gRPC bootstrap it generates. Such a
// client is served the clusters translate/envoy builds for gRPC
// (translate.EnvoyGRPCClusterCollection) in place of Envoy's, under the same names; the
// other types are the same for every client.
func Proxyless(node source.Node) bool {
	return node.Generator == "grpc"
}

// ScopeOf is the namespace whose view a node is served (ScopedCollection), as istiod
// tells a proxy's namespace: a sidecar's (Envoy or proxyless gRPC, node ID "sidecar~..."), from
// its metadata NAMESPACE, else from its ID (sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN).
// Gateways are served their class's view, and nodes of other IDs the mesh-wide one. A
// namespace that is no DNS label (RFC 1123, as Kubernetes names namespaces) gives none.
func ScopeOf(node source.Node) (namespace string, ok bool) {
	if !strings.HasPrefix(node.ID, "sidecar~") {
		return "", false
	}
	ns := node.Metadata.GetFields()["NAMESPACE"].GetStringValue()
	if ns == "" {
		parts := strings.Split(node.ID, "~")
		if len(parts) == 4 {
			_, ns, _ = strings.Cut(parts[2], ".")
		}
	}
	return ns, isDNSLabel(ns)
}

// isDNSLabel tells an RFC 1123 label: lower-case letters, digits and '-', at most 63, neither
// first nor last a '-'.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
