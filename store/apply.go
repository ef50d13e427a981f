package store

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"maps"

	"github.com/google/btree"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/namesort"
	"github.com/mcpbridge/mcpbridge/internal/parallel"
)

// Update is one collection's part of a write by one owner.
type Update struct {
	Collection string
	// Full makes Resources the owner's complete set in the collection: whatever the owner held
	// there and does not list is removed. Removed is then ignored.
	Full bool
	// Resources are upserted (or, with Full, are the whole set): validated, versioned and
	// encoded by the write, on every CPU. The write keeps none of them: it keeps their
	// encodings.
	Resources []*mcpapi.Resource
	// Encoded are upserted too: resources a producer already versioned and encoded (Encode,
	// EncodeMessage), which the write only indexes. The validator does not see them: they
	// come from producers in this process that built them from typed messages (the file
	// source, the translation). A name may be in Resources or Encoded, not both.
	Encoded []Encoded
	// Removed names are deleted from the owner's set; names the owner does not hold are ignored.
	Removed []string
}

// Result tells what a write did.
type Result struct {
	// Revision is the store revision after the write; unchanged when nothing changed.
	Revision uint64
	// Changed counts served entries written (upserts and tombstones).
	Changed int
	// Collections lists the collections whose served view changed.
	Collections []string
	Conflicts   []Conflict
}

// Conflict reports a name held by more than one owner, and which one is served.
type Conflict struct {
	Collection, Name string
	Served           string
	Shadowed         []string
}

// ValidationError names the collection, the resource and the fault of a rejected write.
type ValidationError struct {
	Collection string
	Resource   string // empty when the fault is not one resource's
	Err        error
}

func (e *ValidationError) Error() string {
	if e.Resource == "" {
		return fmt.Sprintf("collection %q: %v", e.Collection, e.Err)
	}
	return fmt.Sprintf("collection %q, resource %q: %v", e.Collection, e.Resource, e.Err)
}

func (e *ValidationError) Unwrap() error { return e.Err }

// Apply writes updates for one owner atomically: every resource is validated first, and either
// every update is applied or, on any fault, nothing is (the error is a *ValidationError).
// Resources without metadata.version get a content hash as their version. A resource whose
// version and content equal what the owner already holds writes nothing.
//
// The store keeps the encodings of the resources, not the resources: callers may do as they
// like with them afterwards (the bytes of an Encoded excepted).
func (s *Store) Apply(owner string, updates ...Update) (Result, error) {
	return s.ApplyWithin(owner, 0, updates...)
}

// ApplyWithin is Apply for an owner that may hold at most limit copies in all collections
// together (a producer's quota): a write that would leave it holding more than limit, and
// more than it holds now, writes nothing and returns an *OwnerLimitError. A write that only
// shrinks an owner already over its limit goes through. The count is taken inside the
// transaction, so concurrent writes of one owner cannot pass it together; it costs the
// number of collections, not of resources. A limit of 0 or less is no limit.
func (s *Store) ApplyWithin(owner string, limit int, updates ...Update) (Result, error) {
	prepared, err := s.prepareFor(updates, true)
	if err != nil {
		return Result{}, err
	}
	return s.write(owner, prepared, false, limit)
}

// OwnerLimitError is a write refused by ApplyWithin: nothing of it was applied.
type OwnerLimitError struct {
	Owner string
	// Limit is the most copies the owner may hold; Held what it holds now; Would what it
	// would have held after the write.
	Limit, Held, Would int
}

func (e *OwnerLimitError) Error() string {
	return fmt.Sprintf("owner %q would hold %d resources in all collections (holds %d), over its limit of %d",
		e.Owner, e.Would, e.Held, e.Limit)
}

// ReplaceOwner makes state the owner's complete state across all collections: each listed
// collection is replaced as with a Full update, and every other collection the owner holds is
// emptied of the owner's resources. ReplaceOwner(owner, nil) removes the owner entirely.
func (s *Store) ReplaceOwner(owner string, state map[string][]*mcpapi.Resource) (Result, error) {
	updates := make([]Update, 0, len(state))
	for coll, rs := range state {
		updates = append(updates, Update{Collection: coll, Full: true, Resources: rs})
	}
	return s.replaceOwner(owner, updates)
}

