package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	mcpapi "istio.io/api/mcp/v1alpha1"
)

const collC = "istio/networking/v1alpha3/gateways"

// short names the test's collections in outlines.
var short = map[string]string{collA: "A", collB: "B", collC: "C"}

// outline writes a plan as "A: +ns/b +ns/e -ns/c" per collection, in the plan's order.
func outline(p *Plan) []string {
	var out []string
	for _, c := range p.Collections {
		line := short[c.Collection] + ":"
		for _, e := range c.Puts {
			line += " +" + e.Name
		}
		for _, n := range c.Deletes {
			line += " -" + n
		}
		out = append(out, line)
	}
	return out
}

// planStore is the state every plan case starts from: p holds ns/a, ns/b and ns/c in A and
// ns/v in B; q holds ns/a (the same content as p's) and ns/d in A.
func planStore(t *testing.T) *Store {
	t.Helper()
	s := New(Options{})
	mustApply(t, s, "p",
		Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1"), res("ns/b", "1"), res("ns/c", "1")}},
		Update{Collection: collB, Full: true, Resources: []*mcpapi.Resource{res("ns/v", "1")}})
	mustApply(t, s, "q", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1"), res("ns/d", "1")}})
	return s
}

// owned is every copy of one owner, "COLLECTION/NAME" → content, as a view holds it.
func owned(v *View, owner string) map[string]string {
	out := map[string]string{}
	for _, coll := range v.OwnerCollections(owner) {
		v.Owned(coll, owner, func(e *Entry) bool {
			out[short[coll]+":"+e.Name] = bodyString(e)
			return true
		})
	}
	return out
}

// rs is resources named and contents given as "name=content" pairs.
func rs(pairs ...string) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, len(pairs))
	for i, p := range pairs {
		name, content, _ := strings.Cut(p, "=")
		out[i] = res(name, content)
	}
	return out
}

