package ownerstate

import (
	"errors"
	"testing"

	"github.com/mcpbridge/mcpbridge/store"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const coll = "istio/networking/v1alpha3/serviceentries"

func enc(t *testing.T, name, value string) store.Encoded {
	t.Helper()
	e, err := store.EncodeMessage(name, "", wrapperspb.String(value))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func names(st *store.Store, owner string) map[string]string {
	out := map[string]string{}
	st.View().Owned(coll, owner, func(e *store.Entry) bool {
		out[e.Name] = e.Version
		return true
	})
	return out
}

// refusing fails the writes it is told to, to show that a refused write is retried whole.
type refusing struct {
	*store.Store
	fail bool
}

func (r *refusing) Apply(owner string, u ...store.Update) (store.Result, error) {
	if r.fail {
		return store.Result{}, errors.New("refused")
	}
	return r.Store.Apply(owner, u...)
}

func TestFirstFlushReplacesWhatTheOwnerHeldBefore(t *testing.T) {
	st := store.New(store.Options{})
	if _, err := st.Apply("k", store.Update{Collection: coll, Encoded: []store.Encoded{enc(t, "ns/stale", "x")}}); err != nil {
		t.Fatal(err)
	}
	s := New("k", st)
	s.Put(coll, enc(t, "ns/a", "1"))
	if _, err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	got := names(st, "k")
	if _, ok := got["ns/stale"]; ok || len(got) != 1 {
		t.Fatalf("after the first flush the owner holds %v, want only ns/a", got)
	}
}

func TestFlushWritesOnlyWhatChanged(t *testing.T) {
	st := store.New(store.Options{})
	s := New("k", st)
	s.Put(coll, enc(t, "ns/a", "1"))
	s.Put(coll, enc(t, "ns/b", "1"))
	if _, err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Put(coll, enc(t, "ns/a", "1")) // same bytes: nothing to write
	if s.Dirty() {
		t.Fatal("an equal Put made the state dirty")
	}
	s.Put(coll, enc(t, "ns/b", "2"))
	s.Delete(coll, "ns/a")
	res, err := s.Flush()
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 2 {
		t.Fatalf("flush changed %d entries, want 2 (an update and a removal)", res.Changed)
	}
	if got := names(st, "k"); len(got) != 1 || got["ns/b"] == "" {
		t.Fatalf("owner holds %v, want ns/b only", got)
	}
}

func TestRefusedWriteIsRetriedWhole(t *testing.T) {
	st := &refusing{Store: store.New(store.Options{})}
	s := New("k", st)
	s.Put(coll, enc(t, "ns/a", "1"))
	if _, err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	st.fail = true
	s.Put(coll, enc(t, "ns/b", "1"))
	if _, err := s.Flush(); err == nil {
		t.Fatal("the refused write reported no error")
	}
	st.fail = false
	s.Delete(coll, "ns/a")
	if _, err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := names(st.Store, "k"); len(got) != 1 || got["ns/b"] == "" {
		t.Fatalf("after the retry the owner holds %v, want ns/b only", got)
	}
}
