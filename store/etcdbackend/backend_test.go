package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/etcdtest"
	"github.com/mcpbridge/mcpbridge/internal/testlog"
	"github.com/mcpbridge/mcpbridge/store"
)

const coll = "test/things"

func resource(t testing.TB, name, content string) *mcpapi.Resource {
	t.Helper()
	body, err := anypb.New(wrapperspb.String(content))
	if err != nil {
		t.Fatal(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

func resources(t testing.TB, n int, content string) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, n)
	for i := range out {
		out[i] = resource(t, fmt.Sprintf("ns/r%05d", i), content)
	}
	return out
}

// replica is a store and its backend, following etcd until the test ends.
type replica struct {
	st *store.Store
	b  *Backend
}

func startReplica(t *testing.T, cli *clientv3.Client, name string, tune func(*Options)) *replica {
	t.Helper()
	st := store.New(store.Options{})
	opts := Options{Client: cli, Store: st, Replica: name, Prefix: "/" + t.Name() + "/", Logger: testlog.New(t), RequestTimeout: 3 * time.Second, SessionTTL: 2 * time.Second}
	if tune != nil {
		tune(&opts)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		b.Close()
	})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &replica{st: st, b: b}
}

// held is name → the stored bytes of what the store serves in coll.
func (r *replica) held() map[string]string {
	_, entries := r.st.View().Snapshot(coll)
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		out[e.Name] = string(e.Bytes)
	}
	return out
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sameAs(want map[string]string) func(*replica) error {
	return func(r *replica) error {
		got := r.held()
		if !maps.Equal(got, want) {
			return fmt.Errorf("holds %d resources, want %d (or different bytes)", len(got), len(want))
		}
		return nil
	}
}

func TestPushToOneReplicaReachesTheOthers(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a, b := startReplica(t, cli, "a", nil), startReplica(t, cli, "b", nil)

	res, err := a.b.Apply("producer-1", store.Update{Collection: coll, Full: true, Resources: resources(t, 20, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 20 {
		t.Fatalf("the write changed %d served entries on the replica that took it, want 20: acknowledged before applied?", res.Changed)
	}
	want := a.held()
	if len(want) != 20 {
		t.Fatalf("replica a holds %d once the write returned, want 20", len(want))
	}
	eventually(t, "replica b holds what a took, byte for byte (same versions)", func() error { return sameAs(want)(b) })

	// An incremental update and a removal travel the same way.
	if _, err := a.b.Apply("producer-1", store.Update{Collection: coll, Resources: []*mcpapi.Resource{resource(t, "ns/r00000", "v2")}, Removed: []string{"ns/r00001"}}); err != nil {
		t.Fatal(err)
	}
	want = a.held()
	if len(want) != 19 || !strings.Contains(want["ns/r00000"], "v2") {
		t.Fatalf("after the incremental update a holds %d, r00000 %q", len(want), want["ns/r00000"])
	}
	eventually(t, "replica b follows the incremental update", func() error { return sameAs(want)(b) })
}

func TestUnchangedResourcesAreNotWrittenAgain(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a := startReplica(t, cli, "a", nil)
	rs := resources(t, 10, "v1")
	if _, err := a.b.Apply("p", store.Update{Collection: coll, Full: true, Resources: rs}); err != nil {
		t.Fatal(err)
	}
	before := resourceRevisions(t, cli)
	res, err := a.b.Apply("p", store.Update{Collection: coll, Full: true, Resources: rs})
	if err != nil {
		t.Fatal(err)
	}
	if after := resourceRevisions(t, cli); res.Changed != 0 || !maps.Equal(after, before) {
		t.Fatalf("the same full state again changed %d entries and rewrote keys (%v, then %v); want nothing written", res.Changed, before, after)
	}
}

// resourceRevisions is every key of the test's prefix with its modification revision but the
// replicas' alive keys, which a probe may write again (markProgress): resources, sequences,
// chunks and commit records, whatever a write writes.
func resourceRevisions(t *testing.T, cli *clientv3.Client) map[string]int64 {
	t.Helper()
	prefix := "/" + t.Name() + "/"
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), prefix+alivePrefix) {
			out[string(kv.Key)] = kv.ModRevision
		}
	}
	if len(out) == 0 {
		t.Fatal("no keys written: the prefix or the key layout moved")
	}
	return out
}

