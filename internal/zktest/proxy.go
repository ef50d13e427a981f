package zktest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// SilentProxy is the address of a proxy to the server that accepts its first silent
// connections and never answers them (it reads and discards what the client sends), as a
// server that is stopping or stuck does, and forwards every later one. It runs until the test
// ends.
func (s *Server) SilentProxy(t testing.TB, silent int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for n := 1; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			track(c)
			if n <= silent {
				wg.Go(func() { io.Copy(io.Discard, c) })
				continue
			}
			up, err := net.Dial("tcp", s.Addr())
			if err != nil {
				c.Close()
				continue
			}
			track(up)
			wg.Go(func() { io.Copy(up, c); up.Close() })
			wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	return l.Addr().String()
}
