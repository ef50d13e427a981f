// Command gencerts makes the throw-away certificates of the secure example: a CA, the
// bridge's server certificate (localhost, 127.0.0.1, ::1), and a client certificate for each
// peer of examples/secure/config.yaml, named by its SPIFFE ID. They are for trying mutual TLS
// and authorization on one machine, never for a real mesh: the CA key sits next to them.
//
//	go run ./examples/secure/gencerts              # writes examples/secure/certs/
//	go run ./examples/secure/gencerts -out DIR -days 1
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Peers are the client certificates made, by file name: the identities config.yaml's rules name.
var peers = []struct{ file, spiffeID string }{
	{"producer", "spiffe://example.org/ns/payments/sa/producer"},
	{"app", "spiffe://example.org/ns/payments/sa/app"},
	{"istiod", "spiffe://example.org/ns/istio-system/sa/istiod"},
	{"oncall", "spiffe://example.org/ns/ops/sa/oncall"},
	{"stranger", "spiffe://example.org/ns/elsewhere/sa/stranger"},
}

func main() {
	out := flag.String("out", filepath.Join("examples", "secure", "certs"), "directory to write the certificates to")
	days := flag.Int("days", 30, "validity, in days")
	flag.Parse()
	if err := generate(*out, time.Duration(*days)*24*time.Hour); err != nil {
		fmt.Fprintln(os.Stderr, "gencerts:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote ca.pem, server.pem and the client certificates of %d peers to %s\n", len(peers), *out)
}

func generate(dir string, validity time.Duration) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, caKey, err := newCA(validity)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw); err != nil {
		return err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "mcpbridge"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := issue(dir, "server", server, ca, caKey, validity); err != nil {
		return err
	}
	for _, p := range peers {
		u, err := url.Parse(p.spiffeID)
		if err != nil {
			return err
		}
		client := &x509.Certificate{
			Subject:     pkix.Name{CommonName: p.file},
			URIs:        []*url.URL{u},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := issue(dir, p.file, client, ca, caKey, validity); err != nil {
			return err
		}
	}
	return nil
}

func newCA(validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "mcpbridge example CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// issue signs tmpl with the CA and writes NAME.pem and NAME-key.pem.
func issue(dir, name string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, validity time.Duration) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, name+".pem"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+"-key.pem"), "PRIVATE KEY", keyDER)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
