package app

import (
	"context"
	"crypto/tls"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/certtest"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/internal/tlsserver"
	"github.com/mcpbridge/mcpbridge/source"
)

// The identities of the authorization tests: a producer and an application of the payments
// namespace, istiod, an on-call administrator, and a peer no rule names.
const (
	idProducer = "spiffe://mesh.example/ns/payments/sa/producer"
	idApp      = "spiffe://mesh.example/ns/payments/sa/app"
	idIstiod   = "spiffe://mesh.example/ns/istio-system/sa/istiod"
	idOncall   = "spiffe://mesh.example/ns/ops/sa/oncall"
	idStranger = "spiffe://mesh.example/ns/other/sa/stranger"

	vsColl      = "istio/networking/v1alpha3/virtualservices"
	clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	seXDSType   = "networking.istio.io/v1alpha3/ServiceEntry"
	seAMCSType  = "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"
)

// authzRules: the payments producer writes ServiceEntries of its namespace; every workload
// of payments reads ServiceEntries (by MCP collection name) and Envoy clusters (by type URL)
// of payments; istiod reads everything; on-call is an administrator.
func authzRules() []authz.Rule {
	return []authz.Rule{
		{Identity: idProducer, Produce: authz.Scope{Collections: []string{seColl}, Namespaces: []string{"payments"}}},
		{Identity: "spiffe://mesh.example/ns/payments/*", Consume: authz.Scope{Collections: []string{seColl, clusterType}, Namespaces: []string{"payments"}}},
		{Identity: idIstiod, Consume: authz.Scope{Collections: []string{"*"}, Namespaces: []string{"*"}}},
		{Identity: idOncall, Admin: true},
	}
}

// secured is a bridge serving mutual TLS on both ports with authzRules.
type secured struct {
	*running
	ca *certtest.CA
}

func startSecured(t *testing.T, configure func(*Config)) *secured {
	t.Helper()
	ca := certtest.NewCA(t, "mesh CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	b := start(t, func(c *Config) {
		// request: a client without a certificate is served, as unauthenticated.
		tlsCfg := tlsserver.Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, ClientAuth: "request"}
		c.GRPC.TLS, c.HTTP.TLS = tlsCfg, tlsCfg
		c.Authz.Rules = authzRules()
		if configure != nil {
			configure(c)
		}
	})
	return &secured{running: b, ca: ca}
}

// conn dials the gRPC port as identity ("" presents no certificate).
func (s *secured) conn(t *testing.T, identity string) *grpc.ClientConn {
	t.Helper()
	var leaf *certtest.Leaf
	if identity != "" {
		leaf = s.ca.Client(t, identity)
	}
	return dialTLS(t, s.grpcAddr, clientTLS(s.ca.Pool(), leaf))
}

func seWithPort(name, host string) *mcpapi.Resource {
	body := &anypb.Any{}
	se := &networking.ServiceEntry{Hosts: []string{host}, Resolution: networking.ServiceEntry_DNS,
		Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}
	if err := anypb.MarshalFrom(body, se, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// mesh writes ServiceEntries of payments and of another namespace, and waits for their
// clusters.
func (s *secured) mesh(t *testing.T, names ...string) {
	t.Helper()
	var rs []*mcpapi.Resource
	for _, n := range names {
		ns, name, _ := strings.Cut(n, "/")
		rs = append(rs, seWithPort(n, name+"."+ns+".svc.cluster.local"))
	}
	if _, err := s.Store().ReplaceOwner("test", map[string][]*mcpapi.Resource{seColl: rs}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return s.Store().View().Collection(clusterType).Count == len(names)+len(plumbingClusters) })
}

func resourceNames(rs []*mcpapi.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetMetadata().GetName())
	}
	slices.Sort(out)
	return out
}

func assertNamesEqual(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

func assertStatus(t *testing.T, what string, err error, want codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != want {
		t.Fatalf("%s ended with %v, want %v", what, err, want)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: %q does not name %q", what, err, p)
		}
	}
}

func ads(t *testing.T, conn *grpc.ClientConn) *streamtest.Client[discovery.DiscoveryRequest, discovery.DiscoveryResponse] {
	t.Helper()
	c := discovery.NewAggregatedDiscoveryServiceClient(conn)
	return streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
		return c.StreamAggregatedResources(ctx)
	})
}

func deltaADS(t *testing.T, conn *grpc.ClientConn) *streamtest.Client[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse] {
	t.Helper()
	c := discovery.NewAggregatedDiscoveryServiceClient(conn)
	return streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
		return c.DeltaAggregatedResources(ctx)
	})
}

