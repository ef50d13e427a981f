package filesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/internal/testlog"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	networking "istio.io/api/networking/v1alpha3"
)

const (
	seColl = "istio/networking/v1alpha3/serviceentries"
	drColl = "istio/networking/v1alpha3/destinationrules"
	// waitTimeout bounds every wait; reaching it is a failure, never the expected outcome.
	waitTimeout = 10 * time.Second
)

func serviceEntry(name, host string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %s
  namespace: bookinfo
spec:
  hosts: [%s]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`, name, host)
}

func destinationRule(name string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: %s, namespace: bookinfo}
spec: {host: %s.bookinfo.svc.cluster.local}
`, name, name)
}

func docs(ds ...string) string { return strings.Join(ds, "---\n") }

// writeFile replaces a file as editors and kubectl-style tools do: write aside, rename over.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// harness runs a Source over a real store until the test ends.
type harness struct {
	t       *testing.T
	store   *store.Store
	src     *Source
	reloads chan struct{}
}

func start(t *testing.T, opts Options) *harness {
	t.Helper()
	return startWith(t, opts, store.New(store.Options{Validate: kinds.ValidateResource}))
}

// startWith runs a Source whose writes reach st, directly or (opts.Store) through a wrapper.
func startWith(t *testing.T, opts Options, st *store.Store) *harness {
	t.Helper()
	h := &harness{t: t, store: st, reloads: make(chan struct{}, 1)}
	if opts.Store == nil {
		opts.Store = st
	}
	if opts.Debounce == 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h.src = New(opts)
	h.src.reloaded = func() {
		select {
		case h.reloads <- struct{}{}:
		default: // one pending signal is enough: waiters re-check their condition
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after its context ended, want nil", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("Run did not return within %v of its context ending", waitTimeout)
		}
	})
	select {
	case <-h.src.Ready():
	case err := <-done:
		t.Fatalf("Run returned before Ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("Ready not closed")
	}
	return h
}

// waitFor waits until cond holds, re-checking it after every store change and every reload.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	w := h.store.Watch()
	defer w.Close()
	deadline := time.After(waitTimeout)
	for !cond() {
		select {
		case <-w.C():
		case <-h.reloads:
		case <-deadline:
			h.t.Fatalf("timed out waiting for %s; store: %v; faults: %v", what, h.names(), h.src.Faults())
		}
	}
}

