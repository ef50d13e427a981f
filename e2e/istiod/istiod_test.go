//go:build e2e_istiod

package istiod

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/internal/certtest"
	"github.com/mcpbridge/mcpbridge/internal/freeport"
)

var (
	istiodBin  = flag.String("istiod", "", "pilot-discovery to run (make e2e-istiod builds the pinned one)")
	kubeapiBin = flag.String("kubeapi", "", "the kubeapi command of e2e/istiod/kubeapi (make e2e-istiod builds it)")
)

const (
	clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	routeType   = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"

	// The proxy's node, as a sidecar injected into namespace default would name itself.
	proxyNode = "sidecar~127.0.0.1~test.default~default.svc.cluster.local"
	// istiod's pod name: its stream to the bridge carries it in its node ID
	// (sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local).
	istiodPod = "istiod-e2e"

	// How long istiod and the proxy may take to follow a change. The budget is generous for a
	// loaded 2-core CI machine; the timings the test logs are what it measures.
	propagation = 30 * time.Second
)

// The mesh the bridge serves from files: one of each kind istiod turns into a proxy's config,
// or at least stores. shop/api is an external HTTP service with a subset and a route timeout;
// its endpoint carries the subset's label, since istiod leaves out a DNS subset cluster that
// selects no endpoint.
const (
	serviceEntryAPI = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
  endpoints: [{address: api-v1.example.com, labels: {version: v1}}]
`
	destinationRuleAPI = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: shop}
spec:
  host: api.example.com
  subsets: [{name: v1, labels: {version: v1}}]
`
	policies = `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec:
  mtls: {mode: PERMISSIVE}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-get, namespace: shop}
spec:
  rules: [{to: [{operation: {methods: [GET]}}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  jwtRules: [{issuer: "https://issuer.example.com", jwksUri: "https://issuer.example.com/jwks"}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [api.example.com]}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: shop}
spec:
  address: 10.0.0.5
  labels: {app: legacy}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging: [{providers: [{name: envoy}]}]
---
apiVersion: networking.istio.io/v1beta1
kind: ProxyConfig
metadata: {name: shop-proxies, namespace: shop}
spec:
  concurrency: 2
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: headers, namespace: shop}
spec:
  url: oci://registry.example.com/headers:1.0
  phase: STATS
`
)

func virtualServiceAPI(timeout, subset string) string {
	dest := "{host: api.example.com, port: {number: 80}}"
	if subset != "" {
		dest = fmt.Sprintf("{host: api.example.com, subset: %s, port: {number: 80}}", subset)
	}
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  http: [{timeout: %s, route: [{destination: %s}]}]
`, timeout, dest)
}

func serviceEntry(name, host string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: shop}
spec:
  hosts: [%s]
  location: MESH_EXTERNAL
  ports: [{number: %d, name: http, protocol: HTTP}]
  resolution: DNS
`, name, host, port)
}

func yamlDocs(docs ...string) string { return strings.Join(docs, "---\n") }

