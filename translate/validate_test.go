package translate

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
)

// sampleBodies holds one non-empty body per kind, so that a body that validates is not only the
// empty message.
var sampleBodies = map[string]proto.Message{
	"ServiceEntry":    &networking.ServiceEntry{Hosts: []string{"reviews.bookinfo.svc.cluster.local"}},
	"VirtualService":  &networking.VirtualService{Hosts: []string{"reviews"}},
	"DestinationRule": &networking.DestinationRule{Host: "reviews"},
	"Gateway":         &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}},
	"Sidecar":         &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}}}},
	"EnvoyFilter":     &networking.EnvoyFilter{Priority: 3},
	"WorkloadEntry":   &networking.WorkloadEntry{Address: "10.0.0.1"},
	"WorkloadGroup":   &networking.WorkloadGroup{Template: &networking.WorkloadEntry{Network: "n1"}},
	"AuthorizationPolicy": &security.AuthorizationPolicy{
		Action: security.AuthorizationPolicy_DENY,
	},
	"PeerAuthentication": &security.PeerAuthentication{
		Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT},
	},
	"RequestAuthentication": &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: "me"}}},
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
				if err := ValidateResource(coll, resourceOf(t, sample.ProtoReflect().Type().New().Interface())); err != nil {
					t.Errorf("empty %s body: %v", row.kind, err)
				}

				err := ValidateResource(coll, resourceOf(t, other))
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
		err := ValidateResource(k.Collection, r)
		// Whatever the bytes, the verdict is exactly whether they are a valid message of the kind.
		if unmarshalErr := proto.Unmarshal(value, k.New()); (err == nil) != (unmarshalErr == nil) {
			t.Fatalf("ValidateResource = %v, but proto.Unmarshal = %v", err, unmarshalErr)
		}
	})
}
