package app

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/etcdtest"
)

// replicaOf serves a bridge with store.backend etcd on loopback; stop ends it as a crash would
// for its clients (streams end), and is called at the test's end if not before.
type replicaOf struct {
	*running
	stop func()
}

func startReplica(t *testing.T, cluster *etcdtest.Cluster, name string, configure func(*Config)) *replicaOf {
	t.Helper()
	cfg := DefaultConfig()
	cfg.GRPC.ShutdownGrace = 200 * time.Millisecond
	cfg.Translate.Enabled = false
	cfg.Store.Backend = "etcd"
	cfg.Store.Etcd.Endpoints = cluster.Endpoints()
	cfg.Store.Etcd.Prefix = "/" + t.Name() + "/"
	cfg.Store.Etcd.Replica = name
	cfg.Store.Etcd.SessionTTL = 2 * time.Second
	cfg.Store.Etcd.RequestTimeout = 2 * time.Second
	if configure != nil {
		configure(cfg)
	}
	running, stop := serveOnLoopback(t, cfg)
	r := &replicaOf{running: running, stop: stop}
	waitReplicaReady(t, r)
	return r
}

func waitReplicaReady(t *testing.T, r *replicaOf) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := httpGet(t, r.httpURL+"/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not ready: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// versions is name → version of what a full-state MCP response holds.
func versions(m *mcp.Resources) map[string]string {
	out := map[string]string{}
	for _, r := range m.Resources {
		out[r.Metadata.Name] = r.Metadata.Version
	}
	return out
}

// waitVersions reads an MCP subscription until it holds want.
func waitVersions(t *testing.T, c *sinkClient, want map[string]string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	var last map[string]string
	for {
		select {
		case m := <-c.Responses():
			c.ack(m)
			last = versions(m)
			if maps.Equal(last, want) {
				return
			}
		case <-deadline:
			t.Fatalf("subscriber %s holds %v, want %v", c.node, last, want)
		}
	}
}

func serviceEntries(n int, host string) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, n)
	for i := range out {
		out[i] = serviceEntry(fmt.Sprintf("shop/se-%04d", i), fmt.Sprintf("%s-%d.example.com", host, i))
	}
	return out
}

// versionsOn is what a replica's store serves in the ServiceEntry collection.
func versionsOn(r *replicaOf) map[string]string {
	_, entries := r.Store().View().Snapshot(seColl)
	out := map[string]string{}
	for _, e := range entries {
		out[e.Name] = e.Version
	}
	return out
}

func TestReplicasServeWhatAnyOfThemTook(t *testing.T) {
	cluster := etcdtest.Start(t, 3)
	a, b, c := startReplica(t, cluster, "a", nil), startReplica(t, cluster, "b", nil), startReplica(t, cluster, "c", nil)
	onB, onC := subscribe(t, b.grpcAddr, "sink-b", seColl), subscribe(t, c.grpcAddr, "sink-c", seColl)

	p := dialProducer(t, a.grpcAddr, "producer")
	if ack := p.push(t, seColl, serviceEntries(30, "v1")...); ack.ErrorDetail != nil {
		t.Fatalf("push to a NACKed: %v", ack.ErrorDetail)
	}
	want := versionsOn(a)
	if len(want) != 30 {
		t.Fatalf("replica a serves %d ServiceEntries once it ACKed, want 30", len(want))
	}
	waitVersions(t, onB, want)
	waitVersions(t, onC, want)
}

// TestClientMovesBetweenReplicasWithoutResend: every replica serves the same versions, so a
// delta client resuming on another replica with initial_resource_versions is sent nothing.
func TestClientMovesBetweenReplicasWithoutResend(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	a, b, c := startReplica(t, cluster, "a", nil), startReplica(t, cluster, "b", nil), startReplica(t, cluster, "c", nil)
	p := dialProducer(t, a.grpcAddr, "producer")
	if ack := p.push(t, seColl, serviceEntries(20, "v1")...); ack.ErrorDetail != nil {
		t.Fatal(ack.ErrorDetail)
	}
	node := &core.Node{Id: "sidecar~10.0.0.1~app.shop~shop.svc.cluster.local"}
	held := map[string]string{}
	onB := deltaADS(t, dialConn(t, b.grpcAddr))
	onB.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: seXDSType})
	for len(held) < 20 {
		m := onB.Recv()
		for _, r := range m.Resources {
			held[r.Name] = r.Version
		}
		onB.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seXDSType, ResponseNonce: m.Nonce})
	}
	onB.Close()

	onC := deltaADS(t, dialConn(t, c.grpcAddr))
	onC.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: seXDSType, InitialResourceVersions: held})
	quiet := time.After(time.Second)
	for {
		select {
		case m := <-onC.Responses():
			if len(m.Resources) > 0 || len(m.RemovedResources) > 0 {
				t.Fatalf("replica c resent %d resources (and %d removals) that the client held from replica b", len(m.Resources), len(m.RemovedResources))
			}
			onC.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seXDSType, ResponseNonce: m.Nonce})
		case <-quiet:
			// And a change made on a reaches the client on c as that change alone.
			changed := serviceEntries(20, "v1")
			changed[7] = serviceEntry("shop/se-0007", "moved.example.com")
			if ack := p.push(t, seColl, changed...); ack.ErrorDetail != nil {
				t.Fatal(ack.ErrorDetail)
			}
			m := onC.Recv()
			if len(m.Resources) != 1 || m.Resources[0].Name != "shop/se-0007" {
				t.Fatalf("after one change the client on c got %d resources, want only shop/se-0007", len(m.Resources))
			}
			return
		}
	}
}

