package zktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Dialer sits between a client under test and the server: it remembers the session the
// server last granted on a connection it dialled (go-zookeeper keeps the session's password
// to itself, and ExpireSession needs it), and it can cut the client off, as a network
// partition would. Give its Dial to the client (zk.WithDialer). It is safe for concurrent use.
type Dialer struct {
	mu      sync.Mutex
	blocked bool
	conns   map[*recordingConn]struct{}
	session Session
}

// Session is a session the server granted: its ID and password.
type Session struct {
	ID       int64
	Password []byte
}

// NewDialer returns a Dialer that lets connections through.
func NewDialer() *Dialer { return &Dialer{conns: map[*recordingConn]struct{}{}} }

// Dial dials the server, unless the Dialer is blocked; it has zk.Dialer's signature.
func (d *Dialer) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	blocked := d.blocked
	d.mu.Unlock()
	if blocked {
		return nil, fmt.Errorf("dial %s: cut off by the test", address)
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	rc := &recordingConn{Conn: c, d: d}
	d.mu.Lock()
	d.conns[rc] = struct{}{}
	d.mu.Unlock()
	return rc, nil
}

// Session is the session the server granted last, on any connection this Dialer made; the
// zero Session before any.
func (d *Dialer) Session() Session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Session{ID: d.session.ID, Password: append([]byte(nil), d.session.Password...)}
}

// Cut closes the connections this Dialer made and refuses new ones until Restore: the client
// is cut off from the server, and its session expires if that lasts longer than its timeout.
func (d *Dialer) Cut() {
	d.mu.Lock()
	d.blocked = true
	conns := make([]*recordingConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Restore lets the client dial again.
func (d *Dialer) Restore() {
	d.mu.Lock()
	d.blocked = false
	d.mu.Unlock()
}

// recordingConn reads the server's first frame, the connect response, as the client reads it.
type recordingConn struct {
	net.Conn
	d *Dialer

	mu    sync.Mutex
	first []byte // what was read until the connect response was whole
	done  bool
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.record(p[:n])
	}
	return n, err
}

func (c *recordingConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
}

func (c *recordingConn) record(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.first = append(c.first, b...)
	if len(c.first) < 4 {
		return
	}
	size := int(binary.BigEndian.Uint32(c.first))
	if len(c.first) < 4+size {
		return
	}
	c.done = true
	if s, ok := parseConnectResponse(c.first[4 : 4+size]); ok && s.ID != 0 {
		c.d.mu.Lock()
		c.d.session = s
		c.d.mu.Unlock()
	}
}

// parseConnectResponse reads ZooKeeper's ConnectResponse: protocolVersion int32, timeOut
// int32, sessionId int64, passwd (int32 length, bytes), then an optional readOnly byte.
func parseConnectResponse(b []byte) (Session, bool) {
	if len(b) < 20 {
		return Session{}, false
	}
	id := int64(binary.BigEndian.Uint64(b[8:16]))
	n := int(int32(binary.BigEndian.Uint32(b[16:20])))
	if n < 0 || len(b) < 20+n {
		return Session{}, false
	}
	return Session{ID: id, Password: append([]byte(nil), b[20:20+n]...)}, true
}

// ExpireSession ends the session of the client that dials through d, from outside the
// client, the way ZooKeeper's own tests do: it opens a second connection with the session's
// ID and password, which the server accepts as the same session, and closes the session
// there. The server drops the session, its ephemeral nodes and its watches; the client learns
// that its session expired when it next reconnects.
//
// The client is cut off meanwhile (and stays cut off if it was): the server hands a session
// to its latest connection, and a client that reconnected at once would take its session
// back from the second connection before the close. The session is checked to be gone.
func (s *Server) ExpireSession(t testing.TB, d *Dialer) {
	t.Helper()
	session := d.Session()
	if session.ID == 0 {
		t.Fatal("zktest: no session to expire: the client has not connected through the Dialer")
	}
	d.mu.Lock()
	wasCut := d.blocked
	d.mu.Unlock()
	if !wasCut {
		d.Cut()
		defer d.Restore()
	}
	for range 5 {
		gone, err := expire(s.addr, session)
		if err != nil {
			t.Fatalf("zktest: expiring session 0x%x: %v", session.ID, err)
		}
		if gone {
			return
		}
	}
	t.Fatalf("zktest: session 0x%x still valid after being closed 5 times", session.ID)
}

// expire connects with the session and closes it; gone says that the server answered that
// the session no longer exists, which is checked by connecting again after a close.
func expire(addr string, session Session) (gone bool, err error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// ConnectRequest: protocolVersion int32, lastZxidSeen int64, timeOut int32, sessionId
	// int64, passwd (int32 length, bytes).
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 30000)
	req = binary.BigEndian.AppendUint64(req, uint64(session.ID))
	req = binary.BigEndian.AppendUint32(req, uint32(len(session.Password)))
	req = append(req, session.Password...)
	if err := writeFrame(c, req); err != nil {
		return false, err
	}
	resp, err := readFrame(c)
	if err != nil {
		return false, err
	}
	granted, ok := parseConnectResponse(resp)
	if !ok {
		return false, errors.New("malformed connect response")
	}
	if granted.ID == 0 {
		return true, nil
	}
	// Request header: xid int32, type int32 (closeSession is -11); no body.
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, 0xfffffff5) // -11 in two's complement
	if err := writeFrame(c, closeReq); err != nil {
		return false, err
	}
	// Reply header: xid int32, zxid int64, err int32. The server may close the connection
	// instead of replying: it closes the session's connections once the session is closed.
	reply, err := readFrame(c)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(reply) < 16 {
		return false, errors.New("malformed close reply")
	}
	if code := int32(binary.BigEndian.Uint32(reply[12:16])); code != 0 {
		return false, fmt.Errorf("close refused with error code %d", code)
	}
	return false, nil
}

func writeFrame(w io.Writer, body []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}
