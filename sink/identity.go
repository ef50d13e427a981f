package sink

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/mcpbridge/mcpbridge/internal/authz"
)

// ProducerIDKey is the gRPC metadata key by which a producer names itself.
const ProducerIDKey = "mcp-producer-id"

// Owner ID prefixes; see the package documentation.
const (
	producerPrefix = "producer:"
	ipPrefix       = "ip:"
	upstreamPrefix = "upstream:"
)

// ProducerOwner returns the store owner ID of the producer on a stream: its mcp-producer-id,
// else its SPIFFE ID, else its IP address. It is deterministic, so a producer that
// reconnects gets the same ID and finds its own resources.
//
// bound (authz.rules are set) scopes an mcp-producer-id to the identity that sends it,
// "producer:IDENTITY#ID": any client may send any id, and an owner named by the id alone would
// let a second identity read the first's resource names and versions (the resumption's
// initial_resource_versions), plant resources under it that block the first's next full state,
// and spend its limits.resources_per_producer. Without rules (loopback development) the id
// alone names the owner, so that a producer's instances share one.
func ProducerOwner(ctx context.Context, bound bool) string {
	if id := metadataID(ctx); id != "" {
		if bound {
			who := authz.PeerIdentity(ctx)
			if who == "" {
				// Peers without a verified certificate are one identity: they share one rule's
				// rights, and no one of them can be told from another.
				who = authz.Unauthenticated
			}
			return producerPrefix + who + "#" + id
		}
		return producerPrefix + id
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ipPrefix + "unknown"
	}
	if id := spiffeID(p.AuthInfo); id != "" {
		return id
	}
	return ipPrefix + peerIP(p.Addr)
}

// PeerIdentity names the client of a stream for per-peer limits (limits.streams_per_peer):
// the SPIFFE ID of its client certificate when the TLS stack verified one, else its IP
// address without the port (a client's connections share it). Unlike ProducerOwner it takes
// neither mcp-producer-id, which any client may set, nor a certificate nobody verified
// (client_auth request), which anyone can make: either would let a client spend another's
// share, or escape its own.
func PeerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	if id := spiffeID(p.AuthInfo); id != "" {
		return id
	}
	return peerIP(p.Addr)
}

// UpstreamOwner returns the owner ID under which an Upstream dialling address stores what it
// receives.
func UpstreamOwner(address string) string { return upstreamPrefix + address }

// metadataID is the first non-blank mcp-producer-id value.
func metadataID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(ProducerIDKey) {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// spiffeID is the first spiffe URI SAN of the client certificate, only if the TLS stack
// verified it against the client CAs. A certificate can be present unverified (a server that
// only requests one, tls.RequestClientCert): anyone can make one naming any SPIFFE ID, and
// taking it as the producer's identity would let them write as that producer.
func spiffeID(auth credentials.AuthInfo) string {
	info, ok := auth.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	return authz.TLSIdentity(&info.State) // the leaf of a verified chain, as authorization reads it
}

// peerIP is the address without the port, IPv4-mapped IPv6 written as IPv4.
func peerIP(addr net.Addr) string {
	if addr == nil {
		return "unknown"
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
			return ip.Unmap().WithZone(tcp.Zone).String()
		}
	}
	if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}
