package kubetest

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a server, and can cut them: a client's watches break and
// it cannot reconnect until Resume, while the test changes the server behind its back.
type Proxy struct {
	target string
	lis    net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a loopback port and forwards to target (host:port) until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, lis: lis, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Kubeconfig writes a copy of the server's kubeconfig that points at the proxy.
func (p *Proxy) Kubeconfig(t testing.TB, s *Server) string {
	t.Helper()
	b, err := os.ReadFile(s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(b), s.Address(), p.Addr(), 1)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Cut closes every forwarded connection and refuses new ones until Resume.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Resume forwards new connections again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *Proxy) forward(c net.Conn) {
	defer p.drop(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.drop(up)
	done := make(chan struct{})
	go func() { _, _ = io.Copy(up, c); _ = up.Close(); close(done) }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	<-done
}

func (p *Proxy) drop(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.lis.Close()
	p.Cut()
	p.wg.Wait()
}
