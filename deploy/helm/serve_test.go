package helm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestRenderedConfigStartsTheBridge runs the pod of each example with the real binary. First
// with the listen addresses as rendered (every interface), to see the bridge accept the
// config, TLS and insecure keys included, as it will in the cluster: the rendered port is
// held on loopback by the test, so the bridge gets past its config checks and fails to
// bind (exit 1, naming grpc.address) instead of listening on every interface of this
// machine; a config it refused would exit 2. Then on loopback ports, serving: it must
// answer the Deployment's own probes as kubelet asks them, stop cleanly on SIGTERM, and
// hold the example's promises (mutual TLS, authorization).
func TestRenderedConfigStartsTheBridge(t *testing.T) {
	buildBridge(t) // once, before the parallel subtests
	for _, name := range examples(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := mustRender(t, loadValues(t, name))
			sc := scenarioFor(t, name, r)

			t.Run("config accepted as rendered", func(t *testing.T) {
				held, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer held.Close()
				_, port, _ := net.SplitHostPort(held.Addr().String())
				p := preparePod(t, r, sc.cluster, "0.0.0.0:"+port, "0.0.0.0:0")
				p.env = append(p.env, sc.env...)
				pr := p.run(t)
				select {
				case <-pr.exited:
				case l := <-waitServingLine(pr):
					// A system that lets the wildcard bind share the port: the config was
					// accepted all the same.
					t.Logf("served despite the held port: %s", l)
					pr.stop(t)
					return
				case <-time.After(startTimeout):
					t.Fatalf("neither served nor exited:\n%s", pr.log())
				}
				if code, log := pr.exitCode(), pr.log(); code != 1 || !strings.Contains(log, "grpc.address") {
					t.Fatalf("exit status %d, want 1 for the held grpc.address (2 is a refused config):\n%s", code, log)
				}
			})

			t.Run("serves and answers its probes", func(t *testing.T) {
				p := preparePod(t, r, sc.cluster, "127.0.0.1:0", "127.0.0.1:0")
				p.env = append(p.env, sc.env...)
				pr := p.run(t)
				s := pr.waitServing(t, startTimeout)
				if s.GRPCTLS != listenerTLS(p.config, "grpc") || s.HTTPTLS != listenerTLS(p.config, "http") {
					t.Errorf("serving TLS grpc=%v http=%v, config says grpc=%v http=%v", s.GRPCTLS, s.HTTPTLS, listenerTLS(p.config, "grpc"), listenerTLS(p.config, "http"))
				}
				c := container(t, one[appsv1.Deployment](t, r, "Deployment", releaseName))
				for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
					waitProbe(t, s.HTTP, probe.HTTPGet)
				}
				if sc.check != nil {
					sc.check(t, s)
				}
				pr.stop(t)
			})
		})
	}
}

// waitServingLine delivers the serving line, if the process logs one.
func waitServingLine(pr *process) <-chan string {
	out := make(chan string, 1)
	go func() {
		for {
			select {
			case l := <-pr.lines:
				if _, ok := parseServing(l); ok {
					out <- l
					return
				}
			case <-pr.exited:
				return
			}
		}
	}()
	return out
}

// waitProbe asks what kubelet's httpGet probe asks until it succeeds: kubelet verifies no
// server certificate and presents no client certificate.
func waitProbe(t *testing.T, addr string, g *corev1.HTTPGetAction) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true,
	}}
	u := url.URL{Scheme: strings.ToLower(string(g.Scheme)), Host: addr, Path: g.Path}
	deadline := time.Now().Add(startTimeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := client.Get(u.String())
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 400 { // kubelet's success
				return
			}
			last = resp.Status + ": " + string(body)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("probe %s did not succeed within %s; last: %s", u.String(), startTimeout, last)
}

// scenario is what an example needs of the cluster, and what to check of it while it serves.
type scenario struct {
	cluster cluster
	// env is added to the pod's environment (which beats its config file), for what the
	// test stands in for the cluster's (etcd's address).
	env   []string
	check func(t *testing.T, s serving)
}