// TestPlanRules checks each write rule's plan from one starting state, and that the store,
// applying the same write, ends with what it held changed by exactly the plan.
func TestPlanRules(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		owner      string
		replaceAll bool
		updates    []Update
		want       []string
		delta      int
	}{
		{rule: "an unchanged copy is left out; a changed and a new one are put",
			updates: []Update{{Collection: collA, Resources: rs("ns/a=1", "ns/b=2", "ns/e=1")}},
			want:    []string{"A: +ns/b +ns/e"}, delta: 1},
		{rule: "puts keep the update's order",
			updates: []Update{{Collection: collA, Resources: rs("ns/f=1", "ns/b=2", "ns/a=1", "ns/e=1")}},
			want:    []string{"A: +ns/f +ns/b +ns/e"}, delta: 2},
		{rule: "another owner's equal copy does not make a copy unchanged",
			updates: []Update{{Collection: collA, Resources: rs("ns/d=1")}},
			want:    []string{"A: +ns/d"}, delta: 1},
		{rule: "a new owner's first write puts everything",
			owner:   "r",
			updates: []Update{{Collection: collA, Full: true, Resources: rs("ns/a=1", "ns/b=1")}},
			want:    []string{"A: +ns/a +ns/b"}, delta: 2},
		{rule: "a full update deletes what the owner holds and it does not list, by name",
			updates: []Update{{Collection: collA, Full: true, Resources: rs("ns/b=1", "ns/e=1")}},
			want:    []string{"A: +ns/e -ns/a -ns/c"}, delta: -1},
		{rule: "a full update listing what the owner holds deletes nothing",
			updates: []Update{{Collection: collA, Full: true, Resources: rs("ns/c=1", "ns/a=2", "ns/b=1")}},
			want:    []string{"A: +ns/a"}, delta: 0},
		{rule: "a full update ignores Removed, even a name it lists",
			updates: []Update{{Collection: collA, Full: true, Resources: rs("ns/a=1", "ns/b=1", "ns/c=1"), Removed: []string{"ns/a", "ns/b"}}},
			want:    []string{"A:"}, delta: 0},
		{rule: "an empty full update empties the owner's part of the collection",
			updates: []Update{{Collection: collA, Full: true}},
			want:    []string{"A: -ns/a -ns/b -ns/c"}, delta: -3},
		{rule: "an empty full update of a collection the owner does not hold changes nothing",
			updates: []Update{{Collection: collC, Full: true}},
			want:    []string{"C:"}, delta: 0},
		{rule: "an increment deletes only removed names the owner holds, in their order",
			updates: []Update{{Collection: collA, Removed: []string{"ns/c", "ns/x", "ns/d", "ns/a"}}},
			want:    []string{"A: -ns/c -ns/a"}, delta: -2},
		{rule: "a name removed twice is deleted once",
			updates: []Update{{Collection: collA, Removed: []string{"ns/a", "ns/b", "ns/a"}}},
			want:    []string{"A: -ns/a -ns/b"}, delta: -2},
		{rule: "a name removed twice in a long list is deleted once",
			updates: []Update{{Collection: collA, Removed: append(append([]string{"ns/a"}, notHeld(17)...), "ns/a", "ns/b", "ns/b")}},
			want:    []string{"A: -ns/a -ns/b"}, delta: -2},
		{rule: "an increment upserts and removes together",
			updates: []Update{{Collection: collA, Resources: rs("ns/e=1", "ns/b=1"), Removed: []string{"ns/a"}}},
			want:    []string{"A: +ns/e -ns/a"}, delta: 0},
		{rule: "a write leaves the collections it does not list",
			updates: []Update{{Collection: collB, Resources: rs("ns/w=1")}, {Collection: collA, Removed: []string{"ns/b"}}},
			want:    []string{"B: +ns/w", "A: -ns/b"}, delta: 0},
		{rule: "a whole-state replacement empties the collections it does not list",
			replaceAll: true,
			updates:    []Update{{Collection: collA, Full: true, Resources: rs("ns/a=1", "ns/b=1", "ns/c=1")}},
			want:       []string{"A:", "B: -ns/v"}, delta: -1},
		{rule: "a whole-state replacement of nothing deletes all the owner holds",
			replaceAll: true,
			want:       []string{"A: -ns/a -ns/b -ns/c", "B: -ns/v"}, delta: -4},
		{rule: "a whole-state replacement of nothing by an owner holding nothing is empty",
			owner: "r", replaceAll: true},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s := planStore(t)
			owner := tc.owner
			if owner == "" {
				owner = "p"
			}
			before := s.View()
			prepared, err := s.Prepare(tc.updates...)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := NewPlan(before, owner, prepared, tc.replaceAll)
			if err != nil {
				t.Fatal(err)
			}
			if got := outline(plan); !slices.Equal(got, tc.want) {
				t.Errorf("plan %q, want %q", got, tc.want)
			}
			if plan.Delta != tc.delta {
				t.Errorf("delta %d, want %d", plan.Delta, tc.delta)
			}
			if n := plan.Changes(); n != strings.Count(strings.Join(tc.want, ""), " ") {
				t.Errorf("Changes() = %d for %q", n, tc.want)
			}

			// The store applying the same write holds what it held, changed by the plan.
			want := owned(before, owner)
			for _, c := range plan.Collections {
				for _, e := range c.Puts {
					want[short[c.Collection]+":"+e.Name] = bodyString(e)
				}
				for _, n := range c.Deletes {
					delete(want, short[c.Collection]+":"+n)
				}
			}
			if _, err := s.write(owner, mustPrepare(t, s, tc.updates), tc.replaceAll, 0); err != nil {
				t.Fatal(err)
			}
			after := s.View()
			if got := owned(after, owner); !maps.Equal(got, want) {
				t.Errorf("the store holds %v, want %v", got, want)
			}
			if got := after.OwnedCount(owner) - before.OwnedCount(owner); got != plan.Delta {
				t.Errorf("the store's count moved by %d, the plan's delta is %d", got, plan.Delta)
			}
			if got, want := owned(after, "q"), owned(before, "q"); !maps.Equal(got, want) {
				t.Errorf("another owner's copies changed: %v, were %v", got, want)
			}
		})
	}
}

// notHeld is n names nobody holds.
func notHeld(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("ns/not-held-%d", i)
	}
	return out
}

