// Package filesource serves Istio YAML files as a producer of the store: it decodes them,
// applies them as one owner's full state, and follows their changes on disk.
//
// A path is a file or a directory. A directory contributes every *.yaml and *.yml file directly
// inside it, not those of its sub-directories: a Kubernetes ConfigMap or Secret volume keeps a
// hidden, timestamped sub-directory with a second copy of every file, which a recursive walk
// would load twice. Files whose names start with "." are ignored too (editors' lock and swap
// files).
//
// A directory that is removed and created again, or replaced by a rename (a ConfigMap
// remount, rm -rf dir && cp -r new dir), is seen through its parent's watch and watched again;
// while it is absent its last files stay served and a fault says so.
//
// Each reload reads every file and applies the whole owner's state at once: a change is never
// seen half-applied. A file that cannot be read or that has any faulty document keeps its last
// good resources, and its faults are reported; a file that has never decoded contributes nothing.
package filesource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/mcpbridge/mcpbridge/internal/fswatch"
	"github.com/mcpbridge/mcpbridge/internal/parallel"
	"github.com/mcpbridge/mcpbridge/sink/ownerstate"
	"github.com/mcpbridge/mcpbridge/store"
)

// Applier is the part of the store the file source writes to: the first state whole, then
// each reload's difference (the same as the other sources').
type Applier = ownerstate.Applier

// Options configures a Source.
type Options struct {
	// Paths are the files and directories to serve and watch. Each must exist when Run starts.
	Paths []string
	// Owner is the producer ID the resources are stored under. Empty means "file".
	Owner string
	// Debounce is how long to wait after a change before reloading, so that a burst of changes
	// (an editor's save, a git checkout) is one reload; zero reloads at once. The bridge
	// passes sources.file_debounce.
	Debounce time.Duration
	Store    Applier
	Logger   *slog.Logger
	// NamesAsGiven makes faults name files as Paths give them: a path as given, relative or
	// absolute, and a file found in a directory as the directory as given joined with the
	// file's name. Without it they are absolute, whatever the working directory of whoever
	// reads them. For mcpbridge validate, whose reader is the person who typed the paths.
	NamesAsGiven bool
}

const defaultOwner = "file"

// Source serves files of Istio YAML to the store. Create it with New and call Run once.
type Source struct {
	opts    Options
	log     *slog.Logger
	ready   chan struct{}
	running atomic.Bool

	mu     sync.Mutex
	faults []error // of the last reload

	// reloaded, if set before Run, is called after every reload. For tests.
	reloaded func()
}

// New returns a Source; nothing is read before Run.
func New(opts Options) *Source {
	if opts.Owner == "" {
		opts.Owner = defaultOwner
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{
		opts:  opts,
		log:   log.With("component", "filesource", "owner", opts.Owner),
		ready: make(chan struct{}),
	}
}

// Ready is closed once the first full state has been offered to the store, even if some files
// were faulty (see Faults) or the store refused it (the fault is then in Faults too).
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Faults returns the faults found by the last reload: faulty documents (as *DecodeError), files
// that could not be read, names defined twice, and a write the store refused. Empty when all is well.
func (s *Source) Faults() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.faults...)
}

// Run loads every path, applies the state, and follows changes until ctx ends; then it returns
// nil, its watcher closed. It returns an error at once when a path does not exist or cannot be
// watched, naming the path.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("file source: Run called twice")
	}
	if s.opts.Store == nil {
		return errors.New("file source: no store to apply to")
	}
	roots, err := resolveRoots(s.opts.Paths)
	if err != nil {
		return err
	}
	paths := make([]string, len(roots))
	for i, r := range roots {
		paths[i] = r.path
	}
	// Watch before the first load, so that a change made during the load is not missed.
	w, err := fswatch.New(fswatch.Options{Paths: paths, Debounce: s.opts.Debounce})
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	l := &loader{roots: roots, files: map[string]*fileState{}, namesAsGiven: s.opts.NamesAsGiven}
	s.reload(l)
	close(s.ready)
	if err := w.Run(ctx, func(c fswatch.Change) { s.changed(l, c) }); err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	return nil
}

