package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpbridge/mcpbridge/internal/testlog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestReadyzWaitsForEveryCondition(t *testing.T) {
	ready := NewReadiness(nil)
	grpcDone := ready.Wait("grpc")
	filesDone := ready.Wait("source files")
	srv := httptest.NewServer(Handler(Options{Ready: ready}))
	defer srv.Close()

	if code, _ := get(t, srv, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while not ready, want 200", code)
	}
	code, body := get(t, srv, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "grpc, source files") {
		t.Fatalf("/readyz = %d %q, want 503 naming both", code, body)
	}
	grpcDone()
	if code, body := get(t, srv, "/readyz"); code != http.StatusServiceUnavailable || strings.Contains(body, "grpc") {
		t.Fatalf("/readyz = %d %q, want 503 naming only the files", code, body)
	}
	filesDone()
	filesDone()
	if code, _ := get(t, srv, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d once everything is done, want 200", code)
	}
}

// TestProfilesAreServed: Go's profiles are on /debug/pprof/, for an operator's go tool pprof.
func TestProfilesAreServed(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{Ready: NewReadiness(nil)}))
	defer srv.Close()
	if code, body := get(t, srv, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/ = %d, want the index of profiles", code)
	}
	resp, err := http.Get(srv.URL + "/debug/pprof/heap")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// A profile is gzipped protobuf: gzip's magic number first.
	if resp.StatusCode != http.StatusOK || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		t.Fatalf("/debug/pprof/heap = %d, %d bytes, want a gzipped profile", resp.StatusCode, len(body))
	}
}

// The log says when the bridge becomes ready, when a check is lost (not ready, and why), and
// when it is met again; once each, not at every probe.
func TestReadinessChangesAreLoggedOnce(t *testing.T) {
	log, buf := testlog.Capture()
	r := NewReadiness(log)
	done := r.Wait("sources.files")
	cut := ""
	r.Check("store.etcd", func() string { return cut })
	r.Pending()
	if strings.Contains(buf.String(), "ready") {
		t.Fatalf("logged before anything was met: %s", buf.String())
	}
	done()
	cut = "cut off from etcd"
	r.Pending()
	r.Pending()
	cut = ""
	r.Pending()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{`msg=ready after=`, `level=WARN msg="not ready" waiting_for="store.etcd (cut off from etcd)"`, `msg="ready again"`}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s\nwant %d lines", buf.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Fatalf("line %d %q, want it to contain %q", i, lines[i], w)
		}
	}
}
