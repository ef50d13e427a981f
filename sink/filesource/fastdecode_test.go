package filesource

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

// seedDoc is a document for the fast decoder's tests; fast: the fast path must take it.
type seedDoc struct {
	name string
	fast bool
	doc  string
}

// seedDocs exercise what the fast decoder reads (durations in both forms, wrappers, maps, enums,
// nested lists, fields by their proto names) and what it leaves to the general path.
var seedDocs = []seedDoc{
	{"ServiceEntry", true, reviewsSE},
	// The wire encoder's cases (fastwire.go): a map's zero values and empty keys' values, an
	// empty string in a repeated field, zero scalars left out, an enum by number, a oneof
	// after the plain fields, a nested message over 127 bytes (a two-byte length).
	{"wire edge cases", true, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: edges
  namespace: ns
spec:
  hosts:
  - a.example.com
  - ""
  exportTo:
  - ""
  - "."
  ports:
  - number: 0
    name: ""
    protocol: HTTP
    targetPort: 0
  - number: 8080
    name: http
    protocol: HTTP
  resolution: 1
  location: MESH_EXTERNAL
  endpoints:
  - address: 10.0.0.1
    ports:
      http: 0
      grpc: 9090
    labels:
      app: ""
      version: v1
      zone: us-east-1a-very-long-label-value-that-makes-the-endpoint-longer-than-one-hundred-twenty-seven-bytes
    weight: 0
    locality: ""
`},
	{"oneof after plain fields", true, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: lb
  namespace: ns
spec:
  host: a.example.com
  trafficPolicy:
    loadBalancer:
      warmupDurationSecs: 10s
      simple: LEAST_REQUEST
      localityLbSetting:
        enabled: false
    connectionPool:
      tcp:
        maxConnections: 0
        connectTimeout: 0s
      http:
        http1MaxPendingRequests: 1
        maxRetries: 0
`},
	{"PeerAuthentication with ignored metadata", true, `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: strict
  resourceVersion: "42"
  creationTimestamp: "2024-05-06T07:08:09Z"
  uid: 7c9d2e0b-1111-2222-3333-444455556666
  generation: 3
  managedFields:
  - manager: kubectl
spec:
  mtls:
    mode: STRICT
status:
  conditions:
  - type: Ready
`},
	{"DestinationRule, durations in both forms, wrappers, enums", true, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: bookinfo
  creationTimestamp: null
spec:
  host: reviews.bookinfo.svc.cluster.local
  exportTo:
  - "."
  - istio-system
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: 100
        connectTimeout: 250ms
        tcpKeepalive:
          time: 2h
          interval: 75s
          probes: 9
        maxConnectionDuration: 1h30m
      http:
        http1MaxPendingRequests: 64
        maxRequestsPerConnection: 10
        idleTimeout: 1.5s
        h2UpgradePolicy: UPGRADE
        useClientProtocol: true
        maxRetries: 3
    loadBalancer:
      simple: LEAST_REQUEST
      localityLbSetting:
        enabled: false
        distribute:
        - from: us-west/zone1/*
          to:
            us-west/zone1/*: 80
            us-west/zone2/*: 20
      warmupDurationSecs: 30s
    outlierDetection:
      consecutive5xxErrors: 5
      consecutiveGatewayErrors: 0
      interval: 5m
      baseEjectionTime: 0.000000001s
      maxEjectionPercent: 50
      minHealthPercent: 10
      splitExternalLocalOriginErrors: True
    tls:
      mode: ISTIO_MUTUAL
      sni: reviews.example
      insecureSkipVerify: FALSE
  subsets:
  - name: v1
    labels:
      version: v1
    trafficPolicy:
      loadBalancer:
        consistentHash:
          ringHash:
            minimumRingSize: 1024
          httpHeaderName: x-user
      outlierDetection:
        interval: 1h
`},
	{"DestinationRule, fields by proto name", true, `apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata:
  name: by-proto-name
spec:
  host: ratings
  traffic_policy:
    connection_pool:
      tcp:
        connect_timeout: 10s
    outlier_detection:
      consecutive_5xx_errors: 7
      base_ejection_time: 30s
`},
	{"VirtualService, nested lists, header maps, retries, fault, mirror", true, `apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata:
  name: reviews
  namespace: bookinfo
  labels:
    app: reviews
  annotations:
    example.com/owner: team-a
spec:
  hosts:
  - reviews
  gateways:
  - mesh
  http:
  - name: jason
    match:
    - headers:
        end-user:
          exact: jason
        x-canary:
          prefix: "yes"
      uri:
        prefix: /api
      ignoreUriCase: true
    - queryParams:
        debug:
          regex: ^1$
    route:
    - destination:
        host: reviews
        subset: v2
        port:
          number: 9080
      weight: 80
      headers:
        request:
          set:
            x-route: jason
          remove:
          - x-internal
    - destination:
        host: reviews
        subset: v3
      weight: 20
    timeout: 10s
    retries:
      attempts: 3
      perTryTimeout: 2s
      retryOn: 5xx,reset,connect-failure
      retryRemoteLocalities: true
    fault:
      delay:
        fixedDelay: 7s
        percentage:
          value: 10
      abort:
        httpStatus: 503
        percentage:
          value: 1
    mirror:
      host: reviews-shadow
    mirrorPercentage:
      value: 100
    corsPolicy:
      allowOrigins:
      - exact: https://example.com
      allowMethods:
      - GET
      maxAge: 24h
      allowCredentials: false
  tcp:
  - match:
    - port: 3306
    route:
    - destination:
        host: mysql
`},
	{"Gateway with TLS", true, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: istio-system
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: 443
      name: https
      protocol: HTTPS
    hosts:
    - "*.example.com"
    tls:
      mode: SIMPLE
      credentialName: example-cert
      minProtocolVersion: TLSV1_2
      cipherSuites:
      - ECDHE-RSA-AES256-GCM-SHA384
  - port:
      number: 80
      name: http
      protocol: HTTP
    hosts:
    - "*"
    tls:
      httpsRedirect: true
`},
	{"WorkloadEntry with a port map and weight", true, `apiVersion: networking.istio.io/v1beta1
kind: WorkloadEntry
metadata:
  name: vm-1
  namespace: bookinfo
spec:
  address: 10.10.1.1
  ports:
    http: 9080
    grpc: 4294967295
  labels:
    app: reviews
  serviceAccount: bookinfo-reviews
  weight: 2
`},
	{"AuthorizationPolicy with nested rules", true, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: httpbin
  namespace: foo
spec:
  selector:
    matchLabels:
      app: httpbin
  action: DENY
  rules:
  - from:
    - source:
        principals:
        - cluster.local/ns/default/sa/sleep
        notNamespaces:
        - dev
    to:
    - operation:
        methods:
        - GET
        paths:
        - /info*
        ports:
        - "8080"
    when:
    - key: request.auth.claims[iss]
      values:
      - https://accounts.google.com
`},
	{"enum by number, one with no name", true, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: numbered
spec:
  hosts:
  - a.example
  resolution: 99
  location: 1
`},
	{"durations in many spellings", true, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: durations
spec:
  hosts:
  - d
  http:
  - timeout: 0s
  - timeout: 1h
  - timeout: 1.5h
  - timeout: 300ms
  - timeout: 1us
  - timeout: 1µs
  - timeout: 2562047h
  - timeout: 1h0m0.5s
  - timeout: 100000000s
  - timeout: 0.123456789s
  - timeout: 315576000000s
  - timeout: "10s"
  - timeout: '1m'
`},
	{"64-bit integers and a maglev table", true, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: hashes
spec:
  host: h
  trafficPolicy:
    loadBalancer:
      consistentHash:
        maglev:
          tableSize: 999999999999999
        useSourceIp: true
`},
	{"Sidecar with an outbound traffic policy", true, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: default
  namespace: istio-config
spec:
  egress:
  - hosts:
    - ./*
    - istio-system/*
  outboundTrafficPolicy:
    mode: REGISTRY_ONLY
`},
	{"EnvoyFilter: its patch is a Struct, left to protojson", false, `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata:
  name: lua
  namespace: istio-system
spec:
  workloadSelector:
    labels:
      istio: ingressgateway
  priority: 10
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: GATEWAY
      listener:
        portNumber: 8080
        filterChain:
          filter:
            name: envoy.filters.network.http_connection_manager
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.lua
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          inlineCode: x
`},
	{"PeerAuthentication: portLevelMtls has integer keys", false, `apiVersion: security.istio.io/v1beta1
kind: PeerAuthentication
metadata:
  name: ports
spec:
  mtls:
    mode: PERMISSIVE
  portLevelMtls:
    8080:
      mode: DISABLE
`},
	{"a duration in neither form", false, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\nspec:\n  http:\n  - timeout: soon\n"},
	{"a duration protojson reads but the fast path leaves", false, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\nspec:\n  http:\n  - timeout: .5s\n"},
	{"a negative duration", false, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\nspec:\n  http:\n  - timeout: -5m\n"},
	{"a duration out of range", false, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\nspec:\n  http:\n  - timeout: 315576000001s\n"},
	{"an int32 out of range", false, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\nspec:\n  http:\n  - retries:\n      attempts: 2147483648\n"},
	{"a uint32 out of range", false, strings.Replace(reviewsSE, "number: 9080", "number: 4294967296", 1)},
	{"a quoted number", false, strings.Replace(reviewsSE, "number: 9080", `number: "9080"`, 1)},
	{"a null field", false, strings.Replace(reviewsSE, "  resolution: STATIC\n", "  resolution:\n", 1)},
	{"a field under both its names", false, reviewsSE + "  export_to:\n  - a\n  exportTo:\n  - b\n"},
	{"two members of a oneof", false, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\nspec:\n  http:\n  - match:\n    - uri:\n        exact: /a\n        prefix: /b\n"},
	{"an unknown field", false, reviewsSE + "  colour: blue\n"},
	{"a string for a bool", false, "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\nspec:\n  servers:\n  - tls:\n      httpsRedirect: \"true\"\n"},
	{"a label that is a boolean", false, strings.Replace(reviewsSE, "app: reviews", "app: true", 1)},
	{"a name with a slash", false, strings.Replace(reviewsSE, "name: reviews", "name: a/b", 1)},
	{"a bad creationTimestamp", false, strings.Replace(reviewsSE, "  namespace: bookinfo\n", "  namespace: bookinfo\n  creationTimestamp: yesterday\n", 1)},
	{"an unknown top-level field", false, reviewsSE + "extra: 1\n"},
	{"an unknown kind", false, strings.Replace(reviewsSE, "kind: ServiceEntry", "kind: ServiceEntryy", 1)},
	{"no spec", false, "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n"},
}

// seedFiles are the fuzz seeds: the seed documents, the test documents of the package, and the
// repository's example files.
func seedFiles(t testing.TB) [][]byte {
	var out [][]byte
	for _, s := range seedDocs {
		out = append(out, []byte(s.doc))
	}
	for _, tt := range decodeErrorTests {
		out = append(out, []byte(tt.data))
	}
	out = append(out, []byte(durationsDR), []byte(strictPA))
	for _, file := range exampleFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

func exampleFiles(t testing.TB) []string {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example files")
	}
	return files
}

// FuzzFastDecodeAgreesWithGeneral: whatever document the fast decoder accepts, the general path
// accepts too and decodes to the same object.
func FuzzFastDecodeAgreesWithGeneral(f *testing.F) {
	for _, data := range seedFiles(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range splitDocuments(data) {
			if !isBlank(d.text) {
				fastAgrees(t, d.text)
			}
		}
	})
}

// fastAgrees decodes one document both ways, fails t if they differ where the fast path
// accepts, and reports whether it did.
func fastAgrees(t testing.TB, text []byte) bool {
	t.Helper()
	p := &fastYAML{}
	if !p.parse(text) || p.null() {
		return false
	}
	fast := &docDecoder{file: "f.yaml", doc: 2, line: 3}
	got, _, ok := fast.fastDecode(p)
	if !ok {
		return false
	}
	// As the file source reads: the tree's strings views into the text, and the encoding
	// appended to a block of the file's, here one too small, so that it outgrows it.
	pv := &fastYAML{views: true, values: make([]byte, 0, 16)}
	if !pv.parse(text) {
		t.Fatalf("parsed with copies, not with views:\n%s", text)
	}
	gotViews, _, ok := (&docDecoder{file: "f.yaml", doc: 2, line: 3}).fastDecode(pv)
	if !ok {
		t.Fatalf("refused with views, taken with copies:\n%s", text)
	}
	if !proto.Equal(gotViews.Resource, got.Resource) {
		t.Fatalf("with views: %v; with copies: %v\n%s", gotViews.Resource, got.Resource, text)
	}
	// The fast path's encodings are not checked for well-formedness before its kind's fast
	// validation reads them (Kind.SurelyValidWellFormed): they must be so as written.
	if err := got.Kind.CheckBody(got.Resource.GetBody().GetValue()); err != nil {
		t.Fatalf("the fast path wrote a body proto.Unmarshal refuses: %v\n%s", err, text)
	}
	// The general path as it reads a document with the YAML decoder, and as it reads it with
	// the fast parser's JSON.
	for _, js := range [][]byte{nil, p.json()} {
		general := &docDecoder{file: "f.yaml", doc: 2, line: 3}
		want, _, err := general.decodeGeneral(text, js)
		if err != nil || want == nil {
			t.Fatalf("the fast path accepted what the general path rejects (%v):\n%s", err, text)
		}
		if got.Kind != want.Kind || got.File != want.File || got.Doc != want.Doc || got.Line != want.Line {
			t.Fatalf("fast path: %s in %s doc %d line %d; general: %s in %s doc %d line %d\n%s",
				got.Kind.Kind, got.File, got.Doc, got.Line, want.Kind.Kind, want.File, want.Doc, want.Line, text)
		}
		if !proto.Equal(got.Resource.GetMetadata(), want.Resource.GetMetadata()) {
			t.Fatalf("metadata: fast path %v, general %v\n%s", got.Resource.GetMetadata(), want.Resource.GetMetadata(), text)
		}
		gb, wb := got.Resource.GetBody(), want.Resource.GetBody()
		if gb.GetTypeUrl() != wb.GetTypeUrl() || !bytes.Equal(gb.GetValue(), wb.GetValue()) {
			t.Fatalf("body: fast path %s %x, general %s %x\n%s", gb.GetTypeUrl(), gb.GetValue(), wb.GetTypeUrl(), wb.GetValue(), text)
		}
		if fast.kind != general.kind || fast.name != general.name {
			t.Fatalf("names for faults: fast path %q %q, general %q %q", fast.kind, fast.name, general.kind, general.name)
		}
	}
	return true
}

// TestFastDecodeTakesCommonDocuments: the fast path takes the documents operators write, so
// that it cannot fall back on everything unnoticed: every document of the examples, and the
// seed documents marked fast; and it leaves the others to the general path.
func TestFastDecodeTakesCommonDocuments(t *testing.T) {
	for _, file := range exampleFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range splitDocuments(data) {
			if !isBlank(d.text) && !fastAgrees(t, d.text) {
				t.Errorf("%s line %d: the fast path refused:\n%s", file, d.line, d.text)
			}
		}
	}
	for _, s := range seedDocs {
		if took := fastAgrees(t, []byte(s.doc)); took != s.fast {
			t.Errorf("%s: the fast path took it: %v, want %v", s.name, took, s.fast)
		}
	}
}

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in    string
		secs  int64
		nanos int32
		ok    bool
	}{
		{"0s", 0, 0, true},
		{"10s", 10, 0, true},
		{"1.5s", 1, 500000000, true},
		{"0.000000001s", 0, 1, true},
		{"315576000000s", 315576000000, 0, true},
		{"315576000001s", 0, 0, false},
		{"0.0000000001s", 0, 0, false},
		{"05s", 0, 0, false},
		{".5s", 0, 0, false},
		{"1.s", 0, 0, false},
		{"-1s", 0, 0, false},
		{"+1s", 0, 0, false},
		{"1e3s", 0, 0, false},
		{"s", 0, 0, false},
		{"5m", 0, 0, false},
		{"99999999999999999999s", 0, 0, false},
	}
	for _, tt := range tests {
		secs, nanos, ok := parseSeconds(tt.in)
		if secs != tt.secs || nanos != tt.nanos || ok != tt.ok {
			t.Errorf("parseSeconds(%q) = %d, %d, %v; want %d, %d, %v", tt.in, secs, nanos, ok, tt.secs, tt.nanos, tt.ok)
		}
	}
}

func BenchmarkFastDecodeExamples(b *testing.B) {
	var data []byte
	for _, file := range exampleFiles(b) {
		d, err := os.ReadFile(file)
		if err != nil {
			b.Fatal(err)
		}
		data = append(append(data, "---\n"...), d...)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := Decode(data, "examples.yaml"); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}

// TestPlainServiceEntryIsValidatedInPlace: a plain ServiceEntry's body is validated as it is
// encoded (Kind.SurelyValidWellFormed), without building its message; one the in-place check cannot
// vouch for is built and validated whole, and its fault is still reported by field.
func TestPlainServiceEntryIsValidatedInPlace(t *testing.T) {
	decodeSpec := func(text string) proto.Message {
		t.Helper()
		p := &fastYAML{}
		if !p.parse([]byte(text)) {
			t.Fatalf("the fast parser refuses:\n%s", text)
		}
		_, msg, ok := (&docDecoder{file: "f.yaml"}).fastDecode(p)
		if !ok {
			t.Fatalf("the fast path refuses:\n%s", text)
		}
		return msg
	}
	if msg := decodeSpec(reviewsSE); msg != surelyValid {
		t.Errorf("a plain ServiceEntry was decoded to %T to be validated", msg)
	}
	if objs, errs := Decode([]byte(reviewsSE), "f.yaml"); len(objs) != 1 || len(errs) != 0 {
		t.Errorf("Decode = %d objects, %v; want the ServiceEntry", len(objs), errs)
	}
	badPort := strings.Replace(reviewsSE, "number: 9080", "number: 0", 1)
	if msg := decodeSpec(badPort); msg == surelyValid {
		t.Fatal("a ServiceEntry with port 0 was vouched for")
	}
	_, errs := Decode([]byte(badPort), "f.yaml")
	var de *DecodeError
	if len(errs) != 1 || !errors.As(errs[0], &de) || !strings.HasPrefix(de.Field, "spec.ports[0]") {
		t.Errorf("port 0: errors %v; want one naming spec.ports[0]", errs)
	}
}