// changed reloads after a burst of changes to the paths (internal/fswatch: a directory's
// entries and the directory itself, a file's name, anything beside a file that is a symlink).
// Every reload looks at every file, reading those whose fingerprint moved (fingerprint.go),
// and after a watch error (an overflow: events were lost) reads them all.
func (s *Source) changed(l *loader, c fswatch.Change) {
	for _, ev := range c.Events {
		s.log.Debug("file changed", "file", ev.Name, "op", ev.Op.String())
	}
	l.watchFaults = nil
	for _, err := range c.Errors {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Op == "watch" {
			// A directory back but not watched: a fault of this reload, as long as it lasts.
			l.watchFaults = append(l.watchFaults, &DecodeError{File: l.name(pe.Path), Err: fmt.Errorf("watching directory: %w", pe.Err)})
			continue
		}
		s.log.Warn("file watcher error; reloading everything", "err", err)
		l.readAll = true
	}
	s.reload(l)
}

// reload reads every file that may have changed, applies the owner's full state if it
// changed, and records the faults.
func (s *Source) reload(l *loader) {
	ld := l.load()
	faults := ld.faults
	if ld.changed || !l.applied {
		res, err := s.write(l)
		switch {
		case err != nil:
			// The store applied nothing: what it served before stays served. Logged with the
			// other faults, by setFaults; tried again at the next reload.
			faults = append(faults, fmt.Errorf("store refused the files' state; the previous state is kept: %w", err))
		case res.Changed > 0:
			s.log.Info("applied files", "files", len(l.files), "resources", ld.count,
				"changed", res.Changed, "revision", res.Revision, "faults", len(faults))
		}
	}
	s.setFaults(faults)
	if s.reloaded != nil {
		s.reloaded()
	}
}

// write gives the store the files' state: whole the first time (and after a refusal), else
// only the names the changed files touched, so that an edit of one file costs the store that
// file's resources, not everything the files hold.
func (s *Source) write(l *loader) (store.Result, error) {
	var res store.Result
	var err error
	if !l.applied {
		res, err = s.opts.Store.ReplaceOwnerEncoded(s.opts.Owner, l.index.state(l.files))
	} else {
		updates := l.index.updates(l.files)
		if len(updates) == 0 {
			l.index.wrote()
			return store.Result{}, nil
		}
		res, err = s.opts.Store.Apply(s.opts.Owner, updates...)
	}
	l.applied = err == nil
	if l.applied {
		l.index.wrote()
	}
	return res, err
}

// setFaults replaces the current faults and logs those that are new and those that are gone,
// so that a fault is logged when it appears and when it clears, not at every reload. It logs
// before it lets go of the lock, so that whoever sees the new faults through Faults can also
// find their lines in the log.
func (s *Source) setFaults(faults []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := make(map[string]bool, len(s.faults))
	for _, f := range s.faults {
		old[f.Error()] = true
	}
	now := make(map[string]bool, len(faults))
	for _, f := range faults {
		now[f.Error()] = true
		if !old[f.Error()] {
			s.log.Warn("config fault", "fault", f.Error())
		}
	}
	for _, f := range s.faults {
		if !now[f.Error()] {
			s.log.Info("config fault cleared", "fault", f.Error())
		}
	}
	s.faults = faults
}

// root is one configured path.
type root struct {
	path  string // absolute and clean
	given string // as configured, for faults (Options.NamesAsGiven)
	dir   bool
}

func resolveRoots(paths []string) ([]root, error) {
	if len(paths) == 0 {
		return nil, errors.New("file source: no paths to serve")
	}
	roots := make([]root, 0, len(paths))
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("file source: path %q: %w", p, err)
		}
		fi, err := os.Stat(abs)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("file source: path %q does not exist", p)
		}
		if err != nil {
			return nil, fmt.Errorf("file source: path %q: %w", p, unwrapPathError(err))
		}
		roots = append(roots, root{path: abs, given: p, dir: fi.IsDir()})
	}
	return roots, nil
}

// loader holds what the last reload read. Only Run's goroutine uses it.
type loader struct {
	roots        []root
	namesAsGiven bool                  // Options.NamesAsGiven
	files        map[string]*fileState // by absolute path
	// watchFaults are directories that exist again but could not be watched again.
	watchFaults []error
	// applied is true when the store holds the state of files: a reload that changes no
	// file's objects then has nothing to write, and one that does writes the difference.
	applied bool
	// index is the owner's state, kept up to date file by file.
	index *index
	// readAll makes the next load read every file, fingerprints or not: the watch lost
	// events (fingerprint.go).
	readAll bool
}

