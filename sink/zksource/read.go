package zksource

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"
)

// readers is how many reads are in flight at once. go-zookeeper sends requests from many
// goroutines on its one connection, in order, and the server answers them in order: the
// reads of a registry of thousands of services are latency-bound, not CPU-bound.
const readers = 32

// errLost is a read that failed because the connection or the session was lost: what it
// would have read keeps its last good state, and the next session reads everything again.
var errLost = errors.New("connection to ZooKeeper lost")

// reader reads znodes and sets watches on them. Once a read is lost, the rest of the burst's
// reads give up at once: without a connection they would each wait for go-zookeeper to give
// up on a reconnection attempt.
type reader struct {
	conn *zk.Conn
	lost atomic.Bool
}

// children lists a znode's children and watches them. A znode that does not exist has none,
// and is watched until it is created (an exists watch: a children watch cannot be set on a
// missing znode).
func (r *reader) children(p string) (kids []string, exists bool, err error) {
	for range 3 { // created or deleted between the two reads: read again
		if r.lost.Load() {
			return nil, false, errLost
		}
		kids, _, _, err := r.conn.ChildrenW(p)
		if err == nil {
			return kids, true, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, false, r.fail(p, err)
		}
		ok, _, _, err := r.conn.ExistsW(p)
		if err != nil {
			return nil, false, r.fail(p, err)
		}
		if !ok {
			return nil, false, nil
		}
	}
	return nil, false, fmt.Errorf("%s: created and deleted while being read; read again at its next change", p)
}

// data reads a znode's data and watches it; a znode that does not exist reads as absent
// (its parent's children watch says when one is created).
func (r *reader) data(p string) (b []byte, exists bool, err error) {
	if r.lost.Load() {
		return nil, false, errLost
	}
	b, _, _, err = r.conn.GetW(p)
	switch {
	case err == nil:
		return b, true, nil
	case errors.Is(err, zk.ErrNoNode):
		return nil, false, nil
	}
	return nil, false, r.fail(p, err)
}

// fail classifies a read's error: a lost connection or session is errLost, anything else
// (no permission, a server error) is a fault of the znode.
func (r *reader) fail(p string, err error) error {
	switch {
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrSessionExpired), errors.Is(err, zk.ErrSessionMoved),
		errors.Is(err, zk.ErrClosing):
		r.lost.Store(true)
		return errLost
	}
	return fmt.Errorf("reading %s: %w", p, err)
}

// each calls f(0) … f(n-1) on up to readers goroutines and returns when all have returned.
func each(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, readers) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}
