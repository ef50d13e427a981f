package source

import (
	"maps"
	"slices"
	"testing"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"pgregory.net/rapid"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// The virtual hosts of VHDS, in a collection of their own: ROUTE/HOST names.
const namespacedColl = "type.googleapis.com/envoy.config.route.v3.VirtualHost"

func namespacedType() Type {
	return Type{Collection: namespacedColl, Known: true, Mode: Incremental, Form: wire.FormAnyBody, Namespaced: true}
}

// namespaceModel is what a client of a Namespaced type asks for, computed from the names
// alone: a resource is asked for when its name is asked, or the part of its name before its
// last '/' is.
func namespaceModel(stored map[string]int, asked map[string]bool) map[string]int {
	out := map[string]int{}
	for name, gen := range stored {
		if askedFor(asked, name) {
			out[name] = gen
		}
	}
	return out
}

// askedFor tells whether a name is asked for: by itself, or by its namespace.
func askedFor(asked map[string]bool, name string) bool {
	if asked[name] {
		return true
	}
	i := lastSlash(name)
	return i >= 0 && asked[name[:i]]
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// TestNamespacedSubscriptionHoldsWhatItsNamesAndNamespacesAsk: whatever the order of writes,
// deletions, subscriptions and unsubscriptions (namespaces, exact names, names of nothing),
// an incremental client of a Namespaced type that applies each response and acknowledges it
// ends holding exactly what its names ask for (namespaceModel); a name that asks for nothing
// is told as missing when it is asked, and nothing else is.
func TestNamespacedSubscriptionHoldsWhatItsNamesAndNamespacesAsk(t *testing.T) {
	stored := []string{"8080/a", "8080/b", "8080/a/c", "8080", "9080/a", "gw/x/a", "gw/x"}
	askable := []string{"8080", "9080", "gw/x", "gw", "8080/a", "8080/zz", "7070"}
	rapid.Check(t, func(rt *rapid.T) {
		h := newMachineHarness(t)
		// Responses split into parts of a resource or two, or not at all: a part after the
		// first reads again what it carries, by name or by namespace.
		split := rapid.SampledFrom([]int{0, 1, 200}).Draw(rt, "split")
		h.split = split
		store := map[string]int{}
		asked := map[string]bool{}
		held := map[string]string{}
		gen := 0
		subscribed, away := false, false
		drain := func() {
			if away {
				h.flush() // to nobody: the stream is gone
				return
			}
			askedInFlight, droppedInFlight, wroteInFlight := false, false, false
			dropped := map[string]bool{} // given up during this drain: may still be told missing
			for range 20 {
				out := h.flush()
				if len(out) == 0 {
					return
				}
				// While a response is in flight, the status view says synced only what the
				// client holds, at the version the store has (a resource asked anew through
				// its namespace, on its way, is not).
				checkInFlight := func() {
					v := h.st.View()
					if states := h.m.statusState(); len(states) == 1 {
						for _, r := range states[0].evaluate(&snapshots{v: v}, true).Resources {
							if e := v.Get(namespacedColl, r.Name); r.State == StateSynced && (e == nil || held[r.Name] != e.Version) {
								rt.Fatalf("status says %s synced while a response is in flight; the client holds %q", r.Name, held[r.Name])
							}
						}
					}
				}
				checkInFlight()
				// A name asked while the response is in flight is owed, not sent: the
				// resources it asks for through its namespace are not synced either.
				if !askedInFlight && rapid.Bool().Draw(rt, "ask in flight") {
					askedInFlight = true // once a drain: each one asked is answered anew
					name := rapid.SampledFrom(askable).Draw(rt, "subscribe in flight")
					asked[name] = true
					h.sendTyped(namespacedType(), func(r *Request) { r.Subscribe = []string{name} })
					checkInFlight()
				}
				// A name given up while the response is in flight: the client drops what it
				// no longer asks for, and ignores it in the responses still to come, as
				// Envoy's watches ignore what none of them is interested in.
				if !droppedInFlight && subscribed && rapid.Bool().Draw(rt, "drop in flight") {
					droppedInFlight = true
					name := rapid.SampledFrom(askable).Draw(rt, "unsubscribe in flight")
					delete(asked, name)
					dropped[name] = true
					h.sendTyped(namespacedType(), func(r *Request) { r.Unsubscribe = []string{name} })
					maps.DeleteFunc(held, func(n, _ string) bool { return !askedFor(asked, n) })
					checkInFlight()
				}
				// The store changes while the response is in flight: a later part reads again
				// what it carries, and the change follows in the next response.
				if !wroteInFlight && rapid.Bool().Draw(rt, "write in flight") {
					wroteInFlight = true
					name := rapid.SampledFrom(stored).Draw(rt, "written in flight")
					if _, ok := store[name]; ok && rapid.Bool().Draw(rt, "delete in flight") {
						delete(store, name)
						h.apply(namespacedColl, nil, []string{name}, 0)
					} else {
						gen++
						store[name] = gen
						h.apply(namespacedColl, []string{name}, nil, gen)
					}
					checkInFlight()
				}
				for _, r := range out {
					for _, n := range r.p.msg.Missing {
						if !asked[n] && !dropped[n] {
							rt.Fatalf("missing %q was not asked for (asked %v)", n, asked)
						}
						delete(held, n)
					}
					for _, e := range r.p.msg.Resources {
						switch {
						case askedFor(asked, e.Name):
							held[e.Name] = e.Version
						case !askedFor(dropped, e.Name):
							rt.Fatalf("sent %s, which nothing asks for (asked %v)", e.Name, asked)
						}
					}
					for _, n := range r.p.msg.Removed {
						delete(held, n)
					}
					h.sendTyped(namespacedType(), func(req *Request) { req.Nonce = r.nonce })
				}
			}
			rt.Fatalf("responses never settle")
		}
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0:
				name := rapid.SampledFrom(stored).Draw(rt, "write")
				gen++
				store[name] = gen
				h.apply(namespacedColl, []string{name}, nil, gen)
			case 1:
				name := rapid.SampledFrom(stored).Draw(rt, "delete")
				if _, ok := store[name]; !ok {
					continue
				}
				delete(store, name)
				h.apply(namespacedColl, nil, []string{name}, 0)
			case 2:
				if away {
					continue
				}
				name := rapid.SampledFrom(askable).Draw(rt, "subscribe")
				asked[name] = true
				h.sendTyped(namespacedType(), func(r *Request) { r.Subscribe = []string{name} })
				subscribed = true
			case 3:
				name := rapid.SampledFrom(askable).Draw(rt, "unsubscribe")
				if !subscribed || away {
					continue
				}
				delete(asked, name)
				h.sendTyped(namespacedType(), func(r *Request) { r.Unsubscribe = []string{name} })
				// The client drops what it no longer asks for, as Envoy drops a namespace's
				// resources when it leaves the namespace.
				want := namespaceModel(store, asked)
				maps.DeleteFunc(held, func(n, _ string) bool { _, ok := want[n]; return !ok })
			case 4:
				// The client goes away (writes go on meanwhile), or comes back: a new stream,
				// its names asked again with the versions it holds
				// (initial_resource_versions), as Envoy resumes.
				if !subscribed {
					continue
				}
				if away = !away; away {
					continue
				}
				st := h.st
				d := newDirectMachine("test", access{})
				h = &machineHarness{t: t, st: st, d: d, m: d.m, split: split}
				names := slices.Sorted(maps.Keys(asked))
				initial := maps.Clone(held)
				h.sendTyped(namespacedType(), func(r *Request) { r.Subscribe, r.InitialVersions = names, initial })
			}
			drain()
			if !subscribed || away {
				continue
			}
			want := namespaceModel(store, asked)
			v := h.st.View()
			if !slices.Equal(slices.Sorted(maps.Keys(held)), slices.Sorted(maps.Keys(want))) {
				rt.Fatalf("client holds %v, asks for %v (store %v, asked %v)", slices.Sorted(maps.Keys(held)), slices.Sorted(maps.Keys(want)), store, asked)
			}
			for name, version := range held {
				if e := v.Get(namespacedColl, name); e == nil || e.Version != version {
					rt.Fatalf("client holds %s at %s, the store %v", name, version, e)
				}
			}
			// The status view (CSDS) says the same: every resource the client holds,
			// synced, and the names that ask for nothing, missing.
			states := h.m.statusState()
			if len(states) != 1 {
				rt.Fatalf("%d subscriptions", len(states))
			}
			ts := states[0].evaluate(&snapshots{v: v}, true)
			synced, missing := map[string]bool{}, map[string]bool{}
			for _, r := range ts.Resources {
				switch {
				case r.Missing:
					missing[r.Name] = true
				case r.State == StateSynced:
					synced[r.Name] = true
				default:
					rt.Fatalf("status of %s: %v, the client holds it", r.Name, r.State)
				}
			}
			if !slices.Equal(slices.Sorted(maps.Keys(synced)), slices.Sorted(maps.Keys(want))) {
				rt.Fatalf("status says synced %v, the client holds %v", slices.Sorted(maps.Keys(synced)), slices.Sorted(maps.Keys(want)))
			}
			for name := range asked {
				_, own := want[name]
				members := slices.ContainsFunc(slices.Collect(maps.Keys(want)), func(n string) bool {
					i := lastSlash(n)
					return i >= 0 && n[:i] == name
				})
				if missing[name] != (!own && !members) {
					rt.Fatalf("status says %s missing: %v (asked %v, held %v)", name, missing[name], asked, want)
				}
			}
		}
	})
}