// TestLargeWriteIsSeenWholeOrNotAtAll: a write beyond one etcd transaction goes as chunks and a
// commit record; a replica watching never serves part of it.
func TestLargeWriteIsSeenWholeOrNotAtAll(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	small := func(o *Options) { o.MaxTxnOps, o.MaxTxnBytes = 10, 4096 }
	a, b := startReplica(t, cli, "a", small), startReplica(t, cli, "b", small)

	const n = 600
	var seen sync.Map
	w := b.st.Watch(coll)
	defer w.Close()
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-w.C():
				// How many resources b serves, and how many of them are of the second write:
				// each write is seen whole or not at all only if both are 0 or n.
				held, v2 := b.held(), 0
				for _, body := range held {
					if strings.Contains(body, "v2") {
						v2++
					}
				}
				seen.Store([2]int{len(held), v2}, true)
			}
		}
	}()
	if _, err := a.b.Apply("big", store.Update{Collection: coll, Full: true, Resources: resources(t, n, "v1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b holds the large write", func() error { return sameAs(a.held())(b) })
	// And a large change of all of them.
	if _, err := a.b.Apply("big", store.Update{Collection: coll, Full: true, Resources: resources(t, n, "v2")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b holds the second large write", func() error { return sameAs(a.held())(b) })
	close(stop)
	<-watched
	seen.Range(func(k, _ any) bool {
		c := k.([2]int)
		if c[0] != 0 && c[0] != n || c[1] != 0 && c[1] != n {
			t.Errorf("replica b served %d resources, %d of them of the second write, of writes of %d at one point", c[0], c[1], n)
		}
		return true
	})

	// The commit is copied to the owner's keys and cleaned up: etcd holds r/ keys only.
	resp, err := cli.Get(context.Background(), a.b.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, kv := range resp.Kvs {
		counts[strings.TrimPrefix(string(kv.Key), a.b.prefix)[:2]]++
	}
	if counts[resourcePrefix] != n || counts[chunkPrefix] != 0 || counts[commitPrefix] != 0 {
		t.Fatalf("etcd holds %v, want %d r/ keys and no chunks or commit records", counts, n)
	}
	// A replica started now loads exactly that.
	c := startReplica(t, cli, "c", small)
	if err := sameAs(a.held())(c); err != nil {
		t.Fatalf("a replica started after the write: %v", err)
	}
}

// TestCommittedWriteOfADeadReplicaIsFinishedByTheNext: a replica that dies between the commit
// record and copying it leaves the write applied everywhere; the owner's next write (on any
// replica) finishes the copy first, and a replica loading meanwhile sees the whole write.
func TestCommittedWriteOfADeadReplicaIsFinishedByTheNext(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	small := func(o *Options) { o.MaxTxnOps, o.MaxTxnBytes = 10, 4096 }
	a, b := startReplica(t, cli, "a", small), startReplica(t, cli, "b", small)

	// What a's write would have committed, with a dying before materialize.
	prepared, err := a.st.Prepare(store.Update{Collection: coll, Full: true, Resources: resources(t, 100, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := store.NewPlan(a.st.View(), "owner", prepared, false)
	if err != nil {
		t.Fatal(err)
	}
	ops := opsOf(plan)
	if _, _, err := a.b.commitChunked(context.Background(), "owner", 0, 0, ops); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, e := range prepared[0].Encoded {
		want[e.Name()] = string(e.Bytes())
	}
	eventually(t, "b applies the committed write", func() error { return sameAs(want)(b) })
	c := startReplica(t, cli, "c", small)
	if err := sameAs(want)(c); err != nil {
		t.Fatalf("a replica loading while the commit is pending: %v", err)
	}
	// The owner's next write, on b: one resource changes.
	if _, err := b.b.Apply("owner", store.Update{Collection: coll, Resources: []*mcpapi.Resource{resource(t, "ns/r00003", "v2")}}); err != nil {
		t.Fatal(err)
	}
	want = b.held()
	for _, r := range []*replica{a, c} {
		eventually(t, "every replica follows", func() error { return sameAs(want)(r) })
	}
	d := startReplica(t, cli, "d", small)
	if err := sameAs(want)(d); err != nil {
		t.Fatalf("a replica loading after the pending commit was finished: %v", err)
	}
}

func TestConcurrentWritesOfOneOwnerOnTwoReplicas(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a, b := startReplica(t, cli, "a", nil), startReplica(t, cli, "b", nil)
	var wg sync.WaitGroup
	for i, r := range []*replica{a, b} {
		wg.Go(func() {
			for j := range 20 {
				name := fmt.Sprintf("ns/from-%d-%02d", i, j)
				if _, err := r.b.Apply("shared", store.Update{Collection: coll, Resources: []*mcpapi.Resource{resource(t, name, "x")}}); err != nil {
					t.Errorf("write %s: %v", name, err)
				}
			}
		})
	}
	wg.Wait()
	eventually(t, "both replicas hold all 40 incremental writes", func() error {
		for _, r := range []*replica{a, b} {
			if n := len(r.held()); n != 40 {
				return fmt.Errorf("%s holds %d", r.b.name, n)
			}
		}
		return nil
	})
}

func TestAllReplicasRestartedLoadTheSameVersions(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a := startReplica(t, cli, "a", nil)
	if _, err := a.b.Apply("p1", store.Update{Collection: coll, Full: true, Resources: resources(t, 50, "v1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.b.Apply("p2", store.Update{Collection: "test/other", Full: true, Resources: resources(t, 5, "v1")}); err != nil {
		t.Fatal(err)
	}
	want := a.held()
	// A fresh replica, no producer connected: ready from etcd alone.
	b := startReplica(t, cli, "b", nil)
	if ok, why := b.b.Ready(); !ok {
		t.Fatalf("a replica loaded from etcd is not ready: %s", why)
	}
	if err := sameAs(want)(b); err != nil {
		t.Fatal(err)
	}
	if _, other := b.st.View().Snapshot("test/other"); len(other) != 5 {
		t.Fatalf("test/other: %d resources after the restart, want 5", len(other))
	}
	for name, bytes := range want {
		if e := b.st.View().Get(coll, name); e == nil || e.Version != a.st.View().Get(coll, name).Version || string(e.Bytes) != bytes {
			t.Fatalf("%s: not served with the same version after the restart", name)
		}
	}
}

func TestOwnerLeaseExpiresOnEveryReplica(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a, b := startReplica(t, cli, "a", nil), startReplica(t, cli, "b", nil)
	const expiry = 2 * time.Second
	if _, err := a.b.SetOwnerPresence("producer", true, expiry); err != nil {
		t.Fatal(err)
	}
	if _, err := a.b.Apply("producer", store.Update{Collection: coll, Full: true, Resources: resources(t, 10, "v1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b holds the producer's resources", func() error { return sameAs(a.held())(b) })

	// Held alive while connected: past the expiry, nothing is gone.
	time.Sleep(expiry + time.Second)
	if n := len(b.held()); n != 10 {
		t.Fatalf("a connected producer's resources expired: b holds %d", n)
	}
	// It leaves a; it comes back to b before the expiry: kept.
	if _, err := a.b.SetOwnerPresence("producer", false, expiry); err != nil {
		t.Fatal(err)
	}
	if _, err := b.b.SetOwnerPresence("producer", true, expiry); err != nil {
		t.Fatal(err)
	}
	time.Sleep(expiry + time.Second)
	if n := len(a.held()); n != 10 {
		t.Fatalf("a producer that moved to another replica before its expiry lost its resources: a holds %d", n)
	}
	// It leaves b too: no replica keeps its lease alive, and it is gone everywhere (the case
	// of the replica it left being dead is app's TestProducerLeaseExpiresOnEveryReplica).
	if _, err := b.b.SetOwnerPresence("producer", false, expiry); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, "the producer's resources expire on every replica", func() error {
		for _, r := range []*replica{a, b} {
			if n := len(r.held()); n != 0 {
				return fmt.Errorf("%s still holds %d", r.b.name, n)
			}
		}
		return nil
	})
	if took := time.Since(start); took < expiry/2 {
		t.Fatalf("expired after %s, before the expiry of %s", took, expiry)
	}
}

func TestPresenceFollowsStreamsOnAnyReplica(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a, b := startReplica(t, cli, "a", nil), startReplica(t, cli, "b", nil)
	// Two owners hold one name; the present one is served on every replica.
	for _, owner := range []string{"x", "y"} {
		if _, err := a.b.SetOwnerPresence(owner, true, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := a.b.Apply(owner, store.Update{Collection: coll, Full: true, Resources: []*mcpapi.Resource{resource(t, "ns/same", owner)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.b.SetOwnerPresence("x", false, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b serves y's copy once x is absent", func() error {
		if got := b.held()["ns/same"]; !strings.Contains(got, "y") {
			return fmt.Errorf("serves %q", got)
		}
		return nil
	})
}

func TestWriteWhileEtcdIsDownIsRefusedUnavailable(t *testing.T) {
	t.Parallel()
	cluster := etcdtest.Start(t, 1)
	cli := cluster.Client()
	a := startReplica(t, cli, "a", func(o *Options) { o.RequestTimeout = 500 * time.Millisecond })
	if _, err := a.b.Apply("p", store.Update{Collection: coll, Full: true, Resources: resources(t, 3, "v1")}); err != nil {
		t.Fatal(err)
	}
	cluster.Members[0].Kill()
	_, err := a.b.Apply("p", store.Update{Collection: coll, Full: true, Resources: resources(t, 3, "v2")})
	var ue *store.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("a write with etcd down: %v, want a *store.UnavailableError", err)
	}
	if n := len(a.held()); n != 3 || !strings.Contains(a.held()["ns/r00000"], "v1") {
		t.Fatal("the replica stopped serving its last good state")
	}
	eventually(t, "the replica reports not ready", func() error {
		if ok, _ := a.b.Ready(); ok {
			return errors.New("still ready")
		}
		return nil
	})
	_, why := a.b.Ready()
	t.Logf("not ready: %s", why)

	cluster.Restart(cluster.Members[0])
	cluster.WaitHealthy()
	eventually(t, "ready again once etcd is back", func() error {
		if ok, why := a.b.Ready(); !ok {
			return errors.New(why)
		}
		return nil
	})
	if _, err := a.b.Apply("p", store.Update{Collection: coll, Full: true, Resources: resources(t, 3, "v2")}); err != nil {
		t.Fatalf("a write after etcd came back: %v", err)
	}
	if !strings.Contains(a.held()["ns/r00000"], "v2") {
		t.Fatal("the write after etcd came back is not served")
	}
}

func TestReplicaCatchesUpAfterCompaction(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a := startReplica(t, cli, "a", nil)
	if _, err := a.b.Apply("p", store.Update{Collection: coll, Full: true, Resources: resources(t, 5, "v1")}); err != nil {
		t.Fatal(err)
	}
	// b loads now, but follows only from an old revision that etcd then compacts away.
	st := store.New(store.Options{})
	b, err := New(Options{Client: cli, Store: st, Replica: "b", Prefix: a.b.prefix, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := b.load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.b.Apply("p", store.Update{Collection: coll, Full: true, Resources: resources(t, 7, "v2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), a.b.Applied()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.follow(ctx, rev)
	r := &replica{st: st, b: b}
	eventually(t, "b reloads past the compaction", func() error { return sameAs(a.held())(r) })
}

func TestChunkDecoderRefusesGarbage(t *testing.T) {
	good := appendOp(appendOp(nil, op{key: resourceKey("o", coll, "ns/a"), value: []byte("x")}), op{del: true, key: resourceKey("o", coll, "ns/b")})
	ops, err := decodeChunk(good)
	if err != nil || len(ops) != 2 || ops[0].del || !ops[1].del {
		t.Fatalf("decodeChunk(good) = %v, %v", ops, err)
	}
	for _, bad := range [][]byte{{9}, {1, 200}, good[:len(good)-1], appendOp(nil, op{key: "x/not-a-resource", value: nil})} {
		if _, err := decodeChunk(bad); err == nil {
			t.Errorf("decodeChunk(%q) accepted", bad)
		}
	}
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(appendOp(nil, op{key: resourceKey("o", coll, "ns/a"), value: []byte("x")}))
	f.Add([]byte{1, 3, 'r', '/', 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := decodeChunk(b)
		if err != nil {
			return
		}
		var again []byte
		for _, o := range ops {
			again = appendOp(again, o)
		}
		back, err := decodeChunk(again)
		if err != nil || !slices.EqualFunc(back, ops, func(x, y op) bool { return x.del == y.del && x.key == y.key && string(x.value) == string(y.value) }) {
			t.Fatalf("re-encoded chunk decodes differently: %v", err)
		}
	})
}

// TestChunksNoWriterCanCommitAreCollected: the chunks of a large write whose writer's session
// lease is gone and that no commit record names are deleted; those of a live writer, and of a
// committed write not yet copied, stay.
func TestChunksNoWriterCanCommitAreCollected(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a := startReplica(t, cli, "a", nil)
	ctx := context.Background()
	grant := func() clientv3.LeaseID {
		g, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	dead, live, deadCommitted := grant(), grant(), grant()
	chunk := appendOp(nil, op{key: resourceKey("o", coll, "ns/x"), value: []byte("x")})
	put := func(key string) {
		if _, err := cli.Put(ctx, a.b.prefix+key, string(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	orphan, running, committed := newTxID(dead), newTxID(live), newTxID(deadCommitted)
	for _, txid := range []string{orphan, running, committed} {
		put(chunkKey("o", txid, 0))
		put(chunkKey("o", txid, 1))
	}
	if _, err := cli.Put(ctx, a.b.prefix+commitKey("o", committed), "2"); err != nil {
		t.Fatal(err)
	}
	for _, l := range []clientv3.LeaseID{dead, deadCommitted} {
		if _, err := cli.Revoke(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	n, err := a.b.collectOrphans(ctx)
	if err != nil || n != 1 {
		t.Fatalf("collectOrphans = %d, %v; want 1 write's chunks deleted", n, err)
	}
	for txid, want := range map[string]int64{orphan: 0, running: 2, committed: 2} {
		resp, err := cli.Get(ctx, a.b.prefix+chunksPrefix("o", txid), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != want {
			t.Errorf("chunks of %s: %d left, want %d", txid, resp.Count, want)
		}
	}
}

// TestLargeWriteCommitsOnlyWhileItsSessionIsAlive: without this replica's alive key on the
// session lease its chunks name, a large write's commit record is refused (so chunks of a
// lost session are never committed late), the write fails Unavailable with its chunks
// deleted, and succeeds once the replica is alive again.
func TestLargeWriteCommitsOnlyWhileItsSessionIsAlive(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	small := func(o *Options) { o.MaxTxnOps, o.MaxTxnBytes = 10, 4096 }
	a := startReplica(t, cli, "a", small)
	ctx := context.Background()
	if _, err := cli.Delete(ctx, a.b.prefix+aliveKey("a")); err != nil {
		t.Fatal(err)
	}
	_, err := a.b.Apply("o", store.Update{Collection: coll, Full: true, Resources: resources(t, 100, "v1")})
	var ue *store.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("a large write without the alive key: %v, want Unavailable", err)
	}
	resp, err := cli.Get(ctx, a.b.prefix+chunkPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("%d chunks left behind by refused commits (%v)", resp.Count, err)
	}
	if n := len(a.held()); n != 0 {
		t.Fatalf("a refused write was applied: %d resources", n)
	}
	if err := a.b.session.markAlive(ctx, a.b.session.current()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.b.Apply("o", store.Update{Collection: coll, Full: true, Resources: resources(t, 100, "v1")}); err != nil {
		t.Fatalf("the write once alive again: %v", err)
	}
	if n := len(a.held()); n != 100 {
		t.Fatalf("holds %d after the write, want 100", n)
	}
}

// TestWritesOfOthersInEtcdDoNotStallAReplica: etcd's revision is global; writes under another
// prefix (another deployment sharing the etcd, or another replica set's expiring keys) move it
// while this replica's watch, on its own prefix, sees none of them. The replica must stay
// ready and take writes at once: it asks its watch for progress rather than waiting for
// revisions it will never be sent (it used to refuse every write, "catching up with etcd",
// until etcd's next unprompted progress notification, ten minutes by default).
func TestWritesOfOthersInEtcdDoNotStallAReplica(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t, 1).Client()
	a := startReplica(t, cli, "a", nil)
	if _, err := a.b.Apply("producer-1", store.Update{Collection: coll, Full: true, Resources: resources(t, 3, "v1")}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // beside it, under a prefix it does not follow
		if _, err := cli.Put(context.Background(), fmt.Sprintf("/someone-else/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	// Past a probe or two, which see the new revision.
	time.Sleep(3 * a.b.probeInterval())
	if ok, why := a.b.Ready(); !ok {
		t.Errorf("not ready after others wrote beside it: %s", why)
	}
	start := time.Now()
	if _, err := a.b.Apply("producer-1", store.Update{Collection: coll, Full: true, Resources: resources(t, 3, "v2")}); err != nil {
		t.Fatalf("a write after others wrote beside it: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the write took %v: it waited for revisions its watch is never sent", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start = time.Now()
	a.b.CatchUp(ctx)
	if took := time.Since(start); took > time.Second {
		t.Errorf("CatchUp took %v after others wrote beside it", took)
	}
}
