package kinds

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensions "istio.io/api/extensions/v1alpha1"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// sampleBodies holds one valid, non-empty body per kind: valid as istiod validates it.
var sampleBodies = map[string]proto.Message{
	"ServiceEntry": &networking.ServiceEntry{
		Hosts:      []string{"reviews.bookinfo.svc.cluster.local"},
		Ports:      []*networking.ServicePort{{Number: 9080, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_DNS,
	},
	"VirtualService": &networking.VirtualService{
		Hosts: []string{"reviews"},
		Http:  []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews"}}}}},
	},
	"DestinationRule": &networking.DestinationRule{Host: "reviews"},
	"Gateway": &networking.Gateway{
		Selector: map[string]string{"istio": "ingressgateway"},
		Servers:  []*networking.Server{{Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*/bookinfo.example.com"}}},
	},
	"Sidecar":       &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}}}},
	"EnvoyFilter":   &networking.EnvoyFilter{Priority: 3},
	"WorkloadEntry": &networking.WorkloadEntry{Address: "10.0.0.1"},
	"WorkloadGroup": &networking.WorkloadGroup{Template: &networking.WorkloadEntry{Network: "n1"}},
	"AuthorizationPolicy": &security.AuthorizationPolicy{
		Action: security.AuthorizationPolicy_DENY,
		Rules:  []*security.Rule{{To: []*security.Rule_To{{Operation: &security.Operation{Paths: []string{"/admin"}}}}}},
	},
	"PeerAuthentication": &security.PeerAuthentication{
		Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT},
	},
	"RequestAuthentication": &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: "me"}}},
	"ProxyConfig":           &networkingv1beta1.ProxyConfig{Concurrency: wrapperspb.Int32(2)},
	"Telemetry": &telemetry.Telemetry{
		Tracing: []*telemetry.Tracing{{RandomSamplingPercentage: wrapperspb.Double(10)}},
	},
	"WasmPlugin": &extensions.WasmPlugin{Url: "oci://ghcr.io/example/filter:1.0"},
	"TrafficExtension": &extensions.TrafficExtension{
		FilterConfig: &extensions.TrafficExtension_Lua{Lua: &extensions.LuaConfig{InlineCode: "function envoy_on_request(h) end"}},
	},
}

// acceptsEmptySpec are the kinds whose empty spec istiod accepts.
var acceptsEmptySpec = map[string]bool{
	"EnvoyFilter": true, "AuthorizationPolicy": true, "PeerAuthentication": true,
	"RequestAuthentication": true, "ProxyConfig": true, "Telemetry": true,
}

func resourceOf(t testing.TB, m proto.Message) *mcpapi.Resource {
	t.Helper()
	body, err := anypb.New(m)
	if err != nil {
		t.Fatalf("anypb.New(%T): %v", m, err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "ns/name"}, Body: body}
}

// truncated is a length-delimited field 1 that announces 5 bytes and carries 1: no message of
// any kind unmarshals it.
var truncated = []byte{0x0a, 0x05, 'a'}

func TestValidateResource(t *testing.T) {
	for _, row := range contractTable {
		sample := sampleBodies[row.kind]
		if sample == nil {
			t.Fatalf("no sample body for %s", row.kind)
		}
		// A body of another kind: the next one in the table.
		other := sampleBodies[contractTable[(indexOf(row.kind)+1)%len(contractTable)].kind]

		for _, coll := range append([]string{row.collection}, row.aliasCollections...) {
			t.Run(coll, func(t *testing.T) {
				if err := ValidateResource(coll, resourceOf(t, sample)); err != nil {
					t.Errorf("valid %s body: %v", row.kind, err)
				}
				err := ValidateResource(coll, resourceOf(t, sample.ProtoReflect().Type().New().Interface()))
				if acceptsEmptySpec[row.kind] && err != nil {
					t.Errorf("empty %s body: %v", row.kind, err)
				} else if !acceptsEmptySpec[row.kind] {
					var invalid *InvalidError
					if !errors.As(err, &invalid) {
						t.Errorf("empty %s body: %v, want an *InvalidError: istiod refuses it", row.kind, err)
					}
				}

				err = ValidateResource(coll, resourceOf(t, other))
				wantErr(t, err, "mismatched Any type", row.amcs, string(other.ProtoReflect().Descriptor().FullName()))

				err = ValidateResource(coll, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "ns/n"}})
				wantErr(t, err, "missing body", "body is missing")
				err = ValidateResource(coll, nil)
				wantErr(t, err, "nil resource", "body is missing")

				garbage := resourceOf(t, sample)
				garbage.Body.Value = truncated
				err = ValidateResource(coll, garbage)
				wantErr(t, err, "garbage bytes", "does not unmarshal", string(sample.ProtoReflect().Descriptor().FullName()))

				// The Any type must be exactly the kind's: another host or no host is refused.
				for _, url := range []string{"example.com/" + string(sample.ProtoReflect().Descriptor().FullName()), string(sample.ProtoReflect().Descriptor().FullName())} {
					r := resourceOf(t, sample)
					r.Body.TypeUrl = url
					wantErr(t, ValidateResource(coll, r), "type URL "+url, url, row.amcs)
				}
			})
		}
	}
}

