package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/certtest"
	"github.com/mcpbridge/mcpbridge/internal/tlsserver"
)

// startTLS serves a bridge whose two listeners both serve tls.
func startTLS(t *testing.T, tls tlsserver.Config) *running {
	t.Helper()
	return start(t, func(c *Config) { c.GRPC.TLS, c.HTTP.TLS = tls, tls })
}

// clientTLS trusts roots and, with a certificate, always presents it (a Go client holding it
// in Certificates would send none that the server's CAs did not issue, and look anonymous).
func clientTLS(roots *x509.CertPool, cert *certtest.Leaf) *tls.Config {
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
	}
	return cfg
}

// grpcCheck asks the health service over a new connection and returns the serial of the
// certificate the server presented.
func grpcCheck(t *testing.T, addr string, creds credentials.TransportCredentials) (*big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber, nil
}

// httpCheck gets /healthz over a new connection and returns the server certificate's serial.
func httpCheck(t *testing.T, url string, cfg *tls.Config) (*big.Int, error) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url + "/healthz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber, nil
}

func (b *running) httpsURL() string { return strings.Replace(b.httpURL, "http://", "https://", 1) }

// checkBoth checks both listeners with one client and returns the serials they presented.
func checkBoth(t *testing.T, b *running, cfg *tls.Config) (grpcSerial, httpSerial *big.Int, grpcErr, httpErr error) {
	t.Helper()
	grpcSerial, grpcErr = grpcCheck(t, b.grpcAddr, credentials.NewTLS(cfg))
	httpSerial, httpErr = httpCheck(t, b.httpsURL(), cfg)
	return
}

// Each client_auth mode, on both listeners, against the clients an operator meets: the
// CA's own, another CA's, none, an expired one.
func TestTLSClientAuthOnBothListeners(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "mesh CA")
	server := ca.Server(t)
	certFile, keyFile := server.Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	clients := []struct {
		name string
		cert *certtest.Leaf
	}{
		{"the CA's client", ca.Client(t, "spiffe://mesh/sa/client")},
		{"another CA's client", certtest.NewCA(t, "other CA").Client(t, "spiffe://mesh/sa/client")},
		{"no client certificate", nil},
		{"an expired client certificate", ca.Client(t, "spiffe://mesh/sa/client", certtest.Expired())},
	}
	accepted := map[string][]bool{
		tlsserver.ClientAuthRequire: {true, false, false, false},
		tlsserver.ClientAuthRequest: {true, false, true, false},
		tlsserver.ClientAuthNone:    {true, true, true, true},
	}
	for _, auth := range []string{tlsserver.ClientAuthRequire, tlsserver.ClientAuthRequest, tlsserver.ClientAuthNone} {
		t.Run(auth, func(t *testing.T) {
			b := startTLS(t, tlsserver.Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, ClientAuth: auth})
			for i, c := range clients {
				gs, hs, gerr, herr := checkBoth(t, b, clientTLS(ca.Pool(), c.cert))
				for _, r := range []struct {
					listener string
					serial   *big.Int
					err      error
				}{{"grpc", gs, gerr}, {"http", hs, herr}} {
					switch {
					case accepted[auth][i] && r.err != nil:
						t.Errorf("%s: %s refused: %v", r.listener, c.name, r.err)
					case accepted[auth][i] && r.serial.Cmp(server.Cert.SerialNumber) != 0:
						t.Errorf("%s: %s saw serial %x, want %x", r.listener, c.name, r.serial, server.Cert.SerialNumber)
					case !accepted[auth][i] && r.err == nil:
						t.Errorf("%s: %s accepted", r.listener, c.name)
					}
				}
			}
			assertPlaintextRefused(t, b)
		})
	}
}

func assertPlaintextRefused(t *testing.T, b *running) {
	t.Helper()
	if _, err := grpcCheck(t, b.grpcAddr, insecure.NewCredentials()); err == nil {
		t.Error("grpc: a plaintext client was served by the TLS listener")
	}
	resp, err := http.Get(b.httpURL + "/healthz")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Error("http: a plaintext client was served by the TLS listener")
	}
}

