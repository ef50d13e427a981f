package linkerd

import (
	"encoding/binary"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/mcpbridge/mcpbridge/api/linkerd/destination"
	netpb "github.com/mcpbridge/mcpbridge/api/linkerd/net"
	"github.com/mcpbridge/mcpbridge/internal/wire"
)

// api is a dialect of the Destination service. Their Get messages are the same on the wire
// (same field numbers), but for what today's API added: the TLS identity.
type api uint8

const (
	apiLinkerd api = iota // io.linkerd.proxy.destination
	apiConduit            // conduit.proxy.destination, the seed's
	apiCount
)

// keepalive is the empty `add` sent when nothing changed for an interval: Update{add: {}}.
var keepalive = &wire.Frame{Body: []byte{0x0a, 0x00}}

// snapshot is one published answer of an authority, with the encoded updates that take a
// client from an earlier snapshot to it. Every stream of the authority at the same earlier
// snapshot shares them: they are encoded once, by the first stream that needs them.
type snapshot struct {
	version uint64 // 1, 2, ... per authority
	answer  *answer
	changed time.Time // the store write it follows, for the push latency

	mu sync.Mutex
	// diffs holds the encoded updates from the previous snapshot (and from none, for a
	// fresh subscription), per API; other origins (a stream that missed a snapshot) are
	// encoded each time, rarely.
	fromPrev, fromNone [apiCount][]*wire.Frame
	prev               *snapshot      // the snapshot before, until its diffs are made
	encodes            *atomic.Uint64 // the hub's count of encodings, for tests and benchmarks
}

// updatesFrom returns the updates that take a client holding from (nil: a fresh
// subscription) to s, encoded for an API.
func (s *snapshot) updatesFrom(from *snapshot, a api) []*wire.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	var slot *[]*wire.Frame
	switch {
	case from == nil:
		slot = &s.fromNone[a]
	case from == s.prev:
		slot = &s.fromPrev[a]
	}
	if slot != nil && *slot != nil {
		return *slot
	}
	var fromAnswer *answer
	if from != nil {
		fromAnswer = from.answer
	}
	frames := encode(diff(fromAnswer, s.answer), a)
	if s.encodes != nil {
		s.encodes.Add(1)
	}
	if slot != nil {
		*slot = frames
	}
	return frames
}

// diff is the updates that take a client from one answer (nil: none yet, a fresh
// subscription) to the next, following the seed:
//   - a service that does not exist: no_endpoints{exists: false}, when it did or on a fresh
//     subscription;
//   - one without endpoints: no_endpoints{exists: true} (which also removes every address),
//     unless the client already knows it so;
//   - one with endpoints: an `add` of the addresses that are new or changed (all of them on a
//     fresh subscription or after no_endpoints), then a `remove` of those that went. So the
//     first message of a fresh subscription to a service with endpoints is the `add`, never
//     a no_endpoints before it, and the client never holds an empty set in between.
func diff(from, to *answer) []*pb.Update {
	switch {
	case !to.exists:
		if from != nil && !from.exists {
			return nil
		}
		return []*pb.Update{noEndpoints(false)}
	case len(to.endpoints) == 0:
		if from != nil && from.exists && len(from.endpoints) == 0 {
			return nil
		}
		return []*pb.Update{noEndpoints(true)}
	}
	if from == nil || len(from.endpoints) == 0 {
		return []*pb.Update{add(to, to.endpoints)}
	}
	// The set's labels and the identity go with every address: when they change, every
	// address is sent again.
	all := !from.sameIdentity(to) || !maps.Equal(from.labels, to.labels)
	var added []endpoint
	var removed []*netpb.TcpAddress
	i, j := 0, 0
	for i < len(from.endpoints) || j < len(to.endpoints) {
		switch {
		case j == len(to.endpoints) || i < len(from.endpoints) && from.endpoints[i].addr.Compare(to.endpoints[j].addr) < 0:
			removed = append(removed, tcpAddress(&from.endpoints[i]))
			i++
		case i == len(from.endpoints) || to.endpoints[j].addr.Compare(from.endpoints[i].addr) < 0:
			added = append(added, to.endpoints[j])
			j++
		default:
			if all || !from.endpoints[i].equal(&to.endpoints[j]) {
				added = append(added, to.endpoints[j])
			}
			i++
			j++
		}
	}
	var out []*pb.Update
	if len(added) > 0 {
		out = append(out, add(to, added))
	}
	if len(removed) > 0 {
		out = append(out, &pb.Update{Update: &pb.Update_Remove{Remove: &pb.AddrSet{Addrs: removed}}})
	}
	return out
}

