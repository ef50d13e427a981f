package filesource

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	extensions "istio.io/api/extensions/v1alpha1"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// kindDocs are a document of each kind istiod reads beyond the contract's table, under every
// apiVersion Istio serves it by, as an operator writes them.
var kindDocs = []struct {
	name, collection string
	apiVersions      []string
	doc              string
	check            func(t *testing.T, body proto.Message)
}{
	{
		name: "ProxyConfig", collection: "istio/networking/v1beta1/proxyconfigs",
		apiVersions: []string{"networking.istio.io/v1beta1"},
		doc: `apiVersion: APIVERSION
kind: ProxyConfig
metadata: {name: per-workload, namespace: shop}
spec:
  selector:
    matchLabels: {app: reviews}
  concurrency: 2
  environmentVariables:
    ISTIO_META_DNS_CAPTURE: "true"
  image:
    imageType: distroless
`,
		check: func(t *testing.T, body proto.Message) {
			pc := body.(*networkingv1beta1.ProxyConfig)
			if pc.GetConcurrency().GetValue() != 2 || pc.GetImage().GetImageType() != "distroless" || pc.GetSelector().GetMatchLabels()["app"] != "reviews" {
				t.Errorf("body = %v", pc)
			}
		},
	},
	{
		name: "Telemetry", collection: "istio/telemetry/v1alpha1/telemetries",
		apiVersions: []string{"telemetry.istio.io/v1", "telemetry.istio.io/v1alpha1"},
		doc: `apiVersion: APIVERSION
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  tracing:
  - providers: [{name: zipkin}]
    randomSamplingPercentage: 10.5
    customTags:
      team: {literal: {value: shop}}
  accessLogging:
  - providers: [{name: envoy}]
    filter: {expression: "response.code >= 400"}
  metrics:
  - overrides:
    - match: {metric: REQUEST_COUNT, mode: CLIENT_AND_SERVER}
      tagOverrides:
        request_protocol: {operation: REMOVE}
`,
		check: func(t *testing.T, body proto.Message) {
			tm := body.(*telemetry.Telemetry)
			if tm.GetTracing()[0].GetRandomSamplingPercentage().GetValue() != 10.5 || tm.GetAccessLogging()[0].GetFilter().GetExpression() != "response.code >= 400" {
				t.Errorf("body = %v", tm)
			}
		},
	},
	{
		name: "WasmPlugin", collection: "istio/extensions/v1alpha1/wasmplugins",
		apiVersions: []string{"extensions.istio.io/v1alpha1"},
		doc: `apiVersion: APIVERSION
kind: WasmPlugin
metadata: {name: openid-connect, namespace: istio-ingress}
spec:
  selector:
    matchLabels: {istio: ingressgateway}
  url: oci://private-registry:5000/openid-connect/openid:latest
  imagePullPolicy: IfNotPresent
  phase: AUTHN
  pluginConfig:
    openid_server: authn
    openid_realm: ingress
    scopes: [openid, email]
  vmConfig:
    env:
    - name: POD_NAME
      valueFrom: HOST
`,
		check: func(t *testing.T, body proto.Message) {
			w := body.(*extensions.WasmPlugin)
			if w.GetPhase() != extensions.PluginPhase_AUTHN || w.GetPluginConfig().GetFields()["openid_realm"].GetStringValue() != "ingress" ||
				w.GetVmConfig().GetEnv()[0].GetValueFrom() != extensions.EnvValueSource_HOST {
				t.Errorf("body = %v", w)
			}
		},
	},
	{
		name: "TrafficExtension", collection: "istio/extensions/v1alpha1/trafficextensions",
		apiVersions: []string{"extensions.istio.io/v1alpha1"},
		doc: `apiVersion: APIVERSION
kind: TrafficExtension
metadata: {name: add-header, namespace: shop}
spec:
  selector:
    matchLabels: {app: reviews}
  phase: AUTHZ
  priority: 10
  lua:
    inlineCode: |
      function envoy_on_request(handle)
        handle:headers():add("x-shop", "1")
      end
`,
		check: func(t *testing.T, body proto.Message) {
			te := body.(*extensions.TrafficExtension)
			if !strings.Contains(te.GetLua().GetInlineCode(), "envoy_on_request") || te.GetPriority().GetValue() != 10 {
				t.Errorf("body = %v", te)
			}
		},
	},
}

// TestDecodeKindsIstiodReads: the YAML of every kind istiod reads decodes, under each
// apiVersion, into its canonical collection and its istio.io/api message.
func TestDecodeKindsIstiodReads(t *testing.T) {
	for _, kd := range kindDocs {
		for _, v := range kd.apiVersions {
			t.Run(kd.name+"/"+v, func(t *testing.T) {
				doc := strings.Replace(kd.doc, "APIVERSION", v, 1)
				objs, errs := Decode([]byte(doc), "kinds.yaml")
				if len(errs) != 0 || len(objs) != 1 {
					t.Fatalf("Decode = %d objects, faults %v", len(objs), errs)
				}
				o := objs[0]
				if o.Kind.Kind != kd.name || o.Kind.Collection != kd.collection {
					t.Fatalf("decoded as %s in %s", o.Kind.Kind, o.Kind.Collection)
				}
				body, err := o.Resource.GetBody().UnmarshalNew()
				if err != nil {
					t.Fatal(err)
				}
				kd.check(t, body)
				// The fast path and the general path read it alike.
				fastAgrees(t, []byte(doc))
			})
		}
	}
}