// Rotation as kubelet does it, of the server certificate and the CA at once: new handshakes
// get the new certificate and accept the new CA's clients, the old CA's are refused, and a
// stream opened before goes on receiving. A broken update keeps the last good files serving
// and counts a failed reload.
func TestTLSRotationKeepsOpenStreams(t *testing.T) {
	ca1 := certtest.NewCA(t, "CA 1")
	server1, client1 := ca1.Server(t), ca1.Client(t, "spiffe://mesh/sa/sink")
	m := certtest.NewMount(t, map[string][]byte{"tls.crt": server1.CertPEM, "tls.key": server1.KeyPEM, "ca.crt": ca1.PEM})
	b := startTLS(t, tlsserver.Config{CertFile: m.Path("tls.crt"), KeyFile: m.Path("tls.key"), ClientCAFile: m.Path("ca.crt")})

	// A sink subscribed before the rotation, with the old CA's certificate.
	old := subscribeOn(t, dialTLS(t, b.grpcAddr, clientTLS(ca1.Pool(), client1)), "old-sink", seColl)
	old.ack(old.Recv())

	ca2 := certtest.NewCA(t, "CA 2")
	server2, client2 := ca2.Server(t), ca2.Client(t, "spiffe://mesh/sa/sink")
	m.Update(t, map[string][]byte{"tls.crt": server2.CertPEM, "tls.key": server2.KeyPEM, "ca.crt": ca2.PEM})
	eventually(t, b, 1, "mcpbridge_tls_reloads_total", "listener", "grpc", "result", "success")
	eventually(t, b, 1, "mcpbridge_tls_reloads_total", "listener", "http", "result", "success")

	roots := ca1.Pool()
	roots.AddCert(ca2.Cert)
	gs, hs, gerr, herr := checkBoth(t, b, clientTLS(roots, client2))
	if gerr != nil || herr != nil || gs.Cmp(server2.Cert.SerialNumber) != 0 || hs.Cmp(server2.Cert.SerialNumber) != 0 {
		t.Fatalf("after rotation: grpc serial %x (%v), http serial %x (%v); want the new %x", gs, gerr, hs, herr, server2.Cert.SerialNumber)
	}
	if _, _, gerr, herr := checkBoth(t, b, clientTLS(roots, client1)); gerr == nil || herr == nil {
		t.Fatalf("a new connection of the old CA's client: grpc %v, http %v; want both refused", gerr, herr)
	}

	// The stream from before the rotation still receives what changes.
	if _, err := b.Store().ReplaceOwner("test", map[string][]*mcpapi.Resource{seColl: {serviceEntry("ns/a", "a.example")}}); err != nil {
		t.Fatal(err)
	}
	if got := old.Recv(); len(got.Resources) != 1 || got.Resources[0].Metadata.Name != "ns/a" {
		t.Fatalf("the old stream received %v", got)
	}

	// A broken update: the key of another certificate.
	m.Update(t, map[string][]byte{"tls.crt": server2.CertPEM, "tls.key": server1.KeyPEM, "ca.crt": ca2.PEM})
	eventually(t, b, 1, "mcpbridge_tls_reloads_total", "listener", "grpc", "result", "failure")
	eventually(t, b, 1, "mcpbridge_tls_reloads_total", "listener", "http", "result", "failure")
	gs, hs, gerr, herr = checkBoth(t, b, clientTLS(roots, client2))
	if gerr != nil || herr != nil || gs.Cmp(server2.Cert.SerialNumber) != 0 || hs.Cmp(server2.Cert.SerialNumber) != 0 {
		t.Fatalf("after a broken update: grpc serial %x (%v), http serial %x (%v); want the last good %x", gs, gerr, hs, herr, server2.Cert.SerialNumber)
	}
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A file that cannot be loaded at start is a configuration error naming the key and file.
func TestTLSFileErrorsAtStartAreConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.HTTP.TLS = tlsserver.Config{CertFile: dir + "/missing.pem", KeyFile: dir + "/missing-key.pem"}
	_, err := New(cfg, nil)
	var cerr *ConfigError
	if err == nil || !strings.Contains(err.Error(), "http.tls.cert_file") || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("error %v, want one naming http.tls.cert_file and the file", err)
	}
	if !errors.As(err, &cerr) {
		t.Fatalf("%T is not a *ConfigError", err)
	}
	cfg = DefaultConfig()
	cfg.GRPC.TLS = tlsserver.Config{ClientCAFile: dir + "/ca.pem"}
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "grpc.tls.client_ca_file") {
		t.Fatalf("error %v, want one naming grpc.tls.client_ca_file", err)
	}
}