func scenarioFor(t *testing.T, name string, r *rendered) scenario {
	t.Helper()
	switch name {
	case "mtls-cert-manager.yaml":
		// The test is cert-manager: it issues the Certificate's names (and loopback's, which
		// the test dials) from a CA, into the Secret the Certificate names.
		cert := one[cmv1.Certificate](t, r, "Certificate", releaseName)
		ca := newCA(t, "mesh-ca")
		secret := ca.issue(t, certSpec{dns: append(cert.Spec.DNSNames, "localhost"), uris: cert.Spec.URIs, server: true, client: true})
		peer := ca.issue(t, certSpec{uris: []string{"spiffe://cluster.local/ns/shop/sa/envoy"}, client: true})
		return scenario{
			cluster: cluster{"Secret/" + cert.Spec.SecretName: secret.secret(ca)},
			check: func(t *testing.T, s serving) {
				if err := grpcHandshake(s.GRPC, ca, &peer); err != nil {
					t.Errorf("a client with a certificate of the CA: %v", err)
				}
				if err := grpcHandshake(s.GRPC, ca, nil); err == nil {
					t.Error("a client without a certificate was served; mutual TLS requires one")
				}
			},
		}
	case "replicas-etcd.yaml":
		// The test is the cluster's etcd: a real one, from Debian's etcd-server.
		endpoint := startEtcd(t)
		return scenario{
			env: []string{"MCPBRIDGE_STORE_ETCD_ENDPOINTS=" + endpoint},
			check: func(t *testing.T, s serving) {
				var replica struct {
					Backend string `json:"backend"`
					Ready   bool   `json:"ready"`
				}
				if err := getJSON("http://"+s.HTTP+"/debug/replica", &replica); err != nil || replica.Backend != "etcd" || !replica.Ready {
					t.Errorf("/debug/replica %+v (%v), want a ready etcd replica", replica, err)
				}
			},
		}
	case "istiod-tls.yaml":
		// istiod dials in TLS mode SIMPLE: it verifies the bridge and presents no certificate.
		cert := one[cmv1.Certificate](t, r, "Certificate", releaseName)
		ca := newCA(t, "mesh-ca")
		secret := ca.issue(t, certSpec{dns: append(cert.Spec.DNSNames, "localhost"), server: true})
		producer := ca.issue(t, certSpec{uris: []string{"spiffe://cluster.local/ns/config/sa/producer"}, client: true})
		return scenario{
			cluster: cluster{"Secret/" + cert.Spec.SecretName: secret.secret(ca)},
			check: func(t *testing.T, s serving) {
				if err := grpcHandshake(s.GRPC, ca, nil); err != nil {
					t.Errorf("istiod's handshake (SIMPLE, no client certificate) refused: %v", err)
				}
				if err := grpcHandshake(s.GRPC, ca, &producer); err != nil {
					t.Errorf("the producer's handshake with its certificate refused: %v", err)
				}
			},
		}
	case "authz.yaml":
		// The Secret and the client CA bundle come from elsewhere: two CAs, so that the
		// client CA can only have come from the ConfigMap.
		serverCA, clientCA := newCA(t, "server-ca"), newCA(t, "client-ca")
		secret := serverCA.issue(t, certSpec{dns: []string{releaseName + "." + namespace + ".svc", "localhost"}, server: true})
		oncall := clientCA.issue(t, certSpec{uris: []string{"spiffe://cluster.local/ns/ops/sa/oncall"}, client: true})
		app := clientCA.issue(t, certSpec{uris: []string{"spiffe://cluster.local/ns/payments/sa/app"}, client: true})
		stranger := serverCA.issue(t, certSpec{uris: []string{"spiffe://cluster.local/ns/payments/sa/app"}, client: true})
		return scenario{
			cluster: cluster{
				"Secret/mcpbridge-tls":          secret.secret(serverCA),
				"ConfigMap/mcpbridge-client-ca": {"ca.crt": clientCA.certPEM},
			},
			check: func(t *testing.T, s serving) {
				if err := grpcHandshake(s.GRPC, serverCA, &app); err != nil {
					t.Errorf("a client of the client CA: %v", err)
				}
				if err := grpcHandshake(s.GRPC, serverCA, &stranger); err == nil {
					t.Error("a client certificate of a CA outside the client CA bundle was accepted")
				}
				for _, c := range []struct {
					who  string
					cert *issued
					want int
				}{{"on-call (admin)", &oncall, http.StatusOK}, {"a payments workload", &app, http.StatusForbidden}, {"no certificate", nil, http.StatusForbidden}} {
					if got := httpsGet(t, "https://"+s.HTTP+"/debug/collections", serverCA, c.cert); got != c.want {
						t.Errorf("/debug/collections as %s: %d, want %d (authz rules from values)", c.who, got, c.want)
					}
				}
			},
		}
	}
	return scenario{}
}

// grpcHandshake opens a TLS connection to the gRPC port as a gRPC client would (ALPN h2) and
// reads the server's first HTTP/2 frame. Under TLS 1.3 the server judges the client's
// certificate after the client's side of the handshake is done, so its verdict is the first
// thing read: an alert, or gRPC's SETTINGS frame.
func grpcHandshake(addr string, ca *authority, cert *issued) error {
	cfg := &tls.Config{RootCAs: ca.pool(), ServerName: "localhost", NextProtos: []string{"h2"}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.pair}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		return err
	}
	frame := make([]byte, 9)
	if _, err := io.ReadFull(conn, frame); err != nil {
		return err
	}
	if frame[3] != 0x4 {
		return fmt.Errorf("first frame of type %d, want SETTINGS", frame[3])
	}
	return nil
}

