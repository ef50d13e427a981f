package envoy

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/mcpbridge/mcpbridge/internal/testlog"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// testOwner is the producer the tests write Istio config as.
const testOwner = "test"

type harness struct {
	t    *testing.T
	st   *store.Store
	ctrl *Controller
}

// startController starts a controller on a new store and stops it at the end of the test.
func startController(t *testing.T, st *store.Store) *harness {
	t.Helper()
	if st == nil {
		st = newStore()
	}
	return runController(t, st, New(Options{Store: st, Logger: testLogger(t)}))
}

// runController runs a controller until the end of the test.
func runController(t *testing.T, st *store.Store, ctrl *Controller) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	h := &harness{t: t, st: st, ctrl: ctrl}
	h.wait(st.View().Revision())
	return h
}

// holdProxyless acquires the proxyless outputs until the end of the test and waits until
// they are built.
func (h *harness) holdProxyless() {
	h.t.Helper()
	h.hold("the proxyless outputs", h.ctrl.AcquireProxyless)
}

// holdPortRoutes holds every port's route configuration for the rest of the test, once built.
func (h *harness) holdPortRoutes() {
	h.t.Helper()
	h.hold("the ports' route configurations", h.ctrl.AcquirePortRoutes)
}

// hold acquires a view for the rest of the test and waits until it is built.
func (h *harness) hold(what string, acquire func() (func(), <-chan struct{})) {
	h.t.Helper()
	release, built := acquire()
	h.t.Cleanup(release)
	select {
	case <-built:
	case <-time.After(10 * time.Second):
		h.t.Fatalf("%s were not built within 10s", what)
	}
}

func newStore() *store.Store {
	return store.New(store.Options{Validate: kinds.ValidateResource})
}

// apply writes Istio resources as the test producer and waits until they are translated.
func (h *harness) apply(updates ...store.Update) store.Result {
	h.t.Helper()
	res, err := h.st.Apply(testOwner, updates...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.wait(res.Revision)
	return res
}

func (h *harness) wait(rev uint64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ctrl.WaitFor(ctx, rev); err != nil {
		h.t.Fatal(err)
	}
}

func upserts(in map[string][]*mcpapi.Resource) []store.Update {
	var out []store.Update
	for _, coll := range sortedKeys(in) {
		out = append(out, store.Update{Collection: coll, Resources: in[coll]})
	}
	return out
}

// served returns the derived resources the store serves.
func served(st *store.Store) []Resource {
	v := st.View()
	var out []Resource
	for _, typ := range outputTypes {
		_, es := v.Snapshot(typ)
		for _, e := range es {
			out = append(out, Resource{TypeURL: typ, Name: e.Name, Encoded: e.Encoded()})
		}
	}
	return out
}

func testLogger(t *testing.T) *slog.Logger { return testlog.New(t) }

func TestControllerFirstRunWritesTheFullBuild(t *testing.T) {
	st := newStore()
	in := loadInputs(t, "../../examples/destinationrules.yaml", "../../examples/gateway.yaml",
		"../../examples/serviceentries.yaml", "../../examples/virtualservices.yaml", "../../examples/workloadentries.yaml")
	if _, err := st.Apply(testOwner, upserts(in)...); err != nil {
		t.Fatal(err)
	}
	h := startController(t, st)
	// No proxyless client is connected: the controller builds no clusters of theirs; no
	// sidecar asks for a port's route configuration: none is built.
	want, _ := Build(in, TranslatorOptions{LazyProxyless: true, LazyPortRoutes: true})
	if d := diffOutputs(want, served(h.st)); d != "" {
		t.Fatalf("the store does not serve the full build:\n%s", d)
	}
	select {
	case <-h.ctrl.Ready():
	default:
		t.Error("Ready is not closed after the first build")
	}
	h.holdPortRoutes()
	want, _ = Build(in, TranslatorOptions{LazyProxyless: true})
	if d := diffOutputs(want, served(h.st)); d != "" {
		t.Fatalf("with the ports' route configurations held, the store does not serve the full build:\n%s", d)
	}
}

// The controller builds a port's route configuration while a client holds it, and only that
// port's (saying when it is written); it keeps it up to date meanwhile; and drops it after
// the grace once released. The listeners that name it are there throughout.
func TestControllerBuildsAPortRouteWhileItIsHeld(t *testing.T) {
	st := newStore()
	ctrl := New(Options{Store: st, Logger: testLogger(t), GatewayClassGrace: 50 * time.Millisecond})
	h := runController(t, st, ctrl)
	h.apply(upserts(decodeYAML(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1")+"---\n"+
		serviceEntryYAML("two", "two.test.svc.cluster.local", 9090, "10.0.0.2")))...)
	routes := func() []string {
		_, es := st.View().Snapshot(RouteType)
		var names []string
		for _, e := range es {
			names = append(names, e.Name)
		}
		return names
	}
	if got := routes(); len(got) != 0 {
		t.Fatalf("route configurations %v before any client asked; want none", got)
	}
	for _, l := range []string{"0.0.0.0_8080", "0.0.0.0_9090"} {
		if st.View().Get(ListenerType, l) == nil {
			t.Fatalf("no listener %s while its route configuration is not built", l)
		}
	}
	release, built := ctrl.AcquirePortRoute(8080)
	select {
	case <-built:
	case <-time.After(5 * time.Second):
		t.Fatal("the port's route configuration was not built within 5s")
	}
	if got := routes(); !slices.Equal(got, []string{"8080"}) {
		t.Fatalf("route configurations %v once 8080 is held; want [8080]", got)
	}
	domainsOf := func() []string {
		rc := &routepb.RouteConfiguration{}
		if err := proto.Unmarshal(bodyValue(st.View().Get(RouteType, "8080")), rc); err != nil {
			t.Fatal(err)
		}
		var hosts []string
		for _, vh := range rc.GetVirtualHosts() {
			hosts = append(hosts, vh.GetName())
		}
		return hosts
	}
	h.apply(upserts(decodeYAML(t, serviceEntryYAML("three", "three.test.svc.cluster.local", 8080, "10.0.0.3")))...)
	if got, want := domainsOf(), []string{"one.test.svc.cluster.local:8080", "three.test.svc.cluster.local:8080"}; !slices.Equal(got, want) {
		t.Errorf("held 8080's virtual hosts after a host joined: %v, want %v", got, want)
	}
	release()
	deadline := time.Now().Add(5 * time.Second)
	for len(routes()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("route configurations %v 5s after the last hold was released; want none", routes())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.View().Get(ListenerType, "0.0.0.0_8080") == nil {
		t.Error("the listener went with its route configuration")
	}
}

func TestControllerFirstRunReplacesStaleOutputs(t *testing.T) {
	st := newStore()
	stale := &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "outbound|1||gone.example.com"}, Body: mustAny(t, ClusterType)}
	if _, err := st.Apply(Owner, store.Update{Collection: ClusterType, Resources: []*mcpapi.Resource{stale}}); err != nil {
		t.Fatal(err)
	}
	h := startController(t, st)
	if e := h.st.View().Get(ClusterType, "outbound|1||gone.example.com"); e != nil {
		t.Errorf("a cluster the owner held before the first build is still served")
	}
}

