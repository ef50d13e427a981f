package fswatch

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for a notification; reaching it is a failure.
const waitTimeout = 10 * time.Second

// quiet is how long a test waits to be sure that no notification comes.
const quiet = 300 * time.Millisecond

// watching runs a Watcher until the test ends, its notifications on a channel.
type watching struct {
	changes chan Change
}

func watch(t *testing.T, debounce time.Duration, paths ...string) *watching {
	t.Helper()
	w, err := New(Options{Paths: paths, Debounce: debounce})
	if err != nil {
		t.Fatal(err)
	}
	r := &watching{changes: make(chan Change, 1000)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(c Change) { r.changes <- c }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after its context ended, want nil", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("Run did not return within %v of its context ending", waitTimeout)
		}
	})
	return r
}

// next waits for the next notification.
func (r *watching) next(t *testing.T, what string) Change {
	t.Helper()
	select {
	case c := <-r.changes:
		return c
	case <-time.After(waitTimeout):
		t.Fatalf("no notification within %v of %s", waitTimeout, what)
		return Change{}
	}
}

// nextNaming waits for a notification with an event on name and returns that event. Earlier
// notifications (of the steps that led here) are skipped.
func (r *watching) nextNaming(t *testing.T, name string, what string) Event {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case c := <-r.changes:
			for _, ev := range c.Events {
				if ev.Name == name {
					return ev
				}
			}
		case <-deadline:
			t.Fatalf("no notification naming %s within %v of %s", name, waitTimeout, what)
		}
	}
}

// none fails if a notification comes within quiet.
func (r *watching) none(t *testing.T, what string) {
	t.Helper()
	select {
	case c := <-r.changes:
		t.Fatalf("a notification for %s: %+v", what, c)
	case <-time.After(quiet):
	}
}

// replace writes a file as editors and kubectl-style tools do: aside, then renamed over it.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFileReplacedByRenameAgainAndAgain(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "mesh.yaml")
	write(t, f, "v0")
	r := watch(t, 10*time.Millisecond, f)
	// The watch must outlive the file it started with, and the one after.
	for i := 1; i <= 3; i++ {
		replace(t, f, fmt.Sprint("v", i))
		if ev := r.nextNaming(t, f, fmt.Sprint("replacement ", i)); !ev.Op.Has(fsnotify.Create) {
			t.Errorf("replacement %d: %v, want a Create of the name", i, ev)
		}
	}
}

func TestFileWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tls.crt")
	write(t, f, "v0")
	r := watch(t, 10*time.Millisecond, f)
	write(t, f, "v1")
	if ev := r.nextNaming(t, f, "a write"); !ev.Op.Has(fsnotify.Write) {
		t.Errorf("%v, want a Write", ev)
	}
}

func TestFileRemovedAndWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "mesh.yaml")
	write(t, f, "v0")
	r := watch(t, 10*time.Millisecond, f)
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if ev := r.nextNaming(t, f, "the removal"); !ev.Op.Has(fsnotify.Remove) {
		t.Errorf("%v, want a Remove", ev)
	}
	replace(t, f, "back")
	r.nextNaming(t, f, "the file coming back")
}

// A file that does not exist yet is watched by its name: it is seen when it comes.
func TestFileThatDoesNotExistYet(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "later.pem")
	r := watch(t, 10*time.Millisecond, f)
	write(t, f, "now")
	r.nextNaming(t, f, "the file's creation")
}

// Other files beside a watched file are no change: an editor's temporary file, a file that
// is not configured.
func TestOtherFilesBesideAFileAreNoChange(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tls.crt")
	write(t, f, "v0")
	r := watch(t, 10*time.Millisecond, f)
	write(t, filepath.Join(dir, "unrelated"), "x")
	write(t, filepath.Join(dir, ".tls.crt.swp"), "x")
	mkdir(t, filepath.Join(dir, "sub"))
	r.none(t, "files beside the watched one")
}

// mount lays a directory out as kubelet mounts a ConfigMap or Secret: each file NAME is a
// symlink to ..data/NAME, ..data a symlink to a directory of the current version's files.
type mount struct {
	dir     string
	version int
}

