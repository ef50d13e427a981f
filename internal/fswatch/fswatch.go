// Package fswatch watches files and directories with fsnotify and turns each burst of changes
// into one notification. It is what the TLS files (internal/tlsserver) and the Istio YAML
// files (sink/filesource) are followed with: both read everything again when told, so a
// notification says that something changed, and roughly what, not exactly what.
//
// A path is followed through the directories around it, never through a watch on a file
// itself, which the ways files change on disk would end:
//
//   - A file is watched through its directory. Editors, kubectl-style tools and kubelet
//     replace a file by renaming another over it (a watch on the old file sees nothing more),
//     and kubelet swaps a mounted ConfigMap's or Secret's files at once by renaming a "..data"
//     symlink in the directory: no event names the files themselves. So an event on the file's
//     name counts, and, while the file is a symlink, any event in its directory.
//   - A directory is watched, for its entries, and through its parent, for itself: removed and
//     created again (rm -rf dir && cp -r new dir), or replaced by a rename (a ConfigMap
//     remount), it is a new directory, which the old watch does not see. The parent sees it
//     come back, and it is watched again before the notification. Its sub-directories are not
//     watched: a directory means the entries directly in it (a sub-directory that appears,
//     goes or is renamed is one of them).
//
// Anything else the watched directories report (another file beside a watched one, another
// entry of a directory's parent) is no change.
package fswatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Options configure a Watcher.
type Options struct {
	// Paths are the files and directories to follow. A path that is a directory when New runs
	// is followed as one; any other, existing or not, as a file, whose directory must exist.
	Paths []string
	// Debounce is how long a notification waits after the first event of a burst: events that
	// come meanwhile join it, without delaying it, so that a steady stream of changes is still
	// notified once per Debounce. Zero notifies at once.
	Debounce time.Duration
}

// Change is one notification: what changed since the last one.
type Change struct {
	// Events are the paths that changed, each once (its operations together), sorted by name.
	Events []Event
	// Errors are what the watch could not do: fsnotify's errors (fsnotify.ErrEventOverflow:
	// events were lost, so anything may have changed), and, as an *fs.PathError with Op
	// "watch", a directory that exists again but could not be watched (its changes will be
	// missed until a later notification watches it).
	Errors []error
}

// Event is a change of one path: an entry of a watched directory, the directory itself, or a
// watched file.
type Event struct {
	Name string // absolute and clean
	Op   fsnotify.Op
}

// Watcher follows Options.Paths from New until Run returns, or Close.
type Watcher struct {
	opts    Options
	w       *fsnotify.Watcher
	files   []string // absolute and clean
	dirs    []string
	running atomic.Bool
	close   sync.Once
}

// New starts watching: changes from now on are notified by Run, so that a caller can read
// its files after New and miss nothing that changes meanwhile. Its error names the path that
// cannot be watched. Run, or Close, releases the watch.
func New(opts Options) (*Watcher, error) {
	if len(opts.Paths) == 0 {
		return nil, errors.New("no paths to watch")
	}
	w := &Watcher{opts: opts}
	for _, p := range opts.Paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("watching %s: %w", p, err)
		}
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			w.dirs = append(w.dirs, abs)
		} else {
			w.files = append(w.files, abs)
		}
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("starting the file watcher: %w", err)
	}
	w.w = fw
	for _, d := range w.watched() {
		if err := fw.Add(d); err != nil {
			fw.Close()
			return nil, fmt.Errorf("watching %s: %w", d, unwrapPathError(err))
		}
	}
	return w, nil
}

// watched are the directories to watch: each directory, and the parent of each path.
func (w *Watcher) watched() []string {
	var out []string
	add := func(d string) {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	for _, d := range w.dirs {
		add(d)
		add(filepath.Dir(d))
	}
	for _, f := range w.files {
		add(filepath.Dir(f))
	}
	return out
}

// Run calls notify with each change, on Run's goroutine, until ctx ends; then it returns nil,
// the watch released. Events that come while notify runs are gathered for the next call. It
// returns an error when the watch stops on its own (Close, or fsnotify gave up).
func (w *Watcher) Run(ctx context.Context, notify func(Change)) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("fswatch: Run called twice")
	}
	defer w.Close()
	timer := time.NewTimer(0)
	timer.Stop()
	defer timer.Stop()
	pending := false
	var ch Change
	ops := map[string]fsnotify.Op{}
	arm := func() {
		if !pending {
			pending = true
			timer.Reset(max(w.opts.Debounce, 0))
		}
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case ev, ok := <-w.w.Events:
			if !ok {
				return errors.New("the file watcher stopped")
			}
			name := filepath.Clean(ev.Name)
			if w.relevant(name) {
				ops[name] |= ev.Op
				arm()
			}
		case err, ok := <-w.w.Errors:
			if !ok {
				return errors.New("the file watcher stopped")
			}
			ch.Errors = append(ch.Errors, err)
			arm()
		case <-timer.C:
			pending = false
			for name, op := range ops {
				ch.Events = append(ch.Events, Event{Name: name, Op: op})
			}
			slices.SortFunc(ch.Events, func(a, b Event) int { return cmp.Compare(a.Name, b.Name) })
			ch.Errors = append(ch.Errors, w.rewatch()...)
			notify(ch)
			ch = Change{}
			clear(ops)
		}
	}
	return nil
}

// Close releases the watch of a Watcher whose Run will not be called (Run releases it when it
// returns). It is safe to call more than once.
func (w *Watcher) Close() error {
	var err error
	w.close.Do(func() { err = w.w.Close() })
	return err
}

// relevant reports whether an event may change what a path holds: an entry of a watched
// directory or the directory itself, a watched file, or anything beside a watched file that
// is a symlink (kubelet re-points "..data" without an event on the file's name). Symlinks
// are looked at when the event comes, since a file may become one.
func (w *Watcher) relevant(name string) bool {
	dir := filepath.Dir(name)
	for _, d := range w.dirs {
		if name == d || dir == d {
			return true
		}
	}
	for _, f := range w.files {
		if name == f || (dir == filepath.Dir(f) && isSymlink(f)) {
			return true
		}
	}
	return false
}

// rewatch watches every directory that exists, again: one removed and created again, or
// renamed into place, is a new directory that the old watch does not see. Watching a watched
// directory again changes nothing. An absent one is left: its parent sees it come back.
func (w *Watcher) rewatch() []error {
	var errs []error
	for _, d := range w.dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		if err := w.w.Add(d); err != nil {
			errs = append(errs, &fs.PathError{Op: "watch", Path: d, Err: unwrapPathError(err)})
		}
	}
	return errs
}

func isSymlink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// unwrapPathError drops the path and operation of an *fs.PathError, for messages that name
// the path already.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
