package parallel

import (
	"runtime"
	"slices"
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
	for width := 1; width < parts; width *= 2 {
		// Runs [bounds[i], bounds[i+width]) and [bounds[i+width], bounds[i+2*width]) merge
		// into dst; a run without a partner is copied.
		merges := (parts + 2*width - 1) / (2 * width)
		For(merges, 1, func(m int) {
			lo := bounds[m*2*width]
			mid := bounds[min(m*2*width+width, parts)]
			hi := bounds[min(m*2*width+2*width, parts)]
			merge(dst[lo:hi], src[lo:mid], src[mid:hi], cmp)
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
