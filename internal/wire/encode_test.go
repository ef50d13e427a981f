package wire

import (
	"fmt"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	apiv2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2"
	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/store"
)

// entry is an entry of the resource as the store keeps it (its body's type URL left out).
func entry(t *testing.T, name string, body proto.Message) *store.Entry {
	return entryAs(t, true, name, body)
}

// entryAs is an entry of the resource as the store keeps it (stored), or of its whole
// encoding, as another writer may hand the bytes back.
func entryAs(t *testing.T, stored bool, name string, body proto.Message) *store.Entry {
	t.Helper()
	a, err := anypb.New(body)
	if err != nil {
		t.Fatal(err)
	}
	r := &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name, Version: "v-" + name}, Body: a}
	if stored {
		enc, err := store.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		e := store.EntryOf(enc)
		if d, err := e.Decode(); err != nil || !proto.Equal(d, r) {
			t.Fatalf("the stored entry decodes as %v (%v), not as the resource", d, err)
		}
		return e
	}
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return &store.Entry{Name: name, Version: r.Metadata.Version, Bytes: b}
}

// decoded is an entry's resource, decoded from its bytes.
func decoded(t *testing.T, e *store.Entry) *mcpapi.Resource {
	t.Helper()
	r, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// decode parses an encoded frame (body and tail) into msg.
func decode(t *testing.T, l *Layout, m *Message, form Form, nonce string, msg proto.Message) {
	t.Helper()
	f := Frame{Body: l.Encode(m, form), Tail: l.Tail(nonce)}
	if err := proto.Unmarshal(append(append([]byte{}, f.Body...), f.Tail...), msg); err != nil {
		t.Fatalf("the encoded frame does not parse as %T: %v", msg, err)
	}
}

func diff(t *testing.T, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("encoded message differs from the reference:\ngot:  %s\nwant: %s", prototext.Format(got), prototext.Format(want))
	}
}

// TestEncodeMatchesTheGeneratedMessages: each layout writes what the generated message of
// the same content marshals to, from entries as the store keeps them (each body's type URL
// left out, and put back as they are written) and from whole encodings.
func TestEncodeMatchesTheGeneratedMessages(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(map[bool]string{true: "as stored", false: "whole"}[stored], func(t *testing.T) {
			testEncodeMatchesTheGeneratedMessages(t, stored)
		})
	}
}

