package csds_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds" // registers the xDS resolver's balancers and filters
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/bridgetest"
	"github.com/mcpbridge/mcpbridge/source/csds"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// These tests run a whole bridge (bridgetest) on loopback, connect clients of every kind to
// it (xDS state of the world and delta from clients generated from the xDS protos, an MCP
// sink, another bridge it pushes to, grpc-go's own xDS client), and read what CSDS says of them
// through a client generated from the CSDS proto.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	seXDS  = "networking.istio.io/v1alpha3/ServiceEntry"
	seColl = "istio/networking/v1alpha3/serviceentries"
)

func serviceEntries(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		ns, name, _ := strings.Cut(n, "/")
		host := name + ".example.com"
		if i := strings.Index(name, "@"); i >= 0 { // name@host: another host, a new version
			host, name = name[i+1:], name[:i]
		}
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s}\nspec: {hosts: [%s]}\n", name, ns, host)
	}
	return b.String()
}

// fetch asks the bridge for client status with FetchClientStatus.
func fetch(t *testing.T, conn *grpc.ClientConn, matchers ...*matcher.NodeMatcher) *status.ClientStatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := status.NewClientStatusDiscoveryServiceClient(conn).FetchClientStatus(ctx, &status.ClientStatusRequest{NodeMatchers: matchers})
	if err != nil {
		t.Fatalf("FetchClientStatus: %v", err)
	}
	return resp
}

// waitFor fetches until check passes (nil), then returns that response; CSDS is a view the
// test polls, as an operator would.
func waitFor(t *testing.T, conn *grpc.ClientConn, check func(*status.ClientStatusResponse) error) *status.ClientStatusResponse {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp := fetch(t, conn)
		err := check(resp)
		if err == nil {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v; CSDS says:\n%s", err, describe(resp))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describe(resp *status.ClientStatusResponse) string {
	var b strings.Builder
	for _, cc := range resp.GetConfig() {
		fmt.Fprintf(&b, "node %q\n", cc.GetNode().GetId())
		for _, g := range cc.GetGenericXdsConfigs() {
			fmt.Fprintf(&b, "  %s %q version %q %s %s %v\n", g.GetTypeUrl(), g.GetName(), g.GetVersionInfo(), g.GetConfigStatus(), g.GetClientStatus(), g.GetErrorState())
		}
	}
	return b.String()
}

func node(resp *status.ClientStatusResponse, id string) *status.ClientConfig {
	for _, cc := range resp.GetConfig() {
		if cc.GetNode().GetId() == id {
			return cc
		}
	}
	return nil
}

func entry(resp *status.ClientStatusResponse, id, typeURL, name string) *status.ClientConfig_GenericXdsConfig {
	for _, g := range node(resp, id).GetGenericXdsConfigs() {
		if g.GetTypeUrl() == typeURL && g.GetName() == name {
			return g
		}
	}
	return nil
}

// hasStatus is a check that the entries (type, name) of a node are in these states.
func hasStatus(id, typeURL string, want map[string]status.ConfigStatus) func(*status.ClientStatusResponse) error {
	return func(resp *status.ClientStatusResponse) error {
		for name, s := range want {
			g := entry(resp, id, typeURL, name)
			if g == nil {
				return fmt.Errorf("node %s has no entry %s %q", id, typeURL, name)
			}
			if g.GetConfigStatus() != s {
				return fmt.Errorf("node %s %s %q is %s, want %s", id, typeURL, name, g.GetConfigStatus(), s)
			}
		}
		return nil
	}
}

// sotwClient is an xDS state-of-the-world client on the aggregated service.
type sotwClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	node   *core.Node
}

func newSotW(t *testing.T, conn *grpc.ClientConn, n *core.Node) *sotwClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &sotwClient{t: t, stream: s, node: n}
}

func (c *sotwClient) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	req.Node = c.node
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *sotwClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	r, err := c.stream.Recv()
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *sotwClient) ack(r *discovery.DiscoveryResponse) {
	c.send(&discovery.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
}

func xdsNode(id string, metadata map[string]any) *core.Node {
	md, err := structpb.NewStruct(metadata)
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: id, Metadata: md}
}