// apply writes (upserts, each with content gen) and removes names of a collection, and hands
// the change to the machine.
func (h *machineHarness) apply(coll string, upserts, removed []string, gen int) {
	h.t.Helper()
	u := store.Update{Collection: coll, Removed: removed}
	for _, n := range upserts {
		u.Resources = append(u.Resources, worldResource(n, gen, nil))
	}
	res, err := h.st.Apply("test", u)
	if err != nil {
		h.t.Fatal(err)
	}
	h.keep(h.d.handle(event{changed: res.Collections, view: h.st.View(), now: h.now}))
}

// sendTyped sends a request of a type the test world does not have.
func (h *machineHarness) sendTyped(typ Type, build func(*Request)) {
	tr := &typedRequest{Request: Request{Key: typ.Collection}, Type: typ}
	if h.split > 0 && typ.Mode == Incremental {
		tr.Splittable, tr.splitAt = true, h.split
	}
	build(&tr.Request)
	h.keep(h.d.send(tr, h.st.View(), h.now))
}

// TestNamespacedNameAskedDuringPartsGetsItsNamespace: a name asked while a split response is
// going, which a later part carries as a resource of its own, still asks for its namespace:
// the response after the parts carries the namespace's resources, and not the name's own
// entry again at the version the part carried, whether the client took that part or refused
// it (a refused version is not sent again). (A part used to take the name off what was owed
// as soon as it carried the entry of that name: the namespace was never sent.)
func TestNamespacedNameAskedDuringPartsGetsItsNamespace(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		h := newMachineHarness(t)
		h.split = 1 // a part a resource
		h.apply(namespacedColl, []string{"gw/a", "gw/x", "gw/x/a"}, nil, 1)
		h.sendTyped(namespacedType(), func(r *Request) { r.Subscribe = []string{"gw"} })
		var seen [][]string
		for i := 0; ; i++ {
			out := h.flush()
			if len(out) == 0 {
				break
			}
			if i > 10 {
				t.Fatalf("responses never settle: %v", seen)
			}
			for _, r := range out {
				var names []string
				for _, e := range r.p.msg.Resources {
					names = append(names, e.Name)
				}
				seen = append(seen, names)
				if i == 0 {
					// The first part (gw/a) is in flight: ask for gw/x, which the second
					// part carries, and its namespace, which no part does.
					h.sendTyped(namespacedType(), func(req *Request) { req.Subscribe = []string{"gw/x"} })
				}
				h.sendTyped(namespacedType(), func(req *Request) {
					req.Nonce = r.nonce
					if refuse && i == 1 {
						req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "refused"}
					}
				})
			}
		}
		want := [][]string{{"gw/a"}, {"gw/x"}, {"gw/x/a"}}
		if !slices.EqualFunc(seen, want, slices.Equal) {
			t.Errorf("refusing the part of gw/x: %v: responses carried %v, want %v", refuse, seen, want)
		}
	}
}

