// Package etcdtest runs real etcd servers for tests: the etcd binary of Debian's etcd-server
// package (which .ci/run installs), or the one named by MCPBRIDGE_ETCD, as child processes on
// loopback ports with their data in the test's temporary directory. A test that needs etcd
// and finds none fails: it is never skipped.
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Binary is the etcd executable the tests run.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MCPBRIDGE_ETCD"); p != "" {
		return p
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("no etcd binary: install Debian's etcd-server (.ci/run does) or set MCPBRIDGE_ETCD: %v", err)
	}
	return p
}

// Member is one etcd server of a Cluster.
type Member struct {
	Name             string
	ClientURL        string
	peerURL, dataDir string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is a set of etcd members started together.
type Cluster struct {
	t       testing.TB
	bin     string
	Members []*Member
	initial string
}

// Start runs an etcd cluster of n members and waits until it answers. Its ports are picked
// free, then bound by etcd: another process may take one in between, and then the cluster is
// started again on other ports (a few times).
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := tryStart(t, n, attempt)
		if err == nil {
			return c
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("etcd, attempt %d: %v; again on other ports", attempt, err)
	}
}

// tryStart starts the cluster; it returns an error, having stopped every member, when one
// exits at once because its port was taken.
func tryStart(t testing.TB, n, attempt int) (*Cluster, error) {
	t.Helper()
	c := &Cluster{t: t, bin: Binary(t)}
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("attempt%d", attempt))
	var initial []string
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: "http://" + freeAddr(t),
			peerURL:   "http://" + freeAddr(t),
			dataDir:   filepath.Join(dir, fmt.Sprintf("m%d", i)),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.peerURL)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c.initial = strings.Join(initial, ",")
	for _, m := range c.Members {
		c.run(m, "new")
	}
	if err := c.portTaken(); err != nil {
		for _, m := range c.Members {
			m.Kill()
		}
		return nil, err
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			m.Kill()
		}
	})
	c.WaitHealthy()
	return c, nil
}

// portTaken waits until every member answers, or one has exited because its port was taken.
func (c *Cluster) portTaken() error {
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range c.Members {
		for ping(m.ClientURL) != nil && time.Now().Before(deadline) {
			select {
			case <-m.done:
				log, _ := os.ReadFile(m.dataDir + ".log")
				if bytes.Contains(log, []byte("address already in use")) {
					return fmt.Errorf("etcd %s: a port was taken before it bound it", m.Name)
				}
				return nil // exited otherwise: WaitHealthy reports it with its log
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Endpoints are the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.ClientURL
	}
	return out
}

// Client dials every member; it is closed when the test ends.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

func (c *Cluster) run(m *Member, state string) {
	c.t.Helper()
	logf, err := os.OpenFile(m.dataDir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin,
		"--name", m.Name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", c.initial, "--initial-cluster-state", state,
		"--initial-cluster-token", "mcpbridge-test",
		"--heartbeat-interval", "50", "--election-timeout", "500",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting etcd %s: %v", m.Name, err)
	}
	m.mu.Lock()
	m.cmd, m.done = cmd, make(chan struct{})
	done := m.done
	m.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
}

// Kill stops a member at once (SIGKILL), as a crash would.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart runs a killed member again on its data.
func (c *Cluster) Restart(m *Member) {
	c.t.Helper()
	c.run(m, "existing")
}

// WaitHealthy waits until every running member answers a read.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range c.Members {
		m.mu.Lock()
		done := m.done
		m.mu.Unlock()
		select {
		case <-done:
			continue // killed
		default:
		}
		for {
			err := ping(m.ClientURL)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(m.dataDir + ".log")
				c.t.Fatalf("etcd %s not healthy after 30s: %v\n%s", m.Name, err, tail(log, 4000))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Leader returns the member that leads the cluster now.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	cli := c.Client()
	for _, m := range c.Members {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	c.t.Fatal("no etcd member is the leader")
	return nil
}

func ping(url string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "health")
	return err
}

func freeAddr(t testing.TB) string {
	t.Helper()
	// Below the ephemeral range (Linux: 32768-60999), which the kernel hands out to every
	// outgoing connection too: a port from there, free now, may be a client socket's by the
	// time a member is started again on it (Cluster.Restart). These ports only other listeners
	// take.
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+mathrand.IntN(12000))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