// A response the client ACKed: its resources are SYNCED at that version, as is the type.
func TestCSDSSyncedAfterACK(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a", "shop/b"))
	conn := b.Dial(t)
	c := newSotW(t, conn, xdsNode("sotw-1", nil))
	c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
	r := c.recv()
	c.ack(r)
	resp := waitFor(t, conn, hasStatus("sotw-1", seXDS, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED, "shop/a": status.ConfigStatus_SYNCED, "shop/b": status.ConfigStatus_SYNCED}))
	for _, name := range []string{"", "shop/a"} {
		g := entry(resp, "sotw-1", seXDS, name)
		if g.GetVersionInfo() != r.VersionInfo || g.GetLastUpdated() == nil {
			t.Errorf("%q: version %q last_updated %v, want the ACKed version %q and a time", name, g.GetVersionInfo(), g.GetLastUpdated(), r.VersionInfo)
		}
	}
	if g := entry(resp, "sotw-1", seXDS, "shop/a"); g.GetClientStatus() != admin.ClientResourceStatus_ACKED || g.GetErrorState() != nil {
		t.Errorf("shop/a: client status %s, error %v; want ACKED and none", g.GetClientStatus(), g.GetErrorState())
	}
}

// A newer version sent and not answered yet: STALE at the version sent; what did not change
// stays SYNCED.
func TestCSDSStaleAfterANewerVersionWasSentButNotACKed(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a", "shop/b"))
	conn := b.Dial(t)
	c := newSotW(t, conn, xdsNode("sotw-1", nil))
	c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
	first := c.recv()
	c.ack(first)
	waitFor(t, conn, hasStatus("sotw-1", seXDS, map[string]status.ConfigStatus{"shop/a": status.ConfigStatus_SYNCED}))
	b.LoadYAML(t, serviceEntries("shop/a@a2.example.com", "shop/b"))
	second := c.recv() // not answered
	resp := waitFor(t, conn, hasStatus("sotw-1", seXDS, map[string]status.ConfigStatus{
		"": status.ConfigStatus_STALE, "shop/a": status.ConfigStatus_STALE, "shop/b": status.ConfigStatus_SYNCED,
	}))
	if g := entry(resp, "sotw-1", seXDS, "shop/a"); g.GetVersionInfo() != second.VersionInfo || g.GetClientStatus() != admin.ClientResourceStatus_REQUESTED {
		t.Errorf("shop/a: version %q client status %s; want the version sent, %q, REQUESTED", g.GetVersionInfo(), g.GetClientStatus(), second.VersionInfo)
	}
	if g := entry(resp, "sotw-1", seXDS, ""); g.GetVersionInfo() != second.VersionInfo {
		t.Errorf("type: version %q, want the version in flight %q", g.GetVersionInfo(), second.VersionInfo)
	}
	if g := entry(resp, "sotw-1", seXDS, "shop/b"); g.GetVersionInfo() != first.VersionInfo {
		t.Errorf("shop/b: version %q, want the ACKed %q", g.GetVersionInfo(), first.VersionInfo)
	}
}

// A NACK: the resources it refused are ERROR with the client's message and the refused
// version; the client's version is still the one it ACKed before.
func TestCSDSErrorAfterNACKWithItsMessage(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a", "shop/b"))
	conn := b.Dial(t)
	c := newSotW(t, conn, xdsNode("sotw-1", nil))
	c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
	first := c.recv()
	c.ack(first)
	waitFor(t, conn, hasStatus("sotw-1", seXDS, map[string]status.ConfigStatus{"shop/a": status.ConfigStatus_SYNCED}))
	b.LoadYAML(t, serviceEntries("shop/a@a2.example.com", "shop/b"))
	second := c.recv()
	c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS, VersionInfo: first.VersionInfo, ResponseNonce: second.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "host a2.example.com: not allowed here"}})
	resp := waitFor(t, conn, hasStatus("sotw-1", seXDS, map[string]status.ConfigStatus{
		"": status.ConfigStatus_ERROR, "shop/a": status.ConfigStatus_ERROR, "shop/b": status.ConfigStatus_SYNCED,
	}))
	for _, name := range []string{"", "shop/a"} {
		g := entry(resp, "sotw-1", seXDS, name)
		e := g.GetErrorState()
		if e.GetDetails() != "host a2.example.com: not allowed here" || e.GetVersionInfo() != second.VersionInfo || e.GetLastUpdateAttempt() == nil {
			t.Errorf("%q: error_state %v, want the NACK's message, version %s and time", name, e, second.VersionInfo)
		}
		if g.GetVersionInfo() != first.VersionInfo {
			t.Errorf("%q: version %q, want the one the client holds, %q", name, g.GetVersionInfo(), first.VersionInfo)
		}
	}
	if g := entry(resp, "sotw-1", seXDS, "shop/a"); g.GetClientStatus() != admin.ClientResourceStatus_NACKED {
		t.Errorf("shop/a: client status %s, want NACKED", g.GetClientStatus())
	}
}

