package envoy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	xdsserver "github.com/mcpbridge/mcpbridge/source/xds"
)

// deltaClient is an Envoy-like delta ADS client on a real loopback connection.
type deltaClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	node   *corepb.Node
	sent   bool
	// held is what the client holds, by type and name (a response's resources applied, its
	// removed names dropped), as Envoy keeps them.
	held map[string]map[string]*discovery.Resource
}

func (b *bridge) deltaClient(nodeID string, vhds bool) *deltaClient {
	b.t.Helper()
	conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if vhds {
		md.Fields[xdsserver.VHDSMetadataKey] = structpb.NewStringValue("true")
	}
	return &deltaClient{t: b.t, stream: stream, node: &corepb.Node{Id: nodeID, Metadata: md}, held: map[string]map[string]*discovery.Resource{}}
}

func (c *deltaClient) send(req *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	if !c.sent {
		req.Node, c.sent = c.node, true
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *deltaClient) subscribe(typeURL string, names ...string) {
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names})
}

// recv reads the next response, of typeURL (any other fails the test), applies and ACKs it.
func (c *deltaClient) recv(typeURL string) *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	type result struct {
		r   *discovery.DeltaDiscoveryResponse
		err error
	}
	ch := make(chan result, 1)
	go func() { r, err := c.stream.Recv(); ch <- result{r, err} }()
	var r *discovery.DeltaDiscoveryResponse
	select {
	case res := <-ch:
		if res.err != nil {
			c.t.Fatalf("recv: %v", res.err)
		}
		r = res.r
	case <-time.After(10 * time.Second):
		c.t.Fatalf("no response of %s in 10s", typeURL)
	}
	if r.GetTypeUrl() != typeURL {
		c.t.Fatalf("response of %s (%d resources), want one of %s", r.GetTypeUrl(), len(r.GetResources()), typeURL)
	}
	held := c.held[typeURL]
	if held == nil {
		held = map[string]*discovery.Resource{}
		c.held[typeURL] = held
	}
	for _, res := range r.GetResources() {
		held[res.GetName()] = res
	}
	for _, n := range r.GetRemovedResources() {
		delete(held, n)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: r.GetNonce()})
	return r
}

func resourceNames(rs []*discovery.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetName())
	}
	slices.Sort(out)
	return out
}

func routeOf(t *testing.T, r *discovery.Resource) *routepb.RouteConfiguration {
	t.Helper()
	var rc routepb.RouteConfiguration
	if err := r.GetResource().UnmarshalTo(&rc); err != nil {
		t.Fatalf("route configuration %s: %v", r.GetName(), err)
	}
	return &rc
}

func virtualHostOf(t *testing.T, r *discovery.Resource) *routepb.VirtualHost {
	t.Helper()
	var vh routepb.VirtualHost
	if err := r.GetResource().UnmarshalTo(&vh); err != nil {
		t.Fatalf("virtual host %s: %v", r.GetName(), err)
	}
	return &vh
}

