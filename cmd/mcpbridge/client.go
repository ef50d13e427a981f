package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/app"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/store"
)

// What validate, push and watch share: dialling a peer as a client, and reading Istio YAML
// exactly as the file source of serve does.

// addDialFlags declares the TLS flags of a command that dials; plaintext without them.
func addDialFlags(fs *pflag.FlagSet) {
	fs.String("ca-file", "", "CA certificates (PEM) that verify the server; enables TLS")
	fs.String("cert-file", "", "client certificate (PEM), for mutual TLS; with --key-file")
	fs.String("key-file", "", "client key (PEM), for mutual TLS; with --cert-file")
	fs.String("server-name", "", "name checked in the server's certificate; enables TLS")
}

// dialFlags dials the address a flag names, with the TLS flags. A bad address or TLS file is
// a usage error (exit 2).
func dialFlags(fs *pflag.FlagSet, addrFlag string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	addr, _ := fs.GetString(addrFlag)
	if addr == "" {
		return nil, usageError{fmt.Errorf("--%s ADDR is required", addrFlag)}
	}
	if err := validateAddress(addr); err != nil {
		return nil, usageError{fmt.Errorf("--%s: %q is not host:port: %v", addrFlag, addr, err)}
	}
	t := dial.Target{Address: addr}
	var tlsCfg dial.TLS
	tlsCfg.CAFile, _ = fs.GetString("ca-file")
	tlsCfg.CertFile, _ = fs.GetString("cert-file")
	tlsCfg.KeyFile, _ = fs.GetString("key-file")
	tlsCfg.ServerName, _ = fs.GetString("server-name")
	if tlsCfg != (dial.TLS{}) {
		t.TLS = &tlsCfg
	}
	opts, err := dial.Options(t)
	if err != nil {
		return nil, usageError{err}
	}
	conn, err := grpc.NewClient(addr, append(opts, extra...)...)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s %s: %v", addrFlag, addr, err)}
	}
	return conn, nil
}

// rpcError is a gRPC error as one line that names what failed: "open stream to ADDR:
// connection refused".
func rpcError(what string, err error) error {
	if s, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s (%s)", what, s.Message(), s.Code())
	}
	return fmt.Errorf("%s: %w", what, err)
}

// checkPaths refuses a path that does not exist: a usage error, before anything is read.
func checkPaths(paths []string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return usageError{fmt.Errorf("%s: no such file or directory", p)}
		} else if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// files is Istio YAML read into a store of its own, by the file source that serve runs: the
// same decoding, the same directory rules (*.yaml and *.yml directly inside), the same checks.
type files struct {
	store  *store.Store
	source *filesource.Source
}

func newFiles(paths []string, log *slog.Logger) *files {
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	// push --watch follows the files as serve does, with sources.file_debounce's default.
	return &files{store: st, source: filesource.New(filesource.Options{
		Paths: paths, Debounce: app.DefaultConfig().Sources.FileDebounce, Store: st, Logger: log,
	})}
}

// loadOnce reads the files once and returns their faults. The source's Run reloads once and
// then follows changes until its context ends: with a context already ended, it only loads.
func (f *files) loadOnce() ([]error, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.source.Run(ctx); err != nil {
		return nil, err
	}
	return f.source.Faults(), nil
}

// resources counts what the files hold, and in how many collections.
func (f *files) resources() (count, collections int) {
	for _, c := range f.store.View().Collections() {
		if c.Count > 0 {
			count += c.Count
			collections++
		}
	}
	return count, collections
}
