package app

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/authz"
)

// The tenant isolation tests (docs/security.md, "Tenants"): each over real mutual TLS on
// loopback, with the identities of authz_test.go.

const (
	drColl       = "istio/networking/v1alpha3/destinationrules"
	// idTeam is a second producing identity, of another namespace than payments.
	idTeam = "spiffe://mesh.example/ns/team/sa/producer"
)

// tenantRules: the payments producer writes ServiceEntries, VirtualServices and
// DestinationRules of payments (hosts by default: payments' service domains); the team
// producer writes ServiceEntries of team; the rest as authzRules.
func tenantRules() []authz.Rule {
	return append(authzRules()[1:],
		authz.Rule{Identity: idProducer, Produce: authz.Scope{Collections: []string{seColl, vsColl, drColl}, Namespaces: []string{"payments"}}},
		authz.Rule{Identity: idTeam, Produce: authz.Scope{Collections: []string{seColl}, Namespaces: []string{"team"}}},
	)
}

func resourceOf(t *testing.T, name string, m proto.Message) *mcpapi.Resource {
	t.Helper()
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		t.Fatal(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// in1970 forges a resource's creation time, as an attacker would to win "oldest wins".
func in1970(r *mcpapi.Resource) *mcpapi.Resource {
	r.Metadata.CreateTime = timestamppb.New(time.Unix(0, 0))
	return r
}

// The hijack: a producer of payments defines, routes and sets the policy of bookinfo's billing
// service, with a forged 1970 creation time. Every push is NACKed PermissionDenied naming the
// host, nothing of it applied, and the load assignment bookinfo's proxies get is unchanged.
// The producer's own hosts (a short name completes into its namespace) are taken.
func TestTenancyHijackOfAnotherNamespacesHostIsRefused(t *testing.T) {
	s := startSecured(t, func(c *Config) { c.Authz.Rules = tenantRules() })
	const victim = "billing.bookinfo.svc.cluster.local"
	if _, err := s.Store().ReplaceOwner("bookinfo-team", map[string][]*mcpapi.Resource{seColl: {
		staticSE("bookinfo/billing", victim, "10.0.0.1"),
	}}); err != nil {
		t.Fatal(err)
	}
	cla := "outbound|9080||" + victim
	waitUntil(t, func() bool { return s.Store().View().Get(endpointType, cla) != nil })
	before := s.Store().View().Get(endpointType, cla).Bytes

	p := s.producer(t, idProducer, "")
	for _, c := range []struct {
		coll string
		r    *mcpapi.Resource
	}{
		{seColl, in1970(staticSE("payments/evil", victim, "6.6.6.6"))},
		{vsColl, in1970(resourceOf(t, "payments/evil", &networking.VirtualService{Hosts: []string{victim},
			Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "evil.payments.svc.cluster.local"}}}}}}))},
		{drColl, in1970(resourceOf(t, "payments/evil", &networking.DestinationRule{Host: victim,
			TrafficPolicy: &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE}}}))},
		{seColl, in1970(staticSE("payments/evil-wild", "*.bookinfo.svc.cluster.local", "6.6.6.6"))},
	} {
		r := p.push(t, c.coll, c.r)
		assertNACK(t, r, codes.PermissionDenied, idProducer, `"payments/evil`, c.r.Metadata.Name, "host", "*.payments.svc.cluster.local")
		if n := s.Store().View().Collection(c.coll).Count; c.coll != seColl && n != 0 || c.coll == seColl && n != 1 {
			t.Fatalf("%s: a refused push was applied (%d resources)", c.coll, n)
		}
	}
	// Its own: a ServiceEntry of payments, and a VirtualService by short name.
	if r := p.push(t, seColl, staticSE("payments/ledger", "ledger.payments.svc.cluster.local", "10.0.0.9")); r.ErrorDetail != nil {
		t.Fatalf("its own host: %v", r.ErrorDetail)
	}
	if r := p.push(t, vsColl, resourceOf(t, "payments/ledger", &networking.VirtualService{Hosts: []string{"ledger"},
		Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "ledger"}}}}}})); r.ErrorDetail != nil {
		t.Fatalf("its own host by short name: %v", r.ErrorDetail)
	}
	waitUntil(t, func() bool { return s.Store().View().Get(endpointType, "outbound|9080||ledger.payments.svc.cluster.local") != nil })
	if after := s.Store().View().Get(endpointType, cla).Bytes; string(after) != string(before) {
		t.Fatal("the victim's load assignment changed")
	}
	eventually(t, s.running, 4, "mcpbridge_authz_refusals_total", "role", "sink", "reason", "resource")
}

