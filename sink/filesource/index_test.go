package filesource

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

// TestIndexAgainstMerge: files change at random (names added, edited, dropped, defined in
// several files, files removed); after each change, the updates the index gives, applied to
// what the store was given, make exactly what merging every file from scratch makes — each
// name from the first file (by path) that defines it — and the duplicate faults are one per
// definition after the first. The first write, and each after one the store refused, is the
// whole state (state), for which the index keeps no touched names.
func TestIndexAgainstMerge(t *testing.T) {
	kind, _ := kinds.ByCollection(seColl)
	rapid.Check(t, func(rt *rapid.T) {
		paths := []string{"a.yaml", "b.yaml", "c.yaml"}
		names := []string{"ns/n0", "ns/n1", "ns/n2", "ns/n3"}
		ix := newIndex(nil)
		files := map[string]*fileState{}
		held := map[string]string{} // what the store was given: name → version
		whole := true               // the next write is the whole state: the first, and one after a refusal
		for step := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			ix.whole = whole
			p := rapid.SampledFrom(paths).Draw(rt, "file")
			var before []stored
			if st := files[p]; st != nil {
				before = st.objects
			}
			if rapid.IntRange(0, 4).Draw(rt, "remove") == 0 {
				delete(files, p)
				ix.replaced(p, before, nil)
			} else {
				st := &fileState{}
				var objs []stored
				for _, n := range rapid.Permutation(names).Draw(rt, "order") { // a file's order is its author's
					if rapid.Bool().Draw(rt, "defines") {
						enc, err := store.Encode(&mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: n, Version: fmt.Sprint(p, step)}})
						if err != nil {
							rt.Fatal(err)
						}
						objs = append(objs, stored{kind: kind, enc: enc, doc: len(objs) + 1})
					}
				}
				st.setObjects(objs)
				files[p] = st
				ix.replaced(p, before, st.objects)
			}
			if rapid.IntRange(0, 5).Draw(rt, "refused") == 0 {
				whole = true // the store kept what it held; the loader writes all of it next
				continue
			}
			if whole {
				clear(held)
				for _, es := range ix.state(files) {
					for _, e := range es {
						held[e.Name()] = e.Version()
					}
				}
			} else {
				for _, u := range ix.updates(files) {
					for _, n := range u.Removed {
						delete(held, n)
					}
					for _, e := range u.Encoded {
						held[e.Name()] = e.Version()
					}
				}
			}
			ix.wrote()
			whole = false

			want := map[string]string{}
			dups := 0
			for _, path := range slices.Sorted(maps.Keys(files)) {
				for _, o := range files[path].objects {
					if _, seen := want[o.enc.Name()]; seen {
						dups++
						continue
					}
					want[o.enc.Name()] = o.enc.Version()
				}
			}
			if !maps.Equal(held, want) {
				rt.Fatalf("step %d: the store holds %v, merging the files gives %v", step, held, want)
			}
			if ix.names != len(want) {
				rt.Fatalf("step %d: the index counts %d names, the files define %d", step, ix.names, len(want))
			}
			if got := len(ix.dupFaults(files)); got != dups {
				rt.Fatalf("step %d: %d duplicate faults, want %d", step, got, dups)
			}
			full := map[string]string{}
			for _, enc := range ix.state(files)[seColl] {
				if _, twice := full[enc.Name()]; twice {
					rt.Fatalf("step %d: the full state has %s twice", step, enc.Name())
				}
				full[enc.Name()] = enc.Version()
			}
			if !maps.Equal(full, want) {
				rt.Fatalf("step %d: the full state is %v, merging the files gives %v", step, full, want)
			}
		}
	})
}
