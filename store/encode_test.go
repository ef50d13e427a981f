package store

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"pgregory.net/rapid"
)

// TestEncodingIsDeterministicMarshal: the store's field-by-field encoding of a resource is
// byte for byte proto's deterministic marshalling of the resource with its version set, the
// version given is kept, a missing one is the content hash of the encoding without a
// version, the resource given is left as it was, and the entry's views (name, version, body)
// read what the encoding holds.
//
// The metadata covers what the field-by-field writer must get right or leave to proto: empty
// and unsorted map keys and values, more entries than its room on the stack, timestamps
// with zero, negative and absent parts, strings that are not UTF-8 (an error, as proto's),
// and unknown fields in the metadata or its timestamp (marshalled the generic way).
func TestEncodingIsDeterministicMarshal(t *testing.T) {
	key := rapid.OneOf(rapid.StringMatching(`[a-z]{0,3}`), rapid.SampledFrom([]string{"\xff", "é", "Z"}))
	value := rapid.OneOf(rapid.String(), rapid.SampledFrom([]string{"", "\xfe"}))
	rapid.Check(t, func(rt *rapid.T) {
		r := &mcpapi.Resource{Metadata: &mcpapi.Metadata{
			Name:        rapid.OneOf(rapid.StringMatching(`[a-z]{0,3}(/[a-z]{1,3})?`), rapid.Just("a/\xff")).Draw(rt, "name"),
			Version:     rapid.SampledFrom([]string{"", "v1", "\xff"}).Draw(rt, "version"),
			Labels:      rapid.MapOfN(key, value, 0, 12).Draw(rt, "labels"),
			Annotations: rapid.MapOfN(key, value, 0, 3).Draw(rt, "annotations"),
		}}
		switch rapid.IntRange(0, 3).Draw(rt, "created") {
		case 1:
			r.Metadata.CreateTime = timestamppb.New(timestamppb.Now().AsTime())
		case 2:
			r.Metadata.CreateTime = &timestamppb.Timestamp{Seconds: rapid.Int64().Draw(rt, "seconds"), Nanos: rapid.Int32().Draw(rt, "nanos")}
		case 3:
			r.Metadata.CreateTime = &timestamppb.Timestamp{}
		}
		unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
		switch rapid.IntRange(0, 9).Draw(rt, "unknown") {
		case 0:
			r.Metadata.ProtoReflect().SetUnknown(unknown)
		case 1:
			if r.Metadata.CreateTime != nil {
				r.Metadata.CreateTime.ProtoReflect().SetUnknown(unknown)
			}
		}
		if rapid.IntRange(0, 3).Draw(rt, "body") > 0 {
			r.Body = &anypb.Any{
				TypeUrl: rapid.SampledFrom([]string{"", "type.googleapis.com/x.Y"}).Draw(rt, "type"),
				Value:   rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(rt, "value"),
			}
		}
		given := proto.Clone(r).(*mcpapi.Resource)
		got, err := Encode(r)
		if _, merr := deterministic.Marshal(r); merr != nil || err != nil {
			if (merr == nil) != (err == nil) {
				rt.Fatalf("Encode: %v; proto: %v", err, merr)
			}
			return // refused, as proto refuses it
		}
		if !proto.Equal(r, given) {
			rt.Fatal("Encode modified the resource")
		}
		want := proto.Clone(r).(*mcpapi.Resource)
		if want.Metadata.Version == "" {
			unversioned, err := deterministic.Marshal(r)
			if err != nil {
				rt.Fatal(err)
			}
			want.Metadata.Version = fmt.Sprintf("%016x", xxhash.Sum64(unversioned))
		}
		wantBytes, err := deterministic.Marshal(want)
		if err != nil {
			rt.Fatal(err)
		}
		if whole := wholeOf(got); !bytes.Equal(whole, wantBytes) {
			rt.Fatalf("encoding\n%x\nwant\n%x", whole, wantBytes)
		}
		if typeURL, value := got.Body(); typeURL != r.GetBody().GetTypeUrl() || !bytes.Equal(value, r.GetBody().GetValue()) {
			rt.Fatalf("Body() = %q, %x; want %q, %x", typeURL, value, r.GetBody().GetTypeUrl(), r.GetBody().GetValue())
		}
		if got.Name() != want.Metadata.Name || got.Version() != want.Metadata.Version {
			rt.Fatalf("name, version %q %q, want %q %q", got.Name(), got.Version(), want.Metadata.Name, want.Metadata.Version)
		}
		wantCreated := time.Time{}
		if r.Metadata.CreateTime != nil {
			wantCreated = r.Metadata.CreateTime.AsTime()
		}
		if created := (&Entry{Bytes: got.Bytes()}).CreateTime(); !created.Equal(wantCreated) {
			rt.Fatalf("create time %v, want %v", created, wantCreated)
		}
		typeURL, value := got.Body()
		if typeURL != want.GetBody().GetTypeUrl() || !bytes.Equal(value, want.GetBody().GetValue()) {
			rt.Fatalf("body %q %x, want %q %x", typeURL, value, want.GetBody().GetTypeUrl(), want.GetBody().GetValue())
		}
	})
}