// The bridge stamps creation: a producer's create_time is ignored, the bridge's first
// acceptance of the name is kept across updates, and so the ServiceEntry accepted first
// defines a host two of them list, whatever time the later one claims.
func TestTenancyBridgeStampsCreationTime(t *testing.T) {
	s := startSecured(t, func(c *Config) { c.Authz.Rules = tenantRules() })
	p := s.producer(t, idProducer, "")
	const host = "shared.payments.svc.cluster.local"
	start := time.Now().Add(-time.Second)
	if r := p.push(t, seColl, staticSE("payments/first", host, "10.0.0.1")); r.ErrorDetail != nil {
		t.Fatal(r.ErrorDetail)
	}
	created := func(name string) time.Time {
		t.Helper()
		e := s.Store().View().Get(seColl, name)
		if e == nil {
			t.Fatalf("%s not stored", name)
		}
		return e.CreateTime()
	}
	first := created("payments/first")
	if first.Before(start) || first.After(time.Now()) {
		t.Fatalf("create_time %v, want the time the bridge accepted it (after %v)", first, start)
	}
	time.Sleep(1100 * time.Millisecond) // the stamp has a second's precision
	// The later one claims 1970; the first is updated (new endpoints) and keeps its stamp.
	if r := p.push(t, seColl, staticSE("payments/first", host, "10.0.0.2"), in1970(staticSE("payments/second", host, "6.6.6.6"))); r.ErrorDetail != nil {
		t.Fatal(r.ErrorDetail)
	}
	if got := created("payments/first"); !got.Equal(first) {
		t.Fatalf("an update moved create_time from %v to %v", first, got)
	}
	if second := created("payments/second"); !second.After(first) {
		t.Fatalf("the later resource's create_time %v (it claimed 1970), want after %v", second, first)
	}
	cla := "outbound|9080||" + host
	waitUntil(t, func() bool {
		e := s.Store().View().Get(endpointType, cla)
		return e != nil && strings.Contains(string(e.Bytes), "10.0.0.2")
	})
	if e := s.Store().View().Get(endpointType, cla); strings.Contains(string(e.Bytes), "6.6.6.6") {
		t.Fatal("the host's endpoints are the later ServiceEntry's: its forged 1970 won")
	}
}

// A producer id names an owner of the identity that sends it: a second identity sending the
// same id is not told the first's resources (initial_resource_versions), cannot remove them by
// a full state of its own, and the first's next full state is taken.
func TestTenancyProducerIDIsBoundToItsIdentity(t *testing.T) {
	s := startSecured(t, func(c *Config) {
		c.Authz.Rules = tenantRules()
		c.Sink.Incremental = true
	})
	first := s.producer(t, idProducer, "shared-id")
	first.Recv() // the opening requests
	if r := first.push(t, seColl, seWithPort("payments/a", "a.payments.svc.cluster.local")); r.ErrorDetail != nil {
		t.Fatal(r.ErrorDetail)
	}
	second := s.producer(t, idTeam, "shared-id")
	if opening := second.Recv(); len(opening.InitialResourceVersions) != 0 {
		t.Fatalf("the second identity was told the first's resources: %v", opening.InitialResourceVersions)
	}
	if r := second.push(t, seColl); r.ErrorDetail != nil {
		t.Fatalf("the second identity's empty full state: %v", r.ErrorDetail)
	}
	if r := second.push(t, seColl, seWithPort("team/t", "t.team.svc.cluster.local")); r.ErrorDetail != nil {
		t.Fatalf("the second identity's own resource: %v", r.ErrorDetail)
	}
	if e := s.Store().View().Get(seColl, "payments/a"); e == nil || !strings.Contains(e.Owner, idProducer) {
		t.Fatalf("the first identity's resource: %+v", e)
	}
	if r := first.push(t, seColl, seWithPort("payments/a", "a.payments.svc.cluster.local"), seWithPort("payments/b", "b.payments.svc.cluster.local")); r.ErrorDetail != nil {
		t.Fatalf("the first identity's next full state: %v", r.ErrorDetail)
	}
	if e := s.Store().View().Get(seColl, "team/t"); e == nil || strings.Contains(e.Owner, idProducer) {
		t.Fatalf("the second identity's resource: %+v", e)
	}
}

// Names longer than Kubernetes allows are NACKed InvalidArgument naming the limit.
func TestTenancyOverlongNamesAreRefused(t *testing.T) {
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "long")
	for _, c := range []struct{ name, limit string }{
		{"ns/" + strings.Repeat("n", 254), "253"},
		{strings.Repeat("s", 64) + "/x", "63"},
	} {
		r := p.push(t, seColl, seWithPort(c.name, "x.example.com"))
		assertNACK(t, r, codes.InvalidArgument, "over Kubernetes' limit of "+c.limit)
	}
	if r := p.push(t, seColl, seWithPort("ns/"+strings.Repeat("n", 253), "x.example.com")); r.ErrorDetail != nil {
		t.Fatalf("a 253-character name: %v", r.ErrorDetail)
	}
	p.Send(&mcp.Resources{Collection: seColl, Nonce: "removal", Incremental: true, RemovedResources: []string{"ns/" + strings.Repeat("r", 300)}})
	for {
		if m := p.Recv(); m.ResponseNonce == "removal" {
			if m.ErrorDetail == nil || codes.Code(m.ErrorDetail.Code) != codes.InvalidArgument {
				t.Fatalf("an overlong removed name: %v", m)
			}
			break
		}
	}
}

// Off loopback, without a client CA, the debug views, profiles and status page are not
// served (404 with a hint, counted); health, readiness and metrics are; the setting
// http.debug_without_client_auth serves them.
func TestTenancyDebugViewsOffLoopbackNeedAClientCA(t *testing.T) {
	for _, open := range []bool{false, true} {
		b := start(t, func(c *Config) {
			c.HTTP.Address, c.HTTP.Insecure = "0.0.0.0:0", true
			c.HTTP.DebugWithoutClientAuth = open
		})
		for _, path := range []string{"/debug/collections", "/debug/pprof/", "/"} {
			code, body := httpGet(t, b.httpURL+path)
			switch {
			case open && code != http.StatusOK:
				t.Errorf("debug_without_client_auth: GET %s: %d", path, code)
			case !open && (code != http.StatusNotFound || !strings.Contains(body, "http.tls.client_ca_file")):
				t.Errorf("GET %s: %d %q, want 404 naming http.tls.client_ca_file", path, code, body)
			}
		}
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			if code, _ := httpGet(t, b.httpURL+path); code != http.StatusOK {
				t.Errorf("GET %s: %d", path, code)
			}
		}
		if !open {
			eventually(t, b, 3, "mcpbridge_authz_refusals_total", "role", "admin", "reason", "no_client_ca")
		}
	}
}
