package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"
)

// storeModel is what the store must serve, computed the plain way: every owner's copies in a
// map, and the conflict rule applied to each name on every read.
type storeModel struct {
	owned  map[string]map[string]map[string]string // collection → name → owner → content
	absent map[string]bool
}

// shadowed is how many names more than one owner holds: one is served, the others shadowed.
func (m *storeModel) shadowed(coll string) int {
	n := 0
	for _, owners := range m.owned[coll] {
		if len(owners) > 1 {
			n++
		}
	}
	return n
}

func (m *storeModel) served(coll string) map[string]string {
	out := map[string]string{}
	for name, owners := range m.owned[coll] {
		ids := slices.Collect(maps.Keys(owners))
		sort.Slice(ids, func(i, j int) bool {
			if m.absent[ids[i]] != m.absent[ids[j]] {
				return m.absent[ids[j]]
			}
			return ids[i] < ids[j]
		})
		if len(ids) > 0 {
			out[name] = ids[0] + "=" + owners[ids[0]]
		}
	}
	return out
}

func (m *storeModel) set(coll, name, owner, content string) {
	if m.owned[coll] == nil {
		m.owned[coll] = map[string]map[string]string{}
	}
	if m.owned[coll][name] == nil {
		m.owned[coll][name] = map[string]string{}
	}
	m.owned[coll][name][owner] = content
}

func (m *storeModel) remove(coll, name, owner string) {
	delete(m.owned[coll][name], owner)
	if len(m.owned[coll][name]) == 0 {
		delete(m.owned[coll], name)
	}
}

// servedOf reads what a view serves, in the model's terms.
func servedOf(v *View, coll string) map[string]string {
	_, es := v.Snapshot(coll)
	out := map[string]string{}
	for _, e := range es {
		out[e.Name] = e.Owner + "=" + bodyString(e)
	}
	return out
}

