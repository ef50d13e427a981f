package envoy

import (
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// gatewayChainConnectTimeout is istiod's transport_socket_connect_timeout of every gateway
// filter chain (PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT, 15s): a slow TLS handshake
// cannot hold a connection's memory for long.
const gatewayChainConnectTimeout = 15 * time.Second

// finishGatewayListener gives a gateway listener what istiod's buildGatewayListener gives
// every one: at most one connection accepted per socket event
// (MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP, 1) and the chains' transport socket connect
// timeout. Its traffic direction (OUTBOUND, as istiod's) and TLS inspector are set where it is
// built. No listener filter timeout is set: Envoy's default (15s) applies, as with istiod.
func finishGatewayListener(l *listenerpb.Listener) *listenerpb.Listener {
	l.MaxConnectionsToAcceptPerSocketEvent = wrapperspb.UInt32(1)
	for _, fc := range l.GetFilterChains() {
		fc.TransportSocketConnectTimeout = durationpb.New(gatewayChainConnectTimeout)
	}
	return l
}
