// Package certtest makes the certificates of TLS tests: a CA, server certificates for the
// loopback addresses, client certificates with a SPIFFE URI SAN, expired ones, and files of
// them in a test's temporary directory. Nothing is committed: every certificate is made by the
// test that uses it, with crypto/x509, and expires within the day.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that signs the test's certificates.
type CA struct {
	Cert *x509.Certificate
	// PEM is the CA certificate, for a file of trusted CAs.
	PEM []byte
	key *ecdsa.PrivateKey
}

// Leaf is a certificate the CA signed, with its key.
type Leaf struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
	// TLS is the certificate as crypto/tls takes it, for a client's or server's config.
	TLS tls.Certificate
}

// Option changes a leaf's template before it is signed.
type Option func(*x509.Certificate)

// Expired makes a certificate whose validity ended an hour ago.
func Expired() Option {
	return func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	}
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("certtest: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("certtest: CA %s: %v", name, err)
	}
	return &CA{Cert: cert, PEM: pemBlock("CERTIFICATE", der), key: key}
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server makes a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB, opts ...Option) *Leaf {
	t.Helper()
	return ca.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, opts)
}

// Client makes a client certificate whose identity is the SPIFFE URI SAN spiffeID (none when
// empty), as an Istio workload's is.
func (ca *CA) Client(t testing.TB, spiffeID string, opts ...Option) *Leaf {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if spiffeID != "" {
		u, err := url.Parse(spiffeID)
		if err != nil {
			t.Fatalf("certtest: SPIFFE ID %q: %v", spiffeID, err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	return ca.sign(t, tmpl, opts)
}

func (ca *CA) sign(t testing.TB, tmpl *x509.Certificate, opts []Option) *Leaf {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	for _, o := range opts {
		o(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("certtest: sign: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("certtest: sign: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("certtest: key: %v", err)
	}
	return &Leaf{
		Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER),
		TLS: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert},
	}
}

// Write writes the leaf's certificate and key into dir as NAME.pem and NAME-key.pem and
// returns their paths.
func (l *Leaf) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	WriteFile(t, certFile, l.CertPEM)
	WriteFile(t, keyFile, l.KeyPEM)
	return certFile, keyFile
}

// Write writes the CA certificate into dir as NAME.pem and returns its path.
func (ca *CA) Write(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name+".pem")
	WriteFile(t, p, ca.PEM)
	return p
}

// WriteFile writes data to path.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("certtest: %v", err)
	}
}

// Replace replaces path with data in one step, as kubelet and most deployment tools do: write
// a file beside it, then rename it over the old one. A reader never sees a half-written file.
func Replace(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	WriteFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("certtest: %v", err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("certtest: key: %v", err)
	}
	return k
}

// serial is a random 127-bit serial number, so that a test can tell certificates apart by
// the serial a client sees.
func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("certtest: serial: %v", err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
