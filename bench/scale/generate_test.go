package scale

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpbridge/mcpbridge/sink/filesource"
)

// TestGeneratedFilesDecode: the workload the scale benchmarks load is valid Istio YAML: every
// file decodes without a fault, into the ServiceEntries the benchmarks wait for; an edit
// changes every ServiceEntry of its file and no other.
func TestGeneratedFilesDecode(t *testing.T) {
	dir := t.TempDir()
	const n, files = 250, 10
	if err := Write(dir, n, files); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for f := range files {
		objs := decodeFile(t, filepath.Join(dir, FileName(f)))
		for _, o := range objs {
			names[o.Name()] = o.Resource.GetBody().String()
		}
	}
	if len(names) != n {
		t.Fatalf("%d ServiceEntries decoded, want %d", len(names), n)
	}
	for _, i := range []int{0, n - 1} {
		if _, ok := names[Name(i)]; !ok {
			t.Fatalf("ServiceEntry %s missing", Name(i))
		}
	}
	count, err := WriteFile(dir, n, files, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeFile(t, filepath.Join(dir, FileName(3)))
	if len(objs) != count || count != n/files {
		t.Fatalf("edited file holds %d ServiceEntries, WriteFile said %d", len(objs), count)
	}
	for _, o := range objs {
		if names[o.Name()] == o.Resource.GetBody().String() {
			t.Fatalf("%s unchanged by the edit", o.Name())
		}
	}
}

func decodeFile(t *testing.T, path string) []filesource.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := filesource.Decode(data, path)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", path, errs)
	}
	return objs
}
