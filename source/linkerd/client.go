package linkerd

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strconv"

	"google.golang.org/grpc"

	conduitcommon "github.com/mcpbridge/mcpbridge/api/linkerd/conduit/common"
	conduitpb "github.com/mcpbridge/mcpbridge/api/linkerd/conduit/destination"
	pb "github.com/mcpbridge/mcpbridge/api/linkerd/destination"
	netpb "github.com/mcpbridge/mcpbridge/api/linkerd/net"
)

// Update is one message of a Destination.Get stream, as `mcpbridge watch --linkerd` prints it
// and the tests read it, whichever package it came in.
type Update struct {
	// Kind is "add", "remove" or "no_endpoints".
	Kind string `json:"kind"`
	// Exists is no_endpoints' exists.
	Exists       bool              `json:"exists,omitempty"`
	MetricLabels map[string]string `json:"metricLabels,omitempty"`
	Addrs        []Addr            `json:"addrs,omitempty"`
}

// Addr is one address of an add or a remove.
type Addr struct {
	Addr         string            `json:"addr"` // ip:port
	Weight       uint32            `json:"weight,omitempty"`
	MetricLabels map[string]string `json:"metricLabels,omitempty"`
	// TLSIdentity is the identity's URI or DNS-like name, ServerName its SNI (today's API only).
	TLSIdentity string `json:"tlsIdentity,omitempty"`
	ServerName  string `json:"serverName,omitempty"`
	// UnknownFields counts the bytes of fields the client's message does not define (a
	// conduit client receiving today's TLS identity would have them): for tests.
	UnknownFields int `json:"-"`
}

// Get opens a Destination.Get stream for a path (host:port), with today's package
// (io.linkerd.proxy.destination) or, conduit set, the seed's (conduit.proxy.destination), and
// returns its receive function.
func Get(ctx context.Context, conn grpc.ClientConnInterface, conduit bool, path string) (func() (*Update, error), error) {
	if conduit {
		stream, err := conduitpb.NewDestinationClient(conn).Get(ctx, &conduitcommon.Destination{Scheme: "k8s", Path: path})
		if err != nil {
			return nil, err
		}
		return func() (*Update, error) {
			m, err := stream.Recv()
			if err != nil {
				return nil, err
			}
			return fromConduit(m), nil
		}, nil
	}
	stream, err := pb.NewDestinationClient(conn).Get(ctx, &pb.GetDestination{Scheme: "k8s", Path: path})
	if err != nil {
		return nil, err
	}
	return func() (*Update, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		return fromLinkerd(m), nil
	}, nil
}

func fromLinkerd(m *pb.Update) *Update {
	switch u := m.GetUpdate().(type) {
	case *pb.Update_Add:
		out := &Update{Kind: "add", MetricLabels: u.Add.GetMetricLabels()}
		for _, w := range u.Add.GetAddrs() {
			a := Addr{Addr: addrString(w.GetAddr().GetIp().GetIpv4(), w.GetAddr().GetIp().GetIpv6(), w.GetAddr().GetPort()),
				Weight: w.GetWeight(), MetricLabels: w.GetMetricLabels()}
			if id := w.GetTlsIdentity(); id != nil {
				a.TLSIdentity = id.GetDnsLikeIdentity().GetName() + id.GetUriLikeIdentity().GetUri()
				a.ServerName = id.GetServerName().GetName()
			}
			out.Addrs = append(out.Addrs, a)
		}
		return out
	case *pb.Update_Remove:
		out := &Update{Kind: "remove"}
		for _, t := range u.Remove.GetAddrs() {
			out.Addrs = append(out.Addrs, Addr{Addr: addrString(t.GetIp().GetIpv4(), t.GetIp().GetIpv6(), t.GetPort())})
		}
		return out
	case *pb.Update_NoEndpoints:
		return &Update{Kind: "no_endpoints", Exists: u.NoEndpoints.GetExists()}
	}
	return &Update{Kind: "unknown"}
}

func fromConduit(m *conduitpb.Update) *Update {
	switch u := m.GetUpdate().(type) {
	case *conduitpb.Update_Add:
		out := &Update{Kind: "add", MetricLabels: u.Add.GetMetricLabels()}
		for _, w := range u.Add.GetAddrs() {
			ip := w.GetAddr().GetIp()
			out.Addrs = append(out.Addrs, Addr{Addr: addrString(ip.GetIpv4(), conduitIPv6(ip.GetIpv6()), w.GetAddr().GetPort()),
				Weight: w.GetWeight(), MetricLabels: w.GetMetricLabels(), UnknownFields: len(w.ProtoReflect().GetUnknown())})
		}
		return out
	case *conduitpb.Update_Remove:
		out := &Update{Kind: "remove"}
		for _, t := range u.Remove.GetAddrs() {
			out.Addrs = append(out.Addrs, Addr{Addr: addrString(t.GetIp().GetIpv4(), conduitIPv6(t.GetIp().GetIpv6()), t.GetPort())})
		}
		return out
	case *conduitpb.Update_NoEndpoints:
		return &Update{Kind: "no_endpoints", Exists: u.NoEndpoints.GetExists()}
	}
	return &Update{Kind: "unknown"}
}

func conduitIPv6(v *conduitcommon.IPv6) *netpb.IPv6 {
	if v == nil {
		return nil
	}
	return &netpb.IPv6{First: v.GetFirst(), Last: v.GetLast()}
}

func addrString(v4 uint32, v6 *netpb.IPv6, port uint32) string {
	var ip netip.Addr
	if v6 != nil {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], v6.GetFirst())
		binary.BigEndian.PutUint64(b[8:], v6.GetLast())
		ip = netip.AddrFrom16(b)
	} else {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v4)
		ip = netip.AddrFrom4(b)
	}
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// String is the address list of an update, for messages.
func (u *Update) String() string {
	s := u.Kind
	if u.Kind == "no_endpoints" {
		return s + "{exists: " + strconv.FormatBool(u.Exists) + "}"
	}
	for _, a := range u.Addrs {
		s += " " + a.Addr
	}
	return s
}
