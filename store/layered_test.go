package store

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"
)

const (
	layerBase    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	layerOverlay = "mcpbridge.io/scope/bookinfo/" + layerBase
)

func encodeTest(t rapid.TB, name, content string) Encoded {
	e, err := Encode(res(name, content))
	if err != nil {
		t.Fatalf("encode %s: %v", name, err)
	}
	return e
}

// layeredModel is what a layered collection holds, computed from the two parts as plain maps:
// the overlay's entry, unless it hides the name; else the base's.
func layeredModel(base, overlay map[string]string) map[string]string {
	out := maps.Clone(base)
	for n, c := range overlay {
		if c == "" {
			delete(out, n)
		} else {
			out[n] = c
		}
	}
	return out
}

func contentOf(t rapid.TB, e *Entry) string {
	r, err := e.Decode()
	if err != nil {
		t.Fatalf("decode %s: %v", e.Name, err)
	}
	var v wrapperspb.StringValue
	if err := r.GetBody().UnmarshalTo(&v); err != nil {
		t.Fatalf("body of %s: %v", e.Name, err)
	}
	return v.GetValue()
}

// A layered collection reads, through every View method and after any sequence of writes to
// its two parts, as the overlay over the base: Get, Snapshot, and ChangesSince from every
// revision seen before, applied to what was read then, give what a model of the two parts
// gives. Revisions of changed names are after the revision asked from.
func TestLayeredCollectionReadsAsOverlayOverBase(t *testing.T) {
	defer func(min int) { bulkInsertMin = min }(bulkInsertMin)
	bulkInsertMin = 2 // a full state of the base takes a large write's paths (a first load's too)
	rapid.Check(t, func(t *rapid.T) {
		s := New(Options{})
		layered := Layered(layerBase, layerOverlay)
		base, overlay := map[string]string{}, map[string]string{} // overlay "" = hidden
		type seen struct {
			rev   uint64
			state map[string]string
		}
		var history []seen
		allNames := []string{"80", "80/a", "80/b", "8080/a", "443", "9080", "15000"}
		name := rapid.SampledFrom(allNames)
		content := rapid.SampledFrom([]string{"a", "b", "c"})
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for range steps {
			n := name.Draw(t, "name")
			var u Update
			switch op := rapid.IntRange(0, 5).Draw(t, "op"); op {
			case 0:
				c := content.Draw(t, "content")
				u = Update{Collection: layerBase, Encoded: []Encoded{encodeTest(t, n, c)}}
				base[n] = c
			case 1:
				if _, ok := base[n]; !ok {
					continue
				}
				u = Update{Collection: layerBase, Removed: []string{n}}
				delete(base, n)
			case 2:
				c := content.Draw(t, "content")
				u = Update{Collection: layerOverlay, Encoded: []Encoded{encodeTest(t, n, c)}}
				overlay[n] = c
			case 3:
				u = Update{Collection: layerOverlay, Encoded: []Encoded{Hidden(n)}}
				overlay[n] = ""
			case 4:
				if _, ok := overlay[n]; !ok {
					continue
				}
				u = Update{Collection: layerOverlay, Removed: []string{n}}
				delete(overlay, n)
			case 5: // a full state of the base
				u = Update{Collection: layerBase, Full: true}
				clear(base)
				for _, n := range allNames {
					if rapid.Bool().Draw(t, "holds") {
						c := content.Draw(t, "content")
						u.Encoded = append(u.Encoded, encodeTest(t, n, c))
						base[n] = c
					}
				}
			}
			if _, err := s.Apply("translate", u); err != nil {
				t.Fatalf("apply: %v", err)
			}
			v := s.View()
			want := layeredModel(base, overlay)
			got := map[string]string{}
			rev, all := v.Snapshot(layered)
			for _, e := range all {
				got[e.Name] = contentOf(t, e)
			}
			if !maps.Equal(got, want) {
				t.Fatalf("snapshot %v, want %v (base %v, overlay %v)", got, want, base, overlay)
			}
			if !slices.IsSortedFunc(all, func(a, b *Entry) int { return cmpString(a.Name, b.Name) }) {
				t.Fatalf("snapshot not sorted by name: %v", names(all))
			}
			if rev != v.Collection(layered).Revision {
				t.Fatalf("snapshot at %d, collection at %d", rev, v.Collection(layered).Revision)
			}
			for _, prefix := range []string{"80/", "8080/", "80", ""} {
				checkWithPrefix(t, v, layered, prefix, want)
				checkWithPrefix(t, v, layerBase, prefix, base)
			}
			for _, n := range allNames {
				e := v.Get(layered, n)
				if c, ok := want[n]; ok != (e != nil) || ok && contentOf(t, e) != c {
					t.Fatalf("Get(%s) = %v, want %q (present %v)", n, e, c, ok)
				}
			}
			for _, h := range history {
				ch, err := v.ChangesSince(layered, h.rev)
				if err != nil {
					t.Fatalf("ChangesSince(%d): %v", h.rev, err)
				}
				after := maps.Clone(h.state)
				for _, e := range ch.Upserts {
					if e.Revision <= h.rev {
						t.Fatalf("upsert %s at revision %d, asked from %d", e.Name, e.Revision, h.rev)
					}
					after[e.Name] = contentOf(t, e)
				}
				for _, e := range ch.Deleted {
					if e.Revision <= h.rev || !e.Deleted {
						t.Fatalf("deletion %s at revision %d (deleted %v), asked from %d", e.Name, e.Revision, e.Deleted, h.rev)
					}
					if len(e.Bytes) > 0 && hides(e) {
						t.Fatalf("deletion %s carries the hiding marker as its last bytes", e.Name)
					}
					delete(after, e.Name)
				}
				if !maps.Equal(after, want) {
					t.Fatalf("state at %d plus changes since: %v, want %v", h.rev, after, want)
				}
			}
			history = append(history, seen{rev: rev, state: want})
		}
	})
}

