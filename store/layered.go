package store

import (
	"slices"
	"strings"
)

// A layered collection is read, never written: an overlay collection over a base one, as one
// collection. A name the overlay holds is the overlay's entry; a name it hides (an entry whose
// body is Hidden's) is absent; any other name is the base's. The translation keeps what a
// namespace's proxies see differently from the rest of the mesh in an overlay of its own, so
// that what every proxy sees alike is stored once, and a namespace costs the resources it
// sees otherwise, each whole.
//
// Views read a layered collection by its name (Layered); a Watch on it wakes for changes of
// either part and reports the layered name. Its revision is the later of the two parts', so
// that ChangesSince works as for any collection: the names either part changed after a
// revision, each read through the layers, with that later revision.

// layerSep separates a layered name's parts: a control character, which no collection name
// that the store accepts in a write holds (checkKey), so a layered name is never written.
const layerSep = "\x00"

// Layered names the collection of overlay over base.
func Layered(base, overlay string) string { return base + layerSep + overlay }

// BaseCollection is the base of a layered collection's name; any other name is returned as it
// is. Rights and metrics are those of the base: an overlay is a view of it.
func BaseCollection(name string) string {
	base, _, _ := strings.Cut(name, layerSep)
	return base
}

// DisplayName is a collection's name as a person reads it: a layered one as "BASE over
// OVERLAY" (its name holds a control character).
func DisplayName(name string) string {
	if base, overlay, ok := splitLayered(name); ok {
		return base + " over " + overlay
	}
	return name
}

// LayerParts are a layered collection's base and overlay; ok is false for any other name.
func LayerParts(name string) (base, overlay string, ok bool) { return splitLayered(name) }

func splitLayered(name string) (base, overlay string, ok bool) {
	return strings.Cut(name, layerSep)
}

// HiddenTypeURL is the body type of an overlay entry that hides the base's entry of its name.
const HiddenTypeURL = "mcpbridge.io/hidden"

// Hidden is an overlay entry that hides the base's entry of a name.
func Hidden(name string) Encoded {
	e, err := EncodeBody(name, HiddenTypeURL, 0, func(b []byte) ([]byte, error) { return b, nil })
	if err != nil {
		panic(err) // an empty body always encodes
	}
	return e
}

// hides tells an overlay entry that hides its name.
func hides(e *Entry) bool {
	typeURL, _ := e.Body()
	return typeURL == HiddenTypeURL
}

// layeredInfo describes a layered collection: the later revision and change of the two
// parts, the later compaction, and the base's count (an estimate: overlays add and hide few).
func (v *View) layeredInfo(name, base, overlay string) CollectionInfo {
	b, o := v.Collection(base), v.Collection(overlay)
	info := CollectionInfo{Name: name, Revision: max(b.Revision, o.Revision), Count: b.Count,
		Compacted: max(b.Compacted, o.Compacted), Shadowed: b.Shadowed, Changed: b.Changed}
	if o.Revision > b.Revision {
		info.Changed = o.Changed
	}
	return info
}

// layeredGet reads a name through the layers. The entry's revision is the later of the two
// parts' for the name (a change of either is a change of the layered entry): an entry read
// from one part is copied to carry it when the other part's is later.
func (v *View) layeredGet(base, overlay, name string) *Entry {
	b := v.st.colls[base].entry(name)
	o := v.st.colls[overlay].entry(name)
	e, rev := resolveLayers(b, o)
	if e == nil || e.Deleted {
		return nil
	}
	return withRevision(e, rev)
}

// resolveLayers is what a name is through the layers, given each part's entry or tombstone
// (nil: never held): the entry served, or a tombstone when it is absent, and the revision of
// its last change. A tombstone keeps the last bytes served under the name where they are
// known, as the store's own do, so that a consumer that still shows a deleted resource (held
// back until others moved) shows the real one: a hidden name's are the base's, never the
// hiding marker's. Where they are not (the overlay's own entry replaced by a marker), the
// tombstone has none, and a consumer cannot hold it back.
func resolveLayers(b, o *Entry) (*Entry, uint64) {
	var rev uint64
	if b != nil {
		rev = b.Revision
	}
	if o != nil {
		rev = max(rev, o.Revision)
	}
	switch {
	case o != nil && !o.Deleted && hides(o):
		t := &Entry{Name: o.Name, Deleted: true, Revision: rev}
		if b != nil {
			t.takeBody(b)
		}
		return t, rev
	case o != nil && !o.Deleted:
		return o, rev
	case b != nil && !b.Deleted:
		return b, rev
	case b != nil:
		return b, rev // gone from both: the base's tombstone
	case o != nil && !hides(o):
		return o, rev // gone from both: the overlay's tombstone, of what it served
	case o != nil:
		return &Entry{Name: o.Name, Deleted: true, Revision: rev}, rev // its marker's: nothing served
	}
	return nil, rev // never held
}

func withRevision(e *Entry, rev uint64) *Entry {
	if e.Revision == rev {
		return e
	}
	c := *e
	c.Revision = rev
	return &c
}

// layeredSnapshot merges the parts' live entries by name.
func (v *View) layeredSnapshot(name, base, overlay string) (uint64, []*Entry) {
	info := v.layeredInfo(name, base, overlay)
	_, bs := v.Snapshot(base)
	oc := v.st.colls[overlay]
	if oc == nil {
		return info.Revision, bs
	}
	out := make([]*Entry, 0, len(bs)+oc.info.Count)
	i := 0
	oc.served.Ascend(func(it nameItem) bool {
		o := it.e
		for i < len(bs) && bs[i].Name < o.Name {
			out = append(out, bs[i])
			i++
		}
		var b *Entry
		if i < len(bs) && bs[i].Name == o.Name {
			b = bs[i]
			i++
		} else if !o.Deleted {
			b = v.st.colls[base].entry(o.Name) // a base tombstone still counts for the revision
		}
		if e, rev := resolveLayers(b, o); e != nil && !e.Deleted {
			out = append(out, withRevision(e, rev))
		}
		return true
	})
	return info.Revision, append(out, bs[i:]...)
}

// layeredChangesSince is what changed through the layers after rev: every name either part
// changed, read through the layers. A name the overlay holds is reported when only the base's
// entry changed (as an upsert of the unchanged overlay entry, or a deletion again of a hidden
// name): a consumer sees the same version again, never a wrong one.
func (v *View) layeredChangesSince(name, base, overlay string, rev uint64) (Changes, error) {
	info := v.layeredInfo(name, base, overlay)
	if rev < info.Compacted || rev > info.Revision {
		return Changes{Revision: info.Revision}, ErrCompacted
	}
	ch := Changes{Revision: info.Revision}
	if rev == info.Revision {
		return ch, nil
	}
	var names []string
	for _, part := range [...]string{base, overlay} {
		if c := v.st.colls[part]; c != nil && c.info.Revision > rev {
			c.eachWrittenAfter(rev, func(name string, _ *Entry) { names = append(names, name) })
		}
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		e, at := resolveLayers(v.st.colls[base].entry(n), v.st.colls[overlay].entry(n))
		switch {
		case e == nil: // absent, and nothing to say it was served
		case e.Deleted:
			ch.Deleted = append(ch.Deleted, withRevision(e, at))
		default:
			ch.Upserts = append(ch.Upserts, withRevision(e, at))
		}
	}
	return ch, nil
}
