package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things are in the image. The Dockerfile at the repository's root uses the same paths,
// user, ports and command (TestDockerfileMatchesTool holds it to them).
const (
	binaryPath = "/usr/local/bin/mcpbridge"
	configPath = "/etc/mcpbridge/config.yaml"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"

	// uid and gid of the user the bridge runs as: distroless's "nonroot", so that policies
	// written for distroless images (runAsUser: 65532) fit this one too.
	uid      = 65532
	gid      = 65532
	userName = "nonroot"

	grpcPort = "15010/tcp"
	httpPort = "15014/tcp"

	sourceURL   = "https://github.com/mcpbridge/mcpbridge"
	description = "A bridge for mesh configuration: MCP sink and source, and xDS server, from one store"
)

// imageConfig is the image's default configuration file (see its comments for why it is not
// the repository's config.yaml).
//
//go:embed config.yaml
var imageConfig []byte

// passwd and group name the image's users. Nothing in the image belongs to nonroot and no home
// directory exists: the bridge writes no file, so the root filesystem can be mounted read-only.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		userName + ":x:65532:65532:" + userName + ":/nonexistent:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		userName + ":x:65532:\n"
)

// spec is everything an image is made from: the same spec gives the same image, byte for byte.
type spec struct {
	version  string    // as stamped into the binary (buildinfo.Version)
	revision string    // the commit, for the revision label; may be empty
	arch     string    // GOARCH of the binary, and the image's architecture
	created  time.Time // every timestamp in the image: SOURCE_DATE_EPOCH, not the clock
	binary   []byte    // the static mcpbridge binary
	caBundle []byte    // PEM
	oci      bool      // OCI's media types (an image of an index); false: Docker's (docker save)
}

// entry is one file or directory of a layer. Everything belongs to root and nothing is
// writable by anyone else: a process running as nonroot can change nothing in the image.
type entry struct {
	path string      // absolute path in the image
	mode fs.FileMode // permissions, with fs.ModeDir for a directory
	data []byte
}

// layer is one layer of the image and the line of history that says what it holds.
type layer struct {
	entries   []entry
	createdBy string
}

// layers lays out the image's filesystem: the files that change seldom (users, CA
// certificates, default configuration) in one layer, the binary, which changes with every
// commit, in another, so that a new build adds one layer to what a node already holds.
func layers(s spec) []layer {
	dir := func(p string) entry { return entry{path: p, mode: fs.ModeDir | 0o755} }
	file := func(p string, data []byte) entry { return entry{path: p, mode: 0o644, data: data} }
	return []layer{
		{
			entries: []entry{
				dir("/etc"),
				file("/etc/passwd", []byte(passwd)),
				file("/etc/group", []byte(group)),
				dir("/etc/ssl"),
				dir("/etc/ssl/certs"),
				file(caPath, s.caBundle),
				dir("/etc/mcpbridge"),
				file(configPath, imageConfig),
			},
			createdBy: "mcpbridge image tool: /etc/passwd and /etc/group (nonroot 65532), " + caPath + " (Mozilla's roots, from golang.org/x/crypto/x509roots/fallback), " + configPath,
		},
		{
			entries: []entry{
				dir("/usr"),
				dir("/usr/local"),
				dir("/usr/local/bin"),
				{path: binaryPath, mode: 0o555, data: s.binary},
			},
			createdBy: "mcpbridge image tool: " + binaryPath + " (CGO_ENABLED=0 go build -trimpath, version " + s.version + ")",
		},
	}
}

// containerConfig is how the image runs. The Dockerfile says the same (TestDockerfileMatchesTool).
func containerConfig(s spec) v1.Config {
	return v1.Config{
		User: strconv.Itoa(uid) + ":" + strconv.Itoa(gid),
		// The binary as entrypoint and serve as the default arguments: `docker run IMAGE
		// version` and a pod's args replace only the arguments.
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"serve", "--config", configPath},
		ExposedPorts: map[string]struct{}{grpcPort: {}, httpPort: {}},
		// Nothing secret: the usual PATH, and where the CA certificates are for whatever
		// reads SSL_CERT_FILE (Go reads that path by default too).
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + caPath},
		WorkingDir: "/",
		Labels:     labels(s),
	}
}