// ReplaceOwnerEncoded is ReplaceOwner for resources their producer encoded (see
// Update.Encoded).
func (s *Store) ReplaceOwnerEncoded(owner string, state map[string][]Encoded) (Result, error) {
	updates := make([]Update, 0, len(state))
	for coll, es := range state {
		updates = append(updates, Update{Collection: coll, Full: true, Encoded: es})
	}
	return s.replaceOwner(owner, updates)
}

func (s *Store) replaceOwner(owner string, updates []Update) (Result, error) {
	prepared, err := s.prepareFor(updates, true)
	if err != nil {
		return Result{}, err
	}
	return s.write(owner, prepared, true, 0)
}

// SetOwnerPresent says whether an owner is present (a producer with an open stream) or
// absent (all its streams ended; its resources stay until it comes back or expires). An
// absent owner's copies lose every conflict to a present owner's, so what is served may
// change: the names the owner holds are resolved again in one write, which changes
// revisions only where the served copy changes.
func (s *Store) SetOwnerPresent(owner string, present bool) (Result, error) {
	if err := CheckOwner(owner); err != nil {
		return Result{}, err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.absent[owner] == !present {
		return Result{Revision: s.revision}, nil
	}
	s.setAbsent(owner, !present)
	w := s.newWriter(owner)
	w.next.ownerCopies(owner, "", func(coll string, e *Entry) bool {
		w.touch(coll, e.Name, nil)
		return true
	})
	return s.commit(w, owner), nil
}

// setAbsent records an owner's presence. The map is replaced, never modified, since published
// states share it (View.OwnerPresent); presence counts the changes. The caller holds writeMu.
func (s *Store) setAbsent(owner string, absent bool) {
	if s.absent[owner] == absent {
		return
	}
	next := maps.Clone(s.absent)
	if absent {
		next[owner] = true
	} else {
		delete(next, owner)
	}
	s.absent = next
	s.presence++
}

// preparedUpdate is an Update validated, versioned and encoded, ready for the transaction.
type preparedUpdate struct {
	Update
	entries []*Entry // the upserts, not yet owned
}

func (s *Store) prepare(updates []Update) ([]preparedUpdate, error) {
	return s.prepareFor(updates, false)
}

// prepareFor is prepare; forWrite says the entries go straight to write, which puts them in
// name order: then a large update's are sorted here, the updates at once and each one's sort
// on every CPU too (a write of one large collection, the common case, would use one
// otherwise; with several, the goroutines outnumber the CPUs, which the scheduler absorbs),
// and its names told apart in that order (see checkSortedNames) rather than in a set of them.
func (s *Store) prepareFor(updates []Update, forWrite bool) ([]preparedUpdate, error) {
	seenColl := make(map[string]bool, len(updates))
	collErrs := make([]error, len(updates))
	for i, u := range updates {
		if collErrs[i] = checkCollection(u.Collection, seenColl); collErrs[i] != nil {
			updates = updates[:i] // those after are not prepared: this fault comes first
			break
		}
	}
	out := make([]preparedUpdate, len(updates))
	errs := make([]error, len(updates))
	parallel.For(len(updates), perUpdateWorker(updates), func(i int) {
		out[i], errs[i] = s.prepareOne(updates[i], forWrite)
	})
	for _, err := range errs { // the first fault in update order, as one by one
		if err != nil {
			return nil, err
		}
	}
	if len(updates) < len(collErrs) {
		return nil, collErrs[len(updates)] // the collection of the update after these
	}
	return out, nil
}

// perUpdateWorker is parallel.For's perWorker for preparing a write's updates.
func perUpdateWorker(updates []Update) int {
	n := 0
	for i := range updates {
		n += len(updates[i].Resources) + len(updates[i].Encoded)
	}
	return perPart(n, len(updates))
}

// checkCollection refuses an update's collection name: empty, with a control character, or
// already in seen (a write names a collection once); it adds it to seen.
func checkCollection(coll string, seen map[string]bool) error {
	if coll == "" {
		return &ValidationError{Err: fmt.Errorf("collection name is empty")}
	}
	if err := checkKey("collection name", coll); err != nil {
		return &ValidationError{Collection: coll, Err: err}
	}
	if seen[coll] {
		return &ValidationError{Collection: coll, Err: fmt.Errorf("collection appears twice in one write")}
	}
	seen[coll] = true
	return nil
}

func (s *Store) prepareOne(u Update, forWrite bool) (preparedUpdate, error) {
	nr := len(u.Resources)
	n := nr + len(u.Encoded)
	p := preparedUpdate{Update: u, entries: entriesOf(u.Encoded, nr)}
	if forWrite && nr == 0 && n >= parallelWriteMin && (u.Full || len(u.Removed) == 0) {
		// Encoded already, nothing removed to check against: the names are told apart in the
		// order write needs anyway (a set of a million names was a serial second).
		if checkSortedNames(p.entries) {
			s.marshals.Add(uint64(n))
			return p, nil
		}
		// Refused: named as one by one would name it, in the order given.
		es := entriesOf(u.Encoded, 0)
		_, err := checkNames(u, n, func(i int) string { return es[i].Name })
		return p, err
	}
	names, err := checkNames(u, n, func(i int) string {
		if i < nr {
			return u.Resources[i].GetMetadata().GetName()
		}
		return p.entries[i].Name
	})
	if err != nil {
		return p, err
	}
	// Validating and encoding are most of a large write, and each resource's own: done on
	// every CPU. The first fault in resource order is reported, as it would be one by one.
	errs := make([]error, len(u.Resources))
	parallel.For(len(u.Resources), parallelMin, func(i int) {
		r := u.Resources[i]
		if s.validate != nil {
			if err := s.validate(u.Collection, r); err != nil {
				errs[i] = err
				return
			}
		}
		enc, err := Encode(r)
		if err != nil {
			errs[i] = fmt.Errorf("marshal: %w", err)
			return
		}
		name, version := metaOf(enc.raw())
		p.entries[i] = newEntry(name, version, enc)
	})
	for i, err := range errs {
		if err != nil {
			return p, &ValidationError{Collection: u.Collection, Resource: u.Resources[i].Metadata.Name, Err: err}
		}
	}
	s.marshals.Add(uint64(n))
	return p, checkRemoved(u, names)
}

// checkNames refuses an update whose resources (n of them, the i-th named name(i)) are not
// each named, without control characters, and once. It returns the names.
func checkNames(u Update, n int, name func(i int) string) (map[string]bool, error) {
	names := make(map[string]bool, n)
	for i := range n {
		name := name(i)
		if name == "" {
			return nil, &ValidationError{Collection: u.Collection, Err: fmt.Errorf("resource %d has no metadata.name", i)}
		}
		if err := checkKey("name", name); err != nil {
			return nil, &ValidationError{Collection: u.Collection, Resource: name, Err: err}
		}
		if names[name] {
			return nil, &ValidationError{Collection: u.Collection, Resource: name, Err: fmt.Errorf("name appears twice")}
		}
		names[name] = true
	}
	return names, nil
}

// checkSortedNames reports whether encoded entries pass checkNames: each named, without
// control characters, and once; it puts them in name order (sortByName) and finds a name given
// twice next to itself. A refusal is named by checkNames.
func checkSortedNames(es []*Entry) bool {
	var bad atomic.Bool
	parallel.ForRange(len(es), entriesChunk, func(lo, hi int) {
		if bad.Load() {
			return // refused already: the names are checked again one by one (checkNames)
		}
		for _, e := range es[lo:hi] {
			if e.Name == "" || checkKey("name", e.Name) != nil {
				bad.Store(true)
				return
			}
		}
	})
	if bad.Load() {
		return false
	}
	sortByName(es)
	for i := 1; i < len(es); i++ {
		if es[i].Name == es[i-1].Name {
			return false
		}
	}
	return true
}

// checkRemoved refuses an incremental update whose removed names are not each named and
// without control characters, or that also upserts one (names are its upserts). A Full
// update's removed names are ignored.
func checkRemoved(u Update, names map[string]bool) error {
	if u.Full {
		return nil
	}
	for _, name := range u.Removed {
		if name == "" {
			return &ValidationError{Collection: u.Collection, Err: fmt.Errorf("removed_resources holds an empty name")}
		}
		if err := checkKey("removed name", name); err != nil {
			return &ValidationError{Collection: u.Collection, Resource: name, Err: err}
		}
		if names[name] {
			return &ValidationError{Collection: u.Collection, Resource: name, Err: fmt.Errorf("name is both upserted and removed")}
		}
	}
	return nil
}

// checkKey refuses control characters in the strings the store keys by. The indexes end each
// string with a NUL byte, so a name holding one would read as another name's prefix (and
// "ns/x\x00evil" as an owner of "ns/x"); no Kubernetes-style name has one anyway.
func checkKey(what, s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%s holds the control character %q at byte %d", what, c, i)
		}
	}
	return nil
}

