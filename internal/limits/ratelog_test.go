package limits

import (
	"testing"
	"time"
)

// One line a second at most; the next says how many it left out.
func TestRareLogLogsOnceASecondAndCountsTheRest(t *testing.T) {
	var r RareLog
	t0 := time.Unix(1000, 0)
	if skipped, ok := r.allow(t0); !ok || skipped != 0 {
		t.Fatalf("first event: %d %v", skipped, ok)
	}
	for i := range 4 {
		if _, ok := r.allow(t0.Add(time.Duration(i+1) * 100 * time.Millisecond)); ok {
			t.Fatalf("event %d within the second logged", i+2)
		}
	}
	if skipped, ok := r.allow(t0.Add(time.Second)); !ok || skipped != 4 {
		t.Fatalf("a second later: logged %v, %d left out; want true, 4", ok, skipped)
	}
}
