package source

import (
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestNameSetAgainstMap: a nameSet given random adds and removes answers has, len, all and
// sorted as a plain set of the names does, and add and remove report what a set would; keys
// drawn from a handful of values make names share keys all the time (the spill and its
// promotion into a freed slot), which the real keyed hash makes a rare accident.
func TestNameSetAgainstMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := []string{"a", "b", "c", "d", "e", "f"}
		keys := map[string]uint64{}
		for _, n := range names {
			keys[n] = rapid.Uint64Range(0, 2).Draw(t, "key of "+n)
		}
		var s nameSet
		model := map[string]struct{}{}
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			n := rapid.SampledFrom(names).Draw(t, "name")
			_, had := model[n]
			if rapid.Bool().Draw(t, "add") {
				if got := s.add(n, keys[n]); got == had {
					t.Fatalf("add(%q) = %v with %v held", n, got, slices.Sorted(maps.Keys(model)))
				}
				model[n] = struct{}{}
			} else {
				if got := s.remove(n, keys[n]); got != had {
					t.Fatalf("remove(%q) = %v with %v held", n, got, slices.Sorted(maps.Keys(model)))
				}
				delete(model, n)
			}
			for _, m := range names {
				if _, want := model[m]; s.has(m, keys[m]) != want {
					t.Fatalf("has(%q) = %v, want %v (held %v)", m, !want, want, slices.Sorted(maps.Keys(model)))
				}
			}
			want := slices.Sorted(maps.Keys(model))
			if s.len() != len(want) || !slices.Equal(s.sorted(), want) || !slices.Equal(slices.Sorted(s.all()), want) {
				t.Fatalf("holds %v (len %d), want %v", s.sorted(), s.len(), want)
			}
		}
	})
}

// TestWantSortedNamesAgainstASortedSet: a subscription's explicit names, given random adds,
// removes and reads, read in order as the sorted set of the names held: the list kept
// between reads (merged with what was added since, or dropped when more was added than it
// held) is never stale.
func TestWantSortedNamesAgainstASortedSet(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var w want
		model := map[string]struct{}{}
		name := rapid.StringMatching(`[a-h]{1,2}`)
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1: // adds outnumber the rest, so the additions outgrow the sorted list
				n := name.Draw(t, "added")
				_, had := model[n]
				if got := w.add(n); got == had {
					t.Fatalf("add(%q) = %v with %v held", n, got, slices.Sorted(maps.Keys(model)))
				}
				model[n] = struct{}{}
			case 2:
				n := name.Draw(t, "removed")
				_, had := model[n]
				if got := w.remove(n); got != had {
					t.Fatalf("remove(%q) = %v with %v held", n, got, slices.Sorted(maps.Keys(model)))
				}
				delete(model, n)
			case 3:
				if got, want := w.sortedNames(), slices.Sorted(maps.Keys(model)); !slices.Equal(got, want) {
					t.Fatalf("sortedNames() = %v, want %v", got, want)
				}
			}
			if len(w.added) > len(w.sorted) {
				t.Fatalf("%d names added since a read of %d: the list of additions outgrew the sorted list", len(w.added), len(w.sorted))
			}
		}
	})
}
