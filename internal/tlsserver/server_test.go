package tlsserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcpbridge/mcpbridge/internal/certtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateNamesTheKey(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		wants []string // empty: valid
	}{
		{"plaintext", Config{}, nil},
		{"tls", Config{CertFile: "c", KeyFile: "k"}, nil},
		{"mtls", Config{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, nil},
		{"request", Config{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "request"}, nil},
		{"none with a CA", Config{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "none"}, nil},
		{"none without TLS", Config{ClientAuth: "none"}, nil},
		{"key without cert", Config{KeyFile: "k"}, []string{"grpc.tls.key_file", "grpc.tls.cert_file"}},
		{"cert without key", Config{CertFile: "c"}, []string{"grpc.tls.cert_file", "grpc.tls.key_file"}},
		{"CA without cert", Config{ClientCAFile: "ca"}, []string{"grpc.tls.client_ca_file", "grpc.tls.cert_file"}},
		{"require without CA", Config{CertFile: "c", KeyFile: "k", ClientAuth: "require"}, []string{"grpc.tls.client_auth", "grpc.tls.client_ca_file"}},
		{"request without CA", Config{CertFile: "c", KeyFile: "k", ClientAuth: "request"}, []string{"grpc.tls.client_auth", "grpc.tls.client_ca_file"}},
		{"require without TLS", Config{ClientAuth: "require"}, []string{"grpc.tls.client_auth", "grpc.tls.cert_file"}},
		{"unknown client_auth", Config{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "always"}, []string{"grpc.tls.client_auth", `"always"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate("grpc.tls")
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatalf("valid configuration refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// pki is a CA, a server certificate and a client certificate, written to files.
type pki struct {
	ca                *certtest.CA
	server, client    *certtest.Leaf
	cert, key, caFile string
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	ca := certtest.NewCA(t, "test CA")
	p := &pki{ca: ca, server: ca.Server(t), client: ca.Client(t, "spiffe://test/client")}
	p.cert, p.key = p.server.Write(t, dir, "server")
	p.caFile = ca.Write(t, dir, "ca")
	return p
}

func (p *pki) config(auth string) Config {
	return Config{CertFile: p.cert, KeyFile: p.key, ClientCAFile: p.caFile, ClientAuth: auth}
}

func TestNewRefusesFilesNamingKeyAndFile(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	other := certtest.NewCA(t, "other").Server(t)
	_, otherKey := other.Write(t, dir, "other")
	garbage := dir + "/garbage.pem"
	certtest.WriteFile(t, garbage, []byte("not PEM at all\n"))
	cut := dir + "/cut.pem"
	certtest.WriteFile(t, cut, append(append([]byte{}, p.ca.PEM...), p.server.CertPEM[:len(p.server.CertPEM)/2]...))
	cases := []struct {
		name  string
		cfg   Config
		wants []string
	}{
		{"missing cert", Config{CertFile: dir + "/nope.pem", KeyFile: p.key}, []string{"grpc.tls.cert_file", "nope.pem", "no such file"}},
		{"missing CA", Config{CertFile: p.cert, KeyFile: p.key, ClientCAFile: dir + "/noca.pem"}, []string{"grpc.tls.client_ca_file", "noca.pem"}},
		{"cert not PEM", Config{CertFile: garbage, KeyFile: p.key}, []string{"grpc.tls.cert_file", "garbage.pem", "no PEM certificate"}},
		{"key of another cert", Config{CertFile: p.cert, KeyFile: otherKey}, []string{"grpc.tls.key_file", "other-key.pem", "does not match"}},
		{"key is a cert", Config{CertFile: p.cert, KeyFile: p.cert}, []string{"grpc.tls.key_file", "server.pem"}},
		{"CA not PEM", Config{CertFile: p.cert, KeyFile: p.key, ClientCAFile: garbage}, []string{"grpc.tls.client_ca_file", "garbage.pem"}},
		{"CA cut short", Config{CertFile: p.cert, KeyFile: p.key, ClientCAFile: cut}, []string{"grpc.tls.client_ca_file", "cut.pem", "cut short"}},
		{"CA is a key", Config{CertFile: p.cert, KeyFile: p.key, ClientCAFile: p.key}, []string{"grpc.tls.client_ca_file", "PRIVATE KEY"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{Key: "grpc.tls", Config: tc.cfg})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// listen serves TLS with s on loopback: each connection is handshaken and, if that works,
// answered "ok" and closed. It stops when the test ends.
func listen(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", s.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok"))
				}
			})
		}
	})
	return lis.Addr().String()
}

// handshake connects as a client and returns the serial of the server's certificate, or why
// the server refused. It reads the server's answer: under TLS 1.3 the client's side of the
// handshake ends before the server has checked the client's certificate.
func handshake(addr string, roots *x509.CertPool, cert *certtest.Leaf) (*big.Int, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	if cert != nil {
		// Always present it. With Certificates instead, a Go client sends no certificate when
		// its issuer is not among the CAs the server names, and would look anonymous.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func TestClientAuthModes(t *testing.T) {
	p := newPKI(t, t.TempDir())
	stranger := certtest.NewCA(t, "stranger").Client(t, "spiffe://test/stranger")
	expired := p.ca.Client(t, "spiffe://test/old", certtest.Expired())
	type client struct {
		name string
		cert *certtest.Leaf
	}
	clients := []client{{"right CA", p.client}, {"wrong CA", stranger}, {"no certificate", nil}, {"expired", expired}}
	want := map[string][]bool{ // accepted, per client above
		ClientAuthRequire: {true, false, false, false},
		ClientAuthRequest: {true, false, true, false},
		ClientAuthNone:    {true, true, true, true},
	}
	for auth, accepted := range want {
		s, err := New(Options{Key: "grpc.tls", Config: p.config(auth)})
		if err != nil {
			t.Fatal(err)
		}
		addr := listen(t, s)
		for i, c := range clients {
			serial, err := handshake(addr, p.ca.Pool(), c.cert)
			if accepted[i] && (err != nil || serial.Cmp(p.server.Cert.SerialNumber) != 0) {
				t.Errorf("%s: client with %s refused: %v", auth, c.name, err)
			}
			if !accepted[i] && err == nil {
				t.Errorf("%s: client with %s accepted", auth, c.name)
			}
		}
	}
}

func TestTLS12IsTheMinimum(t *testing.T) {
	p := newPKI(t, t.TempDir())
	s, err := New(Options{Key: "grpc.tls", Config: p.config(ClientAuthNone)})
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, s)
	for version, accepted := range map[uint16]bool{tls.VersionTLS11: false, tls.VersionTLS12: true} {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: version})
		if err == nil {
			c.Close()
		}
		if (err == nil) != accepted {
			t.Errorf("a client of at most %s: accepted %v, want %v (%v)", tls.VersionName(version), err == nil, accepted, err)
		}
	}
}

// running is a Server whose Run goes on until the test ends, with the errors of its reloads.
type running struct {
	*Server
	addr     string
	mu       sync.Mutex
	reloads  []error
	reloaded chan struct{}
}

func run(t *testing.T, cfg Config) *running {
	t.Helper()
	r := &running{reloaded: make(chan struct{}, 100)}
	s, err := New(Options{Key: "grpc.tls", Config: cfg, Debounce: 20 * time.Millisecond, Reloaded: func(err error) {
		r.mu.Lock()
		r.reloads = append(r.reloads, err)
		r.mu.Unlock()
		r.reloaded <- struct{}{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.Server = s
	r.addr = listen(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// next waits for the next reload and returns its error.
func (r *running) next(t *testing.T) error {
	t.Helper()
	select {
	case <-r.reloaded:
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10s")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloads[len(r.reloads)-1]
}

func TestRotationByRenameServesTheNewFiles(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	r := run(t, p.config(ClientAuthRequire))
	if serial, err := handshake(r.addr, p.ca.Pool(), p.client); err != nil || serial.Cmp(p.server.Cert.SerialNumber) != 0 {
		t.Fatalf("before rotation: %v %v", serial, err)
	}

	// A new CA: the server's certificate, and the clients it accepts.
	ca2 := certtest.NewCA(t, "next CA")
	server2, client2 := ca2.Server(t), ca2.Client(t, "spiffe://test/client")
	certtest.Replace(t, p.caFile, append(append([]byte{}, p.ca.PEM...), ca2.PEM...)) // both, during the move
	certtest.Replace(t, p.cert, server2.CertPEM)
	certtest.Replace(t, p.key, server2.KeyPEM)
	for r.next(t) != nil { // a reload may see the new certificate before its key
	}
	if got := r.Certificate().SerialNumber; got.Cmp(server2.Cert.SerialNumber) != 0 {
		t.Fatalf("serving serial %x, want the new %x", got, server2.Cert.SerialNumber)
	}
	roots := p.ca.Pool()
	roots.AddCert(ca2.Cert)
	for _, c := range []*certtest.Leaf{client2, p.client} {
		if serial, err := handshake(r.addr, roots, c); err != nil || serial.Cmp(server2.Cert.SerialNumber) != 0 {
			t.Fatalf("after rotation: serial %x, err %v; want the new certificate %x", serial, err, server2.Cert.SerialNumber)
		}
	}
	// The old CA leaves the bundle: its clients are refused.
	certtest.Replace(t, p.caFile, ca2.PEM)
	if err := r.next(t); err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(r.addr, roots, p.client); err == nil {
		t.Fatal("a client of the removed CA was accepted")
	}
}

func TestBrokenReplacementKeepsTheLastGoodFiles(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	r := run(t, p.config(ClientAuthRequire))
	other := certtest.NewCA(t, "other").Server(t)
	for _, tc := range []struct {
		name, path string
		data       []byte
		want       string
	}{
		{"half-written certificate", p.cert, p.server.CertPEM[:len(p.server.CertPEM)/2], "grpc.tls.cert_file"},
		{"key of another certificate", p.key, other.KeyPEM, "grpc.tls.key_file"},
		{"CA not PEM", p.caFile, []byte("garbage"), "grpc.tls.client_ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := mustRead(t, tc.path)
			certtest.Replace(t, tc.path, tc.data)
			err := r.next(t)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("reload error %v, want one naming %s and %s", err, tc.want, tc.path)
			}
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != tc.path {
				t.Fatalf("reload error %#v is not a FileError for %s", err, tc.path)
			}
			if serial, err := handshake(r.addr, p.ca.Pool(), p.client); err != nil || serial.Cmp(p.server.Cert.SerialNumber) != 0 {
				t.Fatalf("after a broken replacement: %v %v; want the last good certificate", serial, err)
			}
			certtest.Replace(t, tc.path, old)
			if err := r.next(t); err != nil { // the good files again: reported as a reload that works
				t.Fatal(err)
			}
		})
	}
}

// A kubelet-mounted Secret changes by the rename of a "..data" symlink: no event names the
// files themselves.
func TestRotationOfAKubeletMount(t *testing.T) {
	ca := certtest.NewCA(t, "CA")
	first, second := ca.Server(t), ca.Server(t)
	m := certtest.NewMount(t, map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM, "ca.crt": ca.PEM})
	r := run(t, Config{CertFile: m.Path("tls.crt"), KeyFile: m.Path("tls.key"), ClientCAFile: m.Path("ca.crt")})
	m.Update(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM, "ca.crt": ca.PEM})
	if err := r.next(t); err != nil {
		t.Fatal(err)
	}
	if serial, err := handshake(r.addr, ca.Pool(), ca.Client(t, "")); err != nil || serial.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after the update: serial %x, %v; want %x", serial, err, second.Cert.SerialNumber)
	}
}

// The swap of a kubelet mount landing between the reads of the certificate and of the key is
// no failed reload: the load sees its files changed under it and reads them again.
func TestAMountSwapBetweenTwoReadsIsNoFailure(t *testing.T) {
	ca := certtest.NewCA(t, "CA")
	first, second := ca.Server(t), ca.Server(t)
	m := certtest.NewMount(t, map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM})
	r := run(t, Config{CertFile: m.Path("tls.crt"), KeyFile: m.Path("tls.key")})
	var swapped atomic.Bool
	swapErr := make(chan error, 1)
	hook := func(field string) { // on the server's goroutine: no t.Fatal here
		if field == "cert_file" && swapped.CompareAndSwap(false, true) {
			swapErr <- m.Swap(map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM})
		}
	}
	afterRead.Store(&hook)
	t.Cleanup(func() { afterRead.Store(nil) })
	certtest.WriteFile(t, m.Dir+"/unrelated", []byte("x")) // an event: the reload that is torn
	if err := r.next(t); err != nil {
		t.Fatalf("a reload torn by a mount swap failed: %v", err)
	}
	if !swapped.Load() {
		t.Fatal("the mount was not swapped during the reload")
	}
	if err := <-swapErr; err != nil {
		t.Fatalf("swapping the mount: %v", err)
	}
	if got := r.Certificate().SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("serving serial %x, want the new %x", got, second.Cert.SerialNumber)
	}
}

// An event that changes none of the files (another file in the directory) is no reload.
func TestUnrelatedEventsAreNoReload(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	r := run(t, p.config(ClientAuthNone))
	certtest.WriteFile(t, dir+"/unrelated", []byte("x"))
	select {
	case <-r.reloaded:
		t.Fatalf("a reload for an unrelated file: %v", r.reloads)
	case <-time.After(200 * time.Millisecond):
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
