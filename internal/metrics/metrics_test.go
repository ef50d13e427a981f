package metrics

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Components run without metrics by leaving theirs nil: nothing may panic.
func TestNilMetricsAreSafe(t *testing.T) {
	var m *Metrics
	s := m.Stream(RoleSource, "xds-sotw")
	s.Pushed(1)
	s.SendFailed(errors.New("x"))
	s.RecvFailed(errors.New("x"))
	s.Close()
	c := m.Collection(RoleSink, "c")
	c.Request()
	c.ACK()
	c.Size(10)
	m.NACK(RoleSink, "c", codes.InvalidArgument)
	m.Declare(RoleSource, "xds-sotw")
	m.DeclareTLS("grpc")
	m.TLSReloaded("grpc", nil)
	m.DeclareLimits("streams")
	m.LimitRefused("streams")
	p := m.Peer(Upstream, "a:1")
	p.Up()
	p.Down(nil)
	if m.Peers() != nil {
		t.Fatal("a nil Metrics lists peers")
	}
	for _, err := range []error{m.WatchStore(nil), m.WatchFileFaults(nil), m.WatchTranslationFaults(nil)} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// translateFault has the shape the translation controller reports.
type translateFault struct {
	Kind, Name, Message string
}

type controller struct{ faults []translateFault }

func (c *controller) Faults() []translateFault { return c.faults }

// The translation's faults are wired with one line, and counted by kind at scrape time.
func TestTranslationFaultsAreCountedByKind(t *testing.T) {
	m := New()
	ctrl := &controller{}
	if err := m.WatchTranslationFaults(FaultsFrom(ctrl)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "mcpbridge_translation_faults"); err != nil || n != 0 {
		t.Fatalf("%d series with no faults (%v), want none", n, err)
	}
	ctrl.faults = []translateFault{
		{Kind: "VirtualService", Name: "shop/reviews", Message: "route to unknown host"},
		{Kind: "VirtualService", Name: "shop/ratings", Message: "route to unknown host"},
		{Kind: "DestinationRule", Name: "shop/reviews", Message: "subset without labels"},
	}
	const want = `
# HELP mcpbridge_translation_faults Faults the translation currently reports, by kind.
# TYPE mcpbridge_translation_faults gauge
mcpbridge_translation_faults{kind="DestinationRule"} 1
mcpbridge_translation_faults{kind="VirtualService"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "mcpbridge_translation_faults"); err != nil {
		t.Fatal(err)
	}
	got := FaultsFrom(ctrl)()
	if got[2] != (Fault{Kind: "DestinationRule", Name: "shop/reviews", Message: "subset without labels"}) {
		t.Fatalf("FaultsFrom = %+v", got[2])
	}
}

type kindName string

type otherFault struct {
	Message string
	Kind    kindName
	Line    int
}

type otherController struct{}

func (otherController) Faults() []*otherFault {
	return []*otherFault{{Kind: "Gateway", Message: "no servers", Line: 3}}
}

// Field order, named string types, pointers and extra fields do not matter.
func TestFaultsFromToleratesOtherShapes(t *testing.T) {
	got := FaultsFrom[*otherFault](otherController{})()
	if len(got) != 1 || got[0] != (Fault{Kind: "Gateway", Message: "no servers"}) {
		t.Fatalf("FaultsFrom = %+v", got)
	}
}

func TestPeerCountsReconnectionsNotFirstConnections(t *testing.T) {
	m := New()
	p := m.Peer(Downstream, "sink:9902")
	p.Up()
	p.Down(errors.New("connection reset"))
	if got := m.Peers(); len(got) != 1 || got[0].Connected || got[0].LastError != "connection reset" || got[0].Reconnections != 0 {
		t.Fatalf("after one stream: %+v", got)
	}
	p.Up()
	if got := m.Peers(); !got[0].Connected || got[0].Reconnections != 1 || got[0].LastError != "" {
		t.Fatalf("after a reconnection: %+v", got)
	}
	if m.Peer(Downstream, "sink:9902") != p {
		t.Fatal("Peer is not get-or-create")
	}
}

func TestTLSReloadsAreCountedByListenerAndResult(t *testing.T) {
	m := New()
	m.DeclareTLS("grpc")
	m.TLSReloaded("grpc", nil)
	m.TLSReloaded("grpc", errors.New("bad PEM"))
	m.TLSReloaded("grpc", errors.New("bad PEM"))
	want := `
# HELP mcpbridge_tls_reloads_total Reloads of a listener's TLS files after they changed on disk: result=success (new handshakes use them) or failure (the last good files still serve).
# TYPE mcpbridge_tls_reloads_total counter
mcpbridge_tls_reloads_total{listener="grpc",result="failure"} 2
mcpbridge_tls_reloads_total{listener="grpc",result="success"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "mcpbridge_tls_reloads_total"); err != nil {
		t.Fatal(err)
	}
}

// Each limit's refusals are exported at 0 once declared, and counted by limit.
func TestLimitRefusalsAreCountedByLimit(t *testing.T) {
	m := New()
	m.DeclareLimits("streams", "requests_per_second")
	m.LimitRefused("streams")
	m.LimitRefused("streams")
	want := `
# HELP mcpbridge_limit_refusals_total Refusals by a limit (ResourceExhausted): streams refused or ended, producers' pushes NACKed. limit is the configuration key's last part (limits.streams: streams).
# TYPE mcpbridge_limit_refusals_total counter
mcpbridge_limit_refusals_total{limit="requests_per_second"} 0
mcpbridge_limit_refusals_total{limit="streams"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "mcpbridge_limit_refusals_total"); err != nil {
		t.Fatal(err)
	}
}

// The garbage collector's CPU is exported (go_cpu_classes_gc_*), with the total it is a share
// of, and the Go collector's defaults stay.
func TestGarbageCollectorCPUIsExported(t *testing.T) {
	m := New()
	runtime.GC()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{
		"go_cpu_classes_gc_total_cpu_seconds_total", "go_cpu_classes_gc_mark_assist_cpu_seconds_total",
		"go_cpu_classes_gc_pause_cpu_seconds_total", "go_cpu_classes_total_cpu_seconds_total",
		"go_goroutines", "go_gc_duration_seconds", "process_resident_memory_bytes", "go_gc_heap_live_bytes",
	} {
		if !names[want] {
			t.Errorf("%s is not exported", want)
		}
	}
	if names["go_cpu_classes_user_cpu_seconds_total"] {
		t.Error("CPU classes other than the collector's and the total are exported too")
	}
}
