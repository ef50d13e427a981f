package xds

import (
	"context"
	"fmt"
	"io"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	apiv2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2"
	corev2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2/core"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

// scripted is an adapter that plays a fixed list of requests, then ends the stream.
type scripted struct {
	reqs   []*source.Request
	layout *wire.Layout
	mode   source.Mode
	sent   [][]byte
}

func (s *scripted) Recv() (*source.Request, error) {
	if len(s.reqs) == 0 {
		return nil, io.EOF
	}
	r := s.reqs[0]
	s.reqs = s.reqs[1:]
	return r, nil
}

func (s *scripted) Send(f *wire.Frame) error {
	s.sent = append(s.sent, append(append([]byte{}, f.Body...), f.Tail...))
	return nil
}

func (s *scripted) Layout() *wire.Layout { return s.layout }

func (s *scripted) Type(req *source.Request, _ *source.Node) source.Type {
	return Type(req.Key, s.mode)
}

// FuzzRequests feeds arbitrary sequences of xDS requests (SotW or delta) to the engine over a
// small store: it must never panic, and every response must parse and hold no name twice.
func FuzzRequests(f *testing.F) {
	seed := func(delta bool, msgs ...proto.Message) {
		var data []byte
		for _, m := range msgs {
			b, _ := proto.Marshal(m)
			data = append(data, byte(len(b)))
			data = append(data, b...)
		}
		f.Add(delta, data)
	}
	seed(false, &discovery.DiscoveryRequest{TypeUrl: ClusterType}, &discovery.DiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: "1"})
	seed(false, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "a", "b"}})
	seed(false, &discovery.DiscoveryRequest{TypeUrl: "networking.istio.io/v1/ServiceEntry"}, &discovery.DiscoveryRequest{TypeUrl: "core/v1alpha1/MeshConfig"})
	seed(true, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a", "x"}},
		&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "1", ResourceNamesUnsubscribe: []string{"a", "zz"}})
	seed(true, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, InitialResourceVersions: map[string]string{"a": "x", "gone": "y"}})

	f.Fuzz(func(t *testing.T, delta bool, data []byte) {
		st := store.New(store.Options{Validate: kinds.ValidateResource})
		putForFuzz(t, st)
		eng := source.New(source.Options{Store: st})
		a := &scripted{layout: sotwLayout, mode: source.StateOfTheWorld}
		if delta {
			a.layout, a.mode = deltaLayout, source.Incremental
		}
		for len(data) > 0 {
			n := int(data[0])
			data = data[1:]
			if n > len(data) {
				n = len(data)
			}
			chunk := data[:n]
			data = data[n:]
			if delta {
				var m discovery.DeltaDiscoveryRequest
				if proto.Unmarshal(chunk, &m) == nil {
					a.reqs = append(a.reqs, deltaRequest(&m, ""))
				}
			} else {
				var m discovery.DiscoveryRequest
				if proto.Unmarshal(chunk, &m) == nil {
					a.reqs = append(a.reqs, sotwRequest(&m, ""))
				}
			}
		}
		// The one refusal a request can earn here: naming another node than the stream's first.
		if err := eng.Serve(context.Background(), a, "fuzz", "fuzz"); err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("stream ended with %v", err)
		}
		for _, b := range a.sent {
			checkNoDuplicates(t, delta, b)
		}
	})
}

func checkNoDuplicates(t *testing.T, delta bool, b []byte) {
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] {
			t.Fatalf("response holds %q twice", name)
		}
		seen[name] = true
	}
	if delta {
		var m discovery.DeltaDiscoveryResponse
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatalf("response does not parse: %v", err)
		}
		for _, r := range m.Resources {
			add(r.Name)
		}
		for _, n := range m.RemovedResources {
			add(n)
		}
		return
	}
	var m discovery.DiscoveryResponse
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatalf("response does not parse: %v", err)
	}
	for _, r := range m.Resources {
		var named struct{ name string }
		if msg, err := r.UnmarshalNew(); err == nil {
			switch v := msg.(type) {
			case *mcpapi.Resource:
				named.name = v.Metadata.GetName()
			default:
				named.name = string(proto.MessageName(v)) + "/" + resourceName(v)
			}
		}
		add(named.name)
	}
}

func resourceName(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}

