package envoy

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// mesh is a set of inputs a test edits: by collection, by name.
type mesh map[string]map[string]*mcpapi.Resource

func newMesh(in map[string][]*mcpapi.Resource) mesh {
	m := mesh{}
	for coll, rs := range in {
		for _, r := range rs {
			m.put(coll, r)
		}
	}
	return m
}

func (m mesh) put(coll string, r *mcpapi.Resource) {
	if m[coll] == nil {
		m[coll] = map[string]*mcpapi.Resource{}
	}
	m[coll][r.GetMetadata().GetName()] = r
}

func (m mesh) inputs() map[string][]*mcpapi.Resource {
	out := map[string][]*mcpapi.Resource{}
	for coll, byName := range m {
		for _, r := range byName {
			out[coll] = append(out[coll], r)
		}
	}
	return out
}

// allTestdata is every golden input and the examples, as one mesh.
func allTestdata(t *testing.T) mesh {
	t.Helper()
	var files []string
	for _, fs := range goldenCases(t) {
		files = append(files, fs...)
	}
	slices.Sort(files)
	return newMesh(loadInputs(t, files...))
}

// withVersion returns a copy of r with a version, as the store gives every resource.
func withVersion(r *mcpapi.Resource, version string) *mcpapi.Resource {
	c := proto.Clone(r).(*mcpapi.Resource)
	c.Metadata.Version = version
	return c
}

// edit returns a copy of r whose spec edit changed, with a new version.
func edit[M proto.Message](t testing.TB, r *mcpapi.Resource, spec M, version string, change func(M)) *mcpapi.Resource {
	t.Helper()
	if err := r.GetBody().UnmarshalTo(spec); err != nil {
		t.Fatal(err)
	}
	change(spec)
	c := withVersion(r, version)
	body, err := anypb.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	c.Body = body
	return c
}

// assertSameAsFromScratch checks that what a translator holds after incremental updates is
// exactly what a fresh build of the same inputs gives: outputs, bytes and faults.
func assertSameAsFromScratch(t *testing.T, step string, tr *Translator, m mesh) {
	t.Helper()
	want, wantFaults := Build(m.inputs(), TranslatorOptions{VirtualHostPorts: slices.Collect(maps.Keys(tr.vhdsFor))})
	got := tr.Outputs()
	if d := diffOutputs(want, got); d != "" {
		t.Fatalf("%s: incremental outputs differ from a fresh build:\n%s", step, d)
	}
	if gotFaults := tr.Faults(); !slices.Equal(wantFaults, gotFaults) {
		t.Fatalf("%s: incremental faults differ from a fresh build:\nwant %v\ngot  %v", step, wantFaults, gotFaults)
	}
}

// testVirtualHostPorts are the HTTP ports of the test data whose VHDS outputs the
// incremental tests build too (vhds.go): a port's virtual hosts must follow every change as
// its route configuration does.
var testVirtualHostPorts = []uint32{80, 8000, 8080, 9080, 9090}

func diffOutputs(want, got []Resource) string {
	key := func(r Resource) string { return r.TypeURL + " " + r.Name }
	w, g := map[string]Resource{}, map[string]Resource{}
	for _, r := range want {
		w[key(r)] = r
	}
	for _, r := range got {
		g[key(r)] = r
	}
	var b strings.Builder
	for k, r := range w {
		switch o, ok := g[k]; {
		case !ok:
			fmt.Fprintf(&b, "missing %s\n", k)
		case !bytes.Equal(o.Body().GetValue(), r.Body().GetValue()):
			fmt.Fprintf(&b, "differs %s\n", k)
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			fmt.Fprintf(&b, "extra   %s\n", k)
		}
	}
	return b.String()
}

