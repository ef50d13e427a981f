package envoy

import (
	"cmp"
	"slices"
)

// labels are a workload's labels, sorted by key, each key once: the order in which a load
// assignment's metadata writes them, and a binary search for the subsets that select them.
// Not a map: an endpoint's few labels were a map each, built for every endpoint of every build.
type labels []label

type label struct{ k, v string }

// labelsOf sorts a map's labels.
func labelsOf(m map[string]string) labels {
	if len(m) == 0 {
		return nil
	}
	ls := make(labels, 0, len(m))
	for k, v := range m {
		ls = append(ls, label{k, v})
	}
	slices.SortFunc(ls, func(a, b label) int { return cmp.Compare(a.k, b.k) })
	return ls
}

// get returns the value of a label.
func (ls labels) get(k string) (string, bool) {
	i, ok := slices.BinarySearchFunc(ls, k, func(l label, k string) int { return cmp.Compare(l.k, k) })
	if !ok {
		return "", false
	}
	return ls[i].v, true
}

// selectedBy reports whether every label of the selector is among these. An empty selector
// selects nothing: Istio's ServiceEntry without a workloadSelector has no selected workloads.
func (ls labels) selectedBy(selector map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if got, ok := ls.get(k); !ok || got != v {
			return false
		}
	}
	return true
}

// settled sorts a map's entries as decoded in order, each key once with the last value given
// (proto's rule for a map field whose key repeats).
func (ls labels) settled() labels {
	slices.SortStableFunc(ls, func(a, b label) int { return cmp.Compare(a.k, b.k) })
	out := ls[:0]
	for i, l := range ls {
		if i+1 < len(ls) && ls[i+1].k == l.k {
			continue // a later value of the same key wins
		}
		out = append(out, l)
	}
	return out
}

// namedPort is a workload's port for a service port's name (WorkloadEntry.ports).
type namedPort struct {
	name   string
	number uint32
}

// portsOf sorts a map's ports by name.
func portsOf(m map[string]uint32) []namedPort {
	if len(m) == 0 {
		return nil
	}
	ps := make([]namedPort, 0, len(m))
	for n, p := range m {
		ps = append(ps, namedPort{n, p})
	}
	slices.SortFunc(ps, func(a, b namedPort) int { return cmp.Compare(a.name, b.name) })
	return ps
}

// settledPorts sorts ports as decoded in order, each name once with its last number.
func settledPorts(ps []namedPort) []namedPort {
	slices.SortStableFunc(ps, func(a, b namedPort) int { return cmp.Compare(a.name, b.name) })
	out := ps[:0]
	for i, p := range ps {
		if i+1 < len(ps) && ps[i+1].name == p.name {
			continue
		}
		out = append(out, p)
	}
	return out
}

// portNamed returns the number of the port of a name.
func portNamed(ps []namedPort, name string) (uint32, bool) {
	i, ok := slices.BinarySearchFunc(ps, name, func(p namedPort, n string) int { return cmp.Compare(p.name, n) })
	if !ok {
		return 0, false
	}
	return ps[i].number, true
}
