package store

import (
	"slices"
	"sort"
	"strings"
)

// View is a consistent, read-only snapshot of the whole store: every read through one View sees
// the same revision, however many writes happen meanwhile. Views are one pointer to an
// immutable state and need no closing.
type View struct {
	st *state
}

// View returns a snapshot of the store as of now.
func (s *Store) View() *View { return &View{st: s.current.Load()} }

// Revision returns the highest revision of any collection in the view.
func (v *View) Revision() uint64 { return v.st.rev }

// Collection returns what the view knows of one collection; an unknown collection is empty at
// revision 0.
func (v *View) Collection(name string) CollectionInfo {
	if base, overlay, ok := splitLayered(name); ok {
		return v.layeredInfo(name, base, overlay)
	}
	if c := v.st.colls[name]; c != nil {
		return c.info
	}
	return CollectionInfo{Name: name}
}

// Collections lists every collection that was ever written, sorted by name.
func (v *View) Collections() []CollectionInfo { return v.st.sortedCollections() }

// Get returns the live entry for a name, or nil.
func (v *View) Get(collection, name string) *Entry {
	if base, overlay, ok := splitLayered(collection); ok {
		return v.layeredGet(base, overlay, name)
	}
	e := v.st.colls[collection].entry(name)
	if e == nil || e.Deleted {
		return nil
	}
	return e
}

// Snapshot returns the collection's revision and its live entries, sorted by name.
func (v *View) Snapshot(collection string) (uint64, []*Entry) {
	if base, overlay, ok := splitLayered(collection); ok {
		return v.layeredSnapshot(collection, base, overlay)
	}
	c := v.st.colls[collection]
	if c == nil {
		return 0, []*Entry{}
	}
	out := make([]*Entry, 0, c.info.Count)
	c.served.Ascend(func(it nameItem) bool {
		if !it.e.Deleted {
			out = append(out, it.e)
		}
		return true
	})
	return c.info.Revision, out
}

// Changes is what changed in a collection after a revision.
type Changes struct {
	// Revision is the collection's revision in the view: the reader is at this revision once it
	// has applied Upserts and Deleted.
	Revision uint64
	// Upserts are entries written after the asked revision, sorted by name.
	Upserts []*Entry
	// Deleted are tombstones written after the asked revision, sorted by name.
	Deleted []*Entry
}

// ChangesSince returns what changed in the collection after revision rev, read from the
// (revision, name) index: the cost is the size of the change. It returns ErrCompacted
// when deletions after rev may have been compacted away, or when rev is ahead of the
// collection (a revision this store never issued): the reader must take a full state.
func (v *View) ChangesSince(collection string, rev uint64) (Changes, error) {
	if base, overlay, ok := splitLayered(collection); ok {
		return v.layeredChangesSince(collection, base, overlay, rev)
	}
	info := v.Collection(collection)
	if rev < info.Compacted || rev > info.Revision {
		return Changes{Revision: info.Revision}, ErrCompacted
	}
	ch := Changes{Revision: info.Revision}
	if rev == info.Revision {
		return ch, nil
	}
	c := v.st.colls[collection]
	if c.readsServed(rev) {
		// Everything served changed (a first read, a reader from before the collection's
		// oldest write), or most of it (from before an unlogged write): the name index holds
		// it in order already.
		return servedChangedAfter(c, rev, ch), nil
	}
	// Counted first, so that the lists are made once: growing a list of a million pointers
	// step by step copies it twice over, each pointer behind a write barrier while the
	// collector marks. Sorted as (name, entry) pairs: the comparisons read the names without
	// going through each entry, a cache miss each.
	n := 0
	c.byRev.AscendGreaterOrEqual(revItem{rev: rev + 1}, func(revItem) bool {
		n++
		return true
	})
	changed := make([]nameItem, 0, n)
	c.byRev.AscendGreaterOrEqual(revItem{rev: rev + 1}, func(it revItem) bool {
		changed = append(changed, nameItem{name: it.name, e: it.e})
		return true
	})
	slices.SortFunc(changed, func(a, b nameItem) int { return strings.Compare(a.name, b.name) })
	ch.Upserts = make([]*Entry, 0, n)
	for _, it := range changed {
		if it.e.Deleted {
			ch.Deleted = append(ch.Deleted, it.e)
		} else {
			ch.Upserts = append(ch.Upserts, it.e)
		}
	}
	return ch, nil
}

