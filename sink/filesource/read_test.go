package filesource

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReadFileReadsTheWholeFileIntoTheBufferItIsGiven: every size reads whole, into the given
// array when it has room (so that a recycled buffer is reused), else into a new one.
func TestReadFileReadsTheWholeFileIntoTheBufferItIsGiven(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 4096, 1 << 20} {
		want := bytes.Repeat([]byte("a: b\n"), size/5+1)[:size]
		path := filepath.Join(dir, "f.yaml")
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readFileInto(path, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("size %d: read %d bytes (%v), want the file's %d", size, len(got), err, size)
		}
		roomy := make([]byte, 3, size+100)
		again, err := readFileInto(path, roomy)
		if err != nil || !bytes.Equal(again, want) {
			t.Fatalf("size %d into a buffer with room: read %d bytes (%v)", size, len(again), err)
		}
		if size > 0 && &again[0] != &roomy[:1][0] {
			t.Errorf("size %d: read into a new array although the buffer had room", size)
		}
	}
	if _, err := readFileInto(filepath.Join(dir, "missing.yaml"), nil); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v, want not-exist", err)
	}
}
