package limits

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RareLog logs a repeated event at most once a second, with how many it left out since the
// line before (similar_not_logged): a client that trips a limit in a loop, or asks for
// thousands of unknown types, costs a line a second, not one per event. The zero value is
// ready; it is safe for concurrent use.
type RareLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// Log logs msg with attrs at level, unless a line was logged within the last second.
func (r *RareLog) Log(log *slog.Logger, level slog.Level, msg string, attrs ...any) {
	skipped, ok := r.allow(time.Now())
	if !ok {
		return
	}
	log.Log(context.Background(), level, msg, append(attrs, "similar_not_logged", skipped)...)
}

// allow reports whether an event at now is logged, and how many were left out before it.
func (r *RareLog) allow(now time.Time) (skipped int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < time.Second {
		r.skipped++
		return 0, false
	}
	skipped = r.skipped
	r.last, r.skipped = now, 0
	return skipped, true
}
