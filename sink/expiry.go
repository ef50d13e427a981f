package sink

import (
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mcpbridge/mcpbridge/store"
)

// presence counts each owner's open streams and, once an owner has none, arms a timer that
// deletes its resources after the expiry. A timer per absent owner, not a sweep: nothing runs
// while everyone is connected or nobody's expiry is due. A writer that expires owners itself
// (store.ExpiringWriter: the etcd backend's leases, which every replica honours) is told the
// expiry instead, and no timer is armed here.
type presence struct {
	store  store.Writer
	expiry time.Duration // 0: never
	// anonymousExpiry is the expiry of owners named only by their IP address (0: expiry).
	anonymousExpiry time.Duration
	log             *slog.Logger

	// mu also covers the deletion itself, so that a producer that reconnects while its
	// resources are being deleted writes its new state only after the deletion.
	mu      sync.Mutex
	owners  map[string]*ownerPresence
	stopped bool
	done    chan struct{} // closed by stop: record's retries end
}

type ownerPresence struct {
	streams int
	expire  *time.Timer // armed while streams == 0
	// armed counts expiries armed; a timer that fires knows it is the current one by it.
	armed uint64
	// want is the presence to record, and applying tells that a goroutine records it
	// (record): with a writer behind a network (store.ExpiringWriter), never under mu.
	want, applying bool
}

func newPresence(st store.Writer, expiry, anonymousExpiry time.Duration, log *slog.Logger) *presence {
	return &presence{store: st, expiry: expiry, anonymousExpiry: anonymousExpiry, log: log, owners: map[string]*ownerPresence{}, done: make(chan struct{})}
}

// expiryOf is how long owner's resources outlive its last stream (0: for ever). A producer
// known only by its IP address cannot be told from the next one behind the same address, nor
// will anyone come back under its name once the address moves: it gets the anonymous expiry,
// or the general one when that is shorter.
func (p *presence) expiryOf(owner string) time.Duration {
	if !strings.HasPrefix(owner, ipPrefix) || p.anonymousExpiry <= 0 {
		return p.expiry
	}
	if p.expiry > 0 && p.expiry < p.anonymousExpiry {
		return p.expiry
	}
	return p.anonymousExpiry
}

// open records a stream of owner and cancels a pending expiry.
func (p *presence) open(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op := p.owners[owner]
	if op == nil {
		op = &ownerPresence{}
		p.owners[owner] = op
	}
	if op.streams++; op.streams == 1 {
		p.present(owner, op, true)
	}
	if op.expire != nil {
		op.expire.Stop() // if it already fired, expire sees it was superseded and does nothing
		op.expire = nil
		p.log.Info("producer reconnected before its expiry; keeping its resources", "owner", owner)
	}
}

// close records the end of a stream of owner and, for its last stream, arms the expiry.
func (p *presence) close(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op := p.owners[owner]
	if op == nil {
		return
	}
	if op.streams--; op.streams > 0 {
		return
	}
	p.present(owner, op, false)
	expiry := p.expiryOf(owner)
	if _, itself := p.store.(store.ExpiringWriter); expiry <= 0 || p.stopped || itself {
		if !op.applying {
			delete(p.owners, owner) // nothing to remember about an owner without streams
		}
		return
	}
	op.armed++
	armed := op.armed
	op.expire = time.AfterFunc(expiry, func() { p.expire(owner, op, armed) })
}

// present records whether the owner has a stream; mu is held. The in-memory store takes it
// at once. A writer behind a network (store.ExpiringWriter: etcd) takes it on a goroutine of
// the owner's, so that no stream's opening requests wait for etcd and no lock shared by
// every producer is held across a network call; it records the latest wish, in order, and
// tries again while etcd does not answer.
func (p *presence) present(owner string, op *ownerPresence, present bool) {
	ew, ok := p.store.(store.ExpiringWriter)
	if !ok {
		p.setPresent(owner, present)
		return
	}
	op.want = present
	if !op.applying {
		op.applying = true
		go p.record(ew, owner, op)
	}
}

// record records op.want until what it recorded is still the wish, then lets the owner go if
// it has no stream left.
func (p *presence) record(ew store.ExpiringWriter, owner string, op *ownerPresence) {
	backoff := 100 * time.Millisecond
	for {
		p.mu.Lock()
		want, stopped := op.want, p.stopped
		p.mu.Unlock()
		var err error
		if !stopped {
			var res store.Result
			res, err = ew.SetOwnerPresence(owner, want, p.expiryOf(owner))
			p.logPresence(owner, want, res, err)
		}
		p.mu.Lock()
		if stopped || err == nil && op.want == want {
			op.applying = false
			if op.streams == 0 && op.expire == nil && p.owners[owner] == op {
				delete(p.owners, owner)
			}
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		if err != nil {
			select {
			case <-time.After(backoff):
			case <-p.done:
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// setPresent tells the store whether the owner has a stream: a present owner's copies win
// conflicts over an absent one's, so a producer that went away never shadows a live one.
func (p *presence) setPresent(owner string, present bool) {
	res, err := p.store.SetOwnerPresent(owner, present)
	p.logPresence(owner, present, res, err)
}

func (p *presence) logPresence(owner string, present bool, res store.Result, err error) {
	if err != nil {
		p.log.Warn("could not record the producer's presence", "owner", owner, "present", present, "error", err)
		return
	}
	if res.Changed > 0 {
		p.log.Info("producer presence changed which copies are served", "owner", owner, "present", present,
			"changed", res.Changed, "collections", res.Collections)
	}
}

// expire deletes owner's resources if the expiry that fired is still the owner's armed one.
func (p *presence) expire(owner string, op *ownerPresence, armed uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.owners[owner] != op || op.expire == nil || op.armed != armed {
		return // the owner reconnected (and perhaps left again), or the sink is stopping
	}
	delete(p.owners, owner)
	res, err := p.store.ReplaceOwner(owner, nil)
	if err != nil {
		// ReplaceOwner(owner, nil) validates nothing; an error here is the store's.
		p.log.Error("could not delete an expired producer's resources", "owner", owner, "error", err)
		return
	}
	p.log.Info("producer expired: no stream for the expiry; deleted its resources",
		"owner", owner, "expiry", p.expiryOf(owner), "count", res.Changed, "collections", res.Collections)
}

// stop disarms every expiry; resources of absent producers stay as they are.
func (p *presence) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		close(p.done)
	}
	p.stopped = true
	for _, op := range p.owners {
		if op.expire != nil {
			op.expire.Stop()
			op.expire = nil
		}
	}
}
