package xdsv2

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	_ "google.golang.org/grpc/xds" // the xds:/// resolver and balancers of grpc-go 1.34
)

var bridgeBin = flag.String("bridge", "", "the mcpbridge binary; empty: built from the repository for this run")

// clientEnv, set, makes the test binary the xDS client instead of the test: grpc-go 1.34 reads
// GRPC_XDS_BOOTSTRAP once, when its packages initialize, so the client runs in a process of
// its own, started with the bootstrap file the test wrote.
const clientEnv = "MCPBRIDGE_E2E_XDSV2_CLIENT"

const (
	host    = "echo.e2e.svc.cluster.local"
	port    = 8080
	service = "mcpbridge-v2-e2e" // the health service only the test's backend serves
)

func TestMain(m *testing.M) {
	if target := os.Getenv(clientEnv); target != "" {
		os.Exit(runClient(target))
	}
	os.Exit(m.Run())
}

// TestGRPC134XDSClientOverV2 runs grpc-go 1.34's xDS client, which speaks xDS v2 when its
// bootstrap's server does not announce "xds_v3", against a real bridge process: it resolves
// xds:///HOST:PORT through the bridge's v2 LDS, RDS, CDS and EDS, and calls the backend the
// ServiceEntry names, through a route that matches a header (the v3 string_match the bridge
// rewrites to v2's exact_match; grpc-go 1.34 refuses a header matcher it cannot read).
func TestGRPC134XDSClientOverV2(t *testing.T) {
	dir := t.TempDir()
	backend := startBackend(t)
	cfgDir := filepath.Join(dir, "config")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(cfgDir, "echo.yaml"), mesh(backend))
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	bridge := startBridge(t, dir, grpcAddr, httpAddr, cfgDir)

	bootstrap := filepath.Join(dir, "bootstrap.json")
	write(t, bootstrap, fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}]}],
  "node": {"id": "grpc134~127.0.0.1~client.e2e~e2e.svc.cluster.local", "metadata": {"GENERATOR": "grpc"}}
}`, grpcAddr))
	client := exec.Command(os.Args[0], "-test.run=^$")
	client.Env = append(os.Environ(), clientEnv+"=xds:///"+fmt.Sprintf("%s:%d", host, port), "GRPC_XDS_BOOTSTRAP="+bootstrap, "GRPC_GO_LOG_SEVERITY_LEVEL=warning")
	stdin, _ := client.StdinPipe()
	stdout, _ := client.StdoutPipe()
	var stderr strings.Builder
	client.Stderr = &stderr
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "SERVING" {
		stdin.Close()
		client.Wait()
		t.Fatalf("the grpc-go 1.34 client did not reach the backend: %q\nclient stderr:\n%s\nbridge log:\n%s", lines.Text(), stderr.String(), bridge.log())
	}

	// While its streams are open: the client spoke v2, for v2 types, and ACKed everything (its
	// last ACK may still be on its way).
	var problems []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		problems = v2ClientProblems(t, httpAddr)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	stdin.Close()
	if err := client.Wait(); err != nil {
		t.Fatalf("client: %v\n%s", err, stderr.String())
	}
}

// v2ClientProblems is what the bridge's /debug/clients shows wrong with the client's streams.
func v2ClientProblems(t *testing.T, httpAddr string) []string {
	var clients struct {
		Clients []struct {
			Protocol, Node string
			Subscriptions  []struct {
				Type     string
				Acked    bool
				LastNACK *struct{ Message string } `json:"last_nack"`
			}
		}
	}
	getJSON(t, "http://"+httpAddr+"/debug/clients", &clients)
	var problems []string
	types := map[string]bool{}
	for _, c := range clients.Clients {
		if c.Node != "grpc134~127.0.0.1~client.e2e~e2e.svc.cluster.local" {
			continue
		}
		if c.Protocol != "xds-v2-sotw" {
			problems = append(problems, fmt.Sprintf("the client's stream is %s, want xds-v2-sotw", c.Protocol))
		}
		for _, s := range c.Subscriptions {
			types[s.Type] = true
			if !s.Acked || s.LastNACK != nil {
				problems = append(problems, fmt.Sprintf("%s: acked %v, NACK %+v", s.Type, s.Acked, s.LastNACK))
			}
		}
	}
	for _, want := range []string{"Listener", "RouteConfiguration", "Cluster", "ClusterLoadAssignment"} {
		if !types["type.googleapis.com/envoy.api.v2."+want] {
			problems = append(problems, fmt.Sprintf("the client did not subscribe to v2 %s (subscriptions %v)", want, types))
		}
	}
	return problems
}

// runClient dials target with grpc-go 1.34's xDS resolver and checks the backend's health
// service with the header the route matches; it prints SERVING, and stays connected until
// stdin closes so that the test can look at its streams.
func runClient(target string) int {
	conn, err := grpc.Dial(target, grpc.WithInsecure())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-route", "v2")
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println(resp.GetStatus())
	io.Copy(io.Discard, os.Stdin)
	return 0
}

func startBackend(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus(service, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().(*net.TCPAddr).Port
}

// mesh is the ServiceEntry of the backend and a VirtualService whose one route matches a
// header; no DestinationRule: grpc-go 1.34 balances round robin only, and the cluster a
// proxyless client gets by default (GENERATOR=grpc) must be one it accepts.
func mesh(backendPort int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [%[1]s]
  ports:
  - {number: %[2]d, name: grpc, protocol: GRPC}
  resolution: STATIC
  endpoints:
  - address: 127.0.0.1
    ports: {grpc: %[3]d}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [%[1]s]
  http:
  - match:
    - headers: {x-route: {exact: v2}}
    timeout: 20s
    route:
    - destination: {host: %[1]s, port: {number: %[2]d}}
`, host, port, backendPort)
}

type bridgeProc struct{ logPath string }

func (b bridgeProc) log() string {
	data, _ := os.ReadFile(b.logPath)
	return string(data)
}

func startBridge(t *testing.T, dir, grpcAddr, httpAddr, cfgDir string) bridgeProc {
	t.Helper()
	bin := *bridgeBin
	if bin == "" {
		bin = filepath.Join(dir, "mcpbridge")
		build := exec.Command("go", "build", "-o", bin, "./cmd/mcpbridge")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build mcpbridge: %v\n%s", err, out)
		}
	}
	cfg := filepath.Join(dir, "bridge.yaml")
	write(t, cfg, fmt.Sprintf("grpc: {address: %q}\nhttp: {address: %q}\nsources: {files: [%q]}\nlog: {level: debug}\n", grpcAddr, httpAddr, cfgDir))
	logPath := filepath.Join(dir, "mcpbridge.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	b := bridgeProc{logPath: logPath}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("mcpbridge exited:\n%s", b.log())
		default:
		}
		if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return b
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("mcpbridge not ready within 30s:\n%s", b.log())
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
