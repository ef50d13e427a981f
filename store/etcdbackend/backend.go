// Package etcdbackend replicates the store through etcd (store.backend: etcd): every replica of
// the bridge commits the writes it takes (producers' pushes, and the files and upstreams when
// it is the elected ingester) to etcd, and applies what etcd holds, in etcd's order, to its own
// in-memory store, which its consumers read as before.
//
// A write is acknowledged only once etcd committed it and this replica applied it. All of a
// write is committed in one etcd transaction, or, when it exceeds one transaction's limits,
// as chunks followed by one commit record: replicas apply the chunks only when the record
// appears, as one store write, so that no replica ever serves part of a write. Resources are
// stored in the store's own encoding, versioned by the replica that took the write, so every
// replica serves the same versions and a client may move between replicas and resume.
//
// An owner that expires (a producer, per sink.expiry) holds an etcd lease kept alive while it
// has a stream on some replica: when it has none for the expiry, etcd deletes its resources,
// and every replica drops them at once, whether or not the replica it left is alive.
package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcpbridge/mcpbridge/store"
)

// Options configures a Backend. The bridge passes the fields from store.etcd.*; for the
// backend's other users (its tests and benchmarks), the default of a zero value is the key's
// in app.DefaultConfig, but GCInterval's, which is no key.
type Options struct {
	Client *clientv3.Client
	// Prefix is where the bridge's keys live in etcd (store.etcd.prefix); replicas sharing it
	// serve the same config. Default "/mcpbridge/".
	Prefix string
	// Store is this replica's store: the backend applies etcd's state to it.
	Store *store.Store
	// Replica names this replica in presence keys and logs. Default: the host name.
	Replica string
	Logger  *slog.Logger
	// MaxTxnOps and MaxTxnBytes bound one etcd transaction (etcd's --max-txn-ops, 128 by
	// default, and --max-request-bytes, 1.5 MiB): a write beyond them goes in chunks and a
	// commit record. Defaults 100 and 1 MiB, leaving room for the transaction's own keys.
	MaxTxnOps   int
	MaxTxnBytes int
	// RequestTimeout bounds each etcd request of a write, and a write's wait for this replica
	// to apply it (store.etcd.request_timeout). Default 5s.
	RequestTimeout time.Duration
	// SessionTTL is the lease of this replica's presence keys: the time after which a dead
	// replica's producers count as gone. Default 10s.
	SessionTTL time.Duration
	// GCInterval is how often the chunks of large writes that their dead replica never
	// committed are looked for and deleted (gc.go). Default 5m.
	GCInterval time.Duration
}

// Backend is a store.ExpiringWriter committing to etcd, and the reader applying etcd's state
// to the local store. Start it before the first write.
type Backend struct {
	cli    *clientv3.Client
	prefix string
	st     *store.Store
	name   string
	// alive is the value of this replica's alive key: its name and who holds it, which a
	// second replica of the name is told (claimName), whoever writes the key.
	alive string
	log   *slog.Logger

	maxOps, maxBytes int
	timeout          time.Duration
	sessionTTL       time.Duration
	gcInterval       time.Duration

	mu       sync.Mutex
	applied  int64         // the etcd revision applied to the store
	seen     int64         // the newest etcd revision a watch response reported
	advanced chan struct{} // closed and replaced each time applied moves
	results  map[int64]map[string]store.Result
	resRevs  []int64 // results' revisions, oldest first, for pruning
	chunks   map[string]map[string][]byte
	present  map[string]map[string]bool // owner → replicas with a stream of it
	owners   map[string]bool            // owners seen in etcd (and so to be reset by a reload)
	// seqs is each owner's write sequence as applied here: the mod revision of its s/ key
	// (OwnerFence).
	seqs     map[string]int64
	notReady string // why the replica is not serving etcd's state; "" when it is
	// unreachable is why etcd does not answer this replica's probes (probe), "" while it does:
	// writes fail fast and /readyz says not ready meanwhile.
	unreachable string

	ownerLocks sync.Map // owner → *sync.Mutex: one write per owner at a time on this replica
	leases     leases
	session    session
	ingesting  atomic.Bool // elected ingester of the shared sources (Ingest)
	// serving ends with Start's context: writes and presence changes still waiting for etcd
	// or for this replica to apply them give up then, so that stopping never waits on them.
	serving atomic.Pointer[context.Context]
}

