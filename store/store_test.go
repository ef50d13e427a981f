package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

const collA = "istio/networking/v1alpha3/serviceentries"
const collB = "istio/networking/v1alpha3/virtualservices"

// res makes a resource whose body is a StringValue, so content is easy to vary.
func res(name, content string) *mcpapi.Resource {
	body, err := anypb.New(wrapperspb.String(content))
	if err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

func names(es []*Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

func mustApply(t *testing.T, s *Store, owner string, u ...Update) Result {
	t.Helper()
	r, err := s.Apply(owner, u...)
	if err != nil {
		t.Fatalf("Apply(%s): %v", owner, err)
	}
	return r
}

func snapshotNames(s *Store, coll string) []string {
	_, es := s.View().Snapshot(coll)
	return names(es)
}

func TestFullStateReplacesOwnersSet(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "p1", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1"), res("ns/b", "1")}})
	mustApply(t, s, "p1", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/b", "1"), res("ns/c", "1")}})
	if got, want := snapshotNames(s, collA), []string{"ns/b", "ns/c"}; !slices.Equal(got, want) {
		t.Fatalf("after {a,b} then {b,c}: %v, want %v", got, want)
	}
	if info := s.View().Collection(collA); info.Count != 2 {
		t.Fatalf("count = %d, want 2", info.Count)
	}
}

func TestFullStateReplacesOnlyItsOwnersResources(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "p1", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1")}})
	mustApply(t, s, "p2", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/x", "1")}})
	mustApply(t, s, "p1", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/b", "1")}})
	if got, want := snapshotNames(s, collA), []string{"ns/b", "ns/x"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestDeltaUpsertsAndRemoves(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "p", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1"), res("ns/b", "1")}})
	mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/c", "1"), res("ns/a", "2")}, Removed: []string{"ns/b", "ns/never-existed"}})
	if got, want := snapshotNames(s, collA), []string{"ns/a", "ns/c"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	r, err := s.View().Get(collA, "ns/a").Decode()
	if err != nil {
		t.Fatal(err)
	}
	var body wrapperspb.StringValue
	if err := r.Body.UnmarshalTo(&body); err != nil || body.Value != "2" {
		t.Fatalf("ns/a body = %v (%v), want 2", body.Value, err)
	}
}

func TestVersionIsProducersOrContentHash(t *testing.T) {
	s := New(Options{})
	given := res("ns/given", "x")
	given.Metadata.Version = "v42"
	mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{given, res("ns/h1", "same"), res("ns/h2", "same"), res("ns/h3", "other")}})
	v := s.View()
	if got := v.Get(collA, "ns/given").Version; got != "v42" {
		t.Errorf("producer's version: got %q", got)
	}
	h1, h3 := v.Get(collA, "ns/h1"), v.Get(collA, "ns/h3")
	if h1.Version == "" || h1.Version == h3.Version {
		t.Errorf("content hashes: h1=%q h3=%q, want non-empty and different", h1.Version, h3.Version)
	}
	if stored, err := h1.Decode(); err != nil || stored.Metadata.Version != h1.Version {
		t.Errorf("stored resource carries version %q (%v), entry %q", stored.GetMetadata().GetVersion(), err, h1.Version)
	}
	// Same content under the same name hashes the same: re-applying writes nothing.
	r := mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/h1", "same")}})
	if r.Changed != 0 {
		t.Errorf("re-apply of identical content changed %d entries", r.Changed)
	}
}

func TestFailedValidationAppliesNothing(t *testing.T) {
	s := New(Options{Validate: func(coll string, r *mcpapi.Resource) error {
		if r.Metadata.Name == "ns/bad" {
			return errors.New("body is not a ServiceEntry")
		}
		return nil
	}})
	mustApply(t, s, "p", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1")}})
	before := s.View().Collection(collA)

	cases := map[string][]Update{
		"invalid body in second collection": {
			{Collection: collB, Full: true, Resources: []*mcpapi.Resource{res("ns/ok", "1")}},
			{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/z", "1"), res("ns/bad", "1")}},
		},
		"duplicate name":     {{Collection: collA, Resources: []*mcpapi.Resource{res("ns/d", "1"), res("ns/d", "2")}}},
		"empty name":         {{Collection: collA, Resources: []*mcpapi.Resource{res("", "1")}}},
		"nil metadata":       {{Collection: collA, Resources: []*mcpapi.Resource{{}}}},
		"empty removed name": {{Collection: collA, Removed: []string{""}}},
		"empty collection":   {{Collection: "", Resources: []*mcpapi.Resource{res("ns/q", "1")}}},
	}
	for name, updates := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := s.Apply("p", updates...)
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("err = %v, want *ValidationError", err)
			}
			if got := snapshotNames(s, collA); !slices.Equal(got, []string{"ns/a"}) {
				t.Fatalf("store changed: %v", got)
			}
			if got := snapshotNames(s, collB); len(got) != 0 {
				t.Fatalf("other collection changed: %v", got)
			}
			if after := s.View().Collection(collA); after != before {
				t.Fatalf("collection info changed: %+v -> %+v", before, after)
			}
		})
	}
	_, err := s.Apply("p", cases["invalid body in second collection"]...)
	want := `collection "istio/networking/v1alpha3/serviceentries", resource "ns/bad": body is not a ServiceEntry`
	if err == nil || err.Error() != want {
		t.Fatalf("error text = %q, want %q", err, want)
	}
}

func TestChangesSinceIncludesDeletions(t *testing.T) {
	s := New(Options{})
	r1 := mustApply(t, s, "p", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1"), res("ns/b", "1"), res("ns/c", "1")}})
	mustApply(t, s, "p", Update{Collection: collB, Full: true, Resources: []*mcpapi.Resource{res("ns/other", "1")}})
	r3 := mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/b", "2"), res("ns/d", "1")}, Removed: []string{"ns/c"}})

	ch, err := s.View().ChangesSince(collA, r1.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Revision != r3.Revision {
		t.Errorf("revision = %d, want %d", ch.Revision, r3.Revision)
	}
	if got := names(ch.Upserts); !slices.Equal(got, []string{"ns/b", "ns/d"}) {
		t.Errorf("upserts = %v", got)
	}
	if got := names(ch.Deleted); !slices.Equal(got, []string{"ns/c"}) {
		t.Errorf("deleted = %v", got)
	}
	// Up to date: nothing.
	ch, err = s.View().ChangesSince(collA, r3.Revision)
	if err != nil || len(ch.Upserts)+len(ch.Deleted) != 0 {
		t.Errorf("at head: %+v, %v", ch, err)
	}
	// From zero: everything live plus the tombstone.
	ch, _ = s.View().ChangesSince(collA, 0)
	if got := names(ch.Upserts); !slices.Equal(got, []string{"ns/a", "ns/b", "ns/d"}) {
		t.Errorf("from 0: upserts = %v", got)
	}
	// A name deleted then recreated is an upsert, not a deletion.
	mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/c", "again")}})
	ch, _ = s.View().ChangesSince(collA, r3.Revision)
	if !slices.Equal(names(ch.Upserts), []string{"ns/c"}) || len(ch.Deleted) != 0 {
		t.Errorf("recreated: upserts %v deleted %v", names(ch.Upserts), names(ch.Deleted))
	}
}

func TestCompactionForcesFullState(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(Options{Now: func() time.Time { return now }, TombstoneRetention: time.Minute})
	r1 := mustApply(t, s, "p", Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/a", "1"), res("ns/b", "1")}})
	r2 := mustApply(t, s, "p", Update{Collection: collA, Removed: []string{"ns/a"}})

	if n := s.Compact(now.Add(-time.Minute)); n != 0 {
		t.Fatalf("compacted %d fresh tombstones", n)
	}
	now = now.Add(2 * time.Minute)
	if n := s.Compact(now.Add(-time.Minute)); n != 1 {
		t.Fatalf("compacted %d, want 1", n)
	}
	if _, err := s.View().ChangesSince(collA, r1.Revision); !errors.Is(err, ErrCompacted) {
		t.Fatalf("reader older than the compacted tombstone: err = %v, want ErrCompacted", err)
	}
	if _, err := s.View().ChangesSince(collA, r2.Revision); err != nil {
		t.Fatalf("reader at the tombstone's revision: %v", err)
	}
	if _, err := s.View().ChangesSince(collA, r2.Revision+100); !errors.Is(err, ErrCompacted) {
		t.Fatalf("reader ahead of the store: err = %v, want ErrCompacted", err)
	}
	if got := snapshotNames(s, collA); !slices.Equal(got, []string{"ns/b"}) {
		t.Fatalf("full state after compaction: %v", got)
	}
}

func TestTwoOwnerConflictRule(t *testing.T) {
	for _, order := range [][]string{{"producer-b", "producer-a"}, {"producer-a", "producer-b"}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			s := New(Options{})
			var conflicts []Conflict
			for _, owner := range order {
				r := mustApply(t, s, owner, Update{Collection: collA, Full: true, Resources: []*mcpapi.Resource{res("ns/shared", owner)}})
				conflicts = append(conflicts, r.Conflicts...)
			}
			e := s.View().Get(collA, "ns/shared")
			if e.Owner != "producer-a" {
				t.Fatalf("served owner = %s, want producer-a (first by ID) whatever the order", e.Owner)
			}
			if len(conflicts) != 1 || conflicts[0].Served != "producer-a" || !slices.Equal(conflicts[0].Shadowed, []string{"producer-b"}) {
				t.Fatalf("conflicts = %+v", conflicts)
			}
			if s.Stats().Conflicts != 1 {
				t.Fatalf("conflict counter = %d", s.Stats().Conflicts)
			}
			// When the winner lets go, the shadowed copy is served.
			mustApply(t, s, "producer-a", Update{Collection: collA, Full: true})
			if e := s.View().Get(collA, "ns/shared"); e == nil || e.Owner != "producer-b" {
				t.Fatalf("after winner left: %+v", e)
			}
		})
	}
}

func TestReplaceOwnerEmptiesUnlistedCollections(t *testing.T) {
	s := New(Options{})
	if _, err := s.ReplaceOwner("file", map[string][]*mcpapi.Resource{collA: {res("ns/a", "1")}, collB: {res("ns/v", "1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReplaceOwner("file", map[string][]*mcpapi.Resource{collA: {res("ns/a", "1")}}); err != nil {
		t.Fatal(err)
	}
	if got := snapshotNames(s, collB); len(got) != 0 {
		t.Fatalf("collection B still holds %v", got)
	}
	// An owner whose ID is a prefix of another's must not touch the other's resources.
	mustApply(t, s, "file-2", Update{Collection: collB, Resources: []*mcpapi.Resource{res("ns/w", "1")}})
	if _, err := s.ReplaceOwner("file", nil); err != nil {
		t.Fatal(err)
	}
	if got := snapshotNames(s, collA); len(got) != 0 {
		t.Fatalf("owner removed but A holds %v", got)
	}
	if got := snapshotNames(s, collB); !slices.Equal(got, []string{"ns/w"}) {
		t.Fatalf("owner file-2 lost its resources when owner file left: %v", got)
	}
}

func TestWatchWakesWithoutPolling(t *testing.T) {
	s := New(Options{})
	w := s.Watch(collA)
	defer w.Close()
	all := s.Watch()
	defer all.Close()

	mustApply(t, s, "p", Update{Collection: collB, Resources: []*mcpapi.Resource{res("ns/v", "1")}})
	select {
	case <-w.C():
		t.Fatal("woken by a collection it does not watch")
	default:
	}
	<-all.C() // the everything-watch was signalled synchronously by the commit

	for i := range 3 { // several changes before the reader wakes coalesce into one signal
		mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/a", fmt.Sprint(i))}})
	}
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a change to its collection")
	}
	select {
	case <-w.C():
		t.Fatal("three changes gave more than one pending signal")
	default:
	}
	// An unchanged write does not wake anyone.
	mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/a", "2")}})
	select {
	case <-w.C():
		t.Fatal("woken by a write that changed nothing")
	default:
	}
	w.Close()
	mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/a", "after close")}})
	select {
	case <-w.C():
		t.Fatal("closed watch signalled")
	default:
	}
}

// A reader that wakes must see the change that woke it, and a reader's view must not move
// under it while writers commit.
func TestConcurrentReadersDuringWrites(t *testing.T) {
	s := New(Options{})
	const writes = 200
	w := s.Watch(collA)
	defer w.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				v := s.View()
				rev, es := v.Snapshot(collA)
				// Every entry of a consistent snapshot is at or below its revision, and the
				// count matches the collection's recorded count.
				for _, e := range es {
					if e.Revision > rev {
						errs <- fmt.Errorf("entry %s at revision %d in snapshot at %d", e.Name, e.Revision, rev)
						return
					}
				}
				if info := v.Collection(collA); info.Count != len(es) || info.Revision != rev {
					errs <- fmt.Errorf("info %+v disagrees with snapshot of %d at %d", info, len(es), rev)
					return
				}
			}
		}()
	}
	var last uint64
	for i := range writes {
		r := mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res(fmt.Sprintf("ns/r%d", i%50), fmt.Sprint(i))}})
		if r.Revision <= last {
			t.Fatalf("revision did not grow: %d after %d", r.Revision, last)
		}
		last = r.Revision
		<-w.C()
		if rev, _ := s.View().Snapshot(collA); rev < r.Revision {
			t.Fatalf("woken reader sees revision %d, before the write at %d", rev, r.Revision)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSnapshotDoesNotMixCollectionsSharingAPrefix(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "p", Update{Collection: "k8s/foo", Resources: []*mcpapi.Resource{res("a", "1")}})
	mustApply(t, s, "p", Update{Collection: "k8s/foobar", Resources: []*mcpapi.Resource{res("b", "1")}})
	if got := snapshotNames(s, "k8s/foo"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("k8s/foo = %v", got)
	}
	ch, _ := s.View().ChangesSince("k8s/foo", 0)
	if got := names(ch.Upserts); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("changes of k8s/foo = %v", got)
	}
}

func TestOwnedVersionsIncludeShadowedCopies(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "a-first", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/shared", "winner")}})
	mustApply(t, s, "b-second", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/shared", "shadowed"), res("ns/own", "x")}})
	got := s.View().OwnedVersions(collA, "b-second")
	if len(got) != 2 || got["ns/shared"] == "" || got["ns/shared"] == s.View().Get(collA, "ns/shared").Version {
		t.Fatalf("owned versions of b-second = %v; want both names, with its own (shadowed) version of ns/shared", got)
	}
	if got := s.View().OwnedVersions(collA, "nobody"); len(got) != 0 {
		t.Fatalf("unknown owner holds %v", got)
	}
}

// Names that are prefixes of one another are different names: no conflict between them.
func TestNamesSharingAPrefixAreNotOneName(t *testing.T) {
	s := New(Options{})
	r1 := mustApply(t, s, "owner-1", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/a", "1")}})
	r2 := mustApply(t, s, "owner-2", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/ab", "2")}})
	if len(r1.Conflicts)+len(r2.Conflicts) != 0 {
		t.Fatalf("conflicts between ns/a and ns/ab: %+v %+v", r1.Conflicts, r2.Conflicts)
	}
	mustApply(t, s, "owner-1", Update{Collection: collA, Removed: []string{"ns/a"}})
	if e := s.View().Get(collA, "ns/ab"); e == nil || e.Owner != "owner-2" {
		t.Fatalf("ns/ab after ns/a went: %+v", e)
	}
	if got := snapshotNames(s, collA); !slices.Equal(got, []string{"ns/ab"}) {
		t.Fatalf("served: %v", got)
	}
}

// The indexes end each key string with a NUL byte: a name holding one could pass for another
// name's owner, so control characters are refused, and nothing is applied.
func TestControlCharactersInKeysAreRefused(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "p2", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/x", "1")}})
	for name, u := range map[string]Update{
		"NUL in a name":         {Collection: collA, Resources: []*mcpapi.Resource{res("ns/x\x00evil", "2")}},
		"newline in a name":     {Collection: collA, Resources: []*mcpapi.Resource{res("ns/y\n", "2")}},
		"NUL in a removed name": {Collection: collA, Removed: []string{"ns/x\x00"}},
		"NUL in a collection":   {Collection: collA + "\x00", Resources: []*mcpapi.Resource{res("ns/z", "2")}},
	} {
		_, err := s.Apply("p1", u)
		var verr *ValidationError
		if !errors.As(err, &verr) || !strings.Contains(err.Error(), "control character") {
			t.Errorf("%s: err = %v, want a ValidationError naming the control character", name, err)
		}
	}
	if _, err := s.Apply("p\x001", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/w", "1")}}); err == nil {
		t.Error("an owner ID with a NUL byte was accepted")
	}
	mustApply(t, s, "p2", Update{Collection: collA, Removed: []string{"ns/x"}})
	if got := snapshotNames(s, collA); len(got) != 0 {
		t.Fatalf("after its only owner removed ns/x, still served: %q", got)
	}
}

// Dead owners shadow live ones: with the plain ID rule, a producer that died once shadowed a
// live producer's copy of the same name for ever. A present owner wins over an absent one;
// among equals the ID order stands; who is shadowed is recorded and counted, and a change of
// the shadowed owners alone is not a new revision.
func TestPresentOwnerWinsOverAbsentOne(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "a", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/x", "from a")}})
	mustApply(t, s, "b", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/x", "from b")}})
	served := func() *Entry { t.Helper(); return s.View().Get(collA, "ns/x") }
	if e := served(); e.Owner != "a" || !slices.Equal(e.Shadowed(), []string{"b"}) {
		t.Fatalf("both present: served %s, shadowed %v; want a, [b]", e.Owner, e.Shadowed())
	}
	if info := s.View().Collection(collA); info.Shadowed != 1 {
		t.Fatalf("shadowed count %d, want 1", info.Shadowed)
	}

	before := s.View().Collection(collA).Revision
	gone, err := s.SetOwnerPresent("a", false)
	if err != nil {
		t.Fatal(err)
	}
	if e := served(); e.Owner != "b" || !slices.Equal(e.Shadowed(), []string{"a"}) || gone.Revision <= before {
		t.Fatalf("a absent: served %s, shadowed %v, revision %d after %d; want b, [a], a new revision", e.Owner, e.Shadowed(), gone.Revision, before)
	}
	if _, err := s.SetOwnerPresent("a", false); err != nil { // saying it again changes nothing
		t.Fatal(err)
	}
	if _, err := s.SetOwnerPresent("a", true); err != nil {
		t.Fatal(err)
	}
	if e := served(); e.Owner != "a" {
		t.Fatalf("a back: served %s, want a", e.Owner)
	}

	rev := s.View().Collection(collA).Revision
	mustApply(t, s, "c", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/x", "from c")}})
	if e := served(); e.Owner != "a" || !slices.Equal(e.Shadowed(), []string{"b", "c"}) || e.Revision != rev {
		t.Fatalf("c joins: served %s shadowed %v at revision %d; want a, [b c], still %d", e.Owner, e.Shadowed(), e.Revision, rev)
	}
	if got := s.View().Collection(collA).Revision; got != rev {
		t.Fatalf("a new shadowed owner moved the collection to revision %d from %d", got, rev)
	}
	mustApply(t, s, "b", Update{Collection: collA, Removed: []string{"ns/x"}})
	mustApply(t, s, "c", Update{Collection: collA, Removed: []string{"ns/x"}})
	if info := s.View().Collection(collA); info.Shadowed != 0 || !slices.Equal(served().Shadowed(), nil) {
		t.Fatalf("one owner left: shadowed count %d, entry %v", info.Shadowed, served().Shadowed())
	}
}

// TestMutedCollectionsAreRecordedWithoutWaking: a muted collection's changes do not signal
// the watch but are returned by Changed; other collections still wake it; after Unmute, they
// wake it again.
func TestMutedCollectionsAreRecordedWithoutWaking(t *testing.T) {
	s := New(Options{})
	w := s.Watch(collA, collB)
	defer w.Close()
	w.Mute(collA)
	mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/a", "1")}})
	select {
	case <-w.C():
		t.Fatal("a muted collection's change woke the watch")
	default:
	}
	mustApply(t, s, "p", Update{Collection: collB, Resources: []*mcpapi.Resource{res("ns/b", "1")}})
	select {
	case <-w.C():
	default:
		t.Fatal("another collection's change did not wake the watch")
	}
	got := w.Changed()
	slices.Sort(got)
	if !slices.Equal(got, []string{collA, collB}) {
		t.Fatalf("Changed() = %v, want both collections", got)
	}
	w.Unmute()
	mustApply(t, s, "p", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/a", "2")}})
	select {
	case <-w.C():
	default:
		t.Fatal("an unmuted collection's change did not wake the watch")
	}
}

// ApplyWithin refuses, whole, a write that would take its owner over its limit across
// collections, counting only that owner's copies; a write that shrinks an owner goes through.
func TestApplyWithinRefusesAWriteOverTheOwnersLimit(t *testing.T) {
	s := New(Options{})
	full := func(coll string, names ...string) Update {
		u := Update{Collection: coll, Full: true}
		for _, n := range names {
			u.Resources = append(u.Resources, res(n, "1"))
		}
		return u
	}
	mustApply(t, s, "other", full(collA, "ns/x", "ns/y", "ns/z")) // not p's: not counted
	if _, err := s.ApplyWithin("p", 3, full(collA, "ns/a", "ns/b")); err != nil {
		t.Fatal(err)
	}
	before := s.View()
	_, err := s.ApplyWithin("p", 3, full(collB, "ns/c", "ns/d"))
	var le *OwnerLimitError
	if !errors.As(err, &le) || le.Owner != "p" || le.Limit != 3 || le.Held != 2 || le.Would != 4 {
		t.Fatalf("over the limit: %v (%+v), want an OwnerLimitError holding 2, would 4, limit 3", err, le)
	}
	after := s.View()
	if after.Revision() != before.Revision() || after.OwnedCount("p") != 2 || len(snapshotNames(s, collB)) != 0 {
		t.Fatalf("a refused write changed the store: revision %d→%d, p holds %d, %s: %v",
			before.Revision(), after.Revision(), after.OwnedCount("p"), collB, snapshotNames(s, collB))
	}
	// An increment counts what it adds and removes.
	if _, err := s.ApplyWithin("p", 3, Update{Collection: collB, Resources: []*mcpapi.Resource{res("ns/c", "1")}}); err != nil {
		t.Fatalf("to exactly the limit: %v", err)
	}
	if _, err := s.ApplyWithin("p", 3, Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/e", "1")}, Removed: []string{"ns/a"}}); err != nil {
		t.Fatalf("a swap at the limit: %v", err)
	}
	// Over a lowered limit, a write that shrinks the owner is allowed; one that grows it is not.
	if _, err := s.ApplyWithin("p", 1, full(collA, "ns/b")); err != nil {
		t.Fatalf("shrinking from 3 to 2 over a limit of 1: %v", err)
	}
	if _, err := s.ApplyWithin("p", 1, Update{Collection: collB, Resources: []*mcpapi.Resource{res("ns/f", "1")}}); !errors.As(err, &le) {
		t.Fatalf("growing over a limit of 1: %v", err)
	}
	if got := s.View().OwnedCount("p"); got != 2 {
		t.Fatalf("p holds %d, want 2", got)
	}
	if got := s.View().OwnedCount("other"); got != 3 {
		t.Fatalf("other holds %d, want 3", got)
	}
}

// TestViewsKeepTheOwnersPresenceOfTheirTime: a view answers OwnerPresent as of when it was
// taken, even once the owner comes back; Presence changes with every change of the absent
// set and only then; an owner whose copies are all gone (expiry) is present again.
func TestViewsKeepTheOwnersPresenceOfTheirTime(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, "a", Update{Collection: collA, Resources: []*mcpapi.Resource{res("ns/x", "x")}})
	before := s.View()
	if !before.OwnerPresent("a") || !before.OwnerPresent("never-seen") || len(before.AbsentOwners()) != 0 {
		t.Fatal("owners are present unless said absent")
	}
	if _, err := s.SetOwnerPresent("a", false); err != nil {
		t.Fatal(err)
	}
	gone := s.View()
	if gone.OwnerPresent("a") || !slices.Equal(gone.AbsentOwners(), []string{"a"}) || gone.Presence() == before.Presence() {
		t.Fatalf("a absent: present %v, absent %v, presence %d (was %d)", gone.OwnerPresent("a"), gone.AbsentOwners(), gone.Presence(), before.Presence())
	}
	if !slices.Equal(gone.OwnerCollections("a"), []string{collA}) {
		t.Fatalf("a holds copies in %v, want [%s]", gone.OwnerCollections("a"), collA)
	}
	mustApply(t, s, "b", Update{Collection: collB, Resources: []*mcpapi.Resource{res("ns/y", "y")}})
	if v := s.View(); v.Presence() != gone.Presence() || v.OwnerPresent("a") {
		t.Fatal("a write by another owner changed the presence")
	}
	if _, err := s.ReplaceOwner("a", nil); err != nil { // its expiry: everything it held goes
		t.Fatal(err)
	}
	if v := s.View(); !v.OwnerPresent("a") || v.Presence() == gone.Presence() {
		t.Fatal("an owner that holds nothing is still absent")
	}
	if gone.OwnerPresent("a") {
		t.Fatal("an older view changed")
	}
}

// TestEntryIsNinetySixBytes: an entry is held three or more times per service (the MCP
// resource, its cluster, its load assignment), millions at scale; what few entries have (the
// owners they shadow, a tombstone's time) is kept apart so that the rest fit 96 bytes, a
// size class of their own. A field added to Entry must pay its way.
func TestEntryIsNinetySixBytes(t *testing.T) {
	if size := unsafe.Sizeof(Entry{}); size > 96 {
		t.Fatalf("Entry is %d bytes, over the 96 budgeted", size)
	}
}

// TestALargeEncodedWriteTellsItsNamesApart: a write of encoded resources large enough to be
// checked in name order (checkSortedNames) refuses what a small one refuses, a name given
// twice and a name with a control character, naming it, and writes nothing; without either,
// it writes every resource once.
func TestALargeEncodedWriteTellsItsNamesApart(t *testing.T) {
	n := parallelWriteMin + 10
	encoded := func(names ...string) []Encoded {
		var out []Encoded
		for i := range n {
			name := fmt.Sprintf("ns/svc-%05d", n-i) // out of name order, as producers hand them
			if i < len(names) {
				name = names[i]
			}
			e, err := Encode(res(name, fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	for _, tc := range []struct {
		what, wantName string
		names          []string
	}{
		{"a name given twice", "ns/svc-00005", []string{"ns/svc-00005"}}, // also generated: n-i == 5
		// Named in the order given, as one by one: ns/zz repeats first, ns/svc-00005 sorts first.
		{"two names given twice", "ns/zz", []string{"ns/zz", "ns/zz", "ns/svc-00005"}},
		{"a control character", "ns/bad\x01", []string{"ns/a", "ns/bad\x01"}},
	} {
		s := New(Options{})
		for _, write := range []func() error{
			func() error {
				_, err := s.Apply("p", Update{Collection: collA, Encoded: encoded(tc.names...)})
				return err
			},
			func() error {
				_, err := s.ReplaceOwnerEncoded("p", map[string][]Encoded{collA: encoded(tc.names...)})
				return err
			},
		} {
			var verr *ValidationError
			if err := write(); !errors.As(err, &verr) || verr.Resource != tc.wantName {
				t.Fatalf("%s: error %v, want a ValidationError naming %q", tc.what, err, tc.wantName)
			}
			if info := s.View().Collection(collA); info.Count != 0 {
				t.Fatalf("%s: the refused write left %d resources", tc.what, info.Count)
			}
		}
	}
	// An update's fault comes before the fault of a later update's collection, as one by one.
	s := New(Options{})
	_, err := s.Apply("p", Update{Collection: collA, Encoded: encoded("ns/x", "ns/x")}, Update{Collection: collA})
	var verr *ValidationError
	if !errors.As(err, &verr) || verr.Resource != "ns/x" {
		t.Fatalf("a name given twice, then the collection again: error %v, want the name given twice", err)
	}
	if _, err := s.Apply("p", Update{Collection: collA, Full: true, Encoded: encoded()}); err != nil {
		t.Fatal(err)
	}
	if _, es := s.View().Snapshot(collA); len(es) != n {
		t.Fatalf("served %d resources, want %d", len(es), n)
	}
}

// TestAFirstLoadIsReadWholeOnlyByReadersFromBeforeIt: a first load (a large write of new
// copies, here after a small one, as the translator's plumbing comes before the mesh; the
// revision log leaves it out: collection.unlogged) reads as what it wrote to a reader from
// before it, and as nothing to one from it: a change after it reads as that change alone,
// to the collection's readers and to a layered collection's over it. The served names are
// the owner's copies; a second owner's copy of a name still wins or loses by the conflict
// rule.
func TestAFirstLoadIsReadWholeOnlyByReadersFromBeforeIt(t *testing.T) {
	n := bulkInsertMin + 10
	s := New(Options{})
	r0, err := s.Apply("translate", Update{Collection: layerBase, Encoded: []Encoded{encodeTest(t, "plumbing", "p")}})
	if err != nil {
		t.Fatal(err)
	}
	load := Update{Collection: layerBase}
	for i := range n {
		load.Encoded = append(load.Encoded, encodeTest(t, fmt.Sprintf("%05d", i), "a"))
	}
	r1, err := s.Apply("translate", load)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s.Apply("translate", Update{Collection: layerBase, Encoded: []Encoded{encodeTest(t, "00007", "b")}})
	if err != nil {
		t.Fatal(err)
	}
	layered := Layered(layerBase, layerOverlay)
	v := s.View()
	for _, tc := range []struct {
		coll    string
		since   uint64
		upserts int
	}{
		{layerBase, 0, n + 1}, {layerBase, r0.Revision, n}, {layerBase, r1.Revision, 1}, {layerBase, r2.Revision, 0},
		{layered, 0, n + 1}, {layered, r0.Revision, n}, {layered, r1.Revision, 1}, {layered, r2.Revision, 0},
	} {
		ch, err := v.ChangesSince(tc.coll, tc.since)
		if err != nil {
			t.Fatalf("%s since %d: %v", tc.coll, tc.since, err)
		}
		if len(ch.Upserts) != tc.upserts || len(ch.Deleted) != 0 {
			t.Errorf("%s since %d: %d upserts, %d deletions; want %d upserts", tc.coll, tc.since, len(ch.Upserts), len(ch.Deleted), tc.upserts)
		}
		if tc.upserts == 1 && (ch.Upserts[0].Name != "00007" || contentOf(t, ch.Upserts[0]) != "b") {
			t.Errorf("%s since %d: %s %q, want 00007 \"b\"", tc.coll, tc.since, ch.Upserts[0].Name, contentOf(t, ch.Upserts[0]))
		}
	}
	// The served tree began as the loader's own (shared until either changes): a second
	// owner's copy of a loaded name, winning by the conflict rule (first by ID), is served and
	// read as the one change; when it goes, the loader's copy, still held, is served again.
	for _, step := range []struct {
		u       Update
		content string
	}{
		{Update{Collection: layerBase, Encoded: []Encoded{encodeTest(t, "00003", "c")}}, "c"},
		{Update{Collection: layerBase, Removed: []string{"00003"}}, "a"},
	} {
		before := s.View().Collection(layerBase).Revision
		if _, err := s.Apply("a-first", step.u); err != nil {
			t.Fatal(err)
		}
		v = s.View()
		ch, err := v.ChangesSince(layerBase, before)
		if err != nil || len(ch.Upserts) != 1 || ch.Upserts[0].Name != "00003" || contentOf(t, ch.Upserts[0]) != step.content {
			t.Fatalf("changes since %d: %v %v, want 00003 %q", before, names(ch.Upserts), err, step.content)
		}
		if got := v.Collection(layerBase).Count; got != n+1 {
			t.Fatalf("count %d, want %d", got, n+1)
		}
		if e := v.Get(layerBase, "00004"); e == nil || e.Owner != "translate" || contentOf(t, e) != "a" {
			t.Fatalf("00004 served as %v, want the loader's \"a\"", e)
		}
	}
}

// TestALargeWriteIntoALargerCollectionIsReadFromTheLog: a large write of new copies into a
// collection that already serves more names than it writes (built by small writes, or while
// a second owner held copies) is logged: a reader from before it reads the change from the
// revision log, its lists made to the change's size, not the collection's. Only a first load
// (most of the collection) is left out of the log.
func TestALargeWriteIntoALargerCollectionIsReadFromTheLog(t *testing.T) {
	s := New(Options{})
	held := 3 * bulkInsertMin
	for i := 0; i < held; i += bulkInsertMin / 2 { // small writes: not a first load
		var u Update
		u.Collection = layerBase
		for j := i; j < i+bulkInsertMin/2; j++ {
			u.Encoded = append(u.Encoded, encodeTest(t, fmt.Sprintf("a%05d", j), "a"))
		}
		if _, err := s.Apply("translate", u); err != nil {
			t.Fatal(err)
		}
	}
	before := s.View().Collection(layerBase).Revision
	write := Update{Collection: layerBase}
	n := bulkInsertMin + 10
	for j := range n {
		write.Encoded = append(write.Encoded, encodeTest(t, fmt.Sprintf("b%05d", j), "b"))
	}
	if _, err := s.Apply("translate", write); err != nil {
		t.Fatal(err)
	}
	ch, err := s.View().ChangesSince(layerBase, before)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Upserts) != n || len(ch.Deleted) != 0 {
		t.Fatalf("since %d: %d upserts, %d deletions; want %d upserts", before, len(ch.Upserts), len(ch.Deleted), n)
	}
	if c := cap(ch.Upserts); c > 2*n {
		t.Fatalf("since %d: a list of room %d for %d changes in a collection of %d: read from the served names, not the log", before, c, n, held+n)
	}
}