// vhdsHosts are ServiceEntries of HTTP hosts on port 8080 in namespace vhds, named as
// Kubernetes names services (so that their own namespace's proxies get their short names).
func vhdsHosts(names ...string) string {
	var out []string
	for i, n := range names {
		out = append(out, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: vhds}
spec:
  hosts: [%s.vhds.svc.cluster.local]
  ports:
  - {number: 8080, name: http, protocol: HTTP}
  resolution: STATIC
  endpoints:
  - address: 10.1.0.%d
`, n, n, i+1))
	}
	return strings.Join(out, "---\n")
}

// A client that asks for virtual hosts on demand (MCPBRIDGE_VHDS) gets the port's route
// configuration PORT in its VHDS form, and each virtual host as a resource PORT/VHOST, the
// same virtual host, but for its name, as the whole route configuration holds for a client of
// its namespace; a host added sends its virtual host alone, a host removed its name, and a
// host nobody serves asked for on demand is answered by name and alias. A client that does
// not ask is served the whole route configuration, as before.
func TestVHDSClientTakesVirtualHostsOnDemand(t *testing.T) {
	const sidecar = "sidecar~10.0.0.9~client.vhds~vhds.svc.cluster.local"
	b := startBridge(t)
	b.setConfig(vhdsHosts("a", "b"))

	v := b.deltaClient(sidecar, true)
	whole := b.deltaClient(sidecar, false)

	v.subscribe(RouteType, "8080")
	r := v.recv(RouteType)
	if got := resourceNames(r.GetResources()); !slices.Equal(got, []string{"8080"}) {
		t.Fatalf("VHDS client's route configurations %v, want [8080]", got)
	}
	rc := routeOf(t, r.GetResources()[0])
	if rc.GetName() != "8080" || len(rc.GetVirtualHosts()) != 0 || rc.GetVhds().GetConfigSource().GetAds() == nil ||
		rc.GetVhds().GetConfigSource().GetResourceApiVersion() != corepb.ApiVersion_V3 || !rc.GetIgnorePortInHostMatching() {
		t.Fatalf("VHDS route configuration: %v", rc)
	}

	v.subscribe(VirtualHostType, "8080")
	r = v.recv(VirtualHostType)
	wantNames := []string{"8080/a.vhds.svc.cluster.local:8080", "8080/b.vhds.svc.cluster.local:8080"}
	if got := resourceNames(r.GetResources()); !slices.Equal(got, wantNames) {
		t.Fatalf("virtual hosts %v, want %v", got, wantNames)
	}

	whole.subscribe(RouteType, "8080")
	wr := whole.recv(RouteType)
	full := routeOf(t, wr.GetResources()[0])
	if full.GetVhds() != nil || len(full.GetVirtualHosts()) != 2 {
		t.Fatalf("the other client's route configuration: %v", full)
	}
	sameAsWhole := func() {
		t.Helper()
		byName := map[string]*routepb.VirtualHost{}
		for _, vh := range full.GetVirtualHosts() {
			byName["8080/"+vh.GetName()] = vh
		}
		for name, res := range v.held[VirtualHostType] {
			vh := virtualHostOf(t, res)
			if vh.GetName() != name {
				t.Fatalf("virtual host %s is named %q", name, vh.GetName())
			}
			want := proto.Clone(byName[name]).(*routepb.VirtualHost)
			if want == nil {
				t.Fatalf("virtual host %s is not in the whole route configuration", name)
			}
			want.Name = name
			if !proto.Equal(vh, want) {
				t.Fatalf("virtual host %s:\n%v\nthe whole route configuration's:\n%v", name, vh, want)
			}
		}
		if len(v.held[VirtualHostType]) != len(full.GetVirtualHosts()) {
			t.Fatalf("VHDS client holds %d virtual hosts, the whole route configuration %d", len(v.held[VirtualHostType]), len(full.GetVirtualHosts()))
		}
	}
	sameAsWhole()
	if vh := virtualHostOf(t, v.held[VirtualHostType][wantNames[0]]); !slices.Contains(vh.GetDomains(), "a") {
		t.Fatalf("a proxy of namespace vhds is not given the short name of its own namespace's host: %v", vh.GetDomains())
	}

	b.setConfig(vhdsHosts("a", "b", "c"))
	r = v.recv(VirtualHostType)
	if got := resourceNames(r.GetResources()); !slices.Equal(got, []string{"8080/c.vhds.svc.cluster.local:8080"}) || len(r.GetRemovedResources()) > 0 {
		t.Fatalf("a host added sent %v, removed %v; want its virtual host alone", got, r.GetRemovedResources())
	}
	full = routeOf(t, whole.recv(RouteType).GetResources()[0])
	sameAsWhole()

	b.setConfig(vhdsHosts("a", "c"))
	r = v.recv(VirtualHostType)
	if len(r.GetResources()) > 0 || !slices.Equal(r.GetRemovedResources(), []string{"8080/b.vhds.svc.cluster.local:8080"}) {
		t.Fatalf("a host removed sent %v, removed %v", resourceNames(r.GetResources()), r.GetRemovedResources())
	}
	full = routeOf(t, whole.recv(RouteType).GetResources()[0])
	sameAsWhole()

	v.subscribe(VirtualHostType, "8080/nope.example")
	r = v.recv(VirtualHostType)
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "8080/nope.example" || r.GetResources()[0].GetResource() != nil ||
		!slices.Equal(r.GetResources()[0].GetAliases(), []string{"8080/nope.example"}) {
		t.Fatalf("an on-demand request for a host nobody serves was answered %v", r.GetResources())
	}
	b.assertNoNACK()
}

// A client of another namespace is served the virtual hosts as its namespace sees them: not
// the short names of namespace vhds's hosts, which only that namespace's proxies get, nor a
// host exported to its own namespace alone.
func TestVHDSClientOfAnotherNamespaceSeesItsNamespacesVirtualHosts(t *testing.T) {
	b := startBridge(t)
	b.setConfig(vhdsHosts("a") + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: private, namespace: vhds}
spec:
  hosts: [private.vhds.svc.cluster.local]
  exportTo: ["."]
  ports:
  - {number: 8080, name: http, protocol: HTTP}
  resolution: STATIC
  endpoints:
  - address: 10.1.1.1
`)
	v := b.deltaClient("sidecar~10.0.0.9~client.other~other.svc.cluster.local", true)
	v.subscribe(RouteType, "8080")
	v.recv(RouteType)
	v.subscribe(VirtualHostType, "8080")
	r := v.recv(VirtualHostType)
	if got := resourceNames(r.GetResources()); !slices.Equal(got, []string{"8080/a.vhds.svc.cluster.local:8080"}) {
		t.Fatalf("a proxy of namespace other is given the virtual hosts %v", got)
	}
	own := b.deltaClient("sidecar~10.0.0.8~client.vhds~vhds.svc.cluster.local", true)
	own.subscribe(VirtualHostType, "8080")
	if got := resourceNames(own.recv(VirtualHostType).GetResources()); len(got) != 2 {
		t.Fatalf("a proxy of namespace vhds is given the virtual hosts %v, want its namespace's two", got)
	}
	if d := virtualHostOf(t, r.GetResources()[0]).GetDomains(); slices.Contains(d, "a") || !slices.Contains(d, "a.vhds") {
		t.Fatalf("a proxy of namespace other is given domains %v", d)
	}
}
