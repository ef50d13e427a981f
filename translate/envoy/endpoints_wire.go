package envoy

import (
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpbridge/mcpbridge/store"
)

// A load assignment is the translation's most frequent output (every endpoint change makes
// one) and its largest by count: at 100,000 hosts, building its messages, sizing and
// marshalling them (sorting each endpoint's label maps on the way) was a third of the
// translation's CPU. encodeLoadAssignment writes the very bytes deterministic marshalling
// gives for the message loadAssignment builds, field by field, without building it;
// TestLoadAssignmentEncodingIsTheMarshalledMessage holds it to that on random endpoints.
//
// Field numbers, as envoy.config.endpoint.v3 and envoy.config.core.v3 define them (checked
// against the descriptors by TestLoadAssignmentFieldNumbers). Fields go in protobuf-go's
// order: by number, except that the members of a oneof come after the other fields.
const (
	claClusterName = 1 // ClusterLoadAssignment
	claEndpoints   = 2
	lleLocality    = 1 // LocalityLbEndpoints
	lleLbEndpoints = 2
	lleWeight      = 3
	localityRegion = 1 // Locality
	localityZone   = 2
	localitySub    = 3
	lbeEndpoint    = 1 // LbEndpoint
	lbeWeight      = 4
	endpointAddr   = 1 // Endpoint
	addressSocket  = 1 // Address
	socketAddr     = 2 // SocketAddress
	socketPort     = 3
	wrapperValue   = 1 // google.protobuf.UInt32Value
)

// encodeLoadAssignment encodes loadAssignment(name, eps). It reports false, encoding nothing,
// for endpoints it does not vouch for: a string that is not UTF-8 (marshalling fails), an
// empty name or address or a port over 65535 (validation fails); the caller then builds and
// validates the message, which reports what is wrong.
func encodeLoadAssignment(name string, eps []endpoint) (store.Encoded, bool) {
	if name == "" || !utf8.ValidString(name) {
		return store.Encoded{}, false
	}
	// The endpoints and their groups are read only while encoding: room for most hosts' on
	// the stack (two lists a host, garbage at once, a million hosts).
	var lbRoom [4]wireEndpoint
	lbs := lbRoom[:0]
	if len(eps) > len(lbRoom) {
		lbs = make([]wireEndpoint, 0, len(eps))
	}
	for _, ep := range eps {
		if !encodable(ep) {
			return store.Encoded{}, false
		}
		lbs = append(lbs, newWireEndpoint(ep))
	}
	var one [1]localityGroup
	var groups []localityGroup
	if g, ok := oneLocality(lbs); ok {
		one[0] = g
		groups = one[:]
	} else {
		groups = localityGroups(lbs) // several localities: groups of copies, on the heap
	}
	size := stringField(claClusterName, name)
	for i := range groups {
		size += messageField(claEndpoints, groups[i].size)
	}
	enc, err := store.EncodeBody(name, EndpointType, size, func(b []byte) ([]byte, error) {
		b = appendStringField(b, claClusterName, name)
		for i := range groups {
			b = groups[i].append(appendTagLen(b, claEndpoints, groups[i].size))
		}
		return b, nil
	})
	return enc, err == nil
}

// encodable reports whether the direct encoding vouches for an endpoint (see
// encodeLoadAssignment).
func encodable(ep endpoint) bool {
	return ep.address != "" && ep.port <= 65535 && utf8.ValidString(ep.address) && utf8.ValidString(ep.locality)
}

// wireEndpoint is one endpoint with the size of its encoding computed once.
type wireEndpoint struct {
	endpoint
	size int
}

func newWireEndpoint(ep endpoint) wireEndpoint {
	return wireEndpoint{endpoint: ep, size: messageField(lbeEndpoint, endpointSize(ep)) + messageField(lbeWeight, uint32Size(max(ep.weight, 1)))}
}

// localityGroup is one LocalityLbEndpoints: loadAssignment groups endpoints by locality,
// localities in order, endpoints in the order given.
type localityGroup struct {
	locality string
	eps      []wireEndpoint
	weight   uint32
	size     int
}

// localityGroups groups endpoints of several localities (oneLocality takes one), each group
// a copy of its endpoints, groups in order of locality.
func localityGroups(eps []wireEndpoint) []localityGroup {
	var groups []localityGroup
	for _, ep := range eps {
		i := slices.IndexFunc(groups, func(g localityGroup) bool { return g.locality == ep.locality })
		if i < 0 {
			groups = append(groups, localityGroup{locality: ep.locality})
			i = len(groups) - 1
		}
		groups[i].eps = append(groups[i].eps, ep)
		groups[i].weight += max(ep.weight, 1)
	}
	slices.SortFunc(groups, func(a, b localityGroup) int { return strings.Compare(a.locality, b.locality) })
	for i := range groups {
		groups[i].sized()
	}
	return groups
}