func httpsGet(t *testing.T, u string, ca *authority, cert *issued) int {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.pool(), ServerName: "localhost"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.pair}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := client.Get(u)
	if err != nil {
		t.Errorf("GET %s: %v", u, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestFilesModeFollowsConfigMapUpdates serves the files example and updates its ConfigMap
// volume as kubelet does, by the swap of its ..data symlink, twice: the bridge must serve
// each new content (a file changed, a file removed, a file added) without a restart, and
// ignore the hidden copies kubelet keeps in the directory.
func TestFilesModeFollowsConfigMapUpdates(t *testing.T) {
	r := mustRender(t, loadValues(t, "files.yaml"))
	cm := one[corev1.ConfigMap](t, r, "ConfigMap", releaseName+"-files")
	p := preparePod(t, r, nil, "127.0.0.1:0", "127.0.0.1:0")
	files := p.volumes["files"]

	// The example's files are valid Istio YAML, as the bridge's own validate reads them.
	out, err := exec.Command(buildBridge(t), "validate", files.dir).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok: 2 resources in 2 collections") {
		t.Fatalf("mcpbridge validate of the example's files: %v\n%s", err, out)
	}

	pr := p.run(t)
	s := pr.waitServing(t, startTimeout)
	const (
		ses = "istio/networking/v1alpha3/serviceentries"
		drs = "istio/networking/v1alpha3/destinationrules"
		gws = "istio/networking/v1alpha3/gateways"
	)
	waitServed(t, s.HTTP, pr, map[string][]string{ses: {"payments/payments-api"}, drs: {"payments/payments-api"}})

	// Update 1: serviceentries.yaml gains a ServiceEntry, destinationrules.yaml goes.
	next := map[string][]byte{"serviceentries.yaml": []byte(cm.Data["serviceentries.yaml"] + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: ledger
  namespace: payments
spec:
  hosts: [ledger.payments.example.com]
  ports: [{number: 443, name: https, protocol: TLS}]
  resolution: DNS
`)}
	files.update(t, next)
	waitServed(t, s.HTTP, pr, map[string][]string{ses: {"payments/ledger", "payments/payments-api"}, drs: nil})

	// Update 2: a new file appears beside it.
	next["gateway.yaml"] = []byte(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: edge
  namespace: payments
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
`)
	files.update(t, next)
	waitServed(t, s.HTTP, pr, map[string][]string{ses: {"payments/ledger", "payments/payments-api"}, drs: nil, gws: {"payments/edge"}})
	pr.stop(t)
}

// waitServed polls the bridge's debug views until each collection holds exactly the names
// wanted (nil: none), within the file debounce and a margin.
func waitServed(t *testing.T, httpAddr string, pr *process, want map[string][]string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	var got map[string][]string
	for time.Now().Before(deadline) {
		got = map[string][]string{}
		counts := collectionCounts(t, get(t, "http://"+httpAddr+"/debug/collections"))
		for c := range want {
			if counts[c] > 0 {
				got[c] = resourceNames(t, get(t, "http://"+httpAddr+"/debug/collections/"+c))
			} else {
				got[c] = nil
			}
		}
		same := true
		for c, names := range want {
			same = same && slices.Equal(got[c], names)
		}
		if same {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("served %v, want %v; log:\n%s", got, want, pr.log())
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v: %s", u, resp.Status, err, body)
	}
	return body
}

// authority is a throw-away CA, standing for the mesh's (or cert-manager's issuer).
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

type certSpec struct {
	dns            []string
	uris           []string
	server, client bool
}

// issued is a certificate and its key, as files and as a tls.Certificate.
type issued struct {
	certPEM, keyPEM []byte
	pair            tls.Certificate
}

// secret is the kubernetes.io/tls Secret cert-manager writes: tls.crt, tls.key and the
// issuer's ca.crt.
func (i issued) secret(ca *authority) map[string][]byte {
	return map[string][]byte{"tls.crt": i.certPEM, "tls.key": i.keyPEM, "ca.crt": ca.certPEM}
}

var serial atomic.Int64 // the examples' subtests issue certificates in parallel

func nextSerial() *big.Int {
	return big.NewInt(time.Now().UnixNano() + serial.Add(1))
}

func newCA(t *testing.T, name string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &authority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (a *authority) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.cert)
	return p
}

func (a *authority) issue(t *testing.T, s certSpec) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn := nextSerial()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "mcpbridge-test-" + sn.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, DNSNames: s.dns,
	}
	if slices.Contains(s.dns, "localhost") {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	for _, u := range s.uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	i := issued{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	if i.pair, err = tls.X509KeyPair(i.certPEM, i.keyPEM); err != nil {
		t.Fatal(err)
	}
	return i
}