// TestEncodeMessageIsEncodeOfItsResource: EncodeMessage, which marshals the message in place,
// gives the bytes and version that Encode gives for the same resource.
func TestEncodeMessageIsEncodeOfItsResource(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		name := rapid.StringMatching(`[a-z|0-9.]{1,200}`).Draw(rt, "name")
		msg := wrapperspb.String(rapid.StringN(0, 400, -1).Draw(rt, "value"))
		typeURL := rapid.SampledFrom([]string{"", "type.googleapis.com/google.protobuf.StringValue"}).Draw(rt, "type")
		got, err := EncodeMessage(name, typeURL, msg)
		if err != nil {
			rt.Fatal(err)
		}
		value, err := deterministic.Marshal(msg)
		if err != nil {
			rt.Fatal(err)
		}
		want, err := Encode(&mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: &anypb.Any{TypeUrl: typeURL, Value: value}})
		if err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) || got.Version() != want.Version() || got.Name() != name {
			rt.Fatalf("EncodeMessage %q %x\nEncode %q %x", got.Version(), got.Bytes(), want.Version(), want.Bytes())
		}
	})
}

// TestMetadataHasTheFieldsEncodeWrites: Encode writes a resource's metadata field by field
// (encodeDirect), which is proto's encoding only while Metadata has exactly these fields: a
// field added by a newer istio.io/api would otherwise be left out of every encoding, and out
// of its content hash, with nothing else to tell.
func TestMetadataHasTheFieldsEncodeWrites(t *testing.T) {
	type field struct {
		number int32
		name   string
		kind   string
	}
	describe := func(md protoreflect.MessageDescriptor) []field {
		var out []field
		fs := md.Fields()
		for i := range fs.Len() {
			f := fs.Get(i)
			kind := f.Kind().String()
			switch {
			case f.IsMap():
				kind = "map<" + f.MapKey().Kind().String() + "," + f.MapValue().Kind().String() + ">"
			case f.Message() != nil:
				kind = string(f.Message().FullName())
			}
			out = append(out, field{int32(f.Number()), string(f.Name()), kind})
		}
		return out
	}
	wantMeta := []field{{1, "name", "string"}, {2, "create_time", "google.protobuf.Timestamp"}, {3, "version", "string"},
		{4, "labels", "map<string,string>"}, {5, "annotations", "map<string,string>"}}
	if got := describe((&mcpapi.Metadata{}).ProtoReflect().Descriptor()); !slices.Equal(got, wantMeta) {
		t.Errorf("Metadata's fields are %v; encodeDirect writes %v", got, wantMeta)
	}
	wantTime := []field{{1, "seconds", "int64"}, {2, "nanos", "int32"}}
	if got := describe((&timestamppb.Timestamp{}).ProtoReflect().Descriptor()); !slices.Equal(got, wantTime) {
		t.Errorf("Timestamp's fields are %v; encodeDirect writes %v", got, wantTime)
	}
}

// wholeOf is an encoding's istio.mcp.v1alpha1.Resource, its type URL put back.
func wholeOf(e Encoded) []byte { return EntryOf(e).ResourceBytes() }