func noEndpoints(exists bool) *pb.Update {
	return &pb.Update{Update: &pb.Update_NoEndpoints{NoEndpoints: &pb.NoEndpoints{Exists: exists}}}
}

func add(a *answer, eps []endpoint) *pb.Update {
	set := &pb.WeightedAddrSet{MetricLabels: a.labels}
	for i := range eps {
		set.Addrs = append(set.Addrs, &pb.WeightedAddr{
			Addr: tcpAddress(&eps[i]), Weight: eps[i].weight, MetricLabels: eps[i].labels,
			TlsIdentity: tlsIdentity(a.identity),
		})
	}
	return &pb.Update{Update: &pb.Update_Add{Add: set}}
}

func tlsIdentity(id *identity) *pb.TlsIdentity {
	if id == nil {
		return nil
	}
	out := &pb.TlsIdentity{ServerName: &pb.TlsIdentity_DnsLikeIdentity{Name: id.serverName}}
	if id.uri != "" {
		out.Strategy = &pb.TlsIdentity_UriLikeIdentity_{UriLikeIdentity: &pb.TlsIdentity_UriLikeIdentity{Uri: id.uri}}
	} else {
		out.Strategy = &pb.TlsIdentity_DnsLikeIdentity_{DnsLikeIdentity: &pb.TlsIdentity_DnsLikeIdentity{Name: id.dns}}
	}
	return out
}

func tcpAddress(e *endpoint) *netpb.TcpAddress {
	ip := e.addr.Addr()
	out := &netpb.TcpAddress{Port: uint32(e.addr.Port())}
	if ip.Is4() {
		b := ip.As4()
		out.Ip = &netpb.IPAddress{Ip: &netpb.IPAddress_Ipv4{Ipv4: binary.BigEndian.Uint32(b[:])}}
	} else {
		b := ip.As16()
		out.Ip = &netpb.IPAddress{Ip: &netpb.IPAddress_Ipv6{Ipv6: &netpb.IPv6{
			First: binary.BigEndian.Uint64(b[:8]), Last: binary.BigEndian.Uint64(b[8:]),
		}}}
	}
	return out
}

// encode marshals updates for an API. The seed's conduit messages are today's without the
// TLS identity (WeightedAddr field 5), which its clients do not know: it is left out for them,
// so each gets exactly its own message.
func encode(updates []*pb.Update, a api) []*wire.Frame {
	out := make([]*wire.Frame, 0, len(updates))
	for _, u := range updates {
		if a == apiConduit {
			if set := u.GetAdd(); set != nil && hasIdentity(set) {
				u = proto.Clone(u).(*pb.Update)
				for _, w := range u.GetAdd().GetAddrs() {
					w.TlsIdentity = nil
				}
			}
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(u)
		if err != nil {
			panic("linkerd: marshalling an update: " + err.Error()) // only valid messages are built
		}
		out = append(out, &wire.Frame{Body: b})
	}
	return out
}

func hasIdentity(set *pb.WeightedAddrSet) bool {
	for _, w := range set.GetAddrs() {
		if w.TlsIdentity != nil {
			return true
		}
	}
	return false
}
