package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/mcpbridge/mcpbridge/store"
)

// SetOwnerPresent records whether owner has a stream on this replica, without expiry.
func (b *Backend) SetOwnerPresent(owner string, present bool) (store.Result, error) {
	return b.SetOwnerPresence(owner, present, 0)
}

// SetOwnerPresence records whether owner has a stream on this replica. While it has one, the
// owner's lease (of TTL expiry; none for 0) is kept alive from here; once no replica keeps it
// alive for expiry, etcd deletes the owner's resources and every replica drops them. The
// owner counts as present while any replica has a stream of it.
func (b *Backend) SetOwnerPresence(owner string, present bool, expiry time.Duration) (store.Result, error) {
	if err := store.CheckOwner(owner); err != nil {
		return store.Result{}, err // every replica's store would refuse it
	}
	if err := b.reachable(); err != nil {
		if !present {
			// Not kept alive from here any more, whatever etcd hears: the session's renewal
			// puts back only the owners still tracked.
			b.leases.release(owner)
			b.session.track(owner, false)
		}
		return store.Result{}, err
	}
	ctx, cancel := context.WithTimeout(b.servingContext(), 2*b.timeout)
	defer cancel()
	key := b.prefix + presenceKey(owner, b.name)
	var rev int64
	if present {
		if expiry > 0 {
			if err := b.leases.hold(ctx, owner, expiry); err != nil {
				return store.Result{}, unavailable(err)
			}
		}
		resp, err := b.cli.Put(ctx, key, b.name, clientv3.WithLease(b.session.lease()))
		if err != nil {
			return store.Result{}, unavailable(err)
		}
		b.session.track(owner, true)
		rev = resp.Header.Revision
	} else {
		b.leases.release(owner)
		b.session.track(owner, false)
		resp, err := b.cli.Delete(ctx, key)
		if err != nil {
			return store.Result{}, unavailable(err)
		}
		rev = resp.Header.Revision
	}
	return b.waitApplied(ctx, rev, owner)
}

// Close ends this replica's session after its context ended: its presence keys go at once
// (its producers count as gone from here) and another replica may be elected ingester.
// Owner leases are let run out, not revoked: a producer that moves to another replica within
// its expiry keeps its resources.
func (b *Backend) Close() {
	b.leases.stopAll()
	if s := b.session.current(); s != nil {
		_ = s.Close()
	}
	if b.session.end != nil {
		b.session.end()
	}
}

// leases are the owner leases this replica keeps alive: one per owner with a stream here.
type leases struct {
	b    *Backend
	mu   sync.Mutex
	held map[string]*ownerLease
}

type ownerLease struct {
	id   clientv3.LeaseID
	stop context.CancelFunc
}

func (l *leases) init(b *Backend) {
	l.b = b
	l.held = map[string]*ownerLease{}
}

// of is the lease owner's resources are attached to: 0 when it has none here.
func (l *leases) of(owner string) clientv3.LeaseID {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ol := l.held[owner]; ol != nil {
		return ol.id
	}
	return 0
}

// hold finds the owner's lease in etcd, or grants one of TTL expiry, and keeps it alive
// until release. A lease still alive is reused: the owner's resources stay attached to it.
func (l *leases) hold(ctx context.Context, owner string, expiry time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[owner] != nil {
		return nil
	}
	id, err := l.find(ctx, owner, expiry)
	if err != nil {
		return err
	}
	kctx, stop := context.WithCancel(context.Background())
	ch, err := l.b.cli.KeepAlive(kctx, id)
	if err != nil {
		stop()
		return fmt.Errorf("keeping the lease of %q alive: %w", owner, err)
	}
	go func() {
		for range ch { // drained until stop, or until etcd lets the lease go
		}
	}()
	l.held[owner] = &ownerLease{id: id, stop: stop}
	return nil
}

// find returns the owner's live lease, or grants and records a new one.
func (l *leases) find(ctx context.Context, owner string, expiry time.Duration) (clientv3.LeaseID, error) {
	key := l.b.prefix + leaseKey(owner)
	for range maxAttempts {
		resp, err := l.b.cli.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		if len(resp.Kvs) > 0 {
			if n, err := strconv.ParseInt(string(resp.Kvs[0].Value), 16, 64); err == nil {
				ttl, err := l.b.cli.TimeToLive(ctx, clientv3.LeaseID(n))
				if err == nil && ttl.TTL > 0 {
					return clientv3.LeaseID(n), nil
				}
			}
		}
		seconds := int64((expiry + time.Second - 1) / time.Second)
		grant, err := l.b.cli.Grant(ctx, seconds)
		if err != nil {
			return 0, err
		}
		var cmp clientv3.Cmp
		if len(resp.Kvs) > 0 {
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		} else {
			cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		}
		txn, err := l.b.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, strconv.FormatInt(int64(grant.ID), 16), clientv3.WithLease(grant.ID))).Commit()
		if err != nil {
			return 0, err
		}
		if txn.Succeeded {
			return grant.ID, nil
		}
		_, _ = l.b.cli.Revoke(ctx, grant.ID) // another replica recorded one first: use it
	}
	return 0, fmt.Errorf("owner %q: could not settle its lease", owner)
}

