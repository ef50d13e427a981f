package zksource

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/mcpbridge/mcpbridge/internal/zktest"
)

// connFaultIs is a waitFor condition: the source's first fault is the connection's, with
// these words (none: no connection fault).
func connFaultIs(r *running, words string) func() error {
	return func() error {
		f := r.Faults()
		has := len(f) > 0 && strings.Contains(f[0].Error(), "ZooKeeper")
		switch {
		case words == "" && has:
			return fmt.Errorf("connection fault %q", f[0])
		case words != "" && (!has || !strings.Contains(f[0].Error(), words)):
			return fmt.Errorf("faults %v, want first one saying %q", f, words)
		}
		return nil
	}
}

// A session that expires keeps the last good state served; the new session reads the
// registry again, with what changed meanwhile.
func TestSessionExpiryKeepsTheLastGoodStateAndCatchesUp(t *testing.T) {
	e := newEnv(t)
	d := zktest.NewDialer()
	r := e.run(func(_ *Options, s *Source) { s.dial = d.Dial })
	r.ready(t)
	iface := "com.example.Expiring"
	name := "reg/com.example.expiring.dubbo"
	e.register("/dubbo", iface, providerURL("dubbo", "10.4.0.1:20880", iface), zk.FlagEphemeral)
	b := e.register("/dubbo", iface, providerURL("dubbo", "10.4.0.2:20880", iface), zk.FlagEphemeral)
	e.waitFor(r, "providers served", e.hasEndpoints(name, "10.4.0.1 dubbo-20880=20880", "10.4.0.2 dubbo-20880=20880"))

	// The source cut off, its session expired on the server: it cannot learn it yet, and
	// serves what it had.
	d.Cut()
	e.zk.ExpireSession(t, d)
	e.waitFor(r, "connection fault", connFaultIs(r, "serving the last good state"))
	e.remove(b)
	e.register("/dubbo", iface, providerURL("dubbo", "10.4.0.3:20880", iface), zk.FlagEphemeral)
	if err := e.hasEndpoints(name, "10.4.0.1 dubbo-20880=20880", "10.4.0.2 dubbo-20880=20880")(); err != nil {
		t.Fatalf("while cut off: %v", err)
	}

	d.Restore()
	e.waitFor(r, "changes made while expired", e.hasEndpoints(name, "10.4.0.1 dubbo-20880=20880", "10.4.0.3 dubbo-20880=20880"))
	e.waitFor(r, "connection fault gone", connFaultIs(r, ""))
	if st := r.Stats(); st.Expiries != 1 || st.Connects != 2 || !st.Connected {
		t.Fatalf("stats %+v, want 1 expiry and 2 sessions", st)
	}
	// The new session's watches are set: a change after it is followed.
	e.register("/dubbo", iface, providerURL("dubbo", "10.4.0.4:20880", iface), zk.FlagEphemeral)
	e.waitFor(r, "change in the new session", e.hasEndpoints(name,
		"10.4.0.1 dubbo-20880=20880", "10.4.0.3 dubbo-20880=20880", "10.4.0.4 dubbo-20880=20880"))
}

