package main

import (
	"context"
	"encoding/json"
	"fmt"
	"google.golang.org/protobuf/proto"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/app"
	"github.com/mcpbridge/mcpbridge/bridgetest"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

const vsCollection = "istio/networking/v1alpha3/virtualservices"

// cli runs one command line in the background, for commands that run until stopped.
type cli struct {
	stdout, stderr streamtest.Buffer
	cancel         context.CancelFunc
	done           chan int
}

func startCLI(t *testing.T, args ...string) *cli {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	c := &cli{cancel: cancel, done: make(chan int, 1)}
	go func() { c.done <- run(ctx, args, &c.stdout, &c.stderr) }()
	t.Cleanup(func() { cancel(); <-c.done; c.done <- -1 })
	return c
}

// wait returns the exit status, or fails the test if the command runs on past the deadline.
func (c *cli) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-c.done:
		c.done <- code // for the cleanup
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("still running after 20s; stdout %q, stderr %q", c.stdout.String(), c.stderr.String())
	}
	return 0
}

// stop is SIGINT: the command's context ends.
func (c *cli) stop(t *testing.T) int {
	t.Helper()
	c.cancel()
	return c.wait(t)
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func serviceEntryYAML(name, host string) string {
	return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: shop}\nspec: {hosts: [%s]}\n", name, host)
}

// waitHost waits until the bridge serves ns/name of the ServiceEntries with host.
func waitHost(t *testing.T, b *bridgetest.Bridge, name, host string) {
	t.Helper()
	w := b.Store().Watch(seCollection)
	defer w.Close()
	deadline := time.After(10 * time.Second)
	for {
		if e := b.Store().View().Get(seCollection, name); e != nil {
			var se networking.ServiceEntry
			if _, body := e.Body(); proto.Unmarshal(body, &se) == nil && len(se.Hosts) == 1 && se.Hosts[0] == host {
				return
			}
		}
		select {
		case <-w.C():
		case <-deadline:
			t.Fatalf("the bridge does not serve %s with host %s", name, host)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestViperDefaultsAreTheBridgeDefaults(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	cfg, err := loadConfig(fs)
	if err != nil {
		t.Fatal(err)
	}
	if want := app.DefaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("viper defaults\n%+v\nbridge.DefaultConfig\n%+v", cfg, want)
	}
}

// --- validate

func TestValidateExamplesIsClean(t *testing.T) {
	code, stdout, stderr := runCLI(t, "validate", "../../examples/")
	if code != 0 || stdout != "ok: 16 resources in 5 collections, no faults\n" || stderr != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestValidateNamesFileDocumentAndFieldOfEachFault(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", serviceEntryYAML("x", "x.example")+"---\n"+
		"apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: b, namespace: shop}\nspec: {hosts: [b.example], ports: [{numbr: 80}]}\n")
	first := writeFile(t, dir, "first.yaml", serviceEntryYAML("a", "a.example"))
	writeFile(t, dir, "second.yaml", serviceEntryYAML("a", "other.example"))
	code, stdout, stderr := runCLI(t, "validate", dir)
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1; stdout %q", code, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one line per fault, got %q", stdout)
	}
	mustHave(t, "the faulty field's line", lines[0], bad, "document 2", "ServiceEntry shop/b", "field spec.ports[0].numbr")
	mustHave(t, "the duplicate's line", lines[1], "second.yaml", "shop/a", "already defined in "+first)
	assertOneLine(t, stderr, "validate: 2 faults")
}

// TestValidateReportsWhatIstiodRefuses: validate reads files as serve's file source does, so
// it reports what istiod's validation would refuse, a line per field.
func TestValidateReportsWhatIstiodRefuses(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "mesh.yaml", serviceEntryYAML("x", "x.example")+"---\n"+
		"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: shop}\n"+
		"spec:\n  host: \"\"\n  subsets: [{name: v_1}]\n")
	code, stdout, stderr := runCLI(t, "validate", dir)
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1; stdout %q", code, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one line per fault, got %q", stdout)
	}
	mustHave(t, "the host's line", lines[0], file+":10:3: document 2: DestinationRule shop/reviews: field spec.host: empty domain name not allowed")
	mustHave(t, "the subset's line", lines[1], file+":11:14: document 2: DestinationRule shop/reviews: field spec.subsets[0].name: subset name is invalid: v_1")
	assertOneLine(t, stderr, "validate: 2 faults")
}

