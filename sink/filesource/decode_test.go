package filesource

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/kinds"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
)

const reviewsSE = `apiVersion: networking.istio.io/v1alpha3
kind: ServiceEntry
metadata:
  name: reviews
  namespace: bookinfo
  labels:
    app: reviews
  annotations:
    owner: team-a
spec:
  hosts:
  - reviews.bookinfo.svc.cluster.local
  ports:
  - number: 9080
    name: http
    protocol: HTTP
  resolution: STATIC
  endpoints:
  - address: 10.0.0.1
`

func TestDecodeServiceEntry(t *testing.T) {
	objs, errs := Decode([]byte(reviewsSE), "se.yaml")
	if len(errs) != 0 || len(objs) != 1 {
		t.Fatalf("Decode = %d objects, errors %v; want 1 object", len(objs), errs)
	}
	o := objs[0]
	if o.Kind.Kind != "ServiceEntry" || o.Kind.Collection != "istio/networking/v1alpha3/serviceentries" {
		t.Errorf("kind = %s in %s", o.Kind.Kind, o.Kind.Collection)
	}
	if o.File != "se.yaml" || o.Doc != 1 || o.Line != 1 {
		t.Errorf("position = %s doc %d line %d, want se.yaml doc 1 line 1", o.File, o.Doc, o.Line)
	}
	md := o.Resource.GetMetadata()
	if md.GetName() != "bookinfo/reviews" || o.Name() != "bookinfo/reviews" {
		t.Errorf("name = %q", md.GetName())
	}
	if md.GetLabels()["app"] != "reviews" || md.GetAnnotations()["owner"] != "team-a" {
		t.Errorf("labels %v, annotations %v", md.GetLabels(), md.GetAnnotations())
	}
	if md.GetVersion() != "" || md.GetCreateTime() != nil {
		t.Errorf("version %q, create time %v: want both unset (the store hashes the content)", md.GetVersion(), md.GetCreateTime())
	}
	if err := kinds.ValidateResource(o.Kind.Collection, o.Resource); err != nil {
		t.Fatalf("decoded body does not validate: %v", err)
	}
	se := &networking.ServiceEntry{}
	if err := o.Resource.GetBody().UnmarshalTo(se); err != nil {
		t.Fatal(err)
	}
	want := &networking.ServiceEntry{
		Hosts:      []string{"reviews.bookinfo.svc.cluster.local"},
		Ports:      []*networking.ServicePort{{Number: 9080, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC,
		Endpoints:  []*networking.WorkloadEntry{{Address: "10.0.0.1"}},
	}
	if !proto.Equal(se, want) {
		t.Errorf("body = %v\nwant %v", se, want)
	}
}

// strictPA is a PeerAuthentication with the metadata fields an API server sets.
const strictPA = `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: strict
  resourceVersion: "42"
  creationTimestamp: "2024-05-06T07:08:09Z"
  uid: 0b7c9d2e-1111-2222-3333-444455556666
  generation: 3
spec:
  mtls:
    mode: STRICT
status: {}
`

func TestDecodeMetadata(t *testing.T) {
	doc := strictPA
	objs, errs := Decode([]byte(doc), "pa.yaml")
	if len(errs) != 0 || len(objs) != 1 {
		t.Fatalf("Decode = %d objects, errors %v", len(objs), errs)
	}
	md := objs[0].Resource.GetMetadata()
	if md.GetName() != "default/strict" {
		t.Errorf("name = %q, want the namespace to default to \"default\"", md.GetName())
	}
	if md.GetVersion() != "42" {
		t.Errorf("version = %q, want resourceVersion 42", md.GetVersion())
	}
	if got, want := md.GetCreateTime().AsTime(), time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC); !got.Equal(want) {
		t.Errorf("create time = %v, want %v", got, want)
	}
	if objs[0].Kind.Collection != "istio/security/v1beta1/peerauthentications" {
		t.Errorf("security.istio.io/v1 decoded into %s", objs[0].Kind.Collection)
	}
	pa := &security.PeerAuthentication{}
	if err := objs[0].Resource.GetBody().UnmarshalTo(pa); err != nil || pa.GetMtls().GetMode() != security.PeerAuthentication_MutualTLS_STRICT {
		t.Errorf("body = %v, %v", pa, err)
	}
}

// TestDecodeAliases decodes the same ServiceEntry under every apiVersion Istio serves: each
// lands in the canonical collection with the same body.
func TestDecodeAliases(t *testing.T) {
	var bodies [][]byte
	for _, v := range []string{"v1alpha3", "v1beta1", "v1"} {
		doc := strings.Replace(reviewsSE, "networking.istio.io/v1alpha3", "networking.istio.io/"+v, 1)
		objs, errs := Decode([]byte(doc), v+".yaml")
		if len(errs) != 0 || len(objs) != 1 {
			t.Fatalf("%s: %d objects, errors %v", v, len(objs), errs)
		}
		if c := objs[0].Kind.Collection; c != "istio/networking/v1alpha3/serviceentries" {
			t.Errorf("%s: collection %s", v, c)
		}
		bodies = append(bodies, objs[0].Resource.GetBody().GetValue())
	}
	for i := range bodies[1:] {
		if string(bodies[i+1]) != string(bodies[0]) {
			t.Errorf("body of alias %d differs from the canonical one", i+1)
		}
	}
}

func TestDecodeDocuments(t *testing.T) {
	data := "# leading comment\n---\n" + reviewsSE + "---\n# only a comment\n---\n\n---   \n" +
		strings.Replace(reviewsSE, "name: reviews", "name: ratings", 1) +
		"--- # a comment after the marker\n" +
		strings.Replace(reviewsSE, "name: reviews", "name: details", 1) +
		"...\n---\n"
	objs, errs := Decode([]byte(data), "multi.yaml")
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	var got []string
	for _, o := range objs {
		got = append(got, fmt.Sprintf("%s@doc%d:line%d", o.Name(), o.Doc, o.Line))
	}
	// Blank and comment-only documents are not numbered; a comment after a marker is not the
	// document's first line.
	want := []string{"bookinfo/reviews@doc1:line3", "bookinfo/ratings@doc2:line27", "bookinfo/details@doc3:line47"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("objects = %v\nwant      %v", got, want)
	}
}

func TestDecodeDeterministicBody(t *testing.T) {
	// Maps are where a non-deterministic encoding would show: many labels, many ports.
	var b strings.Builder
	b.WriteString("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: w}\nspec:\n  address: 10.0.0.1\n  labels:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "    l%d: v%d\n", i, i)
	}
	b.WriteString("  ports:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "    p%d: %d\n", i, 1000+i)
	}
	first, errs := Decode([]byte(b.String()), "we.yaml")
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	for range 20 {
		again, _ := Decode([]byte(b.String()), "we.yaml")
		if string(again[0].Resource.GetBody().GetValue()) != string(first[0].Resource.GetBody().GetValue()) {
			t.Fatal("the same document decoded to different body bytes: the store would see a change")
		}
	}
}

// decodeErrorTests are faulty documents and the faults Decode must report.
var decodeErrorTests = []struct {
	name string
	data string
	// want are the fields the error must have (Line and Column when Line is set), and mentions
	// what its text must contain.
	want     DecodeError
	mentions []string
}{
	{
		name:     "unknown spec field",
		data:     reviewsSE + "  colour: blue\n",
		want:     DecodeError{Doc: 1, Line: 20, Column: 3, Kind: "ServiceEntry", Name: "bookinfo/reviews", Field: "spec.colour"},
		mentions: []string{"unknown field", "colour"},
	},
	{
		name:     "bad value in a list",
		data:     strings.Replace(reviewsSE, "number: 9080", "number: ninety", 1),
		want:     DecodeError{Doc: 1, Line: 14, Column: 5, Kind: "ServiceEntry", Name: "bookinfo/reviews", Field: "spec.ports[0].number"},
		mentions: []string{"ninety"},
	},
	{
		name:     "bad enum",
		data:     strings.Replace(reviewsSE, "resolution: STATIC", "resolution: STATIK", 1),
		want:     DecodeError{Doc: 1, Line: 17, Column: 3, Kind: "ServiceEntry", Name: "bookinfo/reviews", Field: "spec.resolution"},
		mentions: []string{"STATIK"},
	},
	{
		name:     "bad nested field in second document",
		data:     "---\n" + reviewsSE + "---\n" + strings.Replace(reviewsSE, "address: 10.0.0.1", "address: 10.0.0.1\n    portz: {}", 1),
		want:     DecodeError{Doc: 2, Line: 41, Column: 5, Kind: "ServiceEntry", Name: "bookinfo/reviews", Field: "spec.endpoints[0].portz"},
		mentions: []string{"unknown field"},
	},
	{
		name:     "unknown kind",
		data:     "apiVersion: networking.istio.io/v1\nkind: ServiceEntryy\nmetadata: {name: x}\nspec: {}\n",
		want:     DecodeError{Doc: 1, Kind: "ServiceEntryy"},
		mentions: []string{"networking.istio.io/v1", "ServiceEntryy", "unknown kind"},
	},
	{
		name:     "unknown apiVersion",
		data:     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {}\n",
		want:     DecodeError{Doc: 1, Kind: "ConfigMap"},
		mentions: []string{`"v1"`, `"ConfigMap"`, "unknown kind"},
	},
	{
		name:     "kind of another group",
		data:     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {}\n",
		want:     DecodeError{Doc: 1, Kind: "Deployment"},
		mentions: []string{`"apps/v1"`, `"Deployment"`},
	},
	{
		name:     "EnvoyFilter has no v1",
		data:     "apiVersion: networking.istio.io/v1\nkind: EnvoyFilter\nmetadata: {name: x}\nspec: {}\n",
		want:     DecodeError{Doc: 1, Kind: "EnvoyFilter"},
		mentions: []string{"unknown kind"},
	},
	{
		name: "missing apiVersion",
		data: "kind: ServiceEntry\nmetadata: {name: x}\nspec: {}\n",
		want: DecodeError{Doc: 1, Field: "apiVersion"}, mentions: []string{"missing"},
	},
	{
		name: "missing name",
		data: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {namespace: a}\nspec: {}\n",
		want: DecodeError{Doc: 1, Line: 1, Kind: "Gateway", Field: "metadata.name"}, mentions: []string{"missing"},
	},
	{
		name: "name with a slash",
		data: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: a/b}\nspec: {}\n",
		want: DecodeError{Doc: 1, Kind: "Gateway", Field: "metadata.name"}, mentions: []string{"a/b"},
	},
	{
		name: "missing spec",
		data: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw}\n",
		want: DecodeError{Doc: 1, Kind: "Gateway", Name: "default/gw", Field: "spec"}, mentions: []string{"missing"},
	},
	{
		name: "label that is a number",
		data: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n  labels:\n    version: 1\nspec: {}\n",
		want: DecodeError{Doc: 1, Line: 6, Column: 5, Kind: "Gateway", Name: "default/gw", Field: "metadata.labels.version"}, mentions: []string{"must be a string"},
	},
	{
		name: "annotation key with dots",
		data: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n  annotations:\n    example.com/x: true\nspec: {}\n",
		want: DecodeError{Doc: 1, Line: 6, Column: 5, Kind: "Gateway", Name: "default/gw", Field: `metadata.annotations["example.com/x"]`},
	},
	{
		name: "unknown metadata field",
		data: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n  lables: {a: b}\nspec: {}\n",
		want: DecodeError{Doc: 1, Kind: "Gateway", Name: "default/gw", Field: "metadata.lables"}, mentions: []string{"unknown field"},
	},
	{
		name: "bad creationTimestamp",
		data: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n  creationTimestamp: yesterday\nspec: {}\n",
		want: DecodeError{Doc: 1, Kind: "Gateway", Name: "default/gw", Field: "metadata.creationTimestamp"}, mentions: []string{"RFC 3339"},
	},
	{
		name:     "YAML syntax, line in the file",
		data:     reviewsSE + "---\n# c\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n   bad: indent\n",
		want:     DecodeError{Doc: 2, Line: 26}, // the parser's line, in the file; it gives no column
		mentions: []string{"line 26"},
	},
	{
		name:     "duplicate YAML key",
		data:     "apiVersion: networking.istio.io/v1\nkind: Gateway\nkind: Gateway\n",
		want:     DecodeError{Doc: 1},
		mentions: []string{`"kind" already set`},
	},
	{
		name: "not a mapping",
		data: "- a\n- b\n",
		want: DecodeError{Doc: 1}, mentions: []string{"mapping"},
	},
	{
		name:     "same name twice",
		data:     reviewsSE + "---\n" + reviewsSE,
		want:     DecodeError{Doc: 2, Line: 24, Column: 3, Kind: "ServiceEntry", Name: "bookinfo/reviews", Field: "metadata.name"},
		mentions: []string{"already defined in document 1"},
	},
	{
		name: "wrong type for a duration",
		data: "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs}\nspec:\n  http:\n  - timeout: soon\n",
		want: DecodeError{Doc: 1, Line: 6, Column: 5, Kind: "VirtualService", Name: "default/vs", Field: "spec.http[0].timeout"},
	},
}

