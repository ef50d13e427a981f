package filesource

import (
	"cmp"
	"fmt"
	"slices"

	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

// objKey names a resource of the owner's state.
type objKey struct{ collection, name string }

func keyOf(o Object) objKey { return objKey{o.Kind.Collection, o.Name()} }

// index is the owner's state as the files make it, kept up to date file by file: which files
// define each name (a name defined in two files is taken from the file whose path sorts
// first, and is a fault of the other), and what the store was last given. A reload touches
// the names of the files that changed, so its work and its write are in proportion to the
// change, not to everything the files hold.
type index struct {
	providers map[objKey][]string // the files defining a name, sorted
	dups      map[objKey]struct{} // names defined in more than one file
	touched   map[objKey]struct{} // names whose providers changed since the last write
	written   map[objKey]*mcpapi.Resource
}

func newIndex() *index {
	return &index{providers: map[objKey][]string{}, dups: map[objKey]struct{}{}, touched: map[objKey]struct{}{}, written: map[objKey]*mcpapi.Resource{}}
}

// replaced records that a file's objects went from before to after.
func (ix *index) replaced(file string, before, after []Object) {
	for _, o := range before {
		k := keyOf(o)
		ps := ix.providers[k]
		if i, found := slices.BinarySearch(ps, file); found {
			ps = slices.Delete(ps, i, i+1)
		}
		ix.set(k, ps)
	}
	for _, o := range after {
		k := keyOf(o)
		ps := ix.providers[k]
		if i, found := slices.BinarySearch(ps, file); !found {
			ps = slices.Insert(ps, i, file)
		}
		ix.set(k, ps)
	}
}

func (ix *index) set(k objKey, ps []string) {
	ix.touched[k] = struct{}{}
	switch len(ps) {
	case 0:
		delete(ix.providers, k)
		delete(ix.dups, k)
	case 1:
		ix.providers[k] = ps
		delete(ix.dups, k)
	default:
		ix.providers[k] = ps
		ix.dups[k] = struct{}{}
	}
}

// winner is the resource served under a name: the first defining file's.
func (ix *index) winner(k objKey, files map[string]*fileState) *mcpapi.Resource {
	ps := ix.providers[k]
	if len(ps) == 0 {
		return nil
	}
	o, _ := files[ps[0]].object(k)
	return o.Resource
}

// state is the owner's whole state, for a full write.
func (ix *index) state(files map[string]*fileState) map[string][]*mcpapi.Resource {
	out := map[string][]*mcpapi.Resource{}
	for k := range ix.providers {
		out[k.collection] = append(out[k.collection], ix.winner(k, files))
	}
	return out
}

// updates are the increments that bring the store from what it was given to the state:
// the touched names whose resource is not the very one written, and those that went.
func (ix *index) updates(files map[string]*fileState) []store.Update {
	byColl := map[string]*store.Update{}
	for k := range ix.touched {
		r := ix.winner(k, files)
		if r == ix.written[k] {
			continue
		}
		u := byColl[k.collection]
		if u == nil {
			u = &store.Update{Collection: k.collection}
			byColl[k.collection] = u
		}
		if r == nil {
			u.Removed = append(u.Removed, k.name)
		} else {
			u.Resources = append(u.Resources, r)
		}
	}
	out := make([]store.Update, 0, len(byColl))
	for _, coll := range sortedKeys(byColl) {
		u := *byColl[coll]
		slices.Sort(u.Removed)
		slices.SortFunc(u.Resources, func(a, b *mcpapi.Resource) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
		out = append(out, u)
	}
	return out
}

// wrote records that the store now holds the state: whole (full) or the touched names.
func (ix *index) wrote(files map[string]*fileState, full bool) {
	if full {
		ix.written = make(map[objKey]*mcpapi.Resource, len(ix.providers))
		for k := range ix.providers {
			ix.written[k] = ix.winner(k, files)
		}
	} else {
		for k := range ix.touched {
			if r := ix.winner(k, files); r != nil {
				ix.written[k] = r
			} else {
				delete(ix.written, k)
			}
		}
	}
	clear(ix.touched)
}

// dupFaults reports every definition of a name after the first, by file and document.
func (ix *index) dupFaults(files map[string]*fileState) []error {
	var faults []*DecodeError
	for k := range ix.dups {
		ps := ix.providers[k]
		first, _ := files[ps[0]].object(k)
		for _, p := range ps[1:] {
			o, _ := files[p].object(k)
			faults = append(faults, &DecodeError{
				File: o.File, Doc: o.Doc, Line: o.Line, Kind: o.Kind.Kind, Name: o.Name(),
				Err: fmt.Errorf("already defined in %s, document %d; this one is ignored", first.File, first.Doc),
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