// A resource the client asked for whose current version was not sent: NOT_SENT. Here a
// response is in flight (one unacknowledged response per type), and a new resource waits.
func TestCSDSNotSentForSubscribedButNotSent(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a"))
	conn := b.Dial(t)
	c := newSotW(t, conn, xdsNode("sotw-1", nil))
	c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
	c.recv() // not answered: nothing more is sent
	b.LoadYAML(t, serviceEntries("shop/a", "shop/c"))
	resp := waitFor(t, conn, hasStatus("sotw-1", seXDS, map[string]status.ConfigStatus{
		"": status.ConfigStatus_STALE, "shop/a": status.ConfigStatus_STALE, "shop/c": status.ConfigStatus_NOT_SENT,
	}))
	if g := entry(resp, "sotw-1", seXDS, "shop/c"); g.GetClientStatus() != admin.ClientResourceStatus_REQUESTED || g.GetVersionInfo() != "" {
		t.Errorf("shop/c: client status %s version %q, want REQUESTED and none held", g.GetClientStatus(), g.GetVersionInfo())
	}
}

// A delta client: SYNCED after its ACK; a name it asked for that does not exist is listed as
// DOES_NOT_EXIST, and does not make the type anything but SYNCED.
func TestCSDSDeltaClientAndNamesThatDoNotExist(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a", "shop/b"))
	conn := b.Dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := xdsNode("delta-1", nil)
	s.Send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: seXDS, ResourceNamesSubscribe: []string{"shop/a", "shop/nope"}})
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seXDS, ResponseNonce: r.Nonce})
	resp := waitFor(t, conn, hasStatus("delta-1", seXDS, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED, "shop/a": status.ConfigStatus_SYNCED}))
	if g := entry(resp, "delta-1", seXDS, "shop/nope"); g.GetClientStatus() != admin.ClientResourceStatus_DOES_NOT_EXIST {
		t.Errorf("shop/nope: %v, want DOES_NOT_EXIST", g)
	}
	if g := entry(resp, "delta-1", seXDS, "shop/b"); g != nil {
		t.Errorf("shop/b, not asked for, is listed: %v", g)
	}
	// A NACK of the next change: ERROR, and it stays ERROR after a later ACK of another change,
	// since delta does not send the refused version again.
	b.LoadYAML(t, serviceEntries("shop/a@a2.example.com", "shop/b"))
	r, _ = s.Recv()
	s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seXDS, ResponseNonce: r.Nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "refused"}})
	waitFor(t, conn, hasStatus("delta-1", seXDS, map[string]status.ConfigStatus{"": status.ConfigStatus_ERROR, "shop/a": status.ConfigStatus_ERROR}))
	s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seXDS, ResourceNamesSubscribe: []string{"shop/b"}})
	r, _ = s.Recv()
	s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seXDS, ResponseNonce: r.Nonce})
	waitFor(t, conn, hasStatus("delta-1", seXDS, map[string]status.ConfigStatus{"": status.ConfigStatus_ERROR, "shop/a": status.ConfigStatus_ERROR, "shop/b": status.ConfigStatus_SYNCED}))
}

