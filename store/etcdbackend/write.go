package etcdbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

var (
	_ store.ExpiringWriter = (*Backend)(nil)
	_ store.FencedWriter   = (*Backend)(nil)
)

// Apply commits updates for owner to etcd and returns once this replica applied them.
func (b *Backend) Apply(owner string, updates ...store.Update) (store.Result, error) {
	return b.ApplyWithin(owner, 0, updates...)
}

// ApplyWithin is Apply within an owner's quota (store.Store.ApplyWithin).
func (b *Backend) ApplyWithin(owner string, limit int, updates ...store.Update) (store.Result, error) {
	return b.write(owner, limit, false, updates, nil)
}

// OwnerFence is the owner's write sequence as this replica has applied it (store.FencedWriter).
func (b *Backend) OwnerFence(owner string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seqs[owner]
}

// ApplyFenced is ApplyWithin committed only while the owner's sequence is fence, the one read
// when the producer's message arrived: a write that finds the owner written since, or loses
// the race to a write of it, is abandoned (store.FencedWriter), never retried from the old
// message over the newer write.
func (b *Backend) ApplyFenced(owner string, fence int64, limit int, updates ...store.Update) (store.Result, error) {
	return b.write(owner, limit, false, updates, &fence)
}

// errFenced is a fenced write that found its owner written since its message arrived.
var errFenced = errors.New("a newer write of this producer was committed (on another replica) after this message arrived; it is not applied over it: send your current state again")

// ReplaceOwner makes state the owner's whole state (store.Store.ReplaceOwner).
func (b *Backend) ReplaceOwner(owner string, state map[string][]*mcpapi.Resource) (store.Result, error) {
	updates := make([]store.Update, 0, len(state))
	for coll, rs := range state {
		updates = append(updates, store.Update{Collection: coll, Full: true, Resources: rs})
	}
	return b.write(owner, 0, true, updates, nil)
}

// ReplaceOwnerEncoded is ReplaceOwner for encoded resources.
func (b *Backend) ReplaceOwnerEncoded(owner string, state map[string][]store.Encoded) (store.Result, error) {
	updates := make([]store.Update, 0, len(state))
	for coll, es := range state {
		updates = append(updates, store.Update{Collection: coll, Full: true, Encoded: es})
	}
	return b.write(owner, 0, true, updates, nil)
}

// maxAttempts bounds the retries of a write that lost a race with another replica writing for
// the same owner (the write's deadline bounds them too). Between attempts the write backs off
// for a random time that doubles up to maxBackoff: replicas writing for one owner at once
// would otherwise retry in lockstep and lose to each other again, more so on a loaded host.
const (
	maxAttempts  = 32
	firstBackoff = time.Millisecond
	maxBackoff   = 100 * time.Millisecond
)

func (b *Backend) write(owner string, limit int, replaceAll bool, updates []store.Update, fence *int64) (store.Result, error) {
	if err := store.CheckOwner(owner); err != nil {
		return store.Result{}, err
	}
	prepared, err := b.st.Prepare(updates...)
	if err != nil {
		return store.Result{}, err
	}
	// Fail fast while etcd does not answer: an Unavailable now, not after the timeouts.
	if err := b.reachable(); err != nil {
		return store.Result{}, err
	}
	unlock := b.lockOwner(owner)
	defer unlock()
	ctx, cancel := context.WithTimeout(b.servingContext(), 3*b.timeout)
	defer cancel()
	backoff := firstBackoff
	for range maxAttempts {
		res, retry, err := b.attempt(ctx, owner, limit, replaceAll, prepared, fence)
		if !retry {
			return res, err
		}
		select {
		case <-ctx.Done():
			return store.Result{}, &store.UnavailableError{Err: fmt.Errorf("owner %q: concurrent writes of the same owner on other replicas: %w", owner, ctx.Err())}
		case <-time.After(mathrand.N(backoff) + backoff/2):
		}
		backoff = min(2*backoff, maxBackoff)
	}
	return store.Result{}, &store.UnavailableError{Err: fmt.Errorf("owner %q: %d attempts lost to concurrent writes of the same owner on other replicas", owner, maxAttempts)}
}

