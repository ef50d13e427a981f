// Package export keeps files of what the bridge serves up to date: each a DiscoveryResponse
// of one type for one node (what a state-of-the-world client of that node receives first,
// source.Engine.Snapshot), in JSON or YAML, the format Envoy's path_config_source reads. Each
// file is replaced by write-temp-then-rename in its own directory, so that a reader (Envoy's
// inotify watch of the directory) sees one atomic move and never a partial file, and only
// when its content changes. Changes wake the exporter through the store's topics (no
// polling); a burst is gathered for the debounce; a failed write is logged, counted and tried
// again after the retry interval, and never stops the bridge.
package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
)

// Protocol names the export in logs.
const Protocol = "export"

// Formats of an exported file.
const (
	JSON = "json"
	YAML = "yaml"
)

// File is one exported file.
type File struct {
	Path   string
	Format string // JSON (default) or YAML
	// Request is what the file answers: its type_url, node and resource_names.
	Request *discovery.DiscoveryRequest
}

// Options configures an Exporter.
type Options struct {
	Engine *source.Engine
	Store  *store.Store
	// Views, if set, builds the view of each file's node while the exporter runs (a router
	// node's gateway class, a sidecar's namespace, the proxyless outputs and the ports' route
	// configurations its request asks for: xds.HoldView).
	Views xds.Views
	Files []File
	// Ready, if set, holds the first write back until it is closed (the bridge's sources
	// loaded and translated), so that a file never holds a partial state.
	Ready <-chan struct{}
	// Debounce gathers a burst of changes into one write; zero writes at once. The bridge
	// passes exports.debounce.
	Debounce time.Duration
	// RetryInterval is the wait before a failed write is tried again; positive. The bridge
	// passes exports.retry_interval.
	RetryInterval time.Duration
	Metrics       *metrics.Metrics
	Logger        *slog.Logger
}

// Exporter keeps the files of Options up to date while it runs.
type Exporter struct {
	opts  Options
	log   *slog.Logger
	files []*file
}

// file is one exported file's state, owned by Run's goroutine.
type file struct {
	File
	collection string
	written    []byte // what the file holds, as far as the exporter knows; nil: unknown
	due        bool   // changed, or its last write failed
}

// New checks the files: a path each (absolute or relative, not shared), a type URL, a
// format. An error names the entry.
func New(opts Options) (*Exporter, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	x := &Exporter{opts: opts, log: opts.Logger.With("component", "export")}
	seen := map[string]int{}
	for i, f := range opts.Files {
		switch {
		case f.Path == "":
			return nil, fmt.Errorf("[%d].path: empty", i)
		case f.Request.GetTypeUrl() == "":
			return nil, fmt.Errorf("[%d].type_url: empty (an xDS type URL such as type.googleapis.com/envoy.config.cluster.v3.Cluster)", i)
		case f.Format == "":
			f.Format = JSON
		case f.Format != JSON && f.Format != YAML:
			return nil, fmt.Errorf("[%d].format: %q is neither json nor yaml", i, f.Format)
		}
		clean := filepath.Clean(f.Path)
		if j, dup := seen[clean]; dup {
			return nil, fmt.Errorf("[%d].path: %s is also exports.files[%d]'s", i, f.Path, j)
		}
		seen[clean] = i
		f.Path = clean
		x.files = append(x.files, &file{File: f, collection: pollType(f.Request).Collection, due: true})
		opts.Metrics.DeclareExport(clean)
	}
	return x, nil
}

// Run writes every file, then each again when what it holds changes, until ctx ends.
func (x *Exporter) Run(ctx context.Context) error {
	if len(x.files) == 0 {
		<-ctx.Done()
		return nil
	}
	collections := make([]string, 0, len(x.files))
	for _, f := range x.files {
		collections = append(collections, f.collection)
		f.written, _ = os.ReadFile(f.Path) // an unchanged file is not written again at start
		req, _ := xds.PollRequest(f.Request)
		defer xds.HoldView(x.opts.Views, req, ctx.Done())()
	}
	watch := x.opts.Store.Watch(collections...) // before the first read: no change is missed
	defer watch.Close()
	if !waitReady(ctx, x.opts.Ready) {
		return nil
	}
	timer := time.NewTimer(0) // the first export at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-watch.C():
			x.changed(watch.Changed())
			timer.Reset(x.opts.Debounce) // a burst goes together
			continue
		case <-timer.C:
		}
		if x.export() > 0 {
			timer.Reset(x.opts.RetryInterval)
		}
	}
}

// changed marks the files of collections that changed.
func (x *Exporter) changed(collections []string) {
	for _, c := range collections {
		for _, f := range x.files {
			if f.collection == c {
				f.due = true
			}
		}
	}
}

// export writes each due file whose content changed; it returns how many failed.
func (x *Exporter) export() (failed int) {
	v := x.opts.Store.View()
	for _, f := range x.files {
		if !f.due {
			continue
		}
		if err := x.write(v, f); err != nil {
			failed++
			x.opts.Metrics.ExportWritten(f.Path, err)
			x.log.Error("export failed; the last good file stays, tried again", "path", f.Path, "type", f.Request.GetTypeUrl(),
				"retry_in", x.opts.RetryInterval, "error", err)
			continue
		}
		f.due = false
	}
	return failed
}

// write brings one file up to date: nothing when its content is what it holds.
func (x *Exporter) write(v *store.View, f *file) error {
	body, version, err := Render(x.opts.Engine, v, f.Request, f.Format)
	if err != nil {
		return err
	}
	if f.written != nil && bytes.Equal(body, f.written) {
		return nil
	}
	if err := WriteAtomic(f.Path, body); err != nil {
		return err
	}
	f.written = body
	x.opts.Metrics.ExportWritten(f.Path, nil)
	x.log.Info("exported", "path", f.Path, "type", f.Request.GetTypeUrl(), "node", f.Request.GetNode().GetId(),
		"version", version, "bytes", len(body))
	return nil
}

// Render is a file's content: the DiscoveryResponse to r from view v (everything the node's
// view holds: the export is the operator's, not a peer's, and no authz rule applies), in
// JSON or YAML, and its version.
func Render(e *source.Engine, v *store.View, r *discovery.DiscoveryRequest, format string) ([]byte, string, error) {
	req, typ := xds.PollRequest(r)
	snap, err := e.Snapshot(v, nil, req, typ, Protocol)
	if err != nil {
		return nil, "", err
	}
	msg := snap.Message()
	body, err := xds.EncodeJSON(msg, snap.Form())
	if err != nil {
		return nil, "", err
	}
	if format == YAML {
		if body, err = yaml.JSONToYAML(body); err != nil {
			return nil, "", fmt.Errorf("encoding the response as YAML: %w", err)
		}
	}
	return body, msg.Version, nil
}

// WriteAtomic replaces path with body: written to a temporary file in the same directory
// (a rename is atomic only within one file system), synced, then renamed over path, so that a
// reader sees the old file or the new one, whole. The temporary file is removed on failure.
func WriteAtomic(path string, body []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(body); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil { // CreateTemp makes 0600; readers are other users
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return errors.Join(err, os.Remove(tmp.Name()))
	}
	return nil
}

// pollType is how a file's request is served.
func pollType(r *discovery.DiscoveryRequest) source.Type {
	_, typ := xds.PollRequest(r)
	return typ
}