// parallelMin is the number of resources per goroutine from which a write validates and
// encodes them on every CPU: below it, goroutines cost more than they save.
const parallelMin = 256

// write applies prepared updates to the next state and publishes it, then wakes the touched
// collections' subscribers, so that whoever wakes reads the new state. What changes in the
// owner's copies is the write's Plan, computed against the published state.
func (s *Store) write(owner string, updates []preparedUpdate, replaceAll bool, limit int) (Result, error) {
	if err := CheckOwner(owner); err != nil {
		return Result{}, err
	}
	// Before the lock, and before planOf looks each one up.
	parallel.For(len(updates), perCollectionWorker(updates), func(i int) { sortByName(updates[i].entries) })
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	plan := planOf(s.current.Load(), owner, updates, replaceAll)
	if err := plan.WithinLimit(limit); err != nil {
		return Result{}, err // nothing was built, nothing published
	}
	w := s.newWriter(owner)
	w.apply(plan)
	if replaceAll && len(updates) == 0 {
		// It holds nothing any more: nothing to remember of it.
		s.setAbsent(owner, false)
		w.absent, w.next.absent, w.next.presence = s.absent, s.absent, s.presence
	}
	return s.commit(w, owner), nil
}

func (s *Store) newWriter(owner string) *writer {
	base := s.current.Load()
	next := &state{rev: base.rev, colls: maps.Clone(base.colls), tombs: base.tombs, absent: s.absent, presence: s.presence}
	return &writer{next: next, mine: map[string]bool{}, owner: owner, rev: s.revision + 1, now: s.now(),
		touched: map[string][]touchedName{}, absent: s.absent}
}

