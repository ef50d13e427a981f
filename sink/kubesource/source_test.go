package kubesource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/kubetest"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/store"
	"go.uber.org/goleak"
	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster.srv != nil {
		cluster.srv.Stop()
		_ = os.RemoveAll(cluster.dir)
	}
	if code == 0 {
		code = verifyNoLeaks()
	}
	os.Exit(code)
}

func verifyNoLeaks() int {
	err := goleak.Find(
		// client-go's process-wide workers, started once by its packages and never stopped.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goroutines left after the tests:", err)
		return 1
	}
	return 0
}

const seColl = "istio/networking/v1alpha3/serviceentries"

var (
	seGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"}
	vsGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	nsGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// cluster is an API server with Istio's CRDs, shared by the tests that do not restart it;
// TestMain stops it.
var cluster struct {
	once sync.Once
	dir  string
	srv  *kubetest.Server
}

func sharedCluster(t *testing.T) *kubetest.Server {
	t.Helper()
	cluster.once.Do(func() {
		dir, err := os.MkdirTemp("", "kubesource-test-")
		if err != nil {
			t.Fatal(err)
		}
		srv := kubetest.StartShared(t, dir)
		srv.InstallIstioCRDs(t)
		cluster.srv, cluster.dir = srv, dir
	})
	if cluster.srv == nil {
		t.Fatal("the shared API server did not start (see the first test's failure)")
	}
	return cluster.srv
}

func remove(t *testing.T, c dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	if err := c.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

func namespace(name string, labels string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {%s}\n", name, labels)
}

func serviceEntry(ns, name, host string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %s
  namespace: %s
  labels: {app: %s}
spec:
  hosts: [%s]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
`, name, ns, name, host)
}

// running is a source over a fresh store.
type running struct {
	src      *Source
	st       *store.Store
	cancel   func()
	done     chan error
	stopOnce sync.Once
}

func startSource(t *testing.T, opts Options) *running {
	t.Helper()
	if opts.Store == nil {
		opts.Store = store.New(store.Options{Validate: kinds.ValidateResource})
	}
	src, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, src, opts.Store.(*store.Store))
}

// run runs a source and waits until it is ready.
func run(t *testing.T, src *Source, st *store.Store) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{src: src, st: st, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx) }()
	t.Cleanup(r.stop)
	select {
	case <-src.Ready():
	case err := <-r.done:
		t.Fatalf("source ended before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("source not ready after 30s; faults: %v", src.Faults())
	}
	return r
}

func (r *running) stop() {
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			panic("kubernetes source did not stop 10s after its context ended")
		}
	})
}

// hosts are the hosts of every ServiceEntry the store serves in a namespace, by name.
func (r *running) hosts(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_, entries := r.st.View().Snapshot(seColl)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name, ns+"/") {
			continue
		}
		out[e.Name] = strings.Join(decodeServiceEntry(t, e).Hosts, ",")
	}
	return out
}

// decodeServiceEntry is the body of a stored ServiceEntry.
func decodeServiceEntry(t *testing.T, e *store.Entry) *networking.ServiceEntry {
	t.Helper()
	res, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	var se networking.ServiceEntry
	if err := res.GetBody().UnmarshalTo(&se); err != nil {
		t.Fatal(err)
	}
	return &se
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantHosts(t *testing.T, r *running, ns string, want map[string]string) {
	t.Helper()
	var got map[string]string
	eventually(t, fmt.Sprintf("want ServiceEntries %v in %s", want, ns), func() bool {
		got = r.hosts(t, ns)
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
}

func TestIstioObjectsCreatedUpdatedDeletedReachTheStore(t *testing.T) {
	srv := sharedCluster(t)
	c := srv.Dynamic(t)
	srv.Apply(t, nsGVR, namespace("crud", ""))
	srv.Apply(t, seGVR, serviceEntry("crud", "before", "before.example.com"))
	r := startSource(t, Options{Kubeconfig: srv.Kubeconfig})

	// The first state holds what was there before the source started.
	if got := r.hosts(t, "crud"); got["crud/before"] != "before.example.com" {
		t.Fatalf("first state: %v, want crud/before", got)
	}
	srv.Apply(t, seGVR, serviceEntry("crud", "a", "a.example.com"))
	wantHosts(t, r, "crud", map[string]string{"crud/a": "a.example.com", "crud/before": "before.example.com"})
	srv.Apply(t, seGVR, serviceEntry("crud", "a", "a2.example.com"))
	wantHosts(t, r, "crud", map[string]string{"crud/a": "a2.example.com", "crud/before": "before.example.com"})
	remove(t, c, seGVR, "crud", "before")
	wantHosts(t, r, "crud", map[string]string{"crud/a": "a2.example.com"})

	// The resource is what istiod would read: labels, creationTimestamp, owner.
	e := r.st.View().Get(seColl, "crud/a")
	if !e.BodyChecked() {
		t.Errorf("crud/a: a body decoded as a file's document is not vouched for")
	}
	res, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := c.Resource(seGVR).Namespace("crud").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata.Labels["app"] != "a" || !res.Metadata.CreateTime.AsTime().Equal(obj.GetCreationTimestamp().Time) {
		t.Fatalf("metadata %v: want the object's labels and its creationTimestamp %v as create_time", res.Metadata, obj.GetCreationTimestamp())
	}
	if e.Owner != DefaultOwner {
		t.Fatalf("owner %q, want %q", e.Owner, DefaultOwner)
	}

	// Another kind, read in the version the cluster prefers.
	srv.Apply(t, vsGVR, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: crud}
spec:
  hosts: [a2.example.com]
  http: [{route: [{destination: {host: a2.example.com}}]}]
`)
	eventually(t, "the VirtualService in the store", func() bool {
		return r.st.View().Get("istio/networking/v1alpha3/virtualservices", "crud/vs") != nil
	})
	if st := r.src.Stats(); st.Objects[seColl] < 1 || st.LastSync.IsZero() {
		t.Fatalf("stats %+v: want the ServiceEntries counted and a last sync", st)
	}
}

func TestInvalidObjectIsAFaultNamingItsFieldAndTheRestIsServed(t *testing.T) {
	srv := sharedCluster(t)
	c := srv.Dynamic(t)
	srv.Apply(t, nsGVR, namespace("invalid", ""))
	srv.Apply(t, seGVR, serviceEntry("invalid", "good", "good.example.com"))
	// Accepted by the CRD's schema, refused by istiod's validation: a STATIC ServiceEntry's
	// endpoint must be an IP address.
	bad := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bad, namespace: invalid}
spec:
  hosts: [bad.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: not-an-ip.example.com}]
