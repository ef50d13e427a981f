package zksource

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/store"
	networking "istio.io/api/networking/v1alpha3"
)

// Fault is a znode the source could not turn into part of a ServiceEntry: a malformed
// provider URL or instance, a service whose ServiceEntry is invalid or whose host is another
// service's, a znode that could not be read. The rest is served.
type Fault struct {
	Path string // the znode
	Err  error
}

func (f *Fault) Error() string { return f.Path + ": " + f.Err.Error() }
func (f *Fault) Unwrap() error { return f.Err }

// registry is the registry as last read, and the ServiceEntries built from it.
type registry struct {
	namespace             string
	dubboRoot, springRoot string
	dubbo                 map[string]*dubboIface    // by interface znode name
	spring                map[string]*springService // by service znode name
	rootFaults            map[string]error          // by root: a root that could not be read

	entries map[string]*entry   // by service key (dubboKeyOf, springKeyOf)
	claims  map[string][]string // host → keys of the services built with it, sorted
	dirty   map[string]struct{} // hosts whose resource may have changed since changes()
}

type dubboIface struct {
	providers map[string]provider // by znode name
	keys      []string            // the services built from it, sorted
	err       error               // its providers could not be read: the last read are kept
	bad       int                 // providers that are faults
}

type provider struct {
	key dubboKey
	ep  endpoint
	err error
}

type springService struct {
	instances map[string]instance // by znode name, the instance's ID
	err       error               // its instances could not be listed: the last listed are kept
}

type instance struct {
	ep  endpoint
	err error
}

// entry is one service's ServiceEntry, encoded, or why it has none.
type entry struct {
	path      string // the service's znode, for faults
	what      string // which service of the znode it is, for faults: "" or Dubbo's group, version, protocol
	host      string
	enc       store.Encoded
	endpoints int
	err       error
}

// touched is what a burst's events touched under one root.
type touched struct {
	root      bool
	services  map[string]struct{}            // interfaces, or Spring services
	instances map[string]map[string]struct{} // Spring: service → instance IDs
}

func newRegistry(namespace, dubboRoot, springRoot string) registry {
	return registry{
		namespace: namespace, dubboRoot: dubboRoot, springRoot: springRoot,
		dubbo: map[string]*dubboIface{}, spring: map[string]*springService{},
		rootFaults: map[string]error{},
		entries:    map[string]*entry{}, claims: map[string][]string{}, dirty: map[string]struct{}{},
	}
}

// classify sorts the znodes that events named by what must be read again.
func (g *registry) classify(paths map[string]struct{}) (dubbo, spring touched) {
	for p := range paths {
		if rel, ok := below(p, g.dubboRoot); ok {
			parts := strings.Split(rel, "/")
			switch {
			case rel == "":
				dubbo.root = true
			case len(parts) == 2 && parts[1] == "providers":
				dubbo.addService(parts[0])
			}
		} else if rel, ok := below(p, g.springRoot); ok {
			parts := strings.Split(rel, "/")
			switch {
			case rel == "":
				spring.root = true
			case len(parts) == 1:
				spring.addService(parts[0])
			case len(parts) == 2:
				spring.addInstance(parts[0], parts[1])
			}
		}
	}
	return dubbo, spring
}

// below returns p relative to root ("" for root itself) when p is root or inside it.
func below(p, root string) (string, bool) {
	if p == root {
		return "", true
	}
	rel, ok := strings.CutPrefix(p, root+"/")
	return rel, ok
}

func (t *touched) addService(name string) {
	if t.services == nil {
		t.services = map[string]struct{}{}
	}
	t.services[name] = struct{}{}
}

func (t *touched) addInstance(service, id string) {
	if t.instances == nil {
		t.instances = map[string]map[string]struct{}{}
	}
	if t.instances[service] == nil {
		t.instances[service] = map[string]struct{}{}
	}
	t.instances[service][id] = struct{}{}
}

