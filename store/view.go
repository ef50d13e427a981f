package store

import (
	"sort"

	memdb "github.com/hashicorp/go-memdb"
)

// View is a consistent, read-only snapshot of the whole store: every read through one View sees
// the same revision, however many writes happen meanwhile. Views are cheap (memdb's immutable
// radix trees) and need no closing.
type View struct {
	txn *memdb.Txn
}

// View returns a snapshot of the store as of now.
func (s *Store) View() *View { return &View{txn: s.db.Txn(false)} }

// Revision returns the highest revision of any collection in the view.
func (v *View) Revision() uint64 {
	var rev uint64
	for _, c := range v.Collections() {
		if c.Revision > rev {
			rev = c.Revision
		}
	}
	return rev
}

// Collection returns what the view knows of one collection; an unknown collection is empty at
// revision 0.
func (v *View) Collection(name string) CollectionInfo { return *collectionInfo(v.txn, name) }

// Collections lists every collection that was ever written, sorted by name.
func (v *View) Collections() []CollectionInfo {
	it, err := v.txn.Get(tableCollections, "id")
	mustTxn(err)
	var out []CollectionInfo
	for obj := it.Next(); obj != nil; obj = it.Next() {
		out = append(out, *obj.(*CollectionInfo))
	}
	return out
}

// Get returns the live entry for a name, or nil.
func (v *View) Get(collection, name string) *Entry {
	obj, err := v.txn.First(tableServed, "id", collection, name)
	mustTxn(err)
	if obj == nil || obj.(*Entry).Deleted {
		return nil
	}
	return obj.(*Entry)
}

// Snapshot returns the collection's revision and its live entries, sorted by name.
func (v *View) Snapshot(collection string) (uint64, []*Entry) {
	info := collectionInfo(v.txn, collection)
	out := make([]*Entry, 0, info.Count)
	it, err := v.txn.Get(tableServed, "id_prefix", collection)
	mustTxn(err)
	for obj := it.Next(); obj != nil; obj = it.Next() {
		e := obj.(*Entry)
		if e.Collection != collection {
			break // a longer collection name sharing the prefix sorts after ours
		}
		if !e.Deleted {
			out = append(out, e)
		}
	}
	return info.Revision, out
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
// (collection, revision) index: the cost is the size of the change. It returns ErrCompacted
// when deletions after rev may have been compacted away, or when rev is ahead of the
// collection (a revision this store never issued): the reader must take a full state.
func (v *View) ChangesSince(collection string, rev uint64) (Changes, error) {
	info := collectionInfo(v.txn, collection)
	if rev < info.Compacted || rev > info.Revision {
		return Changes{Revision: info.Revision}, ErrCompacted
	}
	ch := Changes{Revision: info.Revision}
	if rev == info.Revision {
		return ch, nil
	}
	it, err := v.txn.LowerBound(tableServed, "revision", collection, rev+1)
	mustTxn(err)
	for obj := it.Next(); obj != nil; obj = it.Next() {
		e := obj.(*Entry)
		if e.Collection != collection {
			break
		}
		if e.Deleted {
			ch.Deleted = append(ch.Deleted, e)
		} else {
			ch.Upserts = append(ch.Upserts, e)
		}
	}
	byName := func(es []*Entry) {
		sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	}
	byName(ch.Upserts)
	byName(ch.Deleted)
	return ch, nil
}

// OwnedVersions returns name → version of what one owner holds in a collection, whether its
// copy is served or shadowed by another owner's. A reconnecting producer reports these as the
// versions it holds (initial_resource_versions), so that it is told of every deletion.
func (v *View) OwnedVersions(collection, owner string) map[string]string {
	it, err := v.txn.Get(tableOwned, "owner_collection", owner, collection)
	mustTxn(err)
	out := map[string]string{}
	for obj := it.Next(); obj != nil; obj = it.Next() {
		e := obj.(*ownedEntry)
		out[e.Name] = e.Version
	}
	return out
}
