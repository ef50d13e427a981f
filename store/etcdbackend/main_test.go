package etcdbackend

import (
	"testing"

	"go.uber.org/goleak"
)

// Every backend stops with its context: no watch, keepalive or session goroutine outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
