package store

import (
	"encoding/binary"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// Table names. Each table is a plain struct type and a few index functions, in the manner of
// Consul's state store.
const (
	// tableOwned holds every owner's copy of a resource: what each producer last said.
	tableOwned = "owned"
	// tableServed holds what consumers see: per (collection, name) the winning owner's copy,
	// or a tombstone once no owner holds the name any more.
	tableServed = "served"
	// tableCollections holds one row per collection with its revision and compaction mark.
	tableCollections = "collections"
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

func schema() *memdb.DBSchema {
	collectionName := &memdb.StringFieldIndex{Field: "Collection"}
	name := &memdb.StringFieldIndex{Field: "Name"}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableOwned: {
			Name: tableOwned,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					collectionName, name, &memdb.StringFieldIndex{Field: "Owner"},
				}}},
				// what one owner holds in one collection, for full-state replacement
				"owner_collection": {Name: "owner_collection", Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Owner"}, collectionName,
				}}},
			},
		},
		tableServed: {
			Name: tableServed,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{collectionName, name}}},
				// changes since revision r: LowerBound(collection, r+1), big-endian so ordered
				"revision": {Name: "revision", Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					collectionName, &memdb.UintFieldIndex{Field: "Revision"},
				}}},
				// only tombstones are indexed here: compaction walks them without touching the
				// live entries, and live writes pay no index insert for it
				"tombstones": {Name: "tombstones", AllowMissing: true, Indexer: tombstoneIndex{}},
			},
		},
		tableCollections: {
			Name: tableCollections,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
	}}
}

// tombstoneIndex indexes tombstones by deletion time and leaves live entries out.
type tombstoneIndex struct{}

func (tombstoneIndex) FromObject(obj any) (bool, []byte, error) {
	e := obj.(*Entry)
	if !e.Deleted {
		return false, nil, nil
	}
	return true, binary.BigEndian.AppendUint64(nil, uint64(e.DeletedAt.UnixNano())), nil
}

func (tombstoneIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("tombstones index takes one time.Time")
	}
	t, ok := args[0].(time.Time)
	if !ok {
		return nil, fmt.Errorf("tombstones index takes a time.Time, got %T", args[0])
	}
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())), nil
}
