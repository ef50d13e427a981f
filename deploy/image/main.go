// Command image builds mcpbridge's container image without a Docker daemon and without a
// network: it builds the static binary, lays it and a few files (users, CA certificates, the
// image's default configuration) as layers on an empty base with go-containerregistry, and
// writes the image as a tarball that `docker load`, `podman load`, `ctr images import` and
// `kind load image-archive` take. With several -platforms it builds one image per platform and
// writes them with their OCI image index as an OCI image layout (layout.go says who loads it).
// The same source, Go toolchain, version and SOURCE_DATE_EPOCH give the same image digest.
//
//	go run . -version v1.2.3 -o mcpbridge-image.tar     # from deploy/image; make image does this
//	go run . -version v1.2.3 -platforms linux/amd64,linux/arm64 -o mcpbridge-image.tar
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
	o, code := parseArgs(args, getenv, stderr)
	if o == nil {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	specs, err := makeSpecs(ctx, o)
	if err != nil {
		return fail(err)
	}
	switch {
	case o.rootfs != "":
		if err := writeRootfs(o.rootfs, specs[0]); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: the image's files (mcpbridge %s, linux/%s)\n", o.rootfs, o.version, specs[0].arch)
	case len(specs) == 1:
		err = writeSingle(o, specs[0], stdout)
	default:
		err = writeMulti(o, specs, stdout)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

// options are a command line, checked.
type options struct {
	src, version, revision string
	arches                 []string // GOARCH values: one makes a docker save tarball, more an OCI layout
	tag                    name.Tag
	out, rootfs            string
	created                time.Time // SOURCE_DATE_EPOCH
}

// parseArgs checks a command line and its environment before anything is built. With nil
// options, run exits with the code: 0 for -h, 2 for what is wrong, said in one line.
func parseArgs(args []string, getenv func(string) string, stderr io.Writer) (*options, int) {
	fl := flag.NewFlagSet("image", flag.ContinueOnError)
	fl.SetOutput(stderr)
	src := fl.String("src", "", "root of the mcpbridge repository (default: the nearest parent directory whose go.mod is module "+mainModule+")")
	version := fl.String("version", "dev", "version to stamp into the binary (internal/buildinfo.Version) and the image's labels")
	revision := fl.String("revision", "", "commit of the source, for the org.opencontainers.image.revision label")
	arch := fl.String("arch", runtime.GOARCH, "GOARCH of the binary and architecture of the image ("+strings.Join(arches, ", ")+")")
	platforms := fl.String("platforms", "", "OS/ARCH,...: with several, one image per platform and an OCI image index, written as an OCI image layout tarball; with one, its image alone in the docker save format (default: linux/ARCH of -arch, a docker save tarball)")
	tag := fl.String("tag", "", "repository:tag recorded in the tarball, the name docker load gives the image (default mcpbridge:VERSION)")
	out := fl.String("o", "", "write the image to this tarball (the docker save format; with several -platforms, an OCI image layout)")
	rootfs := fl.String("rootfs", "", "instead of a tarball, write the image's files into this directory (what the Dockerfile copies)")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: image [flags] (-o FILE | -rootfs DIR)\n\nSOURCE_DATE_EPOCH (seconds since 1970) is the time of every timestamp in the image; unset: 0.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	usage := func(format string, a ...any) (*options, int) {
		fmt.Fprintf(stderr, "image: "+format+"\n", a...)
		return nil, 2
	}
	if fl.NArg() > 0 {
		return usage("unexpected argument %q", fl.Arg(0))
	}
	if (*out == "") == (*rootfs == "") {
		return usage("give one of -o FILE (a tarball) or -rootfs DIR")
	}
	o := &options{version: *version, revision: *revision, out: *out, rootfs: *rootfs}
	var err error
	if o.created, err = sourceDateEpoch(getenv("SOURCE_DATE_EPOCH")); err != nil {
		return usage("%v", err)
	}
	if err := checkVersion(o.version); err != nil {
		return usage("%v", err)
	}
	if o.arches, err = platformArches(fl, *arch, *platforms); err != nil {
		return usage("%v", err)
	}
	if len(o.arches) > 1 && o.rootfs != "" {
		return usage("-rootfs writes the files of one platform: give -arch, not -platforms %s", *platforms)
	}
	if *tag == "" {
		*tag = defaultTag(o.version)
	}
	if o.tag, err = parseTag(*tag); err != nil {
		return usage("%v", err)
	}
	if o.src = *src; o.src == "" {
		if o.src, err = findSource("."); err != nil {
			return usage("%v", err)
		}
	} else if err := checkSource(o.src); err != nil {
		return usage("%v", err)
	}
	return o, 0
}

// platformArches are the architectures to build: those of -platforms, or -arch's one. Both
// given is refused rather than one silently winning.
func platformArches(fl *flag.FlagSet, arch, platforms string) ([]string, error) {
	if platforms == "" {
		if arch == "" {
			arch = runtime.GOARCH // the Dockerfile passes TARGETARCH, empty without BuildKit
		}
		if err := checkArch(arch); err != nil {
			return nil, err
		}
		return []string{arch}, nil
	}
	archSet := false
	fl.Visit(func(f *flag.Flag) { archSet = archSet || f.Name == "arch" })
	if archSet {
		return nil, fmt.Errorf("give -arch or -platforms, not both (-arch %s, -platforms %s)", arch, platforms)
	}
	return parsePlatforms(platforms)
}

// makeSpecs builds the binary of each architecture, one after the other (each go build uses
// every core), and makes the spec of its image.
func makeSpecs(ctx context.Context, o *options) ([]spec, error) {
	ca, _, err := caBundle()
	if err != nil {
		return nil, err
	}
	var specs []spec
	for _, arch := range o.arches {
		bin, err := build(ctx, o.src, o.version, arch)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec{version: o.version, revision: o.revision, arch: arch, created: o.created, binary: bin, caBundle: ca})
	}
	return specs, nil
}

// writeSingle writes the image of one platform in the docker save format, and says its
// digest and image ID.
func writeSingle(o *options, s spec, stdout io.Writer) error {
	img, err := buildImage(s)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	id, err := img.ConfigName()
	if err != nil {
		return err
	}
	if err := writeTarball(o.out, o.tag, img); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s (mcpbridge %s, linux/%s)\n", o.out, o.tag, o.version, s.arch)
	fmt.Fprintf(stdout, "digest:   %s  (the manifest's, as go-containerregistry reads the tarball back: crane push pushes it so)\n", digest)
	fmt.Fprintf(stdout, "image id: %s  (the config's: what docker images and podman images show)\n", id)
	return nil
}

// writeMulti writes the images of several platforms and their index as an OCI image layout,
// and says the index's digest and each image's.
func writeMulti(o *options, specs []spec, stdout io.Writer) error {
	idx, err := buildIndex(specs)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if err := writeFile(o.out, func(w io.Writer) error { return writeLayout(w, o.tag, idx, o.created) }); err != nil {
		return err
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.String())
	}
	fmt.Fprintf(stdout, "%s: %s (mcpbridge %s, %s: an image index, in an OCI image layout)\n", o.out, o.tag, o.version, strings.Join(platforms, ", "))
	fmt.Fprintf(stdout, "digest:   %s  (the image index's: a registry gives the image this digest once pushed)\n", digest)
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			return err
		}
		id, err := img.ConfigName()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-12s %s  image id %s\n", m.Platform.String()+":", m.Digest, id)
	}
	return nil
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

// writeFile writes a tarball to path: the docker save format (manifest.json, the config, the
// gzipped layers), which every docker load and podman load take, or an OCI image layout. It
// writes a file beside path and renames it, so that path is never half written.
func writeFile(path string, write func(io.Writer) error) (err error) {
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
	if err := write(f); err != nil {
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

// writeTarball writes the image to path in the docker save format.
func writeTarball(path string, tag name.Tag, img v1.Image) error {
	return writeFile(path, func(w io.Writer) error { return tarball.Write(tag, img, w) })
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
