// Package zktest runs a real ZooKeeper server for tests: the one of Debian's zookeeper package
// (the jars under /usr/share/java), or the class path named by MCPBRIDGE_ZOOKEEPER_CLASSPATH,
// as a child process on a loopback port with its data in the test's temporary directory. A
// test that needs ZooKeeper and finds no Java or no ZooKeeper fails: it is never skipped.
//
// The server ticks every 200ms, so that a session of a second or two expires in a test's time.
// Its data is written without fsync: a test kills the process, never the machine, and the page
// cache keeps what was written.
package zktest

import (
	"bytes"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// debianClassPath is where Debian's libzookeeper-java puts the server's jar; its manifest
// names the jars it needs, so it is the whole class path.
const debianClassPath = "/usr/share/java/zookeeper.jar"

// TickTime is the server's tick: session timeouts are whole ticks, at least two.
const TickTime = 200 * time.Millisecond

// startTimeout bounds how long a server may take to answer after it is started.
const startTimeout = 60 * time.Second

const installHint = "install Debian's zookeeper package (apt-get install zookeeper) or set MCPBRIDGE_ZOOKEEPER_CLASSPATH"

// Server is one ZooKeeper server run by a test. Its methods may be called from any goroutine.
type Server struct {
	t         testing.TB
	java      string
	classPath string
	dir       string // the test's directory: zoo.cfg, data/, server.log
	addr      string // 127.0.0.1:PORT, the same across restarts

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start runs a ZooKeeper server and waits until it answers; it is killed when the test ends.
// Its port is picked free, then bound by the server: another process may take it in between,
// and then the server is started again on another port (a few times).
func Start(t testing.TB) *Server {
	t.Helper()
	java, classPath := javaAndClassPath(t)
	for attempt := 1; ; attempt++ {
		s := &Server{t: t, java: java, classPath: classPath, addr: freeAddr(t)}
		s.dir = filepath.Join(t.TempDir(), fmt.Sprintf("zk%d", attempt))
		if err := s.writeConfig(); err != nil {
			t.Fatal(err)
		}
		err := s.start()
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		s.Stop()
		if attempt == 3 || !strings.Contains(err.Error(), "in use") {
			t.Fatal(err)
		}
		t.Logf("zookeeper, attempt %d: %v; again on another port", attempt, err)
	}
}

// Addr is the server's client address, host:port.
func (s *Server) Addr() string { return s.addr }

// Stop kills the server at once (SIGKILL), as a crash would, and waits until it has exited.
// Its data stays: Restart runs it again on it. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart stops the server if it runs, then runs it again on the same port and data, and waits
// until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// Client connects to the server and waits for its session; it is closed when the test ends.
// Its log lines go to the test's log.
func (s *Server) Client(t testing.TB, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	return s.client(t, s.addr, sessionTimeout, handshakeRetry)
}

// handshakeRetry is how long Client first waits for an answer to its connect request before
// it drops the connection and connects again, and then twice as long each time (so that a
// handshake that is only slow gets its answer: 10, 20, then 30 s of the minute).
// go-zookeeper alone waits ten receive timeouts for it (over two minutes for a session of
// 20 s): once, on a loaded machine, a server that had just answered "imok" left a test's
// first handshake unanswered, and the test failed after a minute without a session.
const handshakeRetry = 10 * time.Second

// client is Client for a server at addr (the server's, or a proxy's in a test), connecting
// again after retry without a session, then after twice as long each time.
func (s *Server) client(t testing.TB, addr string, sessionTimeout, retry time.Duration) *zk.Conn {
	t.Helper()
	d := NewDialer()
	conn, events, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(discard{}), zk.WithLogInfo(false), zk.WithDialer(d.Dial))
	if err != nil {
		t.Fatalf("zookeeper client: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		for range events { // closed once the client's goroutines are done
		}
	})
	deadline := time.After(startTimeout)
	again := time.NewTimer(retry)
	defer again.Stop()
	for conn.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-again.C:
			d.Cut() // ends a handshake left unanswered; the client connects again
			d.Restore()
			retry *= 2
			again.Reset(retry)
		case <-deadline:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			t.Fatalf("zookeeper client: no session with %s after %v; the server's log ends:\n%s", addr, startTimeout, tail(log, 4000))
		}
	}
	return conn
}

// discard is a zk.Logger that writes nothing: the client logs every reconnection attempt,
// and tests that stop the server on purpose would drown in them.
type discard struct{}

func (discard) Printf(string, ...any) {}

func (s *Server) writeConfig() error {
	if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o700); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(s.addr)
	cfg := strings.Join([]string{
		"tickTime=" + fmt.Sprint(TickTime.Milliseconds()),
		"dataDir=" + filepath.Join(s.dir, "data"),
		"clientPort=" + port,
		"clientPortAddress=" + host,
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr,cons",
		"maxClientCnxns=0",
		"forceSync=no",
		"",
	}, "\n")
	return os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o600)
}

// start runs the server process and waits until it answers "imok", or until it exits.
func (s *Server) start() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.java,
		// A small, quickly started JVM: the tests' servers hold little and live for seconds.
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
		"-cp", s.classPath,
		"org.apache.zookeeper.server.ZooKeeperServerMain", filepath.Join(s.dir, "zoo.cfg"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting zookeeper (%s): %w", installHint, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return s.waitAnswers(done)
}

// waitAnswers polls the server's "ruok" until it says "imok": a process starting has no other
// way to say it is ready.
func (s *Server) waitAnswers(done <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if ok, _ := s.fourLetter("ruok"); ok == "imok" {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			if bytes.Contains(log, []byte("Address already in use")) {
				return fmt.Errorf("zookeeper: port of %s in use", s.addr)
			}
			return fmt.Errorf("zookeeper exited at start:\n%s", tail(log, 4000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("zookeeper on %s not answering after %v:\n%s", s.addr, startTimeout, tail(log, 4000))
		}
	}
}

// fourLetter sends one of ZooKeeper's four-letter commands and returns the answer.
func (s *Server) fourLetter(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func javaAndClassPath(t testing.TB) (java, classPath string) {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("no java to run ZooKeeper: %s", installHint)
	}
	classPath = os.Getenv("MCPBRIDGE_ZOOKEEPER_CLASSPATH")
	if classPath == "" {
		classPath = debianClassPath
		if _, err := os.Stat(classPath); err != nil {
			t.Fatalf("no ZooKeeper server jar at %s: %s", classPath, installHint)
		}
	}
	return java, classPath
}

// freeAddr picks a loopback port below the ephemeral range (Linux: 32768-60999), which the
// kernel hands out to every outgoing connection too: a port from there, free now, may be a
// client socket's by the time the server is restarted on it. These ports only other
// listeners take.
func freeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+mathrand.IntN(12000))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