// commit resolves the touched names, publishes the next state, and wakes the subscribers of
// the collections whose served view changed. The caller holds writeMu.
func (s *Store) commit(w *writer, owner string) Result {
	res := w.resolve()
	if res.Changed == 0 {
		// Owned copies may still have changed (a shadowed owner's update): publish those.
		s.current.Store(w.next)
		res.Revision = s.revision
		s.report(owner, res)
		return res
	}
	w.next.rev = w.rev
	s.current.Store(w.next)
	s.revision = w.rev
	s.writes.Add(1)
	res.Revision = w.rev
	s.topics.notify(res.Collections)
	s.report(owner, res)
	return res
}

func (s *Store) report(owner string, res Result) {
	for _, c := range res.Conflicts {
		s.conflicts.Add(1)
		s.log.Warn("resource held by more than one owner; serving a present owner first, then the first by ID",
			"collection", c.Collection, "name", c.Name, "served", c.Served, "shadowed", c.Shadowed, "writer", owner)
	}
}

// writer builds the next state of one write. It copies a collection (and the tombstone
// index) the first time it changes one; what it only reads stays shared.
//
// The entries a write creates are its own until it publishes them: an owner's new copy that
// wins its name is itself the served entry. An entry published by an earlier write is never
// modified: it is copied.
type writer struct {
	next      *state
	mine      map[string]bool // collections of next copied for this write
	tombsMine bool
	owner     string
	rev       uint64
	now       time.Time
	// touched are the names per collection whose owned copies changed, to resolve afterwards
	// (each once: a write's updates name a collection once, and a name once in it).
	touched map[string][]touchedName
	absent  map[string]bool // Store.absent, read under writeMu
}

