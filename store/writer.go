package store

import (
	"fmt"
	"time"

	mcpapi "istio.io/api/mcp/v1alpha1"
)

// Writer is how producers (the sink, the file source, upstreams) write: the Store itself, or a
// replicated backend that commits a write elsewhere first (store/etcdbackend) and applies it to
// the Store once committed. Readers always read the Store.
type Writer interface {
	Apply(owner string, updates ...Update) (Result, error)
	ApplyWithin(owner string, limit int, updates ...Update) (Result, error)
	ReplaceOwner(owner string, state map[string][]*mcpapi.Resource) (Result, error)
	ReplaceOwnerEncoded(owner string, state map[string][]Encoded) (Result, error)
	SetOwnerPresent(owner string, present bool) (Result, error)
}

// ExpiringWriter is a Writer that deletes an absent owner's resources itself once its expiry
// passes (the etcd backend, with a lease per owner, so that every replica drops them at once
// whether or not the replica the owner left is alive). The sink then arms no timer of its own.
type ExpiringWriter interface {
	Writer
	// SetOwnerPresence is SetOwnerPresent with the owner's expiry: once the owner is absent
	// for expiry (0: never), its resources are deleted.
	SetOwnerPresence(owner string, present bool, expiry time.Duration) (Result, error)
}

// FencedWriter is a Writer shared by replicas (the etcd backend) whose writes can be fenced by
// the owner's state when a producer's message arrived: a write that finds the owner written
// since (a newer message of the same producer, taken by another replica while this one was
// slow or frozen) is abandoned, an *UnavailableError, never committed over the newer one.
type FencedWriter interface {
	Writer
	// OwnerFence is the owner's write sequence as this replica has applied it: read when a
	// message arrives, before it is decoded or checked.
	OwnerFence(owner string) int64
	// ApplyFenced is ApplyWithin, committed only if the owner's sequence is still fence.
	ApplyFenced(owner string, fence int64, limit int, updates ...Update) (Result, error)
}

var _ Writer = (*Store)(nil)

// Prepare validates, versions and encodes updates as Apply would, without writing: each
// returned Update carries its resources as Encoded (Resources is nil), in the order given. A
// replicated backend prepares a write on the replica that took it, and every replica then
// applies the same bytes, so that all serve the same versions.
func (s *Store) Prepare(updates ...Update) ([]Update, error) {
	prepared, err := s.prepare(updates)
	if err != nil {
		return nil, err
	}
	out := make([]Update, len(prepared))
	for i, p := range prepared {
		u := p.Update
		u.Resources = nil
		u.Encoded = make([]Encoded, len(p.entries))
		for j, e := range p.entries {
			u.Encoded[j] = e.Encoded()
		}
		out[i] = u
	}
	return out, nil
}

// OwnedCopy is one owner's copy of a name in a collection, served or shadowed; nil when it
// holds none.
func (v *View) OwnedCopy(collection, owner, name string) *Entry {
	return v.st.colls[collection].ownedCopy(owner, name)
}

// Owned calls f with each copy one owner holds in a collection, served or shadowed, by name.
func (v *View) Owned(collection, owner string, f func(e *Entry) bool) {
	if collection == "" {
		return
	}
	v.st.ownerCopies(owner, collection, func(_ string, e *Entry) bool { return f(e) })
}

// UnavailableError is a write refused because the store's replicated backend cannot commit
// it now (etcd unreachable): nothing of it was applied, and the writer may retry, here or on
// another replica.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return "store backend unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// EncodedFromBytes takes the bytes of an encoded istio.mcp.v1alpha1.Resource (an Encoded's
// Bytes, as a replicated backend stored them) back as an Encoded, after checking that they
// hold a name.
func EncodedFromBytes(b []byte) (Encoded, error) {
	if name, _ := metaOf(b); name == "" {
		return Encoded{}, fmt.Errorf("encoded resource without metadata.name")
	}
	return elideEncoding(b), nil
}
