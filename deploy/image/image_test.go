package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"
)

// testVersion is stamped into the test's binary; the image must say the same everywhere.
const testVersion = "v9.8.7-imagetest"

var (
	buildOnce sync.Once
	builtBin  []byte
	buildErr  error

	imageOnce sync.Once
	theImage  *testImg
	imageDir  string // theImage's tarball, removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if imageDir != "" {
		os.RemoveAll(imageDir)
	}
	os.Exit(code)
}

// testImg is the image of testSpec, built and written once for the tests that only read it:
// under the race detector each build (gzip of the binary) takes seconds.
type testImg struct {
	spec  spec
	built v1.Image // as buildImage made it
	path  string   // its tarball
	img   v1.Image // read back from the tarball
	fsys  map[string]file
}

func testImage(t *testing.T) *testImg {
	t.Helper()
	s := testSpec(t)
	imageOnce.Do(func() {
		var err error
		if imageDir, err = os.MkdirTemp("", "mcpbridge-image-test-"); err != nil {
			t.Fatal(err)
		}
		built, path := writeImageIn(t, s, imageDir)
		img := loadImage(t, path)
		theImage = &testImg{spec: s, built: built, path: path, img: img, fsys: files(t, img)}
	})
	if theImage == nil {
		t.Fatal("the test image could not be built (see the first test that failed)")
	}
	return theImage
}

// testBinary builds mcpbridge once for every test of this package, as make image builds it.
func testBinary(t *testing.T) []byte {
	t.Helper()
	buildOnce.Do(func() {
		var src string
		if src, buildErr = findSource("."); buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		builtBin, buildErr = buildBinary(ctx, src, testVersion, runtime.GOARCH)
	})
	if buildErr != nil {
		t.Fatalf("build mcpbridge: %v", buildErr)
	}
	return builtBin
}

func testSpec(t *testing.T) spec {
	t.Helper()
	ca, _, err := caBundle()
	if err != nil {
		t.Fatal(err)
	}
	return spec{
		version:  testVersion,
		revision: "0123456789abcdef0123456789abcdef01234567",
		arch:     runtime.GOARCH,
		created:  time.Unix(1_700_000_000, 0).UTC(),
		binary:   testBinary(t),
		caBundle: ca,
	}
}

// writeImage builds the image of s and writes its tarball as make image does.
func writeImage(t *testing.T, s spec) string {
	t.Helper()
	_, path := writeImageIn(t, s, t.TempDir())
	return path
}

func writeImageIn(t *testing.T, s spec, dir string) (v1.Image, string) {
	t.Helper()
	img, err := buildImage(s)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := parseTag(defaultTag(s.version))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bin", "mcpbridge-image.tar")
	if err := writeTarball(path, ref, img); err != nil {
		t.Fatal(err)
	}
	return img, path
}

// loadImage reads a tarball back with go-containerregistry, as docker load would read it.
func loadImage(t *testing.T, path string) v1.Image {
	t.Helper()
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return img
}

// file is one entry of the image's layers, with its tar header as written.
type file struct {
	hdr  *tar.Header
	data []byte
}

// files reads every layer of img; a path in two layers is an error (the layers split the
// filesystem, they do not override each other).
func files(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]file{}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			p := "/" + strings.TrimSuffix(h.Name, "/")
			if _, dup := out[p]; dup {
				t.Errorf("%s is in two layers", p)
			}
			out[p] = file{hdr: h, data: data}
		}
		rc.Close()
	}
	return out
}