// touchedName is a name whose owned copies changed, with the writer's new copy of it; fresh
// is nil when the writer removed its copy, or when only presence changed.
type touchedName struct {
	name  string
	fresh *Entry
}

// coll returns the collection for writing, created or copied on first use.
func (w *writer) coll(name string) *collection {
	c := w.next.colls[name]
	switch {
	case c == nil:
		c = newCollection(name)
	case !w.mine[name]:
		c = c.clone()
	default:
		return c
	}
	w.next.colls[name] = c
	w.mine[name] = true
	return c
}

func (w *writer) tombs() *btree.BTreeG[tombItem] {
	if !w.tombsMine {
		w.next.tombs = w.next.tombs.Clone()
		w.tombsMine = true
	}
	return w.next.tombs
}

func (w *writer) touch(coll, name string, fresh *Entry) {
	w.touched[coll] = append(w.touched[coll], touchedName{name, fresh})
}

// putOwned inserts the writer's owner's new copy e, which the write created, and returns the
// name it touched. It changes c alone.
func (w *writer) putOwned(c *collection, e *Entry) touchedName {
	e.Owner, e.Revision = w.owner, w.rev
	w.ownTree(c).ReplaceOrInsert(nameItem{name: e.Name, e: e})
	return touchedName{e.Name, e}
}

// ownTree is the writer's owner's tree of copies in c, made if it has none.
func (w *writer) ownTree(c *collection) *btree.BTreeG[nameItem] {
	t := c.owned[w.owner]
	if t == nil {
		t = btree.NewG(btreeDegree, nameLess)
		c.owned[w.owner] = t
	}
	return t
}

// putOwnedAll is putOwned of many new copies, in name order (see insertSorted), appending
// the names it touched to touched.
func (w *writer) putOwnedAll(c *collection, es []*Entry, touched []touchedName) []touchedName {
	items := make([]nameItem, len(es))
	for i, e := range es {
		e.Owner, e.Revision = w.owner, w.rev
		items[i] = nameItem{name: e.Name, e: e}
		touched = append(touched, touchedName{e.Name, e})
	}
	insertSorted(w.ownTree(c), items)
	return touched
}

// bulkInsertMin is the number of items from which a write inserts them into a tree in two
// passes (insertSorted) rather than one by one. A variable: TestStoreAgainstModel lowers it,
// so that its small writes take the bulk paths too.
var bulkInsertMin = 256

// insertSorted inserts items, in the tree's order, into t: every other one first, then the
// rest. google/btree splits a full node in the middle, and items inserted in order never come
// back to the nodes they left behind: a full load's trees were half full (52 bytes of tree
// for a 24-byte item, measured at 300,000 names). The second pass's items each fall between
// two of the first's and fill those half-full nodes (26 bytes an item); it is also faster,
// with half the splits. The items must be distinct (a write's names are): then the tree's
// content is the same either way, and only its shape differs.
func insertSorted[T any](t *btree.BTreeG[T], items []T) {
	for i := 0; i < len(items); i += 2 {
		t.ReplaceOrInsert(items[i])
	}
	for i := 1; i < len(items); i += 2 {
		t.ReplaceOrInsert(items[i])
	}
}

// deleteOwned removes the writer's owner's copy of name and returns the name it touched. It
// changes c alone.
func (w *writer) deleteOwned(c *collection, name string) touchedName {
	if t := c.owned[w.owner]; t != nil {
		t.Delete(nameItem{name: name})
		if t.Len() == 0 {
			delete(c.owned, w.owner)
		}
	}
	return touchedName{name, nil}
}

