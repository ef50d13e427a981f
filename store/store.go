// Package store is mcpbridge's one in-memory store of collections.
//
// Every producer (sink side, file source, translation) writes through Apply or ReplaceOwner;
// every consumer (MCP and xDS sources) reads snapshots or changes since a revision and waits on
// per-collection topics. A write is validated first and applied all or nothing: it builds the
// next immutable state and publishes it at once (state.go); readers hold a state and never see
// half a write.
//
// Revisions: the store keeps one counter; each write that changes anything takes the next
// value, stamps every entry it writes (and every tombstone) with it, and records it as the
// revision of each collection it touched. A reader at revision r of a collection is brought up
// to date by ChangesSince(r), which walks the collection's (revision, name) index from r+1:
// the cost is the size of the change, not of the collection.
//
// Conflicts: two owners may hold the same name in one collection. The copy served is the one
// of a present owner before an absent one (SetOwnerPresent: a producer whose streams all
// ended is absent until it reconnects), and among those the owner whose ID sorts first
// (byte-wise); the others are shadowed, kept, and served again if the winner lets go of the
// name or goes away. So a producer that died once never shadows a live one, and otherwise the
// rule depends on nothing but the owner IDs: it resolves the same way on every run and in
// every order of arrival. Each conflict is logged as a warning and counted; every shadowed
// name is shown on its served entry (Entry.Shadowed) and counted per collection
// (CollectionInfo.Shadowed).
package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mcpapi "istio.io/api/mcp/v1alpha1"
)

// ErrCompacted is returned by ChangesSince when tombstones the reader would need were
// compacted away: the reader must take a full state instead.
var ErrCompacted = errors.New("store: revision compacted, full state required")

// Validator checks one resource of a collection before anything is written. It returns an
// error naming the fault; the store adds the collection and resource name.
type Validator func(collection string, r *mcpapi.Resource) error

// Options configures a Store. The zero value is usable.
type Options struct {
	// Validate is called for every resource of a write before the write starts.
	Validate Validator
	// TombstoneRetention is how long deletions are remembered for ChangesSince. The bridge
	// passes store.tombstone_retention; zero means 5m, its default in app.DefaultConfig, for
	// the store's other users (mcpbridge validate and push, tests).
	TombstoneRetention time.Duration
	Logger             *slog.Logger
	// Now is the clock, for tests. Nil means time.Now.
	Now func() time.Time
}

// Store is the collection store. It is safe for concurrent use.
type Store struct {
	// current is the published state; a write replaces it whole.
	current   atomic.Pointer[state]
	validate  Validator
	retention time.Duration
	log       *slog.Logger
	now       func() time.Time

	// writeMu serialises writers: each builds on the state the last one published, and the
	// revision counter moves with the publication; it also covers the notification that follows.
	writeMu  sync.Mutex
	revision uint64 // guarded by writeMu; the revision of the last write that changed anything
	// absent owners lose conflicts to present ones; guarded by writeMu. Owners are present
	// unless said otherwise, so files, the translation and tests need not say anything.
	absent map[string]bool
	// presence counts the changes of absent, guarded by writeMu.
	presence uint64

	topics topics

	conflicts atomic.Uint64
	writes    atomic.Uint64
	marshals  atomic.Uint64
}

// New returns an empty store.
func New(opts Options) *Store {
	s := &Store{
		validate:  opts.Validate,
		retention: opts.TombstoneRetention,
		log:       opts.Logger,
		now:       opts.Now,
		absent:    map[string]bool{},
	}
	if s.retention <= 0 {
		s.retention = 5 * time.Minute // store.tombstone_retention's default in app.DefaultConfig
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.topics.init()
	s.current.Store(emptyState())
	return s
}

// Run compacts tombstones older than the retention until ctx ends. Compaction is housekeeping
// on a timer; no reader or writer waits on it.
func (s *Store) Run(ctx context.Context) {
	period := s.retention / 4
	if period < time.Second {
		period = time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Compact(s.now().Add(-s.retention))
		}
	}
}

// Stats are counters for metrics and debugging.
type Stats struct {
	Revision  uint64
	Writes    uint64 // writes that changed something
	Conflicts uint64 // names found held by more than one owner, counted per write that saw them
	// Marshals counts resources encoded by the store: once per resource per write that carries
	// it. Consumers reuse those bytes and never encode a resource again.
	Marshals uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Revision: s.View().Revision(), Writes: s.writes.Load(), Conflicts: s.conflicts.Load(), Marshals: s.marshals.Load()}
}

// Compact removes tombstones deleted before the given time and marks their collections so that
// readers at older revisions are told to take a full state. It returns how many it removed.
func (s *Store) Compact(before time.Time) int {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	w := s.newWriter("")
	// Tombstones are indexed by deletion time: read the oldest until the cut-off.
	var old []tombItem
	w.next.tombs.Ascend(func(it tombItem) bool {
		if it.at >= before.UnixNano() {
			return false
		}
		old = append(old, it)
		return true
	})
	if len(old) == 0 {
		return 0
	}
	tombs := w.tombs()
	for _, it := range old {
		c := w.coll(it.coll)
		e := c.entry(it.name)
		c.served.Delete(nameItem{name: it.name})
		c.byRev.Delete(revItem{rev: e.Revision, name: it.name})
		tombs.Delete(it)
		c.info.Compacted = max(c.info.Compacted, e.Revision)
	}
	s.current.Store(w.next)
	s.log.Debug("compacted tombstones", "count", len(old))
	return len(old)
}
