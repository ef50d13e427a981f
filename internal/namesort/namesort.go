// Package namesort sorts long lists by a name, in the order of strings.Compare, on every CPU.
//
// Comparing names reads each from wherever it lies: at a million names a sort is a cache miss
// per comparison. Sort reads each name once instead, into a key of 16 of its bytes beside its
// index, and sorts the keys, comparing whole names only where keys tie. The key's bytes
// start where the names start to differ (after the prefix every name shares: a translator's
// clusters all begin "outbound|"), so that ties are rare.
package namesort

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync/atomic"

	"github.com/mcpbridge/mcpbridge/internal/parallel"
)

// Sort sorts s by name(e), in the order of strings.Compare (not stably). name must be cheap
// and safe to call concurrently.
func Sort[E any](s []E, name func(E) string) {
	if len(s) < prefixMin {
		slices.SortFunc(s, func(a, b E) int { return cmp.Compare(name(a), name(b)) })
		return
	}
	from := commonPrefix(s, name)
	keys := make([]key, len(s))
	parallel.ForRange(len(s), chunk, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			keys[i] = key{keyOf(name(s[i]), from), int32(i)}
		}
	})
	parallel.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.p[0], b.p[0]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.p[1], b.p[1]); c != 0 {
			return c
		}
		return cmp.Compare(name(s[a.i]), name(s[b.i]))
	})
	sorted := make([]E, len(s))
	parallel.ForRange(len(s), chunk, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sorted[i] = s[keys[i].i]
		}
	})
	copy(s, sorted)
}

// prefixMin is the length from which Sort sorts by keys: below it, the names are in cache and
// the keys cost more than they save.
const prefixMin = 4096

// chunk is how many elements a CPU takes at a time.
const chunk = 4096

// key is 16 bytes of a name from an offset every name reaches with the same bytes before
// it, zero-padded, as two big-endian numbers, and the name's index. Names whose numbers
// differ are ordered as the numbers are: the first byte that differs decides both, and a name
// that ends there is the other's prefix, so it comes first either way (its padding zero is
// below any byte but zero, and a zero byte ties it until the whole names are compared).
type key struct {
	p [2]uint64
	i int32
}

func keyOf(name string, from int) [2]uint64 {
	var b [16]byte
	copy(b[:], name[from:])
	return [2]uint64{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// commonPrefix is the length of the longest prefix every name of s has.
func commonPrefix[E any](s []E, name func(E) string) int {
	first := name(s[0])
	var shortest atomic.Int64
	shortest.Store(int64(len(first)))
	parallel.ForRange(len(s), chunk, func(lo, hi int) {
		n := int(shortest.Load())
		for _, e := range s[lo:hi] {
			n = sharedLen(first[:n], name(e))
		}
		for {
			old := shortest.Load()
			if int64(n) >= old || shortest.CompareAndSwap(old, int64(n)) {
				return
			}
		}
	})
	return int(shortest.Load())
}

// sharedLen is the length of the longest prefix a and b share.
func sharedLen(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
