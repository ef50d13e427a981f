package store

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"
)

// TestEncodingIsDeterministicMarshal: the store's field-by-field encoding of a resource is
// byte for byte proto's deterministic marshalling, its content hash is the one of the
// encoding without a version, and the resource's body afterwards holds the same bytes (now
// the store's one copy).
func TestEncodingIsDeterministicMarshal(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := &mcpapi.Resource{Metadata: &mcpapi.Metadata{
			Name:        rapid.StringMatching(`[a-z]{0,3}(/[a-z]{1,3})?`).Draw(rt, "name"),
			Version:     rapid.SampledFrom([]string{"", "v1"}).Draw(rt, "version"),
			Labels:      rapid.MapOfN(rapid.StringMatching(`[a-z]{1,3}`), rapid.String(), 0, 3).Draw(rt, "labels"),
			Annotations: rapid.MapOfN(rapid.StringMatching(`[a-z]{1,3}`), rapid.String(), 0, 2).Draw(rt, "annotations"),
		}}
		if rapid.Bool().Draw(rt, "created") {
			r.Metadata.CreateTime = timestamppb.New(timestamppb.Now().AsTime())
		}
		if rapid.IntRange(0, 3).Draw(rt, "body") > 0 {
			r.Body = &anypb.Any{
				TypeUrl: rapid.SampledFrom([]string{"", "type.googleapis.com/x.Y"}).Draw(rt, "type"),
				Value:   rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(rt, "value"),
			}
		}
		generic := proto.Clone(r).(*mcpapi.Resource)
		want, err := encodeGeneric(generic)
		if err != nil {
			rt.Fatal(err)
		}
		got, err := encodeResource(r)
		if err != nil {
			rt.Fatal(err)
		}
		if r.Metadata.Version != generic.Metadata.Version {
			rt.Fatalf("version %q, generic marshalling gives %q", r.Metadata.Version, generic.Metadata.Version)
		}
		if !bytes.Equal(got, want) {
			rt.Fatalf("encoding\n%x\nwant\n%x", got, want)
		}
		if !bytes.Equal(r.GetBody().GetValue(), generic.GetBody().GetValue()) {
			rt.Fatal("the body changed")
		}
	})
}