// TestIncrementalTranslationEqualsFromScratch edits a mesh at random, step by step (removing,
// restoring and changing resources of every kind), and checks after each step that the
// translator, fed only the step's changes, holds what a fresh build of the whole mesh gives.
func TestIncrementalTranslationEqualsFromScratch(t *testing.T) {
	t.Parallel()
	full := allTestdata(t)
	type item struct{ coll, name string }
	var items []item
	for coll, byName := range full {
		for name := range byName {
			items = append(items, item{coll, name})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.coll+a.name, b.coll+b.name) })

	cur := newMesh(full.inputs())
	tr := NewTranslator(TranslatorOptions{VirtualHostPorts: testVirtualHostPorts})
	for coll, byName := range cur {
		for _, r := range byName {
			feed(tr, coll, []*mcpapi.Resource{r}, nil)
		}
	}
	tr.Translate()
	assertSameAsFromScratch(t, "initial build", tr, cur)

	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 400 {
		it := items[rng.IntN(len(items))]
		version := fmt.Sprintf("v%d", step)
		var what string
		held, present := cur[it.coll][it.name]
		switch {
		case !present:
			r := withVersion(full[it.coll][it.name], version)
			cur.put(it.coll, r)
			feed(tr, it.coll, []*mcpapi.Resource{r}, nil)
			what = "restore"
		case rng.IntN(3) == 0:
			delete(cur[it.coll], it.name)
			feed(tr, it.coll, nil, []string{it.name})
			what = "remove"
		default:
			r := mutate(t, it.coll, held, version, rng)
			cur.put(it.coll, r)
			feed(tr, it.coll, []*mcpapi.Resource{r}, nil)
			what = "change"
		}
		tr.Translate()
		assertSameAsFromScratch(t, fmt.Sprintf("step %d: %s %s %s", step, what, it.coll, it.name), tr, cur)
	}
}

// TestEverySingleChangeEqualsFromScratch removes, restores, changes and changes back every
// resource of the mesh in turn, checking after each that the incremental result is a fresh
// build's: every dependency between resources is exercised in both directions.
func TestEverySingleChangeEqualsFromScratch(t *testing.T) {
	t.Parallel()
	full := allTestdata(t)
	cur := newMesh(full.inputs())
	tr := NewTranslator(TranslatorOptions{VirtualHostPorts: testVirtualHostPorts})
	for coll, rs := range cur.inputs() {
		feed(tr, coll, rs, nil)
	}
	tr.Translate()
	rng := rand.New(rand.NewPCG(3, 4))
	n := 0
	apply := func(step, coll string, r *mcpapi.Resource, remove bool) {
		n++
		if remove {
			delete(cur[coll], r.GetMetadata().GetName())
			feed(tr, coll, nil, []string{r.GetMetadata().GetName()})
		} else {
			cur.put(coll, r)
			feed(tr, coll, []*mcpapi.Resource{r}, nil)
		}
		tr.Translate()
		assertSameAsFromScratch(t, step, tr, cur)
	}
	for _, coll := range sortedKeys(full) {
		for _, name := range sortedKeys(full[coll]) {
			orig := full[coll][name]
			apply("remove "+name, coll, orig, true)
			apply("restore "+name, coll, withVersion(orig, fmt.Sprint("r", n)), false)
			apply("change "+name, coll, mutate(t, coll, orig, fmt.Sprint("c", n), rng), false)
			apply("change back "+name, coll, withVersion(orig, fmt.Sprint("b", n)), false)
		}
	}
}

// mutate changes a resource in a way that matters to the translation.
func mutate(t *testing.T, coll string, r *mcpapi.Resource, version string, rng *rand.Rand) *mcpapi.Resource {
	switch coll {
	case collectionOf(kindServiceEntry):
		return edit(t, r, &networking.ServiceEntry{}, version, func(se *networking.ServiceEntry) {
			if n := len(se.Endpoints); n > 0 {
				se.Endpoints = se.Endpoints[:n-1]
			} else {
				se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{Address: fmt.Sprintf("10.99.0.%d", rng.IntN(200)+1),
					Labels: map[string]string{"version": "v2"}})
			}
			if len(se.Ports) > 1 && rng.IntN(2) == 0 {
				se.Ports = se.Ports[1:]
			}
		})
	case collectionOf(kindVirtualService):
		return edit(t, r, &networking.VirtualService{}, version, func(vs *networking.VirtualService) {
			slices.Reverse(vs.Http)
			for _, hr := range vs.Http {
				for _, d := range hr.Route {
					d.Weight = int32(rng.IntN(100))
				}
			}
			if rng.IntN(3) == 0 {
				vs.Gateways = nil
			}
		})
	case collectionOf(kindDestinationRule):
		return edit(t, r, &networking.DestinationRule{}, version, func(dr *networking.DestinationRule) {
			if n := len(dr.Subsets); n > 0 {
				dr.Subsets = dr.Subsets[:n-1]
			}
			dr.TrafficPolicy = nil
		})
	case collectionOf(kindWorkloadEntry):
		return edit(t, r, &networking.WorkloadEntry{}, version, func(we *networking.WorkloadEntry) {
			we.Labels = map[string]string{"app": we.Labels["app"], "version": fmt.Sprintf("v%d", rng.IntN(3)+1)}
			we.Address = fmt.Sprintf("10.98.0.%d", rng.IntN(200)+1)
		})
	case collectionOf(kindGateway):
		return edit(t, r, &networking.Gateway{}, version, func(gw *networking.Gateway) {
			if n := len(gw.Servers); n > 1 {
				gw.Servers = gw.Servers[:n-1]
			}
		})
	}
	t.Fatalf("no mutation for %s", coll)
	return nil
}

