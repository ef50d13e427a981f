package store

import "sync"

// Watch wakes its owner when any of its collections changes. Its channel has room for one
// signal: changes that arrive while the owner is busy coalesce into one wake-up, and the owner
// then reads everything since its last revision with ChangesSince. No polling, and the cost of
// a write is one non-blocking send per watcher of the collections it touched.
type Watch struct {
	c      chan struct{}
	topics *topics
	mu     sync.Mutex // guards colls
	colls  map[string]bool
	all    bool
}

// C is signalled after a commit that changed a watched collection.
func (w *Watch) C() <-chan struct{} { return w.c }

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
		subs := w.topics.byCollection[c]
		if subs == nil {
			subs = map[*Watch]struct{}{}
			w.topics.byCollection[c] = subs
		}
		subs[w] = struct{}{}
	}
}

// Close stops the watch; its channel is not closed (a reader may still select on it).
func (w *Watch) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.topics.mu.Lock()
	defer w.topics.mu.Unlock()
	for c := range w.colls {
		if subs := w.topics.byCollection[c]; subs != nil {
			delete(subs, w)
			if len(subs) == 0 {
				delete(w.topics.byCollection, c)
			}
		}
	}
	w.colls = map[string]bool{}
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

func (t *topics) notify(collections []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for w := range t.everything {
		signal(w.c)
	}
	for _, c := range collections {
		for w := range t.byCollection[c] {
			signal(w.c)
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a wake-up is already pending; it will see this change too
	}
}
