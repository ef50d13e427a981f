// Package istiod holds the end-to-end test of mcpbridge as a real istiod's only config source
// (docs/istiod.md). The test is built only with the tag e2e_istiod, so that `go test ./...`
// and `make test` leave it out: it needs binaries that take minutes to build (pilot-discovery,
// a Kubernetes API server) and runs for minutes. Run it with `make e2e-istiod`, which builds
// the pinned istiod once, caches it under bin/, and passes the binaries' paths.
package istiod
