package sink

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

const producerSPIFFE = "spiffe://example.org/ns/config/sa/producer"

// testPKI is a CA with a server certificate for 127.0.0.1 and a client certificate whose only
// identity is a SPIFFE URI SAN, as an Istio workload's would be.
type testPKI struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	spiffe, _ := url.Parse(producerSPIFFE)
	server := leaf(t, ca, caKey, 2, &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	client := leaf(t, ca, caKey, 3, &x509.Certificate{URIs: []*url.URL{spiffe},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return &testPKI{pool: pool, server: server, client: client}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (p *testPKI) serverCreds() grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}))
}

func (p *testPKI) clientCreds() credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.client}, RootCAs: p.pool, MinVersion: tls.VersionTLS12,
	})
}

func TestTLSProducerIsIdentifiedBySPIFFEID(t *testing.T) {
	pki := newTestPKI(t)
	b := startSink(t, Options{}, pki.serverCreds())
	p1 := dialProducerWith(t, b.addr, dialOpts{creds: pki.clientCreds()})
	p1.requests(len(DefaultCollections()))
	p1.mustACK(full(seColl, ses("a", "b")...))
	if e := b.store.View().Get(seColl, "ns/a"); e.Owner != producerSPIFFE {
		t.Fatalf("owner %q, want %s", e.Owner, producerSPIFFE)
	}
	// Another connection with the same certificate is the same producer.
	p2 := dialProducerWith(t, b.addr, dialOpts{creds: pki.clientCreds()})
	p2.requests(len(DefaultCollections()))
	p2.mustACK(full(seColl, ses("c")...))
	assertNames(t, b.store, seColl, "ns/c")
}

func TestProducerIDMetadataTakesPrecedenceOverTLSIdentity(t *testing.T) {
	pki := newTestPKI(t)
	b := startSink(t, Options{}, pki.serverCreds())
	p := dialProducerWith(t, b.addr, dialOpts{id: "named", creds: pki.clientCreds()})
	p.requests(len(DefaultCollections()))
	p.mustACK(full(seColl, ses("a")...))
	if e := b.store.View().Get(seColl, "ns/a"); e.Owner != "producer:named" {
		t.Fatalf("owner %q, want producer:named", e.Owner)
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