// names lists what the store serves as "collection-kind-suffix:name", sorted.
func (h *harness) names() []string {
	v := h.store.View()
	var out []string
	for _, c := range v.Collections() {
		_, entries := v.Snapshot(c.Name)
		for _, e := range entries {
			out = append(out, c.Name[strings.LastIndex(c.Name, "/")+1:]+":"+e.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (h *harness) serves(want ...string) func() bool {
	slices.Sort(want)
	return func() bool { return slices.Equal(h.names(), want) }
}

// host returns the first host of a served ServiceEntry, or "".
func (h *harness) host(name string) string {
	e := h.store.View().Get(seColl, name)
	if e == nil {
		return ""
	}
	se := &networking.ServiceEntry{}
	if _, body := e.Body(); proto.Unmarshal(body, se) != nil {
		h.t.Fatalf("served body of %s does not decode", name)
	}
	return se.GetHosts()[0]
}

func (h *harness) hasFault(mentions ...string) func() bool {
	return func() bool {
		for _, f := range h.src.Faults() {
			if containsAll(f.Error(), mentions...) {
				return true
			}
		}
		return false
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestSourceLoadsDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "services.yaml"), docs(serviceEntry("reviews", "reviews.bookinfo"), serviceEntry("ratings", "ratings.bookinfo")))
	writeFile(t, filepath.Join(dir, "rules.yml"), destinationRule("reviews"))
	// None of these may be read: not YAML by name, hidden, or in a sub-directory.
	writeFile(t, filepath.Join(dir, "README.md"), "not: [yaml")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), serviceEntry("hidden", "h"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "nested.yaml"), serviceEntry("nested", "n"))

	h := start(t, Options{Paths: []string{dir}})
	want := []string{"destinationrules:bookinfo/reviews", "serviceentries:bookinfo/ratings", "serviceentries:bookinfo/reviews"}
	if got := h.names(); !slices.Equal(got, want) {
		t.Errorf("after Ready, store serves %v, want %v", got, want)
	}
	if f := h.src.Faults(); len(f) != 0 {
		t.Errorf("faults = %v", f)
	}
	if e := h.store.View().Get(drColl, "bookinfo/reviews"); e == nil || e.Owner != "file" {
		t.Errorf("entry %+v, want it owned by the default owner \"file\"", e)
	}
	// Every body the decoder makes is well formed, and the source says so: the translation
	// does not check them again (store.Encoded.Checked).
	for _, name := range []string{"bookinfo/ratings", "bookinfo/reviews"} {
		if e := h.store.View().Get(seColl, name); e == nil || !e.BodyChecked() {
			t.Errorf("ServiceEntry %s: entry %+v, want its body vouched for", name, e)
		}
	}
}

func TestSourceFollowsDirectory(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	writeFile(t, a, serviceEntry("reviews", "reviews.v1"))
	h := start(t, Options{Paths: []string{dir}, Owner: "files-test"})

	t.Run("add a file", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "b.yaml"), serviceEntry("ratings", "ratings.v1"))
		h.waitFor("ratings to appear", h.serves("serviceentries:bookinfo/reviews", "serviceentries:bookinfo/ratings"))
	})
	t.Run("change a file", func(t *testing.T) {
		writeFile(t, a, serviceEntry("reviews", "reviews.v2"))
		h.waitFor("reviews to change", func() bool { return h.host("bookinfo/reviews") == "reviews.v2" })
	})
	t.Run("change a file in place", func(t *testing.T) {
		if err := os.WriteFile(a, []byte(serviceEntry("reviews", "reviews.v3")), 0o644); err != nil {
			t.Fatal(err)
		}
		h.waitFor("reviews to change", func() bool { return h.host("bookinfo/reviews") == "reviews.v3" })
	})
	t.Run("delete a file", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
			t.Fatal(err)
		}
		h.waitFor("ratings to go", h.serves("serviceentries:bookinfo/reviews"))
	})
	if e := h.store.View().Get(seColl, "bookinfo/reviews"); e.Owner != "files-test" {
		t.Errorf("owner = %q, want the configured one", e.Owner)
	}
	if f := h.src.Faults(); len(f) != 0 {
		t.Errorf("faults = %v", f)
	}
}