func TestValidateBadCommandLinesExit2(t *testing.T) {
	for _, args := range [][]string{{"validate"}, {"validate", filepath.Join(t.TempDir(), "missing.yaml")}} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d, want 2 (stderr %q)", args, code, stderr)
		}
		assertOneLine(t, stderr)
	}
}

// --- push

func TestPushACKsEveryCollectionAndStoresUnderTheProducerID(t *testing.T) {
	b := bridgetest.Start(t)
	code, stdout, stderr := runCLI(t, "push", "--to", b.GRPCAddr(), "--producer-id", "team-a", "../../examples/")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	mustHave(t, "stdout", stdout, "ACK  istio/networking/v1alpha3/serviceentries (5 resources)",
		"ACK  istio/networking/v1alpha3/gateways (1 resource)", "ACK  istio/security/v1beta1/peerauthentications (0 resources)")
	// The 11 kinds of the contract's table and the 4 more istiod reads: ProxyConfig,
	// Telemetry, WasmPlugin, TrafficExtension.
	if n := strings.Count(stdout, "ACK "); n != 15 {
		t.Errorf("%d ACKs, want one per collection the bridge asks for (15):\n%s", n, stdout)
	}
	_, es := b.Store().View().Snapshot(seCollection)
	if len(es) != 5 || es[0].Owner != "producer:team-a" {
		t.Fatalf("bridge holds %d ServiceEntries (owner %q), want 5 of producer:team-a", len(es), es[0].Owner)
	}
}

