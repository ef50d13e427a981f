package xds

import (
	"maps"
	"slices"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/source"
)

// A VHDS stream asks for the VHDS form of each port's route configuration (PORT@vhds) when
// it names PORT, in every list a request has, its resumed versions included; other route
// configurations and other types are asked for as named.
func TestVHDSStreamAsksForTheVHDSFormOfPortRoutes(t *testing.T) {
	req := &source.Request{Key: RouteType,
		Subscribe:       []string{"8080", "outbound|80||a.example", "0800", "gateway.x/http.80"},
		Unsubscribe:     []string{"443"},
		InitialVersions: map[string]string{"9080": "v1", "a.example:80": "v2"}}
	renameVHDSRoutes(req)
	if want := []string{"8080@vhds", "outbound|80||a.example", "0800", "gateway.x/http.80"}; !slices.Equal(req.Subscribe, want) {
		t.Errorf("subscribe %v, want %v", req.Subscribe, want)
	}
	if !slices.Equal(req.Unsubscribe, []string{"443@vhds"}) {
		t.Errorf("unsubscribe %v", req.Unsubscribe)
	}
	if want := map[string]string{"9080@vhds": "v1", "a.example:80": "v2"}; !maps.Equal(req.InitialVersions, want) {
		t.Errorf("initial versions %v, want %v", req.InitialVersions, want)
	}
	if got := VHDSPortsOf(req); !slices.Equal(got, []uint32{8080}) {
		t.Errorf("ports of the route request: %v", got)
	}
	other := &source.Request{Key: ClusterType, Subscribe: []string{"8080"}}
	renameVHDSRoutes(other)
	if other.Subscribe[0] != "8080" || len(VHDSPortsOf(other)) > 0 {
		t.Errorf("a cluster request was renamed or holds virtual hosts: %v", other.Subscribe)
	}
	vh := &source.Request{Key: VirtualHostType, Subscribe: []string{"8080", "9080/a.example", "gw/x"}}
	if got := VHDSPortsOf(vh); !slices.Equal(got, []uint32{8080}) {
		t.Errorf("ports of the virtual host request: %v", got)
	}
}

// A response to a VHDS stream names each port's route configuration PORT, as asked, in its
// resources and its removed names; a name that is not PORT@vhds is left alone, and a
// response with none is the shared frame itself.
func TestVHDSStreamIsAnsweredByTheNamesItAsked(t *testing.T) {
	body, _ := anypb.New(&routepb.RouteConfiguration{Name: "8080"})
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: RouteType, SystemVersionInfo: "7",
		Resources: []*discovery.Resource{
			{Name: "8080@vhds", Version: "h1", Resource: body},
			{Name: "x@vhds", Version: "h2"},
			{Name: "outbound|80||a.example", Version: "h3"},
		},
		RemovedResources: []string{"443@vhds", "b.example:80"},
		ResourceErrors:   []*discovery.ResourceError{{ResourceName: &discovery.ResourceName{Name: "9080@vhds"}}}}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	// The body in pooled bytes with two references, the frame memo's and this send's: the
	// renamed copy frees the send's, and outlives the bytes once the memo frees its own.
	pool := &poisoningPool{}
	pooled := append(make([]byte, 0, 4<<10), b...) // over gRPC's 1 KiB, under which buffers count no references
	buf := mem.NewBuffer(&pooled, pool)
	buf.Ref()
	f := restoreVHDSRouteNames(&wire.Frame{Body: pooled, Buf: buf, Tail: []byte{0x2a, 0x01, 'n'}}) // nonce "n"
	if f.Buf != nil || pool.puts != 0 {
		t.Fatalf("renamed frame holds a reference (%v) or the bytes went back early (%d)", f.Buf != nil, pool.puts)
	}
	buf.Free() // the memo's
	if pool.puts != 1 {
		t.Fatalf("the send's reference was not freed with the rename: %d puts after the memo's free", pool.puts)
	}
	var got discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(append(slices.Clone(f.Body), f.Tail...), &got); err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(resp).(*discovery.DeltaDiscoveryResponse)
	want.Resources[0].Name, want.RemovedResources[0], want.Nonce = "8080", "443", "n"
	want.ResourceErrors[0].ResourceName.Name = "9080"
	if !proto.Equal(&got, want) {
		t.Fatalf("renamed response\n%v\nwant\n%v", &got, want)
	}
	plain, _ := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: RouteType, Resources: []*discovery.Resource{{Name: "8080", Resource: body}}})
	if f := (&wire.Frame{Body: plain}); restoreVHDSRouteNames(f) != f {
		t.Fatal("a response without a VHDS route configuration was copied")
	}
	other, _ := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: ClusterType, Resources: []*discovery.Resource{{Name: "8080@vhds"}}})
	if f := (&wire.Frame{Body: other}); restoreVHDSRouteNames(f) != f {
		t.Fatal("a response of another type was read and copied")
	}
}

// poisoningPool is a mem.BufferPool that overwrites what is put back, and counts it.
type poisoningPool struct{ puts int }

func (p *poisoningPool) Get(n int) *[]byte { b := make([]byte, n); return &b }

func (p *poisoningPool) Put(b *[]byte) {
	p.puts++
	for i := range *b {
		(*b)[i] = 0xEE
	}
}