func (b *Backend) lockOwner(owner string) func() {
	m, _ := b.ownerLocks.LoadOrStore(owner, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// attempt reads the owner's sequence, waits for this replica to reflect it, computes the
// write's ops against the owner's state and commits them if nobody wrote for the owner
// meanwhile. retry says the commit lost such a race.
func (b *Backend) attempt(ctx context.Context, owner string, limit int, replaceAll bool, updates []store.Update, fence *int64) (store.Result, bool, error) {
	seq, pending, rev, err := b.ownerState(ctx, owner)
	if err != nil {
		return store.Result{}, false, unavailable(err)
	}
	if fence != nil && seq != *fence {
		return store.Result{}, false, &store.UnavailableError{Err: errFenced}
	}
	if len(pending) > 0 {
		// A large write of this owner is committed but not yet copied to its keys (its
		// replica died, or is still at it): finish it first; every later write builds on it.
		for _, txid := range pending {
			moved, err := b.materializeAt(ctx, owner, txid, nil)
			if err != nil {
				return store.Result{}, false, unavailable(err)
			}
			if fence != nil {
				if moved == 0 {
					// Someone else finished it: whether a newer write came too is unknown.
					return store.Result{}, false, &store.UnavailableError{Err: errFenced}
				}
				// Finishing an earlier write, applied already, moved the sequence: that is
				// no newer write.
				*fence = moved
			}
		}
		return store.Result{}, true, nil
	}
	if _, err := b.waitApplied(ctx, rev, owner); err != nil {
		return store.Result{}, false, unavailable(err)
	}
	view := b.st.View()
	plan, err := store.NewPlan(view, owner, updates, replaceAll)
	if err != nil {
		return store.Result{}, false, err
	}
	if err := plan.WithinLimit(limit); err != nil {
		return store.Result{}, false, err
	}
	if plan.Changes() == 0 {
		return store.Result{Revision: view.Revision()}, false, nil
	}
	ops := opsOf(plan)
	lease := b.leases.of(owner)
	var committed int64
	var txid string
	if b.fits(ops) {
		committed, err = b.commitSmall(ctx, owner, seq, lease, ops)
	} else {
		txid, committed, err = b.commitChunked(ctx, owner, seq, lease, ops)
	}
	if errors.Is(err, errLostRace) {
		if fence != nil {
			return store.Result{}, false, &store.UnavailableError{Err: errFenced}
		}
		return store.Result{}, true, nil
	}
	if err != nil {
		return store.Result{}, false, unavailable(err)
	}
	res, err := b.waitApplied(ctx, committed, owner)
	if err != nil {
		return store.Result{}, false, unavailable(err)
	}
	if txid != "" {
		moved, err := b.materializeAt(ctx, owner, txid, ops)
		if err != nil {
			// Committed and applied everywhere; the next write of the owner finishes it.
			b.log.Warn("a committed write is not yet copied to its keys; the owner's next write will", "owner", owner, "txid", txid, "error", err)
		} else if moved > 0 {
			// The owner's sequence moved with it: the producer's next message is fenced by
			// it (OwnerFence), so it is applied here before the ACK.
			_ = b.waitRevision(ctx, moved)
		}
	}
	return res, false, nil
}

var errLostRace = errors.New("another replica wrote for the owner meanwhile")

func unavailable(err error) error {
	var ue *store.UnavailableError
	if errors.As(err, &ue) {
		return err
	}
	return &store.UnavailableError{Err: err}
}

// ownerState reads, at one revision, the owner's sequence key's mod revision (0: none) and
// its commit records not yet materialized.
func (b *Backend) ownerState(ctx context.Context, owner string) (seq int64, pending []string, rev int64, err error) {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	resp, err := b.cli.Txn(rctx).Then(
		clientv3.OpGet(b.prefix+sequenceKey(owner)),
		clientv3.OpGet(b.prefix+ownerCommitsPrefix(owner), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return 0, nil, 0, err
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		seq = kvs[0].ModRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		rel := string(kv.Key[len(b.prefix):])
		if _, txid, err := pairOf(rel, commitPrefix); err == nil {
			pending = append(pending, txid)
		}
	}
	return seq, pending, resp.Header.Revision, nil
}

// opsOf is a write's plan as puts and deletions of the owner's r/ keys: the store's write
// rules (store.Plan) decide what changes; this only names the keys.
func opsOf(p *store.Plan) []op {
	ops := make([]op, 0, p.Changes())
	for _, c := range p.Collections {
		for _, e := range c.Puts {
			ops = append(ops, op{key: resourceKey(p.Owner, c.Collection, e.Name), value: e.ResourceBytes()}) // whole: other replicas read it
		}
		for _, name := range c.Deletes {
			ops = append(ops, op{del: true, key: resourceKey(p.Owner, c.Collection, name)})
		}
	}
	return ops
}

func (b *Backend) fits(ops []op) bool {
	if len(ops) > b.maxOps {
		return false
	}
	size := 0
	for _, o := range ops {
		size += opSize(o)
	}
	return size <= b.maxBytes
}

// etcdOp is an op as an etcd request, attached to lease when the owner has one (a lease of
// 0 is none).
func (b *Backend) etcdOp(o op, lease clientv3.LeaseID) clientv3.Op {
	if o.del {
		return clientv3.OpDelete(b.prefix + o.key)
	}
	return clientv3.OpPut(b.prefix+o.key, string(o.value), clientv3.WithLease(lease))
}

func (b *Backend) sequencePut(owner string, lease clientv3.LeaseID) clientv3.Op {
	v := b.name + " " + time.Now().UTC().Format(time.RFC3339Nano)
	return clientv3.OpPut(b.prefix+sequenceKey(owner), v, clientv3.WithLease(lease))
}

// commitSmall commits ops in one transaction, if the owner's sequence is still seq.
func (b *Backend) commitSmall(ctx context.Context, owner string, seq int64, lease clientv3.LeaseID, ops []op) (int64, error) {
	then := make([]clientv3.Op, 0, len(ops)+1)
	for _, o := range ops {
		then = append(then, b.etcdOp(o, lease))
	}
	then = append(then, b.sequencePut(owner, lease))
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	resp, err := b.cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(b.prefix+sequenceKey(owner)), "=", seq)).Then(then...).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, errLostRace
	}
	return resp.Header.Revision, nil
}

