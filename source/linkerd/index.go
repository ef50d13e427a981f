package linkerd

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
)

// The store collections a resolution reads.
const (
	ServiceEntries  = "istio/networking/v1alpha3/serviceentries"
	WorkloadEntries = "istio/networking/v1alpha3/workloadentries"
)

// index is what resolving a host needs to find quickly: which ServiceEntries list a host (or
// an address, for lookups by IP), and the WorkloadEntries of each namespace. It is brought up
// to date from the store's changes since the revisions it read (apply), so its cost is the
// size of a change, and it says which hosts a change touched. It keeps of a ServiceEntry only
// what finds it; a resolution reads the one it needs from the store view.
type index struct {
	ses    map[string]*seInfo            // by namespace/name
	byHost map[string][]string           // host or address → ServiceEntry keys, sorted
	sel    map[string]map[string]bool    // namespace → keys of its ServiceEntries with a workloadSelector
	wes    map[string]map[string]*weInfo // namespace → key → WorkloadEntry
	seRev  uint64
	weRev  uint64
}

type seInfo struct {
	key, namespace string
	created        time.Time
	hosts          []string // lower case; then the addresses
	selector       bool
}

type weInfo struct {
	key    string
	spec   *networking.WorkloadEntry
	labels map[string]string
}

func newIndex() *index {
	return &index{ses: map[string]*seInfo{}, byHost: map[string][]string{}, sel: map[string]map[string]bool{}, wes: map[string]map[string]*weInfo{}}
}

// touched collects the hosts a change may have changed the answer of.
type touched map[string]struct{}

func (t touched) add(hosts ...string) {
	for _, h := range hosts {
		t[h] = struct{}{}
	}
}

// sync brings the index to the view: the changes of both collections since the revisions it
// read, or everything again when the store compacted what it would need. all reports that
// every host may have changed.
func (x *index) sync(v *store.View) (hosts touched, all bool) {
	hosts = touched{}
	se, err := v.ChangesSince(ServiceEntries, x.seRev)
	if err != nil {
		x.reloadServiceEntries(v)
		all = true
	} else {
		for _, e := range se.Deleted {
			x.removeSE(e.Name, hosts)
		}
		for _, e := range se.Upserts {
			x.removeSE(e.Name, hosts)
			x.addSE(e, hosts)
		}
		x.seRev = se.Revision
	}
	we, err := v.ChangesSince(WorkloadEntries, x.weRev)
	if err != nil {
		x.reloadWorkloadEntries(v)
		all = true
	} else {
		for _, e := range we.Deleted {
			x.removeWE(e.Name, hosts)
		}
		for _, e := range we.Upserts {
			x.removeWE(e.Name, hosts)
			x.addWE(e, hosts)
		}
		x.weRev = we.Revision
	}
	return hosts, all
}

func (x *index) reloadServiceEntries(v *store.View) {
	x.ses, x.byHost, x.sel = map[string]*seInfo{}, map[string][]string{}, map[string]map[string]bool{}
	rev, es := v.Snapshot(ServiceEntries)
	t := touched{} // a reload touches everything: what it names is not read
	for _, e := range es {
		x.addSE(e, t)
	}
	x.seRev = rev
}

func (x *index) reloadWorkloadEntries(v *store.View) {
	x.wes = map[string]map[string]*weInfo{}
	rev, es := v.Snapshot(WorkloadEntries)
	t := touched{} // a reload touches everything: what it names is not read
	for _, e := range es {
		x.addWE(e, t)
	}
	x.weRev = rev
}

