// Package scale generates the large-mesh workload of the scale benchmark (make bench-scale) and
// measures a running bridge from outside: time to serve, peak RSS, CPU.
//
// The workload is the one mesh operators hit limits with: N ServiceEntries spread over files,
// each one host svc-I.ns-K.example in one of 100 namespaces, port http 8080, STATIC, three
// endpoints with a label.
package scale

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Namespaces is how many namespaces the generated ServiceEntries are spread over.
const Namespaces = 100

// Host is the host of ServiceEntry i.
func Host(i int) string { return fmt.Sprintf("svc-%d.ns-%d.example", i, i%Namespaces) }

// Cluster is the Envoy cluster the translation derives for ServiceEntry i.
func Cluster(i int) string { return "outbound|8080||" + Host(i) }

// Name is the MCP resource name (namespace/name) of ServiceEntry i.
func Name(i int) string { return fmt.Sprintf("ns-%d/svc-%d", i%Namespaces, i) }

// ServiceEntry is the YAML document of ServiceEntry i; gen > 0 adds a fourth endpoint whose
// address depends on gen, so that each generation changes every ServiceEntry it touches.
func ServiceEntry(b *strings.Builder, i, gen int) {
	fmt.Fprintf(b, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: svc-%d
  namespace: ns-%d
spec:
  hosts:
  - %s
  location: MESH_INTERNAL
  ports:
  - number: 8080
    name: http
    protocol: HTTP
  resolution: STATIC
  endpoints:
`, i, i%Namespaces, Host(i))
	ip := func(n int) string { return fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, n) }
	for e := 1; e <= 3; e++ {
		fmt.Fprintf(b, "  - address: %s\n    labels:\n      version: v%d\n", ip(e+(i&255)%50*4), e)
	}
	if gen > 0 {
		fmt.Fprintf(b, "  - address: 10.250.%d.%d\n    labels:\n      version: g%d\n", gen&255, i&255, gen)
	}
}

// FileName is the name of file f of a generated directory.
func FileName(f int) string { return fmt.Sprintf("services-%03d.yaml", f) }

// WriteFile writes file f of n ServiceEntries spread over files files (ServiceEntries
// f, f+files, f+2·files, …), generation gen.
func WriteFile(dir string, n, files, f, gen int) (count int, err error) {
	var b strings.Builder
	for i := f; i < n; i += files {
		if count > 0 {
			b.WriteString("---\n")
		}
		ServiceEntry(&b, i, gen)
		count++
	}
	// Write and rename, so that a watcher never reads half a file.
	tmp := filepath.Join(dir, "."+FileName(f)+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return 0, err
	}
	return count, os.Rename(tmp, filepath.Join(dir, FileName(f)))
}

// Write writes n ServiceEntries into files files in dir.
func Write(dir string, n, files int) error {
	for f := range files {
		if _, err := WriteFile(dir, n, files, f, 0); err != nil {
			return err
		}
	}
	return nil
}
