package envoy

import (
	"bytes"
	"cmp"
	"iter"
	"maps"
	"math/bits"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/mcpbridge/mcpbridge/internal/parallel"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// Translator turns Istio config into Envoy resources, incrementally. It is the pure layer
// under the Controller: no store, no goroutines, no clock. Feed it changes with Update, then
// call Translate to get what changed in the outputs. It is not safe for concurrent use.
//
// The unit of work is the host: a change marks the hosts it touches (and the gateways and
// ports whose outputs embed them), and Translate recomputes only those. A host's outputs
// are its clusters, load assignments, route configurations and API listeners; a port's are
// the outbound listener and route configuration that gather the virtual hosts of every host
// on that port; a gateway's are its listeners and route configurations.
//
// Dependencies between hosts are recorded as they are read: when host A's routes look up
// host B (to check a destination's port or subset, or to take B's consistent hash policy),
// a later change to B's ServiceEntry or DestinationRule recomputes A too.
type Translator struct {
	suffix string

	ses map[string]*serviceEntry
	vss map[string]*virtualService
	drs map[string]*destinationRule
	gws map[string]*gateway
	wes map[string]*workloadEntry

	seByHost      hostSEs            // host as written → ServiceEntries that list it
	seByVIP       map[string]keyList // address (serviceEntry.vip) → ServiceEntries whose hosts answer to it
	vsByHost      map[string]keyList // completed host → VirtualServices that list it
	vsWildcard    keySet             // VirtualServices with a wildcard host
	drByHost      map[string]keyList // completed host → DestinationRules for it
	drWildcard    keySet             // DestinationRules for a wildcard host
	vsByGateway   map[string]keyList // gateway key → VirtualServices bound to it
	weByNamespace map[string]keySet
	selectorsByNS map[string]keyList // namespace → ServiceEntries with a workloadSelector
	// classes are the gateway classes whose outputs are built, by ID (SetGatewayClass).
	classes map[string]translate.GatewayClass

	// dependents maps what a unit read to the units that read it, from their last build.
	dependents map[depKey]map[unitKey]struct{}
	units      unitTable
	ports      map[uint32]*portState // port → what its outbound route configuration gathers
	// loading counts, during a Translate that records many hosts, their host units and those
	// recorded so far, by which a port's map of hosts is sized as it fills (reservePortHosts).
	loading struct{ hosts, recorded int }
	// dirty are the units to build again, but for hosts' and their endpoints' units, which
	// are in dirtyHosts: a bit each, one entry a host, so that a full load's million hosts
	// are a million entries, not two, and sorted once for both kinds (dirtyHostUnits).
	dirty      map[unitKey]struct{}
	dirtyHosts map[string]hostUnits
	// inputFaults are faults of resources that could not be read at all, by "Kind/namespace/name".
	inputFaults map[string]Fault
	// fieldFaults name the fields of an input the translation does not honour, by
	// "Kind/namespace/name" (untranslated.go).
	fieldFaults map[string]Fault

	// faults is the sorted list of every unit's faults, recomputed only after a build
	// changed some (faultsDirty).
	faults      []Fault
	faultsDirty bool

	// tcpBinds are the outbound listeners that non-HTTP ports bind, by listener name, with the
	// hosts whose filter chains each gathers (tcplisteners.go).
	tcpBinds map[string]*tcpBindState

	// outboundPolicy is where sidecars send destinations the mesh does not know (sidecar.go).
	outboundPolicy OutboundTrafficPolicy

	// scopes are the namespaces whose proxies' views are built (SetScope, scope.go).
	scopes keySet
	// proxyless tells whether the outputs only proxyless gRPC clients read are built for every
	// host: their clusters, API listeners and per-host route configurations (SetProxyless,
	// grpccluster.go); proxylessHosts, the hosts they are built for besides
	// (SetProxylessHost).
	proxyless      bool
	proxylessHosts keySet
	// portRoutes tells whether every port's outbound route configuration (PORT, mesh-wide and
	// as each scope sees it) is built; portRoutesFor, the ports it is built for besides
	// (SetPortRoute, portroutes.go).
	portRoutes    bool
	portRoutesFor map[uint32]struct{}
	// vhdsFor are the ports whose VHDS outputs are built (SetPortVirtualHosts, vhds.go);
	// vhdsChanged, those started (true) or stopped since the last Translate.
	vhdsFor     map[uint32]struct{}
	vhdsChanged map[uint32]bool
	// sidecars are the Sidecars, by key; limitedExports counts the ServiceEntries whose
	// exportTo leaves some namespace out, limitedSEs are their keys, limitedVSExports and
	// limitedVSs the VirtualServices' (scope.go).
	sidecars         map[string]*sidecar
	limitedExports   int
	limitedSEs       keySet
	limitedVSExports int
	limitedVSs       keySet
	// narrowed are the scopes whose namespace a Sidecar narrows, sorted, and narrowing that
	// Sidecar of each: computed as a Translate starts, read by the builds (scope.go).
	narrowed  []string
	narrowing map[string]*sidecar
}

type keySet = map[string]struct{}

// keyList is a small set of keys, sorted. The indexes from a host to what names it hold one
// key or a few for each of 100,000 hosts: a map each would cost ten times the memory.
type keyList []string

func addKey(m map[string]keyList, k, v string) { addSorted(m, k, v, v, strings.Compare) }

func delKey(m map[string]keyList, k, v string) { delSorted(m, k, v, strings.Compare) }

// seList is the ServiceEntries that list a host, by key: the entries themselves, not their
// keys, so that finding a host's ServiceEntry, done by every build of the host and of its
// endpoints, is one lookup in a map of a million hosts rather than two. A ServiceEntry
// replaced is replaced in the lists of its hosts (setServiceEntry).
type seList []*serviceEntry

func bySEKey(se *serviceEntry, key string) int { return cmp.Compare(se.Key, key) }

// hostSEs is the ServiceEntries that list each host, as seLists. Most hosts are listed by one
// ServiceEntry: those are kept in a map of their own, of pointers, 40 bytes a host where a
// map of lists took 85 at a million hosts; the others, listed by two or more, in a map of
// their own lists. A host is in one of the two maps or neither.
type hostSEs struct {
	one  map[string]*serviceEntry
	many map[string]seList // of two or more
}

func newHostSEs(n int) hostSEs {
	return hostSEs{one: make(map[string]*serviceEntry, n), many: map[string]seList{}}
}

// len is how many hosts are listed.
func (m *hostSEs) len() int { return len(m.one) + len(m.many) }

// get is the host's list, sorted by key; nil for a host none lists. A one-element list is the
// ServiceEntry's own (serviceEntry.alone): not to be written.
func (m *hostSEs) get(host string) seList {
	if se := m.one[host]; se != nil {
		return se.alone[:]
	}
	return m.many[host]
}

// hosts are the listed hosts, in no order.
func (m *hostSEs) hosts() iter.Seq[string] {
	return func(yield func(string) bool) {
		for h := range m.one {
			if !yield(h) {
				return
			}
		}
		for h := range m.many {
			if !yield(h) {
				return
			}
		}
	}
}

// add adds a ServiceEntry to a host's list, or replaces the one of its key. A list of two or
// more is the host's own array, written in place; a host's second ServiceEntry makes one.
func (m *hostSEs) add(host string, se *serviceEntry) {
	se.alone[0] = se // its own list, whatever made the record
	if cur := m.one[host]; cur != nil {
		switch c := cmp.Compare(cur.Key, se.Key); {
		case c == 0:
			m.one[host] = se
		case c < 0:
			delete(m.one, host)
			m.many[host] = seList{cur, se}
		default:
			delete(m.one, host)
			m.many[host] = seList{se, cur}
		}
		return
	}
	l, ok := m.many[host]
	if !ok {
		m.one[host] = se
		return
	}
	if i, found := slices.BinarySearchFunc(l, se.Key, bySEKey); found {
		l[i] = se
	} else {
		m.many[host] = slices.Insert(l, i, se)
	}
}

// del removes the ServiceEntry of key from a host's list; a host left with one goes back to
// the map of one.
func (m *hostSEs) del(host, key string) {
	if cur := m.one[host]; cur != nil {
		if cur.Key == key {
			delete(m.one, host)
		}
		return
	}
	l := m.many[host]
	i, found := slices.BinarySearchFunc(l, key, bySEKey)
	switch {
	case !found:
	case len(l) == 2:
		delete(m.many, host)
		m.one[host] = l[1-i]
	default:
		m.many[host] = slices.Delete(l, i, i+1)
	}
}

// addSorted puts v, whose key is key, in m[k], a list sorted by key (compare orders an
// element against a key), in place of the element of that key if there is one.
func addSorted[L ~[]V, V, K any](m map[string]L, k string, v V, key K, compare func(V, K) int) {
	l := m[k]
	if i, found := slices.BinarySearchFunc(l, key, compare); found {
		l[i] = v
	} else {
		m[k] = slices.Insert(l, i, v)
	}
}

// delSorted removes the element of key from m[k], and m[k] once empty.
func delSorted[L ~[]V, V, K any](m map[string]L, k string, key K, compare func(V, K) int) {
	l := m[k]
	if i, found := slices.BinarySearchFunc(l, key, compare); found {
		if len(l) == 1 {
			delete(m, k)
			return
		}
		m[k] = slices.Delete(l, i, i+1)
	}
}

// unitKind is what a unit of translation is built from.
type unitKind uint8

const (
	unitHost            unitKind = iota // one host of the mesh: its clusters, routes and listeners
	unitEndpoints                       // one host's load assignments (EDS), apart: most changes are endpoints
	unitPort                            // the outbound listener and route configuration of a port
	unitGateway                         // the checks of one Gateway
	unitGatewayClass                    // the merged Gateways of one gateway class: its listeners and routes
	unitVirtualService                  // the checks of one VirtualService that no host or gateway makes
	unitTCPListener                     // an outbound listener bound to an address of its own (VIP_PORT)
	unitSidecarPlumbing                 // istiod's capture listeners and passthrough clusters (sidecar.go), once
	unitScopedPort                      // a port's outbound route configuration as one namespace's proxies see it (scope.go)
)

type unitKey struct {
	kind unitKind
	name string
}

// depKind is what a unit may read of another's inputs.
type depKind uint8

const (
	depHost           depKind = iota // the ServiceEntry and DestinationRule of a host
	depGateway                       // a Gateway's existence
	depVirtualService                // a VirtualService, read as a delegate of another
)

type depKey struct {
	kind depKind
	name string
}

// unitState is the last build of a unit. It is kept for every unit of the mesh, so it is
// lean: slices rather than maps (a unit has a handful of outputs), and the virtual hosts are
// read from the host's route configuration, whose encoding ends with the one virtual host.
type unitState struct {
	outputs []output // in the order built; one per key
	// first holds the first output: outputs points into it while a unit has one, as a host's
	// unit (its cluster) and its load assignments' unit mostly do, so that the unit is one
	// object for the collector to reach, not two (two million at a million hosts); the same
	// 128 bytes as 80 and 48 apart (reserveOutputs). A unit is never copied (outputs would
	// point into the original).
	first [1]output
	// Host units only: per HTTP port, the virtual host that the port's route configuration
	// gathers as it is (see buildPort).
	vhosts []portVhost
	// rare holds what few units have, so that the many (a million hosts' and a million load
	// assignments' units) are 96 bytes, not 176; nil when the unit has none of it.
	rare *unitRare
}

// unitRare is the part of a unit's state that most units do not have.
type unitRare struct {
	// faults are what the build reported: few units have any, and a slice in every unit
	// was 24 bytes of a million hosts' and a million load assignments' units (build.done).
	faults []Fault
	deps   []depKey // what the unit read of other inputs (see setDeps)
	// Host units only: the filter chains of its non-HTTP ports, per listener they join.
	tcp []tcpContribution
}

// reserveOutputs makes room for n outputs: for one, the unit's own (first), which set takes
// anyway.
func (u *unitState) reserveOutputs(n int) {
	if n > len(u.first) {
		u.outputs = make([]output, 0, n)
	}
}

// deps are what the unit read of other inputs; nil for none, and for a nil unit.
func (u *unitState) deps() []depKey {
	if u == nil || u.rare == nil {
		return nil
	}
	return u.rare.deps
}

// tcp are the filter chains of a host unit's non-HTTP ports; nil for none, and for a nil unit.
func (u *unitState) tcp() []tcpContribution {
	if u == nil || u.rare == nil {
		return nil
	}
	return u.rare.tcp
}

// faultList are the faults the unit's build reported; nil for none, and for a nil unit.
func (u *unitState) faultList() []Fault {
	if u == nil || u.rare == nil {
		return nil
	}
	return u.rare.faults
}

func (u *unitState) rareState() *unitRare {
	if u.rare == nil {
		u.rare = &unitRare{}
	}
	return u.rare
}

type outKey struct{ typeURL, name string }

// output is one resource a unit built, encoded as the store keeps it (named by the Envoy
// resource, its body the resource, versioned by a hash of its content): the store takes the
// very bytes, and the unit keeps them to compare its next build with.
type output struct {
	typeURL string
	enc     store.Encoded
}

func (o output) key() outKey { return outKey{o.typeURL, o.enc.Name()} }

// value is the Envoy resource's encoding.
func (o output) value() []byte {
	_, v := o.enc.Body()
	return v
}

// portVhost is a host's virtual host for one port, as the port's route configuration gathers
// it for sidecars: its head (name and domains) followed by own (its routes and what follows
// them; the gRPC client's own bytes when the routes are the same, see buildRoutes), or, when
// defaultRoute, by the host's default route, written as the port's route configuration is
// assembled and not kept (defaultTail). local,
// when set, is the head for the proxies of the host's own namespace (a scope: scope.go), whose
// domains add the bare name.
type portVhost struct {
	port uint32
	// ownListener: a sniffed port (no protocol declared) listened for on addresses of the
	// host's own (buildSniffedPort), whose sidecars reach it through VIP_PORT and not
	// 0.0.0.0_PORT; the port's route configuration still lists it, as istiod's does.
	ownListener bool
	// defaultRoute: own is nil, the rest is the host's default route (defaultTail).
	defaultRoute bool
	sidecar      []byte
	own          []byte
	// scoped is what hosts seen by scopes of their own have (local, variants): nil for the
	// many, so that a port's virtual host is 64 bytes, not 112 (a million at scale).
	scoped *scopedVhost
}

// scopedVhost is the part of a portVhost that scopes read (scope.go).
type scopedVhost struct {
	local []byte
	// variants are the sidecar's rests for the scopes that do not see the VirtualService
	// that routes the host.
	variants []scopedRest
}

// local is the head for the proxies of the host's own namespace, nil when it has none.
func (pv *portVhost) local() []byte {
	if pv.scoped == nil {
		return nil
	}
	return pv.scoped.local
}

// variants are the sidecar's rests for the scopes that do not see the VirtualService that
// routes the host.
func (pv *portVhost) variants() []scopedRest {
	if pv.scoped == nil {
		return nil
	}
	return pv.scoped.variants
}

// scopedPart is pv.scoped, made if pv has none, for a build to write.
func (pv *portVhost) scopedPart() *scopedVhost {
	if pv.scoped == nil {
		pv.scoped = &scopedVhost{}
	}
	return pv.scoped
}

// scopedRest is the rest of a sidecar's virtual host as one namespace's proxies see it.
type scopedRest struct {
	namespace string
	sidecar   []byte
}

// variantFor is the rest of the virtual host as a namespace sees it, nil when the same.
func (pv *portVhost) variantFor(namespace string) []byte {
	for _, v := range pv.variants() {
		if v.namespace == namespace {
			return v.sidecar
		}
	}
	return nil
}

// vhostParts is an encoded virtual host in two parts, head then tail, written one after the
// other (see appendRouteConfiguration); the tail is dflt's rest instead where dflt has a
// host.
type vhostParts struct {
	head, tail []byte
	dflt       defaultTail
}

func (v vhostParts) size() int {
	if v.dflt.host != "" {
		return len(v.head) + v.dflt.restSize()
	}
	return len(v.head) + len(v.tail)
}

// appendTo writes the virtual host's encoding.
func (v vhostParts) appendTo(b []byte) []byte {
	b = append(b, v.head...)
	if v.dflt.host != "" {
		return v.dflt.appendRest(b)
	}
	return append(b, v.tail...)
}

// set adds an output, or replaces the one of the same key.
func (u *unitState) set(o output) int {
	for i := range u.outputs {
		if u.outputs[i].key() == o.key() {
			u.outputs[i] = o
			return i
		}
	}
	if u.outputs == nil {
		u.outputs = u.first[:0]
	}
	u.outputs = append(u.outputs, o)
	return len(u.outputs) - 1
}

// outputsOf are the names of the unit's outputs of a type.
func (u *unitState) outputsOf(typeURL string) []string {
	if u == nil {
		return nil
	}
	var out []string
	for _, o := range u.outputs {
		if o.typeURL == typeURL {
			out = append(out, o.enc.Name())
		}
	}
	return out
}

// output returns the unit's output of a key.
func (u *unitState) output(k outKey) (output, bool) {
	if u == nil {
		return output{}, false
	}
	for _, o := range u.outputs {
		if o.key() == k {
			return o, true
		}
	}
	return output{}, false
}

// vhost returns the host's encoded sidecar virtual host for a port (u is the host's), and
// where it is kept (its head for the proxies of its own namespace, its scopes' variants).
func (u *unitState) vhost(host string, p uint32) (vh vhostParts, pv *portVhost, ok bool) {
	if u == nil {
		return vhostParts{}, nil, false
	}
	for i := range u.vhosts {
		if v := &u.vhosts[i]; v.port == p {
			vh = vhostParts{head: v.sidecar, tail: v.own}
			if v.defaultRoute {
				vh.dflt = defaultTail{host: host, port: p}
			}
			return vh, v, true
		}
	}
	return vhostParts{}, nil, false
}

// SetGatewayClass builds, from the next Translate, the outputs of a gateway class. The xDS
// server tells the controller which classes its connected gateway proxies are of.
func (t *Translator) SetGatewayClass(c translate.GatewayClass) {
	id := c.ID()
	t.mark(unitKey{unitGatewayClass, id})
	t.classes[id] = c
}

// RemoveGatewayClass stops building a class's outputs; the next Translate removes them.
func (t *Translator) RemoveGatewayClass(id string) {
	if _, ok := t.classes[id]; ok {
		delete(t.classes, id)
		t.mark(unitKey{unitGatewayClass, id})
	}
}

// TranslatorOptions configures a Translator.
type TranslatorOptions struct {
	// DomainSuffix completes short host names (see DefaultDomainSuffix, the default).
	DomainSuffix string
	// GatewayClasses are built from the start (SetGatewayClass), for tools and tests.
	GatewayClasses []translate.GatewayClass
	// Scopes are the namespaces whose views are built from the start (SetScope), for tools
	// and tests.
	Scopes []string
	// LazyProxyless leaves the outputs only proxyless gRPC clients read (their clusters,
	// API listeners and per-host route configurations) out until SetProxyless(true): the
	// controller builds them only while such a client is connected. Without it they are
	// built from the start.
	LazyProxyless bool
	// LazyPortRoutes leaves the ports' outbound route configurations (PORT, a virtual host for
	// every HTTP host of the port) out until SetPortRoute or SetPortRoutes(true): the
	// controller builds a port's only while a client asks for it (portroutes.go). Without it
	// they are built from the start.
	LazyPortRoutes bool
	// VirtualHostPorts are the ports whose VHDS outputs are built from the start (vhds.go);
	// the controller builds a port's only while a VHDS client asks for it
	// (SetPortVirtualHosts).
	VirtualHostPorts []uint32
	// OutboundTrafficPolicy is MeshConfig's outboundTrafficPolicy.mode for every sidecar:
	// AllowAny (istiod's default) or RegistryOnly (sidecar.go).
	OutboundTrafficPolicy OutboundTrafficPolicy
}

// NewTranslator returns a Translator with no inputs.
func NewTranslator(opts TranslatorOptions) *Translator {
	if opts.DomainSuffix == "" {
		opts.DomainSuffix = DefaultDomainSuffix
	}
	t := &Translator{
		suffix: opts.DomainSuffix,
		ses:    map[string]*serviceEntry{}, vss: map[string]*virtualService{},
		drs: map[string]*destinationRule{}, gws: map[string]*gateway{}, wes: map[string]*workloadEntry{},
		seByHost: newHostSEs(0), seByVIP: map[string]keyList{}, vsByHost: map[string]keyList{}, vsWildcard: keySet{},
		drByHost: map[string]keyList{}, drWildcard: keySet{}, vsByGateway: map[string]keyList{},
		weByNamespace: map[string]keySet{}, selectorsByNS: map[string]keyList{}, classes: map[string]translate.GatewayClass{},
		scopes: keySet{}, sidecars: map[string]*sidecar{}, limitedSEs: keySet{}, limitedVSs: keySet{}, proxylessHosts: keySet{},
		dependents: map[depKey]map[unitKey]struct{}{},
		units:      newUnitTable(), ports: map[uint32]*portState{}, tcpBinds: map[string]*tcpBindState{},
		dirty: map[unitKey]struct{}{}, dirtyHosts: map[string]hostUnits{}, inputFaults: map[string]Fault{}, fieldFaults: map[string]Fault{},
		outboundPolicy: opts.OutboundTrafficPolicy,
		proxyless:      !opts.LazyProxyless,
		portRoutes:     !opts.LazyPortRoutes, portRoutesFor: map[uint32]struct{}{}, vhdsFor: map[uint32]struct{}{},
		vhdsChanged: map[uint32]bool{},
	}
	t.mark(unitKey{unitSidecarPlumbing, "sidecar"})
	for _, c := range opts.GatewayClasses {
		t.SetGatewayClass(c)
	}
	for _, ns := range opts.Scopes {
		t.SetScope(ns)
	}
	for _, p := range opts.VirtualHostPorts {
		t.SetPortVirtualHosts(p, true)
	}
	return t
}

// Resource is one derived Envoy resource: its type URL, its name, and the resource as the
// store keeps it, encoded deterministically so that an unchanged resource has the same bytes.
type Resource struct {
	TypeURL string
	Name    string
	Encoded store.Encoded
}

// Body returns the Envoy resource as an Any (its bytes not copied), for tools and tests.
func (r Resource) Body() *anypb.Any {
	typeURL, value := r.Encoded.Body()
	return &anypb.Any{TypeUrl: typeURL, Value: value}
}

// Delta is what one Translate changed.
type Delta struct {
	// Upserts are the outputs that are new or whose encoding changed, by type URL, each in the
	// order the units were built (deterministic: hosts, gateways, VirtualServices, ports, each
	// by name; not sorted, which at 100,000 hosts cost a third of a second for nobody). They
	// are what the store writes, as they are: a full load's 400,000 outputs are not copied
	// into other lists on the way.
	Upserts map[string][]store.Encoded
	// Removed are the names of outputs no longer produced, by type URL, sorted.
	Removed map[string][]string
}

// Empty reports whether the delta changes nothing.
func (d Delta) Empty() bool { return len(d.Upserts) == 0 && len(d.Removed) == 0 }

// Resources lists the upserts as Resources, for tools and tests: the derived collections'
// in their order, then the namespaces' overlays' (TypeURL is the collection).
func (d Delta) Resources() []Resource {
	var out []Resource
	for _, typ := range outputTypes {
		for _, enc := range d.Upserts[typ] {
			out = append(out, Resource{TypeURL: typ, Name: enc.Name(), Encoded: enc})
		}
	}
	for _, coll := range sortedKeys(d.Upserts) { // the namespaces' overlays (scope.go)
		if !slices.Contains(outputTypes[:], coll) {
			for _, enc := range d.Upserts[coll] {
				out = append(out, Resource{TypeURL: coll, Name: enc.Name(), Encoded: enc})
			}
		}
	}
	return out
}

// Stats tell how much one Translate recomputed, for tests, benchmarks and logs.
type Stats struct {
	Hosts, Endpoints, Ports, Gateways int // units rebuilt
	Upserts, Removals                 int
	// FaultsChanged tells whether the faults differ from those before the call.
	FaultsChanged bool
}

// Translate recomputes every unit the updates since the last call touched and returns what
// changed in the outputs.
func (t *Translator) Translate() (Delta, Stats) {
	st := Stats{FaultsChanged: t.faultsDirty}
	var delta Delta
	t.narrowScopes()
	// Hosts first: ports gather the hosts' virtual hosts. Hosts and their endpoints are built
	// in parallel (a build only reads the inputs) and their results recorded in order
	// (buildHosts).
	hosts := t.dirtyHostUnits()
	if len(hosts) >= reserveMin {
		// A load of many hosts (two units each): room for them at once, when the translator
		// holds fewer (unitTable.reserveHosts).
		t.units.reserveHosts(len(hosts) / 2)
	}
	delta.Upserts = make(map[string][]store.Encoded, len(outputTypes))
	many := len(hosts) >= reserveMin
	if many {
		// A full load's hosts change every output: room for them (about one cluster and one
		// load assignment a host; a host unit and its endpoints' are two of hosts).
		for _, typ := range []string{ClusterType, EndpointType} {
			delta.Upserts[typ] = make([]store.Encoded, 0, len(hosts)/2+1)
		}
	}
	// With no host built before (a first load), no unit of this build has a last build to
	// look up: a million lookups that miss, a cache miss each, in the serial recording.
	firstHosts := t.units.noHosts()
	if many {
		for _, k := range hosts {
			if k.kind == unitHost {
				t.loading.hosts++
			}
		}
	}
	t.buildHosts(hosts, func(key unitKey, u *unitState) {
		var old *unitState
		if !firstHosts {
			old = t.units.get(key)
		}
		t.recordOver(key, old, u, &delta)
		if key.kind == unitHost {
			st.Hosts++
		} else {
			st.Endpoints++
		}
	})
	t.loading.hosts, t.loading.recorded = 0, 0
	// Every dirty host's units are built: recording marks ports and listeners, never hosts.
	if len(t.dirtyHosts) >= reserveMin {
		t.dirtyHosts = map[string]hostUnits{} // not a cleared map with the room of a million
	} else {
		clear(t.dirtyHosts)
	}
	t.applyVHDSChanges(&delta)
	if len(t.dirtyOf(unitGateway)) > 0 {
		// A Gateway's change, or a change to what is bound to one, may change the merge of
		// any class: there are few, and each is rebuilt.
		for id := range t.classes {
			t.mark(unitKey{unitGatewayClass, id})
		}
	}
	for _, kind := range []unitKind{unitGateway, unitGatewayClass, unitVirtualService, unitPort, unitScopedPort, unitTCPListener, unitSidecarPlumbing} {
		for _, key := range t.dirtyOf(kind) {
			delete(t.dirty, key)
			t.rebuild(key, &delta)
			switch kind {
			case unitPort, unitScopedPort, unitTCPListener:
				st.Ports++
			case unitGateway, unitGatewayClass:
				st.Gateways++
			}
		}
	}
	for _, names := range delta.Removed {
		slices.Sort(names)
	}
	for typ, es := range delta.Upserts {
		st.Upserts += len(es)
		if len(es) == 0 {
			delete(delta.Upserts, typ)
		}
	}
	for _, names := range delta.Removed {
		st.Removals += len(names)
	}
	st.FaultsChanged = st.FaultsChanged || t.faultsDirty
	return delta, st
}

func typeOrder(typeURL string) int { return slices.Index(outputTypes[:], typeURL) }

// dirtyOf returns the dirty units of the kinds, by kind in the order given, each kind's
// sorted by name so that a build is deterministic: one pass over the dirty set.
func (t *Translator) dirtyOf(kinds ...unitKind) []unitKey {
	byKind := make([][]unitKey, len(kinds))
	for k := range t.dirty {
		if i := slices.Index(kinds, k.kind); i >= 0 {
			byKind[i] = append(byKind[i], k)
		}
	}
	// Each kind sorted apart, on every CPU when there are many (a load of many
	// VirtualServices; hosts are apart, dirtyHostUnits).
	n, perWorker := 0, len(byKind) // one worker: the caller's goroutine
	for _, ks := range byKind {
		n += len(ks)
	}
	if n >= reserveMin {
		perWorker = 1
	}
	parallel.For(len(byKind), perWorker, func(i int) {
		slices.SortFunc(byKind[i], func(a, b unitKey) int { return cmp.Compare(a.name, b.name) })
	})
	out := make([]unitKey, 0, n)
	for _, ks := range byKind {
		out = append(out, ks...)
	}
	return out
}

// hostUnits tells which of a host's two units are dirty.
type hostUnits uint8

const (
	dirtyHost      hostUnits = 1 << iota // the host's unit (unitHost)
	dirtyEndpoints                       // its load assignments' (unitEndpoints)
)

// mark marks a unit to build again at the next Translate.
func (t *Translator) mark(k unitKey) {
	switch k.kind {
	case unitHost:
		t.dirtyHosts[k.name] |= dirtyHost
	case unitEndpoints:
		t.dirtyHosts[k.name] |= dirtyEndpoints
	default:
		t.dirty[k] = struct{}{}
	}
}

// dirtyHostUnits returns the dirty hosts' units sorted by name, so that a build is
// deterministic: a host's unit, then its endpoints' unit, then the next host's. The names are
// sorted by their first bytes first (sortByName): a full load's million hosts were 3 s of
// sorting and gathering out of the dirty set, most of it cache misses on the names. A host's
// two units are next to each other because both builds look up the host's ServiceEntry, and
// both recordings its entry of the unit table: in maps of a million hosts, the second finds
// in the cache what the first fetched (all hosts' units, then all endpoints', missed twice).
func (t *Translator) dirtyHostUnits() []unitKey {
	dirty := make([]named[hostUnits], 0, len(t.dirtyHosts))
	units := 0
	for h, u := range t.dirtyHosts {
		dirty = append(dirty, named[hostUnits]{h, u})
		units += bits.OnesCount8(uint8(u))
	}
	sortByName(dirty)
	out := make([]unitKey, 0, units)
	for _, d := range dirty {
		if d.v&dirtyHost != 0 {
			out = append(out, unitKey{unitHost, d.name})
		}
		if d.v&dirtyEndpoints != 0 {
			out = append(out, unitKey{unitEndpoints, d.name})
		}
	}
	return out
}

// buildHosts builds the units of hosts on every CPU (a build only reads the inputs) and hands
// each to record in hosts' order, on the caller's goroutine. Many hosts are built in chunks,
// and a chunk is recorded as soon as it and those before it are built, while the next ones
// build: recording (the ports' gathering, the comparison with the last build, the units map)
// is serial, 5 s at a million hosts, and overlaps the builds instead of following them.
func (t *Translator) buildHosts(hosts []unitKey, record func(unitKey, *unitState)) {
	build := func(key unitKey) *unitState {
		if key.kind == unitEndpoints {
			return t.buildEndpoints(key.name)
		}
		return t.buildHost(key.name)
	}
	built := make([]*unitState, len(hosts))
	parallel.ForThen(len(hosts), parallelBuildMin, 1024, func(i int) { built[i] = build(hosts[i]) }, func(i int) {
		record(hosts[i], built[i])
		built[i] = nil // the units map holds it now
	})
}

// parallelBuildMin is the number of hosts per goroutine from which Translate builds them on
// every CPU: below it, goroutines cost more than they save.
const parallelBuildMin = 64

// rebuild builds one unit, replaces its last build and adds the difference to delta.
func (t *Translator) rebuild(key unitKey, delta *Delta) {
	var u *unitState
	switch key.kind { // hosts' and endpoints' units are built apart (buildHosts)
	case unitPort:
		u = t.buildPort(parsePort(key.name))
	case unitGateway:
		u = t.checkGateway(key.name)
	case unitGatewayClass:
		u = t.buildGatewayClass(key.name)
	case unitVirtualService:
		u = t.checkVirtualService(key.name)
	case unitTCPListener:
		u = t.buildTCPListener(key.name)
	case unitSidecarPlumbing:
		u = t.buildSidecarPlumbing()
	case unitScopedPort:
		u = t.buildScopedPort(key.name)
	}
	t.record(key, u, delta)
}

// record replaces a unit's last build with u and adds the difference to delta.
func (t *Translator) record(key unitKey, u *unitState, delta *Delta) {
	t.recordOver(key, t.units.get(key), u, delta)
}

// recordOver is record, given the unit's last build (old, nil for none).
func (t *Translator) recordOver(key unitKey, old, u *unitState, delta *Delta) {
	if key.kind == unitHost {
		if t.loading.hosts > 0 {
			t.loading.recorded++
		}
		t.updatePorts(key.name, old, u)
		t.updateTCPBinds(key.name, old, u)
	}
	t.diff(old, u, delta)
	t.setDeps(key, old, u)
	if !slices.Equal(old.faultList(), u.faultList()) {
		t.faultsDirty = true
	}
	if len(u.outputs) == 0 && len(u.faultList()) == 0 && len(u.deps()) == 0 && len(u.vhosts) == 0 && len(u.tcp()) == 0 {
		t.units.delete(key)
		return
	}
	t.units.set(key, u)
}

// portState is what a port's outbound route configuration gathers: the hosts with an HTTP
// port of that number and, once sorted, each one's virtual host. A host's rebuild replaces
// its own virtual host in place, so that a burst of changes costs the port one copy of the
// others' bytes, not a lookup of every host again; a host joining or leaving the port drops
// the order, which the next build of the port makes again.
type portState struct {
	// hosts tells, for each host, whether it is reached through 0.0.0.0_PORT (all but
	// sniffed ports with listeners of their own, portVhost.ownListener); shares counts those:
	// the port's listener has an HTTP chain only for them. Both are kept as hosts are
	// recorded, so that the listener is built without gathering the virtual hosts.
	hosts  map[string]bool
	shares int
	order  []string     // hosts, sorted; nil until the port is built after the set changed
	vhosts []vhostParts // of order's hosts
	// local are order's hosts' heads for the proxies of their own namespace, where a scope of
	// it is built (nil elsewhere); locals counts them. variant tells the hosts with rests of
	// their own for some scopes (portVhost.variants); variants counts them.
	local    [][]byte
	locals   int
	variant  []bool
	variants int
	// shared tells order's hosts reached through 0.0.0.0_PORT (hosts).
	shared []bool
}

// portReserveAt is the number of hosts at which a port's map of hosts, filling during a
// Translate that records many (a first load), is given the room the load will likely fill.
const portReserveAt = 1024

// reservePortHosts gives a port's map of hosts, as it reaches portReserveAt during a
// Translate that records many hosts, room for as many as the load will likely put there: its
// share of the hosts recorded so far, of all the load's, and an eighth more. Grown one
// doubling at a time, the map of a port that every host of a million-host load is on
// rehashed every host twenty times over, 0.8 s of the serial recording; a port few hosts are
// on keeps a map of its own size.
func (t *Translator) reservePortHosts(ps *portState) {
	l := t.loading
	if l.hosts == 0 || l.recorded == 0 {
		return
	}
	want := len(ps.hosts) * l.hosts / l.recorded
	want += want / 8
	if want <= 2*len(ps.hosts) {
		return
	}
	grown := make(map[string]bool, want)
	maps.Copy(grown, ps.hosts)
	ps.hosts = grown
}

// updatePorts keeps the ports' states and marks the ports whose gathered outputs a host's
// rebuild changes: those it left or joined, and those where its virtual host is not the same
// bytes as before. A rebuild that changes nothing a port gathers (the host's own proxyless
// outputs built or dropped, its endpoints, a rule its routes do not read) does not rebuild the
// port's route configuration, which holds every host's virtual host (hundreds of MB at a
// million services).
func (t *Translator) updatePorts(host string, old, u *unitState) {
	if old != nil {
		for _, v := range old.vhosts {
			if _, _, still := u.vhost(host, v.port); still {
				continue // compared below
			}
			ps := t.ports[v.port]
			if ps.hosts[host] {
				ps.shares--
			}
			delete(ps.hosts, host)
			ps.reset()
			if len(ps.hosts) == 0 {
				delete(t.ports, v.port)
			}
			t.markPort(v.port)
		}
	}
	for _, v := range u.vhosts {
		ps := t.ports[v.port]
		if ps == nil {
			ps = &portState{hosts: map[string]bool{}}
			t.ports[v.port] = ps
		}
		// A host is on a port while its recorded unit has a virtual host there (nothing else
		// writes hosts), so one with no last build is on none: no lookup, which in a map of
		// a million hosts is a cache miss apiece in the serial recording of a full load.
		var shared, in bool
		if old != nil {
			shared, in = ps.hosts[host]
		}
		if shared {
			ps.shares--
		}
		if ps.hosts[host] = !v.ownListener; !v.ownListener {
			ps.shares++
		}
		if !in && len(ps.hosts) == portReserveAt {
			t.reservePortHosts(ps)
		}
		if !in {
			ps.reset()
			t.markPort(v.port)
			continue
		}
		parts, pv, _ := u.vhost(host, v.port)
		if ps.order != nil {
			i, _ := slices.BinarySearch(ps.order, host)
			ps.vhosts[i] = parts
			ps.setOf(i, pv)
		}
		if oldParts, opv, ok := old.vhost(host, v.port); !ok || !samePortVhost(oldParts, parts, opv, pv) {
			t.markPort(v.port)
		}
	}
}

// samePortVhost tells whether a host's virtual host on a port gathers as the same bytes, for
// every scope, and is reached the same way.
func samePortVhost(a, b vhostParts, av, bv *portVhost) bool {
	return bytes.Equal(a.head, b.head) && bytes.Equal(a.tail, b.tail) && a.dflt == b.dflt && bytes.Equal(av.local(), bv.local()) &&
		av.ownListener == bv.ownListener && slices.EqualFunc(av.variants(), bv.variants(), func(x, y scopedRest) bool {
		return x.namespace == y.namespace && bytes.Equal(x.sidecar, y.sidecar)
	})
}

// reset drops the order, which the next build makes again.
func (ps *portState) reset() {
	ps.order, ps.vhosts, ps.local, ps.locals, ps.variant, ps.variants, ps.shared = nil, nil, nil, 0, nil, 0, nil
}

// setOf records what a host's virtual host holds for scopes (local head, variants).
func (ps *portState) setOf(i int, pv *portVhost) {
	if ps.local[i] != nil {
		ps.locals--
	}
	if ps.variant[i] {
		ps.variants--
	}
	ps.local[i], ps.variant[i], ps.shared[i] = nil, false, false
	if pv == nil {
		return
	}
	ps.shared[i] = !pv.ownListener
	if ps.local[i] = pv.local(); ps.local[i] != nil {
		ps.locals++
	}
	if ps.variant[i] = len(pv.variants()) > 0; ps.variant[i] {
		ps.variants++
	}
}

// markPort marks a port's outputs to be built again: the mesh-wide ones, and each scope's.
func (t *Translator) markPort(p uint32) {
	t.mark(unitKey{unitPort, portKey(p)})
	for ns := range t.scopes {
		t.mark(unitKey{unitScopedPort, scopedPortKey(ns, p)})
	}
}

// gathered returns a port's state with its hosts' virtual hosts, in host order (nil when no
// host has the port).
func (t *Translator) gathered(p uint32) *portState {
	ps := t.ports[p]
	if ps == nil {
		return nil
	}
	if ps.order == nil {
		ps.order = sortedKeys(ps.hosts)
		ps.vhosts = make([]vhostParts, len(ps.order))
		ps.local = make([][]byte, len(ps.order))
		ps.variant = make([]bool, len(ps.order))
		ps.shared = make([]bool, len(ps.order))
		for i, h := range ps.order {
			var pv *portVhost
			ps.vhosts[i], pv, _ = t.units.get(unitKey{unitHost, h}).vhost(h, p)
			ps.setOf(i, pv)
		}
	}
	return ps
}

// diff adds to delta what a unit's new build changes in its outputs. No two units make an
// output of the same name (names embed the host, the port or the gateway), so the unit's last
// build is all there is to compare with. An output whose bytes did not change keeps the last
// build's encoding, which is the one the store holds: the unit keeps no second copy.
func (t *Translator) diff(old, u *unitState, delta *Delta) {
	for i, o := range u.outputs {
		if prev, ok := old.output(o.key()); ok && bytes.Equal(prev.enc.Bytes(), o.enc.Bytes()) {
			u.outputs[i] = prev
			continue
		}
		delta.Upserts[o.typeURL] = append(delta.Upserts[o.typeURL], o.enc)
	}
	if old == nil {
		return
	}
	for _, o := range old.outputs {
		if _, ok := u.output(o.key()); ok {
			continue
		}
		if delta.Removed == nil {
			delta.Removed = map[string][]string{}
		}
		delta.Removed[o.typeURL] = append(delta.Removed[o.typeURL], o.enc.Name())
	}
}

func (t *Translator) setDeps(key unitKey, old, u *unitState) {
	if old != nil {
		for _, d := range old.deps() {
			if s := t.dependents[d]; s != nil {
				delete(s, key)
				if len(s) == 0 {
					delete(t.dependents, d)
				}
			}
		}
	}
	for _, d := range u.deps() {
		s := t.dependents[d]
		if s == nil {
			s = map[unitKey]struct{}{}
			t.dependents[d] = s
		}
		s[key] = struct{}{}
	}
}

// Outputs returns every current output, sorted by type and name: the full state.
func (t *Translator) Outputs() []Resource {
	var out []Resource
	for _, u := range t.units.all() {
		for _, o := range u.outputs {
			out = append(out, Resource{TypeURL: o.typeURL, Name: o.enc.Name(), Encoded: o.enc})
		}
	}
	slices.SortFunc(out, func(a, b Resource) int {
		return cmp.Or(cmp.Compare(typeOrder(a.TypeURL), typeOrder(b.TypeURL)), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// EncodedOutputs returns every current output by type, in no order: the full state, for a
// writer that must replace what it wrote before.
func (t *Translator) EncodedOutputs() map[string][]store.Encoded {
	counts := make(map[string]int, len(outputTypes))
	for _, u := range t.units.all() {
		for _, o := range u.outputs {
			counts[o.typeURL]++
		}
	}
	out := make(map[string][]store.Encoded, len(outputTypes))
	for _, typ := range outputTypes {
		out[typ] = []store.Encoded{} // every derived collection, even empty: a full state
	}
	for typ, n := range counts {
		out[typ] = make([]store.Encoded, 0, n)
	}
	for _, u := range t.units.all() {
		for _, o := range u.outputs {
			out[o.typeURL] = append(out[o.typeURL], o.enc)
		}
	}
	return out
}

// Faults returns the faults of the last build of every unit, and of inputs that could not be
// read, sorted, without duplicates.
func (t *Translator) Faults() []Fault {
	if t.faultsDirty {
		var all []Fault
		for _, u := range t.units.all() {
			all = append(all, u.faultList()...)
		}
		for _, f := range t.inputFaults {
			all = append(all, f)
		}
		for _, f := range t.fieldFaults {
			all = append(all, f)
		}
		t.faults, t.faultsDirty = sortFaults(all), false
	}
	return slices.Clone(t.faults)
}