// translated builds the examples mesh and returns the translator, ready for a change.
func translated(t *testing.T) (*Translator, mesh) {
	t.Helper()
	files, _ := filepath.Glob("../../examples/*.yaml")
	m := newMesh(loadInputs(t, files...))
	for coll, byName := range m {
		for name, r := range byName {
			m[coll][name] = withVersion(r, "v1") // as the store versions every resource
		}
	}
	// The examples' ingress gateway proxy is connected: its class is built.
	tr := NewTranslator(TranslatorOptions{GatewayClasses: []translate.GatewayClass{ingressClass}})
	for coll, rs := range m.inputs() {
		feed(tr, coll, rs, nil)
	}
	tr.Translate()
	return tr, m
}

// upsertNames are the names a delta upserts, sorted (Upserts are in build order).
func upsertNames(d Delta) []string {
	var out []string
	for _, r := range d.Resources() {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func TestVirtualServiceChangeRebuildsOnlyItsHost(t *testing.T) {
	tr, m := translated(t)
	coll := collectionOf(kindVirtualService)
	vs := edit(t, m[coll]["bookinfo/reviews"], &networking.VirtualService{}, "v2", func(vs *networking.VirtualService) {
		vs.Http[1].Route[0].Weight, vs.Http[1].Route[1].Weight = 50, 40
	})
	feed(tr, coll, []*mcpapi.Resource{vs}, nil)
	delta, st := tr.Translate()
	if st.Hosts != 1 || st.Ports != 1 || st.Gateways != 0 {
		t.Errorf("rebuilt %d hosts, %d ports, %d gateways; want 1, 1, 0", st.Hosts, st.Ports, st.Gateways)
	}
	want := []string{"9080", "outbound|9080||reviews.bookinfo.svc.cluster.local"}
	if got := upsertNames(delta); !slices.Equal(got, want) || len(delta.Removed) != 0 {
		t.Errorf("changed %v, removed %v; want %v and nothing removed", got, delta.Removed, want)
	}
}

func TestDestinationRuleChangeRebuildsWhatRoutesToItsHost(t *testing.T) {
	tr, m := translated(t)
	coll := collectionOf(kindDestinationRule)
	// productpage's rule loses its subsets: productpage itself and the gateway class that
	// routes to it are rebuilt; nothing else reads productpage.
	dr := edit(t, m[coll]["bookinfo/productpage"], &networking.DestinationRule{}, "v2", func(dr *networking.DestinationRule) {
		dr.Subsets = nil
	})
	feed(tr, coll, []*mcpapi.Resource{dr}, nil)
	delta, st := tr.Translate()
	if st.Hosts != 1 || st.Gateways != 1 {
		t.Errorf("rebuilt %d hosts and %d gateways; want 1 and 1", st.Hosts, st.Gateways)
	}
	wantRemoved := map[string][]string{
		ClusterType:     {"outbound|9080|v1|productpage.bookinfo.svc.cluster.local"},
		EndpointType:    {"outbound|9080|v1|productpage.bookinfo.svc.cluster.local"},
		GRPCClusterType: {"outbound|9080|v1|productpage.bookinfo.svc.cluster.local"},
	}
	if !mapsEqual(delta.Removed, wantRemoved) || len(delta.Resources()) != 0 {
		t.Errorf("upserts %v, removed %v; want none and %v", upsertNames(delta), delta.Removed, wantRemoved)
	}
}

func TestWorkloadEntryChangeRebuildsOnlySelectingHosts(t *testing.T) {
	tr, m := translated(t)
	coll := collectionOf(kindWorkloadEntry)
	we := edit(t, m[coll]["bookinfo/reviews-v1"], &networking.WorkloadEntry{}, "v2", func(we *networking.WorkloadEntry) {
		we.Address = "10.10.1.9"
	})
	feed(tr, coll, []*mcpapi.Resource{we}, nil)
	delta, st := tr.Translate()
	if st.Endpoints != 1 || st.Hosts != 0 || st.Gateways != 0 {
		t.Errorf("rebuilt the endpoints of %d hosts, %d hosts and %d gateways; want the endpoints of 1, and nothing else", st.Endpoints, st.Hosts, st.Gateways)
	}
	want := []string{"outbound|9080|v1|reviews.bookinfo.svc.cluster.local", "outbound|9080||reviews.bookinfo.svc.cluster.local"}
	if got := upsertNames(delta); !slices.Equal(got, want) {
		t.Errorf("changed %v; want only the load assignments %v", got, want)
	}
	for _, r := range delta.Resources() {
		if r.TypeURL != EndpointType {
			t.Errorf("changed %s %s; only load assignments should change", r.TypeURL, r.Name)
		}
	}
}

// TestEndpointChangeRebuildsOnlyLoadAssignments: a ServiceEntry whose endpoints alone change
// (an address) rebuilds its host's load assignments, not its clusters, routes and listeners;
// one whose ports change rebuilds the host.
func TestEndpointChangeRebuildsOnlyLoadAssignments(t *testing.T) {
	tr, m := translated(t)
	coll := collectionOf(kindServiceEntry)
	se := edit(t, m[coll]["bookinfo/details"], &networking.ServiceEntry{}, "v2", func(se *networking.ServiceEntry) {
		se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{Address: "10.10.9.9"})
	})
	feed(tr, coll, []*mcpapi.Resource{se}, nil)
	delta, st := tr.Translate()
	if st.Endpoints != 1 || st.Hosts != 0 {
		t.Errorf("rebuilt the endpoints of %d hosts and %d hosts; want the endpoints of 1 only", st.Endpoints, st.Hosts)
	}
	for _, r := range delta.Resources() {
		if r.TypeURL != EndpointType {
			t.Errorf("changed %s %s; only load assignments should change", r.TypeURL, r.Name)
		}
	}
	if len(delta.Resources()) == 0 {
		t.Error("the new endpoint changed nothing")
	}
	se = edit(t, se, &networking.ServiceEntry{}, "v3", func(se *networking.ServiceEntry) {
		se.Ports[0].Name = "http-renamed"
	})
	feed(tr, coll, []*mcpapi.Resource{se}, nil)
	if _, st := tr.Translate(); st.Hosts != 1 {
		t.Errorf("a port change rebuilt %d hosts; want 1", st.Hosts)
	}
}

func TestUnchangedContentChangesNothing(t *testing.T) {
	tr, m := translated(t)
	for coll, rs := range m.inputs() {
		for _, r := range rs {
			feed(tr, coll, []*mcpapi.Resource{withVersion(r, "touched")}, nil)
		}
	}
	delta, st := tr.Translate()
	if !delta.Empty() {
		t.Errorf("re-applying every input unchanged (%d hosts rebuilt) changed %v and removed %v", st.Hosts, upsertNames(delta), delta.Removed)
	}
}

func TestSameVersionIsNotTranslatedAgain(t *testing.T) {
	tr, m := translated(t)
	for coll, rs := range m.inputs() {
		feed(tr, coll, rs, nil)
	}
	if _, st := tr.Translate(); st.Hosts+st.Ports+st.Gateways != 0 {
		t.Errorf("inputs at the versions held rebuilt %+v; want nothing", st)
	}
}

func TestRemovingServiceEntryRemovesItsOutputs(t *testing.T) {
	tr, _ := translated(t)
	feed(tr, collectionOf(kindServiceEntry), nil, []string{"bookinfo/ratings"})
	delta, _ := tr.Translate()
	for _, typ := range outputTypes {
		for _, name := range delta.Removed[typ] {
			if !strings.Contains(name, "ratings") {
				t.Errorf("removed %s %s, which is not ratings'", typeName(typ), name)
			}
		}
	}
	if got := len(delta.Removed[ListenerType]); got != 1 {
		t.Errorf("removed %d listeners; want ratings' API listener only", got)
	}
	// The reviews and ratings virtual services are not affected; the port route is.
	if got := upsertNames(delta); !slices.Equal(got, []string{"9080"}) {
		t.Errorf("changed %v; want the port's route configuration only", got)
	}
	for _, f := range tr.Faults() {
		if f.Name == "bookinfo/ratings" && f.Kind == kindVirtualService {
			return
		}
	}
	t.Errorf("faults %v; want the ratings VirtualService reported as routing a host no ServiceEntry defines", tr.Faults())
}

func TestUnreadableBodyIsAFaultAndIgnored(t *testing.T) {
	tr, m := translated(t)
	coll := collectionOf(kindServiceEntry)
	bad := withVersion(m[coll]["bookinfo/details"], "broken")
	bad.Body = &anypb.Any{TypeUrl: bad.Body.TypeUrl, Value: []byte{0xff, 0xff}}
	feed(tr, coll, []*mcpapi.Resource{bad}, nil)
	delta, _ := tr.Translate()
	if len(delta.Removed[ClusterType]) == 0 {
		t.Errorf("the unreadable ServiceEntry's clusters are still served")
	}
	faults := tr.Faults()
	if !slices.ContainsFunc(faults, func(f Fault) bool { return f.Name == "bookinfo/details" && f.Kind == kindServiceEntry }) {
		t.Errorf("faults %v; want one for bookinfo/details", faults)
	}
}

// TestStoredBodiesAreCheckedUnlessVouchedFor: a ServiceEntry the store holds as nobody vouched
// for it (an etcd replica's load, an encoding made elsewhere) is checked before it is read, and
// an unreadable one is a fault; one whose producer vouched for its body (store.Encoded.Checked:
// the file, Kubernetes and ZooKeeper sources) is read without the check.
func TestStoredBodiesAreCheckedUnlessVouchedFor(t *testing.T) {
	unreadable, err := store.EncodeBody("bookinfo/details", kindOf(kindServiceEntry).AMCSTypeURL, 2, func(b []byte) ([]byte, error) {
		return append(b, 0xff, 0xff), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	in := InputOfEntry(store.EntryOf(unreadable))
	if in.Checked {
		t.Fatalf("an entry nobody vouched for reads as checked")
	}
	if _, err := newServiceEntry(in); err == nil {
		t.Errorf("an unreadable body nobody vouched for was read")
	}
	vouched := InputOfEntry(store.EntryOf(unreadable.Checked()))
	if !vouched.Checked {
		t.Fatalf("an entry vouched for does not read as checked")
	}
	if _, err := newServiceEntry(vouched); err != nil {
		t.Errorf("a body vouched for was checked again: %v", err)
	}
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestPortRouteEncodingIsTheMarshalledMessage holds the port route configuration, which is
// assembled from encoded virtual hosts, to the bytes proto.Marshal gives for the message.
func TestPortRouteEncodingIsTheMarshalledMessage(t *testing.T) {
	outs, _ := Build(generatedMesh(50), TranslatorOptions{})
	for _, r := range outs {
		if r.TypeURL != RouteType || r.Name != "8080" {
			continue
		}
		m, err := r.Body().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		again, err := deterministic.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, r.Body().GetValue()) {
			t.Fatalf("the assembled encoding of route configuration 8080 differs from proto.Marshal's")
		}
		if n := len(m.(*routepb.RouteConfiguration).GetVirtualHosts()); n != 50 {
			t.Fatalf("%d virtual hosts; want 50", n)
		}
		return
	}
	t.Fatal("no route configuration 8080")
}

// TestParallelBuildEqualsOneAtATime: a Translate of many hosts builds them on every CPU; what
// it gives must be what the same inputs give fed one resource at a time (each Translate then
// building a host or two, on one goroutine). The mesh mixes the golden cases, with their
// routes across hosts, and 300 generated services, so that both paths run under -race.
func TestParallelBuildEqualsOneAtATime(t *testing.T) {
	m := allTestdata(t)
	for coll, rs := range generatedMesh(300) {
		for _, r := range rs {
			m.put(coll, r)
		}
	}
	parallel := NewTranslator(TranslatorOptions{})
	for coll, byName := range m {
		feed(parallel, coll, slices.Collect(maps.Values(byName)), nil)
	}
	if _, st := parallel.Translate(); st.Hosts < parallelBuildMin*2 {
		t.Fatalf("built %d hosts at once, too few to be built in parallel", st.Hosts)
	}
	single := NewTranslator(TranslatorOptions{})
	for _, coll := range slices.Sorted(maps.Keys(m)) {
		for _, name := range slices.Sorted(maps.Keys(m[coll])) {
			feed(single, coll, []*mcpapi.Resource{m[coll][name]}, nil)
			if _, st := single.Translate(); st.Hosts >= parallelBuildMin {
				t.Fatalf("%s %s: built %d hosts", coll, name, st.Hosts)
			}
		}
	}
	if d := diffOutputs(single.Outputs(), parallel.Outputs()); d != "" {
		t.Fatalf("built in parallel, outputs differ from one at a time:\n%s", d)
	}
	if !slices.Equal(single.Faults(), parallel.Faults()) {
		t.Fatalf("faults differ:\none at a time %v\nparallel      %v", single.Faults(), parallel.Faults())
	}
}

// feed feeds a translator resources, as the controller feeds it stored entries.
func feed(tr *Translator, coll string, rs []*mcpapi.Resource, removed []string) {
	in := make([]Input, len(rs))
	for i, r := range rs {
		in[i] = InputOf(r)
	}
	tr.Update(coll, in, removed)
}

// A load of more hosts than reserveMin takes the large-load paths (maps reserved, the dirty
// hosts sorted by prefix, their set replaced rather than cleared): what follows it is
// translated as from scratch, and a change then rebuilds its host alone, nothing left dirty
// from the load.
func TestALargeLoadLeavesNothingDirty(t *testing.T) {
	// Plain ServiceEntries, and one host with a DestinationRule and a VirtualService to change
	// (cheap to build: this runs under -race in make test).
	gen := generatedMesh(reserveMin + 10)
	se, dr, vsColl := collectionOf(kindServiceEntry), collectionOf(kindDestinationRule), collectionOf(kindVirtualService)
	m := newMesh(map[string][]*mcpapi.Resource{se: gen[se], dr: gen[dr][42:43], vsColl: gen[vsColl][42:43]})
	tr := NewTranslator(TranslatorOptions{})
	feedMesh(tr, m)
	if _, st := tr.Translate(); st.Hosts != reserveMin+10 {
		t.Fatalf("the load built %d hosts, want %d", st.Hosts, reserveMin+10)
	}
	if _, st := tr.Translate(); st.Hosts+st.Endpoints+st.Ports+st.Gateways != 0 {
		t.Fatalf("a Translate after the load with nothing changed rebuilt %+v", st)
	}
	feed(tr, se, gen[se], nil) // the whole collection again, as a re-list reads it
	if _, st := tr.Translate(); st.Hosts+st.Endpoints+st.Ports+st.Gateways != 0 {
		t.Fatalf("reading the same ServiceEntries again rebuilt %+v", st)
	}
	vs := changedVirtualService(42, 1)
	m.put(collectionOf(kindVirtualService), vs)
	feed(tr, collectionOf(kindVirtualService), []*mcpapi.Resource{vs}, nil)
	if _, st := tr.Translate(); st.Hosts != 1 || st.Ports != 1 {
		t.Fatalf("one VirtualService changed: rebuilt %+v, want its host and its port", st)
	}
	assertSameAsFromScratch(t, "after a VirtualService changed", tr, m)
}

// TestAPlainHostsUnitHasNoEmptyRoom: the unit of a host without a DestinationRule, a
// VirtualService or proxyless outputs holds its one cluster in a list of one (a million hosts
// keep their units: room for a route and a listener too was 80 MB left empty).
func TestAPlainHostsUnitHasNoEmptyRoom(t *testing.T) {
	gen := generatedMesh(3)
	se := collectionOf(kindServiceEntry)
	tr := NewTranslator(TranslatorOptions{LazyProxyless: true})
	feed(tr, se, gen[se], nil)
	tr.Translate()
	hosts := 0
	for k, u := range tr.units.all() {
		if k.kind != unitHost {
			continue
		}
		hosts++
		if len(u.outputs) != 1 || cap(u.outputs) != 1 {
			t.Errorf("host %s: %d outputs in room for %d, want its one cluster alone", k.name, len(u.outputs), cap(u.outputs))
		}
	}
	if hosts != 3 {
		t.Fatalf("%d host units, want 3", hosts)
	}
}

// TestPerHostRecordsKeepTheirSize: the records the translator keeps for every host (a million
// at scale) stay within the sizes their layouts were made for, rare parts apart: a
// ServiceEntry's record 224 bytes with its first host, first port and one-element list in it
// (160 without, and 72 in three objects of their own), a unit's state 96 with its first
// output and its faults among its rare parts (80, and 48 apart, with faults 104), a port's virtual host 64.
func TestPerHostRecordsKeepTheirSize(t *testing.T) {
	for _, tc := range []struct {
		what       string
		size, want uintptr
	}{
		{"serviceEntry", unsafe.Sizeof(serviceEntry{}), 224},
		{"unitState", unsafe.Sizeof(unitState{}), 96},
		{"portVhost", unsafe.Sizeof(portVhost{}), 64},
	} {
		if tc.size > tc.want {
			t.Errorf("%s is %d bytes, over the %d budgeted", tc.what, tc.size, tc.want)
		}
	}
}

// TestPortHTTPChainFollowsItsSharedHosts: a port's 0.0.0.0_PORT listener has an HTTP chain
// while some host on the port is reached through it (portState.shares); a host with a
// listener of its own (a sniffed port on its own address) is on the port but not counted.
// Rebuilding a counted host, then removing it, leaves exactly what a fresh build of the rest
// gives: a rebuild must not count the host twice.
func TestPortHTTPChainFollowsItsSharedHosts(t *testing.T) {
	coll := collectionOf(kindServiceEntry)
	shared := func(version, portName string) *mcpapi.Resource {
		r := resource(kindServiceEntry, "ns/a", &networking.ServiceEntry{
			Hosts: []string{"a.example"}, Resolution: networking.ServiceEntry_STATIC,
			Ports:     []*networking.ServicePort{{Number: 8080, Name: portName, Protocol: "HTTP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1"}},
		})
		r.Metadata.Version = version
		return r
	}
	own := resource(kindServiceEntry, "ns/b", &networking.ServiceEntry{
		Hosts: []string{"b.example"}, Addresses: []string{"240.0.0.2"}, Resolution: networking.ServiceEntry_STATIC,
		Ports:     []*networking.ServicePort{{Number: 8080, Name: "web"}}, // no protocol: sniffed
		Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.2"}},
	})
	own.Metadata.Version = "1"
	m := newMesh(map[string][]*mcpapi.Resource{coll: {shared("1", "http"), own}})
	tr := NewTranslator(TranslatorOptions{})
	feed(tr, coll, m.inputs()[coll], nil)
	tr.Translate()
	assertSameAsFromScratch(t, "both hosts", tr, m)

	changed := shared("2", "http-a") // rebuilds a.example's unit, still on the port
	m.put(coll, changed)
	feed(tr, coll, []*mcpapi.Resource{changed}, nil)
	tr.Translate()
	assertSameAsFromScratch(t, "a.example rebuilt", tr, m)

	delete(m[coll], "ns/a")
	feed(tr, coll, nil, []string{"ns/a"})
	tr.Translate()
	assertSameAsFromScratch(t, "a.example removed", tr, m)
}