// Files that hold nothing would make the sink remove everything the producer holds: refused,
// nothing pushed, unless --allow-empty.
func TestPushOfNothingIsRefusedUnlessAllowed(t *testing.T) {
	b := bridgetest.Start(t)
	if code, _, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", "../../examples/"); code != 0 {
		t.Fatalf("first push: exit %d, %s", code, stderr)
	}
	empty := t.TempDir()
	code, _, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", empty)
	if code != exitRuntime {
		t.Fatalf("push of an empty directory: exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "the files hold no resource", "nothing was pushed", "--allow-empty")
	if n := b.Store().View().OwnedCount("producer:team-a"); n == 0 {
		t.Fatal("the refused push removed the producer's resources")
	}
	code, stdout, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", "--allow-empty", empty)
	if code != 0 || !strings.Contains(stdout, "ACK  istio/networking/v1alpha3/serviceentries (0 resources)") {
		t.Fatalf("--allow-empty: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if n := b.Store().View().OwnedCount("producer:team-a"); n != 0 {
		t.Fatalf("after --allow-empty the producer still holds %d resources", n)
	}
}

func TestPushReportsCollectionsTheSinkDidNotAskFor(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.WithCollections(seCollection))
	code, stdout, stderr := runCLI(t, "push", "--to", b.GRPCAddr(), "../../examples/")
	if code != 0 || strings.TrimSpace(stdout) != "ACK  istio/networking/v1alpha3/serviceentries (5 resources)" {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
	mustHave(t, "stderr", stderr, "did not ask for istio/networking/v1alpha3/virtualservices: 3 resources not pushed")
}

// nackingSink is someone else's ResourceSink: it asks for ServiceEntries and VirtualServices,
// ACKs the first and NACKs the second; or, with silent, asks for nothing.
func nackingSink(t *testing.T, silent bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	mcp.RegisterResourceSinkServer(srv, &fakeSink{silent: silent})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

type fakeSink struct {
	mcp.UnimplementedResourceSinkServer
	silent bool
}

func (f *fakeSink) EstablishResourceStream(s grpc.BidiStreamingServer[mcp.Resources, mcp.RequestResources]) error {
	if f.silent {
		<-s.Context().Done()
		return nil
	}
	for _, c := range []string{seCollection, vsCollection} {
		if err := s.Send(&mcp.RequestResources{Collection: c}); err != nil {
			return err
		}
	}
	for {
		m, err := s.Recv()
		if err != nil {
			return nil
		}
		ans := &mcp.RequestResources{Collection: m.Collection, ResponseNonce: m.Nonce}
		if m.Collection == vsCollection {
			ans.ErrorDetail = &rpcstatus.Status{Code: 3, Message: fmt.Sprintf("%d VirtualServices is too many", len(m.Resources))}
		}
		if err := s.Send(ans); err != nil {
			return err
		}
	}
}

func TestPushToAnotherSinkReportsItsNACKAndExits1(t *testing.T) {
	addr := nackingSink(t, false)
	code, stdout, stderr := runCLI(t, "push", "--to", addr, "../../examples/")
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1; stdout %q", code, stdout)
	}
	mustHave(t, "stdout", stdout, "ACK  istio/networking/v1alpha3/serviceentries (5 resources)",
		"NACK istio/networking/v1alpha3/virtualservices: 3 VirtualServices is too many")
	// Warnings name what the sink did not ask for; the error is the last line, and one line.
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	mustHave(t, "warnings", stderr, "did not ask for istio/networking/v1alpha3/gateways")
	assertOneLine(t, lines[len(lines)-1]+"\n", "1 of 2 collections NACKed", addr)
}

func TestPushFailuresExit1WithOneLine(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "bad.yaml", "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a}\nspec: {hostz: [x]}\n")
	b := bridgetest.Start(t)
	cases := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"faulty files", []string{"push", "--to", b.GRPCAddr(), dir}, []string{"1 fault in the files", "nothing was pushed"}},
		{"sink asks nothing", []string{"push", "--to", nackingSink(t, true), "--timeout", "300ms", "../../examples"}, []string{"asked for no collection within --timeout 300ms"}},
		{"nobody listens", []string{"push", "--to", closedAddress(t), "../../examples"}, []string{"open a stream to", "connection refused"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != exitRuntime {
				t.Fatalf("exit %d, want 1 (stderr %q)", code, stderr)
			}
			// A faulty file's faults are logged first; the error is the last line.
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			assertOneLine(t, lines[len(lines)-1]+"\n", tc.wants...)
		})
	}
	if _, es := b.Store().View().Snapshot(seCollection); len(es) != 0 {
		t.Fatalf("faulty files were pushed: %d entries", len(es))
	}
}

// closedAddress is a loopback address nobody listens on.
func closedAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func TestPushBadCommandLinesExit2(t *testing.T) {
	for _, args := range [][]string{
		{"push", "--to", "127.0.0.1:1", "--addr", "127.0.0.1:2", "../../examples"},
		{"push", "--to", "nowhere", "../../examples"},
		{"push", "--addr", "nowhere", "../../examples"},
		{"push", "--to", "127.0.0.1:1"},
		{"push", "--to", "127.0.0.1:1", "--timeout", "0s", "../../examples"},
		{"push", "--to", "127.0.0.1:1", filepath.Join(t.TempDir(), "missing")},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d, want 2 (stderr %q)", args, code, stderr)
		}
		assertOneLine(t, stderr)
	}
}

func TestPushWatchPushesEveryChangeUntilStopped(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "se.yaml", serviceEntryYAML("a", "one.example"))
	b := bridgetest.Start(t)
	c := startCLI(t, "push", "--to", b.GRPCAddr(), "--watch", "--producer-id", "watcher", dir)
	waitHost(t, b, "shop/a", "one.example")
	writeFile(t, dir, "se.yaml", serviceEntryYAML("a", "two.example"))
	waitHost(t, b, "shop/a", "two.example")
	const ack = "ACK  istio/networking/v1alpha3/serviceentries (1 resource)"
	waitOutput(t, &c.stdout, func(out string) bool { return strings.Count(out, ack) == 2 })
	if code := c.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0 (stderr %q)", code, c.stderr.String())
	}
}

