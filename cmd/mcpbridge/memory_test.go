package main

import (
	"errors"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]memoryLimit{
		"auto": {auto: true}, "off": {off: true}, "900MiB": {bytes: 900 << 20}, "1GiB": {bytes: 1 << 30},
		"2GB": {bytes: 2e9}, "1048576": {bytes: 1 << 20}, "64KiB": {bytes: 64 << 10},
	} {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1MiB", "0", "1.5GiB", "MiB"} {
		if _, err := parseMemoryLimit(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// memory.limit sets the Go memory limit: a size as given; auto, 90% of the container's
// cgroup limit when there is one; off, none. A bad value is exit 2 naming the key.
func TestMemoryLimitIsApplied(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	log := slog.New(slog.DiscardHandler)

	if got := applyMemoryLimit("900MiB", log); got != 900<<20 || debug.SetMemoryLimit(-1) != 900<<20 {
		t.Fatalf("900MiB: applied %d, runtime limit %d", got, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(before)
	if got := applyMemoryLimit("off", log); got != 0 || debug.SetMemoryLimit(-1) != before {
		t.Fatalf("off: applied %d, runtime limit %d (was %d)", got, debug.SetMemoryLimit(-1), before)
	}
	got := applyMemoryLimit("auto", log)
	cgroup, err := memlimit.FromCgroup()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit) || err != nil:
		if got != 0 {
			t.Fatalf("auto without a container limit (%v): applied %d", err, got)
		}
	case got != int64(float64(cgroup)*autoMemoryRatio):
		t.Fatalf("auto: applied %d, want 90%% of the container's %d", got, cgroup)
	}

	t.Setenv("MCPBRIDGE_MEMORY_LIMIT", "lots")
	code, _, stderr := runCLI(t, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(stderr, "memory.limit") {
		t.Fatalf("memory.limit lots: exit %d, stderr %q; want 2 naming the key", code, stderr)
	}
}

// memory.gc_percent sets the garbage collector's GOGC; GOGC in the environment wins; a value
// out of range is exit 2 naming the key.
func TestGCPercentIsApplied(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	log := slog.New(slog.DiscardHandler)

	t.Setenv("GOGC", "")
	if got := applyGCPercent(60, log); got != 60 || debug.SetGCPercent(60) != 60 {
		t.Fatalf("gc_percent 60: applied %d", got)
	}
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150) // as the runtime would have read it at start
	if got := applyGCPercent(60, log); got != 150 || debug.SetGCPercent(150) != 150 {
		t.Fatalf("with GOGC=150: applied %d, want GOGC's 150", got)
	}
	t.Setenv("GOGC", "")

	t.Setenv("MCPBRIDGE_MEMORY_GC_PERCENT", "5")
	code, _, stderr := runCLI(t, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(stderr, "memory.gc_percent") {
		t.Fatalf("memory.gc_percent 5: exit %d, stderr %q; want 2 naming the key", code, stderr)
	}
}
