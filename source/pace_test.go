package source

import (
	"slices"
	"testing"
	"time"
)

// TestPacerTakesEachCollectionAtMostOncePerInterval: the first change of a collection after a
// quiet interval is taken at once; changes within the interval wait until it ends and are then
// taken together; collections are paced apart; without an interval, everything at once.
func TestPacerTakesEachCollectionAtMostOncePerInterval(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := pacer{interval: 100 * time.Millisecond}
	check := func(what string, ready []string, next time.Duration, wantReady []string, wantNext time.Duration) {
		t.Helper()
		if !slices.Equal(ready, wantReady) || next != wantNext {
			t.Fatalf("%s: ready %v next %v, want %v and %v", what, ready, next, wantReady, wantNext)
		}
	}
	ready, next := p.take(t0, []string{"se"})
	check("first change", ready, next, []string{"se"}, 0)
	ready, next = p.take(t0.Add(10*time.Millisecond), []string{"se"})
	check("a change within the interval", ready, next, nil, 90*time.Millisecond)
	ready, next = p.take(t0.Add(20*time.Millisecond), []string{"se", "clusters"})
	check("another collection, first change", ready, next, []string{"clusters"}, 80*time.Millisecond)
	ready, next = p.take(t0.Add(60*time.Millisecond), nil)
	check("too early", ready, next, nil, 40*time.Millisecond)
	ready, next = p.take(t0.Add(100*time.Millisecond), nil)
	check("the interval ended", ready, next, []string{"se"}, 0)
	ready, next = p.take(t0.Add(300*time.Millisecond), []string{"se"})
	check("after a quiet interval", ready, next, []string{"se"}, 0)

	off := pacer{}
	ready, next = off.take(t0, []string{"a", "b"})
	check("no interval", ready, next, []string{"a", "b"}, 0)
	ready, next = off.take(t0, []string{"a"})
	check("no interval, again", ready, next, []string{"a"}, 0)
}
