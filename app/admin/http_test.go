package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
	ready := NewReadiness()
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
	srv := httptest.NewServer(Handler(Options{Ready: NewReadiness()}))
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