// An MCP sink (istiod's kind of client, on ResourceSource) is a node like any other, its
// annotations its metadata.
func TestCSDSReportsMCPSinks(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a"))
	conn := b.Dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink := &mcp.SinkNode{Id: "istiod-1", Annotations: map[string]string{"team": "mesh"}}
	s.Send(&mcp.RequestResources{SinkNode: sink, Collection: seColl})
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&mcp.RequestResources{SinkNode: sink, Collection: seColl, ResponseNonce: r.Nonce})
	waitFor(t, conn, hasStatus("istiod-1", seColl, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED, "shop/a": status.ConfigStatus_SYNCED}))
	team := &matcher.NodeMatcher{NodeMetadatas: []*matcher.StructMatcher{{
		Path:  []*matcher.StructMatcher_PathSegment{{Segment: &matcher.StructMatcher_PathSegment_Key{Key: "team"}}},
		Value: &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: exact("mesh")}},
	}}}
	if got := nodes(fetch(t, conn, team)); !slices.Equal(got, []string{"istiod-1"}) {
		t.Errorf("nodes of team mesh: %v", got)
	}
}

// The sinks the bridge pushes to (downstreams) are nodes too: here another bridge, whose sink
// subscribes with its node id.
func TestCSDSReportsDownstreams(t *testing.T) {
	remote := bridgetest.Start(t)
	b := bridgetest.Start(t, bridgetest.WithDownstreams(remote.GRPCAddr()))
	b.LoadYAML(t, serviceEntries("shop/a"))
	conn := b.Dial(t)
	waitFor(t, conn, hasStatus("mcpbridge", seColl, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED, "shop/a": status.ConfigStatus_SYNCED}))
}

// grpc-go's own xDS client, resolving a target through the bridge: CSDS reports it with its
// listener, route, cluster and endpoints SYNCED, and the table shows it so.
func TestCSDSReportsAGRPCXDSClient(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, echoServiceYAML)
	dialXDS(t, b, `{"id": "grpc-client-1", "metadata": {"app": "echo-client"}}`)
	conn := b.Dial(t)
	all := func(types ...string) func(*status.ClientStatusResponse) error {
		return func(resp *status.ClientStatusResponse) error {
			for _, ty := range types {
				if err := hasStatus("grpc-client-1", ty, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED})(resp); err != nil {
					return err
				}
			}
			return nil
		}
	}
	resp := waitFor(t, conn, all(translate.EnvoyListenerType, translate.EnvoyRouteType, translate.EnvoyClusterType, translate.EnvoyEndpointType))
	if g := entry(resp, "grpc-client-1", translate.EnvoyListenerType, "echo.e2e.svc.cluster.local:8080"); g.GetConfigStatus() != status.ConfigStatus_SYNCED {
		t.Errorf("the client's listener: %v", g)
	}
	rows := csds.Table(resp)
	var out strings.Builder
	csds.WriteTable(&out, rows)
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "grpc-client-1 ") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) != 7 || !slices.Equal(f[1:5], []string{"SYNCED", "SYNCED", "SYNCED", "SYNCED"}) || f[5] != "-" {
		t.Errorf("table row %q, want SYNCED for CDS LDS EDS RDS, none for ISTIO; table:\n%s", line, out.String())
	}
}

func fromJSON(t *testing.T, js string) *matcher.NodeMatcher {
	m := &matcher.NodeMatcher{}
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func exact(s string) *matcher.StringMatcher {
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s}}
}

func nodes(resp *status.ClientStatusResponse) []string {
	var out []string
	for _, cc := range resp.GetConfig() {
		out = append(out, cc.GetNode().GetId())
	}
	slices.Sort(out)
	return out
}

func metaKey(keys ...string) []*matcher.StructMatcher_PathSegment {
	var out []*matcher.StructMatcher_PathSegment
	for _, k := range keys {
		out = append(out, &matcher.StructMatcher_PathSegment{Segment: &matcher.StructMatcher_PathSegment_Key{Key: k}})
	}
	return out
}

