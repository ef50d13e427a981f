package export

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A write that cannot be renamed into place (here the path is a directory) fails, leaves what
// was there, and leaves no temporary file behind.
func TestWriteAtomicLeavesNoTemporaryFileOnFailure(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "cds.json")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(target, []byte("{}")); err == nil {
		t.Fatal("a rename over a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "cds.json" || !entries[0].IsDir() {
		t.Fatalf("left behind: %v", entries)
	}
}

// A write replaces the file whole, readable by others (0644).
func TestWriteAtomicReplacesTheFile(t *testing.T) {
	target := filepath.Join(t.TempDir(), "cds.json")
	for _, body := range []string{"first", "second"} {
		if err := WriteAtomic(target, []byte(body)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(target)
		if err != nil || string(got) != body {
			t.Fatalf("%q (%v), want %q", got, err, body)
		}
	}
	if info, _ := os.Stat(target); info.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", info.Mode())
	}
}