func putForFuzz(t *testing.T, st *store.Store) {
	t.Helper()
	var updates []store.Update
	for _, typeURL := range []string{ClusterType, EndpointType, RouteType} {
		u := store.Update{Collection: typeURL}
		var msgs map[string]proto.Message
		switch typeURL {
		case ClusterType:
			msgs = clusters("a", "b")
		case EndpointType:
			msgs = loadAssignments("v1", "a", "b")
		case RouteType:
			msgs = routes("a")
		}
		for name, m := range msgs {
			u.Resources = append(u.Resources, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: anyOf(m)})
		}
		updates = append(updates, u)
	}
	updates = append(updates, store.Update{Collection: "istio/networking/v1alpha3/serviceentries", Resources: []*mcpapi.Resource{
		{Metadata: &mcpapi.Metadata{Name: "ns/a"}, Body: anyOf(&networking.ServiceEntry{Hosts: []string{"a.example"}})},
	}})
	if _, err := st.Apply("fuzz", updates...); err != nil {
		t.Fatal(err)
	}
	if err := StoreMeshConfig(st, nil); err != nil {
		t.Fatal(err)
	}
}

// FuzzRequestsV2 is FuzzRequests on the v2 transport: arbitrary sequences of v2 requests must
// never panic the engine, and every response must parse as its v2 message, hold no name twice
// and carry, for a v2 Envoy type, Anys of that type URL only.
func FuzzRequestsV2(f *testing.F) {
	seed := func(delta bool, msgs ...proto.Message) {
		var data []byte
		for _, m := range msgs {
			b, _ := proto.Marshal(m)
			data = append(data, byte(len(b)))
			data = append(data, b...)
		}
		f.Add(delta, data)
	}
	seed(false, &apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2, Node: &corev2.Node{Id: "n", BuildVersion: "x"}},
		&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2, ResponseNonce: "1"})
	seed(false, &apiv2.DiscoveryRequest{TypeUrl: EndpointTypeV2, ResourceNames: []string{"a", "a", "b"}}, &apiv2.DiscoveryRequest{TypeUrl: RouteType})
	seed(true, &apiv2.DeltaDiscoveryRequest{TypeUrl: EndpointTypeV2, ResourceNamesSubscribe: []string{"a", "x"}},
		&apiv2.DeltaDiscoveryRequest{TypeUrl: EndpointTypeV2, ResponseNonce: "1", ResourceNamesUnsubscribe: []string{"a", "zz"}})
	seed(true, &apiv2.DeltaDiscoveryRequest{TypeUrl: RouteTypeV2, InitialResourceVersions: map[string]string{"a": "x", "gone": "y"}})

	f.Fuzz(func(t *testing.T, delta bool, data []byte) {
		st := store.New(store.Options{Validate: kinds.ValidateResource})
		putForFuzz(t, st)
		eng := source.New(source.Options{Store: st})
		a := &scripted{layout: sotwLayoutV2}
		if delta {
			a.layout = deltaLayoutV2
		}
		for len(data) > 0 {
			n := min(int(data[0]), len(data)-1)
			chunk := data[1 : 1+n]
			data = data[1+n:]
			if delta {
				var m apiv2.DeltaDiscoveryRequest
				if proto.Unmarshal(chunk, &m) == nil {
					a.reqs = append(a.reqs, deltaRequestV2(&m, ""))
				}
			} else {
				var m apiv2.DiscoveryRequest
				if proto.Unmarshal(chunk, &m) == nil {
					a.reqs = append(a.reqs, sotwRequestV2(&m, ""))
				}
			}
		}
		// The one refusal a request can earn here: naming another node than the stream's first.
		if err := eng.Serve(context.Background(), a, "fuzz", "fuzz"); err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("stream ended with %v", err)
		}
		for _, b := range a.sent {
			checkV2Response(t, delta, b)
		}
	})
}

func checkV2Response(t *testing.T, delta bool, b []byte) {
	seen := map[string]bool{}
	check := func(typeURL, name string, a *anypb.Any) {
		if seen[name] {
			t.Fatalf("response holds %q twice", name)
		}
		seen[name] = true
		if _, v2 := v3Of[typeURL]; v2 && a != nil && a.TypeUrl != typeURL {
			t.Fatalf("a %s response carries a %s", typeURL, a.TypeUrl)
		}
	}
	if delta {
		var m apiv2.DeltaDiscoveryResponse
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatalf("response does not parse: %v", err)
		}
		for _, r := range m.Resources {
			check(m.TypeUrl, r.Name, r.Resource)
		}
		for _, n := range m.RemovedResources {
			check(m.TypeUrl, n, nil)
		}
		return
	}
	var m apiv2.DiscoveryResponse
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatalf("response does not parse: %v", err)
	}
	for i, r := range m.Resources {
		check(m.TypeUrl, fmt.Sprint(i), r)
	}
}
