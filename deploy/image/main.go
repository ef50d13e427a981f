// Command image builds mcpbridge's container image without a Docker daemon and without a
// network: it builds the static binary, lays it and a few files (users, CA certificates, the
// image's default configuration) as layers on an empty base with go-containerregistry, and
// writes the image as a tarball that `docker load` and `podman load` take. The same source,
// Go toolchain, version and SOURCE_DATE_EPOCH give the same image digest.
//
//	go run . -version v1.2.3 -o mcpbridge-image.tar     # from deploy/image; make image does this
//	go run . -version v1.2.3 -rootfs DIR                 # the same files in a directory (the Dockerfile)
//
// It lives in a module of its own so that go-containerregistry, a build tool's dependency,
// stays out of the module graph of mcpbridge and of every program that imports its packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status: 0, 1 for a failure, 2 for a bad
// command line or environment. Errors are printed as one line (the go build output that may
// follow is the compiler's own).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("image", flag.ContinueOnError)
	fl.SetOutput(stderr)
	src := fl.String("src", "", "root of the mcpbridge repository (default: the nearest parent directory whose go.mod is module "+mainModule+")")
	version := fl.String("version", "dev", "version to stamp into the binary (internal/buildinfo.Version) and the image's labels")
	revision := fl.String("revision", "", "commit of the source, for the org.opencontainers.image.revision label")
	arch := fl.String("arch", runtime.GOARCH, "GOARCH of the binary and architecture of the image (amd64, arm64, ppc64le, s390x, riscv64)")
	tag := fl.String("tag", "", "repository:tag recorded in the tarball, the name docker load gives the image (default mcpbridge:VERSION)")
	out := fl.String("o", "", "write the image to this tarball (the docker save format)")
	rootfs := fl.String("rootfs", "", "instead of a tarball, write the image's files into this directory (what the Dockerfile copies)")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: image [flags] (-o FILE | -rootfs DIR)\n\nSOURCE_DATE_EPOCH (seconds since 1970) is the time of every timestamp in the image; unset: 0.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "image: "+format+"\n", a...)
		return 2
	}
	if fl.NArg() > 0 {
		return usage("unexpected argument %q", fl.Arg(0))
	}
	if (*out == "") == (*rootfs == "") {
		return usage("give one of -o FILE (a tarball) or -rootfs DIR")
	}
	if *arch == "" {
		*arch = runtime.GOARCH // the Dockerfile passes TARGETARCH, empty without BuildKit
	}
	created, err := sourceDateEpoch(getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return usage("%v", err)
	}
	if err := checkVersion(*version); err != nil {
		return usage("%v", err)
	}
	if err := checkArch(*arch); err != nil {
		return usage("%v", err)
	}
	if *tag == "" {
		*tag = defaultTag(*version)
	}
	ref, err := parseTag(*tag)
	if err != nil {
		return usage("%v", err)
	}
	if *src == "" {
		if *src, err = findSource("."); err != nil {
			return usage("%v", err)
		}
	} else if err := checkSource(*src); err != nil {
		return usage("%v", err)
	}

	fail := func(err error) int {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	bin, err := buildBinary(ctx, *src, *version, *arch)
	if err != nil {
		return fail(err)
	}
	ca, _, err := caBundle()
	if err != nil {
		return fail(err)
	}
	s := spec{version: *version, revision: *revision, arch: *arch, created: created, binary: bin, caBundle: ca}

	if *rootfs != "" {
		if err := writeRootfs(*rootfs, s); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: the image's files (mcpbridge %s, linux/%s)\n", *rootfs, *version, *arch)
		return 0
	}
	img, err := buildImage(s)
	if err != nil {
		return fail(err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fail(err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return fail(err)
	}
	if err := writeTarball(*out, ref, img); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%s: %s (linux/%s)\n", *out, *tag, *arch)
	fmt.Fprintf(stdout, "digest:   %s  (the manifest's, as go-containerregistry reads the tarball back: crane push pushes it so)\n", digest)
	fmt.Fprintf(stdout, "image id: %s  (the config's: what docker images and podman images show)\n", id)
	return 0
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (reproducible-builds.org): the image's timestamps
// come from the source, not from the clock, so that a build made again is the same image.
func sourceDateEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > 253402300799 { // up to 9999-12-31, what RFC 3339 can write
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a number of seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// writeTarball writes the image to path in the docker save format (manifest.json, the config,
// the gzipped layers), which every docker load and podman load take. It writes a file beside
// path and renames it, so that path is never half written.
func writeTarball(path string, tag name.Tag, img v1.Image) (err error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := tarball.Write(tag, img, f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

// writeRootfs writes the image's files into dir, with their modes: the Dockerfile builds
// with it, so that an image built by Docker holds the same files as the tarball. dir must not
// exist or be empty: what else it held would be copied into the image too.
func writeRootfs(dir string, s spec) error {
	if des, err := os.ReadDir(dir); err == nil && len(des) > 0 {
		return fmt.Errorf("-rootfs %s: not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("-rootfs %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, l := range layers(s) {
		for _, e := range l.entries {
			p := filepath.Join(dir, filepath.FromSlash(e.path))
			if e.mode.IsDir() {
				if err := os.MkdirAll(p, 0o755); err != nil {
					return err
				}
			} else if err := os.WriteFile(p, e.data, 0o600); err != nil {
				return err
			}
			// Chmod: the modes must not depend on the umask of the machine.
			if err := os.Chmod(p, e.mode.Perm()); err != nil {
				return err
			}
		}
	}
	return nil
}
