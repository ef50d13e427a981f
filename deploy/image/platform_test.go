package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testEpoch is SOURCE_DATE_EPOCH of the runs below.
const (
	testEpoch     = "1700000000"
	testEpochUnix = 1_700_000_000
)

// standIns replaces go build, for the tests of what is made of the binaries: each arch gets
// a few bytes that name it, and the test sees which arches were built.
func standIns(t *testing.T) *[]string {
	t.Helper()
	var built []string
	saved := build
	build = func(_ context.Context, _, version, arch string) ([]byte, error) {
		built = append(built, arch)
		return []byte("stand-in mcpbridge " + version + " for linux/" + arch), nil
	}
	t.Cleanup(func() { build = saved })
	return &built
}

// runImage runs the command as make image does, with SOURCE_DATE_EPOCH epoch, and fails the
// test unless it succeeds; it returns what it printed.
func runImage(t *testing.T, epoch string, args ...string) string {
	t.Helper()
	src, err := findSource(".")
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-src", src, "-version", testVersion, "-revision", "0123456789abcdef"}, args...)
	getenv := func(k string) string {
		if k == "SOURCE_DATE_EPOCH" {
			return epoch
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, getenv, &stdout, &stderr); code != 0 {
		t.Fatalf("image %q: exit %d\n%s", args, code, stderr.String())
	}
	return stdout.String()
}

// printedDigest is the digest the command printed.
func printedDigest(t *testing.T, stdout string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^digest: +(sha256:[0-9a-f]{64}) `).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no digest line in %q", stdout)
	}
	return m[1]
}

// readTar reads every regular file of a tarball, and checks that every entry is root's,
// modified at mtime (seconds since 1970), with no other time.
func readTar(t *testing.T, path string, mtime int64) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != mtime || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: owner %d:%d, modified %s (access %s, change %s); want root's at %d only",
				h.Name, h.Uid, h.Gid, h.ModTime, h.AccessTime, h.ChangeTime, mtime)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if out[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// readLayout reads an OCI image layout tarball with go-containerregistry's layout reader, a
// reader that shares no code with the writer: it returns index.json's one image index.
func readLayout(t *testing.T, path string) (v1.ImageIndex, map[string][]byte) {
	t.Helper()
	files := readTar(t, path, testEpochUnix) // the layout's entries are at SOURCE_DATE_EPOCH
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1 (podman load takes no other)", len(tm.Manifests))
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, files
}

// Several platforms: one image per platform, each with its own binary, and an OCI image index
// of them in an OCI image layout, named as ctr import and podman load read a name.
func TestPlatformsIndex(t *testing.T) {
	built := standIns(t)
	out := filepath.Join(t.TempDir(), "bin", "mcpbridge-image.tar")
	stdout := runImage(t, testEpoch, "-tag", "mcpbridge:dev", "-platforms", "linux/arm64, linux/amd64", "-o", out)
	if !slices.Equal(*built, []string{"amd64", "arm64"}) {
		t.Errorf("built %q, want amd64 and arm64, in order", *built)
	}
	idx, files := readLayout(t, out)

	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %s", got)
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	d := top.Manifests[0]
	wantNames := map[string]string{"io.containerd.image.name": "docker.io/library/mcpbridge:dev", "org.opencontainers.image.ref.name": "dev"}
	if top.SchemaVersion != 2 || top.MediaType != types.OCIImageIndex || d.MediaType != types.OCIImageIndex || !maps.Equal(d.Annotations, wantNames) {
		t.Errorf("index.json %s; want schemaVersion 2, an OCI index of one OCI index annotated %v", files["index.json"], wantNames)
	}
	if got := printedDigest(t, stdout); got != d.Digest.String() {
		t.Errorf("printed digest %s, index.json's %s", got, d.Digest)
	}
	for name, data := range files {
		if h, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != h {
				t.Errorf("%s holds bytes of digest %x", name, sum)
			}
		}
	}

	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.String())
		checkPlatformImage(t, idx, m)
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) || im.MediaType != types.OCIImageIndex {
		t.Errorf("the index (%s) lists %q, want linux/amd64 and linux/arm64", im.MediaType, platforms)
	}
	// The index, two manifests, two configs, two binary layers and the one layer of files
	// both images share: nothing twice, nothing else.
	if len(files) != 2+8 {
		t.Errorf("the layout holds %d files, want oci-layout, index.json and 8 blobs", len(files))
	}
	t.Logf("%s", stdout)
}

// checkPlatformImage checks the image of one platform of the index: OCI's media types, the
// platform in its config, and the binary built for it.
func checkPlatformImage(t *testing.T, idx v1.ImageIndex, m v1.Descriptor) {
	t.Helper()
	img, err := idx.Image(m.Digest)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != "" {
		t.Errorf("%s: the index gives the image artifactType %s: it is an image, not an artifact", m.Platform, m.ArtifactType)
	}
	if m.MediaType != types.OCIManifestSchema1 || mf.MediaType != types.OCIManifestSchema1 || mf.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("%s: manifest %s (index says %s), config %s; want OCI's", m.Platform, mf.MediaType, m.MediaType, mf.Config.MediaType)
	}
	for _, l := range mf.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("%s: layer %s is %s, want %s", m.Platform, l.Digest, l.MediaType, types.OCILayer)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != m.Platform.OS || cf.Architecture != m.Platform.Architecture || cf.Variant != "" {
		t.Errorf("%s: config says %s/%s", m.Platform, cf.OS, cf.Architecture)
	}
	want := "stand-in mcpbridge " + testVersion + " for " + m.Platform.String()
	if got := string(files(t, img)[binaryPath].data); got != want {
		t.Errorf("%s: the binary is %q, want %q", m.Platform, got, want)
	}
}

// The same binaries, time and platforms, in whatever order, give the same bytes, so the same
// commit gives the same digest; another SOURCE_DATE_EPOCH gives another.
func TestPlatformsReproducible(t *testing.T) {
	standIns(t)
	dir := t.TempDir()
	write := func(name, epoch, platforms string) (string, []byte) {
		out := filepath.Join(dir, name)
		stdout := runImage(t, epoch, "-platforms", platforms, "-o", out)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return printedDigest(t, stdout), b
	}
	d1, b1 := write("a.tar", testEpoch, "linux/amd64,linux/arm64")
	d2, b2 := write("b.tar", testEpoch, "linux/arm64,linux/amd64")
	if d1 != d2 || !bytes.Equal(b1, b2) {
		t.Errorf("the same platforms twice: digests %s and %s, tarballs equal %v", d1, d2, bytes.Equal(b1, b2))
	}
	if d3, _ := write("c.tar", "1700000001", "linux/amd64,linux/arm64"); d3 == d1 {
		t.Error("another SOURCE_DATE_EPOCH gave the same digest")
	}
}

// One platform, whether by -platforms or -arch, is today's docker save tarball, byte for
// byte; its image is the one the index holds for that platform, but for the media types (the
// same config: the same image ID).
func TestSinglePlatformIsDockerSave(t *testing.T) {
	standIns(t)
	dir := t.TempDir()
	byPlatforms, byArch, multi := filepath.Join(dir, "p.tar"), filepath.Join(dir, "a.tar"), filepath.Join(dir, "m.tar")
	runImage(t, testEpoch, "-platforms", "linux/arm64", "-o", byPlatforms)
	runImage(t, testEpoch, "-arch", "arm64", "-o", byArch)
	runImage(t, testEpoch, "-platforms", "linux/amd64,linux/arm64", "-o", multi)

	files := readTar(t, byPlatforms, 0) // go-containerregistry's docker save entries are at 0
	if !bytes.Equal(mustRead(t, byPlatforms), mustRead(t, byArch)) {
		t.Error("-platforms linux/arm64 and -arch arm64 wrote different tarballs")
	}
	var manifest tarball.Manifest
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if _, ok := files["index.json"]; ok || len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{defaultTag(testVersion)}) {
		t.Errorf("one platform: manifest.json %s, index.json %v; want docker save's manifest.json alone, tagged %s",
			files["manifest.json"], ok, defaultTag(testVersion))
	}
	img, err := tarball.ImageFromPath(byPlatforms, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mt, err := img.MediaType(); err != nil || mt != types.DockerManifestSchema2 {
		t.Errorf("media type %s (%v), want %s", mt, err, types.DockerManifestSchema2)
	}

	idx, _ := readLayout(t, multi)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range im.Manifests {
		if m.Platform.Architecture != "arm64" {
			continue
		}
		inIndex, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := configName(t, img), configName(t, inIndex); a != b {
			t.Errorf("image ID %s alone, %s in the index", a, b)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// elfMachines are the ELF machines of the arches the image can be built for.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
}

// go build makes the binary of the architecture asked for: the host's (the one the other
// tests use) and one other, as make image PLATFORMS=linux/amd64,linux/arm64 builds them. The
// one cross-build of the tests (minutes the first time on two cores, then go's build cache);
// what is made of each platform's binary is checked above with stand-ins, as building images
// of two real binaries would add minutes of gzip under the race detector.
func TestBinaryArch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds mcpbridge for a second architecture")
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	src, err := findSource(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cross, err := buildBinary(ctx, src, testVersion, other)
	if err != nil {
		t.Fatalf("build for linux/%s: %v", other, err)
	}
	for arch, bin := range map[string][]byte{runtime.GOARCH: testBinary(t), other: cross} {
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("linux/%s: %v", arch, err)
		}
		if want, ok := elfMachines[arch]; !ok || f.Machine != want || f.Class != elf.ELFCLASS64 {
			t.Errorf("the binary built for linux/%s is an ELF for %s (%s)", arch, f.Machine, f.Class)
		}
	}
}
