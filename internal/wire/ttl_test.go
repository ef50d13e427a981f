package wire

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpbridge/mcpbridge/store"
)

var (
	ttlDelta = NewLayout(&discovery.DeltaDiscoveryResponse{}, Roles{
		Version: "system_version_info", Resources: "resources", Key: "type_url", Removed: "removed_resources",
		Nonce: "nonce", DeltaResource: &discovery.Resource{},
	})
	ttlSotW = NewLayout(&discovery.DiscoveryResponse{}, Roles{
		Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce", Wrapper: &discovery.Resource{},
	})
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// TestDeltaResourceCarriesTTL: with a TTL, each delta Resource carries it beside its body; a
// heartbeat carries name, version and TTL, and no resource.
func TestDeltaResourceCarriesTTL(t *testing.T) {
	c := &cluster.Cluster{Name: "c"}
	e := entry(t, "c", c)
	body, _ := anypb.New(c)
	for _, ttl := range []time.Duration{1500 * time.Millisecond, 30 * time.Second, 250 * time.Millisecond} {
		var got discovery.DeltaDiscoveryResponse
		decode(t, ttlDelta, &Message{Key: clusterType, Version: "7", Resources: []*store.Entry{e}, TTL: ttl}, FormAnyBody, "1", &got)
		want := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "7", TypeUrl: clusterType, Nonce: "1", Resources: []*discovery.Resource{
			{Name: "c", Version: e.Version, Resource: body, Ttl: durationpb.New(ttl)},
		}}
		diff(t, &got, want)

		got.Reset()
		decode(t, ttlDelta, &Message{Key: clusterType, Version: "7", Resources: []*store.Entry{e}, TTL: ttl, Heartbeat: true}, FormAnyBody, "2", &got)
		want = &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "7", TypeUrl: clusterType, Nonce: "2", Resources: []*discovery.Resource{
			{Name: "c", Version: e.Version, Ttl: durationpb.New(ttl)},
		}}
		diff(t, &got, want)
	}
}

// TestSotWWrapsOnlyWhenAsked: a state-of-the-world response wraps each resource in an Any of
// envoy.service.discovery.v3.Resource (with its TTL) only when the message says so; otherwise
// the bodies go as they are.
func TestSotWWrapsOnlyWhenAsked(t *testing.T) {
	c := &cluster.Cluster{Name: "c"}
	e := entry(t, "c", c)
	body, _ := anypb.New(c)

	var plain discovery.DiscoveryResponse
	decode(t, ttlSotW, &Message{Key: clusterType, Version: "3", Resources: []*store.Entry{e}, TTL: time.Second}, FormAnyBody, "1", &plain)
	diff(t, &plain, &discovery.DiscoveryResponse{VersionInfo: "3", TypeUrl: clusterType, Nonce: "1", Resources: []*anypb.Any{body}})

	for _, hb := range []bool{false, true} {
		var got discovery.DiscoveryResponse
		decode(t, ttlSotW, &Message{Key: clusterType, Version: "3", Resources: []*store.Entry{e}, TTL: 2 * time.Second, Wrap: true, Heartbeat: hb}, FormAnyBody, "2", &got)
		inner := &discovery.Resource{Name: "c", Version: e.Version, Ttl: durationpb.New(2 * time.Second)}
		if !hb {
			inner.Resource = body
		}
		wrapped, err := anypb.New(inner)
		if err != nil {
			t.Fatal(err)
		}
		if wrapped.TypeUrl != ResourceWrapperTypeURL {
			t.Fatalf("wrapper type URL %q, want %q", wrapped.TypeUrl, ResourceWrapperTypeURL)
		}
		if len(got.Resources) != 1 || got.Resources[0].TypeUrl != ResourceWrapperTypeURL {
			t.Fatalf("resources %v, want one wrapped", got.Resources)
		}
		var gotInner discovery.Resource
		if err := got.Resources[0].UnmarshalTo(&gotInner); err != nil {
			t.Fatal(err)
		}
		diff(t, &gotInner, inner)
	}
}
