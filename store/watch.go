package store

import "sync"

// Watch wakes its owner when any of its collections changes. Its channel has room for one
// signal: changes that arrive while the owner is busy coalesce into one wake-up, and the owner
// then reads everything since its last revision with ChangesSince. No polling, and the cost of
// a write is one non-blocking send per watcher of the collections it touched. The watch also
// remembers which of its collections changed (Changed), so that an owner watching many
// collections does work in proportion to what changed, not to what it watches.
type Watch struct {
	c      chan struct{}
	topics *topics
	mu     sync.Mutex // guards colls and layers; both change under topics.mu too, which notify holds
	colls  map[string]bool
	all    bool
	// layers maps the parts of the layered collections watched to those collections: a change
	// of a part is a change of each (see Layered).
	layers map[string][]string

	changedMu sync.Mutex // guards changed and muted; taken under topics.mu, never the other way round
	changed   map[string]struct{}
	muted     map[string]struct{}
}

// C is signalled after a commit that changed a watched collection.
func (w *Watch) C() <-chan struct{} { return w.c }

// Changed returns the watched collections that changed since the last call, and forgets them.
func (w *Watch) Changed() []string {
	w.changedMu.Lock()
	defer w.changedMu.Unlock()
	if len(w.changed) == 0 {
		return nil
	}
	out := make([]string, 0, len(w.changed))
	for c := range w.changed {
		out = append(out, c)
	}
	clear(w.changed)
	return out
}

// changedIn records that a collection changed, as the watch names it: itself if watched (or
// all are), and each layered collection watched that it is a part of. Called under topics.mu.
func (w *Watch) changedIn(collection string) {
	if w.all || w.colls[collection] {
		w.mark(collection)
	}
	for _, l := range w.layers[collection] {
		w.mark(l)
	}
}

// mark records a changed collection and wakes the owner, unless the collection is muted.
func (w *Watch) mark(collection string) {
	w.changedMu.Lock()
	if w.changed == nil {
		w.changed = map[string]struct{}{}
	}
	w.changed[collection] = struct{}{}
	_, muted := w.muted[collection]
	w.changedMu.Unlock()
	if !muted {
		signal(w.c)
	}
}

// Mute stops changes of these collections from waking the owner; they are still recorded, and
// Changed returns them. An owner that will look at a collection later anyway (on a timer)
// mutes it meanwhile, so that a flood of its changes costs no wake-ups.
func (w *Watch) Mute(collections ...string) {
	w.changedMu.Lock()
	defer w.changedMu.Unlock()
	if w.muted == nil {
		w.muted = map[string]struct{}{}
	}
	for _, c := range collections {
		w.muted[c] = struct{}{}
	}
}

// Unmute lets changes of every muted collection wake the owner again.
func (w *Watch) Unmute() {
	w.changedMu.Lock()
	defer w.changedMu.Unlock()
	clear(w.muted)
}

// Add extends the watch to more collections.
func (w *Watch) Add(collections ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.topics.mu.Lock()
	defer w.topics.mu.Unlock()
	for _, c := range collections {
		if w.colls[c] {
			continue
		}
		w.colls[c] = true
		base, overlay, layered := splitLayered(c)
		if !layered {
			w.topics.add(c, w)
			continue
		}
		if w.layers == nil {
			w.layers = map[string][]string{}
		}
		for _, part := range [...]string{base, overlay} {
			w.layers[part] = append(w.layers[part], c)
			w.topics.add(part, w)
		}
	}
}

// Close stops the watch; its channel is not closed (a reader may still select on it).
func (w *Watch) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.topics.mu.Lock()
	defer w.topics.mu.Unlock()
	for c := range w.colls {
		w.topics.remove(c, w)
	}
	for part := range w.layers {
		w.topics.remove(part, w)
	}
	w.colls = map[string]bool{}
	w.layers = nil
	delete(w.topics.everything, w)
}

// Watch returns a watch on the given collections; with none, on every collection.
func (s *Store) Watch(collections ...string) *Watch {
	w := &Watch{c: make(chan struct{}, 1), topics: &s.topics, colls: map[string]bool{}}
	if len(collections) == 0 {
		w.all = true
		s.topics.mu.Lock()
		s.topics.everything[w] = struct{}{}
		s.topics.mu.Unlock()
		return w
	}
	w.Add(collections...)
	return w
}

// topics maps each collection to the watches that want it.
type topics struct {
	mu           sync.Mutex
	byCollection map[string]map[*Watch]struct{}
	everything   map[*Watch]struct{}
}

func (t *topics) init() {
	t.byCollection = map[string]map[*Watch]struct{}{}
	t.everything = map[*Watch]struct{}{}
}

func (t *topics) add(c string, w *Watch) {
	subs := t.byCollection[c]
	if subs == nil {
		subs = map[*Watch]struct{}{}
		t.byCollection[c] = subs
	}
	subs[w] = struct{}{}
}

func (t *topics) remove(c string, w *Watch) {
	if subs := t.byCollection[c]; subs != nil {
		delete(subs, w)
		if len(subs) == 0 {
			delete(t.byCollection, c)
		}
	}
}

func (t *topics) notify(collections []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for w := range t.everything {
		for _, c := range collections {
			w.mark(c)
		}
	}
	for _, c := range collections {
		for w := range t.byCollection[c] {
			w.changedIn(c)
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a wake-up is already pending; it will see this change too
	}
}
