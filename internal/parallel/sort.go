package parallel

import (
	"runtime"
	"slices"
	"sort"
)

// SortFunc sorts s in the order of cmp, as slices.SortFunc does (not stably), on up to
// GOMAXPROCS CPUs: a large s is cut into parts sorted at once, then merged pairwise, each
// round's merges at once. A full load sorts a million names more than once on its way to the
// store, each sort a second on one CPU while the others wait. cmp must be safe to call
// concurrently (it only reads).
func SortFunc[S ~[]E, E any](s S, cmp func(a, b E) int) {
	parts := sortParts(len(s))
	if parts < 2 {
		slices.SortFunc(s, cmp)
		return
	}
	bounds := make([]int, parts+1)
	for i := range bounds {
		bounds[i] = i * len(s) / parts
	}
	For(parts, 1, func(i int) { slices.SortFunc(s[bounds[i]:bounds[i+1]], cmp) })
	src, dst := s, make(S, len(s))
	procs := runtime.GOMAXPROCS(0)
	for width := 1; width < parts; width *= 2 {
		// Runs [bounds[i], bounds[i+width]) and [bounds[i+width], bounds[i+2*width]) merge
		// into dst; a run without a partner is copied. Each merge is cut into pieces, so
		// that the last rounds' few merges still run on every CPU.
		merges := (parts + 2*width - 1) / (2 * width)
		pieces := max(1, procs/merges)
		For(merges*pieces, 1, func(t int) {
			m := t / pieces
			lo := bounds[m*2*width]
			mid := bounds[min(m*2*width+width, parts)]
			hi := bounds[min(m*2*width+2*width, parts)]
			mergePiece(dst[lo:hi], src[lo:mid], src[mid:hi], t%pieces, pieces, cmp)
		})
		src, dst = dst, src
	}
	if &src[0] != &s[0] {
		copy(s, src)
	}
}

// sortParallelMin is the length from which SortFunc sorts on more than one CPU: below it, a
// sort takes less than starting the goroutines and the merge's copy cost. A variable for tests.
var sortParallelMin = 1 << 14

// sortParts is how many parts SortFunc cuts n elements into: a power of two no greater than
// GOMAXPROCS (so that every merge round halves them evenly), 1 for a small n.
func sortParts(n int) int {
	procs := runtime.GOMAXPROCS(0)
	if n < sortParallelMin || procs < 2 {
		return 1
	}
	parts := 1
	for parts*2 <= procs && parts < 64 && n/(parts*2) >= sortParallelMin/4 {
		parts *= 2
	}
	return parts
}

// mergePiece writes piece p of pieces of the merge of a and b into dst (the whole merge's
// destination): the elements the merge would write at [p*n/pieces, (p+1)*n/pieces), n being
// len(a)+len(b), found by coRank at both ends.
func mergePiece[E any](dst, a, b []E, p, pieces int, cmp func(a, b E) int) {
	n := len(a) + len(b)
	k0, k1 := p*n/pieces, (p+1)*n/pieces
	i0, i1 := coRank(k0, a, b, cmp), coRank(k1, a, b, cmp)
	merge(dst[k0:k1], a[i0:i1], b[k0-i0:k1-i1], cmp)
}

// coRank is how many of a's elements merge (below) writes among its first k: the least i
// with b[k-i-1] before a[i] (or one of them missing), which grows with i.
func coRank[E any](k int, a, b []E, cmp func(a, b E) int) int {
	lo, hi := max(0, k-len(b)), min(k, len(a))
	return lo + sort.Search(hi-lo, func(x int) bool {
		i := lo + x
		j := k - i
		return j == 0 || i == len(a) || cmp(b[j-1], a[i]) < 0
	})
}

// merge writes the sorted a and b into dst, in order; of equal elements, a's first.
func merge[E any](dst, a, b []E, cmp func(a, b E) int) {
	i, j, k := 0, 0, 0
	for i < len(a) && j < len(b) {
		if cmp(b[j], a[i]) < 0 {
			dst[k] = b[j]
			j++
		} else {
			dst[k] = a[i]
			i++
		}
		k++
	}
	k += copy(dst[k:], a[i:])
	copy(dst[k:], b[j:])
}
