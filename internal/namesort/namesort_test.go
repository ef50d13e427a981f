package namesort

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

type named struct {
	name string
	v    int
}

// TestSortIsStringOrder sorts names that share prefixes of every length around the 16 bytes
// Sort compares first, after common prefixes of every length (none, a few bytes, longer than
// a key, a whole name), with bytes below and above the zero padding, with GOMAXPROCS from 1
// to 8 (lists this short are sorted in one part: TestSortOfManyIsStringOrder has the parts),
// and checks the order against strings.Compare and that every element is kept once.
func TestSortIsStringOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rapid.Check(t, func(t *rapid.T) {
		runtime.GOMAXPROCS(rapid.SampledFrom([]int{1, 2, 3, 8}).Draw(t, "procs"))
		common := rapid.StringOfN(rapid.SampledFrom([]rune{0, 'a', 0xff}), 0, 24, -1).Draw(t, "common")
		stems := rapid.SliceOfN(rapid.StringOfN(rapid.SampledFrom([]rune{0, 1, 'a', 'b', 0xff}), 0, 20, -1), 1, 4).Draw(t, "stems")
		n := rapid.SampledFrom([]int{0, 1, 2, 50, prefixMin, prefixMin + 37, 3*prefixMin + 5}).Draw(t, "n")
		tails := rapid.SliceOfN(rapid.StringOfN(rapid.SampledFrom([]rune{0, 'a', 'z'}), 0, 4, -1), n, n).Draw(t, "tails")
		s := make([]named, n)
		for i := range s {
			s[i] = named{common + stems[i%len(stems)] + tails[i], i}
		}
		Sort(s, func(e named) string { return e.name })
		if !slices.IsSortedFunc(s, func(a, b named) int { return strings.Compare(a.name, b.name) }) {
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

// TestCommonPrefixIsSharedByEveryName: the offset keys start from is the longest prefix of
// all the names, not of the first ones or of those a CPU saw.
func TestCommonPrefixIsSharedByEveryName(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(4)
	names := make([]string, 5*chunk)
	for i := range names {
		names[i] = "outbound|8080||svc-" + strings.Repeat("x", i%7)
	}
	if got := commonPrefix(names, func(s string) string { return s }); got != len("outbound|8080||svc-") {
		t.Fatalf("common prefix %d, want %d", got, len("outbound|8080||svc-"))
	}
	names[len(names)-1] = "out"
	if got := commonPrefix(names, func(s string) string { return s }); got != 3 {
		t.Fatalf("with a short last name: common prefix %d, want 3", got)
	}
}

// TestSortOfManyIsStringOrder: a list long enough for Sort's keys to be sorted in parts on
// several CPUs and merged (parallel.SortFunc: 16,384 elements and more), of names with a long
// common prefix, many ties in their keys and duplicates, is in string order with every
// element kept once.
func TestSortOfManyIsStringOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(3, 4))
	for _, procs := range []int{2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		for _, n := range []int{16384, 50001} {
			s := make([]named, n)
			for i := range s {
				// Keys tie for names equal in their 16 bytes after "outbound|8080||": the
				// tails beyond them decide, and a few names repeat.
				s[i] = named{fmt.Sprintf("outbound|8080||svc-%07d.ns-%d.example.com%s", rng.IntN(n), rng.IntN(3), strings.Repeat("z", rng.IntN(3))), i}
			}
			Sort(s, func(e named) string { return e.name })
			if !slices.IsSortedFunc(s, func(a, b named) int { return strings.Compare(a.name, b.name) }) {
				t.Fatalf("GOMAXPROCS %d, %d names: not in string order", procs, n)
			}
			seen := make([]bool, n)
			for _, e := range s {
				if seen[e.v] {
					t.Fatalf("GOMAXPROCS %d, %d names: value %d twice", procs, n, e.v)
				}
				seen[e.v] = true
			}
		}
	}
}
