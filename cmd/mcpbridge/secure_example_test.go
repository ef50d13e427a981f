package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The walk-through of examples/secure/README.md, step by step: certificates from its
// generator, the bridge from its config.yaml (with the test's directories and free ports),
// then push, watch and the debug views as each of its identities.
func TestSecureExampleWalkthrough(t *testing.T) {
	certs := t.TempDir()
	gen := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "run", "../../examples/secure/gencerts", "-out", certs, "-days", "1")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gencerts: %v\n%s", err, out)
	}
	config, err := os.ReadFile("../../examples/secure/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.NewReplacer(
		"examples/secure/certs/", certs+"/",
		"- examples/", "- ../../examples/",
		"127.0.0.1:15010", "127.0.0.1:0",
		"127.0.0.1:15014", "127.0.0.1:0",
	).Replace(string(config))
	grpcAddr, httpsURL := serveConfig(t, writeFile(t, t.TempDir(), "config.yaml", cfgText), certs)
	flags := func(who string) []string {
		return []string{"--ca-file", filepath.Join(certs, "ca.pem"), "--cert-file", filepath.Join(certs, who+".pem"),
			"--key-file", filepath.Join(certs, who+"-key.pem"), "--server-name", "localhost"}
	}

	// The producer pushes its namespace's services; bookinfo's are refused, nothing of them applied.
	code, stdout, stderr := runCLI(t, append(append([]string{"push", "--to", grpcAddr}, flags("producer")...), "../../examples/secure/payments/")...)
	if code != 0 {
		t.Fatalf("push payments: exit %d, %q", code, stderr)
	}
	mustHave(t, "push payments", stdout, "ACK  istio/networking/v1alpha3/serviceentries (1 resource)")
	code, stdout, _ = runCLI(t, append(append([]string{"push", "--to", grpcAddr}, flags("producer")...), "../../examples/serviceentries.yaml")...)
	if code != exitRuntime {
		t.Fatalf("push bookinfo as the payments producer: exit %d, want 1", code)
	}
	mustHave(t, "push bookinfo", stdout, "NACK istio/networking/v1alpha3/serviceentries", "may not produce", "bookinfo/")

	// The payments app sees payments only; istiod sees everything.
	watch := func(who string) []string {
		code, stdout, stderr := runCLI(t, append([]string{"watch", "--from", grpcAddr, "--collection", seCollection, "--count", "1", "--output", "json"}, flags(who)...)...)
		if code != 0 {
			t.Fatalf("watch as %s: exit %d, %q", who, code, stderr)
		}
		var names []string
		for _, u := range parseUpdates(t, stdout) {
			for _, r := range u.Resources {
				names = append(names, r.Name)
			}
		}
		return names
	}
	if got := watch("app"); strings.Join(got, ",") != "payments/ledger" {
		t.Fatalf("the payments app sees %v, want only payments/ledger", got)
	}
	if got := watch("istiod"); len(got) != 6 {
		t.Fatalf("istiod sees %v, want bookinfo's 5 and payments/ledger", got)
	}
	code, _, stderr = runCLI(t, append([]string{"watch", "--from", grpcAddr, "--collection", seCollection, "--count", "1"}, flags("stranger")...)...)
	if code != exitRuntime || !strings.Contains(stderr, "PermissionDenied") {
		t.Fatalf("watch as a stranger: exit %d, %q; want 1 and PermissionDenied", code, stderr)
	}

	// The debug views are on-call's; probes need no certificate.
	for who, want := range map[string]int{"oncall": http.StatusOK, "app": http.StatusForbidden, "": http.StatusForbidden} {
		if got := httpsStatus(t, certs, who, httpsURL+"/debug/collections"); got != want {
			t.Errorf("/debug/collections as %q: %d, want %d", who, got, want)
		}
	}
	if got := httpsStatus(t, certs, "", httpsURL+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz without a certificate: %d", got)
	}
}

// serveConfig serves the example's configuration and returns its gRPC address and HTTPS URL
// once it is ready (its probes answer without a client certificate).
func serveConfig(t *testing.T, file, certs string) (grpcAddr, httpsURL string) {
	t.Helper()
	grpcAddr, httpAddr := serveFile(t, file)
	httpsURL = "https://" + httpAddr
	deadline := time.Now().Add(10 * time.Second)
	for httpsStatus(t, certs, "", httpsURL+"/readyz") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("not ready within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return grpcAddr, httpsURL
}

// httpsStatus gets url as who (a certificate of the example's; "" presents none).
func httpsStatus(t *testing.T, certs, who, url string) int {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	if who != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(certs, who+".pem"), filepath.Join(certs, who+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
