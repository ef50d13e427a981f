package xds

import (
	"bytes"
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/translate"
)

// VHDS, Envoy's virtual host discovery (translate/envoy vhds.go): a client whose node
// metadata says MCPBRIDGE_VHDS "true", on a v3 delta stream (Envoy takes VHDS over delta ADS
// alone), is served each port's route configuration PORT in its VHDS form (no virtual hosts,
// vhds over ADS), and the virtual hosts PORT/VHOST by subscription to the namespace PORT,
// each of them sent once and again only when it changes. The store keeps the VHDS form of a
// route configuration beside the whole one, as PORT@vhds; this stream asks for it and is
// sent it under the name PORT: its requests' port names are renamed (renameVHDSRoutes), and
// its responses' names back (restoreVHDSRouteNames), so that one store serves both forms to
// clients of either kind, each through the same listeners. Other clients are served as
// before: the whole route configuration, as istiod serves it.

// VHDSMetadataKey is the node metadata key by which a client asks for the virtual hosts of
// its route configurations on demand: "true" (a string, as Istio's agent writes metadata, or
// a bool).
const VHDSMetadataKey = "MCPBRIDGE_VHDS"

// virtualHostsOnDemand tells a node that asks for VHDS.
func virtualHostsOnDemand(md *structpb.Struct) bool {
	v := md.GetFields()[VHDSMetadataKey]
	return v.GetStringValue() == "true" || v.GetBoolValue()
}

// portOfRouteName is the port of a port's route configuration name (PORT, as
// envoy.OutboundRouteName writes it).
func portOfRouteName(n string) (uint32, bool) {
	if p, err := strconv.ParseUint(n, 10, 16); err == nil && p > 0 && n[0] != '0' {
		return uint32(p), true
	}
	return 0, false
}

// renameVHDSRoutes makes a VHDS stream's request for route configurations ask for the VHDS
// form of each port's (PORT@vhds); other names are left as they are. The request's lists are
// the stream's own (decoded for this request), renamed in place.
func renameVHDSRoutes(req *source.Request) {
	if resolve(req.Key).collection != RouteType {
		return
	}
	for _, names := range [][]string{req.Names, req.Subscribe, req.Unsubscribe} {
		for i, n := range names {
			if _, ok := portOfRouteName(n); ok {
				names[i] = translate.VHDSRouteName(n)
			}
		}
	}
	for n, v := range req.InitialVersions {
		if _, ok := portOfRouteName(n); ok {
			delete(req.InitialVersions, n)
			req.InitialVersions[translate.VHDSRouteName(n)] = v
		}
	}
}

// VHDSPortsOf are the ports whose VHDS outputs a request asks for: of a route configuration
// PORT@vhds (a VHDS stream's, renamed), or of the virtual hosts of PORT.
func VHDSPortsOf(req *source.Request) []uint32 {
	names := askedNames(req)
	var ports []uint32
	switch resolve(req.Key).collection {
	case RouteType:
		for _, n := range names {
			if route, ok := translate.VHDSRouteOf(n); ok {
				if p, ok := portOfRouteName(route); ok {
					ports = append(ports, p)
				}
			}
		}
	case VirtualHostType:
		for _, n := range names {
			if p, ok := portOfRouteName(n); ok {
				ports = append(ports, p)
			}
		}
	}
	return ports
}

func vhdsKey(port uint32) string { return "vhds " + strconv.FormatUint(uint64(port), 10) }

// newVHDSPorts are the ports whose VHDS outputs a request asks for that the stream does not
// hold yet (called under mu). A stream holds at most every port's: the set is bounded by the
// ports there are.
func (h *viewHold) newVHDSPorts(req *source.Request) []uint32 {
	var ports []uint32
	for _, p := range VHDSPortsOf(req) {
		if !h.vhdsPorts[p] {
			if h.vhdsPorts == nil {
				h.vhdsPorts = map[uint32]bool{}
			}
			h.vhdsPorts[p] = true
			ports = append(ports, p)
		}
	}
	return ports
}