// checkWithPrefix holds WithPrefix to the model: the names with the prefix, in order.
func checkWithPrefix(t *rapid.T, v *View, collection, prefix string, model map[string]string) {
	var want []string
	for n, c := range model {
		if c != "" && strings.HasPrefix(n, prefix) {
			want = append(want, n)
		}
	}
	slices.Sort(want)
	got := v.WithPrefix(collection, prefix)
	if !slices.Equal(names(got), want) {
		t.Fatalf("WithPrefix(%s, %q) = %v, want %v", DisplayName(collection), prefix, names(got), want)
	}
	for _, e := range got {
		if c := contentOf(t, e); c != model[e.Name] {
			t.Fatalf("WithPrefix(%s, %q): %s holds %q, want %q", DisplayName(collection), prefix, e.Name, c, model[e.Name])
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A watch on a layered collection wakes for a change of either part, and names the layered
// collection; a part it also watches by itself is named as itself.
func TestWatchOnLayeredCollectionWakesForEitherPart(t *testing.T) {
	s := New(Options{})
	layered := Layered(layerBase, layerOverlay)
	w := s.Watch(layered)
	defer w.Close()
	for i, coll := range []string{layerBase, layerOverlay} {
		mustApply(t, s, "translate", Update{Collection: coll, Encoded: []Encoded{encodeTest(t, "80", fmt.Sprint(i))}})
		select {
		case <-w.C():
		case <-time.After(5 * time.Second):
			t.Fatalf("no wake-up for a write to %s", coll)
		}
		if got := w.Changed(); !slices.Equal(got, []string{layered}) {
			t.Fatalf("after a write to %s: changed %q, want the layered collection", coll, got)
		}
	}
	mustApply(t, s, "translate", Update{Collection: collA, Resources: nil, Encoded: []Encoded{encodeTest(t, "ns/a", "x")}})
	select {
	case <-w.C():
		t.Fatalf("woken by a write to %s, which is no part of the layered collection (changed %q)", collA, w.Changed())
	default:
	}
	w.Add(layerBase)
	mustApply(t, s, "translate", Update{Collection: layerBase, Encoded: []Encoded{encodeTest(t, "80", "again")}})
	<-w.C()
	got := w.Changed()
	slices.Sort(got)
	if want := []string{layerBase, layered}; !slices.Equal(got, want) {
		t.Fatalf("changed %q, want %q", got, want)
	}
	w.Close()
	s.topics.mu.Lock()
	defer s.topics.mu.Unlock()
	for _, part := range []string{layerBase, layerOverlay} {
		if len(s.topics.byCollection[part]) != 0 {
			t.Fatalf("after Close, %s still has watchers", part)
		}
	}
}

// A layered name is never written: its separator is a control character, which a write's
// collection name may not hold.
func TestLayeredCollectionIsNotWritable(t *testing.T) {
	s := New(Options{})
	_, err := s.Apply("translate", Update{Collection: Layered(layerBase, layerOverlay), Encoded: []Encoded{encodeTest(t, "80", "a")}})
	if err == nil {
		t.Fatal("a write to a layered collection was accepted")
	}
	if BaseCollection(Layered(layerBase, layerOverlay)) != layerBase || BaseCollection(layerBase) != layerBase {
		t.Fatal("BaseCollection does not return the base")
	}
	if got := DisplayName(Layered(layerBase, layerOverlay)); got != layerBase+" over "+layerOverlay {
		t.Fatalf("DisplayName %q", got)
	}
}

// BenchmarkLayeredReads reads a collection of 10,000 entries as a stream does (the whole
// state, one change since a revision, one name), plain and through an overlay of 100 entries
// and 100 hidden names: what a namespace's view costs a read.
func BenchmarkLayeredReads(b *testing.B) {
	s := New(Options{})
	var base, overlay []Encoded
	for i := range 10000 {
		base = append(base, encodeTest(b, fmt.Sprintf("r-%05d", i), "base"))
	}
	for i := range 100 {
		overlay = append(overlay, encodeTest(b, fmt.Sprintf("r-%05d", i*50), "scoped"), Hidden(fmt.Sprintf("r-%05d", i*50+25)))
	}
	if _, err := s.Apply("translate", Update{Collection: layerBase, Encoded: base}, Update{Collection: layerOverlay, Encoded: overlay}); err != nil {
		b.Fatal(err)
	}
	from := s.View().Revision()
	if _, err := s.Apply("translate", Update{Collection: layerBase, Encoded: []Encoded{encodeTest(b, "r-00007", "changed")}}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, coll string }{{"plain", layerBase}, {"layered", Layered(layerBase, layerOverlay)}} {
		v := s.View()
		b.Run(c.name+"/snapshot", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v.Snapshot(c.coll)
			}
		})
		b.Run(c.name+"/changes", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.ChangesSince(c.coll, from); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/get", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v.Get(c.coll, "r-05000")
			}
		})
	}
}
