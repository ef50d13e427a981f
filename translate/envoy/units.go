package envoy

import (
	"iter"
	"maps"
)

// unitTable is every unit's last build, by key. The two units of each host (its clusters,
// routes and listeners; its load assignments) share one entry of a map by host name: two
// entries of a map by unitKey a host were 157 MB at a million hosts (a 32-byte slot each,
// the map half full); one entry holding the pair of pointers is about 60, with no object
// apart for the pair (a million fewer for the collector to reach). Other units (ports,
// gateways, the plumbing: few) are kept by key.
type unitTable struct {
	hosts map[string]hostUnitPair
	other map[unitKey]*unitState
}

// hostUnitPair is a host's two units; either may be nil, not both.
type hostUnitPair struct {
	host, endpoints *unitState
}

func newUnitTable() unitTable {
	return unitTable{hosts: map[string]hostUnitPair{}, other: map[unitKey]*unitState{}}
}

// slot is where a host's unit of the kind is kept in p.
func (p *hostUnitPair) slot(kind unitKind) **unitState {
	if kind == unitHost {
		return &p.host
	}
	return &p.endpoints
}

func isHostUnit(kind unitKind) bool { return kind == unitHost || kind == unitEndpoints }

// get is the unit's last build, nil if it has none.
func (ut *unitTable) get(key unitKey) *unitState {
	if !isHostUnit(key.kind) {
		return ut.other[key]
	}
	p := ut.hosts[key.name]
	return *p.slot(key.kind)
}

// noHosts tells whether no host has a unit.
func (ut *unitTable) noHosts() bool { return len(ut.hosts) == 0 }

// set records u as the unit's last build; u is not nil.
func (ut *unitTable) set(key unitKey, u *unitState) {
	if !isHostUnit(key.kind) {
		ut.other[key] = u
		return
	}
	p := ut.hosts[key.name]
	*p.slot(key.kind) = u
	ut.hosts[key.name] = p
}

// delete forgets the unit.
func (ut *unitTable) delete(key unitKey) {
	if !isHostUnit(key.kind) {
		delete(ut.other, key)
		return
	}
	p, ok := ut.hosts[key.name]
	if !ok {
		return
	}
	*p.slot(key.kind) = nil
	if p.host == nil && p.endpoints == nil {
		delete(ut.hosts, key.name)
		return
	}
	ut.hosts[key.name] = p
}

// reserveHosts makes room for adding hosts at once when the table holds fewer: a first
// load's, not a rehash of every host at each doubling (3 s of serial recording at a million
// hosts). A table that holds as many already grows as maps do: remaking it for each large
// change would cost the whole mesh each time.
func (ut *unitTable) reserveHosts(adding int) {
	if len(ut.hosts) >= adding {
		return
	}
	hosts := make(map[string]hostUnitPair, len(ut.hosts)+adding)
	maps.Copy(hosts, ut.hosts)
	ut.hosts = hosts
}

// all yields every unit with its key, in no order.
func (ut *unitTable) all() iter.Seq2[unitKey, *unitState] {
	return func(yield func(unitKey, *unitState) bool) {
		for h, p := range ut.hosts {
			if p.host != nil && !yield(unitKey{unitHost, h}, p.host) {
				return
			}
			if p.endpoints != nil && !yield(unitKey{unitEndpoints, h}, p.endpoints) {
				return
			}
		}
		for k, u := range ut.other {
			if !yield(k, u) {
				return
			}
		}
	}
}

// hostNames yields every host with a host unit, in no order.
func (ut *unitTable) hostNames() iter.Seq[string] {
	return func(yield func(string) bool) {
		for h, p := range ut.hosts {
			if p.host != nil && !yield(h) {
				return
			}
		}
	}
}
