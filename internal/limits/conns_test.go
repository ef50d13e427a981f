package limits

import (
	"net"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
)

// acceptAll accepts on l until it closes, and closes each connection when its client does,
// as a server does.
func acceptAll(t *testing.T, l net.Listener) {
	t.Helper()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				c.Read(make([]byte, 1)) // until the client closes
				c.Close()
			}()
		}
	}()
}

// dialFrom opens a connection from a loopback source address and reports whether the server
// kept it (a closed one reads EOF at once).
func dialFrom(t *testing.T, addr, from string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	kept := err != nil && (errorAs(err, &ne) && ne.Timeout())
	c.SetReadDeadline(time.Time{})
	return c, kept
}

func errorAs(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

// Connections over the per-peer bound are closed at once and counted, another peer's are
// not; over the total bound every peer's are; a closed connection gives its slot back.
func TestConnsPerPeerAndTotal(t *testing.T) {
	m := metrics.New()
	c := NewConns(3, 2, NewRefuser(m), nil)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := c.Listen(raw)
	t.Cleanup(func() { l.Close() })
	acceptAll(t, l)
	addr := raw.Addr().String()

	a1, ok1 := dialFrom(t, addr, "127.0.0.1")
	_, ok2 := dialFrom(t, addr, "127.0.0.1")
	if !ok1 || !ok2 {
		t.Fatal("the first two connections of a peer were closed")
	}
	if _, ok := dialFrom(t, addr, "127.0.0.1"); ok {
		t.Fatal("a third connection of one peer was kept (connections_per_peer 2)")
	}
	if _, ok := dialFrom(t, addr, "127.0.0.2"); !ok {
		t.Fatal("another peer's connection was closed")
	}
	if _, ok := dialFrom(t, addr, "127.0.0.3"); ok {
		t.Fatal("a fourth connection was kept (connections 3)")
	}
	s := &server{metrics: m}
	if got := s.refusals(t, ConnectionsPerPeer); got != 1 {
		t.Errorf("connections_per_peer refusals %v, want 1", got)
	}
	if got := s.refusals(t, Connections); got != 1 {
		t.Errorf("connections refusals %v, want 1", got)
	}
	a1.Close()
	deadline := time.Now().Add(2 * time.Second)
	for c.Open() > 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := dialFrom(t, addr, "127.0.0.3"); !ok {
		t.Fatal("a slot given back was not taken again")
	}
}