func TestSourceKeepsLastGoodState(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, docs(serviceEntry("reviews", "reviews.v1"), serviceEntry("ratings", "ratings.v1")))
	// Broken from the start: its good document must not be served either.
	writeFile(t, filepath.Join(dir, "broken.yaml"), docs(serviceEntry("details", "details.v1"), "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw}\nspec: {servers: [{prot: {}}]}\n"))

	h := start(t, Options{Paths: []string{dir}})
	h.waitFor("the faults of broken.yaml", h.hasFault("broken.yaml", "document 2", "Gateway default/gw", "spec.servers[0].prot"))
	if got, want := h.names(), []string{"serviceentries:bookinfo/ratings", "serviceentries:bookinfo/reviews"}; !slices.Equal(got, want) {
		t.Fatalf("store serves %v, want only good.yaml's %v", got, want)
	}
	before := h.store.View().Get(seColl, "bookinfo/ratings").Version

	// good.yaml breaks: reviews changes, ratings gets a bad field. Nothing of it may be applied.
	writeFile(t, good, docs(serviceEntry("reviews", "reviews.v2"), strings.Replace(serviceEntry("ratings", "ratings.v2"), "resolution: STATIC", "resolution: STATIK", 1)))
	h.waitFor("the fault of good.yaml", h.hasFault("good.yaml", "document 2", "ServiceEntry bookinfo/ratings", "spec.resolution", "STATIK"))
	if h.host("bookinfo/reviews") != "reviews.v1" || h.store.View().Get(seColl, "bookinfo/ratings").Version != before {
		t.Fatalf("a file with a bad document changed the store: reviews host %q", h.host("bookinfo/reviews"))
	}
	var de *DecodeError
	if faults := h.src.Faults(); len(faults) != 2 || !errors.As(faults[1], &de) || de.Doc != 2 || de.Field != "spec.resolution" {
		t.Errorf("faults = %v, want broken.yaml's then good.yaml's document 2", faults)
	}

	// Fixed: applied, and its fault is gone.
	writeFile(t, good, docs(serviceEntry("reviews", "reviews.v2"), serviceEntry("ratings", "ratings.v2")))
	h.waitFor("the fixed file to apply", func() bool {
		return h.host("bookinfo/reviews") == "reviews.v2" && h.host("bookinfo/ratings") == "ratings.v2"
	})
	h.waitFor("the fault to clear", func() bool { return len(h.src.Faults()) == 1 })
	if !h.hasFault("broken.yaml")() {
		t.Errorf("faults = %v, want broken.yaml's to remain", h.src.Faults())
	}
}

// A fault is logged once when it appears (warn) and once when it clears (info).
func TestFaultAppearingAndClearingIsLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "se.yaml")
	writeFile(t, file, serviceEntry("reviews", "reviews.v1"))
	logger, log := testlog.Capture()
	h := start(t, Options{Paths: []string{dir}, Logger: logger})
	writeFile(t, file, strings.Replace(serviceEntry("reviews", "reviews.v2"), "resolution: STATIC", "resolution: STATIK", 1))
	h.waitFor("the fault", h.hasFault("se.yaml", "spec.resolution"))
	writeFile(t, filepath.Join(dir, "other.yaml"), serviceEntry("ratings", "ratings.v1")) // a reload that still finds it
	h.waitFor("other.yaml served", func() bool { return h.host("bookinfo/ratings") == "ratings.v1" })
	writeFile(t, file, serviceEntry("reviews", "reviews.v2"))
	h.waitFor("the fault to clear", func() bool { return len(h.src.Faults()) == 0 })
	out := log.String()
	if n := strings.Count(out, `level=WARN msg="config fault"`); n != 1 {
		t.Fatalf("the fault logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, `level=INFO msg="config fault cleared"`); n != 1 || !strings.Contains(out, "spec.resolution") {
		t.Fatalf("its clearing logged %d times, want once, naming it:\n%s", n, out)
	}
}

func TestSourceSameNameInTwoFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), serviceEntry("reviews", "from.a"))
	writeFile(t, filepath.Join(dir, "b.yaml"), docs(destinationRule("reviews"), serviceEntry("reviews", "from.b")))
	h := start(t, Options{Paths: []string{dir}})

	if got := h.host("bookinfo/reviews"); got != "from.a" {
		t.Errorf("reviews host = %q, want a.yaml's (the file that sorts first)", got)
	}
	if !h.hasFault("b.yaml", "document 2", "ServiceEntry bookinfo/reviews", "a.yaml")() {
		t.Errorf("faults = %v, want one naming b.yaml's duplicate and a.yaml", h.src.Faults())
	}
	if h.store.View().Get(drColl, "bookinfo/reviews") == nil {
		t.Error("b.yaml's other resources must still be served")
	}

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("b.yaml's reviews to be served", func() bool { return h.host("bookinfo/reviews") == "from.b" })
	h.waitFor("the duplicate fault to clear", func() bool { return len(h.src.Faults()) == 0 })
}

