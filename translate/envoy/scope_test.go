package envoy

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// reviews (bookinfo, routed by a VirtualService) and ratings (shop, default route) share port
// 9080.
const scopeYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  addresses: [10.10.0.2]
  location: MESH_INTERNAL
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.2}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.svc.cluster.local]
  addresses: [10.10.0.3]
  location: MESH_INTERNAL
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.3}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  http:
  - timeout: 3s
    route: [{destination: {host: reviews.bookinfo.svc.cluster.local}}]
`

// routesIn are the route configurations of one collection, by name, each validated.
func routesIn(t *testing.T, outs []Resource, collection string) map[string]*routepb.RouteConfiguration {
	t.Helper()
	got := map[string]*routepb.RouteConfiguration{}
	for _, r := range outs {
		if typeURL, _ := r.Encoded.Body(); r.TypeURL != collection || typeURL == store.HiddenTypeURL {
			continue
		}
		if err := validateDeep(r.Body()); err != nil {
			t.Errorf("%s %q fails validation: %v", collection, r.Name, err)
		}
		rc := &routepb.RouteConfiguration{}
		mustUnmarshal(t, r, rc)
		if rc.GetName() != r.Name {
			t.Errorf("%s %q holds route configuration %q", collection, r.Name, rc.GetName())
		}
		got[r.Name] = rc
	}
	return got
}

func domainsOf(t *testing.T, rc *routepb.RouteConfiguration, vhost string) []string {
	t.Helper()
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == vhost {
			return vh.GetDomains()
		}
	}
	t.Fatalf("route configuration %s has no virtual host %s", rc.GetName(), vhost)
	return nil
}

// TestScopeAddsTheBareNameForItsOwnNamespace: istiod gives a proxy of namespace bookinfo the
// domain "reviews" for reviews.bookinfo.svc.cluster.local, and a proxy of any other namespace
// none. The mesh-wide route configurations have the names every namespace may use; bookinfo's
// overlay has the port's route configuration and reviews' own (proxyless gRPC) with the bare
// name added in istiod's order, and nothing else: ratings, and the other namespaces, are read
// from the mesh-wide ones.
func TestScopeAddsTheBareNameForItsOwnNamespace(t *testing.T) {
	outs, faults := Build(decodeYAML(t, scopeYAML), TranslatorOptions{Scopes: []string{"bookinfo"}})
	if len(faults) > 0 {
		t.Fatalf("faults: %v", faults)
	}
	mesh := routesIn(t, outs, RouteType)
	overlay := routesIn(t, outs, translate.ScopeCollection("bookinfo", RouteType))
	if got := slices.Sorted(maps.Keys(overlay)); !slices.Equal(got, []string{"9080", "outbound|9080||reviews.bookinfo.svc.cluster.local"}) {
		t.Fatalf("bookinfo's overlay holds %v; want the port's and reviews' route configurations", got)
	}
	const reviews, ratings = "reviews.bookinfo.svc.cluster.local:9080", "ratings.shop.svc.cluster.local:9080"
	for _, c := range []struct {
		what  string
		rc    *routepb.RouteConfiguration
		vhost string
		want  []string
	}{
		{"mesh-wide 9080, reviews", mesh["9080"], reviews,
			[]string{"reviews.bookinfo.svc.cluster.local", "reviews.bookinfo.svc.cluster.local.", "reviews.bookinfo", "reviews.bookinfo.svc", "10.10.0.2"}},
		{"bookinfo's 9080, reviews", overlay["9080"], reviews,
			[]string{"reviews.bookinfo.svc.cluster.local", "reviews.bookinfo.svc.cluster.local.", "reviews", "reviews.bookinfo.svc", "reviews.bookinfo", "10.10.0.2"}},
		{"bookinfo's 9080, ratings", overlay["9080"], ratings,
			[]string{"ratings.shop.svc.cluster.local", "ratings.shop.svc.cluster.local.", "ratings.shop", "ratings.shop.svc", "10.10.0.3"}},
		{"bookinfo's reviews for gRPC", overlay["outbound|9080||reviews.bookinfo.svc.cluster.local"], reviews,
			[]string{"reviews.bookinfo.svc.cluster.local", "reviews.bookinfo.svc.cluster.local:9080", "reviews.bookinfo.svc.cluster.local.", "reviews.bookinfo.svc.cluster.local.:9080",
				"reviews", "reviews:9080", "reviews.bookinfo.svc", "reviews.bookinfo.svc:9080", "reviews.bookinfo", "reviews.bookinfo:9080", "10.10.0.2", "10.10.0.2:9080"}},
	} {
		if got := domainsOf(t, c.rc, c.vhost); !slices.Equal(got, c.want) {
			t.Errorf("%s: domains\n%q, want\n%q", c.what, got, c.want)
		}
	}
	// Everything but reviews' domains is the mesh-wide configuration's: routes (the
	// VirtualService's timeout), the other host, the settings.
	for name, rc := range overlay {
		scoped := proto.Clone(rc).(*routepb.RouteConfiguration)
		for _, vh := range scoped.GetVirtualHosts() {
			if vh.GetName() == reviews {
				vh.Domains = domainsOf(t, mesh[name], reviews)
			}
		}
		if !proto.Equal(scoped, mesh[name]) {
			t.Errorf("%s in bookinfo's overlay differs from the mesh-wide one beyond reviews' domains:\n%v\nvs\n%v", name, scoped, mesh[name])
		}
	}
	if got := domainsOf(t, mesh["outbound|9080||reviews.bookinfo.svc.cluster.local"], reviews); slices.Contains(got, "reviews") {
		t.Errorf("the mesh-wide gRPC route configuration of reviews has the bare name: %q", got)
	}
}

// TestScopeComesAndGoesWithItsProxies: a scope set on a running translator adds its overlay's
// outputs in the next Translate, a change to a host of the namespace changes the overlay's
// too, and removing the scope removes them; a scope of a namespace with no host adds nothing.
func TestScopeComesAndGoesWithItsProxies(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	in := decodeYAML(t, scopeYAML)
	for _, coll := range sortedKeys(in) {
		feed(tr, coll, in[coll], nil)
	}
	tr.Translate()
	overlay := translate.ScopeCollection("bookinfo", RouteType)

	tr.SetScope("default") // no host of its own: nothing differs
	if d, _ := tr.Translate(); !d.Empty() {
		t.Fatalf("a scope with no host of its namespace changed %v", d.Resources())
	}
	tr.SetScope("bookinfo")
	d, _ := tr.Translate()
	if got := encodedNames(d.Upserts[overlay]); !slices.Equal(got, []string{"9080", "outbound|9080||reviews.bookinfo.svc.cluster.local"}) {
		t.Fatalf("setting bookinfo's scope upserted %v in its overlay, want its two route configurations", got)
	}
	if len(d.Upserts[RouteType])+len(d.Removed[RouteType]) > 0 {
		t.Fatalf("setting a scope changed the mesh-wide route configurations: %v %v", encodedNames(d.Upserts[RouteType]), d.Removed[RouteType])
	}

	vs := decodeYAML(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  http:
  - timeout: 9s
    route: [{destination: {host: reviews.bookinfo.svc.cluster.local}}]
`)
	for coll, rs := range vs {
		tr.Update(coll, []Input{InputOf(rs[0])}, nil)
	}
	d, _ = tr.Translate()
	if got := encodedNames(d.Upserts[overlay]); !slices.Contains(got, "9080") {
		t.Fatalf("a VirtualService change upserted %v in bookinfo's overlay; want its port's route configuration", got)
	}
	if got := encodedNames(d.Upserts[RouteType]); !slices.Contains(got, "9080") {
		t.Fatalf("a VirtualService change upserted %v mesh-wide; want the port's route configuration", got)
	}

	tr.RemoveScope("bookinfo")
	d, _ = tr.Translate()
	if got := d.Removed[overlay]; !slices.Equal(got, []string{"9080", "outbound|9080||reviews.bookinfo.svc.cluster.local"}) {
		t.Fatalf("removing bookinfo's scope removed %v from its overlay, want both route configurations", got)
	}
	for _, r := range tr.Outputs() {
		if r.TypeURL == overlay {
			t.Fatalf("after its scope was removed, the overlay still holds %s", r.Name)
		}
	}
}