// node_matchers select nodes by id (exact, prefix, suffix, contains, safe_regex, ignore_case)
// and metadata (by key path: string, bool, number, present, null, or): OR between matchers,
// AND within one.
func TestCSDSNodeMatchers(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a"))
	conn := b.Dial(t)
	clients := map[string]map[string]any{
		"sidecar~10.0.0.1~a-1.shop~shop.svc.cluster.local":                 {"LABELS": map[string]any{"app": "a"}, "ISTIO_VERSION": "1.24.0", "canary": true, "replicas": 3},
		"sidecar~10.0.0.2~b-1.pay~pay.svc.cluster.local":                   {"LABELS": map[string]any{"app": "b"}, "ISTIO_VERSION": "1.23.1", "canary": false, "owner": nil},
		"router~10.0.0.3~gw-1.istio-system~istio-system.svc.cluster.local": {"LABELS": map[string]any{"istio": "ingressgateway"}},
	}
	for id, md := range clients {
		c := newSotW(t, conn, xdsNode(id, md))
		c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
		c.ack(c.recv())
	}
	waitFor(t, conn, func(resp *status.ClientStatusResponse) error {
		if len(resp.GetConfig()) != 3 {
			return fmt.Errorf("%d nodes", len(resp.GetConfig()))
		}
		return nil
	})
	a, bb, gw := "sidecar~10.0.0.1~a-1.shop~shop.svc.cluster.local", "sidecar~10.0.0.2~b-1.pay~pay.svc.cluster.local", "router~10.0.0.3~gw-1.istio-system~istio-system.svc.cluster.local"
	id := func(m *matcher.StringMatcher) *matcher.NodeMatcher { return &matcher.NodeMatcher{NodeId: m} }
	meta := func(v *matcher.ValueMatcher, keys ...string) *matcher.StructMatcher {
		return &matcher.StructMatcher{Path: metaKey(keys...), Value: v}
	}
	str := func(m *matcher.StringMatcher) *matcher.ValueMatcher {
		return &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: m}}
	}
	cases := []struct {
		name     string
		matchers []*matcher.NodeMatcher
		want     []string
	}{
		{"none selects all", nil, []string{a, bb, gw}},
		{"exact", []*matcher.NodeMatcher{id(exact(a))}, []string{a}},
		{"prefix", []*matcher.NodeMatcher{id(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "sidecar~"}})}, []string{a, bb}},
		{"suffix", []*matcher.NodeMatcher{id(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: "pay.svc.cluster.local"}})}, []string{bb}},
		{"contains ignore_case", []*matcher.NodeMatcher{id(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Contains{Contains: "GW-1"}, IgnoreCase: true})}, []string{gw}},
		{"safe_regex matches the whole id", []*matcher.NodeMatcher{id(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: `sidecar~[0-9.]+~a-\d+\.shop~.*`}}})}, []string{a}},
		{"safe_regex partial is no match", []*matcher.NodeMatcher{id(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: `a-1`}}})}, nil},
		{"metadata string at a path", []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{meta(str(exact("b")), "LABELS", "app")}}}, []string{bb}},
		{"metadata prefix", []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{meta(str(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "1.2"}}), "ISTIO_VERSION")}}}, []string{a, bb}},
		{"metadata bool", []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{meta(&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_BoolMatch{BoolMatch: true}}, "canary")}}}, []string{a}},
		{"metadata present", []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{meta(&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_PresentMatch{PresentMatch: true}}, "canary")}}}, []string{a, bb}},
		{"metadata null", []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{meta(&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_NullMatch_{NullMatch: &matcher.ValueMatcher_NullMatch{}}}, "owner")}}}, []string{bb}},
		{"metadata number range", []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{meta(&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_DoubleMatch{DoubleMatch: &matcher.DoubleMatcher{MatchPattern: &matcher.DoubleMatcher_Exact{Exact: 3}}}}, "replicas")}}}, []string{a}},
		{"id and metadata: AND", []*matcher.NodeMatcher{{NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "sidecar~"}}, NodeMetadatas: []*matcher.StructMatcher{meta(str(exact("a")), "LABELS", "app")}}}, []string{a}},
		{"two matchers: OR", []*matcher.NodeMatcher{id(exact(a)), id(exact(gw))}, []string{a, gw}},
		{"a path that leads nowhere", []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{meta(str(exact("a")), "LABELS", "app", "deeper")}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if got := nodes(fetch(t, conn, tc.matchers...)); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// A matcher the bridge does not implement is refused with InvalidArgument naming it, never
// ignored: a filter dropped would show nodes the operator meant to leave out.
func TestCSDSRefusesUnsupportedMatchersNamingThem(t *testing.T) {
	b := bridgetest.Start(t)
	conn := b.Dial(t)
	cases := map[string]*matcher.NodeMatcher{
		"node_matchers[0].node_metadatas[0].value.list_match": {NodeMetadatas: []*matcher.StructMatcher{{Path: metaKey("k"),
			Value: &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_ListMatch{ListMatch: &matcher.ListMatcher{}}}}}},
		"node_matchers[0].node_id: custom":               fromJSON(t, `{"nodeId": {"custom": {"name": "x", "typedConfig": {"@type": "type.googleapis.com/google.protobuf.Empty"}}}}`),
		"node_matchers[0].node_id: safe_regex":           {NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "("}}}},
		"node_matchers[0].node_metadatas[0].path: empty": {NodeMetadatas: []*matcher.StructMatcher{{Value: &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_BoolMatch{BoolMatch: true}}}}},
	}
	for want, m := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := status.NewClientStatusDiscoveryServiceClient(conn).FetchClientStatus(ctx, &status.ClientStatusRequest{NodeMatchers: []*matcher.NodeMatcher{m}})
		cancel()
		if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want InvalidArgument naming %q", err, want)
		}
	}
}

