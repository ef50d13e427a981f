package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpbridge/mcpbridge/bridgetest"
)

const reviewsStaticYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {version: v1}}]
`

func TestWatchLinkerdPrintsYAML(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, reviewsStaticYAML)
	code, stdout, stderr := runCLI(t, "watch", "--from", b.GRPCAddr(), "--linkerd", "reviews.shop.svc.cluster.local:9080", "--count", "1")
	if code != 0 {
		t.Fatalf("exit %d (stderr %q)", code, stderr)
	}
	want := `---
path: reviews.shop.svc.cluster.local:9080
kind: add
metricLabels:
  namespace: shop
  service: reviews
addrs:
  - addr: 10.0.0.1:9080
    weight: 1
    metricLabels:
      version: v1
`
	if stdout != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
}

// With --conduit, the seed's package; each change is one more line, and an unknown service
// is no_endpoints{exists: false}.
func TestWatchLinkerdConduitPrintsChanges(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, reviewsStaticYAML)
	c := startCLI(t, "watch", "--from", b.GRPCAddr(), "--linkerd", "reviews.shop.svc.cluster.local:9080", "--conduit", "--output", "json", "--count", "2")
	waitOutput(t, &c.stdout, func(s string) bool { return strings.Count(s, "\n") == 1 })
	b.LoadYAML(t, strings.Replace(reviewsStaticYAML, "endpoints: [", "endpoints: [{address: 10.0.0.2}, ", 1))
	if code := c.wait(t); code != 0 {
		t.Fatalf("exit %d (stderr %q)", code, c.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(c.stdout.String()), "\n")
	var second struct {
		Kind  string
		Addrs []struct{ Addr string }
	}
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &second) != nil || second.Kind != "add" ||
		len(second.Addrs) != 1 || second.Addrs[0].Addr != "10.0.0.2:9080" {
		t.Fatalf("stdout:\n%s", c.stdout.String())
	}

	code, stdout, stderr := runCLI(t, "watch", "--from", b.GRPCAddr(), "--linkerd", "unknown.shop.svc.cluster.local:80", "--output", "json", "--count", "1")
	if code != 0 || strings.TrimSpace(stdout) != `{"path":"unknown.shop.svc.cluster.local:80","kind":"no_endpoints"}` {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestWatchLinkerdBadCommandLinesAndPaths(t *testing.T) {
	for _, args := range [][]string{
		{"watch", "--from", "127.0.0.1:1", "--linkerd", "a:80", "--collection", "x"},
		{"watch", "--from", "127.0.0.1:1", "--collection", "x", "--conduit"},
		{"watch", "--from", "127.0.0.1:1", "--linkerd", "a:80", "--incremental"},
		{"watch", "--from", "127.0.0.1:1", "--linkerd", "a:80", "--name", "n"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d, want 2 (stderr %q)", args, code, stderr)
		}
		assertOneLine(t, stderr)
	}
	b := bridgetest.Start(t)
	code, _, stderr := runCLI(t, "watch", "--from", b.GRPCAddr(), "--linkerd", "not a host:80")
	if code != exitRuntime {
		t.Fatalf("bad path: exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "InvalidArgument", "not a DNS name")
}

// linkerd.keepalive_interval must be a positive duration; a bad one is exit 2 naming the key.
func TestLinkerdKeepaliveIntervalMustBePositive(t *testing.T) {
	for _, v := range []string{"0s", "-1s", "soon"} {
		t.Setenv("MCPBRIDGE_LINKERD_KEEPALIVE_INTERVAL", v)
		code, _, stderr := runCLI(t, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
		if code != exitUsage {
			t.Fatalf("%s: exit %d, want 2 (stderr %q)", v, code, stderr)
		}
		assertOneLine(t, stderr, "linkerd.keepalive_interval")
	}
}
