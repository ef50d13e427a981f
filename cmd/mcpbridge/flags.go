package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// The client commands (watch, push, status) share their flags' names, as kubectl's and
// istioctl's do: -o/--output for what is printed, --addr for the server.

// defaultClientAddr is the bridge's default grpc.address, where the client commands connect
// unless told otherwise.
const defaultClientAddr = "127.0.0.1:15010"

// addAddrFlag declares --addr, the server's address, with the names the command used before as
// hidden aliases (kept for a release; resolveAddr reads them).
func addAddrFlag(fs *pflag.FlagSet, usage string, oldNames ...string) {
	fs.String("addr", defaultClientAddr, usage)
	for _, old := range oldNames {
		fs.String(old, "", "the old name of --addr")
		_ = fs.MarkHidden(old)
	}
}

// resolveAddr sets --addr from an old name of it given instead; both given is a usage error.
func resolveAddr(fs *pflag.FlagSet) error {
	for _, old := range []string{"from", "to"} {
		f := fs.Lookup(old)
		if f == nil || !f.Changed {
			continue
		}
		if fs.Changed("addr") {
			return usageError{fmt.Errorf("--%s is the old name of --addr: give --addr only", old)}
		}
		if err := fs.Set("addr", f.Value.String()); err != nil {
			return usageError{err}
		}
	}
	return nil
}

// addOutputFlag declares -o/--output with the formats a command prints, the first the default.
func addOutputFlag(fs *pflag.FlagSet, formats ...string) {
	fs.StringP("output", "o", formats[0], "output format: "+strings.Join(formats, ", "))
}

// outputFormat is -o/--output, checked against the formats the command prints.
func outputFormat(fs *pflag.FlagSet, formats ...string) (string, error) {
	o, _ := fs.GetString("output")
	if !slices.Contains(formats, o) {
		return "", usageError{fmt.Errorf("--output: %q is not one of %s", o, strings.Join(formats, ", "))}
	}
	return o, nil
}
