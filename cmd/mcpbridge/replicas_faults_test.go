package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/etcdtest"
)

// The replicas' fault tests (issue: replicas under faults): real etcd, real replica
// processes, with the test configuration of startReplicaProcess (session_ttl 2s,
// request_timeout 3s, chunks of 16 KiB).

const testRequestTimeout = 3 * time.Second

// answer reads a producer stream until the answer to nonce.
func answer(t *testing.T, s mcp.ResourceSink_EstablishResourceStreamClient, nonce string) *mcp.RequestResources {
	t.Helper()
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("waiting for the answer to %s: %v", nonce, err)
		}
		if m.ResponseNonce == nonce {
			return m
		}
	}
}

// statusNow is one GET's status code (0 when it fails).
func statusNow(url string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitCode waits for url to answer want, and returns how long that took.
func waitCode(t *testing.T, url string, want int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if statusNow(url) == want {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer %d within %s", url, want, within)
	return 0
}

// Two replicas of one name on one etcd: the second exits 2 naming store.etcd.replica and the
// holder; the first serves on.
func TestReplicaNameHeldByALiveReplicaExits2(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	bin := buildBinary(t)
	first := startReplicaProcess(t, bin, cluster.Endpoints(), "/dup/", "twin")
	cmd := exec.Command(bin, "serve", "--config", replicaConfig(t, cluster.Endpoints(), "/dup/", "twin"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("the second replica of one name: %v, want exit status 2\n%s", err, stderr.String())
	}
	if out := stderr.String(); !strings.Contains(out, "store.etcd.replica") || !strings.Contains(out, "twin (pid") {
		t.Fatalf("its error does not name the key and the holder:\n%s", out)
	}
	t.Logf("the second exited 2 after %s (waits the session TTL for a dead holder)", time.Since(start).Round(100*time.Millisecond))
	if code := statusNow("http://" + first.http + "/readyz"); code != http.StatusOK {
		t.Fatalf("the first replica's /readyz: %d", code)
	}
}

// With etcd down: every replica says not ready within request_timeout + 1s, a push is NACKed
// Unavailable within request_timeout + 1s, nothing of it applied; with etcd back, every
// replica is ready again, and the producer's next push is ACKed.
func TestReplicaCutOffFromEtcdSaysSoAndNACKs(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	bin := buildBinary(t)
	a := startReplicaProcess(t, bin, cluster.Endpoints(), "/cut/", "a")
	b := startReplicaProcess(t, bin, cluster.Endpoints(), "/cut/", "b")
	p := producerStream(t, a.grpc, "producer-1")
	if err := p.Send(&mcp.Resources{Collection: seCollection, Nonce: "1", Resources: manyServiceEntries(10, "one")}); err != nil {
		t.Fatal(err)
	}
	if m := answer(t, p, "1"); m.ErrorDetail != nil {
		t.Fatalf("the first push: %v", m.ErrorDetail)
	}

	m := cluster.Members[0]
	m.Kill()
	for _, r := range []*replicaProcess{a, b} {
		took := waitCode(t, "http://"+r.http+"/readyz", http.StatusServiceUnavailable, testRequestTimeout+time.Second)
		t.Logf("replica not ready %s after etcd went down", took.Round(100*time.Millisecond))
	}
	// A push to each replica: the producer's stream on a, and a new one on b (opened during
	// the outage: its presence waits for etcd, its opening requests do not).
	q := producerStream(t, b.grpc, "producer-2")
	for _, c := range []struct {
		name string
		s    mcp.ResourceSink_EstablishResourceStreamClient
	}{{"a", p}, {"b", q}} {
		start := time.Now()
		if err := c.s.Send(&mcp.Resources{Collection: seCollection, Nonce: "2", Resources: manyServiceEntries(10, "two")}); err != nil {
			t.Fatal(err)
		}
		nack := answer(t, c.s, "2")
		took := time.Since(start)
		if nack.ErrorDetail == nil || codes.Code(nack.ErrorDetail.Code) != codes.Unavailable {
			t.Fatalf("a push to %s during the outage: %v, want a NACK with Unavailable", c.name, nack)
		}
		if took > testRequestTimeout+time.Second {
			t.Fatalf("the NACK from %s took %s, want within request_timeout + 1s", c.name, took)
		}
		t.Logf("%s NACKed Unavailable in %s: %s", c.name, took.Round(10*time.Millisecond), nack.ErrorDetail.Message)
	}

	cluster.Restart(m)
	cluster.WaitHealthy()
	for _, r := range []*replicaProcess{a, b} {
		took := waitCode(t, "http://"+r.http+"/readyz", http.StatusOK, 10*time.Second)
		t.Logf("replica ready %s after etcd answered again", took.Round(100*time.Millisecond))
		if took > time.Second {
			t.Errorf("ready again %s after etcd answered again, want within a second", took)
		}
	}
	if err := p.Send(&mcp.Resources{Collection: seCollection, Nonce: "3", Resources: manyServiceEntries(10, "three")}); err != nil {
		t.Fatal(err)
	}
	if m := answer(t, p, "3"); m.ErrorDetail != nil {
		t.Fatalf("a push after etcd's return: %v", m.ErrorDetail)
	}
}

// A replica frozen (SIGSTOP) in the middle of committing a push, shorter than
// request_timeout, while the producer gives up on it and pushes a newer state to the other
// replica, which ACKs it: when the frozen replica resumes, its write is abandoned (NACKed
// Unavailable), never committed over the newer one. Twenty trials; etcd and both replicas end
// with the newer state every time.
func TestReplicaFrozenMidPushNeverCommitsAnOlderState(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	bin := buildBinary(t)
	cli := cluster.Client()
	const prefix, n = "/frozen/", 300 // 300 ServiceEntries: a few chunks of 16 KiB
	a := startReplicaProcess(t, bin, cluster.Endpoints(), prefix, "a")
	b := startReplicaProcess(t, bin, cluster.Endpoints(), prefix, "b")
	p := producerStream(t, a.grpc, "producer-1")
	marked := func(marker string) int {
		resp, err := cli.Get(context.Background(), prefix+"r/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		c := 0
		for _, kv := range resp.Kvs {
			if bytes.Contains(kv.Value, []byte(marker+"-")) {
				c++
			}
		}
		return c
	}
	abandoned := 0
	for trial := range 20 {
		older, newer := fmt.Sprintf("older%d", trial), fmt.Sprintf("newer%d", trial)
		wctx, stop := context.WithCancel(context.Background())
		chunks := cli.Watch(wctx, prefix+"t/", clientv3.WithPrefix())
		nonce := fmt.Sprint("old-", trial)
		if err := p.Send(&mcp.Resources{Collection: seCollection, Nonce: nonce, Resources: manyServiceEntries(n, older)}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-chunks:
		case <-time.After(30 * time.Second):
			t.Fatalf("trial %d: replica a wrote no chunk in 30s", trial)
		}
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stop()
		frozen := time.Now()
		q := producerStream(t, b.grpc, "producer-1")
		if err := q.Send(&mcp.Resources{Collection: seCollection, Nonce: "new", Resources: manyServiceEntries(n, newer)}); err != nil {
			t.Fatal(err)
		}
		if m := answer(t, q, "new"); m.ErrorDetail != nil {
			t.Fatalf("trial %d: the newer push to b: %v", trial, m.ErrorDetail)
		}
		if d := time.Since(frozen); d < testRequestTimeout {
			time.Sleep(min(time.Second, testRequestTimeout-d)) // frozen a while, less than request_timeout
		}
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		old := answer(t, p, nonce)
		if old.ErrorDetail != nil {
			if codes.Code(old.ErrorDetail.Code) != codes.Unavailable {
				t.Fatalf("trial %d: the older push: %v, want an ACK or an Unavailable NACK", trial, old.ErrorDetail)
			}
			abandoned++
		}
		if got := marked(newer); got != n || marked(older) != 0 {
			t.Fatalf("trial %d: etcd holds %d resources of the newer state and %d of the older (older push answered %v)", trial, got, marked(older), old)
		}
		for _, r := range []*replicaProcess{a, b} {
			waitServing(t, r.grpc, func(rs []*mcpapi.Resource) bool {
				c := 0
				for _, x := range rs {
					if bytes.Contains(x.GetBody().GetValue(), []byte(newer+"-")) {
						c++
					}
				}
				return c == n
			})
		}
		q.CloseSend()
	}
	t.Logf("20 trials: the frozen replica's older push abandoned %d times (ACKed before the freeze the others)", abandoned)
}
