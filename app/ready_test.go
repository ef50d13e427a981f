package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/translate"
)

// Readiness lies: /readyz answered 200 as soon as the files were stored, before the Envoy
// resources translated from them existed. Ready means every source's first full state is in
// the store and every output derived from it is built: at the first 200, every
// ServiceEntry's cluster is there.
func TestReadyWaitsForTranslatedOutputs(t *testing.T) {
	const services = 3000
	dir := t.TempDir()
	var b strings.Builder
	for i := range services {
		fmt.Fprintf(&b, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc%d, namespace: mesh}
spec:
  hosts: [svc%d.mesh.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
`, i, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := start(t, func(c *Config) { c.Sources.Files = []string{dir} })
	// /readyz has no event to wait on: ask it as a probe would, only much more often.
	deadline := time.Now().Add(2 * time.Minute) // 3,000 services under -race on a loaded 2-core host
	for {
		code, body := httpGet(t, r.httpURL+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 2m: %s", body)
		}
		time.Sleep(time.Millisecond)
	}
	if got := r.store.View().Collection(translate.EnvoyClusterType).Count; got < services {
		t.Fatalf("ready with %d clusters translated of %d ServiceEntries", got, services)
	}
}
