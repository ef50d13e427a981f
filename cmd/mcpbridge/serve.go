package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/mcpbridge/mcpbridge/internal/admin"
	"github.com/mcpbridge/mcpbridge/internal/buildinfo"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

func newServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the bridge until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
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
// streams, and returns nil. An error is a run-time failure (exit 1).
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

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	st := store.New(store.Options{
		Validate:           translate.ValidateResource,
		TombstoneRetention: cfg.Store.TombstoneRetention,
		Logger:             log.With("component", "store"),
	})
	b, err := newBridge(cfg, st, log)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	ready := admin.NewReadiness()
	grpcReady := ready.Wait("grpc")
	httpServer := &http.Server{Handler: admin.Handler(ready), ReadHeaderTimeout: 10 * time.Second}

	var wg sync.WaitGroup
	errs := make(chan error, 4+len(b.runners))
	wg.Go(func() { st.Run(ctx) })
	wg.Go(func() {
		if err := b.grpc.Serve(grpcLis); err != nil {
			errs <- fmt.Errorf("grpc server: %w", err)
		}
	})
	wg.Go(func() {
		if err := httpServer.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("http server: %w", err)
		}
	})
	b.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	grpcReady()
	for _, r := range b.runners {
		var done func()
		if r.ready != nil {
			done = ready.Wait(r.name)
		}
		wg.Go(func() {
			if err := r.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", r.name, err)
			}
		})
		if r.ready != nil {
			wg.Go(func() { waitReady(ctx, log, r.name, r.ready, cfg.Sources.StartupTimeout, done) })
		}
	}
	log.Info("mcpbridge serving", "version", buildinfo.String(),
		"grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "files", cfg.Sources.Files,
		"upstreams", len(cfg.Sources.Upstreams), "downstreams", len(cfg.Downstreams))

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case runErr = <-errs:
		log.Error("stopping after a failure", "error", runErr)
	}
	cancel()
	b.stop()
	stopGRPC(b.grpc, cfg.GRPC.ShutdownGrace)
	shutdownCtx, done := context.WithTimeout(context.Background(), cfg.GRPC.ShutdownGrace)
	httpServer.Shutdown(shutdownCtx)
	done()
	wg.Wait()
	return runErr
}

// stopGRPC stops accepting and lets streams end for up to grace, then closes what is left.
// Streams still open are ended by the cancelled serving context with Unavailable.
func stopGRPC(s *grpc.Server, grace time.Duration) {
	stopped := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(grace):
		s.Stop()
		<-stopped
	}
}

// waitReady marks a source ready once it delivered its first full state, or when the start-up
// timeout passes (logged, so an operator knows readiness did not mean loaded).
func waitReady(ctx context.Context, log *slog.Logger, name string, srcReady <-chan struct{}, timeout time.Duration, done func()) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-srcReady:
		done()
	case <-t.C:
		log.Warn("source has not delivered its first full state; ready anyway", "source", name, "startup_timeout", timeout)
		done()
	case <-ctx.Done():
	}
}