func TestDecodeErrors(t *testing.T) {
	for _, tt := range decodeErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			objs, errs := Decode([]byte(tt.data), "dir/file.yaml")
			var de *DecodeError
			if len(errs) != 1 || !errors.As(errs[0], &de) {
				t.Fatalf("errors = %v, want one *DecodeError", errs)
			}
			if tt.name == "same name twice" && len(objs) != 1 {
				t.Errorf("objects = %d, want the first of the two kept", len(objs))
			}
			if de.File != "dir/file.yaml" || de.Doc != tt.want.Doc || de.Kind != tt.want.Kind ||
				de.Name != tt.want.Name || de.Field != tt.want.Field ||
				(tt.want.Line != 0 && (de.Line != tt.want.Line || de.Column != tt.want.Column)) {
				t.Errorf("error = %+v\nwant    %+v", *de, tt.want)
			}
			text := de.Error()
			mentions := append([]string{"dir/file.yaml", fmt.Sprintf("document %d", tt.want.Doc), tt.want.Kind, tt.want.Name, tt.want.Field}, tt.mentions...)
			for _, m := range mentions {
				if !strings.Contains(text, m) {
					t.Errorf("error text %q does not mention %q", text, m)
				}
			}
			if strings.Contains(text, "(line 1:") || strings.Contains(text, ": :") {
				t.Errorf("error text %q has protojson's position in the internal JSON", text)
			}
		})
	}
}