// --- watch

const reviewsYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec: {hosts: [reviews.shop.example], ports: [{number: 9080, name: http, protocol: HTTP}]}
`

// watchUpdate is one JSON line of watch.
type watchUpdate struct {
	Collection, TypeURL, Version string
	Incremental                  bool
	Resources                    []struct {
		Name, Version string
		Body          struct {
			Type  string   `json:"@type"`
			Hosts []string `json:"hosts"`
		}
	}
	Removed []string
}

func parseUpdates(t *testing.T, stdout string) []watchUpdate {
	t.Helper()
	var out []watchUpdate
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var u watchUpdate
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		out = append(out, u)
	}
	return out
}

// An MCP sink that ACKs: the second update comes only after the first is ACKed (one response
// in flight per collection), and the bridge records the ACK.
func TestWatchMCPPrintsAndACKsEachUpdate(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, reviewsYAML)
	c := startCLI(t, "watch", "--addr", b.GRPCAddr(), "--collection", seCollection, "-o", "json", "--count", "2")
	b.WaitSynced(t, "mcpbridge-watch", seCollection)
	first := b.Version(seCollection)
	b.LoadYAML(t, strings.ReplaceAll(reviewsYAML, "reviews.shop.example", "reviews-v2.shop.example"))
	if code := c.wait(t); code != 0 {
		t.Fatalf("exit %d (stderr %q)", code, c.stderr.String())
	}
	us := parseUpdates(t, c.stdout.String())
	if len(us) != 2 || us[0].Collection != seCollection || us[0].Version != first || us[0].Incremental ||
		len(us[0].Resources) != 1 || us[0].Resources[0].Name != "shop/reviews" || us[0].Resources[0].Version == "" ||
		us[0].Resources[0].Body.Type != "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry" ||
		us[1].Version != b.Version(seCollection) || us[1].Resources[0].Body.Hosts[0] != "reviews-v2.shop.example" {
		t.Fatalf("updates: %+v", us)
	}
}

func TestWatchMCPIncrementalPrintsRemovals(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, reviewsYAML)
	c := startCLI(t, "watch", "--from", b.GRPCAddr(), "--collection", seCollection, "--incremental", "--output", "json", "--count", "2")
	b.WaitSynced(t, "mcpbridge-watch", seCollection)
	b.LoadYAML(t, "")
	if code := c.wait(t); code != 0 {
		t.Fatalf("exit %d (stderr %q)", code, c.stderr.String())
	}
	us := parseUpdates(t, c.stdout.String())
	if len(us) != 2 || len(us[0].Resources) != 1 || !us[1].Incremental || len(us[1].Removed) != 1 || us[1].Removed[0] != "shop/reviews" {
		t.Fatalf("updates: %+v", us)
	}
}

func TestWatchXDSStateOfTheWorldPrintsYAML(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, reviewsYAML)
	code, stdout, stderr := runCLI(t, "watch", "--from", b.GRPCAddr(), "--xds", "networking.istio.io/v1/ServiceEntry", "--count", "1")
	if code != 0 {
		t.Fatalf("exit %d (stderr %q)", code, stderr)
	}
	want := fmt.Sprintf(`---