func mustAny(t *testing.T, typeURL string) *anypb.Any {
	t.Helper()
	outs, _ := Build(decodeYAML(t, serviceEntryYAML("gone", "gone.example.com", 1)), TranslatorOptions{})
	for _, r := range outs {
		if r.TypeURL == typeURL {
			return r.Body()
		}
	}
	t.Fatalf("no %s", typeURL)
	return nil
}

func serviceEntryYAML(name, host string, port int, addresses ...string) string {
	var eps strings.Builder
	for _, a := range addresses {
		fmt.Fprintf(&eps, "  - address: %s\n", a)
	}
	text := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %s
  namespace: test
spec:
  hosts: [%s]
  ports:
  - number: %d
    name: grpc
    protocol: GRPC
  resolution: STATIC
`, name, host, port)
	if eps.Len() > 0 {
		text += "  endpoints:\n" + eps.String()
	}
	return text
}

// TestControllerWritesEachChangeInOneApply checks that one input change reaches the four
// derived collections in a single store write: every entry it changed carries one revision.
func TestControllerWritesEachChangeInOneApply(t *testing.T) {
	h := startController(t, nil)
	release, built := h.ctrl.AcquireProxyless() // so that every derived collection is written
	defer release()
	<-built
	h.holdPortRoutes()
	h.hold("port 8080's virtual hosts", func() (func(), <-chan struct{}) { return h.ctrl.AcquirePortVirtualHosts(8080) })
	before := h.st.View().Revision()
	h.apply(upserts(decodeYAML(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1")))...)
	v := h.st.View()
	revs := map[uint64]bool{}
	for _, typ := range outputTypes {
		ch, err := v.ChangesSince(typ, before)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch.Upserts) == 0 {
			t.Errorf("nothing written to %s", typ)
		}
		for _, e := range ch.Upserts {
			revs[e.Revision] = true
		}
	}
	if len(revs) != 1 {
		t.Errorf("the derived resources were written at revisions %v; want one write", revs)
	}
	// A cluster and its gRPC form, its load assignment, the API and outbound listeners, the
	// host's and the port's route configurations, the port's for VHDS clients and its virtual
	// host.
	if got := h.ctrl.Stats().LastWritten; got != 9 {
		t.Errorf("the write changed %d entries; want 9", got)
	}
}

// TestControllerRemovesOutputsOfRemovedInputs checks that a removed ServiceEntry's outputs
// are removed from the store (tombstones), not left behind.
func TestControllerRemovesOutputsOfRemovedInputs(t *testing.T) {
	h := startController(t, nil)
	h.apply(upserts(decodeYAML(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1")))...)
	if len(served(h.st)) == 0 {
		t.Fatal("nothing served for the ServiceEntry")
	}
	h.apply(store.Update{Collection: collectionOf(kindServiceEntry), Removed: []string{"test/one"}})
	var left []Resource
	for _, r := range served(h.st) {
		if !isPlumbing(r.Name) { // istiod's sidecar plumbing is served whatever the inputs
			left = append(left, r)
		}
	}
	if len(left) != 0 {
		t.Errorf("still served after the ServiceEntry was removed: %v", names(left))
	}
}

func names(rs []Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

// TestControllerReportsFaultsUntilFixed checks the faults accessor: a VirtualService routing
// to an unknown host is reported, the rest is served, and the fault goes once the host exists.
func TestControllerReportsFaultsUntilFixed(t *testing.T) {
	h := startController(t, nil)
	in := decodeYAML(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1")+`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: one
  namespace: test
spec:
  hosts: [one.test.svc.cluster.local]
  http:
  - route:
    - destination: {host: one.test.svc.cluster.local}
      weight: 50
    - destination: {host: two.test.svc.cluster.local}
      weight: 50
`)
	h.holdProxyless() // so that the host's own route configuration is built
	h.apply(upserts(in)...)
	faults := h.ctrl.Faults()
	if len(faults) != 1 || faults[0].Name != "test/one" || !strings.Contains(faults[0].Message, "two.test.svc.cluster.local") {
		t.Fatalf("faults %v; want one naming the unknown host", faults)
	}
	if h.st.View().Get(RouteType, "outbound|8080||one.test.svc.cluster.local") == nil {
		t.Fatal("the route of the faulty VirtualService's host is not served")
	}
	h.apply(upserts(decodeYAML(t, serviceEntryYAML("two", "two.test.svc.cluster.local", 8080, "10.0.0.2")))...)
	if faults := h.ctrl.Faults(); len(faults) != 0 {
		t.Errorf("faults %v after the host was defined; want none", faults)
	}
}

// TestControllerSyncedWaitsForTheTranslation checks that Synced(rev) is closed only once the
// outputs of revision rev are in the store, and at once for a revision already translated.
func TestControllerSyncedWaitsForTheTranslation(t *testing.T) {
	h := startController(t, nil)
	res, err := h.st.Apply(testOwner, upserts(decodeYAML(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1")))...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.ctrl.Synced(res.Revision):
	case <-time.After(10 * time.Second):
		t.Fatal("revision not translated within 10s")
	}
	if h.st.View().Get(ListenerType, OutboundListenerName(8080)) == nil {
		t.Fatal("Synced closed before the listener was written")
	}
	select {
	case <-h.ctrl.Synced(res.Revision):
	default:
		t.Fatal("Synced of a translated revision is not closed at once")
	}
	// A write to a collection the translation does not read is covered at once too.
	res, err = h.st.Apply(testOwner, store.Update{Collection: "opaque/things", Resources: []*mcpapi.Resource{
		{Metadata: &mcpapi.Metadata{Name: "x"}, Body: &anypb.Any{TypeUrl: "type.googleapis.com/x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.ctrl.Synced(res.Revision):
	case <-time.After(10 * time.Second):
		t.Fatal("a revision that changed no input is never reported translated")
	}
}

// TestControllerRecoversFromCompaction runs syncs by hand: a removal whose tombstone was
// compacted away before the controller read it is still seen, by a full read of the collection.
func TestControllerRecoversFromCompaction(t *testing.T) {
	st := newStore()
	c := New(Options{Store: st, Logger: testLogger(t)})
	in := decodeYAML(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1")+"---\n"+
		serviceEntryYAML("two", "two.test.svc.cluster.local", 8080, "10.0.0.2"))
	if _, err := st.Apply(testOwner, upserts(in)...); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(testOwner, store.Update{Collection: collectionOf(kindServiceEntry), Removed: []string{"test/one"}}); err != nil {
		t.Fatal(err)
	}
	if n := st.Compact(time.Now().Add(time.Hour)); n == 0 {
		t.Fatal("nothing compacted")
	}
	if err := c.sync(); err != nil {
		t.Fatal(err)
	}
	for _, r := range served(st) {
		if strings.Contains(r.Name, "one.test") {
			t.Errorf("%s is still served after its ServiceEntry was removed and compacted", r.Name)
		}
	}
	if st.View().Get(ClusterType, "outbound|8080||two.test.svc.cluster.local") == nil {
		t.Error("the remaining ServiceEntry's cluster is gone")
	}
}

func TestControllerRunTwiceIsAnError(t *testing.T) {
	h := startController(t, nil)
	if err := h.ctrl.Run(context.Background()); err == nil {
		t.Error("a second Run returned no error")
	}
}

// TestOneVirtualServiceChangeTouchesOnlyItsHosts changes one VirtualService of a mesh of
// 1,000 services and counts what the store wrote: the host's route configuration and its
// port's, nothing else.
func TestOneVirtualServiceChangeTouchesOnlyItsHosts(t *testing.T) {
	st := newStore()
	in := generatedMesh(1000)
	if _, err := st.Apply(testOwner, upserts(in)...); err != nil {
		t.Fatal(err)
	}
	h := startController(t, st)
	h.holdProxyless() // so that the host's own route configuration is built and counted too
	h.holdPortRoutes()
	if n := len(served(st)); n < 8000 {
		t.Fatalf("only %d outputs for 1,000 services", n)
	}
	before := st.View().Revision()
	vs := changedVirtualService(42, 1)
	h.apply(store.Update{Collection: collectionOf(kindVirtualService), Resources: []*mcpapi.Resource{vs}})

	v := st.View()
	var touched []string
	for _, typ := range outputTypes {
		if v.Collection(typ).Revision <= before {
			continue // not written since
		}
		ch, err := v.ChangesSince(typ, before)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range append(ch.Upserts, ch.Deleted...) {
			touched = append(touched, e.Name)
		}
	}
	slices.Sort(touched)
	host := generatedHost(42)
	want := []string{"8080", HostRouteName(host, 8080)}
	if !slices.Equal(touched, want) {
		t.Errorf("the store changed %v; want only %v", touched, want)
	}
	stats := h.ctrl.Stats()
	if stats.LastWritten != 2 || stats.Last.Hosts != 1 || stats.Last.Ports != 1 {
		t.Errorf("stats %+v; want 1 host and 1 port rebuilt, 2 entries written", stats)
	}
}

// generatedMesh is a mesh of n services on one gRPC port, each with a ServiceEntry (two
// endpoints, versions v1 and v2), a DestinationRule with both subsets, and a VirtualService
// splitting traffic between them.
func generatedMesh(n int) map[string][]*mcpapi.Resource {
	out := map[string][]*mcpapi.Resource{}
	for i := range n {
		host := generatedHost(i)
		name := fmt.Sprintf("bench/svc-%d", i)
		out[collectionOf(kindServiceEntry)] = append(out[collectionOf(kindServiceEntry)], resource(kindServiceEntry, name, &networking.ServiceEntry{
			Hosts:      []string{host},
			Ports:      []*networking.ServicePort{{Number: 8080, Name: "grpc", Protocol: "GRPC"}},
			Resolution: networking.ServiceEntry_STATIC,
			Endpoints: []*networking.WorkloadEntry{
				{Address: fmt.Sprintf("10.%d.%d.1", i/250, i%250), Labels: map[string]string{"version": "v1"}, Locality: "r1/z1"},
				{Address: fmt.Sprintf("10.%d.%d.2", i/250, i%250), Labels: map[string]string{"version": "v2"}, Locality: "r1/z2"},
			},
		}))
		out[collectionOf(kindDestinationRule)] = append(out[collectionOf(kindDestinationRule)], resource(kindDestinationRule, name, &networking.DestinationRule{
			Host: host,
			Subsets: []*networking.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}},
				{Name: "v2", Labels: map[string]string{"version": "v2"}},
			},
		}))
		out[collectionOf(kindVirtualService)] = append(out[collectionOf(kindVirtualService)], resource(kindVirtualService, name, splitVirtualService(host, 90)))
	}
	return out
}

func generatedHost(i int) string { return fmt.Sprintf("svc-%d.bench.svc.cluster.local", i) }

func splitVirtualService(host string, stable int32) *networking.VirtualService {
	return &networking.VirtualService{
		Hosts: []string{host},
		Http: []*networking.HTTPRoute{{
			Route: []*networking.HTTPRouteDestination{
				{Destination: &networking.Destination{Host: host, Subset: "v1"}, Weight: stable},
				{Destination: &networking.Destination{Host: host, Subset: "v2"}, Weight: 100 - stable},
			},
		}},
	}
}

// changedVirtualService is service i's VirtualService with another split, at a new version.
func changedVirtualService(i, version int) *mcpapi.Resource {
	r := resource(kindVirtualService, fmt.Sprintf("bench/svc-%d", i), splitVirtualService(generatedHost(i), int32(10+version%80)))
	r.Metadata.Version = fmt.Sprint("changed-", version)
	return r
}

func resource(_, name string, spec proto.Message) *mcpapi.Resource {
	body, err := anypb.New(spec)
	if err != nil {
		panic(err) // an Istio message always marshals
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// TestUnbuiltPortRoutesLeaveEverythingElseAsItIs: with the ports' route configurations not
// built (LazyPortRoutes), everything else each namespace's proxies read (through its
// overlays: a namespace that sees every host, ones that some hosts are hidden from, the golden
// inputs' own) is, byte for byte, what the full build serves them; and once they are built
// (SetPortRoutes, then one port alone with SetPortRoute), what they read is the full build's
// again, as if the route configurations had been built from the start.
func TestUnbuiltPortRoutesLeaveEverythingElseAsItIs(t *testing.T) {
	exported := decodeYAML(t, exportYAML) // ports some namespaces see no host of
	everything := allTestdata(t).inputs()
	for coll, rs := range exported {
		everything[coll] = append(everything[coll], rs...)
	}
	for name, in := range map[string]map[string][]*mcpapi.Resource{"exportTo": exported, "golden and exportTo": everything} {
		t.Run(name, func(t *testing.T) { checkUnbuiltPortRoutes(t, in) })
	}
}

func checkUnbuiltPortRoutes(t *testing.T, in map[string][]*mcpapi.Resource) {
	scopes := []string{"foo", "bar", "baz", "bookinfo", "default"}
	full, _ := Build(in, TranslatorOptions{Scopes: scopes})
	lazy := NewTranslator(TranslatorOptions{Scopes: scopes, LazyPortRoutes: true})
	for _, coll := range sortedKeys(in) {
		feed(lazy, coll, in[coll], nil)
	}
	portRoute := func(key string) bool {
		typ, name, _ := strings.Cut(key, " ")
		_, err := strconv.ParseUint(name, 10, 16)
		return typ == RouteType && err == nil
	}
	compare := func(what string, keep func(key string) bool) {
		t.Helper()
		lazy.Translate()
		for _, ns := range append([]string{""}, scopes...) {
			want, got := servedIn(t, full, ns), servedIn(t, lazy.Outputs(), ns)
			maps.DeleteFunc(want, func(k, _ string) bool { return !keep(k) })
			if !maps.Equal(got, want) {
				var d []string
				for k := range want {
					if got[k] != want[k] {
						d = append(d, "differs or missing: "+k)
					}
				}
				for k := range got {
					if _, ok := want[k]; !ok {
						d = append(d, "extra: "+k)
					}
				}
				slices.Sort(d)
				t.Fatalf("%s, namespace %q reads otherwise than from the full build:\n%s", what, ns, strings.Join(d, "\n"))
			}
		}
	}
	compare("without the ports' route configurations", func(k string) bool { return !portRoute(k) })
	if want := servedIn(t, full, "foo"); !slices.ContainsFunc(slices.Collect(maps.Keys(want)), portRoute) {
		t.Fatal("the full build has no port route configurations to leave out")
	}
	lazy.SetPortRoutes(true)
	compare("with every port's route configuration", func(string) bool { return true })
	lazy.SetPortRoutes(false)
	lazy.SetPortRoute(8000, true)
	compare("with port 8000's route configuration", func(k string) bool { return !portRoute(k) || k == RouteType+" 8000" })
}

// servedIn is what a namespace's proxies read of each derived collection (ns "": the
// mesh-wide collections), by "TYPE NAME", its body's bytes.
func servedIn(t *testing.T, outs []Resource, ns string) map[string]string {
	t.Helper()
	st := store.New(store.Options{})
	byColl := map[string][]store.Encoded{}
	for _, r := range outs {
		byColl[r.TypeURL] = append(byColl[r.TypeURL], r.Encoded)
	}
	if _, err := st.ReplaceOwnerEncoded(Owner, byColl); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, coll := range OutputTypes() {
		read := coll
		if ns != "" {
			read = store.Layered(coll, translate.ScopeCollection(ns, coll))
		}
		_, es := st.View().Snapshot(read)
		for _, e := range es {
			_, body := e.Body()
			got[coll+" "+e.Name] = string(body)
		}
	}
	return got
}
