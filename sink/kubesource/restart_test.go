package kubesource

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"k8s.io/client-go/dynamic"

	"github.com/mcpbridge/mcpbridge/internal/kubetest"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A watch broken (the connection cut) while the cluster changes: the informer lists again once
// it can, and what changed meanwhile, a deletion included, reaches the store; the last state
// is served while cut off, and the restarts and relists are counted.
func TestBrokenWatchRelistsAndConverges(t *testing.T) {
	srv := kubetest.StartWith(t, []string{"--watch-cache=false", "--etcd-compaction-interval=1s"}, "w")
	srv.InstallIstioCRDs(t)
	c := srv.Dynamic(t)
	srv.Apply(t, seGVR, serviceEntry("w", "a", "a.example.com"))
	proxy := kubetest.NewProxy(t, srv.Address())
	r := startSource(t, Options{Kubeconfig: proxy.Kubeconfig(t, srv)})
	wantHosts(t, r, "w", map[string]string{"w/a": "a.example.com"})

	proxy.Cut()
	// Every version the source has seen is at most this list's.
	seen, err := c.Resource(seGVR).Namespace("w").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	remove(t, c, seGVR, "w", "a")
	srv.Apply(t, seGVR, serviceEntry("w", "b", "b.example.com"))
	eventually(t, "etcd compacted past the source's last version", func() bool {
		return compacted(t, c, "w", seen.GetResourceVersion())
	})
	if got := r.hosts(t, "w"); len(got) != 1 || got["w/a"] == "" {
		t.Fatalf("while cut off: %v, want the last state (w/a) kept", got)
	}
	eventually(t, "a fault while the API server cannot be reached", func() bool { return len(r.src.Faults()) > 0 })
	proxy.Resume()
	wantHosts(t, r, "w", map[string]string{"w/b": "b.example.com"})
	eventually(t, "the faults cleared once the API server answers", func() bool { return len(r.src.Faults()) == 0 })

	st := r.src.Stats()
	const res = "serviceentries.networking.istio.io"
	if st.WatchRestarts[res] == 0 || st.Relists[res] == 0 {
		t.Fatalf("stats %+v: want the ServiceEntry watch's restart and its relist counted", st)
	}
}

// A watch that ends (as an API server ends every watch after 5 to 10 minutes; here after a
// second) resumes from the last version the informer saw; once etcd is compacted past it, the
// API server answers 410 Gone and the informer lists everything again. The state stays right
// through it, and the 410 and the relist are counted.
func TestGoneWatchForcesARelist(t *testing.T) {
	srv := kubetest.StartWith(t, []string{"--watch-cache=false", "--etcd-compaction-interval=1s"}, "g")
	srv.InstallIstioCRDs(t)
	c := srv.Dynamic(t)
	srv.Apply(t, seGVR, serviceEntry("g", "a", "a.example.com"))
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	src, err := New(Options{Kubeconfig: srv.Kubeconfig, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	src.watchTimeout = time.Second
	r := run(t, src, st)
	srv.Apply(t, seGVR, serviceEntry("g", "b", "b.example.com"))
	wantHosts(t, r, "g", map[string]string{"g/a": "a.example.com", "g/b": "b.example.com"})
	b, err := c.Resource(seGVR).Namespace("g").Get(context.Background(), "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Writes of another resource move etcd past the informer's last ServiceEntry version.
	const res = "serviceentries.networking.istio.io"
	for i := 0; r.src.Stats().Gone[res] == 0; i++ {
		if i == 200 {
			t.Fatalf("no 410 Gone counted after 20s; stats %+v", r.src.Stats())
		}
		srv.Apply(t, configMapGVR, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bump, namespace: g}\ndata: {i: %q}\n", fmt.Sprint(i)))
		time.Sleep(100 * time.Millisecond)
	}
	if !compacted(t, c, "g", b.GetResourceVersion()) {
		t.Fatal("a 410 Gone was counted but etcd is not compacted past the last ServiceEntry")
	}
	eventually(t, "the relist after the 410 counted", func() bool { return r.src.Stats().Relists[res] > 0 })
	srv.Apply(t, seGVR, serviceEntry("g", "c", "c.example.com"))
	wantHosts(t, r, "g", map[string]string{"g/a": "a.example.com", "g/b": "b.example.com", "g/c": "c.example.com"})
}

// A bridge restarted over a store that holds its last state (etcd) drops what was deleted in
// the cluster while it was down: its first write is the whole state.
func TestRestartedSourceDropsWhatWasDeletedMeanwhile(t *testing.T) {
	srv := sharedCluster(t)
	c := srv.Dynamic(t)
	srv.Apply(t, nsGVR, namespace("again", ""))
	srv.Apply(t, seGVR, serviceEntry("again", "stays", "stays.example.com"))
	srv.Apply(t, seGVR, serviceEntry("again", "goes", "goes.example.com"))
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	first := startSource(t, Options{Kubeconfig: srv.Kubeconfig, Store: st})
	wantHosts(t, first, "again", map[string]string{"again/goes": "goes.example.com", "again/stays": "stays.example.com"})
	first.stop()

	remove(t, c, seGVR, "again", "goes")
	second := startSource(t, Options{Kubeconfig: srv.Kubeconfig, Store: st})
	if got := second.hosts(t, "again"); len(got) != 1 || got["again/stays"] == "" {
		t.Fatalf("first state after the restart: %v, want again/stays only", got)
	}
}

// compacted says whether a ServiceEntry watch of namespace ns from version rv is answered 410
// Gone: exactly
// what the source's informer meets when it resumes from there.
func compacted(t *testing.T, c dynamic.Interface, ns, rv string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w, err := c.Resource(seGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		err := apierrors.FromObject(ev.Object)
		return ev.Type == "ERROR" && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err))
	case <-ctx.Done():
		return false
	}
}

var configMapGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// Istio's CRDs installed after the source started: their kinds are read from then on,
// without a restart.
func TestCRDsInstalledLaterAreRead(t *testing.T) {
	srv := kubetest.Start(t, "late")
	r := startSource(t, Options{Kubeconfig: srv.Kubeconfig})
	if n := len(r.src.Stats().NotServed); n == 0 {
		t.Fatal("no kind reported not served by a cluster without Istio's CRDs")
	}
	srv.InstallIstioCRDs(t)
	srv.Apply(t, seGVR, serviceEntry("late", "a", "a.example.com"))
	wantHosts(t, r, "late", map[string]string{"late/a": "a.example.com"})
	eventually(t, "every kind served", func() bool { return len(r.src.Stats().NotServed) == 0 })
}
