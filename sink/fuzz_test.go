package sink

import (
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/store"
)

const fuzzOwner = "producer:fuzz"

// FuzzValidateResources feeds producer-controlled bytes, decoded as a Resources message,
// through the validate-and-apply path. It must never panic, always answer the message's own
// collection and nonce, and leave the store exactly as it was whenever it NACKs.
func FuzzValidateResources(f *testing.F) {
	for _, m := range fuzzSeeds() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	asked, err := newAsked([]Collection{{Name: seColl, Incremental: true}, {Name: vsColl}, {Name: opaqueColl, Incremental: true}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m mcp.Resources
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		st := fuzzStore(t)
		before := dump(st)
		a := applier{store: st, writer: st, asked: asked, node: SinkNode{ID: "fuzz"}}
		o := a.handle(fuzzOwner, producerRights{}, &m)
		checkOutcome(t, &m, o, st, before)
	})
}

// fuzzStore holds state of the fuzzed producer and of another, so that a faulty full state
// or removal has something to destroy.
func fuzzStore(t *testing.T) *store.Store {
	st := newStore()
	for owner, rs := range map[string][]*mcpapi.Resource{fuzzOwner: ses("a", "b"), "producer:other": ses("b", "o")} {
		if _, err := st.Apply(owner, store.Update{Collection: seColl, Resources: rs}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Apply(fuzzOwner, store.Update{Collection: vsColl, Resources: []*mcpapi.Resource{virtualService("ns/v", "v.example")}}); err != nil {
		t.Fatal(err)
	}
	return st
}

func checkOutcome(t *testing.T, m *mcp.Resources, o outcome, st *store.Store, before string) {
	t.Helper()
	r := o.reply
	if r.GetCollection() != m.GetCollection() || r.GetResponseNonce() != m.GetNonce() {
		t.Fatalf("answer names %q nonce %q, want %q nonce %q", r.GetCollection(), r.GetResponseNonce(), m.GetCollection(), m.GetNonce())
	}
	if o.acked() {
		if r.ErrorDetail != nil {
			t.Fatalf("ACK with an error_detail: %v", r.ErrorDetail)
		}
		return
	}
	code := codes.Code(r.GetErrorDetail().GetCode())
	if code != codes.InvalidArgument && code != codes.Unimplemented {
		t.Fatalf("NACK code %v", code)
	}
	if !strings.Contains(r.GetErrorDetail().GetMessage(), strconv.Quote(m.GetCollection())) {
		t.Fatalf("NACK message %q does not name the collection %q", r.GetErrorDetail().GetMessage(), m.GetCollection())
	}
	if after := dump(st); after != before {
		t.Fatalf("NACK (%s) but the store changed:\nbefore:\n%s\nafter:\n%s", r.GetErrorDetail().GetMessage(), before, after)
	}
}

func fuzzSeeds() []*mcp.Resources {
	badBody := serviceEntry("ns/x", "x.example")
	badBody.Body = &anypb.Any{TypeUrl: badBody.Body.TypeUrl, Value: []byte{0x0a, 0x05, 'a'}}
	return []*mcp.Resources{
		{Collection: seColl, Nonce: "1", Resources: ses("a", "c")},
		{Collection: seAlias, Nonce: "2", Resources: ses("c")},
		{Collection: seColl, Nonce: "3", Incremental: true, Resources: ses("d"), RemovedResources: []string{"ns/a"}},
		{Collection: seColl, Nonce: "4", Incremental: true, RemovedResources: []string{""}},
		{Collection: seColl, Nonce: "5", Incremental: true, Resources: ses("a"), RemovedResources: []string{"ns/a"}},
		{Collection: seColl, Nonce: "6", Resources: append(ses("a"), ses("a")...)},
		{Collection: seColl, Nonce: "7", Resources: []*mcpapi.Resource{badBody}},
		{Collection: seColl, Nonce: "8", Resources: []*mcpapi.Resource{virtualService("ns/v", "v.example")}},
		{Collection: seColl, Nonce: "9", Resources: []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: "ns/nobody"}}}},
		{Collection: vsColl, Nonce: "10", Incremental: true},
		{Collection: vsColl, Nonce: "11"},
		{Collection: gwColl, Nonce: "12"},
		{Collection: opaqueColl, Nonce: "13", Resources: []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: "w", Version: "1"}}}},
		{Collection: mcp.TriggerCollection},
		{Collection: seColl, Resources: ses("a")},
		{Collection: seColl, Nonce: "14", Resources: []*mcpapi.Resource{{}}},
	}
}
