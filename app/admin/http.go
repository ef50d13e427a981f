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
	"github.com/mcpbridge/mcpbridge/store/etcdbackend"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
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
	FileFaults func() []error
	// Sources reports the sources that follow outside systems; nil reports none.
	Sources           func() []metrics.SourceReport
	TranslationFaults metrics.FaultsFunc
	// Version is shown on the status page.
	Version string
	Logger  *slog.Logger
	// GatewayClasses, if set, lists the gateway classes built (/debug/gateways).
	GatewayClasses func() []envoy.GatewayClassInfo
	// Replica, if set, describes this replica of a replicated store (/debug/replica and the
	// status page): its name, the etcd revision it applied and its lag, whether it ingests
	// the shared sources.
	Replica func() etcdbackend.Status
	// Admin, if set, guards the debug views, the profiles and the status page: a request it
	// refuses is answered 403 with its reason. /healthz, /readyz and /metrics stay open.
	Admin func(r *http.Request) error
	// NotServed, if set, is why the debug views, the profiles and the status page are not
	// served at all: each answers 404 with it (a hint naming the settings that serve them).
	NotServed string
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
	guard := guarded(opts)
	if opts.Store != nil && opts.Engine != nil {
		d := &debug{opts: opts}
		mux.Handle("GET /debug/collections", guard(d.collections))
		mux.Handle("GET /debug/collections/{collection...}", guard(d.collection))
		mux.Handle("GET /debug/clients", guard(d.clients))
		mux.Handle("GET /debug/clients/{id}", guard(d.client))
		mux.Handle("GET /debug/producers", guard(d.producers))
		mux.Handle("GET /debug/gateways", guard(d.gateways))
		if opts.Replica != nil {
			mux.Handle("GET /debug/replica", guard(func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, opts.Logger, http.StatusOK, opts.Replica()) }))
		}
		mux.Handle("GET /{$}", guard(newStatusPage(d).ServeHTTP))
	}
	// Go's profiles (heap, CPU, goroutines): how an operator or a benchmark sees where a
	// running bridge spends its memory and time, as istiod offers at the same path.
	mux.Handle("GET /debug/pprof/", guard(pprof.Index))
	mux.Handle("GET /debug/pprof/cmdline", guard(pprof.Cmdline))
	mux.Handle("GET /debug/pprof/profile", guard(pprof.Profile))
	mux.Handle("GET /debug/pprof/symbol", guard(pprof.Symbol))
	mux.Handle("GET /debug/pprof/trace", guard(pprof.Trace))
	return mux
}

// guarded wraps a handler in Options.Admin: what the debug views show (every resource, every
// client) is for administrators when the port authenticates its clients.
func guarded(opts Options) func(http.HandlerFunc) http.Handler {
	return func(h http.HandlerFunc) http.Handler {
		if opts.NotServed != "" {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				opts.Metrics.AuthzRefused(metrics.RoleAdmin, metrics.RefusedNoClientCA)
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprintln(w, opts.NotServed)
			})
		}
		if opts.Admin == nil {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := opts.Admin(r); err != nil {
				opts.Metrics.AuthzRefused(metrics.RoleAdmin, metrics.RefusedNotAdmin)
				writeError(w, opts.Logger, http.StatusForbidden, "%v", err)
				return
			}
			h(w, r)
		})
	}
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
