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
	if err := m.Swap(files); err != nil {
		t.Fatalf("certtest: %v", err)
	}
}

// Swap is Update returning its error instead of failing a test: for a swap made from a
// goroutine other than the test's (a hook the code under test calls), where t.Fatal may not
// be called.
func (m *Mount) Swap(files map[string][]byte) error {
	m.version++
	version := fmt.Sprintf("..v%d", m.version)
	if err := os.Mkdir(filepath.Join(m.Dir, version), 0o700); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(m.Dir, version, name), data, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(m.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(m.Dir, "..data")); err != nil {
		return err
	}
	if m.version > 1 {
		return os.RemoveAll(filepath.Join(m.Dir, fmt.Sprintf("..v%d", m.version-1)))
	}
	return nil
}