func (x *index) addSE(e *store.Entry, hosts touched) {
	spec, ok := decodeServiceEntry(e)
	if !ok {
		return // the store validated it; a body it cannot read lists no host
	}
	ns, _, _ := strings.Cut(e.Name, "/")
	info := &seInfo{key: e.Name, namespace: ns, created: e.CreateTime(), selector: len(spec.GetWorkloadSelector().GetLabels()) > 0}
	for _, h := range spec.GetHosts() {
		info.hosts = append(info.hosts, strings.ToLower(h))
	}
	for _, a := range spec.GetAddresses() {
		if ip, err := netip.ParseAddr(a); err == nil { // a CIDR range is no lookup key
			info.hosts = append(info.hosts, ip.Unmap().String())
		}
	}
	x.ses[e.Name] = info
	for _, h := range info.hosts {
		keys := x.byHost[h]
		if i, found := slices.BinarySearch(keys, e.Name); !found {
			x.byHost[h] = slices.Insert(keys, i, e.Name)
		}
	}
	if info.selector {
		if x.sel[ns] == nil {
			x.sel[ns] = map[string]bool{}
		}
		x.sel[ns][e.Name] = true
	}
	hosts.add(info.hosts...)
}

func (x *index) removeSE(key string, hosts touched) {
	info := x.ses[key]
	if info == nil {
		return
	}
	delete(x.ses, key)
	for _, h := range info.hosts {
		keys := x.byHost[h]
		if i, found := slices.BinarySearch(keys, key); found {
			keys = slices.Delete(keys, i, i+1)
		}
		if len(keys) == 0 {
			delete(x.byHost, h)
		} else {
			x.byHost[h] = keys
		}
	}
	if m := x.sel[info.namespace]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(x.sel, info.namespace)
		}
	}
	hosts.add(info.hosts...)
}

func (x *index) addWE(e *store.Entry, hosts touched) {
	typeURL, value := e.Body()
	spec := &networking.WorkloadEntry{}
	if !strings.HasSuffix(typeURL, ".WorkloadEntry") || proto.Unmarshal(value, spec) != nil {
		return
	}
	ns, _, _ := strings.Cut(e.Name, "/")
	if x.wes[ns] == nil {
		x.wes[ns] = map[string]*weInfo{}
	}
	x.wes[ns][e.Name] = &weInfo{key: e.Name, spec: spec, labels: spec.GetLabels()}
	x.touchSelecting(ns, hosts)
}

func (x *index) removeWE(key string, hosts touched) {
	ns, _, _ := strings.Cut(key, "/")
	if _, ok := x.wes[ns][key]; !ok {
		return
	}
	delete(x.wes[ns], key)
	if len(x.wes[ns]) == 0 {
		delete(x.wes, ns)
	}
	x.touchSelecting(ns, hosts)
}

// touchSelecting marks the hosts of a namespace's ServiceEntries that select WorkloadEntries:
// a WorkloadEntry of the namespace that came, went or changed labels may be among theirs.
func (x *index) touchSelecting(ns string, hosts touched) {
	for key := range x.sel[ns] {
		hosts.add(x.ses[key].hosts...)
	}
}

// winner is the ServiceEntry that defines a host: the oldest of those that list it, then the
// first by namespace/name, Istio's rule for a host defined twice (and the translation's).
func (x *index) winner(host string) *seInfo {
	var best *seInfo
	for _, key := range x.byHost[host] {
		se := x.ses[key]
		if best == nil || se.created.Before(best.created) || se.created.Equal(best.created) && se.key < best.key {
			best = se
		}
	}
	return best
}

// selected returns the WorkloadEntries of a namespace that a selector selects, by name.
func (x *index) selected(ns string, selector map[string]string) []*weInfo {
	if len(selector) == 0 {
		return nil
	}
	var out []*weInfo
	for _, we := range x.wes[ns] {
		if matches(we.labels, selector) {
			out = append(out, we)
		}
	}
	// In key order, as before: only the matches are sorted, not the namespace's every entry.
	slices.SortFunc(out, func(a, b *weInfo) int { return strings.Compare(a.key, b.key) })
	return out
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func decodeServiceEntry(e *store.Entry) (*networking.ServiceEntry, bool) {
	typeURL, value := e.Body()
	spec := &networking.ServiceEntry{}
	if !strings.HasSuffix(typeURL, ".ServiceEntry") || proto.Unmarshal(value, spec) != nil {
		return nil, false
	}
	return spec, true
}
