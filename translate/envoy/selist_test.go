package envoy

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestHostListsAgainstModel: the lists of ServiceEntries by host (hostSEs) hold, after any
// sequence of adds, replacements and removals over hosts that ServiceEntries share, what a
// plain map of key sets holds, sorted by key; no ServiceEntry's own one-element list
// (serviceEntry.alone), which every host it alone lists shares, is ever written; and a host is
// kept in the map of one exactly when one ServiceEntry lists it.
func TestHostListsAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lists := newHostSEs(0)
		model := map[string]map[string]*serviceEntry{} // host → key → the entry listed
		var made []*serviceEntry
		hosts := []string{"a", "b", "c"}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			host := rapid.SampledFrom(hosts).Draw(rt, "host")
			key := fmt.Sprintf("ns/se-%d", rapid.IntRange(0, 4).Draw(rt, "key"))
			if rapid.Bool().Draw(rt, "add") {
				// A ServiceEntry of one to three hosts, listed under each, as setServiceEntry
				// lists it: its own one-element list is then shared by those hosts.
				se := &serviceEntry{meta: meta{Key: key}}
				se.alone[0] = se
				made = append(made, se)
				for _, h := range rapid.SliceOfNDistinct(rapid.SampledFrom(hosts), 1, 3, rapid.ID[string]).Draw(rt, "hosts") {
					lists.add(h, se)
					if model[h] == nil {
						model[h] = map[string]*serviceEntry{}
					}
					model[h][key] = se
				}
			} else {
				lists.del(host, key)
				delete(model[host], key)
				if len(model[host]) == 0 {
					delete(model, host)
				}
			}
			for _, se := range made {
				if se.alone[0] != se {
					rt.Fatalf("%s's own list was written: it holds %s", se.Key, se.alone[0].Key)
				}
			}
			if n := len(slices.Collect(lists.hosts())); lists.len() != len(model) || n != len(model) {
				rt.Fatalf("%d hosts listed (%d iterated), want %d", lists.len(), n, len(model))
			}
			for h, l := range lists.many {
				if len(l) < 2 || lists.one[h] != nil {
					rt.Fatalf("host %s: %d in the map of many, in the map of one too: %v", h, len(l), lists.one[h] != nil)
				}
			}
			for h, want := range model {
				got := lists.get(h)
				keys := make([]string, 0, len(want))
				for k := range want {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				if len(got) != len(keys) {
					rt.Fatalf("host %s lists %d, want %d", h, len(got), len(keys))
				}
				for i, k := range keys {
					if got[i] != want[k] {
						rt.Fatalf("host %s: entry %d is %s, want the last %s added", h, i, got[i].Key, k)
					}
				}
			}
		}
	})
}