// TestDecodeKeepsGoodDocuments: one faulty document does not stop the others from decoding.
func TestDecodeKeepsGoodDocuments(t *testing.T) {
	data := reviewsSE + "---\nnot: [valid\n---\n" + strings.Replace(reviewsSE, "name: reviews", "name: ratings", 1)
	objs, errs := Decode([]byte(data), "f.yaml")
	if len(objs) != 2 || len(errs) != 1 {
		t.Fatalf("objects %d, errors %v; want 2 objects and 1 error", len(objs), errs)
	}
	if objs[1].Doc != 3 {
		t.Errorf("third document numbered %d", objs[1].Doc)
	}
}

func TestDecodeEmpty(t *testing.T) {
	for _, data := range []string{"", "\n\n", "# nothing\n", "---\n---\n", "\xef\xbb\xbf", "null\n", "---\n~\n"} {
		objs, errs := Decode([]byte(data), "empty.yaml")
		if len(objs) != 0 || len(errs) != 0 {
			t.Errorf("Decode(%q) = %v, %v; want nothing", data, objs, errs)
		}
	}
}

func TestJSONPathAt(t *testing.T) {
	const js = `{"a":1,"b":{"c":[10,{"d":"x","e.f":[true]}],"g":null},"h":"end"}`
	tests := []struct {
		at   string // the first occurrence of at in js is the offset
		want string
	}{
		{`"a"`, ".a"},
		{`1,`, ".a"},
		{`"c"`, ".b.c"},
		{`10`, ".b.c[0]"},
		{`"x"`, ".b.c[1].d"},
		{`true`, `.b.c[1]["e.f"][0]`},
		{`null`, ".b.g"},
		{`"end"`, ".h"},
	}
	for _, tt := range tests {
		pos := strings.Index(js, tt.at)
		if got := jsonPathAt([]byte(js), pos); got != tt.want {
			t.Errorf("jsonPathAt(%q) = %q, want %q", tt.at, got, tt.want)
		}
	}
	if got := jsonPathAt([]byte(js), len(js)+10); got != "" {
		t.Errorf("past the end: %q", got)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(reviewsSE))
	f.Add([]byte(reviewsSE + "---\n" + reviewsSE))
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs}\nspec:\n  http:\n  - timeout: soon\n"))
	f.Add([]byte("--- |\n  text\n...\n---\n- [a, {b: c}]\n"))
	f.Add([]byte("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: a\n  labels: {x: 1}\nspec: {}\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("--- {apiVersion: networking.istio.io/v1, kind: Gateway, metadata: {name: g}, spec: {b: &b {x: 1}, c: {<<: *b}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, errs := Decode(data, "fuzz.yaml")
		for _, err := range errs {
			var de *DecodeError
			if !errors.As(err, &de) || de.File != "fuzz.yaml" || de.Doc < 1 || de.Err == nil {
				t.Fatalf("error %v is not a *DecodeError naming the file and the document", err)
			}
			// A line break is at least a byte, whatever YAML takes for one.
			if de.Line < 1 || de.Line > len(data)+1 || de.Column < 0 {
				t.Fatalf("error %v is at %d:%d, outside the file", err, de.Line, de.Column)
			}
		}
		for _, o := range objs {
			if o.Name() == "" || !strings.Contains(o.Name(), "/") {
				t.Fatalf("object without namespace/name: %q", o.Name())
			}
			if err := kinds.ValidateResource(o.Kind.Collection, o.Resource); err != nil {
				t.Fatalf("decoded object does not validate: %v", err)
			}
		}
	})
}

// thousandServiceEntries is a file of 1,000 ServiceEntries, as a large mesh's files hold them.
func thousandServiceEntries() []byte {
	var sb strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&sb, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: svc-%d
  namespace: bench
  labels:
    app: svc-%d
spec:
  hosts:
  - svc-%d.bench.svc.cluster.local
  location: MESH_INTERNAL
  ports:
  - number: 9080
    name: http
    protocol: HTTP
  resolution: STATIC
  endpoints:
  - address: 10.1.%d.%d
    labels:
      version: v1
`, i, i, i, i/250, i%250+1)
	}
	return []byte(sb.String())
}

func BenchmarkDecode(b *testing.B) {
	data := thousandServiceEntries()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		objs, errs := Decode(data, "bench.yaml")
		if len(objs) != 1000 || len(errs) != 0 {
			b.Fatalf("%d objects, errors %v", len(objs), errs)
		}
	}
}

// BenchmarkReadFile reads a file of 1,000 ServiceEntries as a load does: decoded, encoded
// and indexed by name.
func BenchmarkReadFile(b *testing.B) {
	data := thousandServiceEntries()
	path := filepath.Join(b.TempDir(), "services.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var f fileState
		if _, decoded := f.refresh(path, true); !decoded || len(f.objects) != 1000 {
			b.Fatalf("decoded %v, %d objects, faults %v", decoded, len(f.objects), f.faults)
		}
	}
}

// Istio reads durations with the older jsonpb, which takes Go's form; its documentation
// writes "interval: 5m". Such files decode here too, and mean the same.
// durationsDR is a DestinationRule with durations in both forms.
const durationsDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  trafficPolicy:
    connectionPool:
      tcp: {connectTimeout: 250ms}
    outlierDetection: {interval: 5m, baseEjectionTime: 1.5s}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      outlierDetection: {interval: 1h30m}
`

func TestDurationsInGoFormDecodeAsIstioReadsThem(t *testing.T) {
	doc := durationsDR
	objs, errs := Decode([]byte(doc), "dr.yaml")
	if len(errs) != 0 {
		t.Fatalf("faults: %v", errs)
	}
	var dr networking.DestinationRule
	if err := objs[0].Resource.Body.UnmarshalTo(&dr); err != nil {
		t.Fatal(err)
	}
	tp := dr.TrafficPolicy
	checks := map[string][2]time.Duration{
		"connectTimeout":      {tp.ConnectionPool.Tcp.ConnectTimeout.AsDuration(), 250 * time.Millisecond},
		"interval":            {tp.OutlierDetection.Interval.AsDuration(), 5 * time.Minute},
		"baseEjectionTime":    {tp.OutlierDetection.BaseEjectionTime.AsDuration(), 1500 * time.Millisecond},
		"subsets[0] interval": {dr.Subsets[0].TrafficPolicy.OutlierDetection.Interval.AsDuration(), 90 * time.Minute},
	}
	for what, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %s, want %s", what, c[0], c[1])
		}
	}
	// A duration that is neither form is still a fault naming the field.
	_, errs = Decode([]byte(strings.Replace(doc, "interval: 5m", "interval: soon", 1)), "dr.yaml")
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "outlierDetection.interval") {
		t.Fatalf("bad duration: %v", errs)
	}
}