// New checks the options; Start loads etcd's state.
func New(opts Options) (*Backend, error) {
	if opts.Client == nil || opts.Store == nil {
		return nil, errors.New("etcd backend: Client and Store are required")
	}
	b := &Backend{
		cli: opts.Client, prefix: opts.Prefix, st: opts.Store, name: opts.Replica, log: opts.Logger,
		alive:  fmt.Sprintf("%s (pid %d on %s, since %s)", opts.Replica, os.Getpid(), hostname(), time.Now().UTC().Format(time.RFC3339)),
		maxOps: opts.MaxTxnOps, maxBytes: opts.MaxTxnBytes, timeout: opts.RequestTimeout, sessionTTL: opts.SessionTTL,
		gcInterval: opts.GCInterval,
		advanced:   make(chan struct{}),
		results:    map[int64]map[string]store.Result{},
		chunks:     map[string]map[string][]byte{},
		present:    map[string]map[string]bool{},
		owners:     map[string]bool{},
		seqs:       map[string]int64{},
		notReady:   "not loaded from etcd yet",
	}
	if b.prefix == "" {
		b.prefix = "/mcpbridge/"
	}
	if !strings.HasSuffix(b.prefix, "/") {
		b.prefix += "/"
	}
	if b.name == "" {
		b.name, _ = os.Hostname()
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.log = b.log.With("component", "etcd-backend", "replica", b.name)
	if b.maxOps <= 0 {
		b.maxOps = 100
	}
	if b.maxBytes <= 0 {
		b.maxBytes = 1 << 20
	}
	if b.timeout <= 0 {
		b.timeout = 5 * time.Second
	}
	if b.sessionTTL <= 0 {
		b.sessionTTL = 10 * time.Second
	}
	if b.gcInterval <= 0 {
		b.gcInterval = 5 * time.Minute
	}
	b.leases.init(b)
	b.session.init(b)
	return b, nil
}

// servingContext is Start's context (Background before Start).
func (b *Backend) servingContext() context.Context {
	if ctx := b.serving.Load(); ctx != nil {
		return *ctx
	}
	return context.Background()
}

// Replica is this replica's name.
func (b *Backend) Replica() string { return b.name }

// Ready says whether the replica serves etcd's state as it is, and why not.
func (b *Backend) Ready() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notReady != "" {
		return false, b.notReady
	}
	return b.unreachable == "", b.unreachable
}

// Applied is the etcd revision this replica's store reflects.
func (b *Backend) Applied() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied
}

// Start loads the prefix at the current revision R into the store, then follows it from R+1
// until ctx ends. It returns once loaded: the replica then serves what etcd held at R.
func (b *Backend) Start(ctx context.Context) error {
	b.serving.Store(&ctx)
	rev, err := b.load(ctx)
	if err != nil {
		return err
	}
	if err := b.session.start(ctx); err != nil {
		return err
	}
	go b.follow(ctx, rev)
	go b.collectOrphansEvery(ctx, b.gcInterval)
	go b.probe(ctx)
	return nil
}

// probeInterval is how often probe asks etcd: a second, or a fifth of the request timeout
// when that is shorter.
func (b *Backend) probeInterval() time.Duration { return min(time.Second, b.timeout/5) }