// servedChangedAfter is every served entry of c written after rev, tombstones as deletions,
// in name order: a walk of the served names, for a reader that reads most of them.
func servedChangedAfter(c *collection, rev uint64, ch Changes) Changes {
	ch.Upserts = make([]*Entry, 0, c.served.Len())
	c.served.Ascend(func(it nameItem) bool {
		switch {
		case it.e.Revision <= rev:
		case it.e.Deleted:
			ch.Deleted = append(ch.Deleted, it.e)
		default:
			ch.Upserts = append(ch.Upserts, it.e)
		}
		return true
	})
	return ch
}

// OwnedVersions returns name → version of what one owner holds in a collection, whether its
// copy is served or shadowed by another owner's. A reconnecting producer reports these as the
// versions it holds (initial_resource_versions), so that it is told of every deletion.
func (v *View) OwnedVersions(collection, owner string) map[string]string {
	out := map[string]string{}
	if collection == "" {
		return out
	}
	v.st.ownerCopies(owner, collection, func(_ string, e *Entry) bool {
		out[e.Name] = e.Version
		return true
	})
	return out
}

// OwnedCount is how many copies one owner holds in all collections, served or shadowed. It
// costs the number of collections.
func (v *View) OwnedCount(owner string) int { return v.st.ownedCount(owner) }

// OwnerPresent tells whether an owner was present when the view was taken: true unless its
// producer's streams all ended (Store.SetOwnerPresent) and it still holds resources. Files,
// the translation and any owner never said absent are present.
func (v *View) OwnerPresent(owner string) bool { return !v.st.absent[owner] }

// Presence identifies the set of absent owners: two views with the same Presence have the
// same absent owners.
func (v *View) Presence() uint64 { return v.st.presence }

// AbsentOwners lists the owners absent in the view, sorted.
func (v *View) AbsentOwners() []string {
	out := make([]string, 0, len(v.st.absent))
	for o := range v.st.absent {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}

// OwnerCollections lists the collections in which an owner holds copies, sorted.
func (v *View) OwnerCollections(owner string) []string { return v.st.ownerCollections(owner) }

// WithPrefix returns the live entries whose names begin with prefix, sorted by name: a range
// of the name index, its cost the size of the range, not the collection's (the virtual hosts
// of one route configuration, VHDS's ROUTE/HOST names, out of every port's).
func (v *View) WithPrefix(collection, prefix string) []*Entry {
	if base, overlay, ok := splitLayered(collection); ok {
		return v.layeredWithPrefix(base, overlay, prefix)
	}
	var out []*Entry
	eachWithPrefix(v.st.colls[collection], prefix, func(e *Entry) {
		if !e.Deleted {
			out = append(out, e)
		}
	})
	return out
}

// eachWithPrefix calls f with each entry of c (tombstones too) whose name begins with prefix,
// in name order.
func eachWithPrefix(c *collection, prefix string, f func(*Entry)) {
	if c == nil {
		return
	}
	c.served.AscendGreaterOrEqual(nameItem{name: prefix}, func(it nameItem) bool {
		if !strings.HasPrefix(it.name, prefix) {
			return false
		}
		f(it.e)
		return true
	})
}

// layeredWithPrefix is WithPrefix through the layers: the two parts' ranges (each in name
// order) merged, each name read as layeredGet reads it.
func (v *View) layeredWithPrefix(base, overlay, prefix string) []*Entry {
	var bs, os []*Entry
	eachWithPrefix(v.st.colls[base], prefix, func(e *Entry) { bs = append(bs, e) })
	eachWithPrefix(v.st.colls[overlay], prefix, func(e *Entry) { os = append(os, e) })
	var out []*Entry
	take := func(b, o *Entry) {
		if e, rev := resolveLayers(b, o); e != nil && !e.Deleted {
			out = append(out, withRevision(e, rev))
		}
	}
	i, j := 0, 0
	for i < len(bs) || j < len(os) {
		switch {
		case j == len(os) || i < len(bs) && bs[i].Name < os[j].Name:
			take(bs[i], nil)
			i++
		case i == len(bs) || os[j].Name < bs[i].Name:
			take(nil, os[j])
			j++
		default:
			take(bs[i], os[j])
			i, j = i+1, j+1
		}
	}
	return out
}