func TestImageConfig(t *testing.T) {
	ti := testImage(t)
	s, img := ti.spec, ti.img

	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 2 {
		t.Fatalf("%d layers, want 2 (files, binary)", len(m.Layers))
	}
	for _, l := range m.Layers {
		if l.MediaType != types.DockerLayer {
			t.Errorf("layer %s: media type %s, want %s", l.Digest, l.MediaType, types.DockerLayer)
		}
	}
	// Read back, the tarball gives the manifest that was built, so the digest make image
	// prints is the tarball's; and the config is kept byte for byte (the image ID).
	if got, want := digest(t, img), digest(t, ti.built); got != want {
		t.Errorf("the tarball read back has digest %s, the image built %s", got, want)
	}
	if got, err := img.ConfigName(); err != nil || got != configName(t, ti.built) {
		t.Errorf("the tarball read back has config %s (%v), the image built %s", got, err, configName(t, ti.built))
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if cf.RootFS.Type != "layers" || len(cf.RootFS.DiffIDs) != 2 {
		t.Errorf("rootfs %+v, want type layers and 2 diff IDs", cf.RootFS)
	}
	if !cf.Created.Time.Equal(s.created) || len(cf.History) != 2 || !cf.History[1].Created.Time.Equal(s.created) {
		t.Errorf("created %s, history %+v; want every time %s", cf.Created, cf.History, s.created)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("User %q, want 65532:65532", c.User)
	}
	if want := []string{"/usr/local/bin/mcpbridge"}; !slices.Equal(c.Entrypoint, want) {
		t.Errorf("Entrypoint %q, want %q", c.Entrypoint, want)
	}
	if want := []string{"serve", "--config", "/etc/mcpbridge/config.yaml"}; !slices.Equal(c.Cmd, want) {
		t.Errorf("Cmd %q, want %q", c.Cmd, want)
	}
	if len(c.ExposedPorts) != 2 || !has(c.ExposedPorts, "15010/tcp") || !has(c.ExposedPorts, "15014/tcp") {
		t.Errorf("ExposedPorts %v, want 15010/tcp and 15014/tcp", c.ExposedPorts)
	}
	if c.WorkingDir != "/" {
		t.Errorf("WorkingDir %q, want /", c.WorkingDir)
	}
	if want := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}; !slices.Equal(c.Env, want) {
		t.Errorf("Env %q, want %q", c.Env, want)
	}
	for _, kv := range c.Env {
		if k, _, _ := strings.Cut(kv, "="); containsAny(strings.ToUpper(k), "KEY", "TOKEN", "PASSWORD", "SECRET", "CREDENTIAL") {
			t.Errorf("Env %s looks like a secret", k)
		}
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":       "mcpbridge",
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     testVersion,
		"org.opencontainers.image.revision":    s.revision,
		"org.opencontainers.image.source":      "https://github.com/mcpbridge/mcpbridge",
		"org.opencontainers.image.created":     "2023-11-14T22:13:20Z",
	}
	if len(c.Labels) != len(wantLabels) {
		t.Errorf("labels %v, want %v", c.Labels, wantLabels)
	}
	for k, v := range wantLabels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func has(m map[string]struct{}, k string) bool { _, ok := m[k]; return ok }

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// The filesystem: the nonroot user, the CA certificates, the default configuration, the
// binary; all of it root's, none of it writable by the user the bridge runs as.
func TestImageFiles(t *testing.T) {
	ti := testImage(t)
	s, fsys := ti.spec, ti.fsys

	var paths []string
	for p, f := range fsys {
		paths = append(paths, p)
		h := f.hdr
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s belongs to %d:%d, want root", p, h.Uid, h.Gid)
		}
		if h.Mode&0o022 != 0 {
			t.Errorf("%s mode %o: writable by group or others", p, h.Mode)
		}
		if !h.ModTime.Equal(s.created) {
			t.Errorf("%s modified %s, want SOURCE_DATE_EPOCH %s", p, h.ModTime, s.created)
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			t.Errorf("%s: tar type %c, want only files and directories", p, h.Typeflag)
		}
		// Every parent is in the image, before its children are needed.
		if dir := filepath.Dir(p); dir != "/" {
			if d, ok := fsys[dir]; !ok || d.hdr.Typeflag != tar.TypeDir {
				t.Errorf("%s: no directory %s", p, dir)
			}
		}
	}
	slices.Sort(paths)
	want := []string{"/etc", "/etc/group", "/etc/mcpbridge", "/etc/mcpbridge/config.yaml", "/etc/passwd",
		"/etc/ssl", "/etc/ssl/certs", "/etc/ssl/certs/ca-certificates.crt",
		"/usr", "/usr/local", "/usr/local/bin", "/usr/local/bin/mcpbridge"}
	if !slices.Equal(paths, want) {
		t.Errorf("image holds %q, want %q (no shell, nothing else)", paths, want)
	}

	if !lineWith(fsys["/etc/passwd"].data, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", fsys["/etc/passwd"].data)
	}
	if !lineWith(fsys["/etc/group"].data, "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532:\n%s", fsys["/etc/group"].data)
	}

	// Every block of the CA bundle is a CA certificate, and there are Mozilla's many.
	rest := fsys["/etc/ssl/certs/ca-certificates.crt"].data
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("CA bundle, block %d: %v", n, err)
		}
		if !c.IsCA {
			t.Errorf("CA bundle: %s is not a CA", c.Subject)
		}
		n++
	}
	if n < 100 {
		t.Errorf("CA bundle: %d roots, want Mozilla's (more than 100)", n)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		t.Errorf("CA bundle: %d bytes after the last certificate", len(rest))
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(fsys["/etc/ssl/certs/ca-certificates.crt"].data) {
		t.Error("CA bundle: x509.CertPool takes none of it")
	}
	t.Logf("CA bundle: %d roots", n)

	if !bytes.Equal(fsys["/etc/mcpbridge/config.yaml"].data, imageConfig) {
		t.Error("/etc/mcpbridge/config.yaml is not deploy/image/config.yaml")
	}
	bin := fsys["/usr/local/bin/mcpbridge"]
	if bin.hdr.Mode != 0o555 || !bytes.Equal(bin.data, s.binary) {
		t.Errorf("/usr/local/bin/mcpbridge: mode %o, %d bytes; want 555 and the built binary", bin.hdr.Mode, len(bin.data))
	}
}