// anyNames are the names of xDS resources: MCP resources (MCP over xDS) or Envoy clusters.
func anyNames(t *testing.T, rs []*anypb.Any) []string {
	t.Helper()
	var out []string
	for _, a := range rs {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *mcpapi.Resource:
			out = append(out, m.GetMetadata().GetName())
		case interface{ GetName() string }:
			out = append(out, m.GetName())
		}
	}
	slices.Sort(out)
	return out
}

func TestAuthzPeerNoRuleMatchesIsRefusedOnEveryService(t *testing.T) {
	s := startSecured(t, nil)
	s.mesh(t, "payments/a")
	for _, c := range []struct {
		name string
		open func(*grpc.ClientConn) error
	}{
		// The refusal comes as the stream opens, before any request: nothing is sent, which
		// could race with the end of the stream.
		{"ResourceSource", func(conn *grpc.ClientConn) error {
			c := mcp.NewResourceSourceClient(conn)
			return streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources], error) {
				return c.EstablishResourceStream(ctx)
			}).Ended()
		}},
		{"ADS", func(conn *grpc.ClientConn) error { return ads(t, conn).Ended() }},
		{"ResourceSink", func(conn *grpc.ClientConn) error {
			c := mcp.NewResourceSinkClient(conn)
			return streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources], error) {
				return c.EstablishResourceStream(ctx)
			}).Ended()
		}},
	} {
		for _, who := range []string{idStranger, ""} {
			err := c.open(s.conn(t, who))
			assertStatus(t, c.name+" of "+who, err, codes.PermissionDenied, "no authorization rule")
		}
	}
	eventually(t, s.running, 4, "mcpbridge_authz_refusals_total", "role", "source", "reason", "no_rule")
	eventually(t, s.running, 2, "mcpbridge_authz_refusals_total", "role", "sink", "reason", "no_rule")
}

// A push outside the producer's namespaces or collections is NACKed PermissionDenied, naming
// the identity, collection and resource, and nothing of it is applied; mcp-producer-id
// grants nothing.
func TestAuthzProducerOutsideItsRightsIsNACKedAndNothingApplied(t *testing.T) {
	s := startSecured(t, nil)
	p := s.producer(t, idProducer, "")
	opening := p.Recv()
	if opening.Collection != seColl {
		t.Fatalf("the bridge asked for %q first; the producer may produce only %s", opening.Collection, seColl)
	}
	p.Quiet(100 * time.Millisecond) // and for nothing else

	if r := p.push(t, seColl, seWithPort("payments/a", "a.payments.svc.cluster.local")); r.ErrorDetail != nil {
		t.Fatalf("push within the rights: %v", r.ErrorDetail)
	}
	before := dumpColl(t, s, seColl)
	r := p.push(t, seColl, seWithPort("payments/a", "a2.payments.svc.cluster.local"), seWithPort("other/x", "x.other.svc.cluster.local"))
	assertNACK(t, r, codes.PermissionDenied, idProducer, `"other/x"`)
	if after := dumpColl(t, s, seColl); after != before {
		t.Fatalf("a refused message changed the store:\n%s\n%s", before, after)
	}
	r = p.push(t, vsColl, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "payments/v"}})
	assertNACK(t, r, codes.PermissionDenied, idProducer, vsColl)

	// Another identity naming itself the producer gains nothing by it.
	app := s.producer(t, idApp, "producer-of-payments")
	r = app.push(t, seColl, seWithPort("payments/b", "b.payments.svc.cluster.local"))
	assertNACK(t, r, codes.PermissionDenied, idApp)
	eventually(t, s.running, 2, "mcpbridge_authz_refusals_total", "role", "sink", "reason", "collection")
	eventually(t, s.running, 1, "mcpbridge_authz_refusals_total", "role", "sink", "reason", "resource")
}

func (s *secured) producer(t *testing.T, identity, producerID string) *producer {
	t.Helper()
	c := mcp.NewResourceSinkClient(s.conn(t, identity))
	return &producer{Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources], error) {
		if producerID != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "mcp-producer-id", producerID)
		}
		return c.EstablishResourceStream(ctx)
	})}
}

func assertNACK(t *testing.T, r *mcp.RequestResources, code codes.Code, parts ...string) {
	t.Helper()
	if r.ErrorDetail == nil || codes.Code(r.ErrorDetail.Code) != code {
		t.Fatalf("answer %v, want a NACK with %v", r, code)
	}
	for _, p := range parts {
		if !strings.Contains(r.ErrorDetail.Message, p) {
			t.Fatalf("NACK %q does not name %q", r.ErrorDetail.Message, p)
		}
	}
}

