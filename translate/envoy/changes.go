package envoy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"github.com/mcpbridge/mcpbridge/internal/parallel"
	"github.com/mcpbridge/mcpbridge/kinds"
)

// Update records changes to one input collection (canonical or alias): resources upserted and
// names removed. A collection the translation does not read is ignored. A resource identical
// to the one held (version, creation time and spec) is skipped, so that reading a whole
// collection again costs no translation. A resource whose body cannot be read is treated as
// removed and reported as a fault.
func (t *Translator) Update(collection string, upserts []Input, removed []string) {
	kind, ok := kinds.ByCollection(collection)
	if why, reported := reportedKinds[kind.Kind]; ok && reported {
		t.report(kind.Kind, why, upserts, removed)
		return
	}
	if !ok || !slices.Contains(inputKinds, kind.Kind) {
		return
	}
	for _, name := range removed {
		t.clearInputFault(kind.Kind + "/" + name)
		t.remove(kind.Kind, name)
	}
	if kind.Kind == kindServiceEntry {
		t.reserveHosts(len(upserts))
	}
	t.decodeAll(kind.Kind, upserts, func(i int, d decoded) { t.upsert(kind.Kind, upserts[i].Name, d) })
}

// reserveHosts makes room for n ServiceEntries (about as many hosts) in the maps a first
// load fills while they are empty: grown one doubling at a time, a map of a million keys
// rehashes every key it held twenty times over, each a cache miss.
func (t *Translator) reserveHosts(n int) {
	if n < reserveMin {
		return
	}
	if len(t.ses) == 0 {
		t.ses = make(map[string]*serviceEntry, n)
	}
	if t.seByHost.len() == 0 {
		t.seByHost = newHostSEs(n)
	}
	if len(t.dirtyHosts) == 0 {
		t.dirtyHosts = make(map[string]hostUnits, n)
	}
}

// reserveMin is the size of a load from which reserveHosts makes room ahead.
const reserveMin = 4096

// report records the resources of a kind the translation does not apply, each a fault.
func (t *Translator) report(kind, why string, upserts []Input, removed []string) {
	for _, name := range removed {
		t.clearInputFault(kind + "/" + name)
	}
	for _, in := range upserts {
		t.fieldFaults[kind+"/"+in.Name] = Fault{Kind: kind, Name: in.Name, Message: why}
		t.faultsDirty = true
	}
}