func mustPrepare(t *testing.T, s *Store, updates []Update) []preparedUpdate {
	t.Helper()
	p, err := s.prepare(updates)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanRefusesWhatPrepareRefuses: a plan takes Prepare's output, and refuses, as Prepare
// does, what no write may carry, rather than planning something the store never would.
func TestPlanRefusesWhatPrepareRefuses(t *testing.T) {
	s := planStore(t)
	enc := func(name, content string) Encoded {
		e, err := Encode(res(name, content))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, tc := range []struct {
		rule    string
		owner   string
		updates []Update
	}{
		{rule: "an empty owner", owner: ""},
		{rule: "an owner with a control character", owner: "p\x00"},
		{rule: "an update not prepared", owner: "p",
			updates: []Update{{Collection: collA, Resources: rs("ns/a=1")}}},
		{rule: "a collection named twice", owner: "p",
			updates: []Update{{Collection: collA, Encoded: []Encoded{enc("ns/a", "1")}}, {Collection: collA}}},
		{rule: "an empty collection name", owner: "p", updates: []Update{{}}},
		{rule: "a name listed twice", owner: "p",
			updates: []Update{{Collection: collA, Encoded: []Encoded{enc("ns/a", "1"), enc("ns/a", "2")}}}},
		{rule: "an encoded resource without a name", owner: "p",
			updates: []Update{{Collection: collA, Encoded: []Encoded{{}}}}},
		{rule: "an increment that upserts and removes one name", owner: "p",
			updates: []Update{{Collection: collA, Encoded: []Encoded{enc("ns/a", "1")}, Removed: []string{"ns/a"}}}},
		{rule: "an increment removing an empty name", owner: "p",
			updates: []Update{{Collection: collA, Removed: []string{""}}}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			_, err := NewPlan(s.View(), tc.owner, tc.updates, false)
			if verr := (*ValidationError)(nil); !errors.As(err, &verr) {
				t.Fatalf("NewPlan: %v, want a ValidationError", err)
			}
			if tc.owner != "p" || len(tc.updates) > 0 && len(tc.updates[0].Resources) > 0 {
				return // Prepare sees no owner, and prepares resources
			}
			if _, err := s.Prepare(tc.updates...); err == nil {
				t.Fatal("Prepare accepted it")
			}
		})
	}
	// A Full update may list a name in Removed too: Removed is ignored.
	u := Update{Collection: collA, Full: true, Encoded: []Encoded{enc("ns/a", "1")}, Removed: []string{"ns/a", ""}}
	if _, err := NewPlan(s.View(), "p", []Update{u}, false); err != nil {
		t.Fatalf("a full update with Removed: %v", err)
	}
}

// TestPlanQuota checks the quota rule from p holding 4 copies (q's 2 are not p's): the plan's
// verdict, and the store's on the same write.
func TestPlanQuota(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		limit  int
		update Update
		refuse bool // with Held 4 and Would 4+delta
		delta  int
	}{
		{rule: "no limit is no limit", limit: 0,
			update: Update{Collection: collC, Resources: rs("ns/1=1", "ns/2=1", "ns/3=1")}, delta: 3},
		{rule: "a write may take the owner to exactly its limit", limit: 5,
			update: Update{Collection: collC, Resources: rs("ns/1=1")}, delta: 1},
		{rule: "a write taking the owner over its limit and over what it holds is refused", limit: 5,
			update: Update{Collection: collC, Resources: rs("ns/1=1", "ns/2=1")}, refuse: true, delta: 2},
		{rule: "only the owner's copies count", limit: 4,
			update: Update{Collection: collA, Resources: rs("ns/d=1")}, refuse: true, delta: 1},
		{rule: "a swap at the limit is allowed", limit: 4,
			update: Update{Collection: collA, Resources: rs("ns/e=1"), Removed: []string{"ns/a"}}, delta: 0},
		{rule: "a change of content at the limit is allowed", limit: 4,
			update: Update{Collection: collA, Resources: rs("ns/a=2")}, delta: 0},
		{rule: "a write shrinking an owner over its limit is allowed", limit: 2,
			update: Update{Collection: collA, Full: true, Resources: rs("ns/a=1", "ns/e=1")}, delta: -1},
		{rule: "a write keeping an owner over its limit as it is is allowed", limit: 2,
			update: Update{Collection: collA, Resources: rs("ns/a=1", "ns/e=1"), Removed: []string{"ns/b"}}, delta: 0},
		{rule: "a write growing an owner over its limit is refused", limit: 2,
			update: Update{Collection: collB, Resources: rs("ns/w=1")}, refuse: true, delta: 1},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s := planStore(t)
			prepared, err := s.Prepare(tc.update)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := NewPlan(s.View(), "p", prepared, false)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Delta != tc.delta {
				t.Errorf("delta %d, want %d", plan.Delta, tc.delta)
			}
			check := func(who string, err error) {
				t.Helper()
				var le *OwnerLimitError
				switch {
				case !tc.refuse && err != nil:
					t.Errorf("%s refused it: %v", who, err)
				case tc.refuse && !errors.As(err, &le):
					t.Errorf("%s: %v, want an OwnerLimitError", who, err)
				case tc.refuse && *le != (OwnerLimitError{Owner: "p", Limit: tc.limit, Held: 4, Would: 4 + tc.delta}):
					t.Errorf("%s: %+v, want held 4, would %d, limit %d", who, *le, 4+tc.delta, tc.limit)
				}
			}
			check("the plan", plan.WithinLimit(tc.limit))
			before := s.View()
			_, err = s.ApplyWithin("p", tc.limit, tc.update)
			check("the store", err)
			if tc.refuse && s.View().Revision() != before.Revision() {
				t.Error("a refused write changed the store")
			}
		})
	}
}
