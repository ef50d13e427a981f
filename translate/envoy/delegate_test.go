package envoy

import (
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

const delegateYAML = `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-api, namespace: team}
spec:
  http:
  - name: v1
    match: [{uri: {prefix: /api/v1}}]
    route: [{destination: {host: reviews.bookinfo.svc.cluster.local}}]
  - name: outside
    match: [{uri: {prefix: /other}}]
    route: [{destination: {host: reviews.bookinfo.svc.cluster.local}}]
  - name: rest
    route: [{destination: {host: reviews.bookinfo.svc.cluster.local}}]
`

// TestDelegateRoutesAreMergedIntoTheRoot: a root's http route with a delegate is replaced by
// the delegate's routes merged with it, as istiod merges them: matches within the root's (the
// others left out, reported), names joined, the root's timeout where the delegate has none.
func TestDelegateRoutesAreMergedIntoTheRoot(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - name: api
    match: [{uri: {prefix: /api}}]
    timeout: 3s
    delegate: {name: reviews-api, namespace: team}
`))+delegateYAML)
	rs := sidecarRoutes(t, got)
	var names, paths []string
	for _, r := range rs {
		names = append(names, r.GetName())
		paths = append(paths, r.GetMatch().GetPrefix())
		if r.GetRoute().GetCluster() != reviewsCluster || r.GetRoute().GetTimeout().GetSeconds() != 3 {
			t.Errorf("route %s: cluster %q, timeout %v; want %s, the root's 3s", r.GetName(), r.GetRoute().GetCluster(), r.GetRoute().GetTimeout(), reviewsCluster)
		}
	}
	if !slices.Equal(names, []string{"api-v1", "api-rest"}) || !slices.Equal(paths, []string{"/api/v1", "/api"}) {
		t.Errorf("routes %q on %q; want api-v1 on /api/v1 and api-rest on /api", names, paths)
	}
	if m := faultMessages(got.faults, kindVirtualService, "bookinfo/reviews"); len(m) != 1 || !strings.Contains(m[0], "delegate(team/reviews-api).http[1]") {
		t.Errorf("faults %q; want the conflicting route reported", m)
	}
}

// TestDelegateNotExportedIsLeftOut: a delegate not exported to the root's namespace is not
// merged (the root's route is left out, reported), nor is a VirtualService with hosts.
func TestDelegateNotExportedIsLeftOut(t *testing.T) {
	private := strings.Replace(delegateYAML, "spec:\n", "spec:\n  exportTo: [\".\"]\n", 1)
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - delegate: {name: reviews-api, namespace: team}
`))+private)
	if _, ok := got.routes["9080"]; ok && len(sidecarRoutes(t, got)) != 0 {
		t.Errorf("routes %v; want none", sidecarRoutes(t, got))
	}
	if m := faultMessages(got.faults, kindVirtualService, "bookinfo/reviews"); len(m) != 1 || !strings.Contains(m[0], "not exported to namespace bookinfo") {
		t.Errorf("faults %q", m)
	}
}

// TestDelegateChangeRebuildsItsRoot: the root's host depends on its delegate: a change to the
// delegate alone gives what a fresh build gives.
func TestDelegateChangeRebuildsItsRoot(t *testing.T) {
	m := newMesh(decodeYAML(t, reviewsYAML(reviewsVS("  - delegate: {name: reviews-api, namespace: team}\n"))+delegateYAML))
	tr := NewTranslator(TranslatorOptions{})
	for coll, rs := range m.inputs() {
		var in []Input
		for _, r := range rs {
			in = append(in, InputOf(r))
		}
		tr.Update(coll, in, nil)
	}
	tr.Translate()
	vsColl := collectionOf(kindVirtualService)
	d := m[vsColl]["team/reviews-api"]
	changed := edit(t, d, &networking.VirtualService{}, "2", func(vs *networking.VirtualService) {
		vs.Http = vs.Http[:1]
	})
	m.put(vsColl, changed)
	tr.Update(vsColl, []Input{InputOf(changed)}, nil)
	_, st := tr.Translate()
	if st.Hosts == 0 {
		t.Error("the delegate's change rebuilt no host")
	}
	assertSameAsFromScratch(t, "delegate changed", tr, m)
}
