package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/etcdtest"
)

// replicaProcess is `mcpbridge serve` with store.backend etcd, as its own process.
type replicaProcess struct {
	cmd        *exec.Cmd
	grpc, http string
	exited     chan struct{}
}

// replicaConfig writes the configuration of a replica process: loopback ports, no
// translation, the etcd backend with a short session and request timeout, small chunks.
func replicaConfig(t *testing.T, endpoints []string, prefix, name string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	text := fmt.Sprintf(`grpc: {address: "127.0.0.1:0"}
http: {address: "127.0.0.1:0"}
translate: {enabled: false}
store:
  backend: etcd
  etcd: {endpoints: [%s], prefix: %s, replica: %s, session_ttl: 2s, request_timeout: 3s, max_txn_bytes: 16384}
`, strings.Join(endpoints, ", "), prefix, name)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startReplicaProcess(t *testing.T, bin string, endpoints []string, prefix, name string) *replicaProcess {
	t.Helper()
	cfg := replicaConfig(t, endpoints, prefix, name)
	p := &replicaProcess{cmd: exec.Command(bin, "serve", "--config", cfg), exited: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads after the serving line
			}
		}
	}()
	deadline := time.After(30 * time.Second)
	for p.http == "" {
		select {
		case l := <-lines:
			if m := servingLine.FindStringSubmatch(l); m != nil {
				p.grpc, p.http = m[1], m[2]
			}
		case <-p.exited:
			t.Fatalf("replica %s exited before serving", name)
		case <-deadline:
			t.Fatalf("replica %s: no serving line in 30s", name)
		}
	}
	waitStatus(t, "http://"+p.http+"/readyz", 200, 30*time.Second)
	return p
}

// producerStream pushes as one producer (mcp-producer-id), whichever replica it dials.
func producerStream(t *testing.T, addr, id string) mcp.ResourceSink_EstablishResourceStreamClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "mcp-producer-id", id))
	t.Cleanup(func() { cancel(); conn.Close() })
	s, err := mcp.NewResourceSinkClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pushUntilWritten pushes resources as one full state and waits for the first event of keys;
// a push NACKed Unavailable is pushed again (a producer's part: the write was refused, and
// nothing of it applied).
func pushUntilWritten(t *testing.T, p mcp.ResourceSink_EstablishResourceStreamClient, resources []*mcpapi.Resource, keys clientv3.WatchChan, what string) {
	t.Helper()
	replies := make(chan *mcp.RequestResources, 100)
	go func() {
		defer close(replies)
		for {
			r, err := p.Recv()
			if err != nil {
				return
			}
			select {
			case replies <- r:
			default: // the test has what it needs
			}
		}
	}()
	nonce := 1
	push := func() {
		if err := p.Send(&mcp.Resources{Collection: seCollection, Nonce: fmt.Sprint(nonce), Resources: resources}); err != nil {
			t.Fatal(err)
		}
	}
	push()
	deadline := time.After(120 * time.Second)
	for {
		select {
		case <-keys:
			return
		case r, ok := <-replies:
			if !ok {
				replies = nil
				continue
			}
			if r.GetResponseNonce() == fmt.Sprint(nonce) && r.GetErrorDetail() != nil {
				if codes.Code(r.GetErrorDetail().GetCode()) != codes.Unavailable {
					t.Fatalf("push NACKed: %v", r.GetErrorDetail())
				}
				t.Logf("push %d NACKed Unavailable (%s); pushing again", nonce, r.GetErrorDetail().GetMessage())
				nonce++
				time.Sleep(100 * time.Millisecond)
				push()
			}
		case <-deadline:
			t.Fatalf("replica a wrote no %s key in 120s (%d pushes)", what, nonce)
		}
	}
}

func manyServiceEntries(n int, host string) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, n)
	for i := range out {
		out[i] = seResource(fmt.Sprintf("shop/se-%05d", i), fmt.Sprintf("%s-%d.example.com", host, i))
	}
	return out
}

