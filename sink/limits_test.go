package sink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
)

// A push that would take a producer over its resources in all collections is NACKed with
// ResourceExhausted and nothing of it applied; the producer's stream goes on, and another
// producer is not held to the first one's count.
func TestPushOverTheProducersResourceLimitIsNACKedAndAppliesNothing(t *testing.T) {
	m := metrics.New()
	b := startSink(t, Options{Collections: []Collection{{Name: seColl, Incremental: true}, {Name: vsColl}},
		MaxResourcesPerProducer: 3, Metrics: m})
	p := dialProducer(t, b.addr, "p")
	p.requests(2)
	p.mustACK(full(seColl, ses("a", "b")...))
	before := dump(b.store)

	reply := p.push(full(vsColl, virtualService("ns/v1", "v1.example"), virtualService("ns/v2", "v2.example")))
	if reply.ErrorDetail == nil || codes.Code(reply.ErrorDetail.Code) != codes.ResourceExhausted {
		t.Fatalf("a push to 4 resources with a limit of 3: %v, want a NACK with ResourceExhausted", reply.ErrorDetail)
	}
	for _, part := range []string{vsColl, "limits.resources_per_producer", "would hold 4", "limit of 3", "nothing of this message was applied"} {
		if !strings.Contains(reply.ErrorDetail.Message, part) {
			t.Errorf("NACK message %q does not say %q", reply.ErrorDetail.Message, part)
		}
	}
	if after := dump(b.store); after != before {
		t.Fatalf("store changed by a refused push:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := refusals(t, m, "resources_per_producer"); got != 1 {
		t.Fatalf("refusals = %v, want 1", got)
	}

	// The stream goes on: an increment that swaps one resource for another fits.
	p.mustACK(&mcp.Resources{Collection: seColl, Incremental: true, Resources: ses("c"), RemovedResources: []string{"ns/a"}})
	p.mustACK(full(vsColl, virtualService("ns/v1", "v1.example")))
	// Another producer has a limit of its own.
	q := dialProducer(t, b.addr, "q")
	q.requests(2)
	q.mustACK(full(seColl, ses("x", "y", "z")...))
	assertNames(t, b.store, seColl, "ns/b", "ns/c", "ns/x", "ns/y", "ns/z")
}

func refusals(t *testing.T, m *metrics.Metrics, limit string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if f.GetName() == "mcpbridge_limit_refusals_total" && s.GetLabel()[0].GetValue() == limit {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A peer is its verified SPIFFE ID, else its IP: neither mcp-producer-id nor a certificate
// nobody verified names it.
func TestPeerIdentityIsAVerifiedSPIFFEIDElseTheIP(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.client.Cert
	addr := &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.7"), Port: 4000}
	ctx := func(auth credentials.AuthInfo) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: addr, AuthInfo: auth})
	}
	verified := credentials.TLSInfo{State: tls.ConnectionState{
		PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}}
	unverified := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}
	for what, c := range map[string]struct {
		ctx  context.Context
		want string
	}{
		"verified certificate":   {ctx(verified), producerSPIFFE},
		"unverified certificate": {ctx(unverified), "10.0.0.7"},
		"no TLS":                 {ctx(nil), "10.0.0.7"},
		"no peer":                {context.Background(), "unknown"},
	} {
		if got := PeerIdentity(c.ctx); got != c.want {
			t.Errorf("%s: %q, want %q", what, got, c.want)
		}
	}
}
