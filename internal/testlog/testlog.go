// Package testlog is a slog.Logger that writes to a test's log while the test runs. The
// goroutines a test starts (streams, controllers) may log after it finished, as they wind
// down; t.Log then panics or races with the test's end, so lines written after the test's
// cleanup are dropped.
package testlog

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// New returns a debug-level logger writing to t's log until t's cleanup runs. Create it
// before what logs to it, so that its cleanup runs after theirs.
func New(t testing.TB) *slog.Logger {
	w := &writer{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// Buffer keeps what a logger wrote, for tests that assert on the log; safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Capture returns an info-level text logger writing to a Buffer.
func Capture() (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