func TestReplicasRestartedServeFromEtcdAlone(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	a := startReplica(t, cluster, "a", nil)
	p := dialProducer(t, a.grpcAddr, "producer")
	if ack := p.push(t, seColl, serviceEntries(25, "v1")...); ack.ErrorDetail != nil {
		t.Fatal(ack.ErrorDetail)
	}
	want := versionsOn(a)
	p.Close()
	stopped := time.Now()
	a.stop()
	t.Logf("replica a stopped in %s", time.Since(stopped))

	// Every replica restarted, no producer connected: ready from etcd, same versions.
	b := startReplica(t, cluster, "b", nil)
	if got := versionsOn(b); !maps.Equal(got, want) {
		t.Fatalf("a replica restarted from etcd serves %v, want %v", got, want)
	}
	waitVersions(t, subscribe(t, b.grpcAddr, "sink", seColl), want)
}

func TestEtcdLeaderKilledWritesResume(t *testing.T) {
	cluster := etcdtest.Start(t, 3)
	a, b := startReplica(t, cluster, "a", nil), startReplica(t, cluster, "b", nil)
	p := dialProducer(t, a.grpcAddr, "producer")
	if ack := p.push(t, seColl, serviceEntries(10, "v1")...); ack.ErrorDetail != nil {
		t.Fatal(ack.ErrorDetail)
	}
	cluster.Leader().Kill()
	// The next push may meet the election: the bridge NACKs it Unavailable, nothing applied,
	// or commits it once a leader is elected. Either way, pushing again converges.
	next := serviceEntries(12, "v2")
	deadline := time.Now().Add(20 * time.Second)
	for {
		ack := p.push(t, seColl, next...)
		if ack.ErrorDetail == nil {
			break
		}
		if ack.ErrorDetail.Code != 14 || time.Now().After(deadline) {
			t.Fatalf("push after the leader died: %v, want an ACK or Unavailable (14)", ack.ErrorDetail)
		}
		if got := len(versionsOn(a)); got != 10 {
			t.Fatalf("a NACKed push changed the store: %d ServiceEntries", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := versionsOn(a)
	if len(want) != 12 {
		t.Fatalf("a serves %d after the ACK, want 12", len(want))
	}
	waitVersions(t, subscribe(t, b.grpcAddr, "sink", seColl), want)
}

// TestReplicaKilledMidPushNothingHalfApplied: a replica stops while taking a write larger than
// one etcd transaction; other replicas hold all of it or none of it, and the producer resumes
// on another replica.
func TestReplicaKilledMidPushNothingHalfApplied(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	a, b := startReplica(t, cluster, "a", nil), startReplica(t, cluster, "b", nil)
	const n = 800 // beyond 100 operations a transaction: chunks and a commit record
	var mu sync.Mutex
	var counts []int
	w := b.Store().Watch(seColl)
	defer w.Close()
	stopWatch := make(chan struct{})
	var watched sync.WaitGroup
	watched.Go(func() {
		for {
			select {
			case <-stopWatch:
				return
			case <-w.C():
				mu.Lock()
				counts = append(counts, len(versionsOn(b)))
				mu.Unlock()
			}
		}
	})
	p := dialProducer(t, a.grpcAddr, "producer")
	p.Send(&mcp.Resources{Collection: seColl, Nonce: "big", Resources: serviceEntries(n, "v1")})
	time.Sleep(20 * time.Millisecond)
	stopped := time.Now()
	a.stop()
	t.Logf("replica a stopped in %s", time.Since(stopped))

	q := dialProducer(t, b.grpcAddr, "producer")
	pushed := time.Now()
	if ack := q.push(t, seColl, serviceEntries(n, "v2")...); ack.ErrorDetail != nil {
		t.Fatalf("the producer's push to b after a stopped: %v", ack.ErrorDetail)
	}
	t.Logf("the push to b was ACKed in %s", time.Since(pushed))
	if got := len(versionsOn(b)); got != n {
		t.Fatalf("b serves %d after the producer resumed there, want %d", got, n)
	}
	close(stopWatch)
	watched.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, c := range counts {
		if c != 0 && c != n {
			t.Fatalf("replica b served %d of a %d-resource write at one point (counts seen: %v)", c, n, counts)
		}
	}
}

func TestProducerLeaseExpiresOnEveryReplica(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	expiry := func(c *Config) { c.Sink.Expiry = 2 * time.Second }
	a, b := startReplica(t, cluster, "a", expiry), startReplica(t, cluster, "b", expiry)
	p := dialProducer(t, a.grpcAddr, "producer")
	if ack := p.push(t, seColl, serviceEntries(5, "v1")...); ack.ErrorDetail != nil {
		t.Fatal(ack.ErrorDetail)
	}
	onB := subscribe(t, b.grpcAddr, "sink", seColl)
	waitVersions(t, onB, versionsOn(a))
	p.Close()
	a.stop() // the replica the producer left is gone too: etcd expires the lease alone
	waitVersions(t, onB, map[string]string{})
}

// TestReplicaCutOffFromEtcd: a replica that loses etcd keeps serving its last state, is not
// ready (saying why), refuses writes with Unavailable, and catches up when etcd returns.
func TestReplicaCutOffFromEtcd(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	a := startReplica(t, cluster, "a", nil)
	p := dialProducer(t, a.grpcAddr, "producer")
	if ack := p.push(t, seColl, serviceEntries(4, "v1")...); ack.ErrorDetail != nil {
		t.Fatal(ack.ErrorDetail)
	}
	sub := subscribe(t, a.grpcAddr, "sink", seColl)
	want := versionsOn(a)
	waitVersions(t, sub, want)

	cluster.Members[0].Kill()
	ack := p.push(t, seColl, serviceEntries(6, "v2")...)
	if ack.ErrorDetail == nil || ack.ErrorDetail.Code != 14 {
		t.Fatalf("a push with etcd down: %v, want NACK Unavailable (14)", ack.ErrorDetail)
	}
	if !maps.Equal(versionsOn(a), want) {
		t.Fatal("the replica stopped serving its last good state")
	}
	if !waitUntil(t, func() bool { code, _ := httpGet(t, a.httpURL+"/readyz"); return code == http.StatusServiceUnavailable }) {
		t.Fatal("/readyz stayed 200 with etcd down")
	}
	_, body := httpGet(t, a.httpURL+"/readyz")
	mustContain(t, "/readyz", body, "store.etcd")
	_, replica := httpGet(t, a.httpURL+"/debug/replica")
	mustContain(t, "/debug/replica", replica, `"ready": false`, `"replica": "a"`, `"applied_revision"`, `"lag_revisions"`)
	_, page := httpGet(t, a.httpURL+"/")
	mustContain(t, "the status page", page, `id="replica"`, "replica <code>a</code>", "applied etcd revision")

	cluster.Restart(cluster.Members[0])
	cluster.WaitHealthy()
	waitReplicaReady(t, a)
	if ack := p.push(t, seColl, serviceEntries(6, "v2")...); ack.ErrorDetail != nil {
		t.Fatalf("a push once etcd is back: %v", ack.ErrorDetail)
	}
	waitVersions(t, sub, versionsOn(a))
}

// TestFilesAreIngestedByOneReplica: replicas with the same files elect one ingester; the
// others serve what it writes; when it stops, another takes over and follows edits.
func TestFilesAreIngestedByOneReplica(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	dir := t.TempDir()
	write := func(host string) {
		doc := fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api, namespace: shop}\nspec:\n  hosts: [%s]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: DNS\n", host)
		if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("one.example.com")
	files := func(c *Config) { c.Sources.Files = []string{dir}; c.Sources.FileDebounce = 20 * time.Millisecond }
	a, b := startReplica(t, cluster, "a", files), startReplica(t, cluster, "b", files)
	hostOn := func(r *replicaOf) string {
		e := r.Store().View().Get(seColl, "shop/api")
		if e == nil {
			return ""
		}
		_, v := e.Body()
		return string(v)
	}
	if !waitUntil(t, func() bool {
		return strings.Contains(hostOn(a), "one.example.com") && strings.Contains(hostOn(b), "one.example.com")
	}) {
		t.Fatal("the files' ServiceEntry is not served on both replicas")
	}
	ingesting := func() []string {
		var out []string
		for _, r := range []*replicaOf{a, b} {
			if r.etcd.Ingesting() {
				out = append(out, r.etcd.Replica())
			}
		}
		return out
	}
	if got := ingesting(); len(got) != 1 {
		t.Fatalf("replicas ingesting the files: %v, want exactly one", got)
	}
	leader, other := a, b
	if b.etcd.Ingesting() {
		leader, other = b, a
	}
	leader.stop()
	if !waitUntil(t, func() bool { return other.etcd.Ingesting() }) {
		t.Fatal("no replica took over the files when the ingester stopped")
	}
	write("two.example.com")
	if !waitUntil(t, func() bool { return strings.Contains(hostOn(other), "two.example.com") }) {
		t.Fatal("an edit after the take-over is not served")
	}
}
