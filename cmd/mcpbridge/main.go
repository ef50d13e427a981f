// Command mcpbridge moves mesh configuration between the generations and dialects of the mesh
// configuration protocols (MCP, xDS) from one in-memory store. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mcpbridge/mcpbridge/internal/buildinfo"
)

// Exit statuses (CONTRACT.md section 2).
const (
	exitOK      = 0
	exitRuntime = 1 // a failure at run time: one line saying what failed
	exitUsage   = 2 // a bad command line or configuration: one line naming the key or flag
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status. Errors are printed as one line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "mcpbridge: %v\n", err)
	var cerr *ConfigError
	if errors.As(err, &cerr) || isUsageError(err) {
		return exitUsage
	}
	return exitRuntime
}

// usageError marks cobra's own errors (unknown command or flag, bad arguments).
type usageError struct{ error }

func isUsageError(err error) bool {
	var u usageError
	// cobra reports an unknown subcommand with an untyped error.
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command")
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "mcpbridge",
		Short: "A bridge for mesh configuration: MCP sink and source, and xDS server, from one store",
		// Errors are printed once, by run, as one line; usage only on request.
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{errors.New("a command is required: serve, validate, push, watch, status, version (see mcpbridge --help)")}
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newServeCommand(), newValidateCommand(), newPushCommand(), newWatchCommand(), newStatusCommand(), newVersionCommand())
	for _, c := range root.Commands() {
		wrapArgs(c)
	}
	return root
}

// wrapArgs makes a command's argument-count errors usage errors (exit 2).
func wrapArgs(c *cobra.Command) {
	check := c.Args
	if check == nil {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "mcpbridge %s\n", buildinfo.String())
			return nil
		},
	}
}
