package filesource

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpbridge/mcpbridge/store"
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

// TestRecycledReadsKeepWhatTheyDecoded reads files of block-style ServiceEntries (the fast
// path, whose objects view the file's text and encode into the scratch's blocks) one after
// another through the recycled scratch, and holds each file's objects to what Decode makes of
// the same text in bytes of its own. Under -race a scratch given back is overwritten, so an
// object that still viewed it would differ.
func TestRecycledReadsKeepWhatTheyDecoded(t *testing.T) {
	dir := t.TempDir()
	data := thousandServiceEntries()
	states := make([]fileState, 4)
	for i := range states {
		path := filepath.Join(dir, fmt.Sprintf("f%d.yaml", i))
		text := bytes.ReplaceAll(data, []byte("name: svc-"), []byte(fmt.Sprintf("name: f%d-svc-", i)))
		if err := os.WriteFile(path, text, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, decoded := states[i].refresh(path, true); !decoded {
			t.Fatalf("file %d: not decoded: %v", i, states[i].faults)
		}
	}
	for i := range states {
		text, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%d.yaml", i)))
		if err != nil {
			t.Fatal(err)
		}
		objs, errs := Decode(text, "f.yaml")
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		want, err := storedOf(objs)
		if err != nil {
			t.Fatal(err)
		}
		got := states[i].objects
		if len(got) != len(want) {
			t.Fatalf("file %d: %d objects, want %d", i, len(got), len(want))
		}
		for j := range want {
			if !bytes.Equal(store.EntryOf(got[j].enc).ResourceBytes(), store.EntryOf(want[j].enc).ResourceBytes()) {
				t.Fatalf("file %d, object %d (%s): read through the recycled scratch, it is not what the text decodes to", i, j, want[j].enc.Name())
			}
		}
	}
}