// TestStoreAgainstModel drives the store with random writes by three owners over two
// collections (full states, increments of one or of both at once, removals, presence,
// compaction), keeps every view it took, and checks after every step: the newest view serves
// what the model says; every older view still serves what it served when taken (a write
// never changes a published state); and ChangesSince brings each older view's state to the
// newest one, or says ErrCompacted.
func TestStoreAgainstModel(t *testing.T) {
	defer func(min int) { parallelWriteMin = min }(parallelWriteMin)
	parallelWriteMin = 1 // every write's collections at once, as a large write's are
	defer func(min int) { bulkInsertMin = min }(bulkInsertMin)
	bulkInsertMin = 2 // and its trees written in two passes, as a large write's are
	rapid.Check(t, func(rt *rapid.T) {
		now := time.Unix(1000, 0)
		s := New(Options{Now: func() time.Time { return now }, TombstoneRetention: time.Minute})
		m := &storeModel{owned: map[string]map[string]map[string]string{}, absent: map[string]bool{}}
		colls := []string{collA, collB}
		owners := []string{"a", "b", "c"}
		names := []string{"ns/x", "ns/y", "ns/z", "ns/x2"}
		type taken struct {
			view   *View
			served map[string]map[string]string
		}
		var views []taken
		contents := map[string]string{} // the body of each content label, as bodyString writes it
		body := func(content string) *mcpapi.Resource {
			r := res("", content)
			contents[content] = r.Body.TypeUrl + ":" + string(r.Body.Value)
			return r
		}
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			owner := rapid.SampledFrom(owners).Draw(rt, "owner")
			coll := rapid.SampledFrom(colls).Draw(rt, "collection")
			increment := func(coll string) Update {
				u := Update{Collection: coll}
				for _, n := range names {
					switch rapid.IntRange(0, 2).Draw(rt, "what") {
					case 1:
						c := fmt.Sprint(rapid.IntRange(0, 2).Draw(rt, "content"))
						r := body(c)
						r.Metadata.Name = n
						u.Resources = append(u.Resources, r)
						m.set(coll, n, owner, c)
					case 2:
						u.Removed = append(u.Removed, n)
						m.remove(coll, n, owner)
					}
				}
				return u
			}
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0, 1: // an increment: upserts and removals of distinct names
				if _, err := s.Apply(owner, increment(coll)); err != nil {
					rt.Fatalf("step %d: Apply: %v", step, err)
				}
			case 5: // increments of every collection in one write
				var us []Update
				for _, c := range colls {
					us = append(us, increment(c))
				}
				if _, err := s.Apply(owner, us...); err != nil {
					rt.Fatalf("step %d: Apply to every collection: %v", step, err)
				}
			case 2: // a full state of one collection
				u := Update{Collection: coll, Full: true}
				for _, n := range names {
					m.remove(coll, n, owner)
					if rapid.Bool().Draw(rt, "holds") {
						c := fmt.Sprint(rapid.IntRange(0, 2).Draw(rt, "content"))
						r := body(c)
						r.Metadata.Name = n
						u.Resources = append(u.Resources, r)
						m.set(coll, n, owner, c)
					}
				}
				if _, err := s.Apply(owner, u); err != nil {
					rt.Fatalf("step %d: Apply full: %v", step, err)
				}
			case 3:
				present := rapid.Bool().Draw(rt, "present")
				m.absent[owner] = !present
				if _, err := s.SetOwnerPresent(owner, present); err != nil {
					rt.Fatal(err)
				}
			case 4:
				now = now.Add(time.Duration(rapid.IntRange(0, 90).Draw(rt, "seconds")) * time.Second)
				s.Compact(now.Add(-time.Minute))
			}
			v := s.View()
			cur := map[string]map[string]string{}
			for _, c := range colls {
				want := m.served(c)
				for n, oc := range want {
					owner, content, _ := cutLast(oc)
					want[n] = owner + "=" + contents[content]
				}
				got := servedOf(v, c)
				if !maps.Equal(got, want) {
					rt.Fatalf("step %d, %s: served %v, model %v", step, c, got, want)
				}
				if info := v.Collection(c); info.Count != len(got) {
					rt.Fatalf("step %d, %s: count %d, serves %d", step, c, info.Count, len(got))
				}
				if info := v.Collection(c); info.Shadowed != m.shadowed(c) {
					rt.Fatalf("step %d, %s: %d names shadowed, model %d", step, c, info.Shadowed, m.shadowed(c))
				}
				cur[c] = got
			}
			for i, old := range views {
				for _, c := range colls {
					if got := servedOf(old.view, c); !maps.Equal(got, old.served[c]) {
						rt.Fatalf("step %d: view %d of %s changed: %v, was %v", step, i, c, got, old.served[c])
					}
					from := old.view.Collection(c).Revision
					ch, err := v.ChangesSince(c, from)
					if errors.Is(err, ErrCompacted) {
						continue
					}
					if err != nil {
						rt.Fatal(err)
					}
					for _, e := range slices.Concat(ch.Upserts, ch.Deleted) {
						if e.Revision <= from {
							rt.Fatalf("step %d, %s: ChangesSince(%d) reads %s of revision %d, no change since", step, c, from, e.Name, e.Revision)
						}
					}
					brought := maps.Clone(old.served[c])
					for _, e := range ch.Deleted {
						delete(brought, e.Name)
					}
					for _, e := range ch.Upserts {
						brought[e.Name] = e.Owner + "=" + bodyString(e)
					}
					if !maps.Equal(brought, cur[c]) {
						rt.Fatalf("step %d, %s: view %d at revision %d brought up by ChangesSince = %v, want %v",
							step, c, i, from, brought, cur[c])
					}
				}
			}
			views = append(views, taken{view: v, served: cur})
		}
	})
}

func cutLast(s string) (string, string, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// bodyString is an entry's body as the model writes contents: type URL and value.
func bodyString(e *Entry) string {
	typeURL, value := e.Body()
	return typeURL + ":" + string(value)
}
