package limits

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
)

// Conns bounds the connections of the bridge's listeners: in total, and per peer IP address
// (a connection is counted before any handshake, so its peer is known only by its address).
// A connection over a bound is closed as soon as it is accepted, counted in
// mcpbridge_limit_refusals_total{limit="connections"} or {limit="connections_per_peer"}, and
// logged at most once a second; the listener goes on accepting. Listeners wrapped by one
// Conns share its counts (both ports). It is safe for concurrent use.
type Conns struct {
	total, perPeer int
	refusals       *Refuser
	log            *slog.Logger

	mu     sync.Mutex
	open   int
	byPeer map[string]int
}

// NewConns returns connection bounds (0: none) counting refusals with r.
func NewConns(total, perPeer int, r *Refuser, log *slog.Logger) *Conns {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Conns{total: total, perPeer: perPeer, refusals: r, log: log.With("component", "limits"), byPeer: map[string]int{}}
}

// Listen wraps a listener in the bounds.
func (c *Conns) Listen(l net.Listener) net.Listener { return &limitedListener{Listener: l, c: c} }

// Open is the connections open now, for tests.
func (c *Conns) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

type limitedListener struct {
	net.Listener
	c *Conns
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := hostOf(conn.RemoteAddr())
		if err := l.c.acquire(peer); err != nil {
			conn.Close()
			continue
		}
		return &countedConn{Conn: conn, c: l.c, peer: peer}, nil
	}
}

var errOverConnections = errors.New("over a connection limit")

func (c *Conns) acquire(peer string) error {
	c.mu.Lock()
	open, mine := c.open, c.byPeer[peer]
	overTotal := c.total > 0 && open >= c.total
	overPeer := c.perPeer > 0 && mine >= c.perPeer
	if !overTotal && !overPeer {
		c.open++
		c.byPeer[peer]++
	}
	c.mu.Unlock()
	switch {
	case overTotal:
		c.refusals.Refuse(c.log, Connections, fmt.Sprintf("limits.connections: %d connections are open, the limit; a connection of %s was closed", open, peer))
		return errOverConnections
	case overPeer:
		c.refusals.Refuse(c.log, ConnectionsPerPeer, fmt.Sprintf("limits.connections_per_peer: %s has %d connections open, the limit; another was closed", peer, mine))
		return errOverConnections
	}
	return nil
}

func (c *Conns) release(peer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.byPeer[peer]--; c.byPeer[peer] <= 0 {
		delete(c.byPeer, peer)
	}
}

// countedConn gives its slot back when closed, once.
type countedConn struct {
	net.Conn
	c    *Conns
	peer string
	once sync.Once
}

func (cc *countedConn) Close() error {
	err := cc.Conn.Close()
	cc.once.Do(func() { cc.c.release(cc.peer) })
	return err
}

// hostOf is an address without its port.
func hostOf(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}