func TestSourceSingleFile(t *testing.T) {
	dir := t.TempDir()
	mesh := filepath.Join(dir, "mesh.yaml")
	writeFile(t, mesh, serviceEntry("reviews", "v0"))
	writeFile(t, filepath.Join(dir, "other.yaml"), serviceEntry("other", "o")) // not a configured path
	h := start(t, Options{Paths: []string{mesh}})
	if got := h.names(); !slices.Equal(got, []string{"serviceentries:bookinfo/reviews"}) {
		t.Fatalf("store serves %v, want only mesh.yaml's", got)
	}

	// Replaced by rename, several times: the watch must outlive the file it started with.
	for i := 1; i <= 3; i++ {
		host := fmt.Sprintf("v%d", i)
		writeFile(t, mesh, serviceEntry("reviews", host))
		h.waitFor("replacement "+host, func() bool { return h.host("bookinfo/reviews") == host })
	}

	if err := os.Remove(mesh); err != nil {
		t.Fatal(err)
	}
	h.waitFor("its resources to go", h.serves())
	h.waitFor("a fault for the missing file", h.hasFault("mesh.yaml", "does not exist"))

	writeFile(t, mesh, serviceEntry("reviews", "back"))
	h.waitFor("the file to come back", func() bool { return h.host("bookinfo/reviews") == "back" })
}

// TestSourceConfigMapVolume follows a file the way kubelet updates a mounted ConfigMap: the
// file is a symlink through "..data", and an update re-points "..data" without touching it.
func TestSourceConfigMapVolume(t *testing.T) {
	dir := t.TempDir()
	mount := func(version, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, version, "mesh.yaml"), content)
		if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	mount("..v1", serviceEntry("reviews", "v1"))
	if err := os.Symlink(filepath.Join("..data", "mesh.yaml"), filepath.Join(dir, "mesh.yaml")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, path string }{{"file", filepath.Join(dir, "mesh.yaml")}, {"directory", dir}} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, Options{Paths: []string{tc.path}})
			if got := h.names(); !slices.Equal(got, []string{"serviceentries:bookinfo/reviews"}) {
				t.Fatalf("store serves %v, want mesh.yaml's reviews once", got)
			}
			version := "..v2-" + tc.name
			host := "v2-" + tc.name // a host istiod accepts: no empty label
			mount(version, serviceEntry("reviews", host))
			h.waitFor("the swapped content", func() bool { return h.host("bookinfo/reviews") == host })
		})
	}
}

// TestSourceSkipsUnchanged: an event that changes no file's resources writes nothing.
func TestSourceSkipsUnchanged(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), serviceEntry("reviews", "r"))
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	counting := &countingApplier{next: st}
	h := startWith(t, Options{Paths: []string{dir}, Store: counting}, st)
	if n := counting.calls.Load(); n != 1 {
		t.Fatalf("%d writes for the first load, want 1", n)
	}
	for _, change := range []func(){
		func() { writeFile(t, filepath.Join(dir, "README.md"), "notes") },                   // not YAML
		func() { writeFile(t, filepath.Join(dir, "a.yaml"), serviceEntry("reviews", "r")) }, // same content
	} {
		select {
		case <-h.reloads: // the first load's signal
		default:
		}
		change()
		select {
		case <-h.reloads:
		case <-time.After(waitTimeout):
			t.Fatal("no reload after a change in the directory")
		}
	}
	if n := counting.calls.Load(); n != 1 {
		t.Errorf("%d writes, want none after the first: nothing changed", n)
	}
}

type countingApplier struct {
	next  Applier
	calls atomic.Int64
}

func (c *countingApplier) ReplaceOwnerEncoded(owner string, state map[string][]store.Encoded) (store.Result, error) {
	c.calls.Add(1)
	return c.next.ReplaceOwnerEncoded(owner, state)
}

func (c *countingApplier) Apply(owner string, updates ...store.Update) (store.Result, error) {
	c.calls.Add(1)
	return c.next.Apply(owner, updates...)
}

