// Package buildinfo holds what the binary knows about its own build.
package buildinfo

import "runtime/debug"

// Version is set at link time by the Makefile (-X); a plain `go build` reports the module
// version when built as a dependency, or "dev".
var Version = ""

// String returns the version to print.
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
