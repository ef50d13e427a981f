package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/mcpbridge/mcpbridge/bridgetest"
	"github.com/mcpbridge/mcpbridge/translate"
)

const seXDSType = "networking.istio.io/v1alpha3/ServiceEntry"

// statusBridge serves two ServiceEntries (and the clusters translated from them) to a
// sidecar that ACKed its clusters and refused the ServiceEntries, and to an istiod that
// ACKed them.
func statusBridge(t *testing.T) *bridgetest.Bridge {
	t.Helper()
	b := bridgetest.Start(t)
	b.LoadYAML(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: shop}
spec: {hosts: [a.example.com], ports: [{number: 80, name: http, protocol: HTTP}], resolution: DNS}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b, namespace: shop}
spec: {hosts: [b.example.com], ports: [{number: 80, name: http, protocol: HTTP}], resolution: DNS}
`)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ads := discovery.NewAggregatedDiscoveryServiceClient(b.Dial(t))
	sidecar, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sidecar.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "sidecar-1"}, TypeUrl: translate.EnvoyClusterType})
	for {
		r, err := sidecar.Recv()
		if err != nil {
			t.Fatal(err)
		}
		sidecar.Send(&discovery.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
		outbound := 0 // the translation of both ServiceEntries, beside istiod's sidecar plumbing
		for _, a := range r.Resources {
			c := &clusterpb.Cluster{}
			if a.UnmarshalTo(c) == nil && strings.HasPrefix(c.GetName(), "outbound|") {
				outbound++
			}
		}
		if outbound == 2 {
			break
		}
	}
	sidecar.Send(&discovery.DiscoveryRequest{TypeUrl: seXDSType})
	r, err := sidecar.Recv()
	if err != nil {
		t.Fatal(err)
	}
	sidecar.Send(&discovery.DiscoveryRequest{TypeUrl: seXDSType, ResponseNonce: r.Nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "not for sidecars"}})
	istiod, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	istiod.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "istiod-1"}, TypeUrl: seXDSType})
	if r, err = istiod.Recv(); err != nil {
		t.Fatal(err)
	}
	istiod.Send(&discovery.DiscoveryRequest{TypeUrl: seXDSType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	b.WaitNACK(t, "sidecar-1", seXDSType)
	b.WaitSynced(t, "istiod-1", seXDSType)
	b.WaitSynced(t, "sidecar-1", translate.EnvoyClusterType)
	return b
}

// mcpbridge status prints a row per node, a column per type, as istioctl proxy-status does.
func TestStatusPrintsATableLikeProxyStatus(t *testing.T) {
	b := statusBridge(t)
	code, stdout, stderr := runCLI(t, "status", "--addr", b.GRPCAddr())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	want := [][]string{
		{"NAME", "CDS", "LDS", "EDS", "RDS", "ISTIO", "VERSION"},
		{"sidecar-1", "SYNCED", "-", "-", "-", "ERROR", b.Version(translate.EnvoyClusterType)},
		{"istiod-1", "-", "-", "-", "-", "SYNCED", b.Version(seXDSType)},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), stdout)
	}
	for i, w := range want {
		got := strings.Fields(lines[i])
		if strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q, want %q\n%s", i, got, w, stdout)
		}
	}
	// --node narrows the table.
	code, stdout, _ = runCLI(t, "status", "--addr", b.GRPCAddr(), "--node", "istiod-1")
	if code != 0 || strings.Contains(stdout, "sidecar-1") || !strings.Contains(stdout, "istiod-1") {
		t.Errorf("--node istiod-1: exit %d\n%s", code, stdout)
	}
}

// mcpbridge status --json prints the CSDS answer itself, per resource, with the NACK's
// message.
func TestStatusJSONIsTheCSDSAnswerPerResource(t *testing.T) {
	b := statusBridge(t)
	// -o json, --output json, and --json, its old form, kept hidden for a release; -o yaml is
	// the same answer as YAML.
	for _, args := range [][]string{{"-o", "json"}, {"--output", "json"}, {"--json"}, {"-o", "yaml"}} {
		code, stdout, stderr := runCLI(t, append([]string{"status", "--addr", b.GRPCAddr()}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		js := []byte(stdout)
		if args[len(args)-1] == "yaml" {
			var err error
			if js, err = yaml.YAMLToJSON(js); err != nil {
				t.Fatalf("-o yaml: not YAML: %v\n%s", err, stdout)
			}
		}
		checkStatusAnswer(t, args, js)
	}
}

func checkStatusAnswer(t *testing.T, args []string, js []byte) {
	t.Helper()
	stdout := string(js)
	var resp csdspb.ClientStatusResponse
	if err := protojson.Unmarshal(js, &resp); err != nil {
		t.Fatalf("%v: not a ClientStatusResponse: %v\n%s", args, err, stdout)
	}
	found := false
	for _, cc := range resp.GetConfig() {
		for _, g := range cc.GetGenericXdsConfigs() {
			if cc.GetNode().GetId() == "sidecar-1" && g.GetTypeUrl() == seXDSType && g.GetName() == "shop/a" {
				found = true
				if g.GetConfigStatus() != csdspb.ConfigStatus_ERROR || g.GetErrorState().GetDetails() != "not for sidecars" {
					t.Errorf("sidecar-1 shop/a: %v", g)
				}
			}
		}
	}
	if !found {
		t.Errorf("%v: no entry for sidecar-1's shop/a:\n%s", args, stdout)
	}
}

func TestStatusFailuresAndBadCommandLines(t *testing.T) {
	for _, c := range []struct {
		args  []string
		code  int
		names string
	}{
		{[]string{"status", "--addr", "nonsense"}, 2, "--addr"},
		{[]string{"status", "extra"}, 2, "extra"},
		{[]string{"status", "--max-recv-msg-size", "0"}, 2, "--max-recv-msg-size"},
		{[]string{"status", "--addr", "127.0.0.1:1"}, 1, "status: 127.0.0.1:1"},
		{[]string{"status", "-o", "xml"}, 2, `--output: "xml" is not one of table, json, yaml`},
		{[]string{"status", "--json", "-o", "yaml"}, 2, "--json is the old form of -o json"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var out, errOut strings.Builder
		code := run(ctx, c.args, &out, &errOut)
		cancel()
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, errOut.String())
		}
		assertOneLine(t, errOut.String(), c.names)
	}
}

// The status page shows the same table as mcpbridge status.
func TestStatusPageShowsTheSameTable(t *testing.T) {
	b := statusBridge(t)
	resp, err := http.Get(b.URL() + "/?refresh=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	tags := regexp.MustCompile(`<[^>]*>`)
	for node, want := range map[string]string{
		"sidecar-1": "sidecar-1 SYNCED - - - ERROR " + b.Version(translate.EnvoyClusterType),
		"istiod-1":  "istiod-1 - - - - SYNCED " + b.Version(seXDSType),
	} {
		row := regexp.MustCompile(`(?s)<tr data-node="` + node + `">.*?</tr>`).Find(page)
		if got := strings.Join(strings.Fields(tags.ReplaceAllString(strings.ReplaceAll(string(row), "<td", " <td"), "")), " "); got != want {
			t.Errorf("row of %s: %q, want %q", node, got, want)
		}
	}
}

// status with the TLS flags of watch, against a bridge that requires client certificates:
// it lists a watch connected over mutual TLS; without a client certificate it fails, exit 1.
func TestStatusOverMutualTLS(t *testing.T) {
	b := serveMTLS(t)
	flags := b.clientFlags(t, "spiffe://mesh.example/ns/ops/sa/oncall")
	w := startCLI(t, append([]string{"watch", "--from", b.grpcAddr, "--xds", seXDSType, "--node", "watcher-1", "--output", "json"}, flags...)...)
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, stdout, stderr := runCLI(t, append([]string{"status", "--addr", b.grpcAddr}, flags...)...)
		if code != 0 {
			t.Fatalf("status: exit %d, stderr %q", code, stderr)
		}
		if f := rowOf(stdout, "watcher-1"); len(f) == 7 && f[5] == "SYNCED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no watcher-1 with ISTIO SYNCED:\n%s\nwatch: %s", stdout, w.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	noCert := []string{"--ca-file", filepath.Join(b.dir, "ca.pem"), "--server-name", "localhost"}
	code, _, stderr := runCLI(t, append([]string{"status", "--addr", b.grpcAddr}, noCert...)...)
	if code != exitRuntime {
		t.Errorf("status without a client certificate: exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "status: "+b.grpcAddr)
}

// rowOf is the fields of a node's row in a status table.
func rowOf(table, node string) []string {
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == node {
			return f
		}
	}
	return nil
}
