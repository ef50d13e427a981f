package admin

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

// The status page's other sections: readiness, dialled peers, file and translation faults.
func TestStatusPageShowsPeersFaultsAndReadiness(t *testing.T) {
	st := store.New(store.Options{})
	eng := source.New(source.Options{Store: st})
	defer eng.Stop()
	m := metrics.New()
	m.Peer(metrics.Upstream, "producer.example:9901").Down(errors.New("connection refused"))
	ready := NewReadiness(nil)
	ready.Wait("sources.files")
	srv := httptest.NewServer(Handler(Options{
		Ready: ready, Metrics: m, Store: st, Engine: eng, Version: "v-test",
		FileFaults: func() []error { return []error{errors.New("mesh.yaml: document 2: field spec.hostz: unknown field")} },
		TranslationFaults: func() []metrics.Fault {
			return []metrics.Fault{{Kind: "VirtualService", Name: "shop/reviews", Message: "route to <unknown> host"}}
		},
	}))
	defer srv.Close()
	code, page := get(t, srv, "/")
	if code != 200 {
		t.Fatalf("GET / = %d", code)
	}
	for _, want := range []string{
		"version v-test", "not ready</span>: waiting for sources.files", "nothing stored yet", "no client connected",
		"producer.example:9901", "connection refused",
		"mesh.yaml: document 2: field spec.hostz: unknown field",
		"VirtualService <code>shop/reviews</code>: route to &lt;unknown&gt; host",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("status page does not show %q:\n%s", want, page)
		}
	}
}
