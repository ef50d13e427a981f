package envoy

import (
	"errors"
	"maps"
	"slices"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpbridge/mcpbridge/internal/parallel"
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
// has each host's virtual host encoded from what its unit holds (applyVHDSChanges), as the
// whole route configuration is gathered from them when first asked for.

// VHDSRouteName is the store's name of a port's route configuration for VHDS clients
// (translate.VHDSRouteName).
func VHDSRouteName(port uint32) string { return translate.VHDSRouteName(OutboundRouteName(port)) }

// VirtualHostName is the name of a virtual host of a route configuration in VHDS, and the
// virtual host's own: ROUTE/VHOST, as Envoy names VHDS resources.
func VirtualHostName(route, vhost string) string { return route + "/" + vhost }

// SetPortVirtualHosts starts (or stops) building a port's VHDS outputs from the next
// Translate: the port's, and each of its hosts' (applyVHDSChanges).
func (t *Translator) SetPortVirtualHosts(port uint32, on bool) {
	if !setMember(t.vhdsFor, port, on) {
		return
	}
	// The port's own unit alone: the route configuration PORT@vhds is the same for every
	// namespace, and the scopes' units of the port (their whole route configurations, where
	// built) do not change.
	t.mark(unitKey{unitPort, portKey(port)})
	t.vhdsChanged[port] = on
}

// applyVHDSChanges gives the hosts of each port whose VHDS outputs were started since the
// last Translate their virtual hosts of the port, and takes them from the hosts of each port
// whose VHDS outputs were stopped, from what each host's unit holds: no host is translated
// again (at a million hosts that took 13.5 s; this is an encoding of each virtual host, on
// every CPU). A host built in this Translate already has them as its build made them, or
// not. Ports and hosts go in order, as a build writes its delta.
func (t *Translator) applyVHDSChanges(delta *Delta) {
	for _, p := range slices.Sorted(maps.Keys(t.vhdsChanged)) {
		on, ps := t.vhdsChanged[p], t.ports[p]
		if ps == nil {
			continue
		}
		prefix := OutboundRouteName(p) + "/"
		hosts := slices.Collect(maps.Keys(ps.hosts))
		parallel.SortFunc(hosts, strings.Compare)
		if !on {
			for _, h := range hosts {
				if u := t.units.get(unitKey{unitHost, h}); u != nil {
					dropHostVirtualHosts(u, prefix, delta)
				}
			}
			continue
		}
		// Each host's outputs are made apart (reading the translator alone), and given to its
		// unit in order: a host's unit is written only once its own outputs are made.
		made := make([]hostVHDS, len(hosts))
		parallel.ForThen(len(hosts), vhdsPerWorker, vhdsChunk,
			func(i int) { made[i] = t.hostVirtualHosts(hosts[i], p, prefix) },
			func(i int) {
				if m := made[i]; m.b != nil {
					t.addHostVirtualHosts(m.u, m.b, delta)
				}
				made[i] = hostVHDS{}
			})
	}
	clear(t.vhdsChanged)
}

// A port of fewer hosts than parallel.ForThen pipelines is handed to each CPU by
// vhdsPerWorker hosts at least; a larger one in chunks of vhdsChunk, given to their units as
// each chunk is made.
const (
	vhdsPerWorker = 256
	vhdsChunk     = 1024
)

// hostVHDS is a host's unit and the build of its VHDS outputs of a port (hostVirtualHosts).
type hostVHDS struct {
	u *unitState
	b *build
}

// hostVirtualHosts makes a host's VHDS outputs of a port (prefix: its route configuration's
// name and "/") as its build makes them (putHostVirtualHosts, hidden from the scopes that do
// not see the host), into a build of their own; none when the host has no virtual host on the
// port, or its unit has them already. It reads the translator alone.
func (t *Translator) hostVirtualHosts(host string, p uint32, prefix string) hostVHDS {
	u := t.units.get(unitKey{unitHost, host})
	if u == nil {
		return hostVHDS{}
	}
	_, pv, ok := u.vhost(host, p)
	if !ok || slices.ContainsFunc(u.outputs, func(o output) bool { return isVirtualHostOf(o, prefix) }) {
		return hostVHDS{}
	}
	se, _ := t.serviceEntryFor(host)
	if se == nil {
		return hostVHDS{}
	}
	b := newBuild(t, kindServiceEntry, se.Key)
	b.putHostVirtualHosts(host, pv)
	b.hideFromScopes(host, se)
	return hostVHDS{u, b}
}

// addHostVirtualHosts gives a host's unit the VHDS outputs a build made (hostVirtualHosts),
// and writes them. A fault (a virtual host that cannot be encoded) is the unit's until its
// next build, once.
func (t *Translator) addHostVirtualHosts(u *unitState, b *build, delta *Delta) {
	u.outputs = append(u.outputs, b.u.outputs...)
	for _, o := range b.u.outputs {
		delta.Upserts[o.typeURL] = append(delta.Upserts[o.typeURL], o.enc)
	}
	for _, f := range b.fs {
		if !slices.Contains(u.faultList(), f) {
			u.rareState().faults = append(u.rareState().faults, f)
			t.faultsDirty = true
		}
	}
}

// dropHostVirtualHosts takes a port's VHDS outputs from a host's unit.
func dropHostVirtualHosts(u *unitState, prefix string, delta *Delta) {
	u.outputs = slices.DeleteFunc(u.outputs, func(o output) bool {
		if !isVirtualHostOf(o, prefix) {
			return false
		}
		if delta.Removed == nil {
			delta.Removed = map[string][]string{}
		}
		delta.Removed[o.typeURL] = append(delta.Removed[o.typeURL], o.enc.Name())
		return true
	})
}

// isVirtualHostOf tells a VHDS output of a route configuration (prefix: its name and "/"):
// its virtual host, or a namespace's, or the marker that hides it there.
func isVirtualHostOf(o output, prefix string) bool {
	if !strings.HasPrefix(o.enc.Name(), prefix) {
		return false
	}
	if ns, ok := translate.ScopeNamespace(o.typeURL); ok {
		return o.typeURL == translate.ScopeCollection(ns, VirtualHostType)
	}
	return o.typeURL == VirtualHostType
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