func dumpColl(t *testing.T, s *secured, coll string) string {
	t.Helper()
	_, es := s.Store().View().Snapshot(coll)
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.Name + "@" + e.Version + " by " + e.Owner + "\n")
	}
	return b.String()
}

// A consumer limited to a namespace sees only its resources, on every protocol, and then only
// the changes within it; the Envoy clusters of its namespace's hosts too.
func TestAuthzConsumerViewOnEveryProtocol(t *testing.T) {
	s := startSecured(t, nil)
	s.mesh(t, "payments/a", "other/b")
	conn := s.conn(t, idApp)

	mcpSink := subscribeOn(t, conn, "app", seColl)
	first := mcpSink.Recv()
	assertNamesEqual(t, "ResourceSource", resourceNames(first.Resources), "payments/a")
	mcpSink.ack(first)

	amcs := mcp.NewAggregatedMeshConfigServiceClient(conn)
	sotw := streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.MeshConfigRequest, mcp.MeshConfigResponse], error) {
		return amcs.StreamAggregatedResources(ctx)
	})
	sotw.Send(&mcp.MeshConfigRequest{TypeUrl: seAMCSType, SinkNode: &mcp.SinkNode{Id: "app"}})
	amcsFirst := sotw.Recv()
	assertNamesEqual(t, "AggregatedMeshConfigService", resourceNames(amcsFirst.Resources), "payments/a")
	sotw.Send(&mcp.MeshConfigRequest{TypeUrl: seAMCSType, SinkNode: &mcp.SinkNode{Id: "app"}, ResponseNonce: amcsFirst.Nonce, VersionInfo: amcsFirst.VersionInfo})

	incr := streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.IncrementalMeshConfigRequest, mcp.IncrementalMeshConfigResponse], error) {
		return amcs.IncrementalAggregatedResources(ctx)
	})
	incr.Send(&mcp.IncrementalMeshConfigRequest{TypeUrl: seAMCSType, SinkNode: &mcp.SinkNode{Id: "app"}})
	incrFirst := incr.Recv()
	assertNamesEqual(t, "incremental AggregatedMeshConfigService", resourceNames(incrFirst.Resources), "payments/a")
	incr.Send(&mcp.IncrementalMeshConfigRequest{TypeUrl: seAMCSType, SinkNode: &mcp.SinkNode{Id: "app"}, ResponseNonce: incrFirst.Nonce})

	xds := ads(t, conn)
	xds.Send(&discovery.DiscoveryRequest{TypeUrl: seXDSType, Node: &core.Node{Id: "app"}})
	xdsSE := xds.Recv()
	assertNamesEqual(t, "xDS (MCP over xDS)", anyNames(t, xdsSE.Resources), "payments/a")
	xds.Send(&discovery.DiscoveryRequest{TypeUrl: seXDSType, ResponseNonce: xdsSE.Nonce, VersionInfo: xdsSE.VersionInfo})
	xds.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType})
	xdsCDS := xds.Recv()
	assertNamesEqual(t, "xDS clusters", anyNames(t, xdsCDS.Resources), "outbound|80||a.payments.svc.cluster.local")
	xds.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType, ResponseNonce: xdsCDS.Nonce, VersionInfo: xdsCDS.VersionInfo})

	delta := deltaADS(t, conn)
	delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: clusterType, Node: &core.Node{Id: "app"}})
	deltaCDS := delta.Recv()
	var deltaNames []string
	for _, r := range deltaCDS.Resources {
		deltaNames = append(deltaNames, r.Name)
	}
	assertNamesEqual(t, "delta xDS clusters", deltaNames, "outbound|80||a.payments.svc.cluster.local")
	delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: clusterType, ResponseNonce: deltaCDS.Nonce})

	// A change in another namespace reaches no one here; one in payments reaches everyone.
	s.mesh(t, "payments/a", "other/b", "other/c")
	s.mesh(t, "payments/a", "other/b", "other/c", "payments/d")
	assertNamesEqual(t, "ResourceSource after the changes", resourceNames(mcpSink.Recv().Resources), "payments/a", "payments/d")
	assertNamesEqual(t, "AggregatedMeshConfigService after the changes", resourceNames(sotw.Recv().Resources), "payments/a", "payments/d")
	assertNamesEqual(t, "incremental AggregatedMeshConfigService after the changes", resourceNames(incr.Recv().Resources), "payments/d")
	byType := map[string][]string{} // one response of each type, in the order the stream sends them
	for range 2 {
		r := xds.Recv()
		byType[r.TypeUrl] = anyNames(t, r.Resources)
	}
	assertNamesEqual(t, "xDS after the changes", byType[seXDSType], "payments/a", "payments/d")
	assertNamesEqual(t, "xDS clusters after the changes", byType[clusterType],
		"outbound|80||a.payments.svc.cluster.local", "outbound|80||d.payments.svc.cluster.local")
	got := delta.Recv()
	if len(got.Resources) != 1 || got.Resources[0].Name != "outbound|80||d.payments.svc.cluster.local" || len(got.RemovedResources) != 0 {
		t.Fatalf("delta xDS after the changes: %v", got)
	}
	for _, quiet := range []func(time.Duration){mcpSink.Quiet, sotw.Quiet, incr.Quiet, delta.Quiet} {
		quiet(100 * time.Millisecond)
	}
}