// istiodRefuses are documents that decode, but that istiod's validation refuses: each fault
// is a *DecodeError of its own, naming the file, the document, the kind and name, and the field.
var istiodRefuses = []struct {
	name   string
	doc    string
	faults []DecodeError // Line, Column, Kind, Name and Field are checked; Err by mentions
	// mentions are what each fault's text must contain, in order.
	mentions []string
}{
	{
		name: "DestinationRule with an empty host",
		doc:  "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: shop}\nspec:\n  host: \"\"\n  subsets: [{name: v1}]\n",
		faults: []DecodeError{
			{Line: 25, Column: 3, Kind: "DestinationRule", Name: "shop/reviews", Field: "spec.host"},
		},
		mentions: []string{"empty domain name not allowed"},
	},
	{
		name: "ServiceEntry, two faults",
		doc:  "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api, namespace: shop}\nspec:\n  hosts: [api.example.com]\n  ports: [{number: 0, name: Bad_Name, protocol: HTTP}]\n  resolution: DNS\n",
		faults: []DecodeError{
			{Line: 26, Column: 23, Kind: "ServiceEntry", Name: "shop/api", Field: "spec.ports[0].name"},
			{Line: 26, Column: 12, Kind: "ServiceEntry", Name: "shop/api", Field: "spec.ports[0].number"},
		},
		mentions: []string{"invalid port name: Bad_Name", "port number 0 must be in the range 1..65535"},
	},
	{
		name: "Gateway named with a dot",
		doc:  "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: edge.gw, namespace: shop}\nspec:\n  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"*\"]}]\n",
		faults: []DecodeError{
			{Line: 23, Column: 12, Kind: "Gateway", Name: "shop/edge.gw", Field: "metadata.name"},
		},
		mentions: []string{`invalid gateway name: "edge.gw"`},
	},
	{
		name: "WasmPlugin without url",
		doc:  "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: w, namespace: shop}\nspec:\n  phase: AUTHN\n",
		faults: []DecodeError{
			// Missing: the document's first line, no column.
			{Line: 21, Kind: "WasmPlugin", Name: "shop/w", Field: "spec.url"},
		},
		mentions: []string{"url field needs to be set"},
	},
	{
		name: "Telemetry sampling over 100",
		doc:  "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: t, namespace: shop}\nspec:\n  tracing: [{randomSamplingPercentage: 101}]\n",
		faults: []DecodeError{
			{Line: 25, Column: 14, Kind: "Telemetry", Name: "shop/t", Field: "spec.tracing[0].randomSamplingPercentage"},
		},
		mentions: []string{"randomSamplingPercentage must be in range [0.0, 100.0]"},
	},
}

func TestDecodeReportsWhatIstiodRefuses(t *testing.T) {
	for _, tt := range istiodRefuses {
		t.Run(tt.name, func(t *testing.T) {
			// After a good document, so that the fault's document and line are not the first: the
			// document starts on line 21, and the fault is on its field's line.
			data := reviewsSE + "---\n" + tt.doc
			objs, errs := Decode([]byte(data), "dir/mesh.yaml")
			if len(objs) != 1 || objs[0].Name() != "bookinfo/reviews" {
				t.Errorf("objects = %d, want the good document only", len(objs))
			}
			if len(errs) != len(tt.faults) {
				t.Fatalf("faults = %v, want %d", errs, len(tt.faults))
			}
			for i, err := range errs {
				var de *DecodeError
				if !errors.As(err, &de) {
					t.Fatalf("fault %v is not a *DecodeError", err)
				}
				want := tt.faults[i]
				if de.File != "dir/mesh.yaml" || de.Doc != 2 || de.Line != want.Line || de.Column != want.Column ||
					de.Kind != want.Kind || de.Name != want.Name || de.Field != want.Field {
					t.Errorf("fault %d = %+v, want %+v in dir/mesh.yaml document 2", i, *de, want)
				}
				text := de.Error()
				pos := fmt.Sprintf("dir/mesh.yaml:%d:%d: ", want.Line, want.Column)
				if want.Column == 0 {
					pos = fmt.Sprintf("dir/mesh.yaml:%d: ", want.Line)
				}
				for _, m := range []string{pos + "document 2: " + want.Kind + " " + want.Name + ": field " + want.Field + ": ", tt.mentions[i]} {
					if !strings.Contains(text, m) {
						t.Errorf("fault text %q does not contain %q", text, m)
					}
				}
			}
		})
	}
}

// TestSourceReportsWhatIstiodRefuses: a file holding a resource istiod would refuse is a fault
// of the file source, as any faulty document (the file keeps its last good state: nothing of
// it the first time), and the other files are served.
func TestSourceReportsWhatIstiodRefuses(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), serviceEntry("reviews", "reviews.v1"))
	writeFile(t, filepath.Join(dir, "bad.yaml"), docs(destinationRule("ratings"),
		"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: empty, namespace: bookinfo}\nspec: {host: \"\"}\n"))
	h := start(t, Options{Paths: []string{dir}})
	h.waitFor("the fault of bad.yaml", h.hasFault("bad.yaml", "document 2", "DestinationRule bookinfo/empty", "field spec.host", "empty domain name not allowed"))
	if got, want := h.names(), []string{"serviceentries:bookinfo/reviews"}; !slices.Equal(got, want) {
		t.Errorf("store serves %v, want good.yaml's %v", got, want)
	}
}
