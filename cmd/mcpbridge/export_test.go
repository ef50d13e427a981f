package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/app"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source/export"
	"github.com/mcpbridge/mcpbridge/store"
)

// sameIstioConfig compares two stores' collections of every Istio kind, entry by entry:
// names, versions and encodings. It returns the first difference, or "".
func sameIstioConfig(a, b *store.Store) string {
	va, vb := a.View(), b.View()
	for _, k := range kinds.Kinds() {
		_, ea := va.Snapshot(k.Collection)
		_, eb := vb.Snapshot(k.Collection)
		if len(ea) != len(eb) {
			return fmt.Sprintf("%s: %d resources, %d reloaded", k.Collection, len(ea), len(eb))
		}
		for i := range ea {
			if ea[i].Name != eb[i].Name || ea[i].Version != eb[i].Version || !bytes.Equal(ea[i].Bytes, eb[i].Bytes) {
				return fmt.Sprintf("%s: %s@%s reloaded as %s@%s (same bytes: %v)", k.Collection,
					ea[i].Name, ea[i].Version, eb[i].Name, eb[i].Version, bytes.Equal(ea[i].Bytes, eb[i].Bytes))
			}
		}
	}
	return ""
}

// The Istio YAML directory export round-trips: mcpbridge validate accepts it, and the file
// source loads it into the store the bridge held: every resource, with its version and bytes.
func TestExportDirectoryRoundTripsThroughValidateAndTheFileSource(t *testing.T) {
	out := filepath.Join(t.TempDir(), "backup")
	cfg := app.DefaultConfig()
	cfg.Sources.Files = []string{"../../examples"}
	cfg.Exports.Directory = out
	cfg.Exports.Debounce = time.Millisecond
	cfg.GRPC.ShutdownGrace = time.Second
	b, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, _ := net.Listen("tcp", "127.0.0.1:0")
	httpLis, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, grpcLis, httpLis) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	var diff string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reloaded := newFiles([]string{out}, nil)
		faults, err := reloaded.loadOnce()
		if err == nil && len(faults) == 0 {
			if n, _ := reloaded.resources(); n > 0 {
				if diff = sameIstioConfig(b.Store(), reloaded.store); diff == "" {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export never reloaded into the bridge's config: %v %v %s", err, faults, diff)
		}
	}
	entries, err := os.ReadDir(out)
	if err != nil || len(entries) < 3 {
		t.Fatalf("export directory: %v, %v", entries, err)
	}
	se, _ := kinds.ByCollection("istio/networking/v1alpha3/serviceentries")
	if _, err := os.Stat(filepath.Join(out, export.FileName(se))); err != nil {
		t.Fatalf("no file for ServiceEntries: %v", err)
	}
	code, stdout, stderr := runCLI(t, "validate", out)
	if code != 0 {
		t.Fatalf("mcpbridge validate of the export: exit %d\n%s%s", code, stdout, stderr)
	}
}