// sortByName puts a write's entries in name order, unless they are already. Each goes into
// three B-trees (the owner's copies, the served names, the revision log) in this order: in
// order, an insertion finds the path the last one warmed in the CPU's caches, out of order
// each one is a walk of cache misses through the whole tree. At 1,000,000 names, inserting
// them in order is 4 times faster than at random, far more than the sort costs; producers
// (a map of files, the translator's units) hand them over in no particular order.
func sortByName(es []*Entry) {
	if len(es) < 2 || slices.IsSortedFunc(es, func(a, b *Entry) int { return strings.Compare(a.Name, b.Name) }) {
		return
	}
	// By keys of the names read once, on every CPU (namesort): comparing the names through
	// the entries is two cache misses a comparison.
	namesort.Sort(es, func(e *Entry) string { return e.Name })
}

// apply makes the plan's change to the owner's copies. Every collection the plan names is
// written, even one where nothing changes (it then exists, empty, from this write on). The
// collections are apart (their own trees, their own touched names): a large write changes
// them on every CPU.
func (w *writer) apply(p *Plan) {
	colls := make([]*collection, len(p.Collections))
	touched := make([][]touchedName, len(p.Collections))
	changes := 0
	for i := range p.Collections {
		cp := &p.Collections[i]
		colls[i] = w.coll(cp.Collection) // w's maps are written here, before the workers start
		// Room for every name it touches at once: appended one by one, a full load's million
		// were copied twenty times over (1.4 s of the serialised write).
		touched[i] = slices.Grow(w.touched[cp.Collection], len(cp.Puts)+len(cp.Deletes))
		changes += len(cp.Puts) + len(cp.Deletes)
	}
	parallel.For(len(colls), perPart(changes, len(colls)), func(i int) {
		cp, c := &p.Collections[i], colls[i]
		if len(cp.Puts) >= bulkInsertMin {
			touched[i] = w.putOwnedAll(c, cp.Puts, touched[i])
		} else {
			for _, e := range cp.Puts { // in name order: write sorted them (sortByName), planOf kept it
				touched[i] = append(touched[i], w.putOwned(c, e))
			}
		}
		for _, name := range cp.Deletes {
			touched[i] = append(touched[i], w.deleteOwned(c, name))
		}
	})
	for i := range p.Collections {
		w.touched[p.Collections[i].Collection] = touched[i]
	}
}

// parallelWriteMin is the number of names a write changes from which it works on its
// collections at once: below it, starting the workers costs more than they save. A variable:
// TestStoreAgainstModel lowers it, so that its small writes take the parallel path too.
var parallelWriteMin = 4096

// perCollectionWorker is parallel.For's perWorker for work on each prepared update apart.
func perCollectionWorker(updates []preparedUpdate) int {
	n := 0
	for i := range updates {
		n += len(updates[i].entries)
	}
	return perPart(n, len(updates))
}

// perPart is parallel.For's perWorker for a write of n names in parts (its updates, its
// collections), each part apart: one part per worker when the write is large, else all on
// the caller's goroutine.
func perPart(n, parts int) int {
	if n >= parallelWriteMin {
		return 1
	}
	return max(parts, 1)
}

// resolve recomputes the served entry of every touched name and writes those that changed:
// each collection apart, on every CPU (a full load writes four large collections at once).
func (w *writer) resolve() Result {
	colls := make([]string, 0, len(w.touched))
	for c := range w.touched {
		colls = append(colls, c)
	}
	sort.Strings(colls)
	cs := make([]*collection, len(colls))
	for i, name := range colls {
		cs[i] = w.coll(name)
	}
	results := make([]collResult, len(colls))
	parallel.For(len(colls), 1, func(i int) {
		results[i] = w.resolveCollection(cs[i], w.touched[colls[i]])
	})
	var res Result
	for i, r := range results {
		res.Conflicts = append(res.Conflicts, r.conflicts...)
		for _, t := range r.tombsGone {
			w.tombs().Delete(t)
		}
		for _, t := range r.tombsNew {
			w.tombs().ReplaceOrInsert(t)
		}
		if r.changed > 0 {
			res.Changed += r.changed
			res.Collections = append(res.Collections, colls[i])
		}
	}
	return res
}

