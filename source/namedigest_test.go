package source

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Two streams that reach the same names by different requests (in another order, through
// names added and removed again, or as a whole list) share responses: their fingerprints are
// equal. Any other set of names has another fingerprint.
func TestSameNamesHaveOneFingerprintWhateverTheRequests(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 2000)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|%d||svc-%d.ns-%d.example", 8000+i%7, i, i%13)
	}
	var inOrder want
	for _, n := range names {
		inOrder.add(n)
	}
	var shuffled want
	for _, i := range rng.Perm(len(names)) {
		shuffled.add(names[i])
		if i%3 == 0 { // a name asked for, dropped, and asked for again
			shuffled.remove(names[i])
			shuffled.add(names[i])
		}
	}
	shuffled.add("not-asked-in-the-end")
	shuffled.remove("not-asked-in-the-end")
	var whole want
	var set nameSet
	for _, n := range names {
		set.add(n, nameKey(n))
	}
	whole.replace(set)
	fp := inOrder.fingerprint()
	if shuffled.fingerprint() != fp || whole.fingerprint() != fp {
		t.Fatal("the same names reached by other requests have another fingerprint")
	}

	seen := map[[32]byte]string{fp: "all"}
	check := func(what string, w *want) {
		t.Helper()
		fp := w.fingerprint()
		if other, dup := seen[fp]; dup {
			t.Fatalf("%s has the fingerprint of %s", what, other)
		}
		seen[fp] = what
	}
	for i := range 200 {
		var fewer want
		for j, n := range names {
			if j != i {
				fewer.add(n)
			}
		}
		check(fmt.Sprintf("all but name %d", i), &fewer)
	}
	var more want
	for _, n := range names {
		more.add(n)
	}
	more.add("one-more")
	check("all and one more", &more)
	var one want
	one.add(names[0])
	check("the first name alone", &one)
	one.remove(names[0])
	if one.fingerprint() != ([32]byte{}) {
		t.Fatal("no names left, yet a fingerprint other than none's")
	}
}

// Fingerprinting costs nothing more than the names' own requests: once a stream holds a
// million names (an Envoy's endpoints at a million services), the first response that shares
// by fingerprint does not read them all again.
func BenchmarkFingerprintAfterAddingOne(b *testing.B) {
	var w want
	w.reserve(1_000_000)
	for i := range 1_000_000 {
		w.add(fmt.Sprintf("outbound|8080||svc-%d.ns-%d.example", i, i%1000))
	}
	b.ResetTimer()
	for i := range b.N {
		w.add(fmt.Sprintf("added-%d", i))
		_ = w.fingerprint()
	}
}