// An expiry seen at once (the standard trick, the client connected) is followed by a new
// session that reads everything again.
func TestSessionExpiredUnderTheClientIsReadAgain(t *testing.T) {
	e := newEnv(t)
	d := zktest.NewDialer()
	r := e.run(func(_ *Options, s *Source) { s.dial = d.Dial })
	r.ready(t)
	e.registerSpring("/services", "cart", "1", springJSON("cart", "1", "10.5.0.1", 8080, "null", `{}`))
	e.waitFor(r, "instance served", e.hasEndpoints("reg/cart.spring", "10.5.0.1 http-8080=8080"))
	e.zk.ExpireSession(t, d)
	e.waitFor(r, "new session", func() error {
		if st := r.Stats(); st.Expiries != 1 || st.Connects != 2 || !st.Connected {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	e.registerSpring("/services", "cart", "2", springJSON("cart", "2", "10.5.0.2", 8080, "null", `{}`))
	e.waitFor(r, "instance of the new session", e.hasEndpoints("reg/cart.spring", "10.5.0.1 http-8080=8080", "10.5.0.2 http-8080=8080"))
}

// ZooKeeper stopped: the state is kept and a fault says why; started again on its data, the
// source converges. The test's providers are persistent znodes: the registering client's
// session, and its ephemeral znodes, may or may not outlive the restart, depending on how
// long it takes, and the test is about the source's session, not the client's.
func TestZooKeeperRestartedKeepsStateAndConverges(t *testing.T) {
	e := newEnv(t)
	r := e.run(nil)
	r.ready(t)
	iface := "com.example.Restarted"
	name := "reg/com.example.restarted.dubbo"
	a := e.register("/dubbo", iface, providerURL("dubbo", "10.6.0.1:20880", iface), 0)
	e.waitFor(r, "provider served", e.hasEndpoints(name, "10.6.0.1 dubbo-20880=20880"))

	e.zk.Stop()
	e.waitFor(r, "connection fault", connFaultIs(r, "serving the last good state"))
	if err := e.hasEndpoints(name, "10.6.0.1 dubbo-20880=20880")(); err != nil {
		t.Fatalf("while ZooKeeper is down: %v", err)
	}
	time.Sleep(3 * time.Second) // longer than the session timeout: the session may expire
	if err := e.hasEndpoints(name, "10.6.0.1 dubbo-20880=20880")(); err != nil {
		t.Fatalf("while ZooKeeper is down for longer than the session timeout: %v", err)
	}

	e.zk.Restart()
	e.remove(a)
	e.register("/dubbo", iface, providerURL("dubbo", "10.6.0.2:20880", iface), 0)
	e.waitFor(r, "changes after the restart", e.hasEndpoints(name, "10.6.0.2 dubbo-20880=20880"))
	e.waitFor(r, "connection fault gone", connFaultIs(r, ""))
}

// A bridge restarted over a store that holds its previous run's ServiceEntries removes those
// whose services are gone from the registry, and keeps the others.
func TestBridgeRestartRemovesWhatDisappeared(t *testing.T) {
	e := newEnv(t)
	e.register("/dubbo", "com.example.Stays", providerURL("dubbo", "10.7.0.1:20880", "com.example.Stays"), 0)
	gone := e.register("/dubbo", "com.example.Goes", providerURL("dubbo", "10.7.0.2:20880", "com.example.Goes"), 0)
	first := e.run(nil)
	first.ready(t)
	e.waitFor(first, "both served", func() error {
		if n := len(e.entries("zookeeper:reg")); n != 2 {
			return fmt.Errorf("%d services", n)
		}
		return nil
	})
	first.stop()

	e.remove(gone)
	if n := len(e.entries("zookeeper:reg")); n != 2 {
		t.Fatalf("the stopped source's services: %d, want 2", n)
	}
	second := e.run(nil)
	second.ready(t)
	got := e.entries("zookeeper:reg")
	if _, ok := got["reg/com.example.stays.dubbo"]; !ok || len(got) != 1 {
		t.Fatalf("after the restart the owner holds %d services (stays: %v), want only com.example.stays.dubbo", len(got), ok)
	}
}

// A server that accepts the connection and never answers the session handshake (stopping,
// stuck, or a proxy whose backend is gone) holds the source for a session timeout, not for
// the ten receive timeouts go-zookeeper waits by itself (13 s at this test's 2 s): the source
// drops the connection, connects again, and reads the registry.
func TestAnUnansweredHandshakeIsDroppedAfterASessionTimeout(t *testing.T) {
	e := newEnv(t)
	addr := e.zk.SilentProxy(t, 1)
	start := time.Now()
	r := e.run(func(o *Options, _ *Source) { o.Servers = []string{addr} })
	r.ready(t)
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("ready %v after starting behind a server that never answered the first handshake; want about the 2s session timeout", took)
	}
}