// commitChunked writes ops as chunks no replica applies yet, then the commit record that
// makes every replica apply them as one write, if the owner's sequence is still seq.
func (b *Backend) commitChunked(ctx context.Context, owner string, seq int64, lease clientv3.LeaseID, ops []op) (string, int64, error) {
	session := b.session.lease()
	if session == 0 {
		return "", 0, errors.New("no etcd session yet")
	}
	txid := newTxID(session)
	var chunk []byte
	n := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, b.timeout)
		defer cancel()
		_, err := b.cli.Put(rctx, b.prefix+chunkKey(owner, txid, n), string(chunk))
		n++
		chunk = chunk[:0]
		return err
	}
	for _, o := range ops {
		if len(chunk) > 0 && len(chunk)+opSize(o) > b.maxBytes {
			if err := flush(); err != nil {
				b.dropChunks(owner, txid)
				return "", 0, err
			}
		}
		chunk = appendOp(chunk, o)
	}
	if err := flush(); err != nil {
		b.dropChunks(owner, txid)
		return "", 0, err
	}
	record := clientv3.OpPut(b.prefix+commitKey(owner, txid), fmt.Sprint(n), clientv3.WithLease(lease))
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	// The record is written only while this replica's session is the one the chunks name
	// (so chunks of a lost session are never committed later, and may be collected).
	alive := b.prefix + aliveKey(b.name)
	resp, err := b.cli.Txn(rctx).If(
		clientv3.Compare(clientv3.ModRevision(b.prefix+sequenceKey(owner)), "=", seq),
		clientv3.Compare(clientv3.LeaseValue(alive), "=", session),
	).Then(record, b.sequencePut(owner, lease)).Else(clientv3.OpGet(alive)).Commit()
	if err != nil {
		// Committed or not, nobody knows: the chunks stay. If no record ever names them, the
		// collection of a dead session's chunks deletes them (gc.go).
		return "", 0, err
	}
	if !resp.Succeeded {
		b.dropChunks(owner, txid)
		// Which compare failed: this replica's session (no retry can succeed until it is
		// renewed), or another replica's write of the owner (retry on the newer state).
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != session {
			return "", 0, &store.UnavailableError{Err: errors.New("this replica's etcd session changed during the write")}
		}
		return "", 0, errLostRace
	}
	return txid, resp.Header.Revision, nil
}