// labels are the OCI annotations of the image config (image-spec annotations.md). No licence
// label: the repository declares none.
func labels(s spec) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "mcpbridge",
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     s.version,
		"org.opencontainers.image.source":      sourceURL,
		"org.opencontainers.image.created":     s.created.UTC().Format(time.RFC3339),
	}
	if s.revision != "" {
		l["org.opencontainers.image.revision"] = s.revision
	}
	return l
}

// buildImage assembles the image on an empty base: no registry is needed, and nothing comes
// into the image that this tool did not put there.
//
// The manifest and layers of one image alone have Docker's media types (those of the empty
// base), not OCI's: the tarball is in the docker save format, which records the config and
// the layers but no manifest, so whoever reads it back makes a manifest again, and
// go-containerregistry (crane push, the tests) makes a Docker one. With Docker's types that is
// this very manifest, so the digest make image prints is the one the tarball gives when read
// back. The images of an index (s.oci) have OCI's: an OCI image layout keeps their manifests
// as written, and an OCI index of OCI manifests is what every reader of the layout expects.
func buildImage(s spec) (v1.Image, error) {
	created := v1.Time{Time: s.created.UTC()}
	base, layerType := empty.Image, types.DockerLayer
	if s.oci {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		layerType = types.OCILayer
	}
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: s.arch,
		OS:           "linux",
		Created:      created,
		Config:       containerConfig(s),
		// Append adds the layers' diff IDs; the type, which the image spec requires to be
		// "layers", must be set here: the empty base has none.
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	var adds []mutate.Addendum
	for _, l := range layers(s) {
		blob, err := layerBlob(l.entries, s.created)
		if err != nil {
			return nil, err
		}
		// LayerFromOpener sees a gzip stream and keeps it as the layer's compressed form, so
		// the digest is that of these bytes, whatever compression the library would pick.
		gl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(blob)), nil
		}, tarball.WithMediaType(layerType))
		if err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		adds = append(adds, mutate.Addendum{
			Layer:   gl,
			History: v1.History{Created: created, CreatedBy: l.createdBy},
		})
	}
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	return img, nil
}

// layerBlob writes entries as a gzipped tar. Every header has the same owner, the given
// modification time and no access or change time, and the gzip header no time and no name, so
// the same entries give the same bytes.
func layerBlob(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	// The default level: best compression makes a layer 0.4% smaller for three times the time.
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		name := strings.TrimPrefix(path.Clean(e.path), "/")
		h := &tar.Header{
			Name:    name,
			Mode:    int64(e.mode.Perm()),
			ModTime: mtime.UTC().Truncate(time.Second),
			Uname:   "root",
			Gname:   "root",
			// Plain ustar: no extended headers, which could carry times of their own.
			Format: tar.FormatUSTAR,
		}
		if e.mode.IsDir() {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.path, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tagChars are what an image tag may not hold (distribution's reference grammar:
// [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}).
var tagChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// defaultTag is mcpbridge:VERSION, the version made a valid tag: git describe's output is one
// already; a semantic version's "+build" becomes "-build".
func defaultTag(version string) string {
	t := tagChars.ReplaceAllString(version, "-")
	if t == "" || t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return "mcpbridge:" + t
}

// parseTag checks a repository:tag given by the user (no tag: latest).
func parseTag(s string) (name.Tag, error) {
	t, err := name.NewTag(s)
	if err != nil {
		return name.Tag{}, fmt.Errorf("-tag %q: %v (want REPOSITORY:TAG, such as mcpbridge:v1.2.3)", s, err)
	}
	return t, nil
}
