package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// mainModule is the module whose command the image runs.
const mainModule = "github.com/mcpbridge/mcpbridge"

// versionVar is where the Makefile stamps the version (-X), read by `mcpbridge version` and
// the bridge's log and metrics (internal/buildinfo).
const versionVar = mainModule + "/internal/buildinfo.Version"

// arches are the GOARCH values the image can be built for: those whose OCI platform is the
// GOARCH alone (arm needs a variant, and 386 has no use next to istiod).
var arches = []string{"amd64", "arm64", "ppc64le", "s390x", "riscv64"}

// build makes the binary of one architecture: buildBinary, a variable so that the tests of
// what is made of the binaries can give stand-ins instead of minutes of go build.
var build = buildBinary

// buildBinary builds cmd/mcpbridge of the repository at src for linux/arch, as the image needs
// it: static (CGO_ENABLED=0, so it runs on an image with no C library), without the paths of
// the machine that built it (-trimpath) and without VCS stamping (-buildvcs=false: the version
// and the revision label say which commit, and a stamp would make the binary depend on the
// state of .git, which a Docker build context usually lacks), symbols stripped (-s -w: stack
// traces keep their function names). The same source and Go toolchain give the same bytes.
func buildBinary(ctx context.Context, src, version, arch string) ([]byte, error) {
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	if err := checkArch(arch); err != nil {
		return nil, err
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("building mcpbridge needs the go command: %w", err)
	}
	dir, err := os.MkdirTemp("", "mcpbridge-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "mcpbridge")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X "+versionVar+"="+version, "-o", out, "./cmd/mcpbridge")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/mcpbridge in %s: %v\n%s", src, err, bytes.TrimSpace(b))
	}
	return os.ReadFile(out)
}

func checkArch(arch string) error {
	if !slices.Contains(arches, arch) {
		return fmt.Errorf("-arch %q: not one of %s", arch, strings.Join(arches, ", "))
	}
	return nil
}

// checkVersion refuses what cannot be stamped with -X as one value, nor shown as a label.
func checkVersion(v string) error {
	if v == "" {
		return errors.New("-version: empty (give the version to stamp, such as git describe's)")
	}
	if strings.ContainsAny(v, " \t\r\n'\"\\") || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("-version %q: holds a space, quote, backslash or control character", v)
	}
	return nil
}

// findSource returns the root of the mcpbridge repository: dir, or the nearest parent of it
// whose go.mod declares the main module.
func findSource(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if modulePath(filepath.Join(d, "go.mod")) == mainModule {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of module %s in %s or a parent (give -src)", mainModule, abs)
		}
	}
}

// checkSource says whether src is the root of the mcpbridge repository.
func checkSource(src string) error {
	if m := modulePath(filepath.Join(src, "go.mod")); m != mainModule {
		if m == "" {
			return fmt.Errorf("-src %s: no go.mod there", src)
		}
		return fmt.Errorf("-src %s: its go.mod is module %s, not %s", src, m, mainModule)
	}
	return nil
}

// modulePath is the module line of a go.mod, or "" if there is none.
func modulePath(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}
