package store

import (
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// TestTypeInternerHoldsAtMostItsMax: type URLs are interned once each, under stable indexes,
// until the table is full; past that, and for an empty or overlong type URL, the answer is 0:
// keep the type URL in place. Concurrent interning agrees on the indexes.
func TestTypeInternerHoldsAtMostItsMax(t *testing.T) {
	in := typeInterner{max: 3}
	var wg sync.WaitGroup
	got := make([][3]uint16, 8)
	for g := range got {
		wg.Go(func() {
			for i, u := range []string{"type/a", "type/b", "type/a"} {
				got[g][i] = in.intern(u)
			}
		})
	}
	wg.Wait()
	a, b := got[0][0], got[0][1]
	for g := range got {
		if got[g] != [3]uint16{a, b, a} || a == 0 || b == 0 || a == b {
			t.Fatalf("goroutine %d interned %v, another %v", g, got[g], got[0])
		}
	}
	if in.lookup(a) != "type/a" || in.lookup(b) != "type/b" {
		t.Fatalf("lookup: %q, %q", in.lookup(a), in.lookup(b))
	}
	c := in.intern("type/c")
	if c == 0 || in.lookup(c) != "type/c" {
		t.Fatalf("the third type URL got %d", c)
	}
	for _, u := range []string{"type/d", "", strings.Repeat("x", maxElidedTypeLen+1)} {
		if i := in.intern(u); i != 0 {
			t.Errorf("intern(%.20q) = %d past the table's room, or for a type URL not to elide", u, i)
		}
	}
	if in.intern("type/b") != b {
		t.Error("a full table no longer finds what it holds")
	}
}

// TestEncodingsKeepTheirSize: an Encoded is its bytes' pointer and length and the type's
// index (producers hold hundreds of thousands), and an entry stays 96 bytes.
func TestEncodingsKeepTheirSize(t *testing.T) {
	if n := unsafe.Sizeof(Encoded{}); n > 16 {
		t.Errorf("Encoded is %d bytes, over 16", n)
	}
	if n := unsafe.Sizeof(Entry{}); n > 96 {
		t.Errorf("Entry is %d bytes, over 96", n)
	}
}

// TestEntriesKeepTheirProducersCheck: a body its producer vouched for (Encoded.Checked) is
// served as vouched for, however the entry is made again (another owner's copy served after
// it, a tombstone, Entry.Encoded); one nobody vouched for never is, so that its reader checks
// it.
func TestEntriesKeepTheirProducersCheck(t *testing.T) {
	const coll = "test/things"
	s := New(Options{})
	checked := encodeTest(t, "ns/a", "a").Checked()
	mustApply(t, s, "p1", Update{Collection: coll, Encoded: []Encoded{checked, encodeTest(t, "ns/b", "b")}})
	v := s.View()
	if e := v.Get(coll, "ns/a"); e == nil || !e.BodyChecked() {
		t.Fatalf("ns/a: %+v, want its body vouched for", e)
	}
	if e := v.Get(coll, "ns/b"); e == nil || e.BodyChecked() {
		t.Fatalf("ns/b: %+v, want its body not vouched for", e)
	}
	if !v.Get(coll, "ns/a").Encoded().checked || v.Get(coll, "ns/b").Encoded().checked {
		t.Errorf("Entry.Encoded does not keep what the entry says of its body")
	}
	if !EntryOf(checked).BodyChecked() || EntryOf(encodeTest(t, "ns/c", "c")).BodyChecked() {
		t.Errorf("EntryOf does not keep what the encoding says of its body")
	}

	// p0 sorts before p1: its copy of ns/b is served, then p1's again once p0 lets it go;
	// p1's copy is served as the entry p1 wrote it, vouched for or not.
	mustApply(t, s, "p0", Update{Collection: coll, Encoded: []Encoded{encodeTest(t, "ns/a", "a0").Checked(), encodeTest(t, "ns/b", "b0").Checked()}})
	mustApply(t, s, "p0", Update{Collection: coll, Full: true})
	v = s.View()
	if e := v.Get(coll, "ns/a"); e == nil || e.Owner != "p1" || !e.BodyChecked() {
		t.Errorf("ns/a served again from p1: %+v, want its body vouched for", e)
	}
	if e := v.Get(coll, "ns/b"); e == nil || e.Owner != "p1" || e.BodyChecked() {
		t.Errorf("ns/b served again from p1: %+v, want its body not vouched for", e)
	}
}