type_url: networking.istio.io/v1/ServiceEntry
version: "%s"
incremental: false
resources:
  - name: shop/reviews
    version: `, b.Version(seCollection))
	if !strings.HasPrefix(stdout, want) {
		t.Fatalf("stdout:\n%s\nwant it to start with:\n%s", stdout, want)
	}
	mustHave(t, "stdout", stdout, "'@type': type.googleapis.com/istio.networking.v1alpha3.ServiceEntry",
		"    hosts:\n        - reviews.shop.example", "number: 9080")
}

func TestWatchXDSDeltaPrintsRemovals(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, reviewsYAML)
	c := startCLI(t, "watch", "--from", b.GRPCAddr(), "--xds", "networking.istio.io/v1alpha3/ServiceEntry", "--incremental",
		"--node", "delta-watch", "--output", "json", "--count", "2")
	b.WaitSynced(t, "delta-watch", seCollection)
	b.LoadYAML(t, "")
	if code := c.wait(t); code != 0 {
		t.Fatalf("exit %d (stderr %q)", code, c.stderr.String())
	}
	us := parseUpdates(t, c.stdout.String())
	if len(us) != 2 || !us[0].Incremental || len(us[0].Resources) != 1 || us[0].Resources[0].Name != "shop/reviews" ||
		len(us[1].Resources) != 0 || len(us[1].Removed) != 1 || us[1].Removed[0] != "shop/reviews" {
		t.Fatalf("updates: %+v", us)
	}
}

// --xds-version v2 speaks the v2 ADS, and prints the v2 bodies decoded as their v3
// counterparts.
func TestWatchXDSVersionV2(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, reviewsYAML)
	const cluster = "outbound|9080||reviews.shop.example"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) { // the translation runs apart
		// The reviews cluster, not istiod's sidecar plumbing, which is there from the start.
		_, es := b.Store().View().Snapshot(xds.ClusterType)
		translated := false
		for _, e := range es {
			translated = translated || e.Name == cluster
		}
		if translated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the translation made no cluster within 10s")
		}
	}
	code, stdout, stderr := runCLI(t, "watch", "--from", b.GRPCAddr(), "--xds-version", "v2", "--xds", "type.googleapis.com/envoy.api.v2.Cluster", "--count", "1")
	if code != 0 {
		t.Fatalf("exit %d (stderr %q)", code, stderr)
	}
	mustHave(t, "stdout", stdout, "type_url: type.googleapis.com/envoy.api.v2.Cluster", "name: "+cluster,
		"'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster")
	code, stdout, stderr = runCLI(t, "watch", "--from", b.GRPCAddr(), "--xds-version", "v2", "--incremental",
		"--xds", "type.googleapis.com/envoy.api.v2.Cluster", "--output", "json", "--count", "1")
	if code != 0 {
		t.Fatalf("delta: exit %d (stderr %q)", code, stderr)
	}
	us := parseUpdates(t, stdout)
	if len(us) != 1 || !us[0].Incremental {
		t.Fatalf("delta v2 updates: %+v", us)
	}
	found := false
	for _, r := range us[0].Resources { // with istiod's sidecar plumbing (PassthroughCluster...)
		if r.Name == cluster {
			found = r.Body.Type == "type.googleapis.com/envoy.config.cluster.v3.Cluster"
		}
	}
	if !found {
		t.Fatalf("delta v2 updates: %+v, want %s as a v3 Cluster body", us, cluster)
	}
	mustHave(t, "stdout", stdout, `"type_url":"type.googleapis.com/envoy.api.v2.Cluster"`)
}

func TestWatchStopsOnSIGINTWithExit0(t *testing.T) {
	b := bridgetest.Start(t)
	c := startCLI(t, "watch", "--from", b.GRPCAddr(), "--collection", seCollection)
	b.WaitSynced(t, "mcpbridge-watch", seCollection)
	if code := c.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0 (stderr %q)", code, c.stderr.String())
	}
}

func TestWatchFailuresAndBadCommandLines(t *testing.T) {
	code, _, stderr := runCLI(t, "watch", "--from", closedAddress(t), "--collection", seCollection)
	if code != exitRuntime {
		t.Fatalf("no source: exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "watch: stream from", "connection refused")

	se := seCollection
	for _, c := range []struct {
		args []string
		want string // what the one line of stderr names
	}{
		{[]string{"watch", "--from", "127.0.0.1:1"}, "give one of --collection"},
		{[]string{"watch", "--from", "127.0.0.1:1", "--collection", se, "--xds", "b"}, "give one of --collection"},
		{[]string{"watch", "--from", "127.0.0.1:1", "--addr", "127.0.0.1:2", "--collection", se}, "--from is the old name of --addr"},
		{[]string{"watch", "--addr", "127.0.0.1:1", "--collection", se, "-o", "table"}, `--output: "table" is not one of yaml, json`},
		{[]string{"watch", "--from", "127.0.0.1:1", "--collection", se, "--output", "xml"}, `--output: "xml"`},
		{[]string{"watch", "--from", "127.0.0.1:1", "--collection", se, "--count", "-1"}, "--count"},
		{[]string{"watch", "--from", "127.0.0.1:1", "--collection", se, "--name", "x"}, "--name goes with --xds"},
		{[]string{"watch", "--from", "127.0.0.1:1", "--collection", se, "extra"}, "extra"},
		{[]string{"watch", "--from", "127.0.0.1:1", "--xds", "type.googleapis.com/envoy.config.cluster.v3.Cluster", "--xds-version", "v4"}, "--xds-version"},
		{[]string{"watch", "--from", "127.0.0.1:1", "--collection", se, "--xds-version", "v2"}, "--xds-version goes with --xds"},
		// A name the bridge does not serve: the closest it does.
		{[]string{"watch", "--collection", "istio/networking/v1alpha3/servicentries"}, `did you mean "istio/networking/v1alpha3/serviceentries"`},
		{[]string{"watch", "--xds", "networking.istio.io/v1/VirtualServices"}, `did you mean "networking.istio.io/v1/VirtualService"`},
		{[]string{"watch", "--xds", "type.googleapis.com/envoy.config.cluster.v3.Clusters"}, `did you mean "type.googleapis.com/envoy.config.cluster.v3.Cluster"`},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d, want 2 (stderr %q)", c.args, code, stderr)
		}
		assertOneLine(t, stderr, c.want)
	}
	// --unchecked subscribes to another server's type: it gets as far as the connection.
	code, _, stderr = runCLI(t, "watch", "--addr", closedAddress(t), "--xds", "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", "--unchecked")
	if code != exitRuntime {
		t.Fatalf("--unchecked: exit %d, want 1 (stderr %q)", code, stderr)
	}
}

// waitOutput waits until a running command's output satisfies cond.
func waitOutput(t *testing.T, out *streamtest.Buffer, cond func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("output not as expected within 10s:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustHave(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, s)
		}
	}
}

// A whole-type answer for a large mesh is one message, larger than gRPC's default 4 MiB
// receive limit: watch takes up to --max-recv-msg-size (256 MiB by default), and says so when
// an answer is larger.
func TestWatchMaxRecvMsgSize(t *testing.T) {
	b := bridgetest.Start(t)
	var yaml strings.Builder
	for i := range 200 {
		yaml.WriteString(strings.ReplaceAll(strings.ReplaceAll(reviewsYAML, "name: reviews", fmt.Sprintf("name: reviews%d", i)), "reviews.shop.example", fmt.Sprintf("reviews%d.shop.example", i)))
		yaml.WriteString("\n---\n")
	}
	b.LoadYAML(t, yaml.String())
	code, stdout, stderr := runCLI(t, "watch", "--from", b.GRPCAddr(), "--collection", seCollection, "--output", "json", "--count", "1")
	if code != 0 || strings.Count(stdout, `"shop/reviews`) != 200 {
		t.Fatalf("default limit: exit %d, %d resources (stderr %q)", code, strings.Count(stdout, `"shop/reviews`), stderr)
	}
	code, _, stderr = runCLI(t, "watch", "--from", b.GRPCAddr(), "--collection", seCollection, "--max-recv-msg-size", "4096", "--count", "1")
	if code != exitRuntime {
		t.Fatalf("4 KiB limit: exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "ResourceExhausted")
	code, _, stderr = runCLI(t, "watch", "--from", "127.0.0.1:1", "--collection", "a", "--max-recv-msg-size", "0")
	if code != exitUsage {
		t.Fatalf("--max-recv-msg-size 0: exit %d, want 2 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "--max-recv-msg-size")
}
