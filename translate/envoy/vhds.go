package envoy

import (
	"errors"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// VHDS, Envoy's virtual host discovery: a port's sidecar route configuration holds a virtual
// host for every HTTP host on the port (414 MB at a million services), sent whole to a
// client on every change of any host. A client that takes virtual hosts on demand (source/xds
// VirtualHostsOnDemand, over delta ADS alone, as Envoy requires) is served instead:
//
//   - the route configuration PORT without virtual hosts, with vhds over ADS and the same
//     settings (sidecarRouteSettings); the store keeps it as VHDSRouteName(PORT), "PORT@vhds",
//     beside the whole one, and source/xds serves it to such a client under its name PORT;
//     the port's unit builds it;
//   - each virtual host of the route configuration as a VirtualHost resource of its own,
//     PORT/VHOST (VirtualHostName; the virtual host is named so too, as Envoy drops a virtual
//     host by its name when told its resource is removed), in VirtualHostType: an output of
//     its host's unit, mesh-wide and in the overlays of the namespaces that see it otherwise
//     (its own namespace's local domains, a scope's VirtualService; hidden where the host is,
//     with the host's other outputs: hideFromScopes). A change of one host rebuilds and sends
//     its own virtual host, as its cluster, never the port's others.
//
// Envoy subscribes to the virtual hosts of PORT by the name PORT (the resources of that
// namespace: source.Type Namespaced), and is sent each of them, then each one that changes.
// Both are built, like the whole route configuration, only while a connected client asks for
// them (SetPortVirtualHosts, Controller.AcquirePortVirtualHosts): the first client to ask
// has the port's hosts built again (their other outputs come out the same, and are not
// written), as the whole route configuration is gathered when first asked for.

// VHDSRouteName is the store's name of a port's route configuration for VHDS clients
// (translate.VHDSRouteName).
func VHDSRouteName(port uint32) string { return translate.VHDSRouteName(OutboundRouteName(port)) }

// VirtualHostName is the name of a virtual host of a route configuration in VHDS, and the
// virtual host's own: ROUTE/VHOST, as Envoy names VHDS resources.
func VirtualHostName(route, vhost string) string { return route + "/" + vhost }

// SetPortVirtualHosts starts (or stops) building a port's VHDS outputs from the next
// Translate: the port's, and each of its hosts'.
func (t *Translator) SetPortVirtualHosts(port uint32, on bool) {
	if !setMember(t.vhdsFor, port, on) {
		return
	}
	t.markPort(port)
	if ps := t.ports[port]; ps != nil {
		for h := range ps.hosts {
			t.mark(unitKey{unitHost, h})
		}
	}
}

// vhdsBuilt tells whether a port's VHDS outputs are built.
func (t *Translator) vhdsBuilt(port uint32) bool {
	_, ok := t.vhdsFor[port]
	return ok
}

// vhdsSource is where a VHDS client takes the virtual hosts: the stream it reads its route
// configurations from (ADS), in v3.
var vhdsSource = &routepb.Vhds{ConfigSource: &corepb.ConfigSource{
	ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
	ResourceApiVersion:    corepb.ApiVersion_V3,
}}

// putVHDSRoute adds a port's route configuration for VHDS clients (mesh-wide: it has no
// virtual hosts, so every namespace sees the same).
func (b *build) putVHDSRoute(p uint32) {
	rc := envoyRouteConfiguration(OutboundRouteName(p), nil)
	rc.Vhds = vhdsSource
	name := VHDSRouteName(p)
	if err := rc.ValidateAll(); err != nil {
		b.invalid("RouteConfiguration", name, err)
		return
	}
	enc, err := store.EncodeBody(name, RouteType, deterministic.Size(rc), func(out []byte) ([]byte, error) {
		return deterministic.MarshalAppend(out, rc)
	})
	if err != nil {
		b.invalid("RouteConfiguration", name, err)
		return
	}
	b.u.set(output{RouteType, enc})
}

// putHostVirtualHosts adds a host's VHDS virtual host of a port (its sidecar virtual host,
// as the port's route configuration gathers it): mesh-wide, and for each namespace that sees
// it otherwise, as buildScopedPort assembles that namespace's route configuration: the local
// head in the host's own namespace (where its scope is built), a scope's own rest where the
// VirtualService that routes the host is not exported to it.
func (b *build) putHostVirtualHosts(host string, pv *portVhost) {
	route := OutboundRouteName(pv.port)
	mesh := vhostParts{head: pv.sidecar, tail: pv.own}
	if pv.defaultRoute {
		mesh.dflt = defaultTail{host: host, port: pv.port}
	}
	b.putVirtualHostIn(VirtualHostType, route, mesh)
	own := hostNamespace(host, b.t.suffix)
	if local := pv.local(); local != nil {
		vh := mesh
		vh.head = local
		if rest := pv.variantFor(own); rest != nil {
			vh.tail, vh.dflt = rest, defaultTail{}
		}
		b.putVirtualHostIn(translate.ScopeCollection(own, VirtualHostType), route, vh)
	}
	for _, v := range pv.variants() {
		if v.namespace == own && pv.local() != nil {
			continue // with its local head, above
		}
		vh := mesh
		vh.tail, vh.dflt = v.sidecar, defaultTail{}
		b.putVirtualHostIn(translate.ScopeCollection(v.namespace, VirtualHostType), route, vh)
	}
}

// putVirtualHostIn adds a virtual host of a route configuration as a VHDS resource, in a
// collection, renamed ROUTE/VHOST: its encoding is the name, then the rest of its bytes as the
// port's route configuration holds them (each virtual host was validated when its host was
// built).
func (b *build) putVirtualHostIn(collection, route string, vh vhostParts) {
	vhost, rest, err := splitVirtualHostName(vh.head)
	if err != nil {
		b.invalid("VirtualHost", route+"/?", err)
		return
	}
	name := VirtualHostName(route, vhost)
	body := vhostParts{head: rest, tail: vh.tail, dflt: vh.dflt}
	size := protowire.SizeTag(virtualHostNameField) + protowire.SizeBytes(len(name)) + body.size()
	enc, err := store.EncodeBody(name, VirtualHostType, size, func(out []byte) ([]byte, error) {
		out = protowire.AppendTag(out, virtualHostNameField, protowire.BytesType)
		out = protowire.AppendString(out, name)
		return body.appendTo(out), nil
	})
	if err != nil {
		b.invalid("VirtualHost", name, err)
		return
	}
	b.u.set(output{collection, enc})
}

// splitVirtualHostName reads the name at the head of a virtual host's encoding (a
// deterministic encoding writes it first, as field 1) and returns it and the bytes after it.
func splitVirtualHostName(head []byte) (name string, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(head)
	if n < 0 || num != virtualHostNameField || typ != protowire.BytesType {
		return "", nil, errors.New("the virtual host's encoding does not begin with its name")
	}
	v, m := protowire.ConsumeBytes(head[n:])
	if m < 0 {
		return "", nil, protowire.ParseError(m)
	}
	return string(v), head[n+m:], nil
}
