package xds

import "strings"

// ListenerView is the part of the listener collection a proxy is served when it subscribes to
// listeners by wildcard, chosen by Istio's node ID convention (TYPE~IP~ID~DOMAIN): a sidecar
// gets the outbound listeners (0.0.0.0_PORT), a gateway ("router") the gateway listeners
// (NS/NAME/0.0.0.0_PORT), any other node all of them. Without it an Envoy sidecar would also
// receive the API listeners meant for proxyless gRPC and the gateways' listeners, which bind
// the same ports. Proxyless gRPC clients ask for their API listener by name and are not
// affected. view names the part, for sharing responses between proxies of one kind.
func ListenerView(nodeID string) (view string, include func(name string) bool) {
	switch {
	case strings.HasPrefix(nodeID, "sidecar~"):
		return "sidecar", isOutboundListener
	case strings.HasPrefix(nodeID, "router~"):
		return "router", isGatewayListener
	}
	return "", nil
}

func isOutboundListener(name string) bool { return strings.HasPrefix(name, outboundPrefix) }

func isGatewayListener(name string) bool { return strings.Contains(name, "/"+outboundPrefix) }

// outboundPrefix starts every outbound listener name (translate/envoy.OutboundListenerName; a test there holds the two together).
const outboundPrefix = "0.0.0.0_"
