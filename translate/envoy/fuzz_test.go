package envoy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// FuzzBuild translates arbitrary Istio YAML: whatever a producer sends, the translation must
// not panic, and every output it serves must pass Envoy's validation (a client rejects a whole
// response for one invalid resource).
func FuzzBuild(f *testing.F) {
	// Small seeds (one document each, and one small mesh) keep the fuzzer's minimization of
	// new inputs quick; whole files make it crawl.
	files, _ := filepath.Glob("testdata/*.yaml")
	examples, _ := filepath.Glob("../../examples/*.yaml")
	for _, file := range append(files, examples...) {
		if strings.HasSuffix(file, ".golden.yaml") {
			continue // outputs, not Istio input
		}
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			f.Add([]byte(doc))
		}
	}
	f.Add([]byte(echoService(&backend{id: "v1-a", port: 1000}, &backend{id: "v2-a", port: 1001}) + echoRoutes(`  - match:
    - headers:
        x-variant: {exact: canary}
    route:
    - destination: {host: echo, subset: v2}
      weight: 80
    - destination: {host: echo, subset: v1}
      weight: 20
`)))
	f.Add([]byte(meshYAML + gatewayYAML("shop", "edge", 1, "istio: ingressgateway",
		"  - port: {number: 443, name: tls, protocol: TLS}\n    hosts: [\"*.pass.example.com\"]\n    tls: {mode: PASSTHROUGH}\n"+
			"  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [\"web.example.com\"]\n    tls: {mode: MUTUAL, credentialName: web}\n")))
	// Namespaces' views: exportTo, Sidecars, namespace-local VirtualServices (scope.go).
	f.Add([]byte(exportYAML))
	f.Add([]byte(vsExportYAML))
	f.Add([]byte(sidecarYAML + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: bookinfo}\nspec:\n  egress: [{hosts: [\"./*\"]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _ := filesource.DecodeUnchecked(data, "fuzz.yaml")
		in := map[string][]*mcpapi.Resource{}
		for _, o := range objs {
			in[o.Kind.Collection] = append(in[o.Kind.Collection], o.Resource)
		}
		// Gateway proxies of two classes: one selecting Istio's default ingress, one selecting
		// only Gateways without a selector.
		// and sidecars of three namespaces, whose views are built too.
		outs, faults := Build(in, TranslatorOptions{GatewayClasses: []translate.GatewayClass{ingressClass, {}},
			Scopes: []string{"default", "bookinfo", "foo"}})
		for _, r := range outs {
			if typeURL, _ := r.Encoded.Body(); typeURL == store.HiddenTypeURL {
				continue // a namespace's view hides the name
			}
			if err := validateDeep(r.Body()); err != nil {
				t.Fatalf("%s %q is served but invalid: %v", typeName(r.TypeURL), r.Name, err)
			}
		}
		if !slices.IsSortedFunc(faults, compareFaults) {
			t.Fatalf("faults are not sorted: %v", faults)
		}
		// A name is built once per collection.
		seen := map[[2]string]bool{}
		for _, r := range outs {
			k := [2]string{r.TypeURL, r.Name}
			if seen[k] {
				t.Fatalf("%s %q is built twice", r.TypeURL, r.Name)
			}
			seen[k] = true
		}
	})
}