// listRoot reads a root's children when t asks for it, and returns the services to read:
// every known one when full, else those t names, plus those the root holds and were not
// known. add and drop bring the known services in line with the root.
func (g *registry) listRoot(r *reader, root string, full bool, t touched, known map[string]bool, add, drop func(string)) []string {
	want := map[string]bool{}
	for name := range t.services {
		want[name] = known[name]
	}
	if full {
		maps.Copy(want, known)
	}
	if t.root {
		kids, _, err := r.children(root)
		switch {
		case errors.Is(err, errLost):
		case err != nil:
			g.rootFaults[root] = err
		default:
			delete(g.rootFaults, root)
			in := make(map[string]bool, len(kids))
			for _, k := range kids {
				in[k] = true
				if !known[k] {
					add(k)
					want[k] = true
				}
			}
			for name := range known {
				if !in[name] {
					drop(name)
					delete(want, name)
				}
			}
		}
	}
	var out []string
	for name, ok := range want {
		if ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// providersRead is what reading one interface's providers found.
type providersRead struct {
	names   []string
	decoded map[string]provider // the names not known before, decoded
	err     error
}

// readDubbo reads the interfaces t names (every one when full) and their providers.
func (g *registry) readDubbo(r *reader, full bool, t touched) {
	known := make(map[string]bool, len(g.dubbo))
	for name := range g.dubbo {
		known[name] = true
	}
	names := g.listRoot(r, g.dubboRoot, full, t, known,
		func(name string) { g.dubbo[name] = &dubboIface{providers: map[string]provider{}} },
		g.dropDubbo)
	reads := make([]providersRead, len(names))
	each(len(names), func(i int) { reads[i] = g.readProviders(r, names[i]) })
	for i, name := range names {
		g.applyProviders(name, reads[i])
	}
}

// readProviders lists an interface's providers and decodes the new ones. It runs on a reader
// goroutine: it only reads the registry, which nothing writes meanwhile.
func (g *registry) readProviders(r *reader, iface string) providersRead {
	names, _, err := r.children(g.providersPath(iface))
	if err != nil {
		return providersRead{err: err}
	}
	known := g.dubbo[iface].providers
	out := providersRead{names: names, decoded: map[string]provider{}}
	for _, n := range names {
		if _, ok := known[n]; !ok {
			k, ep, err := decodeProvider(n)
			out.decoded[n] = provider{key: k, ep: ep, err: err}
		}
	}
	return out
}

func (g *registry) applyProviders(iface string, rd providersRead) {
	d := g.dubbo[iface]
	switch {
	case errors.Is(rd.err, errLost):
		return
	case rd.err != nil:
		d.err = rd.err
		return
	}
	d.err = nil
	providers := make(map[string]provider, len(rd.names))
	d.bad = 0
	for _, n := range rd.names {
		p, ok := d.providers[n]
		if !ok {
			p = rd.decoded[n]
		}
		providers[n] = p
		if p.err != nil {
			d.bad++
		}
	}
	d.providers = providers
	g.rebuildDubbo(iface)
}

// rebuildDubbo builds the ServiceEntries of an interface's providers, one per group, version
// and protocol, and drops those no provider declares any more.
func (g *registry) rebuildDubbo(iface string) {
	d := g.dubbo[iface]
	byKey := map[dubboKey][]endpoint{}
	for _, n := range slices.Sorted(maps.Keys(d.providers)) {
		if p := d.providers[n]; p.err == nil {
			byKey[p.key] = append(byKey[p.key], p.ep)
		}
	}
	name := interfaceName(iface)
	keys := make([]string, 0, len(byKey))
	for k, eps := range byKey {
		key := dubboKeyOf(iface, k)
		keys = append(keys, key)
		what := fmt.Sprintf("group %q, version %q, protocol %s: ", k.group, k.version, k.scheme)
		g.setEntry(key, g.providersPath(iface), what, buildDubbo(name, k, eps), nil)
	}
	slices.Sort(keys)
	for _, old := range d.keys {
		if _, found := slices.BinarySearch(keys, old); !found {
			g.removeEntry(old)
		}
	}
	d.keys = keys
}

func (g *registry) dropDubbo(iface string) {
	for _, key := range g.dubbo[iface].keys {
		g.removeEntry(key)
	}
	delete(g.dubbo, iface)
}

func (g *registry) providersPath(iface string) string {
	return g.dubboRoot + "/" + iface + "/providers"
}

// interfaceName is the Java interface of its znode, which Dubbo names URL-encoded.
func interfaceName(znode string) string {
	if name, err := url.QueryUnescape(znode); err == nil {
		return name
	}
	return znode
}

func dubboKeyOf(iface string, k dubboKey) string {
	return "dubbo\x00" + iface + "\x00" + k.group + "\x00" + k.version + "\x00" + k.scheme
}

func springKeyOf(name string) string { return "spring\x00" + name }

// springList is what listing one Spring service's instances found.
type springList struct {
	ids []string
	err error
}

// springRead is what reading one Spring instance found.
type springRead struct {
	service, id string
	exists      bool
	inst        instance
	err         error
}

// readSpring reads the services t names (every one when full), their instance lists, and
// the data of the instances that are new, or that t names, or every one when full.
func (g *registry) readSpring(r *reader, full bool, t touched) {
	known := make(map[string]bool, len(g.spring))
	for name := range g.spring {
		known[name] = true
	}
	names := g.listRoot(r, g.springRoot, full, t, known,
		func(name string) { g.spring[name] = &springService{instances: map[string]instance{}} },
		g.dropSpring)
	lists := make([]springList, len(names))
	each(len(names), func(i int) {
		ids, _, err := r.children(g.springRoot + "/" + names[i])
		lists[i] = springList{ids: ids, err: err}
	})
	var reads []springRead
	for i, name := range names {
		reads = append(reads, g.applyList(name, lists[i], full, t.instances[name])...)
	}
	reads = append(reads, g.changedData(names, t)...)
	each(len(reads), func(i int) { g.readInstance(r, &reads[i]) })
	for _, rd := range reads {
		g.applyInstance(rd)
	}
	rebuild := map[string]bool{}
	for _, name := range names {
		rebuild[name] = true
	}
	for _, rd := range reads {
		rebuild[rd.service] = true
	}
	for name := range rebuild {
		if g.spring[name] != nil {
			g.rebuildSpring(name)
		}
	}
}

// changedData are the reads of the instances t names whose services were not listed again
// (listed, applyList reads them): their data changed, or they were deleted.
func (g *registry) changedData(listed []string, t touched) []springRead {
	var reads []springRead
	for name, ids := range t.instances {
		if g.spring[name] == nil || slices.Contains(listed, name) {
			continue
		}
		for id := range ids {
			reads = append(reads, springRead{service: name, id: id})
		}
	}
	return reads
}

// applyList brings a service's instances in line with its listing and returns the reads of
// the instances to read: the new ones, those touched, or all when full.
func (g *registry) applyList(name string, l springList, full bool, touchedIDs map[string]struct{}) []springRead {
	s := g.spring[name]
	switch {
	case errors.Is(l.err, errLost):
		return nil
	case l.err != nil:
		s.err = l.err
		return nil
	}
	s.err = nil
	var reads []springRead
	listed := make(map[string]bool, len(l.ids))
	for _, id := range l.ids {
		listed[id] = true
		_, ok := s.instances[id]
		if _, hit := touchedIDs[id]; full || !ok || hit {
			reads = append(reads, springRead{service: name, id: id})
		}
	}
	maps.DeleteFunc(s.instances, func(id string, _ instance) bool { return !listed[id] })
	return reads
}

// readInstance reads and decodes one instance's data, on a reader goroutine.
func (g *registry) readInstance(r *reader, rd *springRead) {
	data, exists, err := r.data(g.springRoot + "/" + rd.service + "/" + rd.id)
	rd.exists, rd.err = exists, err
	if err == nil && exists {
		ep, err := decodeSpring(data)
		rd.inst = instance{ep: ep, err: err}
	}
}

func (g *registry) applyInstance(rd springRead) {
	s := g.spring[rd.service]
	switch {
	case s == nil, errors.Is(rd.err, errLost):
	case rd.err != nil:
		s.instances[rd.id] = instance{err: rd.err}
	case !rd.exists:
		delete(s.instances, rd.id)
	default:
		s.instances[rd.id] = rd.inst
	}
}

// rebuildSpring builds a Spring service's ServiceEntry from its good instances; a service
// with none has none.
func (g *registry) rebuildSpring(name string) {
	s := g.spring[name]
	var eps []endpoint
	for _, id := range slices.Sorted(maps.Keys(s.instances)) {
		if in := s.instances[id]; in.err == nil {
			eps = append(eps, in.ep)
		}
	}
	key := springKeyOf(name)
	if len(eps) == 0 {
		g.removeEntry(key)
		return
	}
	se, err := buildSpring(name, eps)
	g.setEntry(key, g.springRoot+"/"+name, "", se, err)
}

func (g *registry) dropSpring(name string) {
	g.removeEntry(springKeyOf(name))
	delete(g.spring, name)
}

// setEntry records a service's ServiceEntry (or, with err, why it has none) and claims its
// host.
func (g *registry) setEntry(key, path, what string, se *networking.ServiceEntry, err error) {
	e := &entry{path: path, what: what, err: err}
	if err == nil {
		e.host, e.endpoints = se.GetHosts()[0], len(se.GetEndpoints())
		e.enc, e.err = encodeEntry(g.namespace, se)
	}
	g.removeEntry(key)
	g.entries[key] = e
	if e.err == nil {
		g.claims[e.host] = insertSorted(g.claims[e.host], key)
		g.dirty[e.host] = struct{}{}
	}
}

func (g *registry) removeEntry(key string) {
	e, ok := g.entries[key]
	if !ok {
		return
	}
	delete(g.entries, key)
	if e.err != nil {
		return
	}
	ks := slices.DeleteFunc(g.claims[e.host], func(k string) bool { return k == key })
	if len(ks) == 0 {
		delete(g.claims, e.host)
	} else {
		g.claims[e.host] = ks
	}
	g.dirty[e.host] = struct{}{}
}

func insertSorted(ks []string, k string) []string {
	i, found := slices.BinarySearch(ks, k)
	if found {
		return ks
	}
	return slices.Insert(ks, i, k)
}

// changes returns the resources to write since the last call: for each host touched, the
// ServiceEntry of the first service (by key) that has it, or its removal when none has.
func (g *registry) changes() []change {
	out := make([]change, 0, len(g.dirty))
	for host := range g.dirty {
		c := change{name: g.namespace + "/" + host}
		if ks := g.claims[host]; len(ks) > 0 {
			c.enc = &g.entries[ks[0]].enc
		}
		out = append(out, c)
	}
	clear(g.dirty)
	return out
}

// served counts the ServiceEntries served and their endpoints.
func (g *registry) served() (services, instances int) {
	for _, ks := range g.claims {
		services++
		instances += g.entries[ks[0]].endpoints
	}
	return services, instances
}

// faults are the registry's faults, sorted.
func (g *registry) faults() []error {
	var out []error
	for root, err := range g.rootFaults {
		out = append(out, &Fault{Path: root, Err: err})
	}
	for iface, d := range g.dubbo {
		if d.err != nil {
			out = append(out, &Fault{Path: g.providersPath(iface), Err: d.err})
		}
		if d.bad == 0 {
			continue
		}
		for n, p := range d.providers {
			if p.err != nil {
				out = append(out, &Fault{Path: g.providersPath(iface) + "/" + n, Err: p.err})
			}
		}
	}
	for name, s := range g.spring {
		if s.err != nil {
			out = append(out, &Fault{Path: g.springRoot + "/" + name, Err: s.err})
		}
		for id, in := range s.instances {
			if in.err != nil && !errors.Is(in.err, errDisabled) {
				out = append(out, &Fault{Path: g.springRoot + "/" + name + "/" + id, Err: in.err})
			}
		}
	}
	out = append(out, g.entryFaults()...)
	slices.SortFunc(out, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return out
}

// entryFaults are the services without a valid ServiceEntry, and those whose host is served
// from another service.
func (g *registry) entryFaults() []error {
	var out []error
	for _, e := range g.entries {
		if e.err != nil {
			out = append(out, &Fault{Path: e.path, Err: fmt.Errorf("%sno valid ServiceEntry: %w", e.what, e.err)})
		}
	}
	for host, ks := range g.claims {
		served := g.entries[ks[0]]
		for _, k := range ks[1:] {
			e := g.entries[k]
			out = append(out, &Fault{Path: e.path, Err: fmt.Errorf("%shost %s is also that of %s (%s), which is served instead",
				e.what, host, served.path, strings.TrimSuffix(served.what, ": "))})
		}
	}
	return out
}