// loadResult is what one reload found.
type loadResult struct {
	count   int // resources in the owner's state
	faults  []error
	changed bool // some file's objects changed since the previous load
}

// name is what faults call a file or directory: its absolute path, or with NamesAsGiven, the
// name of the configured path it is, or is directly in (a directory's file).
func (l *loader) name(abs string) string {
	if !l.namesAsGiven {
		return abs
	}
	for _, r := range l.roots {
		if abs == r.path {
			return r.given
		}
	}
	for _, r := range l.roots {
		if r.dir && filepath.Dir(abs) == r.path {
			return filepath.Join(r.given, filepath.Base(abs))
		}
	}
	return abs
}

// fileState is what is known of one file.
type fileState struct {
	name    string   // what its faults call it (loader.name)
	root    string   // the configured path it was found under
	sum     uint64   // xxHash of the content last read, to skip decoding an unchanged file
	read    bool     // sum is set
	objects []stored // of the last content that decoded without fault
	// byKey are the indexes of objects in (collection, name) order, for object's binary
	// search: 4 bytes an object where a map was about 100 (a million ServiceEntries' files).
	byKey  []int32
	faults []error // of the content last read; empty when it decoded well
	// fp is the file's fingerprint taken before the content last read, readAt when;
	// fpOK false when there is none (fingerprint.go).
	fp     fingerprint
	fpOK   bool
	readAt time.Time
}

// object returns the file's object of a name.
func (f *fileState) object(k objKey) (stored, bool) {
	at, ok := slices.BinarySearchFunc(f.byKey, k, func(i int32, k objKey) int {
		return compareKeys(f.objects[i].key(), k)
	})
	if !ok {
		return stored{}, false
	}
	return f.objects[f.byKey[at]], true
}

