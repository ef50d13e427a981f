package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

// DirectoryOptions configures a Directory export.
type DirectoryOptions struct {
	Store *store.Store
	// Path is the directory; it is created if missing.
	Path string
	// Ready, if set, holds the first write back until it is closed (the bridge's sources
	// loaded and translated), so that the directory never mirrors a partial state.
	Ready         <-chan struct{}
	Debounce      time.Duration // as Options.Debounce
	RetryInterval time.Duration // as Options.RetryInterval
	Metrics       *metrics.Metrics
	Logger        *slog.Logger
}

// Directory keeps a directory of Kubernetes-style Istio YAML of every stored collection of a
// kind the bridge knows (kinds.Kinds): one file per collection, PLURAL.GROUP.yaml
// (serviceentries.networking.istio.io.yaml), each resource a document with its apiVersion
// (the kind's canonical version), kind, metadata (name, namespace, labels, annotations,
// resourceVersion: the stored version, creationTimestamp) and spec. The file source loads it
// back into the same resources, versions included, and mcpbridge validate accepts it: a backup
// and a hand-off to GitOps. The derived Envoy resources and MeshConfig are not Istio config and
// are not written; a collection that empties loses its file.
type Directory struct {
	opts DirectoryOptions
	log  *slog.Logger
	// written is what each file holds, by collection.
	written map[string][]byte
}

// NewDirectory returns a directory export.
func NewDirectory(opts DirectoryOptions) *Directory {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Metrics.DeclareExport(opts.Path)
	return &Directory{opts: opts, log: opts.Logger.With("component", "export"), written: map[string][]byte{}}
}

// FileName is the file of a kind's collection in the directory.
func FileName(k *kinds.Kind) string { return path.Base(k.Collection) + "." + k.Group + ".yaml" }

// Run writes every collection's file, then each again when its collection changes, until ctx
// ends.
func (d *Directory) Run(ctx context.Context) error {
	due := map[string]bool{}
	for _, k := range kinds.Kinds() {
		due[k.Collection] = true
	}
	// The Istio kinds' collections only (the Envoy resources the translation derives after
	// each change are not exported); before the first read.
	watch := d.opts.Store.Watch(slices.Collect(maps.Keys(due))...)
	defer watch.Close()
	if !waitReady(ctx, d.opts.Ready) {
		return nil
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-watch.C():
			for _, c := range watch.Changed() {
				if k, ok := kinds.ByCollection(c); ok && k.Collection == c {
					due[c] = true
				}
			}
			timer.Reset(d.opts.Debounce)
			continue
		case <-timer.C:
		}
		if d.export(due) > 0 {
			timer.Reset(d.opts.RetryInterval)
		}
	}
}

// export writes the due collections' files; it returns how many failed (they stay due).
func (d *Directory) export(due map[string]bool) (failed int) {
	if err := os.MkdirAll(d.opts.Path, 0o755); err != nil {
		d.failed(err)
		return 1
	}
	v := d.opts.Store.View()
	for c := range due {
		k, _ := kinds.ByCollection(c)
		if err := d.write(v, k); err != nil {
			failed++
			d.failed(fmt.Errorf("%s: %w", FileName(k), err))
			continue
		}
		delete(due, c)
	}
	return failed
}

func (d *Directory) failed(err error) {
	d.opts.Metrics.ExportWritten(d.opts.Path, err)
	d.log.Error("export of Istio YAML failed; the last good files stay, tried again", "directory", d.opts.Path,
		"retry_in", d.opts.RetryInterval, "error", err)
}

// write brings one collection's file up to date.
func (d *Directory) write(v *store.View, k *kinds.Kind) error {
	file := filepath.Join(d.opts.Path, FileName(k))
	_, entries := v.Snapshot(k.Collection)
	if len(entries) == 0 {
		if old, known := d.written[k.Collection]; known && old == nil {
			return nil // known to be absent
		}
		err := os.Remove(file)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		d.written[k.Collection] = nil
		if err == nil {
			d.log.Info("exported: removed the file of an empty collection", "path", file, "collection", k.Collection)
		}
		return nil
	}
	body, err := RenderCollection(k, entries)
	if err != nil {
		return err
	}
	if old, ok := d.written[k.Collection]; ok && bytes.Equal(old, body) {
		return nil
	}
	if err := WriteAtomic(file, body); err != nil {
		return err
	}
	d.written[k.Collection] = body
	d.opts.Metrics.ExportWritten(d.opts.Path, nil)
	d.log.Info("exported", "path", file, "collection", k.Collection, "resources", len(entries), "bytes", len(body))
	return nil
}

// RenderCollection is the Istio YAML of a collection's entries, one document each, in the
// order given (the store's: by name).
func RenderCollection(k *kinds.Kind, entries []*store.Entry) ([]byte, error) {
	var out bytes.Buffer
	for i, e := range entries {
		doc, err := renderResource(k, e)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", k.Kind, e.Name, err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(doc)
	}
	return out.Bytes(), nil
}

// renderResource is one resource as a Kubernetes-style document.
func renderResource(k *kinds.Kind, e *store.Entry) ([]byte, error) {
	r, err := e.Decode()
	if err != nil {
		return nil, err
	}
	spec, err := r.GetBody().UnmarshalNew()
	if err != nil {
		return nil, err
	}
	specJSON, err := protojson.Marshal(spec)
	if err != nil {
		return nil, err
	}
	md := r.GetMetadata()
	meta := map[string]any{}
	if ns, name, ok := strings.Cut(md.GetName(), "/"); ok {
		meta["namespace"], meta["name"] = ns, name
	} else {
		meta["name"] = md.GetName() // a producer's name without a namespace loads as default/NAME
	}
	if len(md.GetLabels()) > 0 {
		meta["labels"] = md.GetLabels()
	}
	if len(md.GetAnnotations()) > 0 {
		meta["annotations"] = md.GetAnnotations()
	}
	if md.GetVersion() != "" {
		meta["resourceVersion"] = md.GetVersion()
	}
	if md.GetCreateTime() != nil {
		meta["creationTimestamp"] = md.GetCreateTime().AsTime().UTC().Format(time.RFC3339Nano)
	}
	doc, err := json.Marshal(map[string]any{
		"apiVersion": k.Group + "/" + k.Version, "kind": k.Kind, "metadata": meta, "spec": json.RawMessage(specJSON),
	})
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(doc)
}

// waitReady waits for ready (nil: at once); false when ctx ended first.
func waitReady(ctx context.Context, ready <-chan struct{}) bool {
	if ready == nil {
		return true
	}
	select {
	case <-ready:
		return true
	case <-ctx.Done():
		return false
	}
}
