package store

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// bodyLayouts are whole encodings of resources (type URL included) laid out as the store
// writes them, and as another writer may (a replicated backend hands back whatever bytes it
// holds): the body first, twice, with its value before its type URL, empty, or absent.
func bodyLayouts(t testing.TB) map[string][]byte {
	value, err := anypb.New(wrapperspb.String("v"))
	if err != nil {
		t.Fatal(err)
	}
	encoded := func(r *mcpapi.Resource) []byte {
		e, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		return wholeOf(e)
	}
	body := func(b []byte, typeURL string, value []byte) []byte {
		var any []byte
		any = protowire.AppendTag(any, 1, protowire.BytesType)
		any = protowire.AppendString(any, typeURL)
		any = protowire.AppendTag(any, 2, protowire.BytesType)
		any = protowire.AppendBytes(any, value)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		return protowire.AppendBytes(b, any)
	}
	meta := func(b []byte) []byte {
		m, _ := proto.Marshal(&mcpapi.Metadata{Name: "ns/a", Version: "1"})
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		return protowire.AppendBytes(b, m)
	}
	long := bytes.Repeat([]byte("x"), 300) // a value whose length takes two bytes
	valueFirst := meta(nil)
	{
		var any []byte
		any = protowire.AppendTag(any, 2, protowire.BytesType)
		any = protowire.AppendBytes(any, []byte("value"))
		any = protowire.AppendTag(any, 1, protowire.BytesType)
		any = protowire.AppendString(any, "type.googleapis.com/T")
		valueFirst = protowire.AppendTag(valueFirst, 2, protowire.BytesType)
		valueFirst = protowire.AppendBytes(valueFirst, any)
	}
	between := meta(nil) // an unknown field between the type URL and the value
	{
		var any []byte
		any = protowire.AppendTag(any, 1, protowire.BytesType)
		any = protowire.AppendString(any, "type.googleapis.com/T")
		any = protowire.AppendTag(any, 3, protowire.VarintType)
		any = protowire.AppendVarint(any, 7)
		any = protowire.AppendTag(any, 2, protowire.BytesType)
		any = protowire.AppendBytes(any, []byte("value"))
		between = protowire.AppendTag(between, 2, protowire.BytesType)
		between = protowire.AppendBytes(between, any)
	}
	e, err := EncodeBody("ns/b", "type.googleapis.com/T", len(long), func(b []byte) ([]byte, error) { return append(b, long...), nil })
	if err != nil {
		t.Fatal(err)
	}
	viaEncodeBody := wholeOf(e)
	return map[string][]byte{
		"as Encode writes it":          encoded(&mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "ns/a"}, Body: value}),
		"as EncodeBody writes it":      viaEncodeBody,
		"without a body":               encoded(&mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "ns/a"}}),
		"a body with an empty value":   body(meta(nil), "type.googleapis.com/T", nil),
		"a body with no type URL":      body(meta(nil), "", []byte("value")),
		"the body before the metadata": meta(body(nil, "type.googleapis.com/T", []byte("value"))),
		"two bodies":                   body(body(meta(nil), "type.googleapis.com/First", []byte("first")), "type.googleapis.com/T", long),
		"the value before the type":    valueFirst,
		"a field between the two":      between,
	}
}

// An entry's body, located once when the entry is made, is what reading its encoding finds,
// however the encoding is laid out; the store's own layouts are located, not read again.
func TestAnEntrysBodyIsWhatItsEncodingHolds(t *testing.T) {
	for what, b := range bodyLayouts(t) {
		e := newEntry("ns/a", "1", elideEncoding(b))
		checkBody(t, what, e, b)
		if what == "as Encode writes it" || what == "as EncodeBody writes it" {
			if e.bodyAt == 0 {
				t.Errorf("%s: the body was not located", what)
			}
			if _, ok := e.elided(); !ok || len(e.Bytes) >= len(b) {
				t.Errorf("%s: the type URL was not left out (%d bytes kept of %d)", what, len(e.Bytes), len(b))
			}
		}
		// A tombstone and an entry copied from a served one say the same.
		checkBody(t, what+", copied", &Entry{Name: e.Name, Bytes: e.Bytes, bodyType: e.bodyType, bodyAt: e.bodyAt, Deleted: true}, b)
	}
}

// checkBody checks that an entry made of whole (the encoding of a Resource, whatever the form
// the store keeps it in) reads as it: its body, and the Resource written back.
func checkBody(t testing.TB, what string, e *Entry, whole []byte) {
	t.Helper()
	if got := e.AppendResource(nil); !bytes.Equal(got, whole) || e.ResourceSize() != len(whole) || !bytes.Equal(e.ResourceBytes(), whole) {
		t.Fatalf("%s: AppendResource() = %x (ResourceSize %d), the encoding is %x", what, got, e.ResourceSize(), whole)
	}
	wantType, wantValue := bodyOf(whole)
	gotType, gotValue := e.Body()
	if gotType != wantType || !bytes.Equal(gotValue, wantValue) || (gotValue == nil) != (wantValue == nil) {
		t.Fatalf("%s: Body() = %q, %q; the encoding holds %q, %q", what, gotType, gotValue, wantType, wantValue)
	}
	if typeLen, valueLen := e.BodySize(); typeLen != len(wantType) || valueLen != len(wantValue) {
		t.Fatalf("%s: BodySize() = %d, %d; the encoding holds %d, %d", what, typeLen, valueLen, len(wantType), len(wantValue))
	}
}

// FuzzEntryBody: whatever bytes an entry is made of (a replicated backend's, read back), its
// body is what reading the encoding finds.
func FuzzEntryBody(f *testing.F) {
	for _, b := range bodyLayouts(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkBody(t, "fuzzed", newEntry("ns/a", "1", elideEncoding(b)), b)
	})
}
