package parallel

import (
	"cmp"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// TestSortFuncSortsAsSlicesSortFunc: whatever the length, the CPUs and the number of equal
// elements, SortFunc leaves the very order slices.Sort gives (the elements are their own keys,
// so equal ones are interchangeable), in parts and merges of every shape (lengths not a
// multiple of the parts, GOMAXPROCS not a power of two).
func TestSortFuncSortsAsSlicesSortFunc(t *testing.T) {
	defer func(m int) { sortParallelMin = m }(sortParallelMin)
	sortParallelMin = 16
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(1, 2))
	for _, procs := range []int{1, 2, 3, 4, 7, 8} {
		runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 2, 15, 16, 17, 63, 64, 65, 100, 257, 1000, 4099} {
			for _, distinct := range []int{1, 3, n + 1} {
				s := make([]int, n)
				for i := range s {
					s[i] = rng.IntN(max(distinct, 1))
				}
				want := slices.Clone(s)
				slices.Sort(want)
				SortFunc(s, cmp.Compare[int])
				if !slices.Equal(s, want) {
					t.Fatalf("GOMAXPROCS %d, %d elements of %d values: got %v, want %v", procs, n, distinct, s, want)
				}
			}
		}
	}
}

// TestMergeInPiecesIsTheMerge: a merge cut into any number of pieces writes what the whole
// merge writes, element for element: equal keys in the same order (a's first), whichever
// piece boundary falls among them.
func TestMergeInPiecesIsTheMerge(t *testing.T) {
	type tagged struct{ key, from int }
	byKey := func(x, y tagged) int { return cmp.Compare(x.key, y.key) }
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		a := make([]tagged, rng.IntN(40))
		b := make([]tagged, rng.IntN(40))
		keys := 1 + rng.IntN(6)
		for i := range a {
			a[i] = tagged{rng.IntN(keys), i}
		}
		for i := range b {
			b[i] = tagged{rng.IntN(keys), 1000 + i}
		}
		slices.SortStableFunc(a, byKey)
		slices.SortStableFunc(b, byKey)
		want := make([]tagged, len(a)+len(b))
		merge(want, a, b, byKey)
		pieces := 1 + rng.IntN(9)
		got := make([]tagged, len(want))
		for p := range pieces {
			mergePiece(got, a, b, p, pieces, byKey)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d pieces of the merge of %v and %v: %v, want %v", pieces, a, b, got, want)
		}
	}
}

// TestSortFuncCutsIntoPowersOfTwo: a large slice is cut into as many parts as there are CPUs,
// rounded down to a power of two, and a small one is not cut.
func TestSortFuncCutsIntoPowersOfTwo(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ procs, n, want int }{
		{1, 1 << 20, 1}, {2, 1 << 20, 2}, {3, 1 << 20, 2}, {16, 1 << 20, 16}, {12, 1 << 20, 8},
		{16, sortParallelMin - 1, 1}, {16, sortParallelMin, 4},
	} {
		runtime.GOMAXPROCS(tc.procs)
		if got := sortParts(tc.n); got != tc.want {
			t.Errorf("GOMAXPROCS %d, %d elements: %d parts, want %d", tc.procs, tc.n, got, tc.want)
		}
	}
}

func BenchmarkSortFunc1M(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]uint64, 1<<20)
	for i := range src {
		src[i] = rng.Uint64()
	}
	s := make([]uint64, len(src))
	b.Run("slices", func(b *testing.B) {
		for b.Loop() {
			copy(s, src)
			slices.SortFunc(s, cmp.Compare[uint64])
		}
	})
	b.Run("parallel", func(b *testing.B) {
		for b.Loop() {
			copy(s, src)
			SortFunc(s, cmp.Compare[uint64])
		}
	})
}