// TestNamespacedResumeSendsANamespaceAskedAnew: a client that resumes holding a resource,
// then gives up its namespace and asks for it again before the first response (which waits
// for the types it comes after), may have dropped the resource meanwhile: the first
// response carries it. (Resume used to look at the names asked anew alone, not at their
// namespaces.)
func TestNamespacedResumeSendsANamespaceAskedAnew(t *testing.T) {
	const otherColl = "other"
	other := Type{Collection: otherColl, Known: true, Mode: Incremental, Form: wire.FormAnyBody}
	vhds := namespacedType()
	vhds.After = []string{otherColl}
	h := newMachineHarness(t)
	h.apply(otherColl, []string{"x"}, nil, 1)
	h.apply(namespacedColl, []string{"rc/h1"}, nil, 1)
	version := h.st.View().Get(namespacedColl, "rc/h1").Version
	h.sendTyped(other, func(r *Request) { r.Subscribe = []string{"x"} })
	first := h.flush()                        // other's response, in flight
	h.apply(otherColl, []string{"x"}, nil, 2) // owed to other once it answers: vhds waits
	h.sendTyped(vhds, func(r *Request) {
		r.Subscribe, r.InitialVersions = []string{"rc"}, map[string]string{"rc/h1": version}
	})
	h.sendTyped(vhds, func(r *Request) { r.Unsubscribe = []string{"rc"} })
	h.sendTyped(vhds, func(r *Request) { r.Subscribe = []string{"rc"} })
	var sent []string
	pending := first
	for range 10 {
		for _, r := range pending {
			if r.sub.key == namespacedColl {
				for _, e := range r.p.msg.Resources {
					sent = append(sent, e.Name)
				}
			}
			typ := other
			if r.sub.key == namespacedColl {
				typ = vhds
			}
			h.sendTyped(typ, func(req *Request) { req.Nonce = r.nonce })
		}
		if pending = h.flush(); len(pending) == 0 {
			break
		}
	}
	if !slices.Equal(sent, []string{"rc/h1"}) {
		t.Fatalf("the client, which gave rc up and asked for it again, was sent %v; want rc/h1", sent)
	}
}
