// Command kubeapi serves a Kubernetes API on loopback, and nothing else, for the istiod
// end-to-end test (make e2e-istiod): a real kube-apiserver over a real etcd (embedded), with no
// nodes, no controllers and no workloads.
//
// istiod needs it although its config comes from mcpbridge alone: since Istio moved its
// service registries to krt, pilot-discovery does not start without a Kubernetes client (with
// --registries empty it panics at start-up, reading namespaces from a multicluster controller
// that is only built with one), and a client whose informers never sync keeps it from ever
// becoming ready. An empty API server is the smallest real thing that satisfies it.
//
// It is a module of its own so that the bridge's go.mod never carries Kubernetes: its go.mod
// pins k8s.io/kubernetes and maps the staging modules (k8s.io/api, ...) to their published
// versions, since k8s.io/kubernetes points them at its own tree.
//
// Usage: kubeapi -dir DIR -port PORT. It writes DIR/kubeconfig (a bearer token, TLS not
// verified: the server's certificate is self-signed) once /readyz answers, creates the
// namespaces given with -namespaces, and runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// token is the bearer token of the one user, a member of system:masters. The server listens on
// loopback only and lives as long as one test.
const token = "mcpbridge-e2e"

func main() {
	dir := flag.String("dir", "", "state directory: etcd's data, certificates, the kubeconfig written for clients")
	port := flag.Int("port", 0, "the API server's port on 127.0.0.1")
	namespaces := flag.String("namespaces", "istio-system", "comma-separated namespaces to create once the server is ready")
	extra := flag.String("apiserver-args", "", "comma-separated flags added to kube-apiserver's (tests: --watch-cache=false,--etcd-compaction-interval=1s)")
	flag.Parse()
	if *dir == "" || *port == 0 {
		fmt.Fprintln(os.Stderr, "kubeapi: -dir and -port are required")
		os.Exit(2)
	}
	if err := run(*dir, *port, *namespaces, *extra); err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi:", err)
		os.Exit(1)
	}
}

func run(dir string, port int, namespaces, extra string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	etcdURL, stopEtcd, err := startEtcd(filepath.Join(dir, "etcd"), port)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer stopEtcd()

	saKey := filepath.Join(dir, "sa.key")
	if err := writeKey(saKey); err != nil {
		return err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",e2e-admin,e2e-admin,system:masters\n"), 0o600); err != nil {
		return err
	}

	server := "https://127.0.0.1:" + strconv.Itoa(port)
	go func() {
		if err := waitReady(server); err != nil {
			fmt.Fprintln(os.Stderr, "kubeapi:", err)
			return
		}
		for _, ns := range strings.Split(namespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				if err := createNamespace(server, ns); err != nil {
					fmt.Fprintln(os.Stderr, "kubeapi:", err)
					return
				}
			}
		}
		// Written last, and renamed into place: a client that sees the file finds a ready server.
		tmp := filepath.Join(dir, "kubeconfig.tmp")
		if err := os.WriteFile(tmp, []byte(kubeconfig(server)), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "kubeapi:", err)
			return
		}
		if err := os.Rename(tmp, filepath.Join(dir, "kubeconfig")); err != nil {
			fmt.Fprintln(os.Stderr, "kubeapi:", err)
			return
		}
		fmt.Println("kubeapi: ready at", server)
	}()

	cmd := app.NewAPIServerCommand()
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + tokens,
		"--authorization-mode=AlwaysAllow",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No node runs here: nothing would answer for the kubernetes Service's endpoints.
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
	}
	for _, a := range strings.Split(extra, ",") {
		if a = strings.TrimSpace(a); a != "" {
			args = append(args, a)
		}
	}
	cmd.SetArgs(args)
	if code := cli.Run(cmd); code != 0 {
		return fmt.Errorf("kube-apiserver exited with status %d", code)
	}
	return nil
}

// startEtcd runs a single-member etcd in this process on two free loopback ports, neither of
// them apiPort (the API server's, free but not yet bound).
func startEtcd(dataDir string, apiPort int) (clientURL string, stop func(), err error) {
	cfg := embed.NewConfig()
	cfg.Dir = dataDir
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true // a test's data: speed over durability
	urls, err := freeURLs(2, apiPort)
	if err != nil {
		return "", nil, err
	}
	peer, client := urls[0], urls[1]
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return "", nil, fmt.Errorf("not ready after 30s")
	}
	return client.String(), e.Close, nil
}

// freeURLs returns n URLs of loopback ports that are free now, differ from one another and
// from avoid. The listeners stay open until all are chosen, and avoid is held meanwhile if it
// is free: a port closed a moment ago is one the kernel may hand out again, and the test that
// started this process chose the API server's port just so (the API server then failed to
// bind the port etcd had taken).
func freeURLs(n, avoid int) ([]*url.URL, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(avoid)); err == nil {
		held = append(held, l)
	}
	var out []*url.URL
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		if l.Addr().(*net.TCPAddr).Port == avoid {
			continue
		}
		out = append(out, &url.URL{Scheme: "http", Host: l.Addr().String()})
	}
	return out, nil
}

// writeKey writes a new ECDSA key: the API server signs and checks service account tokens with it.
func writeKey(path string) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func kubeconfig(server string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: e2e
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
`, server, token)
}

// client talks to the server being started: its certificate is self-signed, made at start-up.
var client = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
}

func do(method, u, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, u, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func waitReady(server string) error {
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		code, body, err := do(http.MethodGet, server+"/readyz", "")
		if err == nil && code == http.StatusOK {
			return nil
		}
		last = fmt.Sprint(code, " ", body, " ", err)
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not ready after 2m: %s", last)
}

func createNamespace(server, ns string) error {
	code, body, err := do(http.MethodPost, server+"/api/v1/namespaces",
		fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, ns))
	if err != nil {
		return err
	}
	if code != http.StatusCreated && code != http.StatusConflict {
		return fmt.Errorf("create namespace %s: %d %s", ns, code, body)
	}
	return nil
}