func (b *Backend) dropChunks(owner, txid string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	if _, err := b.cli.Delete(ctx, b.prefix+chunksPrefix(owner, txid), clientv3.WithPrefix()); err != nil {
		b.log.Warn("could not delete the chunks of an abandoned write", "txid", txid, "error", err)
	}
}

// materializeAt copies a committed chunked write to the owner's r/ keys, in transactions that
// each hold only while the commit record exists (so a slow copier cannot overwrite a later
// write), then deletes the record and its chunks and moves the owner's sequence. Replicas
// applying the copies find them equal to what they hold: nothing changes for them. ops are the
// write's, when the caller has them; else they are read from the chunks.
// It returns the revision at which it moved the owner's sequence (0 when someone else
// finished it).
func (b *Backend) materializeAt(ctx context.Context, owner, txid string, ops []op) (int64, error) {
	record := b.prefix + commitKey(owner, txid)
	if ops == nil {
		rctx, cancel := context.WithTimeout(ctx, b.timeout)
		resp, err := b.cli.Get(rctx, b.prefix+chunksPrefix(owner, txid), clientv3.WithPrefix())
		cancel()
		if err != nil {
			return 0, err
		}
		for _, kv := range resp.Kvs {
			chunkOps, err := decodeChunk(kv.Value)
			if err != nil {
				return 0, fmt.Errorf("commit %s of %q: %w", txid, owner, err)
			}
			ops = append(ops, chunkOps...)
		}
	}
	lease := b.leases.of(owner)
	exists := clientv3.Compare(clientv3.CreateRevision(record), ">", 0)
	for start := 0; start < len(ops); {
		end, size := start, 0
		for end < len(ops) && end-start < b.maxOps && (end == start || size+opSize(ops[end]) <= b.maxBytes) {
			size += opSize(ops[end])
			end++
		}
		batch := make([]clientv3.Op, 0, end-start)
		for _, o := range ops[start:end] {
			batch = append(batch, b.etcdOp(o, lease))
		}
		rctx, cancel := context.WithTimeout(ctx, b.timeout)
		resp, err := b.cli.Txn(rctx).If(exists).Then(batch...).Commit()
		cancel()
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, nil // someone else finished it
		}
		start = end
	}
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	resp, err := b.cli.Txn(rctx).If(exists).Then(
		clientv3.OpDelete(record),
		clientv3.OpDelete(b.prefix+chunksPrefix(owner, txid), clientv3.WithPrefix()),
		b.sequencePut(owner, lease),
	).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, nil
	}
	return resp.Header.Revision, nil
}

// newTxID is the writer's session lease in hex, then random bytes.
func newTxID(session clientv3.LeaseID) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(int64(session), 16) + "-" + hex.EncodeToString(b[:])
}