// collResult is what resolving one collection's names did; the tombstone index, which all
// collections share, is changed afterwards.
type collResult struct {
	changed             int
	conflicts           []Conflict
	tombsGone, tombsNew []tombItem
}

func (w *writer) resolveCollection(c *collection, touched []touchedName) collResult {
	var r collResult
	info := c.info
	if len(c.owned) == 1 && len(touched) >= bulkInsertMin && allFresh(touched) {
		w.serveAllFresh(c, touched, &info, &r)
	} else {
		for _, t := range touched {
			if w.resolveName(c, t, &info, &r) {
				r.changed++
			}
		}
	}
	if r.changed > 0 {
		info.Revision = w.rev
		info.Changed = w.now
	}
	c.info = info // the shadowed count may change without a new revision
	return r
}

// allFresh reports whether every touched name has a new copy, in name order (a large write
// of puts alone, as a full load is).
func allFresh(touched []touchedName) bool {
	for i, t := range touched {
		if t.fresh == nil || t.fresh.Deleted || i > 0 && touched[i-1].name >= t.name {
			return false
		}
	}
	return true
}

// serveAllFresh is resolveName of names that all have a new copy from the collection's only
// owner (allFresh): each new copy is served, in place of what was (found first, on the tree
// as it was), and the trees get them in two passes (insertSorted). Nothing is held twice when
// it can be helped: when the collection serves, of the names the write leaves alone, the
// owner's very copies (sharesOwnTree), the served tree after the write is the owner's tree (a
// copy-on-write clone: the same items, the same nodes until either changes); and the first
// such write of a collection that is most of it, a first load, leaves the revision log out
// (collection.unlogged).
func (w *writer) serveAllFresh(c *collection, touched []touchedName, info *CollectionInfo, r *collResult) {
	r.changed += len(touched)
	own := c.owned[w.owner] // the only owner's, with the write's copies
	share := own != nil && sharesOwnTree(c.served, own, touched)
	// Unlogged only when the write is most of what the collection will serve: a reader from
	// before it then walks about twice the change, not a large collection for a small one.
	unlogged := c.unlogged == 0 && c.served.Len() <= len(touched)
	var served []nameItem
	if !share {
		served = make([]nameItem, len(touched))
	}
	var revs []revItem
	if !unlogged {
		revs = make([]revItem, len(touched))
	}
	replaces := c.served.Len() > 0
	for i, t := range touched {
		e := t.fresh
		var prev nameItem
		if replaces {
			prev, _ = c.served.Get(nameItem{name: e.Name})
		}
		countFresh(info, prev.e)
		if prev.e != nil {
			retire(c, prev.e, r)
		}
		if served != nil {
			served[i] = nameItem{name: e.Name, e: e}
		}
		if revs != nil {
			revs[i] = revItem{rev: e.Revision, name: e.Name, e: e} // one revision: in name order too
		}
	}
	if share {
		c.served = own.Clone()
	} else {
		insertSorted(c.served, served)
	}
	if unlogged {
		c.unlogged = w.rev
	} else {
		insertSorted(c.byRev, revs)
	}
}

// sharesOwnTree reports whether served, with touched's names served as own's copies, is own:
// whether every other name served is served as own's very entry (not a tombstone, not an entry
// of its own, as a name served again after a conflict has). Checked name by name, and only
// for a served tree no larger than the write, so that it costs at most the write; touched is
// in name order (allFresh).
func sharesOwnTree(served, own *btree.BTreeG[nameItem], touched []touchedName) bool {
	if served.Len() > len(touched) {
		return false
	}
	ok, i := true, 0
	served.Ascend(func(it nameItem) bool {
		for i < len(touched) && touched[i].name < it.name {
			i++
		}
		if i < len(touched) && touched[i].name == it.name {
			return true // the write serves its copy
		}
		o, found := own.Get(it)
		ok = found && o.e == it.e
		return ok
	})
	return ok
}