func TestValidateResourceOpaque(t *testing.T) {
	r := &mcpapi.Resource{
		Metadata: &mcpapi.Metadata{Name: "x"},
		Body:     &anypb.Any{TypeUrl: "example.com/Anything", Value: truncated},
	}
	for _, coll := range []string{"example.com/things", "istio/networking/v1/envoyfilters", "istio/mesh/v1alpha1/MeshConfig"} {
		if err := ValidateResource(coll, r); err != nil {
			t.Errorf("opaque collection %q: %v, want no check", coll, err)
		}
		if err := ValidateResource(coll, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "x"}}); err != nil {
			t.Errorf("opaque collection %q without body: %v, want no check", coll, err)
		}
	}
}

func indexOf(kind string) int {
	for i, row := range contractTable {
		if row.kind == kind {
			return i
		}
	}
	return -1
}

func wantErr(t *testing.T, err error, what string, mentions ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: error %q does not mention %q", what, err, m)
		}
	}
}

func FuzzValidateResource(f *testing.F) {
	for i, row := range contractTable {
		b, err := proto.Marshal(sampleBodies[row.kind])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	f.Add(uint8(0), truncated)
	f.Add(uint8(3), []byte{0xff, 0xff, 0xff})
	kinds := Kinds()
	f.Fuzz(func(t *testing.T, kindIndex uint8, value []byte) {
		k := kinds[int(kindIndex)%len(kinds)]
		r := &mcpapi.Resource{
			Metadata: &mcpapi.Metadata{Name: "ns/fuzz"},
			Body:     &anypb.Any{TypeUrl: k.AMCSTypeURL, Value: value},
		}
		err := ValidateResource(k.Collection, r) // must not panic, whatever the bytes
		// The verdict is that of proto.Unmarshal, then of the kind's validation.
		m := k.New()
		if unmarshalErr := proto.Unmarshal(value, m); unmarshalErr != nil {
			if err == nil {
				t.Fatalf("ValidateResource accepted bytes that proto.Unmarshal refuses: %v", unmarshalErr)
			}
			return
		}
		if verr := k.Validate(r.Metadata, m); (err == nil) != (verr == nil) {
			t.Fatalf("ValidateResource = %v, but the kind's validation = %v", err, verr)
		}
		// The wire check of the translation agrees with proto.Unmarshal too.
		if cerr := k.CheckBody(value); cerr != nil {
			t.Fatalf("CheckBody = %v on bytes proto.Unmarshal accepts", cerr)
		}
	})
}

// FuzzCheckBodyAgreesWithUnmarshal: the translation's wire check, which does not build the
// message, accepts exactly the bytes proto.Unmarshal accepts.
func FuzzCheckBodyAgreesWithUnmarshal(f *testing.F) {
	for i, row := range contractTable {
		b, err := proto.Marshal(sampleBodies[row.kind])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	f.Add(uint8(0), truncated)
	kinds := Kinds()
	f.Fuzz(func(t *testing.T, kindIndex uint8, value []byte) {
		k := kinds[int(kindIndex)%len(kinds)]
		if err, uerr := k.CheckBody(value), proto.Unmarshal(value, k.New()); (err == nil) != (uerr == nil) {
			t.Fatalf("CheckBody = %v, but proto.Unmarshal = %v", err, uerr)
		}
	})
}

// bigServiceEntry is the scale benchmarks' ServiceEntry of about 2 KiB: ten endpoints with
// three labels each.
func bigServiceEntry(i int) *networking.ServiceEntry {
	se := &networking.ServiceEntry{
		Hosts:      []string{fmt.Sprintf("svc-%d.ns-%d.example.com", i, i%100)},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Ports:      []*networking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC,
	}
	for e := range 10 {
		se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
			Address: fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, e+1),
			Labels: map[string]string{"app": fmt.Sprint("svc-", i), "version": "v1",
				"topology.kubernetes.io/zone": fmt.Sprint("zone-", e%3)},
			Locality: fmt.Sprint("region/zone-", e%3),
		})
	}
	return se
}

// BenchmarkValidateResource is what a producer's ServiceEntry costs the store's validation:
// the wire check alone (what the store did before istiod's validation), ValidateResource
// (the wire check and the fast path), unmarshalling and validating it (what any other kind,
// or a ServiceEntry the fast path does not take, costs), and validating a decoded message
// (what the file source adds to its decoding).
func BenchmarkValidateResource(b *testing.B) {
	r := resourceOf(b, bigServiceEntry(7))
	k, _ := ByCollection("istio/networking/v1alpha3/serviceentries")
	b.Run("wire-check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := k.CheckBody(r.Body.Value); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ValidateResource", func(b *testing.B) { // the wire check and the fast path
		b.ReportAllocs()
		for b.Loop() {
			if err := ValidateResource(k.Collection, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal+validate", func(b *testing.B) { // without the fast path
		b.ReportAllocs()
		for b.Loop() {
			m := &networking.ServiceEntry{}
			if err := proto.Unmarshal(r.Body.Value, m); err != nil {
				b.Fatal(err)
			}
			if err := k.Validate(r.Metadata, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	m := &networking.ServiceEntry{}
	if err := proto.Unmarshal(r.Body.Value, m); err != nil {
		b.Fatal(err)
	}
	b.Run("validate-decoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := k.Validate(r.Metadata, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
