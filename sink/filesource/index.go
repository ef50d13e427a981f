package filesource

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

// objKey names a resource of the owner's state.
type objKey struct{ collection, name string }

// stored is what the source keeps of a decoded object: the resource encoded as the store
// keeps it (made in the worker that decoded the file: the store takes these very bytes) and
// where it came from, for faults. The decoded resource is not kept: at 100,000 resources it
// was a second copy of every body, with its objects.
type stored struct {
	kind      *kinds.Kind
	enc       store.Encoded
	doc, line int
}

func (o stored) key() objKey { return objKey{o.kind.Collection, o.enc.Name()} }

// storedOf encodes a file's decoded objects.
func storedOf(objs []Object) ([]stored, error) {
	out := make([]stored, len(objs))
	for i, o := range objs {
		enc, err := store.Encode(o.Resource)
		if err != nil {
			// Not expected: the decoder made the resource from a typed message.
			return nil, fmt.Errorf("document %d: %s %s: encoding: %w", o.Doc, o.Kind.Kind, o.Name(), err)
		}
		// Every body decode makes is well formed: marshalled from a typed message, or
		// written by the fast path, which FuzzFastDecodeAgreesWithGeneral holds to that.
		out[i] = stored{kind: o.Kind, enc: enc.Checked(), doc: o.Doc, line: o.Line}
	}
	return out, nil
}

// index is the owner's state as the files make it, kept up to date file by file: which files
// define each name (a name defined in two files is taken from the file whose path sorts
// first, and is a fault of the other). A reload touches the names of the files that changed,
// so its work and its write are in proportion to the change, not to everything the files hold.
type index struct {
	// providers are the files defining each name, sorted (providersOf), by collection then
	// name. A pointer, not a slice, and a map by name in each collection, not one by objKey:
	// a slot of a map of a million names is 24 bytes, not 40 (a map of a million objKeys was
	// 85 MB, of slices 118 MB).
	providers map[string]map[string]*[]string
	names     int                 // in providers
	dups      map[objKey]struct{} // names defined in more than one file
	touched   map[objKey]struct{} // names whose providers changed since the last write
	// whole: the next write is the whole state (state), which reads no touched names: a first
	// load keeps none (a million map insertions, serial, before its first write).
	whole bool
	// alone are the one-file provider lists, one per file, shared by every name only that
	// file defines (most names): a list of its own each was a million allocations at a
	// million ServiceEntries. Never modified in place (replaced).
	alone map[string]*[]string
}

// newIndex returns an empty index with room for about the names of each collection in sizes
// (the first load's): grown one doubling at a time, a map of a million names rehashes every
// name it held twenty times over.
func newIndex(sizes map[string]int) *index {
	ix := &index{providers: make(map[string]map[string]*[]string, len(sizes)), dups: map[objKey]struct{}{},
		touched: map[objKey]struct{}{}, alone: map[string]*[]string{}}
	for coll, n := range sizes {
		ix.providers[coll] = make(map[string]*[]string, n)
	}
	return ix
}

// providersOf is the files defining a name, sorted; nil for none. Not to be modified: a
// change is a new list (set).
func (ix *index) providersOf(k objKey) []string {
	if p := ix.providers[k.collection][k.name]; p != nil {
		return *p
	}
	return nil
}

// setProviders records the list of a name that has one; nil removes the name.
func (ix *index) setProviders(k objKey, p *[]string) {
	names := ix.providers[k.collection]
	_, had := names[k.name]
	switch {
	case p == nil && had:
		delete(names, k.name)
		ix.names--
	case p != nil:
		if names == nil {
			names = map[string]*[]string{}
			ix.providers[k.collection] = names
		}
		names[k.name] = p
		if !had {
			ix.names++
		}
	}
}

// replaced records that a file's objects went from before to after.
func (ix *index) replaced(file string, before, after []stored) {
	for _, o := range before {
		k := o.key()
		ps := ix.providersOf(k)
		if i, found := slices.BinarySearch(ps, file); found {
			if len(ps) == 1 {
				ps = nil // not Delete: a shared list (alone) is not modified
			} else {
				ps = slices.Delete(slices.Clone(ps), i, i+1) // a new list: set keeps it or the file's own
			}
		}
		ix.set(k, ps)
	}
	for _, o := range after {
		k := o.key()
		ps := ix.providersOf(k)
		switch i, found := slices.BinarySearch(ps, file); {
		case len(ps) == 0:
			ps = *ix.aloneList(file)
		case !found:
			// A one-file list has no room: Insert makes a new list, the shared one stays.
			ps = slices.Insert(ps, i, file)
		}
		ix.set(k, ps)
	}
	if len(after) == 0 {
		delete(ix.alone, file)
	}
}

