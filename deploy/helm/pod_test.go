package helm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// This file runs what the chart deploys without a cluster: the real mcpbridge binary, built
// from this repository, with the container's arguments and environment, on a directory that
// stands for the container's file system, where each volume is laid out as kubelet lays out
// a ConfigMap or Secret volume.

var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcpbridge-chart-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bridgeBinary builds cmd/mcpbridge of the repository this module sits in, once. It is built
// with the race detector when the tests are, so that `make test` finds every package in the
// build cache of the main module's tests and the bridge's own races would show here too.
var bridgeBinary = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(buildDir, "mcpbridge")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/mcpbridge")...)
	cmd.Dir = filepath.Join("..", "..") // the main module: this module is its deploy/
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/mcpbridge: %v\n%s", err, out)
	}
	return bin, nil
})

func buildBridge(t *testing.T) string {
	t.Helper()
	bin, err := bridgeBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// cluster holds the objects the pod's volumes name that the chart does not render (an
// existing Secret, a CA bundle ConfigMap): "Secret/NAME" or "ConfigMap/NAME" to their data.
type cluster map[string]map[string][]byte

// kubeletVolume is a ConfigMap or Secret volume as kubelet's atomic writer lays it out: each key
// is a symlink NAME -> ..data/NAME, and ..data a symlink to a hidden, timestamped directory
// holding this version's files. An update writes a new timestamped directory, points a new
// ..data_tmp symlink at it and renames that over ..data, so that every file changes in one
// rename; then it adds the symlinks of new keys, removes those of keys that went, and
// removes the old directory. No file is ever written in place, and the mount directory
// itself stays.
type kubeletVolume struct {
	dir string
}

func mountVolume(t *testing.T, dir string, files map[string][]byte) *kubeletVolume {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v := &kubeletVolume{dir: dir}
	v.update(t, files)
	return v
}

func (v *kubeletVolume) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	data := filepath.Join(v.dir, "..data")
	old, _ := os.Readlink(data)
	ts, err := os.MkdirTemp(v.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, data); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(v.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(v.dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// pod is the container of the rendered Deployment, ready to run: its file system under
// root, its volumes mounted, its arguments and environment.
type pod struct {
	root    string
	args    []string
	env     []string
	config  map[string]any // the bridge's config as rendered, before the test's rewriting
	volumes map[string]*kubeletVolume
}

// preparePod lays out the container's volumes under a temporary root, taking ConfigMaps
// from the render and everything else from c, and rewrites the paths of the bridge's config
// and arguments into that root. The bridge's listen addresses become grpcAddr and httpAddr:
// the test cannot listen on the pod's own ports.
func preparePod(t *testing.T, r *rendered, c cluster, grpcAddr, httpAddr string) *pod {
	t.Helper()
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	ctr := container(t, dep)
	_, config := r.bridgeConfig(t)
	p := &pod{root: t.TempDir(), config: config, volumes: map[string]*kubeletVolume{}}
	inRoot := func(s string) string {
		if mountFor(ctr, s) == nil {
			return s
		}
		if strings.HasSuffix(s, "/") { // a directory, as sources.files lists it
			return filepath.Join(p.root, s) + "/"
		}
		return filepath.Join(p.root, s)
	}
	for _, m := range ctr.VolumeMounts {
		files := volumeFiles(t, r, c, volume(t, dep, m.Name))
		if data, ok := files["config.yaml"]; ok && m.Name == "config" {
			files["config.yaml"] = rewriteConfig(t, data, inRoot, grpcAddr, httpAddr)
		}
		p.volumes[m.Name] = mountVolume(t, filepath.Join(p.root, m.MountPath), files)
	}
	for _, a := range ctr.Args {
		p.args = append(p.args, inRoot(a))
	}
	// The test's own MCPBRIDGE_* variables would override the config (environment beats
	// file): the pod has only its own.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCPBRIDGE_") {
			p.env = append(p.env, kv)
		}
	}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil {
			t.Fatalf("env %s: valueFrom is not simulated", e.Name)
		}
		p.env = append(p.env, e.Name+"="+e.Value)
	}
	return p
}

// volumeFiles is what kubelet would put in a volume: the keys of its ConfigMap or Secret.
func volumeFiles(t *testing.T, r *rendered, c cluster, v *corev1.Volume) map[string][]byte {
	t.Helper()
	var key string
	var items []corev1.KeyToPath
	switch {
	case v.ConfigMap != nil:
		key, items = "ConfigMap/"+v.ConfigMap.Name, v.ConfigMap.Items
	case v.Secret != nil:
		key, items = "Secret/"+v.Secret.SecretName, v.Secret.Items
	default:
		t.Fatalf("volume %s: only ConfigMap and Secret volumes are simulated: %s", v.Name, toYAML(v))
	}
	files := map[string][]byte{}
	if data, ok := c[key]; ok {
		for k, d := range data {
			files[k] = d
		}
	} else if name, ok := strings.CutPrefix(key, "ConfigMap/"); ok {
		cm := one[corev1.ConfigMap](t, r, "ConfigMap", name)
		for k, d := range cm.Data {
			files[k] = []byte(d)
		}
	} else {
		t.Fatalf("volume %s: %s is neither rendered nor in the test's cluster", v.Name, key)
	}
	if len(items) > 0 {
		picked := map[string][]byte{}
		for _, it := range items {
			picked[it.Path] = files[it.Key]
		}
		files = picked
	}
	return files
}

