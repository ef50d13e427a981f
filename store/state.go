package store

import (
	"cmp"
	"slices"
	"sort"

	"github.com/google/btree"
)

// The store's state is immutable: a write builds the next state from the last, sharing every
// part it does not change, and publishes it with one atomic pointer swap. A View is that
// pointer. The sorted maps are copy-on-write B-trees (github.com/google/btree): Clone is O(1)
// and a write copies only the nodes on the paths it changes, so a write costs O(change·log n)
// and a reader never waits and never sees half a write.
//
// This replaced go-memdb (measured with 100,000 ServiceEntries and their 400,000 derived Envoy
// resources: memdb's immutable radix trees allocate two channels per node for WatchSets this
// store never used, and index keys as byte strings; together 1.19 GB of the 4.1 GB peak and
// 31% of the CPU of a full load).

// btreeDegree is the B-trees' branching: 32 keeps nodes within a few cache lines of pointers
// and the copy on write of one path small.
const btreeDegree = 32

// state is one version of the whole store.
type state struct {
	rev   uint64                 // the highest revision of any collection
	colls map[string]*collection // never modified once published
	// tombs indexes tombstones by (deletion time, collection, name), for compaction.
	tombs *btree.BTreeG[tombItem]
	// absent are the owners absent when the state was published (Store.absent, never
	// modified); presence counts the changes of that set, so that two states with the same
	// count have the same absent owners.
	absent   map[string]bool
	presence uint64
}

// collection is one collection's part of a state. Each live name has one Entry, shared by
// the indexes: the owner's copy is the served entry when it wins (the common case of one
// owner), so a resource costs one Entry and three index items.
type collection struct {
	info CollectionInfo
	// served is what consumers see, by name, tombstones included.
	served *btree.BTreeG[nameItem]
	// byRev indexes served by (revision, name): the collection's revision log, which
	// ChangesSince walks from a revision. It leaves out the entries of unlogged.
	byRev *btree.BTreeG[revItem]
	// unlogged, when not 0, is the revision of a large write of new copies that was most of
	// the collection (a first load: the collection served no more names before it than it
	// wrote), whose entries are served but not in byRev: walks of the log from a revision at
	// or after it never reach them; a reader from before it reads the served names whose
	// entries were written after its revision (at least half of what was served after the
	// write). At a million resources the log's copy of a first load was 80 MB and a tenth of
	// the write. One write a collection.
	unlogged uint64
	// owned is every owner's copies, by owner then name: the copies one name's conflict rule
	// weighs (an owner per tree: a collection has a few owners, not one per resource), and
	// what a full-state replacement of one owner compares with.
	owned map[string]*btree.BTreeG[nameItem]
}

type nameItem struct {
	name string
	e    *Entry
}

type revItem struct {
	rev  uint64
	name string
	e    *Entry
}

type tombItem struct {
	at         int64 // Entry.deletedAt
	coll, name string
}

func nameLess(a, b nameItem) bool { return a.name < b.name }

func revLess(a, b revItem) bool {
	if a.rev != b.rev {
		return a.rev < b.rev
	}
	return a.name < b.name
}

func tombLess(a, b tombItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if c := cmp.Compare(a.coll, b.coll); c != 0 {
		return c < 0
	}
	return a.name < b.name
}

func emptyState() *state {
	return &state{colls: map[string]*collection{}, tombs: btree.NewG(btreeDegree, tombLess)}
}

func newCollection(name string) *collection {
	return &collection{
		info:   CollectionInfo{Name: name},
		served: btree.NewG(btreeDegree, nameLess),
		byRev:  btree.NewG(btreeDegree, revLess),
		owned:  map[string]*btree.BTreeG[nameItem]{},
	}
}