`
	srv.Apply(t, seGVR, bad)
	// Not left broken in the shared cluster, where other tests' sources would see its fault.
	t.Cleanup(func() { remove(t, c, seGVR, "invalid", "bad") })
	r := startSource(t, Options{Kubeconfig: srv.Kubeconfig})
	wantHosts(t, r, "invalid", map[string]string{"invalid/good": "good.example.com"})
	faults := r.src.Faults()
	var de *filesource.DecodeError
	if len(faults) != 1 || !errors.As(faults[0], &de) {
		t.Fatalf("faults %v: want one, of the bad object", faults)
	}
	if de.Kind != "ServiceEntry" || de.Name != "invalid/bad" || !strings.HasPrefix(de.Field, "spec.endpoints[0]") {
		t.Fatalf("fault %q: want it to name ServiceEntry invalid/bad and its field spec.endpoints[0]", faults[0])
	}

	// Fixed, it is served and the fault clears.
	srv.Apply(t, seGVR, strings.Replace(bad, "not-an-ip.example.com", "10.0.0.1", 1))
	wantHosts(t, r, "invalid", map[string]string{"invalid/bad": "bad.example.com", "invalid/good": "good.example.com"})
	eventually(t, "the fault cleared", func() bool { return len(r.src.Faults()) == 0 })

	// Broken again: the last valid version stays served, and the fault is back.
	srv.Apply(t, seGVR, strings.Replace(bad, "bad.example.com]", "bad2.example.com]", 1))
	eventually(t, "the fault back", func() bool { return len(r.src.Faults()) == 1 })
	if got := r.hosts(t, "invalid"); got["invalid/bad"] != "bad.example.com" {
		t.Fatalf("after a breaking edit: %v, want the last valid version of invalid/bad", got)
	}
}

func TestNamespacesBySelectorAndListFollowLabelChanges(t *testing.T) {
	srv := sharedCluster(t)
	srv.Apply(t, nsGVR, namespace("sel-a", "mesh: enabled"))
	srv.Apply(t, nsGVR, namespace("sel-b", ""))
	srv.Apply(t, nsGVR, namespace("sel-listed", ""))
	for _, ns := range []string{"sel-a", "sel-b", "sel-listed"} {
		srv.Apply(t, seGVR, serviceEntry(ns, "se", ns+".example.com"))
	}
	r := startSource(t, Options{Kubeconfig: srv.Kubeconfig, Namespaces: []string{"sel-listed"}, NamespaceSelector: "mesh=enabled"})
	for ns, want := range map[string]bool{"sel-a": true, "sel-b": false, "sel-listed": true} {
		if got := len(r.hosts(t, ns)) == 1; got != want {
			t.Fatalf("first state: namespace %s served %v, want %v", ns, got, want)
		}
	}
	// sel-b joins the selector: its objects are added; sel-a leaves it: its objects are removed.
	srv.Apply(t, nsGVR, namespace("sel-b", "mesh: enabled"))
	wantHosts(t, r, "sel-b", map[string]string{"sel-b/se": "sel-b.example.com"})
	srv.Apply(t, nsGVR, namespace("sel-a", "mesh: disabled"))
	wantHosts(t, r, "sel-a", map[string]string{})
	// An object created in a namespace outside the selection is not read.
	srv.Apply(t, seGVR, serviceEntry("sel-a", "late", "late.example.com"))
	srv.Apply(t, seGVR, serviceEntry("sel-b", "late", "late-b.example.com"))
	wantHosts(t, r, "sel-b", map[string]string{"sel-b/late": "late-b.example.com", "sel-b/se": "sel-b.example.com"})
	if got := r.hosts(t, "sel-a"); len(got) != 0 {
		t.Fatalf("namespace outside the selector served: %v", got)
	}
}

func TestNewRefusesABadSelector(t *testing.T) {
	_, err := New(Options{Store: store.New(store.Options{}), NamespaceSelector: "mesh in (on"})
	if err == nil || !strings.Contains(err.Error(), "namespace_selector") || !strings.Contains(err.Error(), "mesh in (on") {
		t.Fatalf("err %v: want one naming namespace_selector and its value", err)
	}
}

func TestUnreachableAPIServerIsAFaultAndNotReady(t *testing.T) {
	st := store.New(store.Options{})
	src, err := New(Options{Kubeconfig: writeKubeconfig(t, "https://127.0.0.1:1"), Store: st, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	eventually(t, "a fault naming the API server", func() bool {
		f := src.Faults()
		return len(f) == 1 && strings.Contains(f[0].Error(), "https://127.0.0.1:1")
	})
	select {
	case <-src.Ready():
		t.Fatal("ready while the API server never answered")
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v, want nil once its context ended", err)
	}
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := t.TempDir() + "/kubeconfig"
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