// FuzzDecodeJSON: an object as a Kubernetes API server returns it (the Kubernetes source's
// input) decodes to a valid resource or to faults naming the origin, never a panic.
func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","uid":"x","managedFields":[]},"spec":{"hosts":["a.example.com"],"ports":[{"number":80,"name":"http"}]},"status":{}}`))
	f.Add([]byte(`{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"v"},"spec":{"http":[{"timeout":"soon"}]}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, errs := DecodeJSON(data, "kubernetes")
		if (obj == nil) == (len(errs) == 0) {
			t.Fatalf("object %v with faults %v: want exactly one of them", obj, errs)
		}
		for _, err := range errs {
			var de *DecodeError
			if !errors.As(err, &de) || de.File != "kubernetes" || de.Err == nil {
				t.Fatalf("fault %v is not a *DecodeError naming the origin", err)
			}
		}
		if obj != nil {
			if err := kinds.ValidateResource(obj.Kind.Collection, obj.Resource); err != nil {
				t.Fatalf("decoded object does not validate: %v", err)
			}
		}
	})
}

func TestDecodeJSONNamesKindNameAndField(t *testing.T) {
	_, errs := DecodeJSON([]byte(`{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry","metadata":{"name":"bad","namespace":"shop"},"spec":{"hosts":["b.example.com"],"ports":[{"number":80,"name":"http"}],"resolution":"STATIC","endpoints":[{"address":"not-an-ip.example.com"}]}}`), "kubernetes")
	if len(errs) == 0 {
		t.Fatal("an invalid object decoded")
	}
	var de *DecodeError
	if !errors.As(errs[0], &de) || de.Kind != "ServiceEntry" || de.Name != "shop/bad" || !strings.HasPrefix(de.Field, "spec.endpoints[0]") {
		t.Fatalf("fault %v: want it to name ServiceEntry shop/bad and spec.endpoints[0]", errs[0])
	}
	if !strings.HasPrefix(errs[0].Error(), "kubernetes: ServiceEntry shop/bad: field spec.endpoints[0]") {
		t.Fatalf("fault text %q", errs[0])
	}
}

// splitDocumentsByLine is splitDocuments as the rule says it, each line asked whether it is
// a marker: the reference the splitter, which asks only lines that start with '-' or '.', is
// held to.
func splitDocumentsByLine(data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var docs []document
	start, startLine, startCol := 0, 1, 0
	for off, line := 0, 1; off < len(data); line++ {
		end := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			end = off + i + 1
		}
		if isMarker(data[off:end]) {
			docs = append(docs, document{text: data[start:off], line: startLine, col: startCol})
			start, startLine, startCol = off+3, line, 3
			if isBlank(data[start:end]) {
				start, startLine, startCol = end, line+1, 0
			}
		}
		off = end
	}
	return append(docs, document{text: data[start:], line: startLine, col: startCol})
}

// splitsAgree fails t unless splitDocuments splits data as a walk of its lines does.
func splitsAgree(t *testing.T, data []byte) {
	t.Helper()
	got, want := splitDocuments(data), splitDocumentsByLine(data)
	if len(got) != len(want) {
		t.Fatalf("%q: %d documents, want %d", data, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].text, want[i].text) || got[i].line != want[i].line || got[i].col != want[i].col {
			t.Fatalf("%q: document %d is %q at %d:%d, want %q at %d:%d", data, i,
				got[i].text, got[i].line, got[i].col, want[i].text, want[i].line, want[i].col)
		}
	}
}

