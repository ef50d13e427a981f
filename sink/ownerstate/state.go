// Package ownerstate keeps the state a source wants its owner to have in the store, and writes
// it in proportion to what changed: the whole state the first time (one ReplaceOwnerEncoded,
// so that what the owner held before a restart and no longer has is removed), then only the
// names that changed since the last write. A write the store refuses is tried again whole at
// the next Flush: nothing is lost and nothing is half-applied.
//
// Sources that follow an outside system by events (Kubernetes informers, ZooKeeper watches)
// use it: they Put and Delete as events come, and Flush once a burst is over.
package ownerstate

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/mcpbridge/mcpbridge/store"
)

// Applier is the part of the store a source writes to.
type Applier interface {
	ReplaceOwnerEncoded(owner string, state map[string][]store.Encoded) (store.Result, error)
	Apply(owner string, updates ...store.Update) (store.Result, error)
}

// Key names one resource of the owner's state.
type Key struct{ Collection, Name string }

// State is one owner's wanted state. It is not safe for concurrent use: a source calls it from
// the one goroutine that handles its events.
type State struct {
	owner   string
	store   Applier
	want    map[Key]store.Encoded
	dirty   map[Key]struct{}
	counts  map[string]int // wanted resources by collection
	written bool           // the whole state has been written once, and every write since succeeded
}

// New returns an empty state of owner; nothing is written before Flush.
func New(owner string, st Applier) *State {
	return &State{owner: owner, store: st, want: map[Key]store.Encoded{}, dirty: map[Key]struct{}{}, counts: map[string]int{}}
}

// Owner is the producer ID the state is written under.
func (s *State) Owner() string { return s.owner }

// Len is the number of resources wanted.
func (s *State) Len() int { return len(s.want) }

// Counts returns the number of resources wanted in each collection that has any.
func (s *State) Counts() map[string]int {
	out := make(map[string]int, len(s.counts))
	for c, n := range s.counts {
		out[c] = n
	}
	return out
}

// Get returns the wanted resource of a name.
func (s *State) Get(collection, name string) (store.Encoded, bool) {
	e, ok := s.want[Key{collection, name}]
	return e, ok
}

// Put wants enc in collection under its name. An encoding equal to the one wanted changes
// nothing.
func (s *State) Put(collection string, enc store.Encoded) {
	k := Key{collection, enc.Name()}
	old, had := s.want[k]
	if had && bytes.Equal(old.Bytes(), enc.Bytes()) {
		return
	}
	if !had {
		s.counts[collection]++
	}
	s.want[k] = enc
	s.dirty[k] = struct{}{}
}

// Delete stops wanting a name; a name not wanted changes nothing.
func (s *State) Delete(collection, name string) {
	k := Key{collection, name}
	if _, ok := s.want[k]; !ok {
		return
	}
	delete(s.want, k)
	s.dirty[k] = struct{}{}
	if s.counts[collection]--; s.counts[collection] == 0 {
		delete(s.counts, collection)
	}
}

// Keys calls f for every wanted name, in no order; f must not Put or Delete.
func (s *State) Keys(f func(Key)) {
	for k := range s.want {
		f(k)
	}
}

// Dirty says whether a Flush would write anything.
func (s *State) Dirty() bool { return !s.written || len(s.dirty) > 0 }

// Flush writes what changed since the last successful write: the whole state the first time
// and after a refused write, else one Apply of the changed names (upserts and removals, every
// collection at once). On an error the store holds what it held before, and the next Flush
// tries again.
func (s *State) Flush() (store.Result, error) {
	if !s.written {
		res, err := s.store.ReplaceOwnerEncoded(s.owner, s.whole())
		if err != nil {
			return res, err
		}
		s.written = true
		clear(s.dirty)
		return res, nil
	}
	if len(s.dirty) == 0 {
		return store.Result{}, nil
	}
	res, err := s.store.Apply(s.owner, s.updates()...)
	if err != nil {
		s.written = false // the next Flush writes the whole state again
		return res, err
	}
	clear(s.dirty)
	return res, nil
}

// whole is the wanted state by collection, each sorted by name.
func (s *State) whole() map[string][]store.Encoded {
	out := map[string][]store.Encoded{}
	for k, e := range s.want {
		out[k.Collection] = append(out[k.Collection], e)
	}
	for _, list := range out {
		slices.SortFunc(list, func(a, b store.Encoded) int { return cmp.Compare(a.Name(), b.Name()) })
	}
	return out
}

// updates are the dirty names as one update per collection, in collection order.
func (s *State) updates() []store.Update {
	byColl := map[string]*store.Update{}
	for k := range s.dirty {
		u := byColl[k.Collection]
		if u == nil {
			u = &store.Update{Collection: k.Collection}
			byColl[k.Collection] = u
		}
		if e, ok := s.want[k]; ok {
			u.Encoded = append(u.Encoded, e)
		} else {
			u.Removed = append(u.Removed, k.Name)
		}
	}
	out := make([]store.Update, 0, len(byColl))
	for _, u := range byColl {
		slices.SortFunc(u.Encoded, func(a, b store.Encoded) int { return cmp.Compare(a.Name(), b.Name()) })
		slices.Sort(u.Removed)
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b store.Update) int { return cmp.Compare(a.Collection, b.Collection) })
	return out
}