func newMount(t *testing.T, names ...string) *mount {
	t.Helper()
	m := &mount{dir: t.TempDir()}
	m.update(t, names...)
	for _, name := range names {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(m.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// update writes a new version's files and swaps ..data to it in one rename, as kubelet does:
// no file the reader opens is written, created or renamed.
func (m *mount) update(t *testing.T, names ...string) {
	t.Helper()
	m.version++
	version := fmt.Sprintf("..v%d", m.version)
	mkdir(t, filepath.Join(m.dir, version))
	for _, name := range names {
		write(t, filepath.Join(m.dir, version, name), version)
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if m.version > 1 {
		if err := os.RemoveAll(filepath.Join(m.dir, fmt.Sprintf("..v%d", m.version-1))); err != nil {
			t.Fatal(err)
		}
	}
}

// A kubelet mount changes by the rename of ..data: no event names the files themselves, which
// are symlinks, so any event beside them counts.
func TestKubeletSymlinkSwap(t *testing.T) {
	for _, how := range []string{"files", "directory"} {
		t.Run(how, func(t *testing.T) {
			m := newMount(t, "tls.crt", "tls.key")
			paths := []string{filepath.Join(m.dir, "tls.crt"), filepath.Join(m.dir, "tls.key")}
			if how == "directory" {
				paths = []string{m.dir}
			}
			r := watch(t, 10*time.Millisecond, paths...)
			m.update(t, "tls.crt", "tls.key")
			// The swap's events may come in more than one notification on a loaded host (the
			// debounce is short): read until the rename of ..data, which must come.
			var seen []Event
			for !slices.ContainsFunc(seen, func(ev Event) bool { return ev.Name == filepath.Join(m.dir, "..data") }) {
				c := r.next(t, fmt.Sprintf("the swap of ..data (events so far %v)", seen))
				seen = append(seen, c.Events...)
				if len(c.Errors) != 0 {
					t.Errorf("errors %v", c.Errors)
				}
			}
		})
	}
}

// A directory's entries: each file that comes, changes or goes, and a sub-directory that
// comes; not what happens inside a sub-directory.
func TestDirectoryEntries(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	write(t, a, "a")
	sub := filepath.Join(dir, "sub")
	mkdir(t, sub)
	r := watch(t, 10*time.Millisecond, dir)

	b := filepath.Join(dir, "b.yaml")
	replace(t, b, "b")
	r.nextNaming(t, b, "a new file")
	write(t, a, "a2")
	r.nextNaming(t, a, "a write in place")
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	r.nextNaming(t, b, "a removal")
	other := filepath.Join(dir, "other")
	mkdir(t, other)
	r.nextNaming(t, other, "a new sub-directory")

	write(t, filepath.Join(sub, "nested.yaml"), "x")
	write(t, filepath.Join(other, "nested.yaml"), "x")
	r.none(t, "files inside sub-directories")
}

// The other entries of a directory's parent are no change.
func TestDirectoryParentsOtherEntriesAreNoChange(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "config")
	mkdir(t, dir)
	r := watch(t, 10*time.Millisecond, dir)
	write(t, filepath.Join(parent, "sibling.yaml"), "x")
	mkdir(t, filepath.Join(parent, "config.next"))
	r.none(t, "the parent's other entries")
}

// A directory removed and created again, or replaced by a rename, is seen going and coming
// back, and watched again: the changes in the new one are notified, those in the one renamed
// away are not.
func TestDirectoryReplaced(t *testing.T) {
	for _, how := range []string{"removed and created again", "replaced by rename"} {
		t.Run(how, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "config")
			mkdir(t, dir)
			write(t, filepath.Join(dir, "a.yaml"), "a")
			r := watch(t, 10*time.Millisecond, dir)

			old := filepath.Join(parent, "config.old")
			if how == "removed and created again" {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if ev := r.nextNaming(t, dir, "the removal"); !ev.Op.Has(fsnotify.Remove) {
					t.Errorf("%v, want a Remove of the directory", ev)
				}
				mkdir(t, dir)
				r.nextNaming(t, dir, "the directory coming back")
			} else {
				next := filepath.Join(parent, "config.next")
				mkdir(t, next)
				write(t, filepath.Join(next, "b.yaml"), "b")
				if err := os.Rename(dir, old); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(next, dir); err != nil {
					t.Fatal(err)
				}
				if ev := r.nextNaming(t, dir, "the rename into place"); !ev.Op.Has(fsnotify.Create) {
					t.Errorf("%v, want a Create of the directory", ev)
				}
			}
			// Whatever came before, a change in the new directory is notified.
			c := filepath.Join(dir, "c.yaml")
			replace(t, c, "c")
			r.nextNaming(t, c, "a file in the new directory")
			if how == "replaced by rename" {
				write(t, filepath.Join(old, "a.yaml"), "changed")
				r.none(t, "a change in the directory renamed away")
			}
		})
	}
}

// A burst of events is one notification, naming every path of it once.
func TestBurstIsOneNotification(t *testing.T) {
	dir := t.TempDir()
	r := watch(t, 300*time.Millisecond, dir)
	var want []string
	for i := range 20 { // a create and a rename each: forty events or more
		name := filepath.Join(dir, fmt.Sprintf("svc%02d.yaml", i))
		replace(t, name, "x")
		want = append(want, name)
	}
	seen := map[string]bool{}
	notifications := 0
	for len(seen) < len(want) {
		c := r.next(t, "the burst")
		notifications++
		for _, ev := range c.Events {
			if strings.HasSuffix(ev.Name, ".yaml") {
				if seen[ev.Name] {
					t.Errorf("%s named twice", ev.Name)
				}
				seen[ev.Name] = true
			}
		}
		if !slices.IsSortedFunc(c.Events, func(a, b Event) int { return strings.Compare(a.Name, b.Name) }) {
			t.Errorf("events not sorted: %v", c.Events)
		}
	}
	// One is expected; a slow machine may split the burst across a debounce boundary.
	if notifications > 3 {
		t.Errorf("%d notifications for one burst, want them gathered", notifications)
	}
}

// Events during a pending notification join it without delaying it: a steady stream of
// changes is notified once per debounce interval, not once it stops.
func TestSteadyStreamIsStillNotified(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "busy.yaml")
	r := watch(t, 50*time.Millisecond, dir)
	for i := range 60 {
		write(t, f, fmt.Sprint(i))
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(r.changes); n < 2 {
		t.Errorf("%d notifications while changes came for 600ms, with a debounce of 50ms", n)
	}
}

func TestZeroDebounceNotifies(t *testing.T) {
	dir := t.TempDir()
	r := watch(t, 0, dir)
	f := filepath.Join(dir, "a.yaml")
	write(t, f, "x")
	r.nextNaming(t, f, "a write")
}

func TestNewNamesWhatCannotBeWatched(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope", "tls.crt")
	_, err := New(Options{Paths: []string{missing}})
	if err == nil || !strings.Contains(err.Error(), filepath.Dir(missing)) {
		t.Fatalf("New = %v, want an error naming %s", err, filepath.Dir(missing))
	}
	if _, err := New(Options{}); err == nil {
		t.Error("New without paths: no error")
	}
}

// A watch that stops on its own is Run's error; Run ends with its context, nil, and may not
// run twice. (TestMain checks that nothing is left running.)
func TestRunEnds(t *testing.T) {
	dir := t.TempDir()
	w, err := New(Options{Paths: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := w.Run(context.Background(), func(Change) {}); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Run after Close = %v, want the watcher's stop", err)
	}
	if err := w.Run(context.Background(), func(Change) {}); err == nil {
		t.Error("a second Run: no error")
	}

	w, err = New(Options{Paths: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(Change) {}) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after its context ended, want nil", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not end with its context")
	}
	w.Close() // again: harmless
}

// A directory back but not watchable is reported, as an *fs.PathError naming it, with the
// notification of its return.
func TestDirectoryThatCannotBeWatchedAgainIsReported(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may watch a directory it cannot read")
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "config")
	mkdir(t, dir)
	r := watch(t, 10*time.Millisecond, dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	r.nextNaming(t, dir, "the removal")
	if err := os.Mkdir(dir, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	deadline := time.After(waitTimeout)
	for {
		select {
		case c := <-r.changes:
			for _, err := range c.Errors {
				var pe *fs.PathError
				if errors.As(err, &pe) && pe.Op == "watch" && pe.Path == dir {
					return
				}
			}
		case <-deadline:
			t.Fatal("no error for the directory that cannot be watched")
		}
	}
}

// The package is a leaf: the standard library and fsnotify, nothing of the bridge's.
func TestImportsOnlyTheStandardLibraryAndFsnotify(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && path != "github.com/fsnotify/fsnotify" {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}