// probe asks etcd for a linearizable read every probeInterval, each bounded by the request
// timeout less an interval.
// When none has answered for the request timeout less an interval, the replica is not ready
// (and its writes fail fast): within request_timeout of losing etcd, however the watch
// retries. Once one answers and this replica has applied up to its revision, it is ready
// again: within a quarter interval or so of etcd's return (it asks four times as often
// meanwhile). The etcd client alone says neither: its
// watch retries silently while no member answers.
func (b *Backend) probe(ctx context.Context) {
	interval := b.probeInterval()
	lastOK := time.Now()
	for {
		// While etcd is silent, ask four times as often: ready again soon after it answers.
		wait := interval
		if b.reachable() != nil {
			wait = interval / 4
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		// Each read may take the request timeout less an interval: a replica busy with a large
		// write (and its clients) answers late, and is not cut off; a dead etcd still shows
		// within the request timeout, and one that comes back answers the read in flight.
		pctx, cancel := context.WithTimeout(ctx, max(interval, b.timeout-interval))
		current, err := b.currentRevision(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if since := time.Since(lastOK); since >= b.timeout-interval {
				b.setUnreachable(fmt.Sprintf("etcd unreachable: no answer for %s (%v); serving the last state applied, revision %d", since.Round(time.Second), err, b.Applied()))
			}
			continue
		}
		lastOK = time.Now()
		wctx, cancel := context.WithTimeout(ctx, interval)
		err = b.waitRevision(wctx, current)
		cancel()
		if err != nil {
			b.setUnreachable(fmt.Sprintf("catching up with etcd: revision %d applied of %d", b.Applied(), current))
			continue
		}
		b.setUnreachable("")
	}
}

// waitRevision waits until this replica has applied etcd revision rev.
//
// rev is a revision of the whole etcd, which writes under other prefixes move too (another
// deployment sharing the etcd, the keys of another replica set expiring): this replica's
// watch, on its prefix, is sent none of those, and etcd reports a watch's progress on its own
// only every ten minutes. So while it waits it writes its own alive key again (markProgress):
// that event comes after every earlier one of the prefix, at a revision past rev, and applying
// it reaches rev. The mark waits progressEvery first: its own writes' events need no mark.
// (etcd's RequestProgress would say the same without a write, but the 3.4
// servers Debian ships may answer it ahead of events still to be sent: etcd issue 15220.)
func (b *Backend) waitRevision(ctx context.Context, rev int64) error {
	var ask <-chan time.Time
	for {
		b.mu.Lock()
		applied, advanced := b.applied, b.advanced
		b.mu.Unlock()
		if applied >= rev {
			return nil
		}
		if ask == nil {
			// Its own writes' events come within milliseconds: a mark only for a wait
			// longer than that.
			t := time.NewTicker(b.progressEvery())
			defer t.Stop()
			ask = t.C
		}
		select {
		case <-advanced:
		case <-ask:
			b.markProgress(ctx) // and again each progressEvery, if the last failed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// progressEvery is how long waitRevision waits before it writes a progress mark, and again
// between marks: 200 ms, or a quarter of the probe interval when that is shorter (a short
// request_timeout), so that a replica that others' writes put behind catches up within the
// probe's wait.
func (b *Backend) progressEvery() time.Duration {
	return min(200*time.Millisecond, b.probeInterval()/4)
}

// markProgress writes this replica's alive key again, with its value and lease, so that its
// watch is sent an event at etcd's current revision. Best effort: without the key (its
// session lapsed) the write fails and the wait goes on to its timeout, as before.
func (b *Backend) markProgress(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, b.progressEvery())
	defer cancel()
	_, _ = b.cli.Put(rctx, b.prefix+aliveKey(b.name), b.alive, clientv3.WithIgnoreLease())
}

func (b *Backend) setUnreachable(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unreachable != reason {
		switch {
		case reason != "" && b.unreachable == "":
			b.log.Warn("not ready", "reason", reason)
		case reason == "":
			b.log.Info("etcd answers again; ready")
		}
	}
	b.unreachable = reason
}

// reachable is nil while etcd answers this replica's probes, else the Unavailable error a
// write or a presence change fails with at once, rather than after its timeouts.
func (b *Backend) reachable() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unreachable == "" {
		return nil
	}
	return &store.UnavailableError{Err: errors.New(b.unreachable)}
}

// load replaces every etcd owner's state in the store with the prefix's at its current
// revision, and returns that revision.
func (b *Backend) load(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 4*b.timeout)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcd backend: loading %s: %w", b.prefix, err)
	}
	state := map[string]map[string][]store.Encoded{}
	chunks := map[string]map[string][]byte{}
	present := map[string]map[string]bool{}
	var commits []commitRef
	seqs := map[string]int64{}
	for _, kv := range resp.Kvs {
		rel := strings.TrimPrefix(string(kv.Key), b.prefix)
		switch {
		case strings.HasPrefix(rel, sequencePrefix):
			if owner, err := unesc(strings.TrimPrefix(rel, sequencePrefix)); err == nil {
				seqs[owner] = kv.ModRevision
			}
		case strings.HasPrefix(rel, resourcePrefix):
			owner, coll, _, err := resourceOf(rel)
			if err != nil {
				b.log.Error("ignoring a malformed key", "key", rel, "error", err)
				continue
			}
			enc, err := store.EncodedFromBytes(kv.Value)
			if err != nil {
				b.log.Error("ignoring a malformed resource", "key", rel, "error", err)
				continue
			}
			if state[owner] == nil {
				state[owner] = map[string][]store.Encoded{}
			}
			state[owner][coll] = append(state[owner][coll], enc)
		case strings.HasPrefix(rel, chunkPrefix):
			_, txid, err := chunkOf(rel)
			if err == nil {
				if chunks[txid] == nil {
					chunks[txid] = map[string][]byte{}
				}
				chunks[txid][rel] = kv.Value
			}
		case strings.HasPrefix(rel, commitPrefix):
			owner, txid, err := pairOf(rel, commitPrefix)
			if err == nil {
				commits = append(commits, commitRef{owner: owner, txid: txid, rev: kv.ModRevision})
			}
		case strings.HasPrefix(rel, presencePrefix):
			owner, replica, err := pairOf(rel, presencePrefix)
			if err == nil {
				if present[owner] == nil {
					present[owner] = map[string]bool{}
				}
				present[owner][replica] = true
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.chunks = chunks
	b.present = present
	b.seqs = seqs
	// Owners etcd no longer has lose everything; the others get etcd's state whole.
	for owner := range b.owners {
		if state[owner] == nil {
			if _, err := b.st.ReplaceOwner(owner, nil); err != nil {
				b.log.Error("could not drop an owner etcd no longer has", "owner", owner, "error", err)
			}
		}
	}
	b.owners = map[string]bool{}
	for owner, colls := range state {
		b.owners[owner] = true
		if _, err := b.st.ReplaceOwnerEncoded(owner, colls); err != nil {
			b.log.Error("could not load an owner's resources", "owner", owner, "error", err)
		}
	}
	// Commits not yet materialized are newer than the r/ keys of their owner: no other write
	// of that owner is committed before they are cleaned up.
	sort.Slice(commits, func(i, j int) bool { return commits[i].rev < commits[j].rev })
	for _, c := range commits {
		b.applyCommitLocked(c.owner, c.txid, resp.Header.Revision)
	}
	for owner := range b.owners {
		b.setPresentLocked(owner)
	}
	for owner := range present {
		b.setPresentLocked(owner)
	}
	b.advanceLocked(resp.Header.Revision)
	b.seen = max(b.seen, resp.Header.Revision)
	b.notReady = ""
	b.log.Info("loaded the store from etcd", "revision", resp.Header.Revision, "keys", len(resp.Kvs), "owners", len(state))
	return resp.Header.Revision, nil
}

type commitRef struct {
	owner, txid string
	rev         int64
}

// follow watches the prefix from rev+1 and applies each revision, reloading when the watch
// cannot resume (compacted) and reconnecting, marked not ready, when it breaks.
func (b *Backend) follow(ctx context.Context, rev int64) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := b.cli.Watch(wctx, b.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
		rev = b.drain(ctx, ch, rev)
		cancel()
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
		if r, err := b.loadIfCompacted(ctx, rev); err == nil {
			rev = r
		}
	}
}

// drain applies a watch's responses until it ends, and returns the last revision applied.
func (b *Backend) drain(ctx context.Context, ch clientv3.WatchChan, rev int64) int64 {
	for resp := range ch {
		if resp.CompactRevision != 0 {
			b.log.Warn("etcd compacted past this replica's revision; reloading", "revision", rev, "compacted", resp.CompactRevision)
			if r, err := b.load(ctx); err == nil {
				return r
			}
			return rev
		}
		if err := resp.Err(); err != nil {
			b.setNotReady("etcd watch failed: " + err.Error())
			b.log.Warn("etcd watch ended; resuming", "revision", rev, "error", err)
			return rev
		}
		b.setNotReady("")
		b.mu.Lock()
		b.seen = max(b.seen, resp.Header.Revision)
		b.mu.Unlock()
		rev = b.applyEvents(resp.Events, rev)
		if resp.IsProgressNotify() && resp.Header.Revision > rev {
			rev = resp.Header.Revision
			b.mu.Lock()
			b.advanceLocked(rev)
			b.mu.Unlock()
		}
	}
	b.setNotReady("etcd watch closed")
	return rev
}

// loadIfCompacted checks that rev+1 can still be watched; if etcd compacted it away, it
// reloads the prefix and returns the new revision.
func (b *Backend) loadIfCompacted(ctx context.Context, rev int64) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	_, err := b.cli.Get(rctx, b.prefix+aliveKey(b.name), clientv3.WithRev(rev+1), clientv3.WithCountOnly())
	if err == nil {
		return rev, nil
	}
	if errors.Is(err, rpctypes.ErrCompacted) {
		return b.load(ctx)
	}
	return rev, err
}

func (b *Backend) setNotReady(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notReady != reason {
		if reason != "" {
			b.log.Warn("not ready", "reason", reason)
		} else {
			b.log.Info("ready again: following etcd")
		}
	}
	b.notReady = reason
}

// applyEvents applies a watch response's events, one etcd revision at a time (a revision is
// one transaction: applied whole), and returns the last revision.
func (b *Backend) applyEvents(events []*clientv3.Event, rev int64) int64 {
	for i := 0; i < len(events); {
		r := events[i].Kv.ModRevision
		j := i
		for j < len(events) && events[j].Kv.ModRevision == r {
			j++
		}
		b.applyRevision(r, events[i:j])
		rev = r
		i = j
	}
	return rev
}

// revisionWrite gathers one revision's changes per owner and collection.
type revisionWrite struct {
	updates map[string]map[string]*store.Update // owner → collection → update
	present map[string]bool                     // owners whose presence keys changed
}

func (w *revisionWrite) update(owner, coll string) *store.Update {
	if w.updates == nil {
		w.updates = map[string]map[string]*store.Update{}
	}
	if w.updates[owner] == nil {
		w.updates[owner] = map[string]*store.Update{}
	}
	u := w.updates[owner][coll]
	if u == nil {
		u = &store.Update{Collection: coll}
		w.updates[owner][coll] = u
	}
	return u
}

// addOp adds a put or deletion of a resource to the revision's write.
func (w *revisionWrite) addOp(o op) error {
	owner, coll, name, err := resourceOf(o.key)
	if err != nil {
		return err
	}
	u := w.update(owner, coll)
	if o.del {
		u.Removed = append(u.Removed, name)
		return nil
	}
	enc, err := store.EncodedFromBytes(o.value)
	if err != nil {
		return fmt.Errorf("%s: %w", o.key, err)
	}
	if enc.Name() != name {
		return fmt.Errorf("%s: holds the resource %q", o.key, enc.Name())
	}
	u.Encoded = append(u.Encoded, enc)
	return nil
}

func (b *Backend) applyRevision(rev int64, events []*clientv3.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var w revisionWrite
	for _, ev := range events {
		rel := strings.TrimPrefix(string(ev.Kv.Key), b.prefix)
		del := ev.Type == clientv3.EventTypeDelete
		switch {
		case strings.HasPrefix(rel, sequencePrefix):
			if owner, err := unesc(strings.TrimPrefix(rel, sequencePrefix)); err == nil {
				if del {
					delete(b.seqs, owner)
				} else {
					b.seqs[owner] = ev.Kv.ModRevision
				}
			}
		case strings.HasPrefix(rel, resourcePrefix):
			if err := w.addOp(op{del: del, key: rel, value: ev.Kv.Value}); err != nil {
				b.log.Error("ignoring a malformed resource in etcd", "key", rel, "error", err)
			}
		case strings.HasPrefix(rel, chunkPrefix):
			b.noteChunk(rel, ev.Kv.Value, del)
		case strings.HasPrefix(rel, commitPrefix) && !del:
			owner, txid, err := pairOf(rel, commitPrefix)
			if err != nil {
				b.log.Error("ignoring a malformed commit record", "key", rel, "error", err)
				continue
			}
			b.commitOpsLocked(owner, txid, &w)
		case strings.HasPrefix(rel, presencePrefix):
			owner, replica, err := pairOf(rel, presencePrefix)
			if err != nil {
				continue
			}
			if del {
				delete(b.present[owner], replica)
			} else {
				if b.present[owner] == nil {
					b.present[owner] = map[string]bool{}
				}
				b.present[owner][replica] = true
			}
			if w.present == nil {
				w.present = map[string]bool{}
			}
			w.present[owner] = true
		}
	}
	results := b.applyLocked(&w, rev)
	for owner := range w.present {
		b.setPresentLocked(owner)
	}
	b.recordLocked(rev, results)
	b.advanceLocked(rev)
}

func (b *Backend) noteChunk(rel string, value []byte, del bool) {
	_, txid, err := chunkOf(rel)
	if err != nil {
		return
	}
	if del {
		delete(b.chunks, txid)
		return
	}
	if b.chunks[txid] == nil {
		b.chunks[txid] = map[string][]byte{}
	}
	b.chunks[txid][rel] = value
}

// commitOpsLocked adds a committed write's chunks to w.
func (b *Backend) commitOpsLocked(owner, txid string, w *revisionWrite) {
	chunks := b.chunks[txid]
	keys := make([]string, 0, len(chunks))
	for k := range chunks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ops, err := decodeChunk(chunks[k])
		if err != nil {
			b.log.Error("ignoring a malformed chunk", "owner", owner, "key", k, "error", err)
			continue
		}
		for _, o := range ops {
			if err := w.addOp(o); err != nil {
				b.log.Error("ignoring a malformed op in a chunk", "owner", owner, "key", k, "error", err)
			}
		}
	}
}

