package envoy

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// fieldFault returns the "not translated" fault of a resource, or "".
func fieldFault(tr *Translator, kind, name string) string {
	for _, f := range tr.Faults() {
		if f.Kind == kind && f.Name == name && strings.HasPrefix(f.Message, "not translated") {
			return f.Message
		}
	}
	return ""
}

func translateYAML(t *testing.T, tr *Translator, text string) {
	t.Helper()
	for coll, rs := range decodeYAML(t, text) {
		feed(tr, coll, rs, nil)
	}
	tr.Translate()
}

// Nothing silent: a field the translation does not honour is a fault of its resource naming
// the field, and the rest of the resource is served.
func TestUntranslatedFieldIsAFaultNamingIt(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	translateYAML(t, tr, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  exportTo: ["."]
  http:
  - match: [{uri: {prefix: /v1}, statPrefix: v1}]
    route: [{destination: {host: reviews.bookinfo.svc.cluster.local}}]
    timeout: 3s
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews.bookinfo.svc.cluster.local
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 5}}
    outlierDetection: {consecutive5xxErrors: 3, outlierDetectionHttpErrorCodes: [500]}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      portLevelSettings:
      - port: {number: 9080}
        loadBalancer: {simple: ROUND_ROBIN, zoneAwareLbSetting: {enabled: true}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: bookinfo}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["*"]
    bind: 10.0.0.1
    tls: {mode: MUTUAL, credentialName: gw-cert, subjectAltNames: [client.example.com]}