// The fields of a delta response that name resources: DeltaDiscoveryResponse.resources
// (each a Resource, named by its name), removed_resources, resource_errors (each a
// ResourceError, whose resource_name is a ResourceName, named by its name); and its type URL.
// Read from the generated types.
var (
	deltaResourcesField = wire.FieldNumber(&discovery.DeltaDiscoveryResponse{}, "resources")
	deltaRemovedField   = wire.FieldNumber(&discovery.DeltaDiscoveryResponse{}, "removed_resources")
	deltaErrorsField    = wire.FieldNumber(&discovery.DeltaDiscoveryResponse{}, "resource_errors")
	deltaTypeURLField   = wire.FieldNumber(&discovery.DeltaDiscoveryResponse{}, "type_url")
	resourceNameField   = wire.FieldNumber(&discovery.Resource{}, "name")
	errorNameField      = wire.FieldNumber(&discovery.ResourceError{}, "resource_name")
	resourceNameName    = wire.FieldNumber(&discovery.ResourceName{}, "name")
	vhdsSuffix          = []byte(translate.VHDSRouteSuffix)
)

// restoreVHDSRouteNames renames, in a delta response to a VHDS stream, the route
// configurations PORT@vhds back to PORT, the names the client asked for; a response that
// names none is sent as it is (the shared frame). The bodies already carry PORT: the
// translation names the route configuration so.
func restoreVHDSRouteNames(f *wire.Frame) *wire.Frame {
	if typeURLOf(f.Body) != RouteType || !bytes.Contains(f.Body, vhdsSuffix) {
		return f // the other types' responses, at a million 410 MB at first, are not read
	}
	nameIn := func(field protowire.Number) func(protowire.Number, []byte) ([]byte, bool) {
		return func(num protowire.Number, v []byte) ([]byte, bool) {
			if num == field {
				return restoredName(v)
			}
			return nil, false
		}
	}
	body, ok := renameFields(f.Body, func(num protowire.Number, v []byte) ([]byte, bool) {
		switch num {
		case deltaRemovedField:
			return restoredName(v)
		case deltaResourcesField:
			return renameFields(v, nameIn(resourceNameField))
		case deltaErrorsField:
			return renameFields(v, func(num protowire.Number, v []byte) ([]byte, bool) {
				if num == errorNameField {
					return renameFields(v, nameIn(resourceNameName))
				}
				return nil, false
			})
		}
		return nil, false
	})
	if !ok {
		return f
	}
	if f.Buf != nil {
		f.Buf.Free() // the send's reference: the renamed body is a copy, with none to free
	}
	return &wire.Frame{Body: body, Tail: f.Tail}
}

// restoredName is PORT for PORT@vhds.
func restoredName(v []byte) ([]byte, bool) {
	if !bytes.HasSuffix(v, vhdsSuffix) {
		return nil, false
	}
	route, ok := translate.VHDSRouteOf(string(v))
	return []byte(route), ok
}

// typeURLOf reads a response body's type URL (the encoding writes it among its first
// fields; an unparsable body has none).
func typeURLOf(body []byte) string {
	for rest := body; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return ""
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return ""
		}
		if num == deltaTypeURLField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(rest[n:])
			return string(v)
		}
		rest = rest[n+m:]
	}
	return ""
}

// renameFields copies an encoded message, replacing the value of each length-delimited field
// for which rename returns one; ok is false when nothing was replaced, or the message does
// not parse (then it is left as it is).
func renameFields(msg []byte, rename func(num protowire.Number, v []byte) ([]byte, bool)) (out []byte, ok bool) {
	out = make([]byte, 0, len(msg))
	for rest := msg; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return nil, false
		}
		field := rest[:n+m]
		rest = rest[n+m:]
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(field[n:])
			if nv, renamed := rename(num, v); renamed {
				out = protowire.AppendTag(out, num, protowire.BytesType)
				out = protowire.AppendBytes(out, nv)
				ok = true
				continue
			}
		}
		out = append(out, field...)
	}
	return out, ok
}
