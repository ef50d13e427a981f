package filesource

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestUnchangedTrustsOnlySettledFingerprints: a file is taken as unchanged only when every
// part of its fingerprint is the same and its times are older than the racy window before the
// read (a change within the same timestamp tick would not move them).
func TestUnchangedTrustsOnlySettledFingerprints(t *testing.T) {
	readAt := time.Unix(1000, 0)
	old := readAt.Add(-racyWindow - time.Millisecond).UnixNano()
	recent := readAt.Add(-racyWindow + time.Millisecond).UnixNano()
	base := fingerprint{dev: 1, ino: 2, size: 3, mtime: old, ctime: old}
	for _, c := range []struct {
		name string
		cur  fingerprint
		want bool
	}{
		{"same, settled", base, true},
		{"another inode (renamed over)", fingerprint{dev: 1, ino: 9, size: 3, mtime: old, ctime: old}, false},
		{"another size", fingerprint{dev: 1, ino: 2, size: 4, mtime: old, ctime: old}, false},
		{"another modification time", fingerprint{dev: 1, ino: 2, size: 3, mtime: old + 1, ctime: old}, false},
		{"another change time (mtime kept: cp -p)", fingerprint{dev: 1, ino: 2, size: 3, mtime: old, ctime: old + 1}, false},
		{"another device", fingerprint{dev: 7, ino: 2, size: 3, mtime: old, ctime: old}, false},
	} {
		if got := unchanged(base, c.cur, readAt); got != c.want {
			t.Errorf("%s: unchanged = %v, want %v", c.name, got, c.want)
		}
	}
	racy := fingerprint{dev: 1, ino: 2, size: 3, mtime: recent, ctime: recent}
	if unchanged(racy, racy, readAt) {
		t.Error("a file changed within the racy window before its read is taken as unchanged")
	}
	racyCtime := fingerprint{dev: 1, ino: 2, size: 3, mtime: old, ctime: recent}
	if unchanged(racyCtime, racyCtime, readAt) {
		t.Error("a file whose change time is within the racy window is taken as unchanged")
	}
}

// countReads counts the files the source reads until the test ends.
func countReads(t *testing.T) func() map[string]int {
	var mu sync.Mutex
	reads := map[string]int{}
	readFile = func(path string, buf []byte) ([]byte, error) {
		mu.Lock()
		reads[filepath.Base(path)]++
		mu.Unlock()
		return readFileInto(path, buf)
	}
	t.Cleanup(func() { readFile = readFileInto })
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range reads {
			out[k] = v
		}
		return out
	}
}

// TestSourceEditReadsOnlyTheEditedFile: once the files' times are older than the racy window,
// an edit of one file reads that file alone (not 1,000 files for one), and is served. Where
// the platform gives no fingerprint, every file is read again.
func TestSourceEditReadsOnlyTheEditedFile(t *testing.T) {
	dir := t.TempDir()
	for i := range 5 {
		name := fmt.Sprintf("svc%d", i)
		writeFile(t, filepath.Join(dir, name+".yaml"), serviceEntry(name, name))
	}
	reads := countReads(t)
	time.Sleep(racyWindow + 100*time.Millisecond) // the files settle before the first load
	h := start(t, Options{Paths: []string{dir}})
	if got := reads(); len(got) != 5 {
		t.Fatalf("the first load read %v, want every file once", got)
	}
	writeFile(t, filepath.Join(dir, "svc3.yaml"), serviceEntry("svc3", "svc3-v2"))
	h.waitFor("the edit", func() bool { return h.host("bookinfo/svc3") == "svc3-v2" })
	got := reads()
	for i := range 5 {
		name, want := fmt.Sprintf("svc%d.yaml", i), 1
		if i == 3 || runtime.GOOS != "linux" {
			want = 2
		}
		if got[name] != want {
			t.Errorf("%s read %d times, want %d (reads: %v)", name, got[name], want, got)
		}
	}
}

// TestSourceSeesSameSizeRewriteKeepingTimes: a file rewritten in place with content of the
// same size and its modification time set back (cp -p, rsync -t) is still read again: its
// change time moved. The file's times are settled (older than the racy window) before the
// rewrite, so that only the change time can tell.
func TestSourceSeesSameSizeRewriteKeepingTimes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	writeFile(t, path, serviceEntry("a", "host-1"))
	mtime := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, mtime, mtime); err != nil { // the change time is now
		t.Fatal(err)
	}
	time.Sleep(racyWindow + 100*time.Millisecond) // and settled: the first read trusts it
	reads := countReads(t)
	h := start(t, Options{Paths: []string{dir}})
	h.waitFor("the first state", func() bool { return h.host("bookinfo/a") == "host-1" })
	if err := os.WriteFile(path, []byte(serviceEntry("a", "host-2")), 0o644); err != nil { // in place, same inode
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the rewrite", func() bool { return h.host("bookinfo/a") == "host-2" })
	if n := reads()["a.yaml"]; n != 2 {
		t.Errorf("a.yaml read %d times, want 2: once at the start, once for the rewrite", n)
	}
}