// retire keeps the revision log and the tombstones in step with old, a served entry, leaving
// the served tree.
func retire(c *collection, old *Entry, r *collResult) {
	c.byRev.Delete(revItem{rev: old.Revision, name: old.Name})
	if old.Deleted {
		r.tombsGone = append(r.tombsGone, tombItem{at: old.deletedAt(), coll: c.info.Name, name: old.Name})
	}
}

// countFresh counts a fresh live copy, served unshadowed in place of old (nil: nothing).
func countFresh(info *CollectionInfo, old *Entry) {
	if old == nil || old.Deleted {
		info.Count++
	} else if len(old.Shadowed()) > 0 {
		info.Shadowed--
	}
}

// putServed makes e the name's served entry and returns the one it replaced (nil if none),
// keeping the revision log and the tombstones in step.
func (w *writer) putServed(c *collection, e *Entry, r *collResult) *Entry {
	prev, _ := c.served.ReplaceOrInsert(nameItem{name: e.Name, e: e})
	old := prev.e
	if old != nil {
		retire(c, old, r)
	}
	c.byRev.ReplaceOrInsert(revItem{rev: e.Revision, name: e.Name, e: e})
	if e.Deleted {
		r.tombsNew = append(r.tombsNew, tombItem{at: e.deletedAt(), coll: c.info.Name, name: e.Name})
	}
	return old
}

// resolveName applies the conflict rule to one name: a present owner before an absent one,
// then the owner whose ID sorts first. It writes a new served entry, or a tombstone, only
// when what is served (or who is shadowed) changes, and reports whether it wrote a new
// revision.
func (w *writer) resolveName(c *collection, t touchedName, info *CollectionInfo, r *collResult) bool {
	if t.fresh != nil && len(c.owned) == 1 {
		// The writer is the collection's only owner and has a new copy: it is served, in
		// place of whatever was (the same owner's older copy, a tombstone, or nothing).
		countFresh(info, w.putServed(c, t.fresh, r))
		return true
	}
	name := t.name
	owners := c.ownersOf(name)
	served := c.entry(name)
	live := served != nil && !served.Deleted
	wasShadowed := live && len(served.Shadowed()) > 0

	if len(owners) == 0 {
		if !live {
			return false
		}
		// The tombstone keeps the last body: a make-before-break consumer (ADS clusters) may
		// send it once more before the removal.
		tomb := &Entry{Name: name, Owner: served.Owner, Version: served.Version, Revision: w.rev, Deleted: true, rare: &entryRare{deletedAt: w.now.UnixNano()}}
		tomb.takeBody(served)
		w.putServed(c, tomb, r)
		info.Count--
		info.Shadowed -= b2i(wasShadowed)
		return true
	}
	sort.SliceStable(owners, func(i, j int) bool {
		if ai, aj := w.absent[owners[i].Owner], w.absent[owners[j].Owner]; ai != aj {
			return aj // the present one first
		}
		return owners[i].Owner < owners[j].Owner
	})
	win := owners[0]
	var shadowed []string
	if len(owners) > 1 {
		for _, o := range owners[1:] {
			shadowed = append(shadowed, o.Owner)
		}
		r.conflicts = append(r.conflicts, Conflict{Collection: c.info.Name, Name: name, Served: win.Owner, Shadowed: shadowed})
	}
	info.Shadowed += b2i(len(shadowed) > 0) - b2i(wasShadowed)
	if live && served.Owner == win.Owner && served.Version == win.Version && bytes.Equal(served.Bytes, win.Bytes) {
		if !slices.Equal(served.Shadowed(), shadowed) {
			// Only who is shadowed changed: record it without a new revision, so that no
			// subscriber is sent what it already has.
			e := *served
			e.setShadowed(shadowed)
			w.putServed(c, &e, r)
		}
		return false
	}
	e := win
	if win != t.fresh {
		// An owned copy an earlier write published, now served: copied, not modified.
		e = &Entry{Name: name, Owner: win.Owner, Version: win.Version}
		e.takeBody(win)
	}
	e.Revision = w.rev
	e.setShadowed(shadowed)
	w.putServed(c, e, r)
	if !live {
		info.Count++
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
