package linkerd

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// A client that applies the updates of each step as the seed says (add: insert or replace;
// remove: delete; no_endpoints: clear, and remember whether the service exists) holds exactly
// the current answer after every step, over random sequences of answers.
func TestLinkerdDiffAppliedGivesAnswer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		var prev *answer
		held := map[string]uint32{}
		heldLabels := map[string]string{}
		exists := false
		for step := range 20 {
			next := randomAnswer(rng)
			for _, u := range diff(prev, next) {
				switch {
				case u.GetAdd() != nil:
					exists = true
					heldLabels = u.GetAdd().GetMetricLabels()
					for _, a := range fromLinkerd(u).Addrs {
						held[a.Addr] = a.Weight
					}
				case u.GetRemove() != nil:
					for _, a := range fromLinkerd(u).Addrs {
						delete(held, a.Addr)
					}
				case u.GetNoEndpoints() != nil:
					clear(held)
					exists = u.GetNoEndpoints().GetExists()
				}
			}
			want := map[string]uint32{}
			for _, e := range next.endpoints {
				want[e.addr.String()] = e.weight
			}
			if len(next.endpoints) > 0 && !maps.Equal(heldLabels, next.labels) {
				t.Fatalf("run %d step %d: client's set labels %v, want %v", run, step, heldLabels, next.labels)
			}
			if !maps.Equal(held, want) || exists != next.exists {
				t.Fatalf("run %d step %d: client holds %v (exists %v), want %v (exists %v)", run, step, held, exists, want, next.exists)
			}
			if prev == nil && len(diff(prev, next)) != 1 {
				t.Fatalf("run %d: a fresh subscription got %d messages, want one", run, len(diff(prev, next)))
			}
			prev = next
		}
	}
}

func randomAnswer(rng *rand.Rand) *answer {
	switch rng.IntN(5) {
	case 0:
		return &answer{}
	case 1:
		return &answer{exists: true, namespace: "ns", labels: map[string]string{"namespace": "ns"}}
	}
	// The set's labels change now and then: every address is sent again, and those that
	// went are still removed.
	ns := []string{"ns", "other"}[rng.IntN(2)]
	a := &answer{exists: true, namespace: ns, labels: map[string]string{"namespace": ns}}
	seen := map[netip.AddrPort]bool{}
	for range 1 + rng.IntN(6) {
		ap := netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:80", 1+rng.IntN(8)))
		if seen[ap] {
			continue
		}
		seen[ap] = true
		a.endpoints = append(a.endpoints, endpoint{addr: ap, weight: uint32(1 + rng.IntN(3))})
	}
	sortEndpoints(a.endpoints)
	return a
}
