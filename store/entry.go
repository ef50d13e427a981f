package store

import (
	"time"

	mcpapi "istio.io/api/mcp/v1alpha1"
)

// ownedEntry is one owner's copy of a resource. Never mutated once inserted.
type ownedEntry struct {
	Collection string
	Name       string
	Owner      string
	Version    string
	Resource   *mcpapi.Resource
	Bytes      []byte
}

// Entry is a resource as consumers see it. Entries are immutable: a change inserts a new Entry.
type Entry struct {
	Collection string
	// Name is metadata.name: "namespace/name", or "name" for cluster-scoped kinds.
	Name string
	// Owner is the producer whose copy is served (see the conflict rule on Store).
	Owner string
	// Version is the producer's metadata.version, or a content hash when it gave none.
	Version string
	// Resource is the stored resource with Metadata.Version set. Callers must not modify it.
	Resource *mcpapi.Resource
	// Bytes is the deterministic protobuf encoding of Resource, made once per version so that
	// no subscriber ever marshals it again.
	Bytes []byte
	// Revision is the store revision at which this entry (or its deletion) was written.
	Revision uint64
	// Deleted marks a tombstone: the name was removed at Revision. Tombstones let a reader at
	// an older revision learn of deletions without diffing the collection. A tombstone keeps
	// the last Resource and Bytes served under the name.
	Deleted   bool
	DeletedAt time.Time
	// Shadowed are the other owners that hold the name, whose copies are not served (see
	// the conflict rule on Store); nil when one owner holds it.
	Shadowed []string
}

// CollectionInfo describes one collection as of a read.
type CollectionInfo struct {
	Name string
	// Revision is the store revision of the collection's last change.
	Revision uint64
	// Count is the number of live (non-deleted) resources.
	Count int
	// Changed is when the write of Revision was made: the push-latency metric measures from it
	// to the send of the response that carries the change.
	Changed time.Time
	// Compacted is the highest revision of a tombstone removed by compaction: a reader at an
	// older revision cannot be given changes and must take a full state.
	Compacted uint64
	// Shadowed is the number of live names held by more than one owner.
	Shadowed int
}
