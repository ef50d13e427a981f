package store

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/google/btree"

	"github.com/mcpbridge/mcpbridge/internal/parallel"
)

// Plan is what one write of one owner changes in that owner's copies, computed against a
// View: per collection, the copies the owner puts (new, or changed) and the names it deletes,
// with the copies it already holds unchanged left out; how many copies it gains; and whether
// that takes it over its quota. It is the one statement of the write rules: the Store applies
// its plan to the next state, and a replicated backend (store/etcdbackend) commits a plan's
// puts and deletions as they are, so that both make the same change.
//
// The rules, for one owner and the updates of one write (Prepare's output):
//
//   - A Full update makes its resources the owner's whole set in its collection: whatever the
//     owner holds there and does not list is deleted; Removed is ignored. An empty Full update
//     empties the owner's part of the collection.
//   - An incremental update upserts its resources and deletes the Removed names the owner
//     holds: a name it does not hold is ignored, a name listed twice is deleted once. It may
//     not both upsert and remove a name (Prepare and NewPlan refuse that).
//   - A resource whose version and bytes equal the owner's own copy is unchanged: neither
//     put nor counted. Other owners' copies do not matter.
//   - A write that replaces the owner's whole state (ReplaceOwner) also empties every
//     collection the owner holds copies in and the updates do not list.
//   - The quota (WithinLimit): a write that leaves the owner holding more than the limit,
//     and more than it holds now, is refused; one that does not grow an owner already over
//     its limit is not.
type Plan struct {
	// Owner is the writing owner.
	Owner string
	// Collections are the collections the write names, in the order of its updates (each
	// once, even when nothing changes in it), then those a whole-state replacement empties,
	// by name.
	Collections []CollectionPlan
	// Delta is how many copies the owner gains (negative: loses) in all collections.
	Delta int

	base *state // the state the plan was computed against: the owner's count, for the quota
}

// CollectionPlan is a Plan's change of the owner's copies in one collection. A name is in
// Puts or in Deletes, not both, and at most once.
type CollectionPlan struct {
	Collection string
	// Puts are the owner's new and changed copies, in the order of the update. Name, Version
	// and Bytes are set; Owner and Revision are not: the write sets them. Read them only.
	Puts []*Entry
	// Deletes are names the owner holds in the collection and lets go of: an incremental
	// update's, in its order; a Full update's and a replacement's, by name.
	Deletes []string
}

// NewPlan computes the plan of a write by owner against view: updates are Prepare's output
// (each update's resources as Encoded), and replaceAll says they are the owner's whole state
// (ReplaceOwner, whose updates are all Full). What Prepare refuses it refuses too, with a
// *ValidationError (an invalid owner, a collection named twice, a name missing, with a control
// character or listed twice, an incremental update's name both upserted and removed), and
// an update that was not prepared: it validates and encodes nothing.
func NewPlan(view *View, owner string, updates []Update, replaceAll bool) (*Plan, error) {
	if err := CheckOwner(owner); err != nil {
		return nil, err
	}
	prepared := make([]preparedUpdate, len(updates))
	seenColl := make(map[string]bool, len(updates))
	for i, u := range updates {
		if err := checkCollection(u.Collection, seenColl); err != nil {
			return nil, err
		}
		if len(u.Resources) > 0 {
			return nil, &ValidationError{Collection: u.Collection, Err: fmt.Errorf("update not prepared: it holds decoded resources")}
		}
		p := preparedUpdate{Update: u, entries: entriesOf(u.Encoded, 0)}
		names, err := checkNames(u, len(p.entries), func(i int) string { return p.entries[i].Name })
		if err != nil {
			return nil, err
		}
		if err := checkRemoved(u, names); err != nil {
			return nil, err
		}
		prepared[i] = p
	}
	return planOf(view.st, owner, prepared, replaceAll), nil
}

// CheckOwner refuses an owner ID no write may carry: empty, or holding a control character
// (see checkKey).
func CheckOwner(owner string) error {
	if err := checkKey("owner", owner); err != nil || owner == "" {
		return &ValidationError{Err: fmt.Errorf("invalid owner %q", owner)}
	}
	return nil
}

// Changes is how many puts and deletions the plan holds: 0 when the write changes none of
// the owner's copies.
func (p *Plan) Changes() int {
	n := 0
	for i := range p.Collections {
		n += len(p.Collections[i].Puts) + len(p.Collections[i].Deletes)
	}
	return n
}

// WithinLimit checks the plan against the owner's quota, limit copies in all collections
// together (0 or less: none): it returns an *OwnerLimitError when the owner would hold more
// than limit and more than it holds now. It costs the number of collections.
func (p *Plan) WithinLimit(limit int) error {
	if limit <= 0 || p.Delta <= 0 {
		return nil // a write that does not grow the owner is never refused
	}
	held := p.base.ownedCount(p.Owner)
	if would := held + p.Delta; would > limit {
		return &OwnerLimitError{Owner: p.Owner, Limit: limit, Held: held, Would: would}
	}
	return nil
}

