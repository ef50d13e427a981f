package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/translate"
)

const (
	endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	sidecarNode  = "sidecar~10.0.0.1~app-1.shop~shop.svc.cluster.local"
)

// serviceEntryYAML is a STATIC ServiceEntry of namespace shop, one endpoint.
func serviceEntryYAML(name string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %[1]s, namespace: shop}
spec:
  hosts: [%[1]s.shop.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`, name)
}

func clusterOf(name string) string { return "outbound|80||" + name + ".shop.example" }

// meshFile writes the ServiceEntries named into one file (replaced whole, as an editor saves).
func meshFile(t *testing.T, path string, names ...string) {
	t.Helper()
	var docs []string
	for _, n := range names {
		docs = append(docs, serviceEntryYAML(n))
	}
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// restClient polls as Envoy's REST subscription does: a POST of a JSON DiscoveryRequest.
type restClient struct {
	t    *testing.T
	http *http.Client
	base string
}

func newRESTClient(t *testing.T, base string, cfg *tls.Config) *restClient {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &restClient{t: t, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, base: base}
}

// restAnswer is one poll's answer: its status, the decoded DiscoveryResponse (200), the body.
type restAnswer struct {
	code int
	resp *discovery.DiscoveryResponse
	body string
	took time.Duration
}

func (c *restClient) poll(path string, req *discovery.DiscoveryRequest) restAnswer {
	c.t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.post(path, body)
}

func (c *restClient) post(path string, body []byte) restAnswer {
	c.t.Helper()
	start := time.Now()
	resp, err := c.http.Post(c.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	a := restAnswer{code: resp.StatusCode, body: string(b), took: time.Since(start)}
	if resp.StatusCode == http.StatusOK {
		a.resp = &discovery.DiscoveryResponse{}
		if err := protojson.Unmarshal(b, a.resp); err != nil {
			c.t.Fatalf("POST %s: the answer is not a JSON DiscoveryResponse: %v\n%s", path, err, b)
		}
	}
	return a
}

// until polls without a version until cond holds of the answer.
func (c *restClient) until(path string, req *discovery.DiscoveryRequest, cond func(*discovery.DiscoveryResponse) bool) *discovery.DiscoveryResponse {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := c.poll(path, req)
		if a.code != http.StatusOK {
			c.t.Fatalf("POST %s: %d %s", path, a.code, a.body)
		}
		if cond(a.resp) {
			return a.resp
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("POST %s: the answer never held what was expected; last %v", path, a.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clusterNames decodes the resources as Envoy clusters and returns their names.
func clusterNames(t *testing.T, resp *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		var c cluster.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatalf("a resource is no envoy.config.cluster.v3.Cluster: %v", err)
		}
		out = append(out, c.Name)
	}
	return out
}

func hasClusters(t *testing.T, want ...string) func(*discovery.DiscoveryResponse) bool {
	return func(r *discovery.DiscoveryResponse) bool {
		return slices.Equal(withoutPlumbing(clusterNames(t, r)), want)
	}
}

// plumbingClusters are istiod's sidecar plumbing clusters (translate/envoy sidecar.go), which
// the translation serves whatever the mesh holds.
var plumbingClusters = []string{"BlackHoleCluster", "InboundPassthroughCluster", "PassthroughCluster"}

// withoutPlumbing leaves the plumbing clusters out of cluster names.
func withoutPlumbing(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(plumbingClusters, n) {
			out = append(out, n)
		}
	}
	return out
}

// restBridge serves the ServiceEntries of one watched file, translated, with REST polling.
func restBridge(t *testing.T, configure func(*Config), names ...string) (*running, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	meshFile(t, path, names...)
	b := start(t, func(c *Config) {
		c.Sources.Files = []string{path}
		c.Sources.FileDebounce = 10 * time.Millisecond
		if configure != nil {
			configure(c)
		}
	})
	return b, path
}

func sidecar() *core.Node { return &core.Node{Id: sidecarNode} }

// Envoy's REST subscription posts the version it holds: a client without one, or with one
// that is not current, is answered at once with the whole state, in protojson that decodes
// into a DiscoveryResponse of Envoy clusters.
func TestRESTLongPollReturnsWhenVersionDiffers(t *testing.T) {
	b, _ := restBridge(t, nil, "a", "b")
	c := newRESTClient(t, b.httpURL, nil)
	req := &discovery.DiscoveryRequest{Node: sidecar()}
	first := c.until("/v3/discovery:clusters", req, hasClusters(t, clusterOf("a"), clusterOf("b")))
	if first.TypeUrl != clusterType || first.VersionInfo == "" {
		t.Fatalf("type_url %q, version_info %q", first.TypeUrl, first.VersionInfo)
	}
	req.VersionInfo = "not-the-current-one"
	a := c.poll("/v3/discovery:clusters", req)
	if a.code != http.StatusOK || a.took > 5*time.Second || a.resp.VersionInfo != first.VersionInfo {
		t.Fatalf("a stale version: %d after %s, version %q (want %q at once)", a.code, a.took, a.resp.GetVersionInfo(), first.VersionInfo)
	}
	if !slices.Equal(withoutPlumbing(clusterNames(t, a.resp)), []string{clusterOf("a"), clusterOf("b")}) {
		t.Fatalf("clusters %v", clusterNames(t, a.resp))
	}
}

// A poll with the current version waits; an edit of the file answers it with the new version,
// and nothing answers it before.
func TestRESTLongPollWaitsAndReturnsTheNewVersionAfterAFileEdit(t *testing.T) {
	b, path := restBridge(t, nil, "a")
	c := newRESTClient(t, b.httpURL, nil)
	req := &discovery.DiscoveryRequest{Node: sidecar()}
	held := c.until("/v3/discovery:clusters", req, hasClusters(t, clusterOf("a")))
	req.VersionInfo = held.VersionInfo
	answers := make(chan restAnswer, 1)
	go func() { answers <- c.poll("/v3/discovery:clusters", req) }()
	waitUntil(t, func() bool { return b.rest.Stats().Waiting == 1 })
	select {
	case a := <-answers:
		t.Fatalf("answered before any change: %d %s", a.code, a.body)
	case <-time.After(200 * time.Millisecond):
	}
	meshFile(t, path, "a", "c")
	a := <-answers
	if a.code != http.StatusOK || a.resp.VersionInfo == held.VersionInfo {
		t.Fatalf("after the edit: %d, version %q (held %q)", a.code, a.resp.GetVersionInfo(), held.VersionInfo)
	}
	if got := withoutPlumbing(clusterNames(t, a.resp)); !slices.Equal(got, []string{clusterOf("a"), clusterOf("c")}) {
		t.Fatalf("after the edit: clusters %v", got)
	}
}

// With nothing new within http.rest.poll_timeout the answer is 304 Not Modified with no body,
// which Envoy's RestApiFetcher takes as "nothing new".
func TestRESTLongPollTimesOutWithNotModified(t *testing.T) {
	const timeout = 300 * time.Millisecond
	b, _ := restBridge(t, func(c *Config) { c.HTTP.REST.PollTimeout = timeout }, "a")
	c := newRESTClient(t, b.httpURL, nil)
	req := &discovery.DiscoveryRequest{Node: sidecar()}
	req.VersionInfo = c.until("/v3/discovery:clusters", req, hasClusters(t, clusterOf("a"))).VersionInfo
	a := c.poll("/v3/discovery:clusters", req)
	if a.code != http.StatusNotModified || a.body != "" || a.took < timeout {
		t.Fatalf("no change: %d after %s, body %q; want 304 after %s, empty", a.code, a.took, a.body, timeout)
	}
}

// A change outside what a poll asked for (another cluster's endpoints) does not answer it:
// versions name content, not store revisions.
func TestRESTVersionNamesContentSoUnrelatedChangesKeepWaiting(t *testing.T) {
	b, path := restBridge(t, func(c *Config) { c.HTTP.REST.PollTimeout = time.Second }, "a", "b")
	c := newRESTClient(t, b.httpURL, nil)
	req := &discovery.DiscoveryRequest{Node: sidecar(), ResourceNames: []string{clusterOf("a")}}
	held := c.until("/v3/discovery:endpoints", req, func(r *discovery.DiscoveryResponse) bool { return len(r.Resources) == 1 })
	req.VersionInfo = held.VersionInfo
	answers := make(chan restAnswer, 1)
	go func() { answers <- c.poll("/v3/discovery:endpoints", req) }()
	waitUntil(t, func() bool { return b.rest.Stats().Waiting == 1 })
	before := b.Store().View().Collection(endpointType).Revision
	meshFile(t, path, "a") // b's endpoints go; a's stay as they were
	waitUntil(t, func() bool { return b.Store().View().Collection(endpointType).Revision > before })
	if a := <-answers; a.code != http.StatusNotModified {
		t.Fatalf("an unrelated change answered the poll: %d %s", a.code, a.body)
	}
}

// resource_names narrow the answer to those names, as a gRPC subscription's do; endpoints
// decode as ClusterLoadAssignments.
func TestRESTResourceNamesNarrowTheAnswer(t *testing.T) {
	b, _ := restBridge(t, nil, "a", "b", "c")
	c := newRESTClient(t, b.httpURL, nil)
	req := &discovery.DiscoveryRequest{Node: sidecar(), ResourceNames: []string{clusterOf("c"), clusterOf("a"), clusterOf("missing")}}
	resp := c.until("/v3/discovery:endpoints", req, func(r *discovery.DiscoveryResponse) bool { return len(r.Resources) == 2 })
	var got []string
	for _, a := range resp.Resources {
		var cla endpoint.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatalf("not a ClusterLoadAssignment: %v", err)
		}
		got = append(got, cla.ClusterName)
	}
	if !slices.Equal(got, []string{clusterOf("a"), clusterOf("c")}) {
		t.Fatalf("endpoints %v, want a's and c's", got)
	}
	if resp.TypeUrl != endpointType {
		t.Fatalf("type_url %q", resp.TypeUrl)
	}
}

// The answer holds exactly what a gRPC ADS client of the same node receives first.
func TestRESTAnswerEqualsTheADSResponseOfTheSameNode(t *testing.T) {
	b, _ := restBridge(t, nil, "a", "b")
	c := newRESTClient(t, b.httpURL, nil)
	for _, typeURL := range []string{clusterType, listenerType} {
		path := map[string]string{clusterType: "/v3/discovery:clusters", listenerType: "/v3/discovery:listeners"}[typeURL]
		// Until a's and b's clusters are translated (one store write with their listeners): the
		// sidecar plumbing (PassthroughCluster...) is there from the translation's start.
		rest := c.until(path, &discovery.DiscoveryRequest{Node: sidecar()}, func(r *discovery.DiscoveryResponse) bool {
			if typeURL != clusterType {
				return len(r.Resources) > 0
			}
			var names []string
			for _, a := range r.Resources {
				var cl cluster.Cluster
				if a.UnmarshalTo(&cl) == nil {
					names = append(names, cl.Name)
				}
			}
			return slices.Contains(names, clusterOf("a")) && slices.Contains(names, clusterOf("b"))
		})
		st := ads(t, dialConn(t, b.grpcAddr))
		st.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, Node: sidecar()})
		grpcResp := st.Recv()
		if len(grpcResp.Resources) != len(rest.Resources) {
			t.Fatalf("%s: ADS %d resources, REST %d", typeURL, len(grpcResp.Resources), len(rest.Resources))
		}
		for i := range rest.Resources {
			if !proto.Equal(rest.Resources[i], grpcResp.Resources[i]) {
				t.Fatalf("%s: resource %d differs:\nREST %v\nADS  %v", typeURL, i, rest.Resources[i], grpcResp.Resources[i])
			}
		}
	}
}

// The MCP collections are served over xDS at /v3/discovery:resources by type_url, each
// resource an istio.mcp.v1alpha1.Resource.
func TestRESTServesMCPCollectionsByTypeURL(t *testing.T) {
	b, _ := restBridge(t, nil, "a")
	c := newRESTClient(t, b.httpURL, nil)
	resp := c.until("/v3/discovery:resources", &discovery.DiscoveryRequest{TypeUrl: seXDSType}, func(r *discovery.DiscoveryResponse) bool { return len(r.Resources) == 1 })
	var r mcpapi.Resource
	if err := resp.Resources[0].UnmarshalTo(&r); err != nil || r.GetMetadata().GetName() != "shop/a" {
		t.Fatalf("resource %v (%v), want shop/a as an MCP Resource", resp.Resources[0], err)
	}
}

// What no request may be is answered 400 (or 413) with a message naming the fault.
func TestRESTBadRequestsAreRefusedWithTheFault(t *testing.T) {
	b, _ := restBridge(t, func(c *Config) { c.HTTP.REST.MaxRequestBytes = 1024 }, "a")
	c := newRESTClient(t, b.httpURL, nil)
	for _, tc := range []struct {
		path, body string
		code       int
		names      string
	}{
		{"/v3/discovery:clusters", "{not json", http.StatusBadRequest, "DiscoveryRequest"},
		{"/v3/discovery:clusters", `{"type_url": "` + listenerType + `"}`, http.StatusBadRequest, "does not match"},
		{"/v3/discovery:resources", `{}`, http.StatusBadRequest, "type_url"},
		{"/v3/discovery:clusters", `{"resource_names": ["` + strings.Repeat("x", 2000) + `"]}`, http.StatusRequestEntityTooLarge, "max_request_bytes"},
	} {
		a := c.post(tc.path, []byte(tc.body))
		if a.code != tc.code || !strings.Contains(a.body, tc.names) || !strings.Contains(a.body, `"error"`) {
			t.Errorf("POST %s %.40q: %d %s; want %d naming %q", tc.path, tc.body, a.code, a.body, tc.code, tc.names)
		}
	}
}

// Polls beyond http.rest.max_concurrent_polls are answered 503 with Retry-After (Envoy counts
// a failed fetch and polls again) and counted as refusals of that limit.
func TestRESTPollsOverTheLimitAreRefused(t *testing.T) {
	b, _ := restBridge(t, func(c *Config) { c.HTTP.REST.MaxConcurrentPolls = 1; c.HTTP.REST.PollTimeout = time.Second }, "a")
	c := newRESTClient(t, b.httpURL, nil)
	req := &discovery.DiscoveryRequest{Node: sidecar()}
	req.VersionInfo = c.until("/v3/discovery:clusters", req, hasClusters(t, clusterOf("a"))).VersionInfo
	waiting := make(chan restAnswer, 1)
	go func() { waiting <- c.poll("/v3/discovery:clusters", req) }()
	waitUntil(t, func() bool { return b.rest.Stats().Waiting == 1 })
	a := c.poll("/v3/discovery:clusters", req)
	if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "http.rest.max_concurrent_polls") {
		t.Fatalf("a poll over the limit: %d %s", a.code, a.body)
	}
	eventually(t, b, 1, "mcpbridge_limit_refusals_total", "limit", "max_concurrent_polls")
	if w := <-waiting; w.code != http.StatusNotModified {
		t.Fatalf("the waiting poll: %d", w.code)
	}
}

// A gateway (router~ node) polling listeners has its class built while it polls, as an ADS
// gateway has while connected: its long poll is answered when the class's listener exists.
func TestRESTRouterNodeGetsItsGatewayClassBuilt(t *testing.T) {
	b := start(t, func(c *Config) { c.Sources.Files = []string{"../examples"} })
	c := newRESTClient(t, b.httpURL, nil)
	labels := map[string]any{"istio": "ingressgateway", "app": "istio-ingressgateway"}
	md, err := structpb.NewStruct(map[string]any{"LABELS": labels})
	if err != nil {
		t.Fatal(err)
	}
	req := &discovery.DiscoveryRequest{Node: &core.Node{Id: "router~10.0.0.2~ingress-1.istio-system~istio-system.svc.cluster.local", Metadata: md}}
	class := translate.GatewayClass{Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}}.ID()
	want := translate.GatewayClassPrefix(class) + "0.0.0.0_80"
	for deadline := time.Now().Add(10 * time.Second); ; {
		a := c.poll("/v3/discovery:listeners", req)
		if a.code != http.StatusOK {
			t.Fatalf("%d %s", a.code, a.body)
		}
		got := anyNames(t, a.resp.Resources)
		if slices.Equal(got, []string{want}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listeners %v, want %s", got, want)
		}
		req.VersionInfo = a.resp.VersionInfo // a long poll: answered when the class is built
	}
}

// REST polling is authorized as gRPC is, by the identity of the client certificate: a peer no
// rule matches, a type outside its grant and a node of another namespace are answered 403
// with the reason and counted; what it may read comes narrowed to its namespaces.
func TestRESTRefusesWhatAuthzRefuses(t *testing.T) {
	s := startSecured(t, nil)
	s.mesh(t, "payments/a", "other/b")
	https := strings.Replace(s.httpURL, "http://", "https://", 1)
	as := func(identity string) *restClient {
		return newRESTClient(t, https, clientTLS(s.ca.Pool(), s.ca.Client(t, identity)))
	}
	app := as(idApp)
	node := &core.Node{Id: "sidecar~10.0.0.1~app-1.payments~payments.svc.cluster.local"}
	a := app.poll("/v3/discovery:clusters", &discovery.DiscoveryRequest{Node: node})
	if a.code != http.StatusOK {
		t.Fatalf("clusters for the payments app: %d %s", a.code, a.body)
	}
	assertNamesEqual(t, "the payments app's clusters", clusterNames(t, a.resp), "outbound|80||a.payments.svc.cluster.local")

	for _, tc := range []struct {
		name   string
		c      *restClient
		path   string
		node   *core.Node
		reason string
		names  string
	}{
		{"no rule", as(idStranger), "/v3/discovery:clusters", nil, "no_rule", idStranger},
		{"type outside the grant", app, "/v3/discovery:listeners", node, "collection", "may not consume"},
		{"node of another namespace", app, "/v3/discovery:clusters", &core.Node{Id: "sidecar~10.0.0.1~x.other~other.svc.cluster.local"}, "node_identity", "other"},
	} {
		before := value(t, s.running, "mcpbridge_authz_refusals_total", "role", "source", "reason", tc.reason)
		a := tc.c.poll(tc.path, &discovery.DiscoveryRequest{Node: tc.node})
		if a.code != http.StatusForbidden || !strings.Contains(a.body, tc.names) {
			t.Errorf("%s: %d %s; want 403 naming %q", tc.name, a.code, a.body, tc.names)
		}
		eventually(t, s.running, before+1, "mcpbridge_authz_refusals_total", "role", "source", "reason", tc.reason)
	}
}

// A stopping bridge answers its waiting polls at once (503: Envoy keeps its config and polls
// again) rather than after the poll timeout.
func TestRESTWaitingPollsAreAnsweredWhenTheBridgeStops(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPC.ShutdownGrace = 5 * time.Second
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, _ := net.Listen("tcp", "127.0.0.1:0")
	httpLis, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, grpcLis, httpLis) }()
	c := newRESTClient(t, "http://"+httpLis.Addr().String(), nil)
	req := &discovery.DiscoveryRequest{Node: sidecar()}
	// The translation's one write, the sidecar plumbing, done: no later version ends the poll.
	req.VersionInfo = c.until("/v3/discovery:clusters", req, func(r *discovery.DiscoveryResponse) bool { return len(r.Resources) > 0 }).VersionInfo
	answers := make(chan restAnswer, 1)
	go func() { answers <- c.poll("/v3/discovery:clusters", req) }()
	waitUntil(t, func() bool { return b.rest.Stats().Waiting == 1 })
	start := time.Now()
	cancel()
	a := <-answers
	if a.code != http.StatusServiceUnavailable || time.Since(start) > 3*time.Second {
		t.Fatalf("on stop: %d after %s, want 503 at once", a.code, time.Since(start))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A REST client that refused the last answer says so in error_detail: counted as a NACK of
// the type, as over gRPC; it is answered the current state all the same.
func TestRESTErrorDetailIsCountedAsANACK(t *testing.T) {
	b, _ := restBridge(t, nil, "a")
	c := newRESTClient(t, b.httpURL, nil)
	a := c.post("/v3/discovery:clusters", []byte(`{"version_info": "old", "error_detail": {"code": 3, "message": "rejected"}}`))
	if a.code != http.StatusOK {
		t.Fatalf("%d %s", a.code, a.body)
	}
	eventually(t, b, 1, "mcpbridge_request_nacks_total", "role", "source", "collection", clusterType, "code", "InvalidArgument")
}

// A node's own narrowing (metadata MCPBRIDGE_NAMESPACES) narrows the answer as over gRPC.
func TestRESTNodeNamespacesNarrowTheAnswer(t *testing.T) {
	b, _ := restBridge(t, func(c *Config) { c.Sources.Files = append(c.Sources.Files, "../examples") }, "a")
	c := newRESTClient(t, b.httpURL, nil)
	all := c.until("/v3/discovery:resources", &discovery.DiscoveryRequest{TypeUrl: seXDSType}, func(r *discovery.DiscoveryResponse) bool { return len(r.Resources) > 1 })
	md, _ := structpb.NewStruct(map[string]any{"MCPBRIDGE_NAMESPACES": "shop"})
	a := c.poll("/v3/discovery:resources", &discovery.DiscoveryRequest{TypeUrl: seXDSType, Node: &core.Node{Id: "x", Metadata: md}})
	if a.code != http.StatusOK {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if got := anyNames(t, a.resp.Resources); !slices.Equal(got, []string{"shop/a"}) {
		t.Fatalf("narrowed to shop: %v (of %v)", got, anyNames(t, all.Resources))
	}
	if a.resp.VersionInfo == all.VersionInfo {
		t.Fatal("the narrowed answer has the whole answer's version")
	}
}