// TestIstiodFollowsTheBridge runs a real istiod whose only config source is a real bridge
// (MeshConfig configSources: [{address: xds://...}]), and a proxy connected to that istiod.
// Each step logs how long it took; the steps run in order on the same processes.
func TestIstiodFollowsTheBridge(t *testing.T) {
	if *istiodBin == "" || *kubeapiBin == "" {
		t.Fatal("-istiod and -kubeapi are required: run make e2e-istiod")
	}
	e := setup(t, false)

	var results []string
	step := func(name string, f func(t *testing.T)) {
		start := time.Now()
		ok := t.Run(name, f)
		r := "PASS"
		if !ok {
			r = "FAIL"
		}
		results = append(results, fmt.Sprintf("%-4s %-40s %6.1fs", r, name, time.Since(start).Seconds()))
		if !ok {
			t.FailNow()
		}
	}
	t.Cleanup(func() { t.Logf("results:\n%s", strings.Join(results, "\n")) })

	step("configz equals the bridge's store", func(t *testing.T) {
		e.waitConfigzMatchesBridge(t)
	})

	p := e.connectProxy(t)
	step("proxy gets clusters and routes", func(t *testing.T) {
		d := eventually(t, "the proxy's clusters and route", propagation, func() error {
			return p.expect(
				[]string{"outbound|80||api.example.com", "outbound|80|v1|api.example.com"},
				routeTo{"api.example.com", "outbound|80|v1|api.example.com", 5 * time.Second})
		})
		t.Logf("the proxy held them %s after it connected", d.Round(time.Millisecond))
	})

	step("an edit propagates", func(t *testing.T) {
		e.write(t, "api.yaml", yamlDocs(serviceEntryAPI, virtualServiceAPI("7s", "v1"), destinationRuleAPI))
		start := time.Now()
		e.waitConfigzMatchesBridge(t)
		eventually(t, "istiod's VirtualService shop/api with timeout 7s", propagation, func() error {
			return e.configzHas("VirtualService", "shop/api", `"timeout":"7s"`)
		})
		t.Logf("istiod had it %s after the file was written", time.Since(start).Round(time.Millisecond))
		eventually(t, "the proxy's route with timeout 7s", propagation, func() error {
			return p.expect(nil, routeTo{"api.example.com", "outbound|80|v1|api.example.com", 7 * time.Second})
		})
		t.Logf("the proxy had it %s after the file was written", time.Since(start).Round(time.Millisecond))
	})

	step("a new file propagates", func(t *testing.T) {
		e.write(t, "db.yaml", serviceEntry("db", "db.example.com", 8080))
		start := time.Now()
		e.waitConfigzMatchesBridge(t)
		eventually(t, "the proxy's cluster for db.example.com", propagation, func() error {
			return p.expect([]string{"outbound|8080||db.example.com"}, routeTo{})
		})
		t.Logf("the proxy had it %s after the file was written", time.Since(start).Round(time.Millisecond))
	})

	step("deletions propagate", func(t *testing.T) {
		// A file removed (db.yaml), and a resource removed from a file (the DestinationRule,
		// with the route's subset).
		e.remove(t, "db.yaml")
		e.write(t, "api.yaml", yamlDocs(serviceEntryAPI, virtualServiceAPI("7s", "")))
		start := time.Now()
		e.waitConfigzMatchesBridge(t)
		if err := e.configzHas("DestinationRule", "shop/api", ""); err == nil {
			t.Fatal("istiod still has DestinationRule shop/api")
		}
		eventually(t, "the proxy without db.example.com and the v1 subset", propagation, func() error {
			return p.expectGone([]string{"outbound|8080||db.example.com", "outbound|80|v1|api.example.com"},
				routeTo{"api.example.com", "outbound|80||api.example.com", 7 * time.Second})
		})
		t.Logf("the proxy had it %s after the files changed", time.Since(start).Round(time.Millisecond))
	})

	// Phase A: the bridge pings every second (grpc.keepalive.time 1s), so istiod's client sees
	// traffic and never needs to ping.
	step("idle stream survives the bridge's keepalive pings", func(t *testing.T) {
		e.idle(t, 12*time.Second)
	})

	step("a bridge restart is followed", func(t *testing.T) {
		before := e.bridgeStream(t)
		e.stopBridge(t)
		// While the bridge is down, the files change: on its return the bridge's full state
		// must replace what istiod held, including a removal.
		e.write(t, "ratings.yaml", serviceEntry("ratings", "ratings.example.com", 9080))
		e.write(t, "policies.yaml", strings.Split(policies, "---\n")[0]) // PeerAuthentication only
		time.Sleep(2 * time.Second)
		// Phase B of the keepalive check: the bridge no longer pings (time 1h), so istiod's
		// client pings it every 10s, which grpc.keepalive.min_ping_interval (5s) must accept.
		e.keepalive = keepalive{minPing: "5s", time: "1h", timeout: "10s"}
		start := time.Now()
		e.startBridge(t)
		after := eventuallyValue(t, "istiod's stream to the restarted bridge", 2*time.Minute, func() (clientInfo, error) {
			c, err := e.istiodStream()
			if err == nil && c.ID == before.ID && c.Connected.Equal(before.Connected) {
				err = fmt.Errorf("still the old stream")
			}
			return c, err
		})
		t.Logf("istiod subscribed again %s after the bridge started (%d types)", time.Since(start).Round(time.Millisecond), len(after.Subscriptions))
		e.waitConfigzMatchesBridge(t)
		t.Logf("istiod's config equalled the bridge's %s after the bridge started", time.Since(start).Round(time.Millisecond))
		eventually(t, "the proxy's cluster for ratings.example.com", propagation, func() error {
			return p.expect([]string{"outbound|9080||ratings.example.com", "outbound|80||api.example.com"}, routeTo{"api.example.com", "outbound|80||api.example.com", 7 * time.Second})
		})

		e.write(t, "api.yaml", yamlDocs(serviceEntryAPI, virtualServiceAPI("9s", "")))
		edit := time.Now()
		e.waitConfigzMatchesBridge(t)
		eventually(t, "the proxy's route with timeout 9s", propagation, func() error {
			return p.expect(nil, routeTo{"api.example.com", "outbound|80||api.example.com", 9 * time.Second})
		})
		t.Logf("an edit after the restart reached the proxy in %s", time.Since(edit).Round(time.Millisecond))
	})

	step("idle stream survives istiod's keepalive pings", func(t *testing.T) {
		// istiod pings every 10s; gRPC's default enforcement (one ping per 5 minutes, two
		// strikes allowed) answers its fourth with GOAWAY too_many_pings, at about 40s: 45s
		// covers it.
		e.idle(t, 45*time.Second)
	})
}

