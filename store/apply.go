package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"time"

	"maps"

	"github.com/google/btree"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/parallel"
)

// Update is one collection's part of a write by one owner.
type Update struct {
	Collection string
	// Full makes Resources the owner's complete set in the collection: whatever the owner held
	// there and does not list is removed. Removed is then ignored.
	Full bool
	// Resources are upserted (or, with Full, are the whole set).
	Resources []*mcpapi.Resource
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
// The store keeps the resources it is given (and may set their Metadata.Version when empty);
// callers must not modify them afterwards.
func (s *Store) Apply(owner string, updates ...Update) (Result, error) {
	prepared, err := s.prepare(updates)
	if err != nil {
		return Result{}, err
	}
	return s.write(owner, prepared, false)
}

// ReplaceOwner makes state the owner's complete state across all collections: each listed
// collection is replaced as with a Full update, and every other collection the owner holds is
// emptied of the owner's resources. ReplaceOwner(owner, nil) removes the owner entirely.
func (s *Store) ReplaceOwner(owner string, state map[string][]*mcpapi.Resource) (Result, error) {
	updates := make([]Update, 0, len(state))
	for coll, rs := range state {
		updates = append(updates, Update{Collection: coll, Full: true, Resources: rs})
	}
	prepared, err := s.prepare(updates)
	if err != nil {
		return Result{}, err
	}
	return s.write(owner, prepared, true)
}

// SetOwnerPresent says whether an owner is present (a producer with an open stream) or
// absent (all its streams ended; its resources stay until it comes back or expires). An
// absent owner's copies lose every conflict to a present owner's, so what is served may
// change: the names the owner holds are resolved again in one write, which changes
// revisions only where the served copy changes.
func (s *Store) SetOwnerPresent(owner string, present bool) (Result, error) {
	if err := checkKey("owner", owner); err != nil || owner == "" {
		return Result{}, &ValidationError{Err: fmt.Errorf("invalid owner %q", owner)}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.absent[owner] == !present {
		return Result{Revision: s.revision}, nil
	}
	if present {
		delete(s.absent, owner)
	} else {
		s.absent[owner] = true
	}
	w := s.newWriter(owner)
	w.next.ownerCopies(owner, "", func(it ownerItem) bool {
		w.touch(it.coll, it.name)
		return true
	})
	return s.commit(w, owner), nil
}

// preparedUpdate is an Update validated, versioned and marshalled, ready for the transaction.
type preparedUpdate struct {
	Update
	entries []*ownedEntry // sorted by name
}

func (s *Store) prepare(updates []Update) ([]preparedUpdate, error) {
	out := make([]preparedUpdate, 0, len(updates))
	seenColl := make(map[string]bool, len(updates))
	for _, u := range updates {
		if u.Collection == "" {
			return nil, &ValidationError{Err: fmt.Errorf("collection name is empty")}
		}
		if err := checkKey("collection name", u.Collection); err != nil {
			return nil, &ValidationError{Collection: u.Collection, Err: err}
		}
		if seenColl[u.Collection] {
			return nil, &ValidationError{Collection: u.Collection, Err: fmt.Errorf("collection appears twice in one write")}
		}
		seenColl[u.Collection] = true
		p, err := s.prepareOne(u)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (s *Store) prepareOne(u Update) (preparedUpdate, error) {
	p := preparedUpdate{Update: u, entries: make([]*ownedEntry, len(u.Resources))}
	names := make(map[string]bool, len(u.Resources))
	for i, r := range u.Resources {
		name := r.GetMetadata().GetName()
		if r == nil || r.GetMetadata() == nil || name == "" {
			return p, &ValidationError{Collection: u.Collection, Err: fmt.Errorf("resource %d has no metadata.name", i)}
		}
		if err := checkKey("name", name); err != nil {
			return p, &ValidationError{Collection: u.Collection, Resource: name, Err: err}
		}
		if names[name] {
			return p, &ValidationError{Collection: u.Collection, Resource: name, Err: fmt.Errorf("name appears twice")}
		}
		names[name] = true
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
		p.entries[i], errs[i] = newOwnedEntry(u.Collection, r)
	})
	for i, err := range errs {
		if err != nil {
			return p, &ValidationError{Collection: u.Collection, Resource: u.Resources[i].Metadata.Name, Err: err}
		}
	}
	s.marshals.Add(uint64(len(u.Resources)))
	for _, name := range u.Removed {
		if name == "" && !u.Full {
			return p, &ValidationError{Collection: u.Collection, Err: fmt.Errorf("removed_resources holds an empty name")}
		}
		if err := checkKey("removed name", name); err != nil && !u.Full {
			return p, &ValidationError{Collection: u.Collection, Resource: name, Err: err}
		}
		if names[name] && !u.Full {
			return p, &ValidationError{Collection: u.Collection, Resource: name, Err: fmt.Errorf("name is both upserted and removed")}
		}
	}
	return p, nil
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

var deterministic = proto.MarshalOptions{Deterministic: true}

// parallelMin is the number of resources per goroutine from which a write validates and
// encodes them on every CPU: below it, goroutines cost more than they save.
const parallelMin = 256

// newOwnedEntry versions and encodes a resource once; every consumer reuses the bytes.
func newOwnedEntry(collection string, r *mcpapi.Resource) (*ownedEntry, error) {
	b, err := encodeResource(r)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	return &ownedEntry{
		Collection: collection, Name: r.Metadata.Name, Version: r.Metadata.Version,
		Resource: r, Bytes: b,
	}, nil
}

// encodeResource sets the resource's version to a content hash when it has none, and returns
// its deterministic encoding. The body is copied once, into the encoding, and the resource's
// body then refers to that copy: the store holds one copy of every body, however many
// readers decode or send it.
//
// The encoding is written field by field (metadata = 1, body = 2; an Any's type_url = 1,
// value = 2), which is what proto's deterministic marshalling gives for these messages; the
// content hash is that of the encoding without the version, fed to the hash in pieces, so no
// second copy of the body is made for it. A resource carrying unknown fields is marshalled
// the generic way.
func encodeResource(r *mcpapi.Resource) ([]byte, error) {
	body := r.GetBody()
	if len(r.ProtoReflect().GetUnknown()) > 0 || body != nil && len(body.ProtoReflect().GetUnknown()) > 0 {
		return encodeGeneric(r)
	}
	var anyLen int // proto3 leaves empty scalar fields out
	if body != nil && body.TypeUrl != "" {
		anyLen += fieldLen(1, len(body.TypeUrl))
	}
	if body != nil && len(body.Value) > 0 {
		anyLen += fieldLen(2, len(body.Value))
	}
	if r.Metadata.Version == "" {
		unversioned, err := deterministic.Marshal(r.Metadata)
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		h.Write(appendField(nil, 1, len(unversioned)))
		h.Write(unversioned)
		if body != nil {
			h.Write(appendField(nil, 2, anyLen))
			if body.TypeUrl != "" {
				h.Write(appendField(nil, 1, len(body.TypeUrl)))
				h.Write([]byte(body.TypeUrl))
			}
			if len(body.Value) > 0 {
				h.Write(appendField(nil, 2, len(body.Value)))
				h.Write(body.Value)
			}
		}
		r.Metadata.Version = hex.EncodeToString(h.Sum(nil)[:8])
	}
	meta, err := deterministic.Marshal(r.Metadata)
	if err != nil {
		return nil, err
	}
	size := fieldLen(1, len(meta))
	if body != nil {
		size += fieldLen(2, anyLen)
	}
	b := make([]byte, 0, size)
	b = append(appendField(b, 1, len(meta)), meta...)
	if body == nil {
		return b, nil
	}
	b = appendField(b, 2, anyLen)
	if body.TypeUrl != "" {
		b = append(appendField(b, 1, len(body.TypeUrl)), body.TypeUrl...)
	}
	if len(body.Value) > 0 {
		b = appendField(b, 2, len(body.Value))
		off := len(b)
		b = append(b, body.Value...)
		body.Value = b[off:len(b):len(b)]
	}
	return b, nil
}

func encodeGeneric(r *mcpapi.Resource) ([]byte, error) {
	if r.Metadata.Version == "" {
		unversioned, err := deterministic.Marshal(r)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(unversioned)
		r.Metadata.Version = hex.EncodeToString(sum[:8])
	}
	return deterministic.Marshal(r)
}

// appendField appends the tag and length of a length-delimited field.
func appendField(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}

// fieldLen is the encoded size of a length-delimited field holding n bytes.
func fieldLen(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// write applies prepared updates to the next state and publishes it, then wakes the touched
// collections' subscribers, so that whoever wakes reads the new state.
func (s *Store) write(owner string, updates []preparedUpdate, replaceAll bool) (Result, error) {
	if err := checkKey("owner", owner); err != nil || owner == "" {
		return Result{}, &ValidationError{Err: fmt.Errorf("invalid owner %q", owner)}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	w := s.newWriter(owner)
	listed := make(map[string]bool, len(updates))
	for _, u := range updates {
		listed[u.Collection] = true
		w.applyUpdate(u)
	}
	if replaceAll {
		for _, coll := range w.next.ownerCollections(owner) {
			if !listed[coll] {
				w.applyUpdate(preparedUpdate{Update: Update{Collection: coll, Full: true}})
			}
		}
	}
	if replaceAll && len(updates) == 0 {
		delete(s.absent, owner) // it holds nothing any more: nothing to remember of it
	}
	return s.commit(w, owner), nil
}

func (s *Store) newWriter(owner string) *writer {
	base := s.current.Load()
	next := &state{rev: base.rev, colls: maps.Clone(base.colls), owners: base.owners, tombs: base.tombs}
	return &writer{next: next, mine: map[string]bool{}, owner: owner, rev: s.revision + 1, now: s.now(),
		touched: map[string]map[string]bool{}, absent: s.absent}
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

// writer builds the next state of one write. It copies a collection (and the owner and
// tombstone indexes) the first time it changes one; what it only reads stays shared.
type writer struct {
	next       *state
	mine       map[string]bool // collections of next copied for this write
	ownersMine bool
	tombsMine  bool
	owner      string
	rev        uint64
	now        time.Time
	// touched names per collection whose owned copies changed, to resolve afterwards
	touched map[string]map[string]bool
	absent  map[string]bool // Store.absent, read under writeMu
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

func (w *writer) owners() *btree.BTreeG[ownerItem] {
	if !w.ownersMine {
		w.next.owners = w.next.owners.Clone()
		w.ownersMine = true
	}
	return w.next.owners
}

func (w *writer) tombs() *btree.BTreeG[tombItem] {
	if !w.tombsMine {
		w.next.tombs = w.next.tombs.Clone()
		w.tombsMine = true
	}
	return w.next.tombs
}

func (w *writer) touch(coll, name string) {
	m := w.touched[coll]
	if m == nil {
		m = map[string]bool{}
		w.touched[coll] = m
	}
	m[name] = true
}

// ownedCopy returns the writer's owner's copy of a name, or nil.
func (w *writer) ownedCopy(coll, name string) *ownedEntry {
	c := w.next.colls[coll]
	if c == nil {
		return nil
	}
	it, ok := c.owned.Get(ownedItem{name: name, owner: w.owner})
	if !ok {
		return nil
	}
	return it.e
}

func (w *writer) putOwned(e *ownedEntry) {
	w.coll(e.Collection).owned.ReplaceOrInsert(ownedItem{name: e.Name, owner: e.Owner, e: e})
	w.owners().ReplaceOrInsert(ownerItem{owner: e.Owner, coll: e.Collection, name: e.Name, e: e})
	w.touch(e.Collection, e.Name)
}

func (w *writer) deleteOwned(coll, name string) {
	w.coll(coll).owned.Delete(ownedItem{name: name, owner: w.owner})
	w.owners().Delete(ownerItem{owner: w.owner, coll: coll, name: name})
	w.touch(coll, name)
}

func (w *writer) applyUpdate(u preparedUpdate) {
	keep := make(map[string]bool, len(u.entries))
	for _, e := range u.entries {
		keep[e.Name] = true
		if o := w.ownedCopy(u.Collection, e.Name); o != nil && o.Version == e.Version && bytes.Equal(o.Bytes, e.Bytes) {
			continue // unchanged: write nothing
		}
		ne := *e
		ne.Owner = w.owner
		w.putOwned(&ne)
	}
	if u.Full {
		var gone []string
		w.next.ownerCopies(w.owner, u.Collection, func(it ownerItem) bool {
			if !keep[it.name] {
				gone = append(gone, it.name)
			}
			return true
		})
		for _, name := range gone {
			w.deleteOwned(u.Collection, name)
		}
		return
	}
	for _, name := range u.Removed {
		if w.ownedCopy(u.Collection, name) != nil {
			w.deleteOwned(u.Collection, name)
		}
	}
}

// resolve recomputes the served entry of every touched name and writes those that changed.
func (w *writer) resolve() Result {
	var res Result
	colls := make([]string, 0, len(w.touched))
	for c := range w.touched {
		colls = append(colls, c)
	}
	sort.Strings(colls)
	for _, coll := range colls {
		c := w.coll(coll)
		info := c.info
		changed := 0
		for name := range w.touched[coll] {
			written, delta, conflict := w.resolveName(c, name)
			if conflict != nil {
				res.Conflicts = append(res.Conflicts, *conflict)
			}
			info.Shadowed += delta.shadowed
			if written {
				changed++
				info.Count += delta.count
			}
		}
		if changed > 0 {
			info.Revision = w.rev
			info.Changed = w.now
			res.Changed += changed
			res.Collections = append(res.Collections, coll)
		}
		c.info = info // the shadowed count may change without a new revision
	}
	return res
}

// putServed replaces a name's served entry (old, nil if none) with e, keeping the revision
// and tombstone indexes in step.
func (w *writer) putServed(c *collection, old, e *Entry) {
	if old != nil {
		c.byRev.Delete(revItem{rev: old.Revision, name: old.Name})
		if old.Deleted {
			w.tombs().Delete(tombItem{at: old.DeletedAt.UnixNano(), coll: c.info.Name, name: old.Name})
		}
	}
	c.served.ReplaceOrInsert(servedItem{name: e.Name, e: e})
	c.byRev.ReplaceOrInsert(revItem{rev: e.Revision, name: e.Name, e: e})
	if e.Deleted {
		w.tombs().ReplaceOrInsert(tombItem{at: e.DeletedAt.UnixNano(), coll: c.info.Name, name: e.Name})
	}
}

// countDelta is how a resolved name changes its collection's counts.
type countDelta struct{ count, shadowed int }

// resolveName applies the conflict rule to one name: a present owner before an absent one,
// then the owner whose ID sorts first. It writes a new served entry, or a tombstone, only
// when what is served (or who is shadowed) changes.
func (w *writer) resolveName(c *collection, name string) (written bool, delta countDelta, conflict *Conflict) {
	coll := c.info.Name
	owners := c.ownersOf(name)
	served := c.entry(name)
	live := served != nil && !served.Deleted
	wasShadowed := live && len(served.Shadowed) > 0

	if len(owners) == 0 {
		if !live {
			return false, countDelta{}, nil
		}
		// The tombstone keeps the last body: a make-before-break consumer (ADS clusters) may
		// send it once more before the removal.
		w.putServed(c, served, &Entry{
			Collection: coll, Name: name, Owner: served.Owner, Version: served.Version,
			Resource: served.Resource, Bytes: served.Bytes, Revision: w.rev, Deleted: true, DeletedAt: w.now,
		})
		return true, countDelta{count: -1, shadowed: -b2i(wasShadowed)}, nil
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
		conflict = &Conflict{Collection: coll, Name: name, Served: win.Owner, Shadowed: shadowed}
	}
	delta.shadowed = b2i(len(shadowed) > 0) - b2i(wasShadowed)
	if live && served.Owner == win.Owner && served.Version == win.Version && bytes.Equal(served.Bytes, win.Bytes) {
		if !slices.Equal(served.Shadowed, shadowed) {
			// Only who is shadowed changed: record it without a new revision, so that no
			// subscriber is sent what it already has.
			e := *served
			e.Shadowed = shadowed
			w.putServed(c, served, &e)
		}
		return false, delta, conflict
	}
	w.putServed(c, served, &Entry{
		Collection: coll, Name: name, Owner: win.Owner, Version: win.Version,
		Resource: win.Resource, Bytes: win.Bytes, Revision: w.rev, Shadowed: shadowed,
	})
	if !live {
		delta.count = 1
	}
	return true, delta, conflict
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
