package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/mcpbridge/mcpbridge/app"
)

func newServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [flags]",
		Short: "Run the bridge until SIGINT or SIGTERM",
		Long: `Run the bridge: its gRPC services (MCP sink and source, xDS, Linkerd, CSDS) on
grpc.address and health, metrics, debug views and the status page on http.address, serving
the sources configured (files, upstreams, Kubernetes, ZooKeeper) until SIGINT or SIGTERM.

Configuration comes from, in this order of precedence: flags, MCPBRIDGE_ environment
variables (MCPBRIDGE_ and the key upper-cased, "." as "_"), the --config file (keys as in
config.yaml, which documents every one), and the defaults. An unknown key or variable, or a
value that does not decode, exits 2 naming it.`,
		Example: `  mcpbridge serve --config config.yaml
  mcpbridge serve --files examples/ --log-level debug
  MCPBRIDGE_GRPC_ADDRESS=0.0.0.0:15010 MCPBRIDGE_GRPC_INSECURE=true mcpbridge serve --config config.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd.Flags())
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, newLogger(cfg.Log, cmd.ErrOrStderr()), nil)
		},
	}
	addConfigFlags(cmd.Flags())
	return cmd
}

func newLogger(c LogConfig, w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.Level) // validated with the configuration
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// listening reports the bound addresses once both ports listen; tests use it with port 0.
type listening func(grpcAddr, httpAddr net.Addr)

// serve runs the bridge until ctx ends, then stops gracefully: it stops accepting, ends
// streams, and returns nil. An error is a run-time failure (exit 1), or a *ConfigError (exit 2).
func serve(ctx context.Context, cfg *Config, log *slog.Logger, onListen listening) error {
	grpcLis, err := net.Listen("tcp", cfg.GRPC.Address)
	if err != nil {
		return fmt.Errorf("grpc.address: %w", err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTP.Address)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("http.address: %w", err)
	}
	if onListen != nil {
		onListen(grpcLis.Addr(), httpLis.Addr())
	}
	applyMemoryLimit(cfg.Memory.Limit, log)
	applyGCPercent(cfg.Memory.GCPercent, log)
	b, err := app.New(cfg, log)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	return b.Serve(ctx, grpcLis, httpLis)
}
