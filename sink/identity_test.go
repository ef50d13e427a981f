package sink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/certtest"
	"github.com/mcpbridge/mcpbridge/internal/tlsserver"
)

const producerSPIFFE = "spiffe://example.org/ns/config/sa/producer"

// testPKI is a CA with a server certificate for 127.0.0.1 and a client certificate whose only
// identity is a SPIFFE URI SAN, as an Istio workload's would be.
type testPKI struct {
	ca             *certtest.CA
	server, client *certtest.Leaf
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca := certtest.NewCA(t, "test CA")
	return &testPKI{ca: ca, server: ca.Server(t), client: ca.Client(t, producerSPIFFE)}
}

// serverCreds serve the PKI's server certificate and verify client certificates as auth says.
func (p *testPKI) serverCreds(auth tls.ClientAuthType) grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.server.TLS}, ClientCAs: p.ca.Pool(),
		ClientAuth: auth, MinVersion: tls.VersionTLS12,
	}))
}

// clientCreds present cert whatever CAs the server asks for, as a client configured with a
// certificate does (a Go client with Certificates would send none the server cannot verify).
func (p *testPKI) clientCreds(cert *certtest.Leaf) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{
		RootCAs: p.ca.Pool(), MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil },
	})
}

func TestTLSProducerIsIdentifiedBySPIFFEID(t *testing.T) {
	pki := newTestPKI(t)
	b := startSink(t, Options{}, pki.serverCreds(tls.RequireAndVerifyClientCert))
	p1 := dialProducerWith(t, b.addr, dialOpts{creds: pki.clientCreds(pki.client)})
	p1.requests(len(DefaultCollections()))
	p1.mustACK(full(seColl, ses("a", "b")...))
	if e := b.store.View().Get(seColl, "ns/a"); e.Owner != producerSPIFFE {
		t.Fatalf("owner %q, want %s", e.Owner, producerSPIFFE)
	}
	// Another connection with the same certificate is the same producer.
	p2 := dialProducerWith(t, b.addr, dialOpts{creds: pki.clientCreds(pki.client)})
	p2.requests(len(DefaultCollections()))
	p2.mustACK(full(seColl, ses("c")...))
	assertNames(t, b.store, seColl, "ns/c")
}

func TestProducerIDMetadataTakesPrecedenceOverTLSIdentity(t *testing.T) {
	pki := newTestPKI(t)
	b := startSink(t, Options{}, pki.serverCreds(tls.RequireAndVerifyClientCert))
	p := dialProducerWith(t, b.addr, dialOpts{id: "named", creds: pki.clientCreds(pki.client)})
	p.requests(len(DefaultCollections()))
	p.mustACK(full(seColl, ses("a")...))
	if e := b.store.View().Get(seColl, "ns/a"); e.Owner != "producer:named" {
		t.Fatalf("owner %q, want producer:named", e.Owner)
	}
}

// A client certificate the server did not verify is no identity: anyone can make one naming
// any SPIFFE ID. A server that only requests certificates (tls.RequestClientCert) takes one
// from an unknown CA; its producer is known by its IP address.
func TestUnverifiedClientCertificateIsNoIdentity(t *testing.T) {
	pki := newTestPKI(t)
	forged := certtest.NewCA(t, "unknown CA").Client(t, producerSPIFFE)
	b := startSink(t, Options{}, pki.serverCreds(tls.RequestClientCert))
	p := dialProducerWith(t, b.addr, dialOpts{creds: pki.clientCreds(forged)})
	p.requests(len(DefaultCollections()))
	p.mustACK(full(seColl, ses("a")...))
	if e := b.store.View().Get(seColl, "ns/a"); e.Owner != "ip:127.0.0.1" {
		t.Fatalf("owner %q from an unverified certificate, want ip:127.0.0.1", e.Owner)
	}
}

// Under client_auth request (tls.VerifyClientCertIfGiven, as tlsserver serves it) a client
// certificate from an unknown CA never gives a SPIFFE owner: presented, the handshake is
// refused; held by a Go client, it is not sent (its CA is not one the server names) and the
// producer is anonymous.
func TestRequestModeUnknownCAGivesNoSPIFFEOwner(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	certFile, keyFile := pki.server.Write(t, dir, "server")
	ts, err := tlsserver.New(tlsserver.Options{Key: "grpc.tls", Config: tlsserver.Config{
		CertFile: certFile, KeyFile: keyFile, ClientCAFile: pki.ca.Write(t, dir, "ca"), ClientAuth: tlsserver.ClientAuthRequest,
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := startSink(t, Options{}, grpc.Creds(credentials.NewTLS(ts.TLSConfig())))
	forged := certtest.NewCA(t, "unknown CA").Client(t, producerSPIFFE)

	if err := openFails(t, b.addr, pki.clientCreds(forged)); err == nil {
		t.Fatal("a client presenting a certificate of an unknown CA opened a stream under request")
	}
	quiet := credentials.NewTLS(&tls.Config{RootCAs: pki.ca.Pool(), Certificates: []tls.Certificate{forged.TLS}})
	p := dialProducerWith(t, b.addr, dialOpts{creds: quiet})
	p.requests(len(DefaultCollections()))
	p.mustACK(full(seColl, ses("a")...))
	if e := b.store.View().Get(seColl, "ns/a"); e.Owner != "ip:127.0.0.1" {
		t.Fatalf("owner %q, want ip:127.0.0.1", e.Owner)
	}
	// And the CA's own client is known by its SPIFFE ID on the same listener.
	p2 := dialProducerWith(t, b.addr, dialOpts{creds: pki.clientCreds(pki.client)})
	p2.requests(len(DefaultCollections()))
	p2.mustACK(full(seColl, ses("b")...))
	if e := b.store.View().Get(seColl, "ns/b"); e.Owner != producerSPIFFE {
		t.Fatalf("owner %q, want %s", e.Owner, producerSPIFFE)
	}
}

// openFails opens a ResourceSink stream and reads from it; it returns the error that ended
// it, or nil if the bridge answered.
func openFails(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	stream, err := mcp.NewResourceSinkClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

func TestSPIFFEIDNeedsAVerifiedChain(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.client.Cert
	unverified := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}
	if id := spiffeID(unverified); id != "" {
		t.Fatalf("an unverified certificate gives the identity %q", id)
	}
	verified := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert},
		VerifiedChains: [][]*x509.Certificate{{cert, pki.ca.Cert}}}}
	if id := spiffeID(verified); id != producerSPIFFE {
		t.Fatalf("a verified certificate gives %q, want %s", id, producerSPIFFE)
	}
}

func TestPeerIPOwnerDropsThePortAndUnmapsIPv4(t *testing.T) {
	cases := map[string]net.Addr{
		"ip:10.0.0.7": &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.7"), Port: 4000},
		"ip:::1":      &net.TCPAddr{IP: net.IPv6loopback, Port: 4001},
		"ip:10.0.0.8": fakeAddr("10.0.0.8:5000"),
	}
	for want, addr := range cases {
		if got := ipPrefix + peerIP(addr); got != want {
			t.Errorf("peerIP(%v) gives owner %q, want %q", addr, got, want)
		}
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "fake" }
func (a fakeAddr) String() string  { return string(a) }