// TestIstiodOverTLS is the secured recipe of docs/istiod.md: the bridge serves TLS and has
// authz rules, istiod's config source has tlsSettings (mode SIMPLE). istiod must verify the
// bridge's certificate, be served as an unauthenticated consumer, and follow an edit.
func TestIstiodOverTLS(t *testing.T) {
	if *istiodBin == "" || *kubeapiBin == "" {
		t.Fatal("-istiod and -kubeapi are required: run make e2e-istiod")
	}
	e := setup(t, true)
	e.waitConfigzMatchesBridge(t)
	var list struct {
		Clients []struct {
			Node     string `json:"node"`
			Identity string `json:"identity"`
		} `json:"clients"`
	}
	if err := getJSON("http://"+e.bridgeHTTP+"/debug/clients", &list); err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Clients {
		t.Logf("bridge client %s: identity %q", c.Node, c.Identity)
		// istiod's config source client presents no certificate: under authz rules the
		// bridge knows it as "unauthenticated".
		if strings.Contains(c.Node, istiodPod) && c.Identity != "unauthenticated" {
			t.Errorf("istiod's identity is %q, want unauthenticated", c.Identity)
		}
	}
	e.write(t, "db.yaml", serviceEntry("db", "db.example.com", 8080))
	start := time.Now()
	e.waitConfigzMatchesBridge(t)
	t.Logf("an edit reached istiod over TLS in %s", time.Since(start).Round(time.Millisecond))

	// What istiod subscribes to, and what it acknowledges: every kind of its config schema, and
	// core/v1alpha1/MeshConfig, which istiod reads (pkg/adsc) but never ACKs when it is not
	// empty, and does not use: its mesh config comes from --meshConfig.
	eventually(t, "istiod's ACK of every Istio kind", propagation, func() error {
		c, err := e.istiodStream()
		if err != nil {
			return err
		}
		var lines, unacked []string
		for _, sub := range c.Subscriptions {
			lines = append(lines, fmt.Sprintf("%s -> %q acked=%v", sub.Type, sub.Collection, sub.Acked))
			if !sub.Acked && sub.Type != "core/v1alpha1/MeshConfig" {
				unacked = append(unacked, sub.Type)
			}
		}
		if len(unacked) > 0 {
			return fmt.Errorf("not acknowledged: %v", unacked)
		}
		t.Logf("istiod's %d subscriptions:\n%s", len(lines), strings.Join(lines, "\n"))
		return nil
	})
}

