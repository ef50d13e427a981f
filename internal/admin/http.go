package admin

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

// Options is what the admin endpoints read. Only Ready is required: without Metrics there is
// no /metrics, and without Store and Engine no debug endpoints and no status page.
type Options struct {
	Ready   *Readiness
	Metrics *metrics.Metrics
	Store   *store.Store
	Engine  *source.Engine
	// Sink lists the producers of the ResourceSink service; nil lists none.
	Sink *sink.Server
	// FileFaults and TranslationFaults report current faults; nil reports none.
	FileFaults        func() []error
	TranslationFaults metrics.FaultsFunc
	// Version is shown on the status page.
	Version string
	Logger  *slog.Logger
}

// Handler returns the HTTP mux of the admin port: /healthz, /readyz, /metrics, /debug/... and
// the status page at /.
func Handler(opts Options) *http.ServeMux {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if pending := opts.Ready.Pending(); len(pending) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: waiting for %s\n", strings.Join(pending, ", "))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics.Handler())
	}
	if opts.Store != nil && opts.Engine != nil {
		d := &debug{opts: opts}
		mux.HandleFunc("GET /debug/collections", d.collections)
		mux.HandleFunc("GET /debug/collections/{collection...}", d.collection)
		mux.HandleFunc("GET /debug/clients", d.clients)
		mux.HandleFunc("GET /debug/clients/{id}", d.client)
		mux.HandleFunc("GET /debug/producers", d.producers)
		mux.Handle("GET /{$}", newStatusPage(d))
	}
	// Go's profiles (heap, CPU, goroutines): how an operator or a benchmark sees where a
	// running bridge spends its memory and time, as istiod offers at the same path.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// writeJSON writes v indented, for people reading it with curl as much as for programs.
func writeJSON(w http.ResponseWriter, log *slog.Logger, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		log.Debug("writing a debug response", "error", err)
	}
}

// errorBody is every JSON error: {"error": "what is wrong"}.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, log *slog.Logger, code int, format string, args ...any) {
	writeJSON(w, log, code, errorBody{Error: fmt.Sprintf(format, args...)})
}