// StreamClientStatus answers each request in turn, with its own matchers, until the client
// ends the stream.
func TestCSDSStreamClientStatusAnswersEachRequest(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a"))
	conn := b.Dial(t)
	for _, id := range []string{"one", "two"} {
		c := newSotW(t, conn, xdsNode(id, nil))
		c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
		c.ack(c.recv())
	}
	// The ACKs travel on their own streams: wait until the bridge has taken both (a check
	// made as soon as the nodes are listed saw STALE on a loaded machine, before an ACK
	// arrived).
	waitFor(t, conn, func(resp *status.ClientStatusResponse) error {
		if got := nodes(resp); !slices.Equal(got, []string{"one", "two"}) {
			return fmt.Errorf("nodes %v", got)
		}
		for _, id := range []string{"one", "two"} {
			if st := entry(resp, id, seXDS, "shop/a").GetConfigStatus(); st != status.ConfigStatus_SYNCED {
				return fmt.Errorf("%s: shop/a is %s", id, st)
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := status.NewClientStatusDiscoveryServiceClient(conn).StreamClientStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"two", "one", "two"} {
		if err := s.Send(&status.ClientStatusRequest{NodeMatchers: []*matcher.NodeMatcher{{NodeId: exact(id)}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := nodes(resp); !slices.Equal(got, []string{id}) {
			t.Errorf("asked for %s, got %v", id, got)
		}
		if entry(resp, id, seXDS, "shop/a").GetConfigStatus() != status.ConfigStatus_SYNCED {
			t.Errorf("%s: shop/a not SYNCED:\n%s", id, describe(resp))
		}
	}
	s.CloseSend()
	if _, err := s.Recv(); err != io.EOF {
		t.Errorf("after CloseSend: %v, want the stream to end cleanly", err)
	}
}

// A node's metadata is kept for the matchers up to 64 KiB encoded: a larger one is not kept,
// so that no client can make each of its streams hold megabytes; the node is listed still.
func TestCSDSNodeMetadataOverTheCapIsNotKept(t *testing.T) {
	b := bridgetest.Start(t)
	conn := b.Dial(t)
	for id, size := range map[string]int{"small": 1 << 10, "large": 65 << 10} {
		c := newSotW(t, conn, xdsNode(id, map[string]any{"k": strings.Repeat("x", size)}))
		c.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
		c.ack(c.recv())
	}
	waitFor(t, conn, func(resp *status.ClientStatusResponse) error {
		if got := nodes(resp); !slices.Equal(got, []string{"large", "small"}) {
			return fmt.Errorf("nodes %v", got)
		}
		return nil
	})
	present := &matcher.NodeMatcher{NodeMetadatas: []*matcher.StructMatcher{{Path: metaKey("k"),
		Value: &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_PresentMatch{PresentMatch: true}}}}}
	if got := nodes(fetch(t, conn, present)); !slices.Equal(got, []string{"small"}) {
		t.Errorf("nodes with metadata k: %v, want only the small one", got)
	}
}

// The streams of one node (Envoy's per-type streams, here CDS's own service beside ADS) are one
// ClientConfig; a stream that named no node is one of its own.
func TestCSDSGroupsTheStreamsOfOneNode(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, serviceEntries("shop/a"))
	conn := b.Dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cds, err := clusterv3.NewClusterDiscoveryServiceClient(conn).StreamClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cds.Send(&discovery.DiscoveryRequest{Node: xdsNode("envoy-1", nil)}) // the service's type
	r, err := cds.Recv()
	if err != nil {
		t.Fatal(err)
	}
	cds.Send(&discovery.DiscoveryRequest{VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	ads := newSotW(t, conn, xdsNode("envoy-1", nil))
	ads.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
	ads.ack(ads.recv())
	anonymous := newSotW(t, conn, nil)
	anonymous.send(&discovery.DiscoveryRequest{TypeUrl: seXDS})
	anonymous.recv()
	resp := waitFor(t, conn, func(resp *status.ClientStatusResponse) error {
		if err := hasStatus("envoy-1", seXDS, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED})(resp); err != nil {
			return err
		}
		return hasStatus("envoy-1", translate.EnvoyClusterType, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED})(resp)
	})
	if got := nodes(resp); !slices.Equal(got, []string{"", "envoy-1"}) {
		t.Errorf("ClientConfigs of nodes %v, want one for envoy-1 and one for the stream without a node", got)
	}
}

// A proxyless gRPC client of a namespace (GENERATOR=grpc, Istio's sidecar node ID) is served
// the clusters of their gRPC form, through its namespace's view: CSDS reports them under the
// cluster type it asked for, SYNCED once it ACKed, read from that form's collection.
func TestCSDSReportsAProxylessClientsOwnClusters(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, echoServiceYAML)
	const id = "sidecar~10.0.0.9~echo-client-1.e2e~e2e.svc.cluster.local"
	dialXDS(t, b, fmt.Sprintf(`{"id": %q, "metadata": {"GENERATOR": "grpc", "NAMESPACE": "e2e"}}`, id))
	const name = "outbound|8080||echo.e2e.svc.cluster.local"
	waitFor(t, b.Dial(t), hasStatus(id, translate.EnvoyClusterType, map[string]status.ConfigStatus{"": status.ConfigStatus_SYNCED, name: status.ConfigStatus_SYNCED}))
	// What it was served is read from the gRPC form's collection, through e2e's view.
	want := store.Layered(translate.EnvoyGRPCClusterCollection, translate.ScopeCollection("e2e", translate.EnvoyGRPCClusterCollection))
	var got []string
	for _, c := range b.Clients() {
		if c.Node != id {
			continue
		}
		for _, sub := range c.Subscriptions {
			if sub.Type == translate.EnvoyClusterType {
				got = append(got, sub.Collection)
			}
		}
	}
	if !slices.Equal(got, []string{want}) {
		t.Errorf("the client's clusters are read from %q, want %q", got, want)
	}
}

// dialXDS starts grpc-go's xDS client, of the given bootstrap node (JSON), on
// xds:///echo.e2e.svc.cluster.local:8080 through the bridge, until the test ends.
func dialXDS(t *testing.T, b *bridgetest.Bridge, node string) {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": %s
	}`, b.GRPCAddr(), node)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	client, err := grpc.NewClient("xds:///echo.e2e.svc.cluster.local:8080", grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	client.Connect() // resolving starts the xDS watches
}

// echoServiceYAML is the service dialXDS's client resolves.
const echoServiceYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [echo.e2e.svc.cluster.local]
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: 9}}]
`
