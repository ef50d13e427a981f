package app

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/fsnotify/fsnotify"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// readExport reads an exported file as Envoy's path_config_source does: a DiscoveryResponse
// in JSON or (by its extension) YAML.
func readExport(path string) (*discovery.DiscoveryResponse, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".yaml") {
		if b, err = yaml.YAMLToJSON(b); err != nil {
			return nil, err
		}
	}
	var r discovery.DiscoveryResponse
	if err := protojson.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// waitExport waits until the exported file holds what cond wants.
func waitExport(t *testing.T, path string, cond func(*discovery.DiscoveryResponse) bool) *discovery.DiscoveryResponse {
	t.Helper()
	var last *discovery.DiscoveryResponse
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		last, lastErr = readExport(path)
		if lastErr == nil && cond(last) {
			return last
		}
	}
	t.Fatalf("%s never held what was expected: %v, last error %v", path, last, lastErr)
	return nil
}

func clusterExport(path, format string) ExportFile {
	return ExportFile{Path: path, TypeURL: clusterType, Format: format, Node: ExportNode{ID: sidecarNode}}
}

// A reader watching the export's directory (as Envoy's inotify watch does) sees the file
// appear only by a rename, never written in place, and every version it reads is whole.
func TestExportRenameIsAtomic(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "clusters.json")
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ops []fsnotify.Op
	var broken []error
	reads := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.Events {
			if ev.Name != out {
				continue
			}
			r, err := readExport(out)
			mu.Lock()
			ops = append(ops, ev.Op)
			if err != nil && !os.IsNotExist(err) {
				broken = append(broken, err)
			} else if r != nil {
				reads++
			}
			mu.Unlock()
		}
	}()

	b, mesh := restBridge(t, func(c *Config) {
		c.Exports.Files = []ExportFile{clusterExport(out, "json")}
		c.Exports.Debounce = time.Millisecond
	}, "s0")
	names := []string{"s0"}
	for i := 1; i <= 20; i++ {
		names = append(names, "s"+string(rune('a'+i)))
		meshFile(t, mesh, names...)
		time.Sleep(20 * time.Millisecond)
	}
	want := make([]string, 0, len(names))
	for _, n := range names {
		want = append(want, clusterOf(n))
	}
	slices.Sort(want)
	waitExport(t, out, hasClusters(t, want...))
	_ = b
	time.Sleep(100 * time.Millisecond)
	w.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(broken) > 0 {
		t.Fatalf("a reader saw incomplete files: %v", broken)
	}
	if reads < 2 {
		t.Fatalf("the reader saw %d versions; the test needs several", reads)
	}
	for _, op := range ops {
		if op.Has(fsnotify.Write) {
			t.Fatalf("the exported file was written in place (%v); events %v", op, ops)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "clusters.json" {
			t.Fatalf("left behind in the export's directory: %s", e.Name())
		}
	}
	if info, err := os.Stat(out); err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("exported file mode %v (%v), want 0644", info.Mode(), err)
	}
}

// An exported file holds what a gRPC ADS client of the same node and type receives, in JSON
// and in YAML.
func TestExportContentEqualsTheADSResponse(t *testing.T) {
	dir := t.TempDir()
	clustersOut, listenersOut := filepath.Join(dir, "cds.json"), filepath.Join(dir, "lds.yaml")
	b, _ := restBridge(t, func(c *Config) {
		c.Exports.Files = []ExportFile{
			clusterExport(clustersOut, "json"),
			{Path: listenersOut, TypeURL: listenerType, Format: "YAML", Node: ExportNode{ID: sidecarNode}},
		}
	}, "a", "b")
	for _, f := range []struct{ path, typeURL string }{{clustersOut, clusterType}, {listenersOut, listenerType}} {
		file := waitExport(t, f.path, func(r *discovery.DiscoveryResponse) bool {
			// With istiod's sidecar plumbing: 3 clusters, virtualOutbound and virtualInbound.
			return len(r.Resources) == map[string]int{clusterType: 2 + 3, listenerType: 1 + 2}[f.typeURL]
		})
		st := ads(t, dialConn(t, b.grpcAddr))
		st.Send(&discovery.DiscoveryRequest{TypeUrl: f.typeURL, Node: sidecar()})
		got := st.Recv()
		if file.TypeUrl != f.typeURL || len(got.Resources) != len(file.Resources) {
			t.Fatalf("%s: type %q, %d resources; ADS %d", f.path, file.TypeUrl, len(file.Resources), len(got.Resources))
		}
		for i := range file.Resources {
			if !proto.Equal(file.Resources[i], got.Resources[i]) {
				t.Fatalf("%s: resource %d differs from ADS's:\nfile %v\nADS  %v", f.path, i, file.Resources[i], got.Resources[i])
			}
		}
	}
}