// TestReplicaProcessKilledMidPushNothingHalfApplied: a replica process is killed (SIGKILL)
// in the middle of committing a push larger than one etcd transaction: once its first chunk
// is in etcd (the commit record not yet), and once its commit record is (the copy to the
// owner's keys not yet done). The other replica's subscriber sees all of the push or none of
// it at every moment; the producer pushes again to the other replica and is ACKed; etcd is
// left with no commit record pending.
func TestReplicaProcessKilledMidPushNothingHalfApplied(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	bin := buildBinary(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, at := range []string{"t/", "c/"} {
		t.Run("killed at the first "+at+" key", func(t *testing.T) {
			prefix := "/killed-at-" + strings.TrimSuffix(at, "/") + "/"
			killMidPush(t, bin, cluster, cli, prefix, at)
		})
	}
}

func killMidPush(t *testing.T, bin string, cluster *etcdtest.Cluster, cli *clientv3.Client, prefix, at string) {
	a := startReplicaProcess(t, bin, cluster.Endpoints(), prefix, "a")
	b := startReplicaProcess(t, bin, cluster.Endpoints(), prefix, "b")

	const n = 3000 // about 20 chunks of 16 KiB (store.etcd.max_txn_bytes in this test)
	var mu sync.Mutex
	var seen []int
	subscribeCounting(t, b.grpc, func(count int) {
		mu.Lock()
		seen = append(seen, count)
		mu.Unlock()
	})

	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	// From the revision before the push: a watch is registered with etcd after Watch returns.
	before, err := cli.Get(wctx, prefix+at, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	keys := cli.Watch(wctx, prefix+at, clientv3.WithPrefix(), clientv3.WithRev(before.Header.Revision+1))
	p := producerStream(t, a.grpc, "producer-1")
	// Replica a validates, encodes and writes 3,000 ServiceEntries first: under the race
	// detector on a loaded 2-core machine that took over 30s once, so the wait is generous
	// (it ends as soon as the key appears). A push NACKed Unavailable (the replica found etcd
	// slower than its request timeout allows, make test's load) is pushed again, as a
	// producer does.
	pushUntilWritten(t, p, manyServiceEntries(n, "v1"), keys, at)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	count := func(p string) int64 {
		resp, err := cli.Get(context.Background(), prefix+p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	t.Logf("a killed with %d chunk keys, %d commit records and %d resources in etcd", count("t/"), count("c/"), count("r/"))

	q := producerStream(t, b.grpc, "producer-1")
	if err := q.Send(&mcp.Resources{Collection: seCollection, Nonce: "2", Resources: manyServiceEntries(n, "v2")}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := q.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.ResponseNonce == "2" {
			if m.ErrorDetail != nil {
				t.Fatalf("the push to b after a was killed: NACK %s", m.ErrorDetail.Message)
			}
			break
		}
	}
	waitUntilSeen(t, &mu, &seen, n)
	mu.Lock()
	for _, c := range seen {
		if c != 0 && c != n {
			t.Fatalf("b's subscriber held %d of a %d-resource push at one point (all it held: %v)", c, n, seen)
		}
	}
	t.Logf("b's subscriber held, in turn: %v", seen)
	mu.Unlock()
	if c := count("c/"); c != 0 {
		t.Fatalf("etcd holds %d commit records after b's write; the owner's next write finishes a pending one", c)
	}
	if r := count("r/"); r != n {
		t.Fatalf("etcd holds %d resources after b's write, want %d", r, n)
	}
}

// subscribeCounting subscribes to the ServiceEntries over MCP and reports how many each full
// state holds.
func subscribeCounting(t *testing.T, addr string, report func(int)) mcp.ResourceSource_EstablishResourceStreamClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	node := &mcp.SinkNode{Id: "counting-sink"}
	if err := s.Send(&mcp.RequestResources{SinkNode: node, Collection: seCollection}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		for {
			m, err := s.Recv()
			if err != nil {
				return
			}
			report(len(m.Resources))
			s.Send(&mcp.RequestResources{SinkNode: node, Collection: m.Collection, ResponseNonce: m.Nonce})
		}
	}()
	return s
}

func waitUntilSeen(t *testing.T, mu *sync.Mutex, seen *[]int, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		last := -1
		if len(*seen) > 0 {
			last = (*seen)[len(*seen)-1]
		}
		mu.Unlock()
		if last == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("b's subscriber never held the %d ServiceEntries", n)
}

// waitServing subscribes to a replica's ServiceEntries over MCP until a full state satisfies
// done, for at most 10s.
func waitServing(t *testing.T, addr string, done func([]*mcpapi.Resource) bool) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &mcp.SinkNode{Id: "waiting-sink"}
	if err := s.Send(&mcp.RequestResources{SinkNode: node, Collection: seCollection}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("%s never served the state waited for: %v", addr, err)
		}
		if done(m.Resources) {
			return
		}
		s.Send(&mcp.RequestResources{SinkNode: node, Collection: m.Collection, ResponseNonce: m.Nonce})
	}
}