// A type the consumer may not read is served empty with a PermissionDenied resource error;
// the other types of the stream go on.
func TestAuthzTypeOutsideTheGrantIsRefusedAloneOnAnAggregatedStream(t *testing.T) {
	s := startSecured(t, nil)
	s.mesh(t, "payments/a")
	if _, err := s.Store().ReplaceOwner("test-vs", map[string][]*mcpapi.Resource{vsColl: {{Metadata: &mcpapi.Metadata{Name: "payments/v"},
		Body: mustAny(t, &networking.VirtualService{Hosts: []string{"v.example"}, Http: []*networking.HTTPRoute{{
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "v.example"}}},
		}}})}}}); err != nil {
		t.Fatal(err)
	}
	conn := s.conn(t, idApp)
	for _, mode := range []string{"sotw", "delta"} {
		t.Run(mode, func(t *testing.T) {
			vsType := "networking.istio.io/v1alpha3/VirtualService"
			var errs []*discovery.ResourceError
			var clusters []string
			if mode == "sotw" {
				st := ads(t, conn)
				st.Send(&discovery.DiscoveryRequest{TypeUrl: vsType, Node: &core.Node{Id: "app"}})
				vs := st.Recv()
				if len(vs.Resources) != 0 {
					t.Fatalf("refused type sent %d resources", len(vs.Resources))
				}
				errs = vs.ResourceErrors
				st.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType})
				clusters = anyNames(t, st.Recv().Resources)
			} else {
				st := deltaADS(t, conn)
				st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: vsType, Node: &core.Node{Id: "app"}})
				vs := st.Recv()
				if len(vs.Resources) != 0 {
					t.Fatalf("refused type sent %d resources", len(vs.Resources))
				}
				errs = vs.ResourceErrors
				st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: clusterType})
				for _, r := range st.Recv().Resources {
					clusters = append(clusters, r.Name)
				}
			}
			if len(errs) != 1 || errs[0].ResourceName.GetName() != "*" || codes.Code(errs[0].ErrorDetail.GetCode()) != codes.PermissionDenied ||
				!strings.Contains(errs[0].ErrorDetail.GetMessage(), idApp) {
				t.Fatalf("resource errors %v, want one PermissionDenied for * naming %s", errs, idApp)
			}
			assertNamesEqual(t, "clusters on the same stream", clusters, "outbound|80||a.payments.svc.cluster.local")
		})
	}
	eventually(t, s.running, 2, "mcpbridge_authz_refusals_total", "role", "source", "reason", "collection")
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// With rules, a node ID of Istio's form must name its identity's namespace.
func TestAuthzNodeOfAnotherNamespaceIsRefused(t *testing.T) {
	s := startSecured(t, nil)
	s.mesh(t, "payments/a")
	conn := s.conn(t, idApp)

	st := ads(t, conn)
	st.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType, Node: &core.Node{Id: "sidecar~10.0.0.1~app-1.other~other.svc.cluster.local"}})
	assertStatus(t, "a node of namespace other", st.Ended(), codes.PermissionDenied, `"other"`, `"payments"`)
	eventually(t, s.running, 1, "mcpbridge_authz_refusals_total", "role", "source", "reason", "node_identity")

	ok := ads(t, conn)
	ok.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType, Node: &core.Node{Id: "sidecar~10.0.0.1~app-1.payments~payments.svc.cluster.local"}})
	assertNamesEqual(t, "a node of its own namespace", anyNames(t, ok.Recv().Resources), "outbound|80||a.payments.svc.cluster.local")
}