func TestSplitDocumentsFindsTheMarkersALineWalkFinds(t *testing.T) {
	for _, data := range []string{
		"", "---", "---\n", "...", "a: 1\n---\nb: 2\n", "--- # c\na: 1\n...\n---\nb: 2",
		"--- {a: 1}\n--- [b]\n", "----\n---x\n--- \n...\t\n", "a: '\n---'\n", "\n\n---\r\nx\n",
		"\xef\xbb\xbf---\na\n", "a\n-- -\n.. .\n---", "a\n...\n...\n---\n---\n", "x\n--", "x\n..",
	} {
		splitsAgree(t, []byte(data))
	}
	splitsAgree(t, thousandServiceEntries())
}

// TestSplitDocumentsAgreesOnRandomLines: streams of random lines, markers of both kinds with
// and without what may follow them, lines that start like markers and are not, list items,
// blank and comment lines, CRLF, byte order marks, a last line without its line break.
func TestSplitDocumentsAgreesOnRandomLines(t *testing.T) {
	lines := []string{"---", "--- ", "--- # c", "--- {a: 1}", "---x", "--", "-", "- a", "-- -", "...", "... ", "....", ".", ".a",
		"a: b", "", " ", "# c", "  - c: d", "---\r", "...\r", "\t---", " ---", "#---", "\xef\xbb\xbf---"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		var b strings.Builder
		if r.IntN(8) == 0 {
			b.WriteString("\xef\xbb\xbf")
		}
		for range r.IntN(12) {
			b.WriteString(lines[r.IntN(len(lines))])
			b.WriteString("\n")
		}
		data := []byte(b.String())
		if r.IntN(2) == 0 {
			data = bytes.TrimSuffix(data, []byte("\n"))
		}
		splitsAgree(t, data)
	}
}

// BenchmarkSplitDocuments splits a file of 1,000 ServiceEntries.
func BenchmarkSplitDocuments(b *testing.B) {
	data := thousandServiceEntries()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if d := splitDocuments(data); len(d) < 1000 {
			b.Fatalf("%d documents", len(d))
		}
	}
}

func FuzzSplitDocuments(f *testing.F) {
	f.Add([]byte("a: 1\n---\nb: 2\n...\n--- # c\n"))
	f.Add([]byte("--- {a: 1}\n----\n...x\n"))
	f.Fuzz(func(t *testing.T, data []byte) { splitsAgree(t, data) })
}
