package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func assertOneLine(t *testing.T, stderr string, wants ...string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr is not one line: %q", stderr)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q does not name %q", stderr, w)
		}
	}
	if strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "panic") {
		t.Errorf("stderr has a stack trace: %q", stderr)
	}
}

func TestBadGRPCAddrExits2NamingTheFlag(t *testing.T) {
	code, _, stderr := runCLI(t, "serve", "--grpc-addr", "bad")
	if code != exitUsage {
		t.Fatalf("exit = %d, want 2 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "--grpc-addr", `"bad"`)
}

func TestBadConfigurationExits2NamingTheKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		wants []string
	}{
		{"unknown key", []string{"serve", "--config", write("typo.yaml", "grpc:\n  adress: x\n")}, nil, []string{"unknown key", "grpc.adress"}},
		{"bad level in file", []string{"serve", "--config", write("lvl.yaml", "log:\n  level: loud\n")}, nil, []string{"log.level", "loud"}},
		{"bad duration", []string{"serve", "--config", write("dur.yaml", "sources:\n  startup_timeout: soon\n")}, nil, []string{"sources.startup_timeout: \"soon\" is not a duration", "30s"}},
		{"bad duration in env", []string{"serve"}, map[string]string{"MCPBRIDGE_SINK_EXPIRY": "5x"}, []string{"sink.expiry: \"5x\" is not a duration"}},
		{"bad number", []string{"serve", "--config", write("num.yaml", "limits:\n  streams_per_peer: many\n")}, nil, []string{"limits.streams_per_peer: \"many\" is not a whole number"}},
		{"missing config file", []string{"serve", "--config", filepath.Join(dir, "nope.yaml")}, nil, []string{"--config", "nope.yaml"}},
		{"not yaml", []string{"serve", "--config", write("bad.yaml", "grpc: [unclosed\n")}, nil, []string{"--config", "bad.yaml"}},
		{"bad env address", []string{"serve"}, map[string]string{"MCPBRIDGE_HTTP_ADDRESS": "127.0.0.1:99999"}, []string{"http.address", "99999"}},
		{"unknown flag", []string{"serve", "--grpc-adr", "x"}, nil, []string{"--grpc-adr"}},
		{"misspelt environment variable", []string{"serve"}, map[string]string{"MCPBRIDGE_GRPC_ADRESS": "127.0.0.1:1"}, []string{"MCPBRIDGE_GRPC_ADRESS", "did you mean MCPBRIDGE_GRPC_ADDRESS"}},
		{"unknown environment variable", []string{"serve"}, map[string]string{"MCPBRIDGE_COLOUR": "blue"}, []string{"MCPBRIDGE_COLOUR", "sets no configuration key"}},
		{"authz rule without identity", []string{"serve", "--config", write("az1.yaml", "authz:\n  rules:\n    - consume: {collections: ['*'], namespaces: ['*']}\n")}, nil,
			[]string{"authz.rules[0].identity", "empty"}},
		{"authz identity not SPIFFE", []string{"serve", "--config", write("az2.yaml", "authz:\n  rules:\n    - identity: istiod\n")}, nil,
			[]string{"authz.rules[0].identity", "istiod"}},
		{"authz collections without namespaces", []string{"serve", "--config", write("az3.yaml", "authz:\n  rules:\n    - identity: unauthenticated\n    - identity: spiffe://e.org/a\n      produce: {collections: [istio/networking/v1alpha3/serviceentries]}\n")}, nil,
			[]string{"authz.rules[1].produce.namespaces"}},
		{"authz misspelt field", []string{"serve", "--config", write("az4.yaml", "authz:\n  rules:\n    - identity: unauthenticated\n      consumes: {collections: ['*'], namespaces: ['*']}\n")}, nil,
			[]string{"consumes"}},
		{"upstream authz without namespaces", []string{"serve", "--config", write("az5.yaml", "sources:\n  upstreams:\n    - address: 127.0.0.1:1\n      authz: {collections: ['*']}\n")}, nil,
			[]string{"sources.upstreams[0].authz.namespaces"}},
		{"downstream authz", []string{"serve", "--config", write("az6.yaml", "downstreams:\n  - address: 127.0.0.1:1\n    authz: {collections: ['*'], namespaces: ['*']}\n")}, nil,
			[]string{"downstreams[0].authz"}},
		{"unknown store backend", []string{"serve", "--config", write("st1.yaml", "store:\n  backend: redis\n")}, nil, []string{"store.backend", "redis"}},
		{"etcd without endpoints", []string{"serve", "--config", write("st2.yaml", "store:\n  backend: etcd\n")}, nil, []string{"store.etcd.endpoints"}},
		{"etcd endpoint not a URL", []string{"serve", "--config", write("st3.yaml", "store:\n  backend: etcd\n  etcd: {endpoints: [etcd:2379]}\n")}, nil, []string{"store.etcd.endpoints[0]", "etcd:2379"}},
		{"etcd session too short", []string{"serve", "--config", write("st4.yaml", "store:\n  backend: etcd\n  etcd: {endpoints: ['http://127.0.0.1:2379'], session_ttl: 1s}\n")}, nil, []string{"store.etcd.session_ttl"}},
		{"etcd transactions too small", []string{"serve", "--config", write("st5.yaml", "store:\n  backend: etcd\n  etcd: {endpoints: ['http://127.0.0.1:2379'], max_txn_bytes: 10}\n")}, nil, []string{"store.etcd.max_txn_bytes"}},
		{"unknown command", []string{"serv"}, nil, []string{"serv"}},
		{"stray argument", []string{"serve", "extra"}, nil, []string{"extra"}},
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

// Precedence is viper's: explicit flag > environment > file > default.
func TestConfigurationPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("grpc:\n  address: 127.0.0.1:1001\nhttp:\n  address: 127.0.0.1:2001\nlog:\n  level: warn\n"), 0o600)
	t.Setenv("MCPBRIDGE_HTTP_ADDRESS", "127.0.0.1:2002")
	t.Setenv("MCPBRIDGE_LOG_LEVEL", "error")
	t.Setenv("MCPBRIDGE_SOURCES_FILES", "a.yaml,b/")

	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	if err := fs.Parse([]string{"--config", file, "--log-level", "debug"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(fs)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ what, got, want string }{
		{"grpc.address (file over default)", cfg.GRPC.Address, "127.0.0.1:1001"},
		{"http.address (env over file)", cfg.HTTP.Address, "127.0.0.1:2002"},
		{"log.level (flag over env)", cfg.Log.Level, "debug"},
		{"log.format (default)", cfg.Log.Format, "text"},
		{"sources.files (env list)", strings.Join(cfg.Sources.Files, "|"), "a.yaml|b/"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if cfg.Sources.StartupTimeout != 30*time.Second {
		t.Errorf("sources.startup_timeout default = %s", cfg.Sources.StartupTimeout)
	}
}

// The shipped config.yaml is valid and sets only known keys.
func TestShippedConfigLoads(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	fs.Parse([]string{"--config", "../../config.yaml"})
	cfg, err := loadConfig(fs)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Sources.Files) != 1 || cfg.Sources.Files[0] != "examples/" {
		t.Fatalf("sources.files = %v", cfg.Sources.Files)
	}
}

func TestAddressInUseExits1(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	code, _, stderr := runCLI(t, "serve", "--grpc-addr", lis.Addr().String(), "--http-addr", "127.0.0.1:0")
	if code != exitRuntime {
		t.Fatalf("exit = %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "grpc.address", "address already in use")
}

func TestMissingFilesSourceExits1(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing-here")
	code, _, stderr := runCLI(t, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--files", missing)
	if code != exitRuntime {
		t.Fatalf("exit = %d, want 1 (stderr %q)", code, stderr)
	}
	if !strings.Contains(stderr, "nothing-here") || strings.Contains(stderr, "goroutine ") {
		t.Fatalf("stderr %q should name the path, without a stack trace", stderr)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "mcpbridge ") {
		t.Fatalf("version: exit %d, %q", code, stdout)
	}
}

// buildBinary builds the real binary once per test that needs a process of its own.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpbridge")
	out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var servingLine = regexp.MustCompile(`msg="mcpbridge serving".* grpc=(\S+) http=(\S+)`)

// The user's first experience: serve the examples, become ready, stop cleanly on SIGTERM.
func TestServeExamplesBecomesReadyAndStopsOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--files", "../../examples")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var httpAddr string
	var logged []string
	deadline := time.After(30 * time.Second)
	for httpAddr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("process ended before serving: %v", logged)
			}
			logged = append(logged, l)
			if m := servingLine.FindStringSubmatch(l); m != nil {
				httpAddr = m[2]
			}
		case <-deadline:
			t.Fatalf("no serving line in 30s: %v", logged)
		}
	}
	waitStatus(t, "http://"+httpAddr+"/readyz", http.StatusOK, 30*time.Second)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { // drain the rest so the process never blocks on a full pipe
		for range lines {
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop within 20s of SIGTERM")
	}
}

// waitStatus polls an HTTP endpoint until it answers the wanted status: readiness is an HTTP
// contract, and asking it is what a probe does.
func waitStatus(t *testing.T, url string, want int, timeout time.Duration) {
	t.Helper()
	end := time.Now().Add(timeout)
	var last string
	for time.Now().Before(end) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
			last = resp.Status + " " + string(body)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer %d within %s; last: %s", url, want, timeout, last)
}

func TestConfigFileListsAndMaps(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte(`
sources:
  upstreams:
    - address: 127.0.0.1:9901
      tls: {ca_file: ca.pem, server_name: producer.example}
      keepalive_time: 30s
downstreams:
  - address: 127.0.0.1:9902
sink:
  node_annotations: {cluster: east}
  expiry: 2m
`), 0o600)
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	fs.Parse([]string{"--config", file})
	cfg, err := loadConfig(fs)
	if err != nil {
		t.Fatal(err)
	}
	up := cfg.Sources.Upstreams
	if len(up) != 1 || up[0].Address != "127.0.0.1:9901" || up[0].TLS == nil || up[0].TLS.ServerName != "producer.example" || up[0].KeepaliveTime != 30*time.Second {
		t.Fatalf("upstreams = %+v", up)
	}
	if len(cfg.Downstreams) != 1 || cfg.Sink.NodeAnnotations["cluster"] != "east" || cfg.Sink.Expiry != 2*time.Minute {
		t.Fatalf("downstreams %+v, sink %+v", cfg.Downstreams, cfg.Sink)
	}
	// --upstream replaces the file's list.
	fs2 := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs2)
	fs2.Parse([]string{"--config", file, "--upstream", "127.0.0.1:7000", "--upstream", "127.0.0.1:7001"})
	cfg, err = loadConfig(fs2)
	if err != nil || len(cfg.Sources.Upstreams) != 2 || cfg.Sources.Upstreams[1].Address != "127.0.0.1:7001" {
		t.Fatalf("--upstream: %+v %v", cfg.Sources.Upstreams, err)
	}
	code, _, stderr := runCLI(t, "serve", "--upstream", "nope")
	if code != exitUsage || !strings.Contains(stderr, "--upstream") {
		t.Fatalf("bad --upstream: exit %d, %q", code, stderr)
	}
}

// Every command but version shows examples in its -h, as kubectl's and istioctl's do.
func TestEveryCommandHasExamples(t *testing.T) {
	root := newRootCommand(io.Discard, io.Discard)
	for _, c := range root.Commands() {
		if c.Name() == "version" || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if !strings.Contains(c.Example, "mcpbridge "+c.Name()) {
			t.Errorf("%s -h shows no example of it: %q", c.Name(), c.Example)
		}
	}
}