// release stops keeping the owner's lease alive: it runs out after its TTL unless a replica
// holds it again.
func (l *leases) release(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ol := l.held[owner]; ol != nil {
		ol.stop()
		delete(l.held, owner)
	}
}

func (l *leases) stopAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for owner, ol := range l.held {
		ol.stop()
		delete(l.held, owner)
	}
}

// session is this replica's etcd session: the lease its presence keys hang on. When it is
// lost (etcd unreachable for longer than its TTL), a new one is made and the presence keys of
// the owners with a stream here are put again.
type session struct {
	b  *Backend
	mu sync.Mutex
	s  *concurrency.Session
	// life is the sessions' own context: not the serving one, so that Close can still
	// revoke the lease once serving ended.
	life   context.Context
	end    context.CancelFunc
	owners map[string]bool
}

func (s *session) init(b *Backend) {
	s.b = b
	s.owners = map[string]bool{}
}

func (s *session) newSession() (*concurrency.Session, error) {
	return concurrency.NewSession(s.b.cli, concurrency.WithTTL(int((s.b.sessionTTL+time.Second-1)/time.Second)), concurrency.WithContext(s.life))
}

func (s *session) start(ctx context.Context) error {
	s.life, s.end = context.WithCancel(context.Background())
	sess, err := s.newSession()
	if err != nil {
		s.end()
		return fmt.Errorf("etcd backend: session: %w", err)
	}
	if err := s.claimName(ctx, sess); err != nil {
		sess.Close()
		s.end()
		return err
	}
	s.mu.Lock()
	s.s = sess
	s.mu.Unlock()
	go s.renew(ctx, sess)
	return nil
}

// ErrReplicaNameTaken is a replica name held by another live replica: two replicas of one
// name would share presence and election keys (store.etcd.replica must be unique).
var ErrReplicaNameTaken = errors.New("store.etcd.replica: the name is held by another live replica")

// claimName puts this replica's alive key on the session's lease, unless another live session
// holds it. A holder's lease that runs out within its TTL (a replica killed without closing
// its session, restarting under its own name) is waited for; one still held after that is a
// second live replica of the same name: ErrReplicaNameTaken, naming the holder.
func (s *session) claimName(ctx context.Context, sess *concurrency.Session) error {
	key := s.b.prefix + aliveKey(s.b.name)
	value := s.b.alive
	deadline := time.Now().Add(s.b.sessionTTL + s.b.timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, s.b.timeout)
		resp, err := s.b.cli.Txn(pctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(sess.Lease()))).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("etcd backend: session: %w", err)
		}
		if resp.Succeeded {
			return nil
		}
		var holder string
		var rev int64
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			holder, rev = string(kvs[0].Value), kvs[0].ModRevision
			if clientv3.LeaseID(kvs[0].Lease) == sess.Lease() {
				return nil // ours already
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %q is held by %s; give each replica a name of its own", ErrReplicaNameTaken, s.b.name, holder)
		}
		s.b.log.Warn("this replica's name is held by another session; waiting for it to expire", "holder", holder, "until", deadline.Format(time.RFC3339))
		// Wait for the key's deletion (its lease running out), at most until the deadline.
		wctx, cancel := context.WithDeadline(ctx, deadline)
		for wr := range s.b.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
			if slices.ContainsFunc(wr.Events, func(e *clientv3.Event) bool { return e.Type == clientv3.EventTypeDelete }) {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// renew makes a new session when one ends while ctx lives.
func (s *session) renew(ctx context.Context, sess *concurrency.Session) {
	for {
		select {
		case <-ctx.Done():
			s.b.leases.stopAll()
			return
		case <-sess.Done():
		}
		s.b.setNotReady("etcd unreachable: this replica's session lease was lost; serving the last state it applied")
		for ctx.Err() == nil {
			next, err := s.newSession()
			if err == nil {
				sess = next
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			continue
		}
		if err := s.markAlive(ctx, sess); err != nil {
			s.b.log.Warn("could not mark this replica alive on its new session", "error", err)
		}
		s.b.setNotReady("")
		s.mu.Lock()
		s.s = sess
		owners := make([]string, 0, len(s.owners))
		for o := range s.owners {
			owners = append(owners, o)
		}
		s.mu.Unlock()
		for _, o := range owners {
			pctx, cancel := context.WithTimeout(ctx, s.b.timeout)
			_, err := s.b.cli.Put(pctx, s.b.prefix+presenceKey(o, s.b.name), s.b.name, clientv3.WithLease(sess.Lease()))
			cancel()
			if err != nil {
				s.b.log.Warn("could not record a producer's presence again", "owner", o, "error", err)
			}
		}
	}
}

// markAlive puts this replica's alive key on the session's lease: large writes commit only
// while it holds the lease their chunks name.
func (s *session) markAlive(ctx context.Context, sess *concurrency.Session) error {
	pctx, cancel := context.WithTimeout(ctx, s.b.timeout)
	defer cancel()
	_, err := s.b.cli.Put(pctx, s.b.prefix+aliveKey(s.b.name), s.b.alive, clientv3.WithLease(sess.Lease()))
	return err
}

func (s *session) current() *concurrency.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s
}

func (s *session) lease() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return 0
	}
	return s.s.Lease()
}

func (s *session) track(owner string, present bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if present {
		s.owners[owner] = true
	} else {
		delete(s.owners, owner)
	}
}
