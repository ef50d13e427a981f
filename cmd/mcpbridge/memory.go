package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimit is a parsed memory.limit: auto, off, or a number of bytes.
type memoryLimit struct {
	auto, off bool
	bytes     int64
}

// autoMemoryRatio is the share of the container's limit given to the Go heap: the rest is
// for what the runtime does not count (stacks, the binary, off-heap buffers).
const autoMemoryRatio = 0.9

var sizeUnits = []struct {
	suffix string
	factor int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

// parseMemoryLimit reads memory.limit: "auto", "off", or a size such as 900MiB or 1GiB.
func parseMemoryLimit(s string) (memoryLimit, error) {
	switch s {
	case "auto":
		return memoryLimit{auto: true}, nil
	case "off":
		return memoryLimit{off: true}, nil
	}
	num, factor := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, factor = strings.TrimSuffix(s, u.suffix), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/factor {
		return memoryLimit{}, fmt.Errorf("%q is neither auto, off, nor a size such as 900MiB", s)
	}
	return memoryLimit{bytes: n * factor}, nil
}

// applyGCPercent sets the garbage collector's GOGC from memory.gc_percent and reports what
// it set; GOGC, read by the runtime itself, wins.
func applyGCPercent(percent int, log *slog.Logger) int {
	if v := os.Getenv("GOGC"); v != "" {
		log.Info("garbage collector target from GOGC", "GOGC", v)
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(percent)
	return percent
}

// applyMemoryLimit sets the Go memory limit from memory.limit and reports what it set; 0
// means none. GOMEMLIMIT, read by the runtime itself, wins.
func applyMemoryLimit(spec string, log *slog.Logger) int64 {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return debug.SetMemoryLimit(-1)
	}
	l, _ := parseMemoryLimit(spec) // validated with the configuration
	switch {
	case l.off:
		return 0
	case l.auto:
		cgroup, err := memlimit.FromCgroup()
		if err != nil {
			if !errors.Is(err, memlimit.ErrNoLimit) {
				log.Debug("no container memory limit found", "err", err)
			}
			return 0
		}
		l.bytes = int64(float64(cgroup) * autoMemoryRatio)
	}
	debug.SetMemoryLimit(l.bytes)
	log.Info("memory limit set", "bytes", l.bytes, "memory.limit", spec)
	return l.bytes
}
