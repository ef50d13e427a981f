package admin

import (
	"fmt"
	"net/http"
	"strings"
)

// Handler returns the HTTP mux of the admin port. More routes join it through mux.Handle.
func Handler(ready *Readiness) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if pending := ready.Pending(); len(pending) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: waiting for %s\n", strings.Join(pending, ", "))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
