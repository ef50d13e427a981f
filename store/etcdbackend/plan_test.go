package etcdbackend

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"

	"github.com/mcpbridge/mcpbridge/store"
)

// ownedKeys is every copy every owner holds in a store, as the r/ keys and values etcd would
// hold for them.
func ownedKeys(v *store.View, owners []string) map[string]string {
	out := map[string]string{}
	for _, owner := range owners {
		for _, coll := range v.OwnerCollections(owner) {
			v.Owned(coll, owner, func(e *store.Entry) bool {
				out[resourceKey(owner, coll, e.Name)] = string(e.ResourceBytes())
				return true
			})
		}
	}
	return out
}

// ownerModel is what each owner holds, computed the plain way: owner → collection → name →
// encoded bytes.
type ownerModel map[string]map[string]map[string]string

func (m ownerModel) count(owner string) int {
	n := 0
	for _, names := range m[owner] {
		n += len(names)
	}
	return n
}

// write applies the write rules to a copy of the owner's state, and says whether the quota
// refuses the result.
func (m ownerModel) write(owner string, updates []store.Update, replaceAll bool, limit int) (next map[string]map[string]string, refused bool) {
	next = map[string]map[string]string{}
	for coll, names := range m[owner] {
		next[coll] = maps.Clone(names)
	}
	listed := map[string]bool{}
	for _, u := range updates {
		listed[u.Collection] = true
		if u.Full || next[u.Collection] == nil {
			next[u.Collection] = map[string]string{} // a full state starts from nothing
		}
		for _, e := range u.Encoded {
			next[u.Collection][e.Name()] = string(store.EntryOf(e).ResourceBytes())
		}
		if !u.Full {
			for _, name := range u.Removed {
				delete(next[u.Collection], name)
			}
		}
	}
	for coll, names := range next {
		if replaceAll && !listed[coll] || len(names) == 0 {
			delete(next, coll)
		}
	}
	held, would := m.count(owner), 0
	for _, names := range next {
		would += len(names)
	}
	return next, limit > 0 && would > limit && would > held
}

func (m ownerModel) keys() map[string]string {
	out := map[string]string{}
	for owner, colls := range m {
		for coll, names := range colls {
			for name, b := range names {
				out[resourceKey(owner, coll, name)] = b
			}
		}
	}
	return out
}

