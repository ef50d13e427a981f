package envoy

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestSortByNameIsStringOrder sorts names that share prefixes of every length around the 16
// bytes sortByName compares first, with bytes below and above the zero padding, and checks
// the order against strings.Compare: the build order of a full load's hosts.
func TestSortByNameIsStringOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		stems := rapid.SliceOfN(rapid.StringOfN(rapid.SampledFrom([]rune{0, 1, 'a', 'b', 0xff}), 0, 20, -1), 1, 4).Draw(t, "stems")
		n := rapid.SampledFrom([]int{0, 1, 2, 50, sortByPrefixMin, sortByPrefixMin + 37}).Draw(t, "n")
		tails := rapid.SliceOfN(rapid.StringOfN(rapid.SampledFrom([]rune{0, 'a', 'z'}), 0, 4, -1), n, n).Draw(t, "tails")
		s := make([]named[int], n)
		for i := range s {
			s[i] = named[int]{stems[i%len(stems)] + tails[i], i}
		}
		sortByName(s)
		if !slices.IsSortedFunc(s, func(a, b named[int]) int { return strings.Compare(a.name, b.name) }) {
			t.Fatalf("not in string order: %v", s)
		}
		seen := make([]bool, n)
		for _, e := range s {
			if seen[e.v] {
				t.Fatalf("value %d twice", e.v)
			}
			seen[e.v] = true
		}
	})
}
