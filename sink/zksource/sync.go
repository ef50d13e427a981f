package zksource

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/mcpbridge/mcpbridge/sink/ownerstate"
	"github.com/mcpbridge/mcpbridge/store"
)

// syncer is the state of Run's goroutine, the only one that touches it: what the registry
// holds as last read, the ServiceEntries built from it, and the session it was read in.
type syncer struct {
	s     *Source
	conn  *zk.Conn
	state *ownerstate.State
	reg   registry

	session   int64     // the session the registry was last read whole in; 0: none yet
	full      bool      // a whole reading is owed: at start, after an expiry or a lost read
	expired   bool      // a session expired since the last whole reading
	connected bool      // the client had a session when the burst began
	served    bool      // a first whole reading was offered to the store
	readAt    time.Time // the last reading without a fault of the connection
	lastSync  time.Time // readAt, once the store holds what it read

	connects, expiries uint64
	storeFault         error
	retry              *time.Timer // a refused write tried again; nil when none is owed
}

func newSyncer(s *Source, conn *zk.Conn) *syncer {
	return &syncer{
		s:     s,
		conn:  conn,
		state: ownerstate.New(s.owner, s.opts.Store),
		reg:   newRegistry(s.opts.Name, s.opts.DubboRoot, s.opts.SpringRoot),
		full:  true,
	}
}

// run handles bursts of events until ctx ends.
func (y *syncer) run(ctx context.Context) {
	y.publish()
	var gathered <-chan time.Time // set while a burst's events gather
	// unreached says, once, that ZooKeeper was not reached in a session timeout's time.
	unreached := time.After(y.s.opts.SessionTimeout)
	for {
		var retry <-chan time.Time
		if y.retry != nil {
			retry = y.retry.C
		}
		select {
		case <-ctx.Done():
			if y.retry != nil {
				y.retry.Stop()
			}
			return
		case <-y.s.in.wake:
			if gathered == nil {
				gathered = time.After(debounce)
			}
		case <-gathered:
			gathered = nil
			y.burst()
		case <-retry:
			y.retry = nil
			y.burst()
		case <-unreached:
			if !y.served {
				y.s.log.Warn("zookeeper registry fault", "fault", y.connFault().Error())
			}
		}
	}
}

// burst handles what happened since the last one: session states first, then a whole reading
// if one is owed, else a reading of the znodes the events touched; then one write to the store.
func (y *syncer) burst() {
	paths, states := y.s.in.take()
	for _, st := range states {
		switch st {
		case zk.StateExpired:
			y.expiries++
			y.expired, y.full = true, true
		case zk.StateHasSession:
			y.connects++
		}
	}
	y.connected = y.conn.State() == zk.StateHasSession
	if !y.connected && len(paths) > 0 {
		// Their watches fired and are not set again until they are read: the session, if it
		// resumes, reads everything.
		y.full = true
	}
	if y.connected {
		if sid := y.conn.SessionID(); y.full || sid != y.session {
			y.readAll(sid)
		} else if len(paths) > 0 {
			y.readTouched(paths)
		}
	}
	if y.served {
		y.flush()
	}
	y.publish()
	if y.s.synced != nil {
		y.s.synced()
	}
}

// readAll reads the whole registry, setting every watch again: the first reading, and the one
// after a session expired (its watches went with it) or a read was lost.
func (y *syncer) readAll(sid int64) {
	r := &reader{conn: y.conn}
	y.reg.readDubbo(r, true, touched{root: true})
	y.reg.readSpring(r, true, touched{root: true})
	if r.lost.Load() {
		y.full = true
		return
	}
	y.session, y.full, y.expired = sid, false, false
	y.readAt = time.Now()
	if !y.served {
		y.served = true
		y.flush()
		y.publish() // and the write's outcome, before readiness says so
		close(y.s.ready)
	}
}

// readTouched reads again what the events touched, which re-arms their watches.
func (y *syncer) readTouched(paths map[string]struct{}) {
	dubbo, spring := y.reg.classify(paths)
	r := &reader{conn: y.conn}
	y.reg.readDubbo(r, false, dubbo)
	y.reg.readSpring(r, false, spring)
	if r.lost.Load() {
		y.full = true
		return
	}
	y.readAt = time.Now()
}

// flush writes what changed to the store. A refused write is tried again at the next burst,
// or after retryWrite when none comes. The faults of what was read are published first:
// whoever sees the store's new state (a test, an operator's status page) sees them too.
func (y *syncer) flush() {
	y.publish()
	for _, c := range y.reg.changes() {
		if c.enc == nil {
			y.state.Delete(serviceEntryKind.Collection, c.name)
		} else {
			y.state.Put(serviceEntryKind.Collection, *c.enc)
		}
	}
	if !y.state.Dirty() {
		y.lastSync = y.readAt // the store holds what was read
		return
	}
	res, err := y.state.Flush()
	if err != nil {
		y.storeFault = fmt.Errorf("the store refused the registry's state; the previous state is kept and the write tried again: %w", err)
		if y.retry == nil {
			y.retry = time.NewTimer(retryWrite)
		}
		return
	}
	y.storeFault = nil
	y.lastSync = y.readAt
	if y.retry != nil {
		y.retry.Stop()
		y.retry = nil
	}
	if res.Changed > 0 {
		services, instances := y.reg.served()
		y.s.log.Info("applied zookeeper registry", "services", services, "instances", instances,
			"changed", res.Changed, "revision", res.Revision)
	}
}

// publish hands the faults and counters to the Source's readers.
func (y *syncer) publish() {
	faults := y.reg.faults()
	if y.storeFault != nil {
		faults = append(faults, y.storeFault)
	}
	services, instances := y.reg.served()
	y.s.publish(y.connFault(), faults, y.served, Stats{
		Services:  services,
		Instances: instances,
		Connected: y.connected,
		Session:   y.conn.State().String(),
		Connects:  y.connects,
		Expiries:  y.expiries,
		LastSync:  y.lastSync,
	})
}

// connFault is the connection's fault: none while the registry read in the current session
// is being followed.
func (y *syncer) connFault() error {
	servers := strings.Join(y.s.opts.Servers, ",")
	switch {
	case y.connected && !y.full:
		return nil
	case !y.served:
		return &connFault{fmt.Sprintf("not connected to ZooKeeper (%s); nothing read yet", servers)}
	case y.expired:
		return &connFault{fmt.Sprintf("ZooKeeper session expired (%s); serving the last good state until a new session has read the registry again", servers)}
	}
	return &connFault{fmt.Sprintf("not connected to ZooKeeper (%s); serving the last good state", servers)}
}

// change is one resource to write: enc nil removes the name.
type change struct {
	name string
	enc  *store.Encoded
}
