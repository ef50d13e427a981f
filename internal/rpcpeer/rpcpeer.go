// Package rpcpeer names the peer of a gRPC call, for logs, the debug views and identity by
// address: what the sink side and the source side both need of a peer, kept below both.
package rpcpeer

import (
	"context"

	"google.golang.org/grpc/peer"
)

// Addr is the address of the client of a server call or stream ("" when it has none).
func Addr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
