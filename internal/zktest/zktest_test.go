package zktest

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRestartKeepsPortAndData(t *testing.T) {
	srv := Start(t)
	c := srv.Client(t, 2*time.Second)
	if _, err := c.Create("/kept", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	srv.Restart()
	if srv.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", srv.Addr(), addr)
	}
	after := srv.Client(t, 2*time.Second)
	data, _, err := after.Get("/kept")
	if err != nil || string(data) != "v" {
		t.Fatalf("after a restart /kept reads %q, %v; want \"v\"", data, err)
	}
}

func TestStoppedServerRefusesClients(t *testing.T) {
	srv := Start(t)
	srv.Stop()
	if _, err := srv.fourLetter("ruok"); err == nil {
		t.Fatal("a stopped server still answers")
	}
	srv.Stop() // twice: nothing
}

// The client learns that its session expired, and its ephemeral nodes are gone.
func TestExpireSessionEndsTheClientsSession(t *testing.T) {
	srv := Start(t)
	d := NewDialer()
	conn, events, err := zk.Connect([]string{srv.Addr()}, 4*time.Second, zk.WithDialer(d.Dial), zk.WithLogger(discard{}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		for range events {
		}
	}()
	waitState(t, events, zk.StateHasSession)
	first := d.Session()
	if first.ID == 0 || first.ID != conn.SessionID() || len(first.Password) == 0 {
		t.Fatalf("recorded session %+v, client's is 0x%x", first, conn.SessionID())
	}
	if _, err := conn.Create("/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	srv.ExpireSession(t, d)
	waitState(t, events, zk.StateExpired)
	waitState(t, events, zk.StateHasSession)
	if conn.SessionID() == first.ID || d.Session().ID != conn.SessionID() {
		t.Fatalf("after expiry the session is 0x%x (recorded 0x%x), was 0x%x", conn.SessionID(), d.Session().ID, first.ID)
	}
	if ok, _, err := conn.Exists("/eph"); err != nil || ok {
		t.Fatalf("the expired session's ephemeral node: exists %v, %v", ok, err)
	}
}

// A client cut off for longer than its session timeout finds its session expired.
func TestCutLongerThanTheTimeoutExpiresTheSession(t *testing.T) {
	srv := Start(t)
	d := NewDialer()
	conn, events, err := zk.Connect([]string{srv.Addr()}, time.Second, zk.WithDialer(d.Dial), zk.WithLogger(discard{}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		for range events {
		}
	}()
	waitState(t, events, zk.StateHasSession)
	d.Cut()
	waitState(t, events, zk.StateDisconnected)
	time.Sleep(2 * time.Second) // past the session timeout, on the server's clock
	d.Restore()
	waitState(t, events, zk.StateExpired)
	waitState(t, events, zk.StateHasSession)
}

func waitState(t *testing.T, events <-chan zk.Event, want zk.State) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Type == zk.EventSession && ev.State == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %v session event after 20s", want)
		}
	}
}

// A connect request the server leaves unanswered does not hold the client: it connects again,
// waiting twice as long each time, and gets its session. A proxy swallows the first two
// connections (reads them, never answers) and forwards the others.
func TestClientConnectsAgainAfterAnUnansweredHandshake(t *testing.T) {
	srv := Start(t)
	addr := srv.SilentProxy(t, 2)
	start := time.Now()
	c := srv.client(t, addr, 20*time.Second, time.Second)
	if _, err := c.Create("/through", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("a session after %v", took)
	}
}