func lineWith(b []byte, prefix string) bool {
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// extract writes the image's binary and configuration file into a directory, to run them.
func extract(t *testing.T) (bin, config string, labels map[string]string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary is for Linux")
	}
	ti := testImage(t)
	img, fsys := ti.img, ti.fsys
	dir := t.TempDir()
	bin, config = filepath.Join(dir, "mcpbridge"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(bin, fsys["/usr/local/bin/mcpbridge"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, fsys["/etc/mcpbridge/config.yaml"].data, 0o644); err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return bin, config, cf.Config.Labels
}

// The binary is static (no interpreter, no dynamic section: it needs no C library in the
// image) and says the version of the image's label.
func TestImageBinary(t *testing.T) {
	bin, _, labels := extract(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %s: the binary is dynamically linked", p.Type)
		}
	}
	if f.Section(".dynamic") != nil || f.Section(".interp") != nil {
		t.Error("the binary has a .dynamic or .interp section")
	}

	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("mcpbridge version: %v\n%s", err, out)
	}
	want := "mcpbridge " + labels["org.opencontainers.image.version"] + "\n"
	if string(out) != want || labels["org.opencontainers.image.version"] != testVersion {
		t.Errorf("mcpbridge version printed %q, want %q (label %q, stamped %q)", out, want, labels["org.opencontainers.image.version"], testVersion)
	}
}