// TestPlanOpsMatchTheStore drives random writes (increments with removals of names held or
// not, listed once or twice; full states; whole-state replacements; quotas) by three owners
// over three collections, and checks after each that the write's plan, turned into etcd ops
// and applied to a plain map of etcd's r/ keys, gives the owned state the in-memory store
// reaches by applying the same write itself; that both are what a plain model of the write
// rules says; that the ops put no unchanged copy and delete no key that is not there; that
// the plan and the store refuse the same writes over a quota; and that a replica applying
// the ops as one etcd revision (as it follows etcd) reaches that state too.
func TestPlanOpsMatchTheStore(t *testing.T) {
	owners := []string{"a", "b", "spiffe://cluster.local/ns/x/sa/y"}
	colls := []string{"istio/networking/v1alpha3/serviceentries", "istio/networking/v1alpha3/virtualservices", "test/things"}
	names := []string{"ns/x", "ns/y", "ns/z", "ns/x2"}
	resource := func(name, content string) *mcpapi.Resource {
		body, err := anypb.New(wrapperspb.String(content))
		if err != nil {
			panic(err)
		}
		return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
	}
	rapid.Check(t, func(rt *rapid.T) {
		st := store.New(store.Options{})
		replica := &Backend{st: store.New(store.Options{}), owners: map[string]bool{}, log: slog.New(slog.DiscardHandler)}
		keys := map[string]string{} // etcd's r/ keys, as the ops leave them
		model := ownerModel{}
		for step := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			owner := rapid.SampledFrom(owners).Draw(rt, "owner")
			replaceAll := rapid.IntRange(0, 4).Draw(rt, "replaceAll") == 0
			limit := 0
			if !replaceAll && rapid.Bool().Draw(rt, "quota") {
				limit = rapid.IntRange(1, 8).Draw(rt, "limit")
			}
			var updates []store.Update
			for _, coll := range colls {
				if !rapid.Bool().Draw(rt, "listed") {
					continue
				}
				u := store.Update{Collection: coll, Full: replaceAll || rapid.Bool().Draw(rt, "full")}
				for _, n := range names {
					switch rapid.IntRange(0, 3).Draw(rt, "what") {
					case 1:
						u.Resources = append(u.Resources, resource(n, fmt.Sprint(rapid.IntRange(0, 2).Draw(rt, "content"))))
					case 2:
						u.Removed = append(u.Removed, n)
					case 3:
						u.Removed = append(u.Removed, n, n)
					}
				}
				updates = append(updates, u)
			}

			before := st.View()
			prepared, err := st.Prepare(updates...)
			if err != nil {
				rt.Fatalf("step %d: Prepare: %v", step, err)
			}
			plan, err := store.NewPlan(before, owner, prepared, replaceAll)
			if err != nil {
				rt.Fatalf("step %d: NewPlan: %v", step, err)
			}
			want, refused := model.write(owner, prepared, replaceAll, limit)

			// The in-memory store writes it itself.
			if replaceAll {
				state := map[string][]*mcpapi.Resource{}
				for _, u := range updates {
					state[u.Collection] = u.Resources
				}
				_, err = st.ReplaceOwner(owner, state)
			} else {
				_, err = st.ApplyWithin(owner, limit, updates...)
			}
			var storeErr, planErr *store.OwnerLimitError
			errors.As(err, &storeErr)
			errors.As(plan.WithinLimit(limit), &planErr)
			if err != nil && storeErr == nil {
				rt.Fatalf("step %d: the store: %v", step, err)
			}
			if (storeErr != nil) != refused || (planErr != nil) != refused {
				rt.Fatalf("step %d: over the quota of %d: the model says %v, the store %v, the plan %v", step, limit, refused, storeErr, planErr)
			}
			if refused {
				if *storeErr != *planErr {
					rt.Fatalf("step %d: the store refused with %+v, the plan with %+v", step, *storeErr, *planErr)
				}
				if got := ownedKeys(st.View(), owners); !maps.Equal(got, keys) {
					rt.Fatalf("step %d: a refused write changed the store", step)
				}
				continue
			}
			if len(want) == 0 {
				delete(model, owner)
			} else {
				model[owner] = want
			}
			if got := st.View().OwnedCount(owner) - before.OwnedCount(owner); got != plan.Delta {
				rt.Fatalf("step %d: the owner's count moved by %d, the plan's delta is %d", step, got, plan.Delta)
			}

			// The etcd backend's ops of the plan, applied to etcd's keys.
			ops := opsOf(plan)
			if len(ops) != plan.Changes() {
				rt.Fatalf("step %d: %d ops for a plan of %d changes", step, len(ops), plan.Changes())
			}
			var w revisionWrite
			for _, o := range ops {
				old, ok := keys[o.key]
				switch {
				case o.del && !ok:
					rt.Fatalf("step %d: deletes %s, which etcd does not hold", step, o.key)
				case !o.del && ok && old == string(o.value):
					rt.Fatalf("step %d: puts %s unchanged", step, o.key)
				case o.del:
					delete(keys, o.key)
				default:
					keys[o.key] = string(o.value)
				}
				if err := w.addOp(o); err != nil {
					rt.Fatalf("step %d: op %s: %v", step, o.key, err)
				}
			}
			if got := ownedKeys(st.View(), owners); !maps.Equal(got, keys) {
				rt.Fatalf("step %d: the store holds\n%v\netcd's keys would be\n%v", step, got, keys)
			}
			if mk := model.keys(); !maps.Equal(mk, keys) {
				rt.Fatalf("step %d: the model holds\n%v\netcd's keys would be\n%v", step, mk, keys)
			}
			// A replica applies the ops as one revision of etcd's (when there are any: an
			// empty plan commits nothing).
			if len(ops) > 0 {
				replica.applyLocked(&w, int64(step+1))
			}
			if got := ownedKeys(replica.st.View(), owners); !maps.Equal(got, keys) {
				rt.Fatalf("step %d: a replica applying the ops holds\n%v\netcd's keys are\n%v", step, got, keys)
			}
		}
	})
}

// An owner the store refuses (here a NUL byte, which would let "ns/x\x00evil" pass for an
// owner of "ns/x" in its indexes) is refused before etcd: committed, it would be applied by
// no replica, and the producer told its write went through.
func TestAnOwnerTheStoreRefusesIsRefusedBeforeEtcd(t *testing.T) {
	b := &Backend{st: store.New(store.Options{})} // no etcd client: nothing may reach etcd
	for _, owner := range []string{"", "p\x00", "p\n"} {
		var verr *store.ValidationError
		if _, err := b.Apply(owner, store.Update{Collection: coll, Resources: []*mcpapi.Resource{resource(t, "ns/a", "1")}}); !errors.As(err, &verr) {
			t.Errorf("Apply by %q: %v, want a ValidationError", owner, err)
		}
		if _, err := b.ReplaceOwner(owner, nil); !errors.As(err, &verr) {
			t.Errorf("ReplaceOwner by %q: %v, want a ValidationError", owner, err)
		}
		if _, err := b.SetOwnerPresence(owner, true, 0); !errors.As(err, &verr) {
			t.Errorf("SetOwnerPresence of %q: %v, want a ValidationError", owner, err)
		}
	}
}
