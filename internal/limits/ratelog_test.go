package limits

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
)

// One line a second at most; the next says how many it left out.
func TestRareLogLogsOnceASecondAndCountsTheRest(t *testing.T) {
	var r RareLog
	t0 := time.Unix(1000, 0)
	if skipped, ok := r.allow(t0); !ok || skipped != 0 {
		t.Fatalf("first event: %d %v", skipped, ok)
	}
	for i := range 4 {
		if _, ok := r.allow(t0.Add(time.Duration(i+1) * 100 * time.Millisecond)); ok {
			t.Fatalf("event %d within the second logged", i+2)
		}
	}
	if skipped, ok := r.allow(t0.Add(time.Second)); !ok || skipped != 4 {
		t.Fatalf("a second later: logged %v, %d left out; want true, 4", ok, skipped)
	}
}

// A refusal is counted every time, logged once a second per limit, and is ResourceExhausted
// with the message given.
func TestRefuserCountsEveryRefusalAndLogsFew(t *testing.T) {
	var out streamtest.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	m := metrics.New()
	r := NewRefuser(m)
	var err error
	for range 3 {
		err = r.Refuse(log, Streams, "limits.streams: full", "peer", "10.0.0.1")
	}
	r.Refuse(log, StreamsPerPeer, "limits.streams_per_peer: full")
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "limits.streams: full" {
		t.Fatalf("refusal %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "limit=streams") || !strings.Contains(lines[0], "peer=10.0.0.1") ||
		!strings.Contains(lines[1], "limit=streams_per_peer") {
		t.Fatalf("want one line per limit, got:\n%s", out.String())
	}
	want := `
# HELP mcpbridge_limit_refusals_total Refusals by a limit (ResourceExhausted): streams refused or ended, producers' pushes NACKed. limit is the configuration key's last part (limits.streams: streams).
# TYPE mcpbridge_limit_refusals_total counter
mcpbridge_limit_refusals_total{limit="streams"} 3
mcpbridge_limit_refusals_total{limit="streams_per_peer"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "mcpbridge_limit_refusals_total"); err != nil {
		t.Fatal(err)
	}
}