// applyCommitLocked applies a commit record found by a load.
func (b *Backend) applyCommitLocked(owner, txid string, rev int64) {
	var w revisionWrite
	b.commitOpsLocked(owner, txid, &w)
	b.applyLocked(&w, rev)
}

// applyLocked applies a revision's changes to the store, one write per owner, and returns
// each owner's result.
func (b *Backend) applyLocked(w *revisionWrite, rev int64) map[string]store.Result {
	results := make(map[string]store.Result, len(w.updates))
	for owner, colls := range w.updates {
		b.owners[owner] = true
		updates := make([]store.Update, 0, len(colls))
		for _, u := range colls {
			updates = append(updates, *u)
		}
		res, err := b.st.Apply(owner, updates...)
		if err != nil {
			b.log.Error("could not apply etcd's revision to the store", "revision", rev, "owner", owner, "error", err)
			continue
		}
		results[owner] = res
	}
	return results
}

// setPresentLocked tells the store whether owner has a stream on any replica.
func (b *Backend) setPresentLocked(owner string) {
	present := len(b.present[owner]) > 0
	if !present {
		delete(b.present, owner)
	}
	if _, err := b.st.SetOwnerPresent(owner, present); err != nil {
		b.log.Error("could not record an owner's presence", "owner", owner, "error", err)
	}
}

