package limits

import (
	"testing"
	"time"
)

// A bucket lets burst messages through at once, then rate a second, and never saves more
// than burst for later.
func TestBucketAllowsBurstThenRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBucket(2, 3, t0)
	for i := range 3 {
		if !b.take(t0) {
			t.Fatalf("message %d of the burst refused", i+1)
		}
	}
	if b.take(t0) {
		t.Fatal("a fourth message at once allowed with a burst of 3")
	}
	if b.take(t0.Add(400 * time.Millisecond)) {
		t.Fatal("allowed after 0.4s at 2/s (0.8 tokens)")
	}
	if !b.take(t0.Add(500 * time.Millisecond)) {
		t.Fatal("refused after 0.5s at 2/s (1 token)")
	}
	// A long silence refills to the burst, not beyond.
	later := t0.Add(time.Hour)
	for i := range 3 {
		if !b.take(later) {
			t.Fatalf("after an hour, message %d refused", i+1)
		}
	}
	if b.take(later) {
		t.Fatal("an hour of silence saved more than the burst")
	}
	// A clock that steps back takes nothing away and gives nothing.
	if b.take(later.Add(-time.Minute)) {
		t.Fatal("a step back in time refilled the bucket")
	}
}