// planOf computes the plan of prepared updates against base. The updates' entries become
// the plan's Puts: their slices are reordered in place (the changed entries first, in their
// order), so the caller hands them over. Collections, and names in an update, are unique,
// and no incremental update removes a name it upserts (prepare checked).
func planOf(base *state, owner string, updates []preparedUpdate, replaceAll bool) *Plan {
	p := &Plan{Owner: owner, base: base, Collections: make([]CollectionPlan, len(updates))}
	// Each collection apart, on every CPU when the write is large (a full load's collections
	// of a million names each are compared with the owner's copies at once).
	deltas := make([]int, len(updates))
	parallel.For(len(updates), perCollectionWorker(updates), func(i int) {
		p.Collections[i], deltas[i] = p.collection(base.colls[updates[i].Collection], &updates[i])
	})
	for _, d := range deltas {
		p.Delta += d
	}
	if replaceAll {
		for _, coll := range base.ownerCollections(owner) {
			if p.lists(coll) {
				continue
			}
			cp := CollectionPlan{Collection: coll}
			base.colls[coll].owned[owner].Ascend(func(it nameItem) bool {
				cp.Deletes = append(cp.Deletes, it.name)
				return true
			})
			p.Delta -= len(cp.Deletes)
			p.Collections = append(p.Collections, cp)
		}
	}
	return p
}

// lists tells whether the plan names a collection already; a write names a few.
func (p *Plan) lists(coll string) bool {
	for i := range p.Collections {
		if p.Collections[i].Collection == coll {
			return true
		}
	}
	return false
}

// collection plans one update against c, the collection as the write found it (nil: new),
// and says how many copies the owner gains in it. It reads p's owner only: the collections
// of a write are planned at once.
func (p *Plan) collection(c *collection, u *preparedUpdate) (cp CollectionPlan, delta int) {
	all := u.entries
	cp = CollectionPlan{Collection: u.Collection, Puts: all}
	held := c.ownedTree(p.Owner)
	if held == nil || held.Len() == 0 {
		// The owner holds nothing here (a first load): everything is new, nothing to delete.
		return cp, len(all)
	}
	// Each upsert is compared with the owner's own copy. The changed ones are moved to the
	// front, in their order, by swapping: all still holds every name, for a Full update's
	// deletions.
	k, found := 0, 0
	for i, e := range all {
		it, ok := held.Get(nameItem{name: e.Name})
		if !ok {
			delta++
		} else {
			found++
			if o := it.e; o.Version == e.Version && bytes.Equal(o.Bytes, e.Bytes) {
				continue // unchanged: write nothing
			}
		}
		all[k], all[i] = all[i], all[k]
		k++
	}
	cp.Puts = all[:k:k]
	switch {
	case u.Full && found < held.Len():
		// Some of what the owner holds is not listed. (When it holds exactly the names
		// listed, nothing is looked up.)
		cp.Deletes = unlisted(held, all)
	case !u.Full && len(u.Removed) > 0:
		cp.Deletes = removed(held, u.Removed)
	}
	return cp, delta - len(cp.Deletes)
}

// unlisted are the names held that are not among all's, by name.
func unlisted(held *btree.BTreeG[nameItem], all []*Entry) []string {
	keep := make(map[string]struct{}, len(all))
	for _, e := range all {
		keep[e.Name] = struct{}{}
	}
	var gone []string
	held.Ascend(func(it nameItem) bool {
		if _, ok := keep[it.name]; !ok {
			gone = append(gone, it.name)
		}
		return true
	})
	return gone
}

// removed are the names among names that are held, in their order, each once.
func removed(held *btree.BTreeG[nameItem], names []string) []string {
	gone := make([]string, 0, len(names))
	var seen map[string]bool // for a long list; a short one is searched
	if len(names) > 16 {
		seen = make(map[string]bool, len(names))
	}
	for _, name := range names {
		if _, ok := held.Get(nameItem{name: name}); !ok {
			continue
		}
		if seen == nil && slices.Contains(gone, name) || seen[name] {
			continue // listed twice: deleted once
		}
		if seen != nil {
			seen[name] = true
		}
		gone = append(gone, name)
	}
	return gone
}

// entriesOf makes the entries of encoded resources (Name, Version, Bytes), in a slice with
// room for extra more before them.
func entriesOf(encoded []Encoded, extra int) []*Entry {
	out := make([]*Entry, extra+len(encoded))
	// On every CPU: a full load's million entries are a serial second otherwise.
	parallel.ForRange(len(encoded), entriesChunk, func(lo, hi int) {
		for i, e := range encoded[lo:hi] {
			name, version := metaOf(e.raw())
			out[extra+lo+i] = newEntry(name, version, e)
		}
	})
	return out
}

// entriesChunk is how many entries entriesOf makes per hand-out to a CPU.
const entriesChunk = 4096