// env is the running mesh: the Kubernetes API istiod needs, the bridge, istiod.
type env struct {
	// top is the whole test: the processes live as long as it does, not as one step.
	top                 *testing.T
	dir, cfgDir, logDir string

	bridgeGRPC, bridgeHTTP string
	istiodGRPC, istiodHTTP string
	keepalive              keepalive
	tls                    *tlsFiles // nil: plaintext on loopback

	bridgeBin string
	bridge    *proc
	istiod    *proc
}

type keepalive struct{ minPing, time, timeout string }

// tlsFiles are the bridge's certificate, key and client CA, and the CA istiod trusts.
type tlsFiles struct {
	cert, key, clientCA string
	caPEM               []byte
}

func newTLS(t *testing.T, dir string) *tlsFiles {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t, "mesh-ca")
	server := ca.Server(t, func(c *x509.Certificate) { c.DNSNames = append(c.DNSNames, bridgeSAN) })
	f := &tlsFiles{caPEM: ca.PEM, clientCA: ca.Write(t, dir, "ca")}
	f.cert, f.key = server.Write(t, dir, "mcpbridge")
	return f
}

// meshConfig is istiod's MeshConfig: the bridge as its only config source.
func (e *env) meshConfig() string {
	m := "configSources:\n- address: xds://" + e.bridgeGRPC + "\n"
	if e.tls != nil {
		// SIMPLE is the only mode istiod implements for a config source: it checks the
		// server's certificate (caCertificates is the PEM itself, not a file) and presents none.
		m += "  tlsSettings:\n    mode: SIMPLE\n    sni: " + bridgeSAN + "\n    subjectAltNames: [" + bridgeSAN + "]\n    caCertificates: |\n"
		for _, line := range strings.Split(strings.TrimSpace(string(e.tls.caPEM)), "\n") {
			m += "      " + line + "\n"
		}
	}
	return m
}

// bridgeSAN is the DNS name in the bridge's certificate, as a Service's would be; istiod
// checks it (tlsSettings.subjectAltNames) and sends it as SNI, while dialling 127.0.0.1.
const bridgeSAN = "mcpbridge.istio-system.svc"