// clone returns a copy of c that a write may change; c stays as it is. The trees are cloned
// lazily (copy on write), so this costs the number of owners, not of resources.
func (c *collection) clone() *collection {
	owned := make(map[string]*btree.BTreeG[nameItem], len(c.owned))
	for o, t := range c.owned {
		owned[o] = t.Clone()
	}
	return &collection{info: c.info, served: c.served.Clone(), byRev: c.byRev.Clone(), unlogged: c.unlogged, owned: owned}
}

// eachWrittenAfter calls fn with every served entry of c written after rev (tombstones
// included, at their deletion): from the served names when the reader reads most of them
// (readsServed), else from the log.
func (c *collection) eachWrittenAfter(rev uint64, fn func(name string, e *Entry)) {
	if c.readsServed(rev) {
		c.served.Ascend(func(it nameItem) bool {
			if it.e.Revision > rev {
				fn(it.name, it.e)
			}
			return true
		})
		return
	}
	// Here the unlogged write, if any, is no change since rev.
	c.byRev.AscendGreaterOrEqual(revItem{rev: rev + 1}, func(it revItem) bool {
		fn(it.name, it.e)
		return true
	})
}

// readsServed reports whether a reader from rev reads most of what c serves, found by a walk
// of the served names (in name order) rather than of the log: a reader from before the
// unlogged write, whose entries only the served names hold, or, when there is none, from
// before the log's oldest entry (a first read: everything changed).
func (c *collection) readsServed(rev uint64) bool {
	if c.unlogged != 0 {
		return rev < c.unlogged
	}
	oldest, ok := c.byRev.Min()
	return ok && oldest.rev > rev
}

// entry returns the served entry of a name (live or tombstone), or nil.
func (c *collection) entry(name string) *Entry {
	if c == nil {
		return nil
	}
	it, ok := c.served.Get(nameItem{name: name})
	if !ok {
		return nil
	}
	return it.e
}

// ownedCopy returns one owner's copy of a name, or nil.
func (c *collection) ownedCopy(owner, name string) *Entry {
	if c == nil {
		return nil
	}
	t := c.owned[owner]
	if t == nil {
		return nil
	}
	it, ok := t.Get(nameItem{name: name})
	if !ok {
		return nil
	}
	return it.e
}

// ownersOf returns every owner's copy of one name.
func (c *collection) ownersOf(name string) []*Entry {
	var out []*Entry
	for _, t := range c.owned {
		if it, ok := t.Get(nameItem{name: name}); ok {
			out = append(out, it.e)
		}
	}
	return out
}

// sortedCollections lists the state's collections by name.
func (st *state) sortedCollections() []CollectionInfo {
	out := make([]CollectionInfo, 0, len(st.colls))
	for _, c := range st.colls {
		out = append(out, c.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ownerCopies calls f for each copy one owner holds, with its collection, by collection then
// name; in one collection when coll is not empty.
func (st *state) ownerCopies(owner, coll string, f func(coll string, e *Entry) bool) {
	colls := []string{coll}
	if coll == "" {
		colls = st.ownerCollections(owner)
	}
	for _, name := range colls {
		t := st.colls[name].ownedTree(owner)
		if t == nil {
			continue
		}
		stopped := false
		t.Ascend(func(it nameItem) bool {
			stopped = !f(name, it.e)
			return !stopped
		})
		if stopped {
			return
		}
	}
}

func (c *collection) ownedTree(owner string) *btree.BTreeG[nameItem] {
	if c == nil {
		return nil
	}
	return c.owned[owner]
}

// ownerCollections lists the collections one owner holds copies in, sorted.
func (st *state) ownerCollections(owner string) []string {
	var out []string
	for name, c := range st.colls {
		if t := c.owned[owner]; t != nil && t.Len() > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// ownedCount is how many copies one owner holds in all collections: one B-tree length per
// collection, so a quota check costs the number of collections, not of resources.
func (st *state) ownedCount(owner string) int {
	n := 0
	for _, c := range st.colls {
		if t := c.owned[owner]; t != nil {
			n += t.Len()
		}
	}
	return n
}
