package certtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Mount is a directory laid out as kubelet mounts a Secret volume: each file NAME is a symlink
// to ..data/NAME, and ..data a symlink to a directory of this version's files. An update
// writes a new version's directory and renames a new ..data symlink over the old one, so
// every file changes at once and no file itself is ever written in place.
type Mount struct {
	Dir     string
	version int
}

// NewMount makes a mount in a temporary directory holding files (name to content).
func NewMount(t testing.TB, files map[string][]byte) *Mount {
	t.Helper()
	m := &Mount{Dir: t.TempDir()}
	m.Update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(m.Dir, name)); err != nil {
			t.Fatalf("certtest: %v", err)
		}
	}
	return m
}

// Path is the path a reader of the mount opens for name.
func (m *Mount) Path(name string) string { return filepath.Join(m.Dir, name) }

// Update replaces every file's content as kubelet does, in one rename of ..data; files holds
// the names the mount was made with.
func (m *Mount) Update(t testing.TB, files map[string][]byte) {
	t.Helper()
	m.version++
	version := fmt.Sprintf("..v%d", m.version)
	if err := os.Mkdir(filepath.Join(m.Dir, version), 0o700); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	for name, data := range files {
		WriteFile(t, filepath.Join(m.Dir, version, name), data)
	}
	tmp := filepath.Join(m.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	if err := os.Rename(tmp, filepath.Join(m.Dir, "..data")); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	if m.version > 1 {
		if err := os.RemoveAll(filepath.Join(m.Dir, fmt.Sprintf("..v%d", m.version-1))); err != nil {
			t.Fatalf("certtest: %v", err)
		}
	}
}