// aloneList is the provider list of the names file alone defines (one file, no room: an
// Insert into it makes a new list).
func (ix *index) aloneList(file string) *[]string {
	l := ix.alone[file]
	if l == nil {
		l = &[]string{file}
		ix.alone[file] = l
	}
	return l
}

func (ix *index) set(k objKey, ps []string) {
	if !ix.whole {
		ix.touched[k] = struct{}{}
	}
	switch len(ps) {
	case 0:
		ix.setProviders(k, nil)
		delete(ix.dups, k)
	case 1:
		ix.setProviders(k, ix.aloneList(ps[0]))
		delete(ix.dups, k)
	default:
		ix.setProviders(k, &ps)
		ix.dups[k] = struct{}{}
	}
}

// winner is the resource served under a name: the first defining file's.
func (ix *index) winner(k objKey, files map[string]*fileState) (store.Encoded, bool) {
	ps := ix.providersOf(k)
	if len(ps) == 0 {
		return store.Encoded{}, false
	}
	o, _ := files[ps[0]].object(k)
	return o.enc, true
}

// state is the owner's whole state, for a full write: every file's objects, in path order,
// but a name defined twice (dups, few) from its first file alone. Read file by file rather
// than name by name (winner): at a million names, looking each one up in its file was 2 s
// of cache misses before the first write.
func (ix *index) state(files map[string]*fileState) map[string][]store.Encoded {
	// Each collection's list sized first: appended one by one, a million were copied twenty
	// times over.
	sizes := map[string]int{}
	for _, f := range files {
		for _, o := range f.objects {
			sizes[o.kind.Collection]++
		}
	}
	out := make(map[string][]store.Encoded, len(sizes))
	for coll, n := range sizes {
		out[coll] = make([]store.Encoded, 0, n)
	}
	for _, p := range sortedKeys(files) {
		for _, o := range files[p].objects {
			k := o.key()
			if _, dup := ix.dups[k]; dup && ix.providersOf(k)[0] != p {
				continue
			}
			out[k.collection] = append(out[k.collection], o.enc)
		}
	}
	return out
}

// updates are the increments that bring the store from what it was given to the state: the
// winners of the touched names, and those that went. The store writes nothing for a resource
// it already holds, so a name whose file changed elsewhere costs it one comparison.
func (ix *index) updates(files map[string]*fileState) []store.Update {
	byColl := map[string]*store.Update{}
	for k := range ix.touched {
		u := byColl[k.collection]
		if u == nil {
			u = &store.Update{Collection: k.collection}
			byColl[k.collection] = u
		}
		if enc, ok := ix.winner(k, files); ok {
			u.Encoded = append(u.Encoded, enc)
		} else {
			u.Removed = append(u.Removed, k.name)
		}
	}
	out := make([]store.Update, 0, len(byColl))
	for _, coll := range sortedKeys(byColl) {
		u := *byColl[coll]
		slices.Sort(u.Removed)
		slices.SortFunc(u.Encoded, func(a, b store.Encoded) int { return cmp.Compare(a.Name(), b.Name()) })
		out = append(out, u)
	}
	return out
}

// wrote records that the store now holds the state.
func (ix *index) wrote() {
	if len(ix.touched) > 4096 {
		// A map keeps its room, and every later write would walk the room of a first load's
		// million names to find an edit's thousand.
		ix.touched = map[objKey]struct{}{}
		return
	}
	clear(ix.touched)
}

// dupFaults reports every definition of a name after the first, by file and document.
func (ix *index) dupFaults(files map[string]*fileState) []error {
	var faults []*DecodeError
	for k := range ix.dups {
		ps := ix.providersOf(k)
		first, _ := files[ps[0]].object(k)
		for _, p := range ps[1:] {
			o, _ := files[p].object(k)
			faults = append(faults, &DecodeError{
				File: files[p].nameOr(p), Doc: o.doc, Line: o.line, Kind: o.kind.Kind, Name: k.name,
				Err: fmt.Errorf("already defined in %s, document %d; this one is ignored", files[ps[0]].nameOr(ps[0]), first.doc),
			})
		}
	}
	slices.SortFunc(faults, func(a, b *DecodeError) int { return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Doc, b.Doc)) })
	out := make([]error, len(faults))
	for i, f := range faults {
		out[i] = f
	}
	return out
}
