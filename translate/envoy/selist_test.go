package envoy

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestHostListsAgainstModel: the lists of ServiceEntries by host (addSE, delSE) hold, after
// any sequence of adds, replacements and removals over hosts that ServiceEntries share, what
// a plain map of key sets holds, sorted by key; and no ServiceEntry's own one-element list
// (serviceEntry.alone), which every host it alone lists shares, is ever written.
func TestHostListsAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lists := map[string]seList{}
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
					addSE(lists, h, se)
					if model[h] == nil {
						model[h] = map[string]*serviceEntry{}
					}
					model[h][key] = se
				}
			} else {
				delSE(lists, host, key)
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
			if len(lists) != len(model) {
				rt.Fatalf("%d hosts listed, want %d", len(lists), len(model))
			}
			for h, want := range model {
				got := lists[h]
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