func testEncodeMatchesTheGeneratedMessages(t *testing.T, stored bool) {
	se := entryAs(t, stored, "ns/a", &networking.ServiceEntry{Hosts: []string{"a.example"}})
	cl := entryAs(t, stored, "outbound|80||a.example", &cluster.Cluster{Name: "outbound|80||a.example"})
	if stored && (len(se.Bytes) >= se.ResourceSize() || len(cl.Bytes) >= cl.ResourceSize()) {
		t.Fatalf("the store kept the whole encodings (%d of %d, %d of %d bytes)", len(se.Bytes), se.ResourceSize(), len(cl.Bytes), cl.ResourceSize())
	}

	t.Run("MCP Resources", func(t *testing.T) {
		l := NewLayout(&mcp.Resources{}, Roles{Version: "system_version_info", Resources: "resources", Key: "collection",
			Removed: "removed_resources", Nonce: "nonce", Incremental: "incremental"})
		var got mcp.Resources
		decode(t, l, &Message{Version: "7", Key: "coll", Resources: []*store.Entry{se}, Removed: []string{"ns/gone"}, Incremental: true}, FormMCPResource, "n1", &got)
		diff(t, &got, &mcp.Resources{SystemVersionInfo: "7", Collection: "coll", Resources: []*mcpapi.Resource{decoded(t, se)},
			RemovedResources: []string{"ns/gone"}, Nonce: "n1", Incremental: true})
	})
	t.Run("xDS SotW, MCP over xDS", func(t *testing.T) {
		l := NewLayout(&discovery.DiscoveryResponse{}, Roles{Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce"})
		var got discovery.DiscoveryResponse
		decode(t, l, &Message{Version: "3", Key: "networking.istio.io/v1alpha3/ServiceEntry", Resources: []*store.Entry{se}}, FormAnyMCPResource, "n2", &got)
		wrapped, _ := anypb.New(decoded(t, se))
		diff(t, &got, &discovery.DiscoveryResponse{VersionInfo: "3", TypeUrl: "networking.istio.io/v1alpha3/ServiceEntry",
			Resources: []*anypb.Any{wrapped}, Nonce: "n2"})
	})
	t.Run("xDS delta, Envoy body, missing name", func(t *testing.T) {
		l := NewLayout(&discovery.DeltaDiscoveryResponse{}, Roles{Version: "system_version_info", Resources: "resources", Key: "type_url",
			Removed: "removed_resources", Nonce: "nonce", DeltaResource: &discovery.Resource{}})
		var got discovery.DeltaDiscoveryResponse
		decode(t, l, &Message{Version: "9", Key: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Resources: []*store.Entry{cl},
			Missing: []string{"nope"}, Removed: []string{"old"}}, FormAnyBody, "n3", &got)
		diff(t, &got, &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "9", TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster",
			Resources:        []*discovery.Resource{{Name: cl.Name, Version: cl.Version, Resource: decoded(t, cl).Body}, {Name: "nope"}},
			RemovedResources: []string{"old"}, Nonce: "n3"})
	})
	t.Run("xDS delta, missing names aliased (VHDS)", func(t *testing.T) {
		l := NewLayout(&discovery.DeltaDiscoveryResponse{}, Roles{Version: "system_version_info", Resources: "resources", Key: "type_url",
			Removed: "removed_resources", Nonce: "nonce", DeltaResource: &discovery.Resource{}})
		var got discovery.DeltaDiscoveryResponse
		const vh = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
		decode(t, l, &Message{Version: "4", Key: vh, Resources: []*store.Entry{cl},
			Missing: []string{"8080/nope.example", "9080"}, AliasMissing: true}, FormAnyBody, "n4", &got)
		diff(t, &got, &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "4", TypeUrl: vh,
			Resources: []*discovery.Resource{{Name: cl.Name, Version: cl.Version, Resource: decoded(t, cl).Body},
				{Name: "8080/nope.example", Aliases: []string{"8080/nope.example"}}, {Name: "9080", Aliases: []string{"9080"}}},
			Nonce: "n4"})
	})
	t.Run("xDS resource errors, SotW and delta", func(t *testing.T) {
		errs := []ResourceError{{Name: "*", Code: 7, Message: "identity x may not consume this type"}, {Name: "b", Code: 7}}
		want := []*discovery.ResourceError{
			{ResourceName: &discovery.ResourceName{Name: "*"}, ErrorDetail: &status.Status{Code: 7, Message: "identity x may not consume this type"}},
			{ResourceName: &discovery.ResourceName{Name: "b"}, ErrorDetail: &status.Status{Code: 7}},
		}
		l := NewLayout(&discovery.DiscoveryResponse{}, Roles{Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce", Errors: "resource_errors"})
		var got discovery.DiscoveryResponse
		decode(t, l, &Message{Version: "1", Key: "t", Errors: errs}, FormAnyBody, "n5", &got)
		diff(t, &got, &discovery.DiscoveryResponse{VersionInfo: "1", TypeUrl: "t", Nonce: "n5", ResourceErrors: want})
		dl := NewLayout(&discovery.DeltaDiscoveryResponse{}, Roles{Version: "system_version_info", Resources: "resources", Key: "type_url",
			Removed: "removed_resources", Nonce: "nonce", DeltaResource: &discovery.Resource{}, Errors: "resource_errors"})
		var gotDelta discovery.DeltaDiscoveryResponse
		decode(t, dl, &Message{Version: "1", Key: "t", Errors: errs}, FormAnyBody, "n6", &gotDelta)
		diff(t, &gotDelta, &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "1", TypeUrl: "t", Nonce: "n6", ResourceErrors: want})
		// A layout without the field leaves the errors out.
		var mc mcp.MeshConfigResponse
		decode(t, NewLayout(&mcp.MeshConfigResponse{}, Roles{Version: "version_info", Key: "type_url", Nonce: "nonce"}), &Message{Version: "1", Key: "t", Errors: errs}, FormMCPResource, "n7", &mc)
		diff(t, &mc, &mcp.MeshConfigResponse{VersionInfo: "1", TypeUrl: "t", Nonce: "n7"})
	})
	t.Run("xDS v2 SotW and delta, Envoy body under the v2 type URL", func(t *testing.T) {
		const v2 = "type.googleapis.com/envoy.api.v2.Cluster"
		_, value := cl.Body()
		body := &anypb.Any{TypeUrl: v2, Value: value}
		l := NewLayout(&apiv2.DiscoveryResponse{}, Roles{Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce"})
		var got apiv2.DiscoveryResponse
		decode(t, l, &Message{Version: "4", Key: v2, Resources: []*store.Entry{cl}}, FormAnyBodyAsKey, "n8", &got)
		diff(t, &got, &apiv2.DiscoveryResponse{VersionInfo: "4", TypeUrl: v2, Resources: []*anypb.Any{body}, Nonce: "n8"})
		dl := NewLayout(&apiv2.DeltaDiscoveryResponse{}, Roles{Version: "system_version_info", Resources: "resources", Key: "type_url",
			Removed: "removed_resources", Nonce: "nonce", DeltaResource: &apiv2.Resource{}})
		var gotDelta apiv2.DeltaDiscoveryResponse
		decode(t, dl, &Message{Version: "5", Key: v2, Resources: []*store.Entry{cl}, Missing: []string{"nope"}, Removed: []string{"old"}}, FormAnyBodyAsKey, "n9", &gotDelta)
		diff(t, &gotDelta, &apiv2.DeltaDiscoveryResponse{SystemVersionInfo: "5", TypeUrl: v2,
			Resources:        []*apiv2.Resource{{Name: cl.Name, Version: cl.Version, Resource: body}, {Name: "nope"}},
			RemovedResources: []string{"old"}, Nonce: "n9"})
	})
	t.Run("empty response", func(t *testing.T) {
		l := NewLayout(&mcp.MeshConfigResponse{}, Roles{Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce"})
		var got mcp.MeshConfigResponse
		decode(t, l, &Message{Version: "0", Key: "t"}, FormMCPResource, "n4", &got)
		diff(t, &got, &mcp.MeshConfigResponse{VersionInfo: "0", TypeUrl: "t", Nonce: "n4"})
	})
}

// TestEncodeAllocatesItsBufferOnce: in every form and layout a response is encoded into the
// buffer Encode sized for it, never grown (a copy of megabytes for a part of a large
// response), and that buffer is not much larger than the response.
func TestEncodeAllocatesItsBufferOnce(t *testing.T) {
	var ses, cls []*store.Entry
	for i := range 500 {
		host := fmt.Sprintf("svc-%d.ns-%d.example", i, i%7)
		ses = append(ses, entry(t, fmt.Sprintf("ns-%d/svc-%d", i%7, i), &networking.ServiceEntry{Hosts: []string{host},
			Ports: []*networking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}}}))
		cls = append(cls, entry(t, "outbound|8080||"+host, &cluster.Cluster{Name: "outbound|8080||" + host}))
	}
	const clusterV2 = "type.googleapis.com/envoy.api.v2.Cluster"
	delta := Roles{Version: "system_version_info", Resources: "resources", Key: "type_url", Removed: "removed_resources", Nonce: "nonce",
		DeltaResource: &discovery.Resource{}}
	sotw := Roles{Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce"}
	wrapping := sotw
	wrapping.Wrapper = &discovery.Resource{}
	for _, tc := range []struct {
		name   string
		layout *Layout
		msg    Message
		form   Form
	}{
		{"MCP Resources", NewLayout(&mcp.Resources{}, Roles{Version: "system_version_info", Resources: "resources", Key: "collection", Nonce: "nonce"}),
			Message{Version: "1", Key: "coll", Resources: ses}, FormMCPResource},
		{"MCP over xDS, state of the world", NewLayout(&discovery.DiscoveryResponse{}, sotw), Message{Version: "1", Key: "se", Resources: ses}, FormAnyMCPResource},
		{"MCP over xDS, delta", NewLayout(&discovery.DeltaDiscoveryResponse{}, delta), Message{Version: "1", Key: "se", Resources: ses}, FormAnyMCPResource},
		{"Envoy, state of the world", NewLayout(&discovery.DiscoveryResponse{}, sotw), Message{Version: "1", Key: "c", Resources: cls}, FormAnyBody},
		{"Envoy, delta", NewLayout(&discovery.DeltaDiscoveryResponse{}, delta), Message{Version: "1", Key: "c", Resources: cls}, FormAnyBody},
		{"Envoy, delta with TTLs", NewLayout(&discovery.DeltaDiscoveryResponse{}, delta), Message{Version: "1", Key: "c", Resources: cls, TTL: time.Minute}, FormAnyBody},
		{"Envoy, state of the world wrapped with TTLs", NewLayout(&discovery.DiscoveryResponse{}, wrapping),
			Message{Version: "1", Key: "c", Resources: cls, TTL: time.Minute, Wrap: true}, FormAnyBody},
		{"Envoy, delta heartbeat", NewLayout(&discovery.DeltaDiscoveryResponse{}, delta),
			Message{Version: "1", Key: "c", Resources: cls, TTL: time.Minute, Heartbeat: true}, FormAnyBody},
		{"Envoy, state of the world heartbeat", NewLayout(&discovery.DiscoveryResponse{}, wrapping),
			Message{Version: "1", Key: "c", Resources: cls, TTL: time.Minute, Wrap: true, Heartbeat: true}, FormAnyBody},
		{"Envoy v2, delta", NewLayout(&apiv2.DeltaDiscoveryResponse{}, Roles{Version: "system_version_info", Resources: "resources", Key: "type_url",
			Removed: "removed_resources", Nonce: "nonce", DeltaResource: &apiv2.Resource{}}), Message{Version: "1", Key: clusterV2, Resources: cls}, FormAnyBodyAsKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hint := tc.layout.SizeHint(&tc.msg, tc.form)
			b := tc.layout.Encode(&tc.msg, tc.form)
			if cap(b) != hint {
				t.Fatalf("the buffer grew: %d bytes encoded, %d allocated first", len(b), hint)
			}
			if waste := float64(cap(b)-len(b)) / float64(len(b)); waste > 0.2 {
				t.Fatalf("%d bytes encoded into a buffer of %d (%.0f%% more)", len(b), cap(b), 100*waste)
			}
			// Where the resources' bytes are known, their share is exact: what is left over
			// is the allowance for the message's own fields.
			if over, allowance := cap(b)-len(b), 64+len(tc.msg.Version)+len(tc.msg.Key); tc.form != FormAnyBodyAsKey && over > allowance {
				t.Fatalf("%d bytes encoded into a buffer of %d: %d over, want at most %d", len(b), cap(b), over, allowance)
			}
		})
	}
}

func TestNewLayoutPanicsOnAFieldTheMessageLacks(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a missing field name")
		}
	}()
	NewLayout(&mcp.Resources{}, Roles{Version: "no_such_field"})
}
