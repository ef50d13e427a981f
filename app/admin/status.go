package admin

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/csds"
	"github.com/mcpbridge/mcpbridge/store/etcdbackend"
)

//go:embed status.html
var statusHTML string

// statusTemplate is parsed once; html/template escapes everything a client or producer sent
// (node ids, NACK messages), so none of it can inject markup into an operator's browser.
var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"ago": ago,
	// sourceFaults says whether any source reports a fault.
	"sourceFaults": func(rs []metrics.SourceReport) bool {
		for _, r := range rs {
			if len(r.Faults) > 0 {
				return true
			}
		}
		return false
	},
	// state is a cell of the sync table: its state, or "-" for a type not subscribed.
	"state": func(states map[string]string, col string) string {
		if s := states[col]; s != "" {
			return s
		}
		return "-"
	},
	"when": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}).Parse(statusHTML))

// defaultRefresh is how often the page reloads itself, in seconds; ?refresh=N changes it, 0
// stops it.
const defaultRefresh = 5

// statusData is what the template renders.
type statusData struct {
	Version           string
	Now               time.Time
	Pending           []string
	Refresh           int
	Revision          uint64
	Collections       []CollectionSummary
	Clients           []source.ClientInfo
	Producers         []sink.ProducerInfo
	Peers             []metrics.PeerInfo
	FileFaults        []string
	Sources           []metrics.SourceReport
	TranslationFaults []metrics.Fault
	// Sync is the table of mcpbridge status: each node's state per type (CSDS).
	Sync        []csds.Row
	SyncColumns []string
	// Replica is this replica of an etcd-backed store; nil with the memory store.
	Replica *etcdbackend.Status
}

type statusPage struct{ d *debug }

func newStatusPage(d *debug) *statusPage { return &statusPage{d: d} }

func (p *statusPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	refresh := defaultRefresh
	if s := r.URL.Query().Get("refresh"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("refresh=%q: want a number of seconds, 0 for none", s), http.StatusBadRequest)
			return
		}
		refresh = n
	}
	data := p.data(refresh)
	// Rendered to a buffer first, so that a template failure is a 500, not half a page.
	var buf bytes.Buffer
	if err := statusTemplate.Execute(&buf, data); err != nil {
		p.d.opts.Logger.Error("rendering the status page", "error", err)
		http.Error(w, "rendering the status page failed; the /debug endpoints still answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	buf.WriteTo(w)
}

func (p *statusPage) data(refresh int) statusData {
	cols := p.d.collectionList()
	prod := p.d.producerList()
	return statusData{
		Version: p.d.opts.Version, Now: time.Now(), Pending: p.d.opts.Ready.Pending(), Refresh: refresh,
		Revision: cols.Revision, Collections: cols.Collections, Clients: p.d.opts.Engine.Clients(),
		Producers: prod.Producers, Peers: prod.Peers,
		FileFaults: prod.FileFaults, Sources: prod.Sources, TranslationFaults: prod.TranslationFaults,
		// Types only: the table needs no list of resources.
		Sync: csds.Table(csds.Response(p.d.opts.Engine.Status(source.StatusOptions{}))), SyncColumns: csds.Columns,
		Replica: p.replica(),
	}
}

func (p *statusPage) replica() *etcdbackend.Status {
	if p.d.opts.Replica == nil {
		return nil
	}
	st := p.d.opts.Replica()
	return &st
}

// ago is a time as a short age ("4s ago"), empty for the zero time.
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}
