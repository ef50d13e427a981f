package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
)

// bridge is every component of a serving bridge, wired from the configuration.
type bridge struct {
	grpc    *grpc.Server
	health  *health.Server
	engine  *source.Engine
	sink    *sink.Server
	runners []runner
}

// runner is a long-running component: a producer the bridge reads or a sink it pushes to.
type runner struct {
	name  string
	run   func(context.Context) error
	ready <-chan struct{} // nil: not a readiness condition
}

func newBridge(cfg *Config, st *store.Store, log *slog.Logger) (*bridge, error) {
	if err := storeMeshConfig(cfg.XDS.MeshConfigFile, st); err != nil {
		return nil, err
	}
	collections := sinkCollections(cfg)
	node := sink.SinkNode{ID: cfg.Sink.NodeID, Annotations: cfg.Sink.NodeAnnotations}
	sinkServer, err := sink.NewServer(sink.Options{
		Store: st, Collections: collections, SinkNode: node, Expiry: cfg.Sink.Expiry,
		Logger: log,
	})
	if err != nil {
		return nil, &ConfigError{msg: fmt.Sprintf("collections: %v", err)}
	}
	b := &bridge{
		grpc: grpc.NewServer(
			grpc.ForceServerCodecV2(wire.Codec{}), // pre-encoded responses pass through
			grpc.MaxRecvMsgSize(cfg.GRPC.MaxRecvMsgSize),
		),
		health: health.NewServer(),
		engine: source.New(source.Options{
			Store: st, Logger: log.With("component", "source"),
			SendTimeout: cfg.XDS.SendTimeout, MaxResponseSize: cfg.XDS.MaxResponseSize,
		}),
		sink: sinkServer,
	}
	healthpb.RegisterHealthServer(b.grpc, b.health)
	reflection.Register(b.grpc)
	mcp.RegisterResourceSinkServer(b.grpc, b.sink)
	mcp.RegisterResourceSourceServer(b.grpc, &source.ResourceSource{Engine: b.engine})
	mcp.RegisterAggregatedMeshConfigServiceServer(b.grpc, &source.AggregatedMeshConfig{Engine: b.engine})
	(&xds.Server{Engine: b.engine}).Register(b.grpc)

	if len(cfg.Sources.Files) > 0 {
		src := filesource.New(filesource.Options{
			Paths: cfg.Sources.Files, Debounce: cfg.Sources.FileDebounce, Store: st,
			Logger: log,
		})
		b.runners = append(b.runners, runner{name: "sources.files", run: src.Run, ready: src.Ready()})
	}
	for i, t := range cfg.Sources.Upstreams {
		up, err := sink.NewUpstream(sink.UpstreamOptions{
			Target: t, Store: st, Collections: collections, SinkNode: node,
			Logger: log,
		})
		if err != nil {
			return nil, &ConfigError{msg: fmt.Sprintf("sources.upstreams[%d]: %v", i, err)}
		}
		b.runners = append(b.runners, runner{name: "upstream " + t.Address, run: up.Run, ready: up.Ready()})
	}
	for _, t := range cfg.Downstreams {
		d := &source.Downstream{Target: t, Engine: b.engine, Logger: log.With("component", "downstream")}
		b.runners = append(b.runners, runner{name: "downstream " + t.Address, run: d.Run})
	}
	return b, nil
}

// stop ends every stream with Unavailable; the gRPC server stops after.
func (b *bridge) stop() {
	b.health.Shutdown()
	b.engine.Stop()
	b.sink.Stop()
}

func sinkCollections(cfg *Config) []sink.Collection {
	var out []sink.Collection
	for _, name := range cfg.Collections {
		out = append(out, sink.Collection{Name: name, Incremental: cfg.Sink.Incremental})
	}
	if len(out) == 0 {
		for _, c := range sink.DefaultCollections() {
			out = append(out, sink.Collection{Name: c.Name, Incremental: cfg.Sink.Incremental})
		}
	}
	return out
}

// storeMeshConfig serves the configured MeshConfig (YAML or JSON), or an empty one.
func storeMeshConfig(path string, st *store.Store) error {
	mc := &meshv1alpha1.MeshConfig{}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return &ConfigError{msg: fmt.Sprintf("xds.mesh_config_file: %v", err)}
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return &ConfigError{msg: fmt.Sprintf("xds.mesh_config_file %s: %v", path, err)}
		}
		if err := protojson.Unmarshal(js, mc); err != nil {
			return &ConfigError{msg: fmt.Sprintf("xds.mesh_config_file %s: not a MeshConfig: %v", path, err)}
		}
	}
	return xds.StoreMeshConfig(st, mc)
}