// Names returns the names held of an input kind's collection, for a caller that must
// reconcile a full state (after its changes were compacted away) without a diff of its own.
func (t *Translator) Names(collection string) []string {
	kind, ok := kinds.ByCollection(collection)
	if !ok {
		return nil
	}
	var out []string
	switch kind.Kind {
	case kindServiceEntry:
		out = slices.Collect(maps.Keys(t.ses))
	case kindVirtualService:
		out = slices.Collect(maps.Keys(t.vss))
	case kindDestinationRule:
		out = slices.Collect(maps.Keys(t.drs))
	case kindGateway:
		out = slices.Collect(maps.Keys(t.gws))
	case kindWorkloadEntry:
		out = slices.Collect(maps.Keys(t.wes))
	case kindSidecar:
		out = slices.Collect(maps.Keys(t.sidecars))
	}
	for _, held := range []map[string]Fault{t.inputFaults, t.fieldFaults} {
		for key := range held {
			if k, name, _ := strings.Cut(key, "/"); k == kind.Kind {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// decoded is an upsert read into the translation's form: one of the kinds' records, or
// the fault that kept it from being read; unchanged when it is the resource already held.
type decoded struct {
	rec       any
	err       error
	unchanged bool
	// fields: the fault naming the fields the translation does not honour, or nil.
	fields *Fault
}

// decodeAll reads upserts on every CPU and hands each, in order, to apply on the caller's
// goroutine: decoding bodies is most of reading a large collection, each resource's own, and
// apply (the translator's maps, serial) overlaps the decoding of the next ones. Whether a
// resource is the one held is looked up first, so that the decoding reads no map that apply
// changes (an update names a resource once).
func (t *Translator) decodeAll(kind string, upserts []Input, apply func(i int, d decoded)) {
	out := make([]decoded, len(upserts))
	for i, in := range upserts {
		if held := t.held(kind, in.Name); held != nil && held.same(in) {
			out[i].unchanged = true
		}
	}
	decode := func(i int) {
		if out[i].unchanged {
			return
		}
		in := upserts[i]
		switch kind {
		case kindServiceEntry:
			out[i].rec, out[i].err = newServiceEntry(in)
		case kindVirtualService:
			out[i].rec, out[i].err = newVirtualService(in, t.suffix)
		case kindDestinationRule:
			out[i].rec, out[i].err = newDestinationRule(in, t.suffix)
		case kindGateway:
			out[i].rec, out[i].err = newGateway(in)
		case kindWorkloadEntry:
			out[i].rec, out[i].err = newWorkloadEntry(in)
		case kindSidecar:
			out[i].rec, out[i].err = newSidecar(in)
		}
		if out[i].err == nil {
			out[i].fields = untranslatedFault(kind, in.Name, in.Value)
		}
	}
	parallel.ForThen(len(upserts), parallelDecodeMin, parallelDecodeMin, decode, func(i int) {
		apply(i, out[i])
		out[i] = decoded{} // applied: the translator holds what it keeps
	})
}

// parallelDecodeMin is the number of upserts per goroutine from which they are decoded on
// every CPU.
const parallelDecodeMin = 256

func (t *Translator) upsert(kind, name string, d decoded) {
	if d.unchanged {
		return
	}
	if d.err != nil {
		key := kind + "/" + name
		// The store validates bodies, so this is a resource written around it; what it said
		// before is no longer believed either.
		t.remove(kind, name)
		delete(t.fieldFaults, key)
		t.inputFaults[key] = Fault{Kind: kind, Name: name, Message: fmt.Sprintf("%v; the resource is ignored", d.err)}
		t.faultsDirty = true
		return
	}
	switch rec := d.rec.(type) {
	case *serviceEntry:
		t.setServiceEntry(name, rec)
	case *virtualService:
		t.setVirtualService(name, rec)
	case *destinationRule:
		t.setDestinationRule(name, rec)
	case *gateway:
		t.setGateway(name, rec)
	case *workloadEntry:
		t.setWorkloadEntry(name, rec)
	case *sidecar:
		t.setSidecar(name, rec)
	}
	if len(t.inputFaults) > 0 || len(t.fieldFaults) > 0 { // most loads have none to clear
		t.clearInputFault(kind + "/" + name)
	}
	if d.fields != nil {
		t.fieldFaults[kind+"/"+name] = *d.fields
		t.faultsDirty = true
	}
}

// clearInputFault forgets what was reported of an input as a whole: that it could not be
// read, or the fields it sets that are not translated.
func (t *Translator) clearInputFault(key string) {
	if _, ok := t.inputFaults[key]; ok {
		delete(t.inputFaults, key)
		t.faultsDirty = true
	}
	if _, ok := t.fieldFaults[key]; ok {
		delete(t.fieldFaults, key)
		t.faultsDirty = true
	}
}

// held returns the metadata of the input held under a name, or nil.
func (t *Translator) held(kind, name string) *meta {
	switch kind {
	case kindServiceEntry:
		if r := t.ses[name]; r != nil {
			return &r.meta
		}
	case kindVirtualService:
		if r := t.vss[name]; r != nil {
			return &r.meta
		}
	case kindDestinationRule:
		if r := t.drs[name]; r != nil {
			return &r.meta
		}
	case kindGateway:
		if r := t.gws[name]; r != nil {
			return &r.meta
		}
	case kindWorkloadEntry:
		if r := t.wes[name]; r != nil {
			return &r.meta
		}
	case kindSidecar:
		if r := t.sidecars[name]; r != nil {
			return &r.meta
		}
	}
	return nil
}

func (t *Translator) remove(kind, name string) {
	switch kind {
	case kindServiceEntry:
		t.setServiceEntry(name, nil)
	case kindVirtualService:
		t.setVirtualService(name, nil)
	case kindDestinationRule:
		t.setDestinationRule(name, nil)
	case kindGateway:
		t.setGateway(name, nil)
	case kindWorkloadEntry:
		t.setWorkloadEntry(name, nil)
	case kindSidecar:
		t.setSidecar(name, nil)
	}
}

// The set* methods replace (or, with nil, remove) one input, keep the indexes, and mark
// what the old and the new version touch.

func (t *Translator) setServiceEntry(key string, se *serviceEntry) {
	old := t.ses[key]
	if old != nil && se != nil && old.sameShape(se) {
		// Only what it lists as endpoints may have changed: its hosts' load assignments.
		t.ses[key] = se
		for _, h := range se.hosts {
			t.seByHost.add(h, se) // in place of old
			t.markEndpoints(h)
		}
		return
	}
	if old != nil {
		if old.export().limited() {
			t.limitedExports--
			delete(t.limitedSEs, key)
		}
		for _, h := range old.hosts {
			t.seByHost.del(h, key)
			t.markHost(h, true)
		}
		delKey(t.selectorsByNS, old.Namespace, key)
		if old.vip() != "" {
			delKey(t.seByVIP, old.vip(), key)
			t.markVIP(old.vip())
		}
		delete(t.ses, key)
	}
	if se == nil {
		return
	}
	t.ses[key] = se
	if se.export().limited() {
		t.limitedExports++
		t.limitedSEs[key] = struct{}{}
	}
	for _, h := range se.hosts {
		t.seByHost.add(h, se)
		t.markHost(h, true)
	}
	if len(se.selector()) > 0 {
		addKey(t.selectorsByNS, se.Namespace, key)
	}
	if se.vip() != "" {
		addKey(t.seByVIP, se.vip(), key)
		t.markVIP(se.vip())
	}
}

// markVIP marks the hosts that answer to an address: which of them gets it as a domain on a
// port depends on all of them (vipOwner).
func (t *Translator) markVIP(vip string) {
	for _, k := range t.seByVIP[vip] {
		for _, h := range t.ses[k].hosts {
			t.markHost(h, false)
		}
	}
}

func (t *Translator) setVirtualService(key string, vs *virtualService) {
	if old := t.vss[key]; old != nil {
		if old.export().limited() {
			t.limitedVSExports--
			delete(t.limitedVSs, key)
		}
		t.markVirtualService(old)
		for _, h := range old.hosts {
			delKey(t.vsByHost, h, key)
		}
		for _, g := range old.gateways {
			delKey(t.vsByGateway, g, key)
		}
		delete(t.vsWildcard, key)
		delete(t.vss, key)
	}
	t.mark(unitKey{unitVirtualService, key})
	t.markDependents(depKey{depVirtualService, key}) // the roots that delegate to it
	if vs == nil {
		return
	}
	t.vss[key] = vs
	if vs.export().limited() {
		t.limitedVSExports++
		t.limitedVSs[key] = struct{}{}
	}
	for _, h := range vs.hosts {
		addKey(t.vsByHost, h, key)
		if isWildcard(h) {
			t.vsWildcard[key] = struct{}{}
		}
	}
	for _, g := range vs.gateways {
		addKey(t.vsByGateway, g, key)
	}
	t.markVirtualService(vs)
}

// markVirtualService marks what a VirtualService's routes appear in: its hosts (a wildcard
// host, every host it covers) and its gateways. Its destinations are not marked: what routes
// to a host does not change that host's own outputs.
func (t *Translator) markVirtualService(vs *virtualService) {
	for _, h := range vs.hosts {
		t.markHosts(h, false)
	}
	for _, g := range vs.gateways {
		t.mark(unitKey{unitGateway, g})
	}
}

func (t *Translator) setDestinationRule(key string, dr *destinationRule) {
	if old := t.drs[key]; old != nil {
		delKey(t.drByHost, old.host, key)
		delete(t.drWildcard, key)
		delete(t.drs, key)
		t.markHosts(old.host, true)
	}
	if dr == nil {
		return
	}
	t.drs[key] = dr
	addKey(t.drByHost, dr.host, key)
	if isWildcard(dr.host) {
		t.drWildcard[key] = struct{}{}
	}
	t.markHosts(dr.host, true)
}

func (t *Translator) setGateway(key string, gw *gateway) {
	delete(t.gws, key)
	if gw != nil {
		t.gws[key] = gw
	}
	t.mark(unitKey{unitGateway, key})
	t.markDependents(depKey{depGateway, key})
}

func (t *Translator) setWorkloadEntry(key string, we *workloadEntry) {
	if old := t.wes[key]; old != nil {
		t.markSelecting(old)
		delFrom(t.weByNamespace, old.Namespace, key)
		delete(t.wes, key)
	}
	if we == nil {
		return
	}
	t.wes[key] = we
	addTo(t.weByNamespace, we.Namespace, key)
	t.markSelecting(we)
}

// markSelecting marks the hosts of the ServiceEntries that select a workload. Endpoints
// appear only in their own host's outputs, so nothing that routes to those hosts is marked.
func (t *Translator) markSelecting(we *workloadEntry) {
	for _, key := range t.selectorsByNS[we.Namespace] {
		se := t.ses[key]
		if we.labels.selectedBy(se.selector()) {
			for _, h := range se.hosts {
				t.markEndpoints(h)
			}
		}
	}
}

// markHosts marks a host, or every known host a wildcard covers.
func (t *Translator) markHosts(host string, withDependents bool) {
	t.markHost(host, withDependents)
	if !isWildcard(host) {
		return
	}
	for h := range t.seByHost.hosts() {
		if hostname.Matches(host, h) {
			t.markHost(h, withDependents)
		}
	}
}

// markHost marks a host's units and, when what others read of it changed (its ServiceEntry or
// DestinationRule), every unit that read it.
func (t *Translator) markHost(host string, withDependents bool) {
	t.dirtyHosts[host] |= dirtyHost | dirtyEndpoints
	if withDependents {
		t.markDependents(depKey{depHost, host})
	}
}

// markEndpoints marks a host whose endpoints changed: its load assignments, and the rest of
// the host too when its clusters hold their endpoints (DNS resolution), or its listeners are
// bound to them (listensOnEndpoints).
func (t *Translator) markEndpoints(host string) {
	t.mark(unitKey{unitEndpoints, host})
	if se, _ := t.serviceEntryFor(host); se != nil && (!eds(se.resolution) || listensOnEndpoints(se)) {
		t.mark(unitKey{unitHost, host})
	}
}

func (t *Translator) markDependents(d depKey) {
	for u := range t.dependents[d] {
		t.mark(u)
	}
}

func addTo(m map[string]keySet, k, v string) {
	s := m[k]
	if s == nil {
		s = keySet{}
		m[k] = s
	}
	s[v] = struct{}{}
}

func delFrom(m map[string]keySet, k, v string) {
	if s := m[k]; s != nil {
		delete(s, v)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}
