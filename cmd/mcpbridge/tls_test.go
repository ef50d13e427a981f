package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/mcpbridge/mcpbridge/app"
	"github.com/mcpbridge/mcpbridge/internal/certtest"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:15010": true, "127.3.2.1:1": true, "[::1]:1": true, "localhost:1": true, "LocalHost:1": true,
		"[::ffff:127.0.0.1]:1": true,
		":15010":               false, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false, "example.com:1": false,
		"localhost.example.com:1": false,
	} {
		if got := app.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// Each bad combination of TLS keys, each file that cannot be loaded, and plaintext beyond
// loopback: exit 2, one line naming the key.
func TestTLSConfigErrorsExit2NamingTheKey(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "CA")
	cert, key := ca.Server(t).Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	garbage := writeFile(t, dir, "garbage.pem", "not PEM\n")
	loopback := []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	conf := func(name, yaml string) []string {
		return append([]string{"serve", "--config", writeFile(t, dir, name, yaml)}, loopback...)
	}
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		wants []string
	}{
		{"key without cert", conf("k.yaml", "grpc:\n  tls:\n    key_file: "+key+"\n"), nil, []string{"grpc.tls.key_file", "grpc.tls.cert_file"}},
		{"cert without key", conf("c.yaml", "http:\n  tls:\n    cert_file: "+cert+"\n"), nil, []string{"http.tls.cert_file", "http.tls.key_file"}},
		{"require without CA", conf("r.yaml", "grpc:\n  tls: {cert_file: "+cert+", key_file: "+key+", client_auth: require}\n"), nil,
			[]string{"grpc.tls.client_auth", "grpc.tls.client_ca_file"}},
		{"unknown client_auth", append([]string{"serve"}, loopback...), map[string]string{
			"MCPBRIDGE_HTTP_TLS_CERT_FILE": cert, "MCPBRIDGE_HTTP_TLS_KEY_FILE": key, "MCPBRIDGE_HTTP_TLS_CLIENT_CA_FILE": caFile,
			"MCPBRIDGE_HTTP_TLS_CLIENT_AUTH": "always"}, []string{"http.tls.client_auth", `"always"`}},
		{"unknown key", conf("u.yaml", "grpc:\n  tls:\n    certfile: x\n"), nil, []string{"unknown key", "grpc.tls.certfile"}},
		{"missing cert file", conf("m.yaml", "grpc:\n  tls: {cert_file: "+dir+"/nope.pem, key_file: "+key+"}\n"), nil,
			[]string{"grpc.tls.cert_file", "nope.pem", "no such file"}},
		{"invalid cert file", conf("i.yaml", "http:\n  tls: {cert_file: "+garbage+", key_file: "+key+"}\n"), nil,
			[]string{"http.tls.cert_file", "garbage.pem"}},
		{"unreadable CA file", conf("d.yaml", "grpc:\n  tls: {cert_file: "+cert+", key_file: "+key+", client_ca_file: "+dir+"}\n"), nil,
			[]string{"grpc.tls.client_ca_file", dir}},
		{"invalid CA file", conf("a.yaml", "grpc:\n  tls: {cert_file: "+cert+", key_file: "+key+", client_ca_file: "+garbage+"}\n"), nil,
			[]string{"grpc.tls.client_ca_file", "garbage.pem"}},
		{"key of another certificate", conf("o.yaml", "grpc:\n  tls: {cert_file: "+cert+", key_file: "+writeFile(t, dir, "other-key.pem", string(ca.Server(t).KeyPEM))+"}\n"), nil,
			[]string{"grpc.tls.key_file", "other-key.pem"}},
		{"grpc beyond loopback", []string{"serve", "--http-addr", "127.0.0.1:0"}, map[string]string{"MCPBRIDGE_GRPC_ADDRESS": "0.0.0.0:0"},
			[]string{"grpc.address", "grpc.tls", "grpc.insecure: true"}},
		{"http on every interface", []string{"serve", "--config", writeFile(t, dir, "h.yaml", "http:\n  address: \":0\"\n")}, nil,
			[]string{"http.address", "http.tls", "http.insecure: true"}},
		{"flag beyond loopback", []string{"serve", "--grpc-addr", "10.1.2.3:0", "--http-addr", "127.0.0.1:0"}, nil,
			[]string{"--grpc-addr", "grpc.insecure: true"}},
		{"insecure does not cover the other listener", []string{"serve", "--grpc-addr", "0.0.0.0:0", "--http-addr", "0.0.0.0:0"},
			map[string]string{"MCPBRIDGE_GRPC_INSECURE": "true"}, []string{"--http-addr", "http.insecure: true"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, _, stderr := runCLI(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit = %d, want 2 (stderr %q)", code, stderr)
			}
			assertOneLine(t, stderr, tc.wants...)
		})
	}
}

// grpc.insecure and http.insecure let a listener serve plaintext beyond loopback; TLS does
// too, without them.
func TestInsecureServesPlaintextBeyondLoopback(t *testing.T) {
	file := writeFile(t, t.TempDir(), "c.yaml", "grpc:\n  address: 0.0.0.0:0\n  insecure: true\n")
	t.Setenv("MCPBRIDGE_HTTP_INSECURE", "true")
	c := startCLI(t, "serve", "--config", file, "--http-addr", ":0")
	waitOutput(t, &c.stderr, func(s string) bool { return strings.Contains(s, "mcpbridge serving") })
	if code := c.stop(t); code != 0 {
		t.Fatalf("exit %d, want 0 (stderr %q)", code, c.stderr.String())
	}

	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	t.Setenv("MCPBRIDGE_HTTP_INSECURE", "false")
	t.Setenv("MCPBRIDGE_HTTP_TLS_CERT_FILE", "server.pem")
	t.Setenv("MCPBRIDGE_HTTP_TLS_KEY_FILE", "server-key.pem")
	fs.Parse([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "0.0.0.0:15014"})
	if _, err := loadConfig(fs); err != nil {
		t.Fatalf("a TLS listener beyond loopback: %v", err)
	}
}