// refusingApplier refuses the first write, as the store does a write with an invalid resource,
// and passes the others on.
type refusingApplier struct {
	next    Applier
	refused atomic.Bool
}

func (r *refusingApplier) ReplaceOwnerEncoded(owner string, state map[string][]store.Encoded) (store.Result, error) {
	if r.refused.CompareAndSwap(false, true) {
		return store.Result{}, &store.ValidationError{Collection: seColl, Resource: "bookinfo/reviews", Err: errors.New("refused")}
	}
	return r.next.ReplaceOwnerEncoded(owner, state)
}

func (r *refusingApplier) Apply(owner string, updates ...store.Update) (store.Result, error) {
	if r.refused.CompareAndSwap(false, true) {
		return store.Result{}, &store.ValidationError{Collection: seColl, Resource: "bookinfo/reviews", Err: errors.New("refused")}
	}
	return r.next.Apply(owner, updates...)
}

func TestSourceStoreRefuses(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), serviceEntry("reviews", "r"))
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	h := startWith(t, Options{Paths: []string{dir}, Store: &refusingApplier{next: st}}, st)
	faults := h.src.Faults()
	var ve *store.ValidationError
	if len(faults) != 1 || !errors.As(faults[0], &ve) || !strings.Contains(faults[0].Error(), "previous state is kept") {
		t.Fatalf("faults = %v, want the store's refusal", faults)
	}
	if got := h.names(); len(got) != 0 {
		t.Fatalf("store serves %v after refusing the write", got)
	}
	// The next reload tries again, though no YAML file changed.
	writeFile(t, filepath.Join(dir, "README.md"), "notes")
	h.waitFor("the state to be applied", h.serves("serviceentries:bookinfo/reviews"))
	h.waitFor("the refusal to clear", func() bool { return len(h.src.Faults()) == 0 })
}

func TestSourceMissingPath(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	src := New(Options{Paths: []string{dir, missing}, Store: store.New(store.Options{})})
	err := src.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Run = %v, want an error naming %s", err, missing)
	}
	select {
	case <-src.Ready():
		t.Error("Ready closed though nothing was loaded")
	default:
	}
}

func TestSourceMisuse(t *testing.T) {
	if err := New(Options{Paths: []string{t.TempDir()}}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no store") {
		t.Errorf("Run without a store = %v", err)
	}
	if err := New(Options{Store: store.New(store.Options{})}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no paths") {
		t.Errorf("Run without paths = %v", err)
	}
	h := start(t, Options{Paths: []string{t.TempDir()}})
	if err := h.src.Run(context.Background()); err == nil {
		t.Error("a second Run must fail")
	}
}

// A watched directory removed and created again (a ConfigMap remount, rm -rf dir && cp -r
// new dir), or replaced by a rename, is watched again and reloaded, and its fault clears.
// While it is absent, what it had stays served.
func TestFileSourceReattachesWhenRootIsReplaced(t *testing.T) {
	for _, how := range []string{"removed and created again", "replaced by rename"} {
		t.Run(how, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "config")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "a.yaml"), serviceEntry("a", "a.example"))
			h := start(t, Options{Paths: []string{dir}})
			h.waitFor("a", h.serves("serviceentries:bookinfo/a"))

			if how == "removed and created again" {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				h.waitFor("a fault for the absent directory", h.hasFault("config", "does not exist"))
				if got := h.names(); !slices.Equal(got, []string{"serviceentries:bookinfo/a"}) {
					t.Fatalf("while the directory is absent the store serves %v, want its last files", got)
				}
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(dir, "b.yaml"), serviceEntry("b", "b.example"))
			} else {
				next := filepath.Join(parent, "config.next")
				if err := os.Mkdir(next, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(next, "b.yaml"), serviceEntry("b", "b.example"))
				if err := os.Rename(dir, filepath.Join(parent, "config.old")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(next, dir); err != nil {
					t.Fatal(err)
				}
			}
			h.waitFor("the new directory's files only", h.serves("serviceentries:bookinfo/b"))
			h.waitFor("the fault to clear", func() bool { return len(h.src.Faults()) == 0 })

			// The new directory is watched: later changes in it are served.
			writeFile(t, filepath.Join(dir, "c.yaml"), serviceEntry("c", "c.example"))
			h.waitFor("a later change", h.serves("serviceentries:bookinfo/b", "serviceentries:bookinfo/c"))
		})
	}
}

