package source

import (
	"testing"

	"github.com/mcpbridge/mcpbridge/store"
)

// A client that refuses response after response keeps at most maxRejections ranges: the
// oldest two merge, and the gap between them is counted as refused (ERROR, never SYNCED).
// The slice the status view may be reading is never changed in place.
func TestStatusRejectionsAreBoundedAndErrTowardsError(t *testing.T) {
	var rs []rejection
	var snapshots [][]rejection
	for i := range uint64(12) {
		rs = rejectedAfter(rs, rejection{from: 10 * i, to: 10*i + 5, rec: &record{Version: "v"}})
		snapshots = append(snapshots, rs)
	}
	if len(rs) > maxRejections {
		t.Fatalf("%d ranges kept, want at most %d", len(rs), maxRejections)
	}
	for _, rev := range []uint64{1, 5, 8, 13, 115} { // refused, or in a merged gap
		if !covered(rs, rev) {
			t.Errorf("revision %d is not counted as refused", rev)
		}
	}
	if covered(rs, 116) || covered(rs, 0) {
		t.Error("a revision outside every range is counted as refused")
	}
	if first := snapshots[0]; len(first) != 1 || first[0].from != 0 || first[0].to != 5 {
		t.Errorf("an earlier slice was changed in place: %+v", first)
	}
}

func covered(rs []rejection, rev uint64) bool {
	for i := range rs {
		if rs[i].covers(&store.Entry{Name: "x", Revision: rev}, false) {
			return true
		}
	}
	return false
}
