package app

import (
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/export"
	"github.com/mcpbridge/mcpbridge/source/rest"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

// wireREST builds REST-JSON polling (http.rest), registered on the HTTP port by wireAdmin.
func (b *Bridge) wireREST() error {
	c := b.cfg.HTTP.REST
	if !c.Enabled {
		return nil
	}
	switch {
	case c.PollTimeout <= 0:
		return ConfigErrorf("http.rest.poll_timeout: must be a positive duration, got %s", c.PollTimeout)
	case c.MaxConcurrentPolls <= 0:
		return ConfigErrorf("http.rest.max_concurrent_polls: must be positive, got %d", c.MaxConcurrentPolls)
	case c.MaxRequestBytes <= 0:
		return ConfigErrorf("http.rest.max_request_bytes: must be positive, got %d", c.MaxRequestBytes)
	case c.MaxPollsPerPeer <= 0:
		return ConfigErrorf("http.rest.max_polls_per_peer: must be positive, got %d", c.MaxPollsPerPeer)
	}
	b.rest = rest.New(rest.Options{
		Engine: b.engine, Store: b.store, Views: b.views(), PollTimeout: c.PollTimeout,
		MaxPolls: c.MaxConcurrentPolls, MaxRequestBytes: c.MaxRequestBytes, MaxPollsPerPeer: c.MaxPollsPerPeer,
		Peers: b.guard.Peers(), Metrics: b.metrics, Logger: b.log.With("component", "rest"),
	})
	return nil
}

// views is what builds proxies' views (gateway classes, namespaces): the translation, or
// nothing.
func (b *Bridge) views() xds.Views {
	if b.translator == nil {
		return nil
	}
	return b.translator
}

// wireExports adds the filesystem exports (exports.files, exports.directory) as runners; they
// write nothing before the bridge is ready.
func (b *Bridge) wireExports() error {
	c := b.cfg.Exports
	if c.Debounce < 0 {
		return ConfigErrorf("exports.debounce: must not be negative, got %s", c.Debounce)
	}
	if c.RetryInterval <= 0 {
		return ConfigErrorf("exports.retry_interval: must be a positive duration, got %s", c.RetryInterval)
	}
	if c.Directory != "" {
		d := export.NewDirectory(export.DirectoryOptions{
			Store: b.store, Path: c.Directory, Ready: b.ready.Ready(), Debounce: c.Debounce,
			RetryInterval: c.RetryInterval, Metrics: b.metrics, Logger: b.log,
		})
		b.runners = append(b.runners, runner{name: "exports.directory", run: d.Run})
	}
	if len(c.Files) == 0 {
		return nil
	}
	files := make([]export.File, 0, len(c.Files))
	for _, f := range c.Files {
		files = append(files, export.File{Path: f.Path, Format: strings.ToLower(f.Format), Request: exportRequest(f)})
	}
	x, err := export.New(export.Options{
		Engine: b.engine, Store: b.store, Views: b.views(), Files: files, Ready: b.ready.Ready(),
		Debounce: c.Debounce, RetryInterval: c.RetryInterval, Metrics: b.metrics, Logger: b.log,
	})
	if err != nil {
		return ConfigErrorf("exports.files%v", err)
	}
	b.runners = append(b.runners, runner{name: "exports", run: x.Run})
	return nil
}

// exportRequest is the DiscoveryRequest an exported file answers: its node as an xDS client
// would send it (metadata LABELS and MCPBRIDGE_NAMESPACES).
func exportRequest(f ExportFile) *discovery.DiscoveryRequest {
	fields := map[string]*structpb.Value{}
	if len(f.Node.Labels) > 0 {
		labels := map[string]*structpb.Value{}
		for k, v := range f.Node.Labels {
			labels[k] = structpb.NewStringValue(v)
		}
		fields["LABELS"] = structpb.NewStructValue(&structpb.Struct{Fields: labels})
	}
	if len(f.Node.Namespaces) > 0 {
		fields[source.NodeNamespacesKey] = structpb.NewStringValue(strings.Join(f.Node.Namespaces, ","))
	}
	return &discovery.DiscoveryRequest{
		TypeUrl: f.TypeURL, ResourceNames: f.ResourceNames,
		Node: &core.Node{Id: f.Node.ID, Metadata: &structpb.Struct{Fields: fields}},
	}
}
