package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/mcpbridge/mcpbridge/app"
)

// Each limits.* key is read from the file (and the environment), as docs/configuration.md ("Limits") documents it.
func TestLimitsAreReadFromTheConfiguration(t *testing.T) {
	file := filepath.Join(t.TempDir(), "limits.yaml")
	os.WriteFile(file, []byte(`limits:
  streams: 10
  streams_per_peer: 2
  subscriptions_per_stream: 30
  requests_per_second: 0.5
  request_burst: 4
  resources_per_producer: 50
  first_request_timeout: 3s
  connections: 40
`), 0o600)
	t.Setenv("MCPBRIDGE_LIMITS_STREAMS_PER_PEER", "3")
	t.Setenv("MCPBRIDGE_LIMITS_CONNECTIONS_PER_PEER", "7")
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	fs.Parse([]string{"--config", file})
	cfg, err := loadConfig(fs)
	if err != nil {
		t.Fatal(err)
	}
	want := app.LimitsConfig{Streams: 10, StreamsPerPeer: 3, SubscriptionsPerStream: 30, RequestsPerSecond: 0.5,
		RequestBurst: 4, ResourcesPerProducer: 50, FirstRequestTimeout: 3 * time.Second, Connections: 40, ConnectionsPerPeer: 7}
	if cfg.Limits != want {
		t.Fatalf("limits %+v, want %+v", cfg.Limits, want)
	}
}

// A limit that is not a positive number is exit 2, one line naming the key.
func TestBadLimitExits2NamingTheKey(t *testing.T) {
	for _, tc := range []struct{ env, value, key string }{
		{"MCPBRIDGE_LIMITS_STREAMS", "0", "limits.streams"},
		{"MCPBRIDGE_LIMITS_STREAMS_PER_PEER", "-1", "limits.streams_per_peer"},
		{"MCPBRIDGE_LIMITS_SUBSCRIPTIONS_PER_STREAM", "many", "limits.subscriptions_per_stream"},
		{"MCPBRIDGE_LIMITS_REQUESTS_PER_SECOND", "0", "limits.requests_per_second"},
		{"MCPBRIDGE_LIMITS_REQUESTS_PER_SECOND", "NaN", "limits.requests_per_second"},
		{"MCPBRIDGE_LIMITS_REQUESTS_PER_SECOND", "+Inf", "limits.requests_per_second"},
		{"MCPBRIDGE_LIMITS_REQUEST_BURST", "0", "limits.request_burst"},
		{"MCPBRIDGE_LIMITS_RESOURCES_PER_PRODUCER", "-5", "limits.resources_per_producer"},
		{"MCPBRIDGE_LIMITS_FIRST_REQUEST_TIMEOUT", "0s", "limits.first_request_timeout"},
		{"MCPBRIDGE_LIMITS_FIRST_REQUEST_TIMEOUT", "soon", "limits.first_request_timeout"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			code, _, stderr := runCLI(t, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
			if code != exitUsage {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, stderr)
			}
			assertOneLine(t, stderr, tc.key)
		})
	}
}