// A change of the file's type that leaves its content as it is (a cluster it does not name)
// wakes the exporter but does not write the file: its reader is not woken for nothing.
func TestExportWritesOnlyWhenContentChanges(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cds.json")
	b, mesh := restBridge(t, func(c *Config) {
		f := clusterExport(out, "json")
		f.ResourceNames = []string{clusterOf("a")}
		c.Exports.Files = []ExportFile{f}
		c.Exports.Debounce = time.Millisecond
	}, "a")
	waitExport(t, out, hasClusters(t, clusterOf("a")))
	time.Sleep(100 * time.Millisecond) // the first load's writes are done (an empty file may come first)
	writes := value(t, b, "mcpbridge_export_writes_total", "path", out, "result", "success")
	info, _ := os.Stat(out)
	meshFile(t, mesh, "a", "b")
	waitUntil(t, func() bool { return b.Store().View().Collection(clusterType).Count == 2+len(plumbingClusters) })
	time.Sleep(100 * time.Millisecond)
	if n := value(t, b, "mcpbridge_export_writes_total", "path", out, "result", "success"); n != writes {
		t.Fatalf("%v writes, want %v: the file's clusters did not change", n, writes)
	}
	if after, _ := os.Stat(out); !after.ModTime().Equal(info.ModTime()) {
		t.Fatal("the file was replaced though its content did not change")
	}
	meshFile(t, mesh, "b") // a goes: the file changes
	waitExport(t, out, func(r *discovery.DiscoveryResponse) bool { return len(r.Resources) == 0 })
}

// A write that fails (here: its directory does not exist yet) is logged, counted and tried
// again; the bridge goes on serving, and the file appears once it can be written.
func TestExportFailedWriteIsRetried(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	out := filepath.Join(dir, "cds.json")
	b, _ := restBridge(t, func(c *Config) {
		c.Exports.Files = []ExportFile{clusterExport(out, "json")}
		c.Exports.RetryInterval = 20 * time.Millisecond
	}, "a")
	waitUntil(t, func() bool {
		return value(t, b, "mcpbridge_export_writes_total", "path", out, "result", "failure") >= 2
	})
	if code, body := httpGet(t, b.httpURL+"/readyz"); code != 200 {
		t.Fatalf("/readyz after failed exports: %d %s", code, body)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	waitExport(t, out, hasClusters(t, clusterOf("a")))
}

// A bad entry is a configuration error naming it.
func TestExportConfigErrorsNameTheEntry(t *testing.T) {
	for _, tc := range []struct {
		f    ExportFile
		want string
	}{
		{ExportFile{Path: "x.json", TypeURL: clusterType, Format: "xml"}, "exports.files[0].format"},
		{ExportFile{TypeURL: clusterType}, "exports.files[0].path"},
		{ExportFile{Path: "x.json"}, "exports.files[0].type_url"},
	} {
		cfg := DefaultConfig()
		cfg.Exports.Files = []ExportFile{tc.f}
		_, err := New(cfg, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.f, err, tc.want)
		}
	}
}
