package envoy

import (
	"maps"
	"slices"
	"testing"

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
		if r.TypeURL != collection {
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
		inputs := make([]Input, len(in[coll]))
		for i, r := range in[coll] {
			inputs[i] = InputOf(r)
		}
		tr.Update(coll, inputs, nil)
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