func encodedNames(es []store.Encoded) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name()
	}
	slices.Sort(out)
	return out
}

// seen is what a namespace's proxies read of each derived collection (servedIn), by
// collection, the names sorted.
func seen(t *testing.T, outs []Resource, ns string) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for key := range servedIn(t, outs, ns) {
		coll, name, _ := strings.Cut(key, " ")
		got[coll] = append(got[coll], name)
	}
	for _, names := range got {
		slices.Sort(names)
	}
	return got
}

const exportYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: private, namespace: foo}
spec:
  hosts: [private.foo.svc.cluster.local]
  addresses: [10.10.3.1]
  exportTo: ["."]
  ports: [{number: 8000, name: http, protocol: HTTP}, {number: 7000, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.1.11.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: public, namespace: foo}
spec:
  hosts: [public.foo.svc.cluster.local]
  addresses: [10.10.3.2]
  ports: [{number: 8000, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.11.2}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: only, namespace: foo}
spec:
  hosts: [only.foo.svc.cluster.local]
  addresses: [10.10.3.3]
  exportTo: [foo, baz]
  ports: [{number: 9000, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.11.3}]
`

// TestExportToHidesAHostFromTheNamespacesItLeavesOut: a namespace's proxies see, of a host
// exported to other namespaces only, nothing: no cluster, load assignment, API listener,
// route configuration, TCP listener, and no virtual host in the port's route configuration;
// a port none of whose hosts they see has no listener. Its own namespace, and those listed,
// see it; the mesh-wide collections (clients of no namespace) hold everything.
func TestExportToHidesAHostFromTheNamespacesItLeavesOut(t *testing.T) {
	outs, faults := Build(decodeYAML(t, exportYAML), TranslatorOptions{Scopes: []string{"foo", "bar", "baz"}})
	if len(faults) > 0 {
		t.Fatalf("faults: %v", faults)
	}
	has := func(got map[string][]string, coll, name string) bool { return slices.Contains(got[coll], name) }
	const private, only = "outbound|8000||private.foo.svc.cluster.local", "outbound|9000||only.foo.svc.cluster.local"
	for _, c := range []struct {
		ns                string
		private, only     bool
		port9000, tcp7000 bool
	}{
		{"", true, true, true, true},
		{"foo", true, true, true, true},
		{"bar", false, false, false, false},
		{"baz", false, true, true, false},
	} {
		got := seen(t, outs, c.ns)
		for _, check := range []struct {
			what       string
			coll, name string
			want       bool
		}{
			{"private's cluster", ClusterType, private, c.private},
			{"private's gRPC cluster", GRPCClusterType, private, c.private},
			{"private's load assignment", EndpointType, private, c.private},
			{"private's route configuration", RouteType, private, c.private},
			{"private's API listener", ListenerType, "private.foo.svc.cluster.local:8000", c.private},
			{"private's TCP listener", ListenerType, "10.10.3.1_7000", c.tcp7000},
			{"only's cluster", ClusterType, only, c.only},
			{"port 9000's listener", ListenerType, "0.0.0.0_9000", c.port9000},
			{"port 9000's route configuration", RouteType, "9000", c.port9000},
			{"public's cluster", ClusterType, "outbound|8000||public.foo.svc.cluster.local", true},
			{"port 8000's listener", ListenerType, "0.0.0.0_8000", true},
		} {
			if has(got, check.coll, check.name) != check.want {
				t.Errorf("namespace %q: %s (%s) seen %v, want %v", c.ns, check.what, check.name, !check.want, check.want)
			}
		}
	}
	// bar's port 8000 gathers public alone; foo's both, with their bare names.
	bar := routesIn(t, outs, translate.ScopeCollection("bar", RouteType))["8000"]
	if bar == nil || len(bar.GetVirtualHosts()) != 1 || bar.GetVirtualHosts()[0].GetName() != "public.foo.svc.cluster.local:8000" {
		t.Fatalf("bar's 8000: %v, want public's virtual host alone", bar.GetVirtualHosts())
	}
	foo := routesIn(t, outs, translate.ScopeCollection("foo", RouteType))["8000"]
	if foo == nil || len(foo.GetVirtualHosts()) != 2 || !slices.Contains(foo.GetVirtualHosts()[0].GetDomains(), "private") {
		t.Fatalf("foo's 8000: %v, want both virtual hosts, with bare names", foo.GetVirtualHosts())
	}
}

const sidecarYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  addresses: [10.10.0.2]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.2}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: httpbin, namespace: default}
spec:
  hosts: [httpbin.default.svc.cluster.local]
  addresses: [10.10.0.9]
  ports: [{number: 8000, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.9}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: external, namespace: default}
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
`

// TestSidecarEgressHostsNarrowItsNamespace: a namespace's Sidecar imports the hosts its egress
// hosts name ("./*": its own namespace's; "*/api.example.com" one host of any namespace), and
// its proxies see nothing else; a namespace without a Sidecar sees everything, until the root
// namespace's Sidecar narrows it too; and removing the Sidecars shows everything again.
func TestSidecarEgressHostsNarrowItsNamespace(t *testing.T) {
	in := decodeYAML(t, sidecarYAML+`---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: bookinfo}
spec:
  egress: [{hosts: ["./*", "*/api.example.com"]}]
`)
	outs, faults := Build(in, TranslatorOptions{Scopes: []string{"bookinfo", "default"}})
	if len(faults) > 0 {
		t.Fatalf("faults: %v", faults)
	}
	bookinfo, def := seen(t, outs, "bookinfo"), seen(t, outs, "default")
	want := []string{"BlackHoleCluster", "InboundPassthroughCluster", "PassthroughCluster",
		"outbound|443||api.example.com", "outbound|9080||reviews.bookinfo.svc.cluster.local"}
	if got := bookinfo[ClusterType]; !slices.Equal(got, want) {
		t.Errorf("bookinfo's clusters %v, want %v", got, want)
	}
	if slices.Contains(bookinfo[ListenerType], "0.0.0.0_8000") || !slices.Contains(def[ListenerType], "0.0.0.0_8000") {
		t.Errorf("port 8000's listener: bookinfo sees it %v, default %v; want false, true",
			slices.Contains(bookinfo[ListenerType], "0.0.0.0_8000"), slices.Contains(def[ListenerType], "0.0.0.0_8000"))
	}
	if !slices.Contains(def[ClusterType], "outbound|8000||httpbin.default.svc.cluster.local") {
		t.Errorf("default, without a Sidecar, does not see httpbin: %v", def[ClusterType])
	}

	tr := NewTranslator(TranslatorOptions{Scopes: []string{"bookinfo", "default"}})
	for _, coll := range sortedKeys(in) {
		feed(tr, coll, in[coll], nil)
	}
	tr.Translate()
	root := decodeYAML(t, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: istio-system}
spec:
  egress: [{hosts: ["./*"]}]
`)
	for coll, rs := range root {
		feed(tr, coll, rs, nil)
	}
	tr.Translate()
	if got := seen(t, tr.Outputs(), "default")[ClusterType]; slices.Contains(got, "outbound|8000||httpbin.default.svc.cluster.local") == false ||
		slices.Contains(got, "outbound|9080||reviews.bookinfo.svc.cluster.local") {
		t.Errorf("with the root namespace's Sidecar (./*), default sees %v; want its own httpbin and not reviews", got)
	}
	feed(tr, collectionOf(kindSidecar), nil, []string{"bookinfo/default", "istio-system/default"})
	tr.Translate()
	for _, ns := range []string{"bookinfo", "default"} {
		if got, all := seen(t, tr.Outputs(), ns)[ClusterType], seen(t, tr.Outputs(), "")[ClusterType]; !slices.Equal(got, all) {
			t.Errorf("without Sidecars, %s sees %v; want every cluster, %v", ns, got, all)
		}
	}
}

// The controller builds a namespace's scope while a proxy of it holds it (saying when it is
// written), drops it after the grace, and refuses a scope over MaxScopes (its proxies read
// the mesh-wide view).
func TestControllerBuildsAScopeWhileItIsHeld(t *testing.T) {
	st := newStore()
	ctrl := New(Options{Store: st, Logger: testLogger(t), GatewayClassGrace: 50 * time.Millisecond, MaxScopes: 1})
	h := runController(t, st, ctrl)
	h.apply(upserts(decodeYAML(t, scopeYAML))...)
	h.holdPortRoutes() // a sidecar of the namespace asks for its ports' route configurations
	overlay := translate.ScopeCollection("bookinfo", RouteType)
	present := func() bool { return st.View().Get(overlay, "9080") != nil }
	release, built, ok := ctrl.AcquireScope("bookinfo")
	if !ok {
		t.Fatal("the first scope was refused")
	}
	select {
	case <-built:
	case <-time.After(5 * time.Second):
		t.Fatal("the scope was not built within 5s")
	}
	if !present() {
		t.Fatal("the scope is said built before its outputs are written")
	}
	rc := &routepb.RouteConfiguration{}
	if e := st.View().Get(store.Layered(RouteType, translate.ScopeCollection("bookinfo", RouteType)), "9080"); e == nil {
		t.Fatal("bookinfo's view has no 9080")
	} else if err := proto.Unmarshal(bodyValue(e), rc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(domainsOf(t, rc, "reviews.bookinfo.svc.cluster.local:9080"), "reviews") {
		t.Fatalf("bookinfo's view of 9080 lacks the bare name: %v", rc.GetVirtualHosts())
	}
	if _, built, ok := ctrl.AcquireScope("shop"); ok || built != nil || ctrl.ScopesRefused() != 1 {
		t.Fatalf("a second scope over MaxScopes 1: acquired %v, refused %d; want refused, 1", ok, ctrl.ScopesRefused())
	}
	release()
	waitUntil(t, "bookinfo's overlay is dropped after the grace", func() bool { return !present() })
}

func bodyValue(e *store.Entry) []byte {
	_, v := e.Body()
	return v
}

// TestVirtualServiceExportToRoutesOnlyTheNamespacesItTakes: a VirtualService exported to its
// own namespace (".") routes its host there; in every other namespace the host has its
// default route, in the port's route configuration and in its own (proxyless gRPC). The
// mesh-wide configuration keeps the VirtualService's routes.
func TestVirtualServiceExportToRoutesOnlyTheNamespacesItTakes(t *testing.T) {
	outs, faults := Build(decodeYAML(t, vsExportYAML), TranslatorOptions{Scopes: []string{"foo", "bar"}})
	if len(faults) > 0 {
		t.Fatalf("faults: %v", faults)
	}
	const vhost, hostRoute = "public.foo.svc.cluster.local:8000", "outbound|8000||public.foo.svc.cluster.local"
	timeout := func(rc *routepb.RouteConfiguration) time.Duration {
		t.Helper()
		if rc == nil {
			t.Fatal("no route configuration")
		}
		for _, vh := range rc.GetVirtualHosts() {
			if vh.GetName() == vhost {
				return vh.GetRoutes()[0].GetRoute().GetTimeout().AsDuration()
			}
		}
		t.Fatalf("route configuration %s has no virtual host %s", rc.GetName(), vhost)
		return 0
	}
	mesh := routesIn(t, outs, RouteType)
	foo := routesIn(t, outs, translate.ScopeCollection("foo", RouteType))
	bar := routesIn(t, outs, translate.ScopeCollection("bar", RouteType))
	for _, c := range []struct {
		what string
		rc   *routepb.RouteConfiguration
		want time.Duration
	}{
		{"mesh-wide 8000", mesh["8000"], 5 * time.Second},
		{"foo's 8000", foo["8000"], 5 * time.Second},
		{"bar's 8000", bar["8000"], 0},
		{"foo's own route configuration", foo[hostRoute], 5 * time.Second},
		{"bar's own route configuration", bar[hostRoute], 0},
	} {
		if got := timeout(c.rc); got != c.want {
			t.Errorf("%s: timeout %v, want %v", c.what, got, c.want)
		}
	}
	// The same when bar's scope comes after the inputs, as when a sidecar of bar connects.
	tr := NewTranslator(TranslatorOptions{})
	in := decodeYAML(t, vsExportYAML)
	for _, coll := range sortedKeys(in) {
		feed(tr, coll, in[coll], nil)
	}
	tr.Translate()
	tr.SetScope("bar")
	d, _ := tr.Translate()
	if got := encodedNames(d.Upserts[translate.ScopeCollection("bar", RouteType)]); !slices.Equal(got, []string{"8000", hostRoute}) {
		t.Fatalf("bar's scope set later upserted %v in its overlay, want 8000 and %s", got, hostRoute)
	}
	// bar's default route is the mesh-wide one of a host without a VirtualService.
	serviceEntryAlone, _, _ := strings.Cut(vsExportYAML, "---")
	plain, _ := Build(decodeYAML(t, serviceEntryAlone), TranslatorOptions{})
	if want := routesIn(t, plain, RouteType)["8000"]; !proto.Equal(bar["8000"], want) {
		t.Errorf("bar's 8000:\n%v\nwant the route configuration without the VirtualService:\n%v", bar["8000"], want)
	}
}

const vsExportYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: public, namespace: foo}
spec:
  hosts: [public.foo.svc.cluster.local]
  addresses: [10.10.3.2]
  ports: [{number: 8000, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.11.2}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: public-local, namespace: foo}
spec:
  hosts: [public.foo.svc.cluster.local]
  exportTo: ["."]
  http:
  - timeout: 5s
    route: [{destination: {host: public.foo.svc.cluster.local}}]
`

// The controller builds the proxyless clients' outputs (their clusters, API listeners and
// per-host route configurations, in the mesh-wide collections and the scopes' overlays) only
// while one is connected: none before, all of them once AcquireProxyless's built is closed,
// none again after the grace. What Envoy sidecars read is the same byte for byte either way:
// their port route configuration shares its virtual hosts' routes with the host's own route
// configuration when that is built, and keeps them itself when not.
func TestControllerBuildsProxylessOutputsWhileAProxylessClientIsConnected(t *testing.T) {
	st := newStore()
	ctrl := New(Options{Store: st, Logger: testLogger(t), GatewayClassGrace: 50 * time.Millisecond})
	h := runController(t, st, ctrl)
	release, _, _ := ctrl.AcquireScope("bookinfo") // a scope, so that its overlays are built too
	defer release()
	h.holdPortRoutes() // the sidecars' route configurations, compared below
	h.apply(upserts(decodeYAML(t, scopeYAML))...)
	proxyless := func() (clusters, listeners, routes []string) {
		v := st.View()
		_, grpc := v.Snapshot(GRPCClusterType)
		for _, e := range grpc {
			clusters = append(clusters, e.Name)
		}
		for _, coll := range []string{ListenerType, translate.ScopeCollection("bookinfo", ListenerType)} {
			_, ls := v.Snapshot(coll)
			for _, e := range ls {
				if strings.Contains(e.Name, ":") { // HOST:PORT
					listeners = append(listeners, coll+" "+e.Name)
				}
			}
		}
		for _, coll := range []string{RouteType, translate.ScopeCollection("bookinfo", RouteType)} {
			_, rs := v.Snapshot(coll)
			for _, e := range rs {
				if strings.HasPrefix(e.Name, "outbound|") {
					routes = append(routes, coll+" "+e.Name)
				}
			}
		}
		return clusters, listeners, routes
	}
	sidecarRoutes := func() map[string]string {
		v := st.View()
		out := map[string]string{}
		for _, coll := range []string{RouteType, translate.ScopeCollection("bookinfo", RouteType)} {
			_, rs := v.Snapshot(coll)
			for _, e := range rs {
				if !strings.HasPrefix(e.Name, "outbound|") {
					_, body := e.Body()
					out[coll+" "+e.Name] = string(body)
				}
			}
		}
		return out
	}
	envoy := st.View().Collection(ClusterType).Count
	lazyRoutes := sidecarRoutes()
	if _, ok := lazyRoutes[RouteType+" 9080"]; !ok {
		t.Fatalf("no sidecar route configuration 9080 to compare: %v", slices.Collect(maps.Keys(lazyRoutes)))
	}
	if c, l, r := proxyless(); len(c)+len(l)+len(r) != 0 {
		t.Fatalf("proxyless outputs built with no proxyless client connected: clusters %v, API listeners %v, host routes %v", c, l, r)
	}
	acquired, built := ctrl.AcquireProxyless()
	again, _ := ctrl.AcquireProxyless()
	select {
	case <-built:
	case <-time.After(5 * time.Second):
		t.Fatal("the proxyless outputs were not built within 5s")
	}
	// Every Envoy cluster of a service has a proxyless form; the capture plumbing's do not.
	clusters, listeners, routes := proxyless()
	if len(clusters) != envoy-3 {
		t.Fatalf("%d proxyless clusters, want %d (the Envoy clusters but the three of the sidecar plumbing)", len(clusters), envoy-3)
	}
	if len(listeners) == 0 || len(routes) == 0 || !slices.ContainsFunc(routes, func(r string) bool { return strings.HasPrefix(r, translate.ScopeCollection("bookinfo", RouteType)) }) {
		t.Fatalf("API listeners %v and host routes %v; want some of each, and host routes in the scope's overlay", listeners, routes)
	}
	if got := sidecarRoutes(); !maps.Equal(got, lazyRoutes) {
		t.Errorf("the sidecars' route configurations differ once the proxyless outputs are built: %d vs %d", len(got), len(lazyRoutes))
	}
	acquired()
	time.Sleep(150 * time.Millisecond)
	if c, _, _ := proxyless(); len(c) == 0 {
		t.Fatal("the proxyless outputs were dropped while a client still holds them")
	}
	again()
	waitUntil(t, "the proxyless outputs are dropped after the grace", func() bool {
		c, l, r := proxyless()
		return len(c)+len(l)+len(r) == 0
	})
	if got := sidecarRoutes(); !maps.Equal(got, lazyRoutes) {
		t.Errorf("the sidecars' route configurations differ once the proxyless outputs are dropped")
	}
}

// A stream that asks for one host's proxyless outputs has that host's built, and no other's:
// a client of a few services does not make the translation build them for a million. They go
// after the grace once the last holder let go.
func TestControllerBuildsTheProxylessOutputsOfTheHostsAskedFor(t *testing.T) {
	st := newStore()
	ctrl := New(Options{Store: st, Logger: testLogger(t), GatewayClassGrace: 50 * time.Millisecond})
	h := runController(t, st, ctrl)
	h.apply(upserts(decodeYAML(t, scopeYAML))...)
	names := func(coll string, keep func(string) bool) []string {
		_, es := st.View().Snapshot(coll)
		var out []string
		for _, e := range es {
			if keep(e.Name) {
				out = append(out, e.Name)
			}
		}
		return out
	}
	apiListeners := func() []string { return names(ListenerType, func(n string) bool { return strings.Contains(n, ":") }) }
	hostRoutes := func() []string {
		return names(RouteType, func(n string) bool { return strings.HasPrefix(n, "outbound|") })
	}
	grpcClusters := func() []string { return names(GRPCClusterType, func(string) bool { return true }) }
	if len(apiListeners())+len(hostRoutes())+len(grpcClusters()) != 0 {
		t.Fatal("proxyless outputs built with no client asking for them")
	}
	const host = "reviews.bookinfo.svc.cluster.local"
	release, built := ctrl.AcquireProxylessHost(host)
	select {
	case <-built:
	case <-time.After(5 * time.Second):
		t.Fatal("the host's proxyless outputs were not built within 5s")
	}
	if got, want := apiListeners(), []string{host + ":9080"}; !slices.Equal(got, want) {
		t.Errorf("API listeners %v, want %v", got, want)
	}
	if got, want := hostRoutes(), []string{"outbound|9080||" + host}; !slices.Equal(got, want) {
		t.Errorf("host routes %v, want %v", got, want)
	}
	if got, want := grpcClusters(), []string{"outbound|9080||" + host}; !slices.Equal(got, want) {
		t.Errorf("gRPC clusters %v, want %v", got, want)
	}
	release()
	waitUntil(t, "the host's proxyless outputs are dropped after the grace", func() bool {
		return len(apiListeners())+len(hostRoutes())+len(grpcClusters()) == 0
	})
}

// Building or dropping a host's proxyless outputs rebuilds that host alone: what its ports'
// route configurations gather of it is the same bytes, so they are not rebuilt (at a million
// services one holds hundreds of MB), in the mesh or in a scope; the outputs are the same as
// a translation that built them from the start.
func TestProxylessHostDoesNotRebuildItsPorts(t *testing.T) {
	in := decodeYAML(t, scopeYAML)
	tr := NewTranslator(TranslatorOptions{LazyProxyless: true, Scopes: []string{"bookinfo"}})
	for _, coll := range sortedKeys(in) {
		feed(tr, coll, in[coll], nil)
	}
	tr.Translate()
	const host = "reviews.bookinfo.svc.cluster.local"
	for _, on := range []bool{true, false} {
		tr.SetProxylessHost(host, on)
		if _, st := tr.Translate(); st.Hosts != 1 || st.Ports != 0 {
			t.Errorf("proxyless outputs of %s %v: %d hosts and %d ports rebuilt, want the host alone", host, on, st.Hosts, st.Ports)
		}
	}
	tr.SetProxylessHost(host, true)
	tr.Translate()
	eager, _ := Build(in, TranslatorOptions{Scopes: []string{"bookinfo"}})
	want := map[outKey]string{}
	for _, r := range eager {
		proxylessKind := r.TypeURL == GRPCClusterType || strings.Contains(r.TypeURL, "Listener") || strings.Contains(r.TypeURL, "RouteConfiguration")
		if proxylessKind && strings.Contains(r.Name, "ratings.shop") {
			continue // ratings' proxyless outputs: not asked for
		}
		want[outKey{r.TypeURL, r.Name}] = string(r.Encoded.Bytes())
	}
	got := map[outKey]string{}
	for _, r := range tr.Outputs() {
		got[outKey{r.TypeURL, r.Name}] = string(r.Encoded.Bytes())
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s %s differs from the eager translation's", k.typeURL, k.name)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s %s built, not in the eager translation's", k.typeURL, k.name)
		}
	}
}

// A Sidecar without egress imports every host (istiod's default egress listener), and an
// egress listener with a port imports its hosts like one without.
func TestSidecarWithoutEgressOrWithAPortImportsHosts(t *testing.T) {
	for _, c := range []struct{ what, spec string }{
		{"no egress", `outboundTrafficPolicy: {mode: REGISTRY_ONLY}`},
		{"an egress listener with a port", `egress: [{port: {number: 9999, protocol: HTTP, name: http}, hosts: ["*/*"]}]`},
	} {
		outs, _ := Build(decodeYAML(t, sidecarYAML+`---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: istio-system}
spec:
  `+c.spec+"\n"), TranslatorOptions{Scopes: []string{"default"}})
		got, all := seen(t, outs, "default")[ClusterType], seen(t, outs, "")[ClusterType]
		if !slices.Equal(got, all) {
			t.Errorf("a root Sidecar with %s: default sees %v, want every cluster %v", c.what, got, all)
		}
	}
}