// setup starts the Kubernetes API, the bridge and istiod. With tlsOn, the bridge serves TLS
// with client certificates asked for but not required (client_auth: request) and authz rules,
// and istiod verifies the bridge's certificate: the configuration of docs/istiod.md.
func setup(t *testing.T, tlsOn bool) *env {
	dir := t.TempDir()
	addrs := freeport.Addrs(t, 4)
	e := &env{
		top:        t,
		dir:        dir,
		cfgDir:     filepath.Join(dir, "config"),
		logDir:     filepath.Join(dir, "logs"),
		bridgeGRPC: addrs[0], bridgeHTTP: addrs[1],
		istiodGRPC: addrs[2], istiodHTTP: addrs[3],
		keepalive: keepalive{minPing: "5s", time: "1s", timeout: "5s"},
	}
	for _, d := range []string{e.cfgDir, e.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.write(t, "api.yaml", yamlDocs(serviceEntryAPI, virtualServiceAPI("5s", "v1"), destinationRuleAPI))
	e.write(t, "policies.yaml", policies)
	if tlsOn {
		e.tls = newTLS(t, filepath.Join(dir, "certs"))
	}

	// The bridge is built from this tree, so that the test always runs the code under test,
	// and with the race detector: a race under a real istiod ends it with status 66, which
	// stopBridge reports.
	e.bridgeBin = filepath.Join(dir, "mcpbridge")
	start := time.Now()
	if out, err := exec.Command("go", "build", "-race", "-o", e.bridgeBin, "github.com/mcpbridge/mcpbridge/cmd/mcpbridge").CombinedOutput(); err != nil {
		t.Fatalf("go build mcpbridge: %v\n%s", err, out)
	}
	t.Logf("built mcpbridge in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	kubeDir := filepath.Join(dir, "kube")
	kube := startProc(t, e.logDir, "kubeapi", nil, *kubeapiBin, "-dir", kubeDir, "-port", port(freeAddr(t)))
	kubeconfig := filepath.Join(kubeDir, "kubeconfig")
	eventually(t, "the Kubernetes API server", 3*time.Minute, func() error {
		if kube.exited() {
			return fmt.Errorf("kubeapi exited")
		}
		_, err := os.Stat(kubeconfig)
		return err
	})
	t.Logf("Kubernetes API server ready in %s", time.Since(start).Round(time.Millisecond))

	e.startBridge(t)

	mesh := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(mesh, []byte(e.meshConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	e.istiod = startProc(t, e.logDir, "istiod", istiodEnv(), *istiodBin, istiodArgs(e, mesh, kubeconfig)...)
	eventually(t, "istiod's /ready", 3*time.Minute, func() error {
		if e.istiod.exited() {
			return fmt.Errorf("istiod exited")
		}
		return httpOK("http://" + e.istiodHTTP + "/ready")
	})
	t.Logf("istiod ready in %s", time.Since(start).Round(time.Millisecond))
	return e
}

// istiodArgs are pilot-discovery's flags: every port on loopback, the bridge as the only
// config source (the mesh file), the Kubernetes API above for what istiod insists on reading
// from a cluster (namespaces, Services: none here), no webhook server.
func istiodArgs(e *env, mesh, kubeconfig string) []string {
	return []string{"discovery",
		"--meshConfig", mesh,
		"--networksConfig", filepath.Join(e.dir, "meshNetworks"), // absent: no networks
		"--kubeconfig", kubeconfig,
		"--registries", "Kubernetes",
		"--namespace", "istio-system",
		"--domain", "cluster.local",
		"--grpcAddr", e.istiodGRPC,
		"--httpAddr", e.istiodHTTP,
		"--monitoringAddr", "127.0.0.1:" + port(freeAddrNoTest()),
		"--ctrlz_port", port(freeAddrNoTest()),
		"--secureGRPCAddr", "", // 15012 serves proxies with istiod's certificates: not needed here
		"--httpsAddr", "", // no webhook server
		// grpc-go's shortest keepalive: istiod's client pings an idle connection this often.
		"--keepaliveInterval", "10s",
		"--log_output_level", "default:info,adsc:info",
	}
}

func istiodEnv() []string {
	return []string{
		"POD_NAME=" + istiodPod,
		"POD_NAMESPACE=istio-system",
		// No webhooks to patch: no injector, no validation.
		"INJECTION_WEBHOOK_CONFIG_NAME=",
		"VALIDATION_WEBHOOK_CONFIG_NAME=",
		"PILOT_ENABLE_GATEWAY_API=false",
	}
}

func (e *env) startBridge(t *testing.T) {
	t.Helper()
	cfg := fmt.Sprintf(`grpc:
  address: %s
  keepalive: {min_ping_interval: %s, time: %s, timeout: %s}
http:
  address: %s
sources:
  files: [%s]
log:
  level: debug
`, e.bridgeGRPC, e.keepalive.minPing, e.keepalive.time, e.keepalive.timeout, e.bridgeHTTP, e.cfgDir)
	if e.tls != nil {
		// Producers would present certificates of the mesh CA; istiod presents none, so it is
		// "unauthenticated", and only a rule for that identity lets it read.
		cfg = strings.Replace(cfg, "grpc:\n", fmt.Sprintf(`grpc:
  tls: {cert_file: %s, key_file: %s, client_ca_file: %s, client_auth: request}
`, e.tls.cert, e.tls.key, e.tls.clientCA), 1)
		cfg += `authz:
  rules:
    - identity: unauthenticated
      consume: {collections: ["*"], namespaces: ["*"]}
    - identity: spiffe://cluster.local/ns/istio-system/sa/config-producer
      produce: {collections: ["*"], namespaces: ["*"]}
`
	}
	path := filepath.Join(e.dir, "bridge.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e.bridge = startProc(e.top, e.logDir, "mcpbridge", nil, e.bridgeBin, "serve", "--config", path)
	eventually(t, "the bridge's /readyz", 30*time.Second, func() error {
		if e.bridge.exited() {
			return fmt.Errorf("mcpbridge exited")
		}
		return httpOK("http://" + e.bridgeHTTP + "/readyz")
	})
}

func (e *env) stopBridge(t *testing.T) {
	t.Helper()
	e.bridge.stop(t)
	if code := e.bridge.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("mcpbridge exited %d after SIGTERM", code)
	}
}

func (e *env) write(t *testing.T, name, content string) {
	t.Helper()
	// Written aside and renamed, so the bridge never reads half a file. The temporary name
	// does not end in .yaml: the file source does not read it.
	tmp := filepath.Join(e.cfgDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.cfgDir, name)); err != nil {
		t.Fatal(err)
	}
}

func (e *env) remove(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(e.cfgDir, name)); err != nil {
		t.Fatal(err)
	}
}

// bridgeConfig is what the bridge serves of the kinds istiod reads: "Kind namespace/name".
func (e *env) bridgeConfig() ([]string, error) {
	var list struct {
		Collections []struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Count int    `json:"count"`
		} `json:"collections"`
	}
	if err := getJSON("http://"+e.bridgeHTTP+"/debug/collections", &list); err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list.Collections {
		// The Istio kinds; not the MeshConfig, nor the Envoy resources translated from them.
		if !strings.HasPrefix(c.Name, "istio/") || c.Count == 0 {
			continue
		}
		var coll struct {
			Resources []struct {
				Name string `json:"name"`
			} `json:"resources"`
		}
		if err := getJSON("http://"+e.bridgeHTTP+"/debug/collections/"+c.Name, &coll); err != nil {
			return nil, err
		}
		for _, r := range coll.Resources {
			out = append(out, c.Kind+" "+r.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

type configzEntry struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

func (e *env) configz() ([]configzEntry, error) {
	var list []configzEntry
	err := getJSON("http://"+e.istiodHTTP+"/debug/configz", &list)
	return list, err
}

// istiodConfig is istiod's config store (its /debug/configz) as "Kind namespace/name".
func (e *env) istiodConfig() ([]string, error) {
	list, err := e.configz()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list {
		out = append(out, c.Kind+" "+c.Metadata.Namespace+"/"+c.Metadata.Name)
	}
	slices.Sort(out)
	return out, nil
}

// configzHas reports whether istiod holds kind ns/name with a spec containing want.
func (e *env) configzHas(kind, name, want string) error {
	list, err := e.configz()
	if err != nil {
		return err
	}
	for _, c := range list {
		if c.Kind == kind && c.Metadata.Namespace+"/"+c.Metadata.Name == name {
			if !bytes.Contains(c.Spec, []byte(want)) {
				return fmt.Errorf("%s %s: spec %s does not contain %s", kind, name, c.Spec, want)
			}
			return nil
		}
	}
	return fmt.Errorf("istiod has no %s %s", kind, name)
}

// waitConfigzMatchesBridge waits until istiod's config store lists exactly what the bridge
// serves, once the bridge has loaded the files as they are now.
func (e *env) waitConfigzMatchesBridge(t *testing.T) {
	t.Helper()
	var last []string
	d := eventually(t, "istiod's /debug/configz to equal the bridge's collections", propagation, func() error {
		want, err := e.bridgeConfig()
		if err != nil {
			return err
		}
		if want2 := filesConfig(t, e.cfgDir); !slices.Equal(want, want2) {
			return fmt.Errorf("the bridge has not loaded the files yet: bridge %v, files %v", want, want2)
		}
		got, err := e.istiodConfig()
		if err != nil {
			return err
		}
		last = got
		if !slices.Equal(got, want) {
			return fmt.Errorf("istiod %v\nbridge %v", got, want)
		}
		return nil
	})
	t.Logf("istiod's config equals the bridge's (%d resources) after %s: %s", len(last), d.Round(time.Millisecond), strings.Join(last, ", "))
}

// filesConfig is what the files hold, "Kind namespace/name", read with a plain YAML scan:
// the reference the bridge and istiod are compared against.
func filesConfig(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "---\n") {
			var kind, name, ns string
			for _, line := range strings.Split(doc, "\n") {
				if k, ok := strings.CutPrefix(line, "kind: "); ok {
					kind = k
				}
				if m, ok := strings.CutPrefix(line, "metadata: {name: "); ok {
					name, ns, _ = strings.Cut(strings.TrimSuffix(m, "}"), ", namespace: ")
				}
			}
			if kind != "" {
				out = append(out, kind+" "+ns+"/"+name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// clientInfo is one stream in the bridge's /debug/clients.
type clientInfo struct {
	ID            uint64    `json:"id"`
	Protocol      string    `json:"protocol"`
	Node          string    `json:"node"`
	Connected     time.Time `json:"connected"`
	Subscriptions []struct {
		Type       string `json:"type"`
		Collection string `json:"collection"`
		Acked      bool   `json:"acked"`
	} `json:"subscriptions"`
}

// istiodStream is istiod's stream to the bridge, from the bridge's /debug/clients.
func (e *env) istiodStream() (clientInfo, error) {
	var list struct {
		Clients []clientInfo `json:"clients"`
	}
	if err := getJSON("http://"+e.bridgeHTTP+"/debug/clients", &list); err != nil {
		return clientInfo{}, err
	}
	var found []clientInfo
	for _, c := range list.Clients {
		if strings.Contains(c.Node, "~"+istiodPod+".istio-system~") {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		return clientInfo{}, fmt.Errorf("want one stream of istiod, have %d: %+v", len(found), list.Clients)
	}
	return found[0], nil
}

func (e *env) bridgeStream(t *testing.T) clientInfo {
	t.Helper()
	c, err := e.istiodStream()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// idle leaves istiod's stream to the bridge without traffic for d, then checks that it is the
// same stream (same id, same start), that the bridge counts one xDS stream, and that istiod
// logged no closed connection and no GOAWAY too_many_pings.
func (e *env) idle(t *testing.T, d time.Duration) {
	before := e.bridgeStream(t)
	closedBefore := strings.Count(e.istiod.logText(), "connection closed with err")
	t.Logf("istiod's stream %d (%s, %d types) idle for %s with grpc.keepalive %+v", before.ID, before.Protocol, len(before.Subscriptions), d, e.keepalive)
	time.Sleep(d)
	after := e.bridgeStream(t)
	if after.ID != before.ID || !after.Connected.Equal(before.Connected) {
		t.Fatalf("istiod's stream was replaced: before %d since %s, after %d since %s", before.ID, before.Connected, after.ID, after.Connected)
	}
	if n, err := e.metric(`mcpbridge_streams{protocol="xds-sotw",role="source"}`); err != nil || n != "1" {
		t.Fatalf("mcpbridge_streams{protocol=\"xds-sotw\"}: %q, %v; want 1", n, err)
	}
	logs := e.istiod.logText()
	if strings.Contains(logs, "too_many_pings") {
		t.Fatal("istiod's log has too_many_pings")
	}
	if closed := strings.Count(logs, "connection closed with err"); closed != closedBefore {
		t.Fatalf("istiod logged %d closed connections to the bridge while idle", closed-closedBefore)
	}
	t.Logf("stream %d still open after %s; mcpbridge_streams{protocol=\"xds-sotw\"} 1; no too_many_pings", after.ID, d)
}

func (e *env) metric(series string) (string, error) {
	resp, err := http.Get("http://" + e.bridgeHTTP + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no series %s", series)
}

// proxy is an Envoy-like xDS client of istiod: state of the world on ADS, ACKing every
// response, holding the latest clusters and the route configuration "80".
type proxy struct {
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]

	mu       sync.Mutex
	clusters map[string]*cluster.Cluster
	routes   map[string]*route.RouteConfiguration
	err      error
}

func (e *env) connectProxy(t *testing.T) *proxy {
	conn, err := grpc.NewClient(e.istiodGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{stream: stream, clusters: map[string]*cluster.Cluster{}, routes: map[string]*route.RouteConfiguration{}}
	meta, err := structpb.NewStruct(map[string]any{
		"NAMESPACE":       "default",
		"CLUSTER_ID":      "Kubernetes",
		"SERVICE_ACCOUNT": "default",
		"LABELS":          map[string]any{"app": "test"},
		// What Istio's own test clients (pkg/adsc) send: newer than any release, every feature on.
		"ISTIO_VERSION": "65536.65536.65536",
	})
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: proxyNode, Metadata: meta}
	for _, req := range []*discovery.DiscoveryRequest{
		{Node: node, TypeUrl: clusterType},
		{TypeUrl: routeType, ResourceNames: []string{"80"}},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	go p.receive()
	return p
}

func (p *proxy) receive() {
	for {
		resp, err := p.stream.Recv()
		if err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return
		}
		p.mu.Lock()
		var names []string
		switch resp.TypeUrl {
		case clusterType:
			p.clusters = map[string]*cluster.Cluster{}
			for _, a := range resp.Resources {
				c := &cluster.Cluster{}
				if err := a.UnmarshalTo(c); err == nil {
					p.clusters[c.Name] = c
				}
			}
		case routeType:
			names = []string{"80"}
			p.routes = map[string]*route.RouteConfiguration{}
			for _, a := range resp.Resources {
				r := &route.RouteConfiguration{}
				if err := a.UnmarshalTo(r); err == nil {
					p.routes[r.Name] = r
				}
			}
		}
		p.mu.Unlock()
		ack := &discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce, ResourceNames: names}
		if err := p.stream.Send(ack); err != nil {
			return
		}
	}
}

// routeTo is a route of route configuration "80": the virtual host of host sends to cluster
// with timeout. The zero routeTo checks nothing.
type routeTo struct {
	host    string
	cluster string
	timeout time.Duration
}

func (p *proxy) expect(clusters []string, r routeTo) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("the proxy's stream ended: %v", p.err)
	}
	for _, c := range clusters {
		if _, ok := p.clusters[c]; !ok {
			return fmt.Errorf("no cluster %s; have %v", c, mapKeys(p.clusters))
		}
	}
	if r.host == "" {
		return nil
	}
	rc := p.routes["80"]
	if rc == nil {
		return fmt.Errorf("no route configuration 80")
	}
	for _, vh := range rc.VirtualHosts {
		if !slices.Contains(vh.Domains, r.host) {
			continue
		}
		for _, rt := range vh.Routes {
			a := rt.GetRoute()
			if a.GetCluster() == r.cluster && a.GetTimeout().AsDuration() == r.timeout {
				return nil
			}
		}
		return fmt.Errorf("virtual host %s: no route to %s with timeout %s: %v", vh.Name, r.cluster, r.timeout, vh.Routes)
	}
	return fmt.Errorf("route configuration 80 has no virtual host for %s", r.host)
}

func (p *proxy) expectGone(gone []string, r routeTo) error {
	if err := p.expect(nil, r); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range gone {
		if _, ok := p.clusters[c]; ok {
			return fmt.Errorf("cluster %s still there", c)
		}
	}
	return nil
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// proc is a process of the test, its output in logDir/name.log. It is stopped with SIGTERM
// when the test ends; if the test failed, the end of its log is printed.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startProc(t *testing.T, logDir, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "==== %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(logDir)
	// KUBECONFIG and the like from the caller's shell must not reach istiod: it gets its
	// Kubernetes API from --kubeconfig only.
	cmd.Env = append(withoutKube(os.Environ()), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("---- end of %s's log (%s)\n%s", name, logPath, tail(p.logText(), 60))
		}
	})
	return p
}

func withoutKube(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "KUBERNETES_")
	})
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop(t *testing.T) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM; killed", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func eventually(t *testing.T, what string, timeout time.Duration, f func() error) time.Duration {
	t.Helper()
	_, d := eventuallyValueD(t, what, timeout, func() (struct{}, error) { return struct{}{}, f() })
	return d
}

func eventuallyValue[T any](t *testing.T, what string, timeout time.Duration, f func() (T, error)) T {
	t.Helper()
	v, _ := eventuallyValueD(t, what, timeout, f)
	return v
}

func eventuallyValueD[T any](t *testing.T, what string, timeout time.Duration, f func() (T, error)) (T, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		v, err := f()
		if err == nil {
			return v, time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpOK(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, v)
}

// freeAddr is a loopback address with a port free now. Another process could take it before
// its user binds it; on a test machine that is rare enough.
func freeAddr(t *testing.T) string {
	t.Helper()
	a := freeAddrNoTest()
	if a == "" {
		t.Fatal("no free port")
	}
	return a
}

func freeAddrNoTest() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