func compareKeys(a, b objKey) int {
	if c := strings.Compare(a.collection, b.collection); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// load reads every file that may have changed and merges their objects into the owner's
// full state.
func (l *loader) load() loadResult {
	paths, keep, faults := l.list()
	files := make(map[string]*fileState, len(paths)+len(keep))
	for _, p := range keep {
		files[p] = l.files[p] // not read: what it had stays
	}
	// Read and decode in parallel: YAML decoding is most of a large load, and files are
	// independent. Each worker refreshes its own fileStates; the results are merged in path order.
	order := sortedKeys(paths)
	states := make([]*fileState, len(order))
	results := make([]refreshed, len(order))
	for i, p := range order {
		states[i] = l.files[p]
		if states[i] == nil {
			states[i] = &fileState{name: l.name(p), root: paths[p].path}
		}
	}
	before := make([][]stored, len(order))
	for i, st := range states {
		before[i] = st.objects
	}
	readAll := l.readAll
	l.readAll = false
	parallel.For(len(order), 1, func(i int) {
		results[i].gone, results[i].decoded = states[i].refresh(order[i], readAll)
	})
	if l.index == nil {
		sizes := map[string]int{}
		for _, st := range states {
			for _, o := range st.objects {
				sizes[o.kind.Collection]++
			}
		}
		l.index = newIndex(sizes)
	}
	// Until the store holds the files' state, each write is of all of it (write).
	l.index.whole = !l.applied
	changed := false
	for i, p := range order {
		st, r := states[i], results[i]
		if r.decoded {
			changed = true
			l.index.replaced(p, before[i], st.objects)
		}
		if r.gone {
			// A file of a directory may come and go; a file named in the configuration may not.
			if !paths[p].dir {
				faults = append(faults, &DecodeError{File: l.name(p), Err: errors.New("file does not exist")})
			}
			continue
		}
		faults = append(faults, st.faults...)
		files[p] = st
	}
	for p, st := range l.files {
		if files[p] == nil {
			changed = true // a file that went
			l.index.replaced(p, st.objects, nil)
		}
	}
	l.files = files
	faults = append(faults, l.index.dupFaults(files)...)
	return loadResult{count: l.index.names, faults: faults, changed: changed}
}

type refreshed struct{ gone, decoded bool }

// list returns every file to read, with the root it was found under, and the files to keep
// as they are without reading them: those of a directory that cannot be listed, or that is
// absent (removed, or being replaced); they stay served until it is back.
func (l *loader) list() (paths map[string]root, keep []string, faults []error) {
	paths = map[string]root{}
	faults = append(faults, l.watchFaults...)
	for _, r := range l.roots {
		if !r.dir {
			paths[r.path] = r
			continue
		}
		files, err := yamlFiles(r.path)
		if err != nil {
			msg := fmt.Errorf("listing directory: %w; the files it had stay served until it can be read again", unwrapPathError(err))
			if errors.Is(err, fs.ErrNotExist) {
				msg = errors.New("directory does not exist (removed, or being replaced); the files it had stay served until it is back")
			}
			faults = append(faults, &DecodeError{File: l.name(r.path), Err: msg})
			keep = append(keep, l.filesUnder(r.path)...)
			continue
		}
		for _, f := range files {
			if _, ok := paths[f]; !ok {
				paths[f] = r
			}
		}
	}
	return paths, keep, faults
}

func (l *loader) filesUnder(root string) []string {
	var out []string
	for p, st := range l.files {
		if st.root == root {
			out = append(out, p)
		}
	}
	return out
}

// yamlFiles lists the *.yaml and *.yml files directly in dir, following symlinks to files.
func yamlFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		p := filepath.Join(dir, name)
		if e.Type()&fs.ModeSymlink != 0 {
			if fi, err := os.Stat(p); err != nil || fi.IsDir() {
				continue // dangling, or to a directory
			}
		} else if !e.Type().IsRegular() {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// refresh reads the file, unless its fingerprint says it is unchanged (or force), and decodes
// it if its content changed. It reports gone when the file
// no longer exists, and decoded when its objects were replaced by a new decode without fault;
// read faults and decode faults keep the last good objects.
func (f *fileState) refresh(path string, force bool) (gone, decoded bool) {
	fp, fpOK := fingerprint{}, false
	if fi, err := os.Stat(path); err == nil {
		fp, fpOK = fingerprintOf(fi)
	}
	if !force && f.read && fpOK && f.fpOK && unchanged(f.fp, fp, f.readAt) {
		return false, false // not read: what it had stays (fingerprint.go)
	}
	f.fp, f.fpOK, f.readAt = fp, fpOK, time.Now()
	scratch := getReadScratch()
	data, err := readFile(path, scratch.text)
	if errors.Is(err, fs.ErrNotExist) {
		return true, false
	}
	if err != nil {
		f.read = false // decode again once readable, whatever the content
		f.faults = []error{&DecodeError{File: f.nameOr(path), Err: fmt.Errorf("reading: %w", unwrapPathError(err))}}
		return false, false
	}
	sum := xxhash.Sum64(data)
	if f.read && sum == f.sum {
		putReadScratch(scratch, data) // nothing was decoded from it
		return false, false
	}
	f.sum, f.read = sum, true
	decodedObjs, errs := decodeOwned(data, f.nameOr(path), scratch.values) // data is this read's alone
	f.faults = errs
	if len(errs) > 0 {
		return false, false
	}
	objs, err := storedOf(decodedObjs)
	if err != nil {
		f.read = false
		f.faults = []error{&DecodeError{File: f.nameOr(path), Err: err}}
		return false, false
	}
	f.setObjects(objs)
	// Nothing views the scratch any more: the objects decoded into it (whose strings may be
	// views into the text, and whose bodies are in the blocks) were encoded into bytes of
	// their own. On the paths above, faults may still view it, and it is left to the
	// collector.
	putReadScratch(scratch, data)
	return false, true
}

// setObjects makes objs, one per name (as Decode keeps them), the file's objects.
func (f *fileState) setObjects(objs []stored) {
	f.objects = objs
	f.byKey = make([]int32, len(objs))
	// Each key read once: an object's name is read from its encoding, and reading it at every
	// comparison of the sort was a sixth of a million-object load.
	keys := make([]objKey, len(objs))
	for i, o := range objs {
		f.byKey[i] = int32(i)
		keys[i] = o.key()
	}
	slices.SortFunc(f.byKey, func(i, j int32) int { return compareKeys(keys[i], keys[j]) })
}

// nameOr is what faults call the file: its name, or path if it has none.
func (f *fileState) nameOr(path string) string {
	if f.name != "" {
		return f.name
	}
	return path
}

// unwrapPathError drops the path and operation of an *fs.PathError, for messages that name the
// path already.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