// mtlsBridge serves `mcpbridge serve` with mutual TLS on its gRPC port (client_auth require,
// by default with a client CA) from a configuration file, until the test ends.
type mtlsBridge struct {
	grpcAddr, httpURL string
	ca                *certtest.CA
	dir               string
}

func serveMTLS(t *testing.T) *mtlsBridge {
	t.Helper()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "mesh CA")
	cert, key := ca.Server(t).Write(t, dir, "server")
	file := writeFile(t, dir, "mcpbridge.yaml", "grpc:\n  address: 127.0.0.1:0\n  tls:\n    cert_file: "+cert+"\n    key_file: "+key+
		"\n    client_ca_file: "+ca.Write(t, dir, "ca")+"\nhttp:\n  address: 127.0.0.1:0\n")
	grpcAddr, httpAddr := serveFile(t, file)
	b := &mtlsBridge{grpcAddr: grpcAddr, httpURL: "http://" + httpAddr, ca: ca, dir: dir}
	waitStatus(t, b.httpURL+"/readyz", http.StatusOK, 10*time.Second)
	return b
}

// serveFile serves `mcpbridge serve --config file` until the test ends and returns its
// gRPC and HTTP addresses once it listens.
func serveFile(t *testing.T, file string) (grpcAddr, httpAddr string) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	if err := fs.Parse([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(fs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(g, h net.Addr) { addrs <- [2]string{g.String(), h.String()} })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return a[0], a[1]
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return "", ""
}

// clientFlags writes a client certificate of the CA with a SPIFFE ID and returns the TLS
// flags of push and watch that use it.
func (b *mtlsBridge) clientFlags(t *testing.T, spiffeID string) []string {
	t.Helper()
	cert, key := b.ca.Client(t, spiffeID).Write(t, b.dir, "client")
	return []string{"--ca-file", filepath.Join(b.dir, "ca.pem"), "--cert-file", cert, "--key-file", key, "--server-name", "localhost"}
}

// owners are the owners of the ServiceEntries the bridge serves, from /debug/collections.
func (b *mtlsBridge) owners(t *testing.T) map[string]string {
	t.Helper()
	resp, err := http.Get(b.httpURL + "/debug/collections/" + seCollection)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var view struct {
		Resources []struct{ Name, Owner string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range view.Resources {
		out[r.Name] = r.Owner
	}
	return out
}

// push and watch, with their TLS flags, against a bridge that requires client certificates:
// push's producer is known by its certificate's SPIFFE ID; watch receives what it pushed.
// Without a client certificate, or in plaintext, both fail with exit 1.
func TestPushAndWatchOverMutualTLS(t *testing.T) {
	const producer = "spiffe://mesh.example/ns/config/sa/pusher"
	b := serveMTLS(t)
	flags := b.clientFlags(t, producer)
	code, stdout, stderr := runCLI(t, append([]string{"push", "--to", b.grpcAddr}, append(flags, "../../examples/")...)...)
	if code != 0 {
		t.Fatalf("push: exit %d, stderr %q", code, stderr)
	}
	mustHave(t, "push stdout", stdout, "ACK  istio/networking/v1alpha3/serviceentries (5 resources)")
	owners := b.owners(t)
	if len(owners) != 5 {
		t.Fatalf("the bridge serves %d ServiceEntries, want the 5 pushed: %v", len(owners), owners)
	}
	for name, owner := range owners {
		if owner != producer {
			t.Errorf("%s is owned by %q, want the client certificate's %s", name, owner, producer)
		}
	}

	code, stdout, stderr = runCLI(t, append([]string{"watch", "--from", b.grpcAddr, "--collection", seCollection, "--count", "1", "--output", "json"}, flags...)...)
	if code != 0 {
		t.Fatalf("watch: exit %d, stderr %q", code, stderr)
	}
	if us := parseUpdates(t, stdout); len(us) != 1 || len(us[0].Resources) != 5 {
		t.Fatalf("watch printed %+v, want one update of the 5 ServiceEntries", us)
	}
	code, _, stderr = runCLI(t, append([]string{"watch", "--from", b.grpcAddr, "--xds", "networking.istio.io/v1/ServiceEntry", "--count", "1"}, flags...)...)
	if code != 0 {
		t.Fatalf("watch --xds: exit %d, stderr %q", code, stderr)
	}

	noCert := []string{"--ca-file", filepath.Join(b.dir, "ca.pem"), "--server-name", "localhost"}
	for name, args := range map[string][]string{
		"push without a client certificate":  append([]string{"push", "--to", b.grpcAddr, "--timeout", "3s"}, append(noCert, "../../examples/")...),
		"watch without a client certificate": append([]string{"watch", "--from", b.grpcAddr, "--collection", seCollection, "--count", "1"}, noCert...),
		"push in plaintext":                  {"push", "--to", b.grpcAddr, "--timeout", "3s", "../../examples/"},
		"watch in plaintext":                 {"watch", "--from", b.grpcAddr, "--collection", seCollection, "--count", "1"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitRuntime {
			t.Errorf("%s: exit %d, want 1 (stderr %q)", name, code, stderr)
			continue
		}
		assertOneLine(t, stderr)
	}
}