// oneLocality is the group of eps when they all have one locality, as most hosts' endpoints
// do: eps itself, not a copy. False for none, or more than one locality.
func oneLocality(eps []wireEndpoint) (localityGroup, bool) {
	if len(eps) == 0 || slices.ContainsFunc(eps[1:], func(ep wireEndpoint) bool { return ep.locality != eps[0].locality }) {
		return localityGroup{}, false
	}
	g := localityGroup{locality: eps[0].locality, eps: eps}
	for _, ep := range eps {
		g.weight += max(ep.weight, 1)
	}
	g.sized()
	return g, true
}

// sized sets the size of the group's encoding.
func (g *localityGroup) sized() {
	g.size = messageField(lleLocality, localitySize(g.locality)) + messageField(lleWeight, uint32Size(g.weight))
	for _, ep := range g.eps {
		g.size += messageField(lleLbEndpoints, ep.size)
	}
}

func (g *localityGroup) append(b []byte) []byte {
	b = appendLocality(appendTagLen(b, lleLocality, localitySize(g.locality)), g.locality)
	for i := range g.eps {
		b = g.eps[i].append(appendTagLen(b, lleLbEndpoints, g.eps[i].size))
	}
	return appendUint32(appendTagLen(b, lleWeight, uint32Size(g.weight)), g.weight)
}

// localityParts reads Istio's "region/zone/subzone", as parseLocality does.
func localityParts(s string) (region, zone, sub string) {
	region, rest, _ := strings.Cut(s, "/")
	zone, sub, _ = strings.Cut(rest, "/")
	return region, zone, sub
}

func localitySize(s string) int {
	r, z, sz := localityParts(s)
	return stringField(localityRegion, r) + stringField(localityZone, z) + stringField(localitySub, sz)
}

func appendLocality(b []byte, s string) []byte {
	r, z, sz := localityParts(s)
	b = appendStringField(b, localityRegion, r)
	b = appendStringField(b, localityZone, z)
	return appendStringField(b, localitySub, sz)
}

// append writes the fields in the order protobuf-go marshals them: by number, but the
// members of a oneof (the endpoint, in host_identifier) after the other fields.
func (l *wireEndpoint) append(b []byte) []byte {
	w := max(l.weight, 1)
	b = appendUint32(appendTagLen(b, lbeWeight, uint32Size(w)), w)
	return appendEndpoint(appendTagLen(b, lbeEndpoint, endpointSize(l.endpoint)), l.endpoint)
}

// socketSize is the size of the SocketAddress: the address and the port, which is in a oneof
// and so written even when 0.
func socketSize(address string, port uint32) int {
	return stringField(socketAddr, address) + protowire.SizeTag(socketPort) + protowire.SizeVarint(uint64(port))
}

func endpointSize(ep endpoint) int {
	return messageField(endpointAddr, addressSize(ep.address, ep.port))
}

func appendEndpoint(b []byte, ep endpoint) []byte {
	b = appendTagLen(b, endpointAddr, addressSize(ep.address, ep.port))
	return appendAddress(b, ep.address, ep.port)
}

// addressSize is the size of an envoy.config.core.v3.Address of a socket address.
func addressSize(address string, port uint32) int {
	return messageField(addressSocket, socketSize(address, port))
}

// appendAddress appends the fields of an Address of a socket address (addressSize bytes),
// the port a oneof's, written even when 0.
func appendAddress(b []byte, address string, port uint32) []byte {
	b = appendTagLen(b, addressSocket, socketSize(address, port))
	b = appendStringField(b, socketAddr, address)
	b = protowire.AppendTag(b, socketPort, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(port))
}

func uint32Size(v uint32) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(wrapperValue) + protowire.SizeVarint(uint64(v))
}

func appendUint32(b []byte, v uint32) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, wrapperValue, protowire.VarintType), uint64(v))
}

// stringField is the size of a string field that proto3 leaves out when empty.
func stringField(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return mapStringField(num, s)
}

// mapStringField is the size of a string written even when empty.
func mapStringField(num protowire.Number, s string) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

// messageField is the size of a message field of n bytes (written even when empty: set).
func messageField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendTagLen(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}