`)
	for _, c := range []struct{ kind, name, want string }{
		{kindVirtualService, "bookinfo/reviews", "not translated, served without them: http.match.statPrefix (routes have no per-match statistics)"},
		{kindDestinationRule, "bookinfo/reviews", "not translated, served without them: " +
			"subsets.trafficPolicy.portLevelSettings.loadBalancer.zoneAwareLbSetting, trafficPolicy.outlierDetection.outlierDetectionHttpErrorCodes"},
		{kindGateway, "bookinfo/gw", "not translated, served without them: servers.bind (listeners bind 0.0.0.0)"},
	} {
		if got := fieldFault(tr, c.kind, c.name); got != c.want {
			t.Errorf("%s %s:\n got  %q\n want %q", c.kind, c.name, got, c.want)
		}
	}
	if got := fieldFault(tr, kindServiceEntry, "bookinfo/reviews"); got != "" {
		t.Errorf("a ServiceEntry of translated fields only is reported: %s", got)
	}
	// The rest is served: the route, its timeout, the pool's limit.
	var sawRoute bool
	for _, r := range tr.Outputs() {
		if r.TypeURL == RouteType && strings.Contains(string(r.Body().GetValue()), "/v1") {
			sawRoute = true
		}
	}
	if !sawRoute {
		t.Errorf("the VirtualService's route is not served")
	}
}

// A ServiceEntry's exportTo is honoured (scope.go), whatever it says: not a fault; and so is a
// VirtualService's for its HTTP routes to sidecars. For its tcp routes, and for gateways, it
// is not: a fault says so.
func TestExportToOfServiceEntriesIsNotAFault(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	for _, exportTo := range []string{`["*"]`, `["*", "."]`, `["."]`, `["~"]`, `[bar, foo]`} {
		translateYAML(t, tr, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: ns}
spec:
  hosts: [a.example.com]
  exportTo: `+exportTo+`
  ports: [{number: 80, name: http, protocol: HTTP}, {number: 81, name: tcp, protocol: TCP}]
  resolution: DNS
`)
		if got := fieldFault(tr, kindServiceEntry, "ns/a"); got != "" {
			t.Errorf("exportTo %s reported: %s", exportTo, got)
		}
	}
	translateYAML(t, tr, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a.example.com]
  exportTo: ["."]
  http: [{route: [{destination: {host: a.example.com}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: b, namespace: ns}
spec:
  hosts: [b.example.com]
  exportTo: ["."]
  tcp: [{route: [{destination: {host: a.example.com, port: {number: 81}}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: c, namespace: ns}
spec:
  hosts: [c.example.com]
  gateways: [ns/gw]
  exportTo: ["."]
  http: [{route: [{destination: {host: a.example.com}}]}]
`)
	messages := func(name string) []string { return faultMessages(tr.Faults(), kindVirtualService, name) }
	if got := messages("ns/a"); len(got) > 0 {
		t.Errorf("a VirtualService's exportTo [.] for HTTP routes reported: %q", got)
	}
	if got := messages("ns/b"); !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, "exportTo: its tcp and tls routes") }) {
		t.Errorf("exportTo of a VirtualService with tcp routes: faults %q, want one saying they are served everywhere", got)
	}
	if got := messages("ns/c"); !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, "exportTo: gateway proxies") }) {
		t.Errorf("exportTo of a VirtualService bound to a gateway: faults %q, want one saying gateways get it anyway", got)
	}
}

// The fault goes with the field: an update without it, or the resource's removal, clears it.
func TestUntranslatedFieldFaultGoesWithTheField(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	const with = `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: w, namespace: ns, resourceVersion: "1"}
spec: {address: 10.0.0.1, serviceAccount: sa}
`
	translateYAML(t, tr, with)
	if got := fieldFault(tr, kindWorkloadEntry, "ns/w"); !strings.Contains(got, "serviceAccount") {
		t.Fatalf("serviceAccount not reported: %q", got)
	}
	translateYAML(t, tr, strings.ReplaceAll(strings.ReplaceAll(with, ", serviceAccount: sa", ""), `"1"`, `"2"`))
	if got := fieldFault(tr, kindWorkloadEntry, "ns/w"); got != "" {
		t.Fatalf("still reported once the field is gone: %q", got)
	}
	translateYAML(t, tr, strings.ReplaceAll(with, `"1"`, `"3"`))
	feed(tr, collectionOf(kindWorkloadEntry), nil, []string{"ns/w"})
	tr.Translate()
	if got := fieldFault(tr, kindWorkloadEntry, "ns/w"); got != "" {
		t.Fatalf("still reported once the resource is gone: %q", got)
	}
}

// A field this bridge's Istio API does not know (a newer Istio's) is reported by number.
func TestUnknownFieldIsReported(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	rs := decodeYAML(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: ns}
spec:
  hosts: [a.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
`)
	coll := collectionOf(kindServiceEntry)
	r := rs[coll][0]
	value := protowire.AppendTag(slices.Clone(r.Body.Value), 999, protowire.VarintType)
	value = protowire.AppendVarint(value, 1)
	r.Body = &anypb.Any{TypeUrl: r.Body.TypeUrl, Value: value}
	feed(tr, coll, []*mcpapi.Resource{r}, nil)
	tr.Translate()
	if got := fieldFault(tr, kindServiceEntry, "ns/a"); !strings.Contains(got, "field 999 (unknown to this bridge)") {
		t.Errorf("unknown field 999: %q", got)
	}
}

// Every reason in the tables names a field of its kind that the translation does not read
// whole (the paths it reads are checked when the tables are built: a misspelt one panics).
func TestFieldTablesNameRealFields(t *testing.T) {
	for kind, table := range fieldTables {
		for path := range table.why {
			n, ok := table.root, true
			for part := range strings.SplitSeq(path, ".") {
				fd := fieldByJSONName(n.md, part)
				if fd == nil {
					t.Errorf("%s: why %s: %s is not a field", kind, path, part)
					ok = false
					break
				}
				if next := n.children[fd.Number()]; next != nil {
					n = next
				} else {
					n = &fieldNode{md: fd.Message()}
				}
			}
			if ok && n.covered && n.allowed == nil {
				t.Errorf("%s: %s has a reason but is read whole", kind, path)
			}
		}
	}
}

// A namespace's Sidecar with egress hosts is applied (scope.go): no fault. One with a
// workloadSelector is not applied at all, and an egress listener with a port is left out:
// each is a fault naming the field, gone with the Sidecar.
func TestSidecarFieldsNotAppliedAreReported(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	translateYAML(t, tr, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: bookinfo}
spec:
  egress: [{hosts: ["./*", "istio-system/*"]}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: some, namespace: shop}
spec:
  workloadSelector: {labels: {app: cart}}
  egress: [{hosts: ["./*"]}, {port: {number: 9080, protocol: HTTP, name: http}, hosts: ["*/*"]}]
`)
	if got := fieldFault(tr, kindSidecar, "bookinfo/default"); got != "" {
		t.Errorf("a namespace's Sidecar with egress hosts reported: %s", got)
	}
	got := fieldFault(tr, kindSidecar, "shop/some")
	for _, want := range []string{"workloadSelector", "not applied at all", "egress.port", "no listener of that port alone"} {
		if !strings.Contains(got, want) {
			t.Errorf("Sidecar shop/some: fault %q, want it to say %q", got, want)
		}
	}
	if names := tr.Names(collectionOf("Sidecar")); !slices.Equal(names, []string{"bookinfo/default", "shop/some"}) {
		t.Errorf("Names: %v", names)
	}
	feed(tr, collectionOf("Sidecar"), nil, []string{"shop/some"})
	tr.Translate()
	if got := fieldFault(tr, kindSidecar, "shop/some"); got != "" {
		t.Errorf("still reported after its removal: %s", got)
	}
}