// A node narrows its own view with MCPBRIDGE_NAMESPACES, within what it may read.
func TestAuthzNodeMetadataNarrowsItsView(t *testing.T) {
	s := startSecured(t, nil)
	s.mesh(t, "payments/a", "other/b", "third/c")
	conn := s.conn(t, idIstiod)

	st := ads(t, conn)
	meta, _ := structpb.NewStruct(map[string]any{source.NodeNamespacesKey: "payments, third"})
	st.Send(&discovery.DiscoveryRequest{TypeUrl: seXDSType, Node: &core.Node{Id: "istiod", Metadata: meta}})
	assertNamesEqual(t, "istiod narrowed by its node", anyNames(t, st.Recv().Resources), "payments/a", "third/c")

	sink := subscribeOn(t, conn, "istiod", seColl)
	assertNamesEqual(t, "istiod without narrowing", resourceNames(sink.Recv().Resources), "other/b", "payments/a", "third/c")

	mcpClient := mcp.NewResourceSourceClient(conn)
	narrowed := streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources], error) {
		return mcpClient.EstablishResourceStream(ctx)
	})
	narrowed.Send(&mcp.RequestResources{Collection: seColl, SinkNode: &mcp.SinkNode{Id: "istiod", Annotations: map[string]string{source.NodeNamespacesKey: "other"}}})
	assertNamesEqual(t, "MCP sink narrowed by its annotations", resourceNames(narrowed.Recv().Resources), "other/b")
}

// With a client CA on the HTTP port, the debug views and the status page are an
// administrator's; health, readiness and metrics stay open.
func TestAuthzDebugViewsNeedAnAdministrator(t *testing.T) {
	s := startSecured(t, nil)
	get := func(identity, path string) int {
		var leaf *certtest.Leaf
		if identity != "" {
			leaf = s.ca.Client(t, identity)
		}
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(s.ca.Pool(), leaf), DisableKeepAlives: true}}
		defer client.CloseIdleConnections()
		resp, err := client.Get(s.httpsURL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/debug/collections", "/debug/clients", "/debug/pprof/", "/"} {
		if code := get(idOncall, path); code != http.StatusOK {
			t.Errorf("administrator GET %s: %d", path, code)
		}
		for _, who := range []string{idIstiod, ""} {
			if code := get(who, path); code != http.StatusForbidden {
				t.Errorf("GET %s as %q: %d, want 403", path, who, code)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code := get("", path); code != http.StatusOK {
			t.Errorf("GET %s without a certificate: %d", path, code)
		}
	}
	if v := value(t, s.running, "mcpbridge_authz_refusals_total", "role", "admin", "reason", "not_admin"); v != 8 {
		t.Errorf("not_admin refusals %v, want 8", v)
	}
}

// Without a client CA on the HTTP port the debug views stay open: the port cannot tell who
// asks (loopback development).
func TestAuthzDebugViewsOpenWithoutAClientCA(t *testing.T) {
	b := start(t, func(c *Config) { c.Authz.Rules = authzRules() })
	if code, _ := httpGet(t, b.httpURL+"/debug/collections"); code != http.StatusOK {
		t.Fatalf("GET /debug/collections: %d", code)
	}
}

// Without rules, a verified client is an administrator: the CA is the trust.
func TestAuthzWithoutRulesAnyVerifiedClientIsAdministrator(t *testing.T) {
	s := startSecured(t, func(c *Config) { c.Authz.Rules = nil })
	tlsCfg := func(leaf *certtest.Leaf) *tls.Config { return clientTLS(s.ca.Pool(), leaf) }
	for _, c := range []struct {
		leaf *certtest.Leaf
		want int
	}{{s.ca.Client(t, idStranger), http.StatusOK}, {nil, http.StatusForbidden}} {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg(c.leaf), DisableKeepAlives: true}}
		resp, err := client.Get(s.httpsURL() + "/debug/collections")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		client.CloseIdleConnections()
		if resp.StatusCode != c.want {
			t.Errorf("client certificate %v: %d, want %d", c.leaf != nil, resp.StatusCode, c.want)
		}
	}
}

// With rules, every refusal's series is exported at zero before the first refusal.
func TestAuthzRefusalsAreExportedAtZero(t *testing.T) {
	s := startSecured(t, nil)
	for _, l := range [][]string{
		{"role", "source", "reason", "no_rule"}, {"role", "source", "reason", "collection"}, {"role", "source", "reason", "node_identity"},
		{"role", "sink", "reason", "no_rule"}, {"role", "sink", "reason", "collection"}, {"role", "sink", "reason", "resource"},
		{"role", "admin", "reason", "not_admin"},
	} {
		if series(t, s.running, "mcpbridge_authz_refusals_total", l...) == nil {
			t.Errorf("mcpbridge_authz_refusals_total%v is not exported", l)
		}
	}
}