// The image's configuration is one the bridge serves with, on every interface, and it is its
// insecure: true that makes the addresses valid (without it the bridge refuses to start).
// The ports are made ephemeral by environment (MCPBRIDGE_ keys win over the file) so that the
// test never takes 15010; every other key is the file's.
func TestImageConfigServes(t *testing.T) {
	bin, config, _ := extract(t)

	var addrs struct {
		GRPC struct{ Address string } `yaml:"grpc"`
		HTTP struct{ Address string } `yaml:"http"`
	}
	if err := yaml.Unmarshal(imageConfig, &addrs); err != nil {
		t.Fatal(err)
	}
	if addrs.GRPC.Address != ":15010" || addrs.HTTP.Address != ":15014" {
		t.Errorf("config listens on %q and %q, want :15010 and :15014 (every interface, the exposed ports)", addrs.GRPC.Address, addrs.HTTP.Address)
	}

	env := []string{"MCPBRIDGE_GRPC_ADDRESS=:0", "MCPBRIDGE_HTTP_ADDRESS=:0", "MCPBRIDGE_LOG_FORMAT=json"}

	t.Run("without insecure it is refused", func(t *testing.T) {
		cmd := exec.Command(bin, "serve", "--config", config)
		cmd.Env = append(slices.Clone(env), "MCPBRIDGE_GRPC_INSECURE=false")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "grpc.address") {
			t.Errorf("serve with grpc.insecure false: %v, %q; want exit 2 naming grpc.address", err, out)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", config)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var log bytes.Buffer
	httpAddr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, HTTP string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "mcpbridge serving" {
				httpAddr <- line.HTTP
			}
		}
		done <- cmd.Wait()
	}()

	var addr string
	select {
	case addr = <-httpAddr:
	case err := <-done:
		t.Fatalf("serve --config %s ended: %v\n%s", config, err, log.String())
	case <-ctx.Done():
		t.Fatal("serve did not start within a minute")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsUnspecified() {
		t.Errorf("http listens on %q, want every interface", addr)
	}
	// Only to loopback: the listener is on every interface, the test talks to this host.
	url := "http://" + net.JoinHostPort("127.0.0.1", port) + "/readyz"
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("GET %s: never 200 (last: %v)", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("serve after SIGTERM: %v, want exit 0\n%s", err, log.String())
	}
}

// The same inputs give the same image, byte for byte; the time and the binary are inputs, and
// a new binary changes only its own layer.
func TestImageReproducible(t *testing.T) {
	ti := testImage(t)
	again := writeImage(t, ti.spec)
	ba, err := os.ReadFile(ti.path)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ba, bb) {
		t.Error("two builds of the same spec wrote different tarballs")
	}
	if da, db := digest(t, ti.img), digest(t, loadImage(t, again)); da != db {
		t.Errorf("digests %s and %s of the same spec", da, db)
	}
	t.Logf("digest %s, %d bytes", digest(t, ti.img), len(ba))

	// The variations with a small stand-in for the binary: gzip of the real one is slow
	// under the race detector, and what is checked does not depend on it.
	small := ti.spec
	small.binary = []byte("a stand-in for the binary")
	base := imageOf(t, small)

	later := small
	later.created = small.created.Add(time.Second)
	if digest(t, imageOf(t, later)) == digest(t, base) {
		t.Error("another SOURCE_DATE_EPOCH gave the same digest")
	}

	other := small
	other.binary = []byte("another stand-in")
	lb, lo := layerDigests(t, base), layerDigests(t, imageOf(t, other))
	if lb[0] != lo[0] || lb[1] == lo[1] {
		t.Errorf("a new binary: layers %v, then %v; want the first the same, the second new", lb, lo)
	}
}

func imageOf(t *testing.T, s spec) v1.Image {
	t.Helper()
	img, err := buildImage(s)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func layerDigests(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []v1.Hash
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// -rootfs, what the Dockerfile copies, writes the same files as the image's layers.
func TestRootfsMatchesImage(t *testing.T) {
	ti := testImage(t)
	s, fsys := ti.spec, ti.fsys
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := writeRootfs(dir, s); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel := "/" + filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
		seen[rel] = true
		f, ok := fsys[rel]
		if !ok {
			t.Errorf("rootfs has %s, the image has not", rel)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if int64(info.Mode().Perm()) != f.hdr.Mode || info.IsDir() != (f.hdr.Typeflag == tar.TypeDir) {
			t.Errorf("%s: rootfs mode %s, image mode %o", rel, info.Mode(), f.hdr.Mode)
		}
		if !info.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if !bytes.Equal(b, f.data) {
				t.Errorf("%s differs between rootfs and image", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range fsys {
		if !seen[p] {
			t.Errorf("the image has %s, rootfs has not", p)
		}
	}
	if err := writeRootfs(dir, s); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("-rootfs into a full directory: %v, want an error saying it is not empty", err)
	}
}