const keptResults = 4096

func (b *Backend) recordLocked(rev int64, results map[string]store.Result) {
	if len(results) == 0 {
		return
	}
	b.results[rev] = results
	b.resRevs = append(b.resRevs, rev)
	if len(b.resRevs) > keptResults {
		delete(b.results, b.resRevs[0])
		b.resRevs = b.resRevs[1:]
	}
}

func (b *Backend) advanceLocked(rev int64) {
	if rev <= b.applied {
		return
	}
	b.applied = rev
	close(b.advanced)
	b.advanced = make(chan struct{})
}

// waitApplied waits until the store reflects etcd revision rev, and returns owner's result
// of that revision.
func (b *Backend) waitApplied(ctx context.Context, rev int64, owner string) (store.Result, error) {
	if err := b.waitRevision(ctx, rev); err != nil {
		return store.Result{}, fmt.Errorf("committed to etcd at revision %d, but this replica has applied only %d: %w", rev, b.Applied(), err)
	}
	b.mu.Lock()
	res, ok := b.results[rev][owner]
	b.mu.Unlock()
	if !ok {
		res.Revision = b.st.View().Revision()
	}
	return res, nil
}

// CatchUp waits until this replica has applied everything etcd had committed when it was
// called (one linearizable read of the current revision), for at most the request timeout:
// a stream opening here may come from another replica with versions this one has not applied
// yet. Cut off from etcd, it returns at once and the replica serves what it has.
func (b *Backend) CatchUp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if ok, _ := b.Ready(); !ok {
		return
	}
	current, err := b.currentRevision(ctx)
	if err != nil {
		return
	}
	if _, err := b.waitApplied(ctx, current, ""); err != nil {
		b.log.Warn("a stream opened before this replica caught up with etcd", "revision", current, "error", err)
	}
}

// currentRevision is etcd's current revision: any linearizable read returns it, and one key
// counted is the cheapest.
func (b *Backend) currentRevision(ctx context.Context) (int64, error) {
	resp, err := b.cli.Get(ctx, b.prefix+aliveKey(b.name), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}