// TestSourceEditWritesOnlyTheDifference: after the first load, an edit of one file gives the
// store that file's changed resources (and its removals), not every file's: the store
// validates and encodes only those.
func TestSourceEditWritesOnlyTheDifference(t *testing.T) {
	dir := t.TempDir()
	for i := range 5 {
		name := fmt.Sprintf("svc%d", i)
		writeFile(t, filepath.Join(dir, name+".yaml"), serviceEntry(name, name))
	}
	writeFile(t, filepath.Join(dir, "two.yaml"), serviceEntry("one", "one")+"---\n"+serviceEntry("two", "two"))
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	h := startWith(t, Options{Paths: []string{dir}}, st)
	encoded := st.Stats().Marshals

	// One file edited: one resource changes, the other goes.
	writeFile(t, filepath.Join(dir, "two.yaml"), serviceEntry("one", "one-v2"))
	h.waitFor("the edit", func() bool {
		return h.host("bookinfo/one") == "one-v2" && h.store.View().Get(seColl, "bookinfo/two") == nil
	})
	if n := st.Stats().Marshals - encoded; n != 1 {
		t.Errorf("the store encoded %d resources for an edit of one, want 1", n)
	}
	if got := h.names(); len(got) != 6 {
		t.Errorf("serves %v, want the five untouched ServiceEntries and the edited one", got)
	}
	// A file removed: its resources go, nothing else is written.
	encoded = st.Stats().Marshals
	if err := os.Remove(filepath.Join(dir, "svc0.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the removal", func() bool { return h.store.View().Get(seColl, "bookinfo/svc0") == nil })
	if n := st.Stats().Marshals - encoded; n != 0 {
		t.Errorf("the store encoded %d resources for a removal", n)
	}
}

// TestFaultsNameFilesAsGiven: with NamesAsGiven, faults name a file as its path was given,
// and a directory's file as the directory as given joined with its name; without, absolute.
func TestFaultsNameFilesAsGiven(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "conf", "bad.yaml"), strings.Replace(serviceEntry("bad", "bad.example"), "STATIC", "STATIK", 1))
	writeFile(t, filepath.Join(dir, "conf", "twice.yaml"), serviceEntry("twice", "a.example"))
	writeFile(t, filepath.Join(dir, "again.yaml"), serviceEntry("twice", "b.example"))
	t.Chdir(dir)
	for _, tt := range []struct {
		asGiven bool
		want    []string // each fault's file, and the file a duplicate names
	}{
		{true, []string{"conf/bad.yaml", "conf/twice.yaml again.yaml"}},
		{false, []string{filepath.Join(dir, "conf", "bad.yaml"), filepath.Join(dir, "conf", "twice.yaml") + " " + filepath.Join(dir, "again.yaml")}},
	} {
		src := New(Options{Paths: []string{"./conf/", "again.yaml"}, Store: store.New(store.Options{}), NamesAsGiven: tt.asGiven})
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // Run loads once, then returns
		if err := src.Run(ctx); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range src.Faults() {
			var de *DecodeError
			if !errors.As(f, &de) {
				t.Fatalf("fault %v is not a *DecodeError", f)
			}
			name := de.File
			if _, other, ok := strings.Cut(de.Err.Error(), "already defined in "); ok {
				name += " " + strings.Split(other, ",")[0]
			}
			got = append(got, name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("NamesAsGiven %v: faults name %q, want %q", tt.asGiven, got, tt.want)
		}
	}
}