// rewriteConfig points the rendered config's paths into the pod's root and its listeners at
// the test's addresses.
func rewriteConfig(t *testing.T, data []byte, inRoot func(string) string, grpcAddr, httpAddr string) []byte {
	t.Helper()
	var tree map[string]any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		t.Fatal(err)
	}
	tree = rewriteStrings(tree, inRoot).(map[string]any)
	tree["grpc"].(map[string]any)["address"] = grpcAddr
	tree["http"].(map[string]any)["address"] = httpAddr
	out, err := yaml.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rewriteStrings(v any, f func(string) string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = rewriteStrings(x, f)
		}
	case []any:
		for i, x := range v {
			v[i] = rewriteStrings(x, f)
		}
	case string:
		return f(v)
	}
	return v
}

// process is a running mcpbridge.
type process struct {
	cmd    *exec.Cmd
	lines  chan string   // its log, line by line
	exited chan struct{} // closed once it exited; then err is its exit
	err    error

	mu     sync.Mutex
	logged []string
}

// run starts the pod's command: the image's entrypoint, mcpbridge, with the container's args.
func (p *pod) run(t *testing.T) *process {
	t.Helper()
	cmd := exec.Command(buildBridge(t), p.args...)
	cmd.Env = p.env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr := &process{cmd: cmd, lines: make(chan string, 1000), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			pr.mu.Lock()
			pr.logged = append(pr.logged, sc.Text())
			pr.mu.Unlock()
			select {
			case pr.lines <- sc.Text():
			default: // nobody is waiting for lines any more
			}
		}
		pr.err = cmd.Wait()
		close(pr.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-pr.exited:
		default:
			cmd.Process.Kill()
			<-pr.exited
		}
	})
	return pr
}

func (pr *process) log() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return strings.Join(pr.logged, "\n")
}

// exitCode is the process's exit status, -1 if a signal ended it.
func (pr *process) exitCode() int {
	var ee *exec.ExitError
	if errors.As(pr.err, &ee) {
		return ee.ExitCode()
	}
	if pr.err != nil {
		return -1
	}
	return 0
}

// serving is what the bridge's "mcpbridge serving" log line says.
type serving struct {
	GRPC    string `json:"grpc"`
	HTTP    string `json:"http"`
	GRPCTLS bool   `json:"grpc_tls"`
	HTTPTLS bool   `json:"http_tls"`
}

var servingText = regexp.MustCompile(`msg="mcpbridge serving".* grpc=(\S+) http=(\S+) grpc_tls=(\S+) http_tls=(\S+)`)

// parseServing reads the serving line in either log.format.
func parseServing(line string) (serving, bool) {
	if strings.HasPrefix(line, "{") {
		var s struct {
			Msg string `json:"msg"`
			serving
		}
		if json.Unmarshal([]byte(line), &s) == nil && s.Msg == "mcpbridge serving" {
			return s.serving, true
		}
		return serving{}, false
	}
	m := servingText.FindStringSubmatch(line)
	if m == nil {
		return serving{}, false
	}
	return serving{GRPC: m[1], HTTP: m[2], GRPCTLS: m[3] == "true", HTTPTLS: m[4] == "true"}, true
}

// waitServing waits for the serving line, failing if the process exits first.
func (pr *process) waitServing(t *testing.T, timeout time.Duration) serving {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-pr.lines:
			if s, ok := parseServing(l); ok {
				return s
			}
		case <-pr.exited:
			t.Fatalf("mcpbridge exited (status %d) before serving:\n%s", pr.exitCode(), pr.log())
		case <-deadline:
			t.Fatalf("mcpbridge did not serve within %s:\n%s", timeout, pr.log())
		}
	}
}

// stop sends SIGTERM, as kubelet does, and expects a clean exit.
func (pr *process) stop(t *testing.T) {
	t.Helper()
	if err := pr.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pr.exited:
		if code := pr.exitCode(); code != 0 {
			t.Errorf("exit status %d after SIGTERM, want 0:\n%s", code, pr.log())
		}
	case <-time.After(20 * time.Second):
		t.Errorf("did not stop within 20s of SIGTERM")
	}
}

// startTimeout bounds a start-up: a working bridge is ready in well under a second, but two
// cores running other tests under the race detector can be slow.
const startTimeout = 60 * time.Second

// collectionCounts returns the collections a /debug/collections answer lists, with their
// counts.
func collectionCounts(t *testing.T, body []byte) map[string]int {
	t.Helper()
	var resp struct {
		Collections []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		} `json:"collections"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("/debug/collections: %v: %s", err, body)
	}
	out := map[string]int{}
	for _, c := range resp.Collections {
		out[c.Name] = c.Count
	}
	return out
}

// resourceNames returns the resource names of a /debug/collections/{collection} answer.
func resourceNames(t *testing.T, body []byte) []string {
	t.Helper()
	var resp struct {
		Resources []struct {
			Name string `json:"name"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("collection: %v: %s", err, body)
	}
	var names []string
	for _, r := range resp.Resources {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}
