package store

import (
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// Entry is a resource as the store holds it and consumers see it. Entries are immutable: a
// change inserts a new Entry. An entry is its encoding and a few fields to index it by; the
// decoded resource is not kept (Decode makes one for a consumer that needs it), so that the
// store holds each body once, however many protocols and streams send it.
type Entry struct {
	// Name is metadata.name: "namespace/name", or "name" for cluster-scoped kinds.
	Name string
	// Owner is the producer whose copy is served (see the conflict rule on Store).
	Owner string
	// Version is the producer's metadata.version, or a content hash when it gave none.
	Version string
	// Bytes is the deterministic protobuf encoding of the istio.mcp.v1alpha1.Resource, with
	// metadata.version set, made once per version so that no subscriber ever marshals it
	// again; mostly without its body's type URL, which the store keeps once per type (see
	// elide.go): Body, Decode and AppendResource put it back. Never modified: Name and
	// Version may be views into it, and bodyType and bodyAt point into it; an entry of other
	// bytes is made by newEntry, never by copying one and setting Bytes.
	Bytes []byte
	// Revision is the store revision at which this entry (or its deletion) was written.
	Revision uint64
	// Deleted marks a tombstone: the name was removed at Revision. Tombstones let a reader at
	// an older revision learn of deletions without diffing the collection. A tombstone keeps
	// the last Bytes served under the name.
	Deleted bool
	// checked: the producer vouched that the body is a valid encoding of the message its
	// type URL names (Encoded.Checked), so that a reader that would check it (the
	// translation, a sixth of its reading at a million) need not. In what was padding.
	checked bool
	// bodyType and bodyAt locate the body in Bytes, found once when the entry is made
	// (locate): every response that carries the entry asks for its body two or three times
	// (its size for the split and the buffer, then its bytes), and reading it from Bytes each
	// time was a walk of the encoding and a cache miss apiece, a sixth of the stream's CPU at
	// a million. In what was padding: an entry stays 96 bytes.
	bodyType uint16 // the type URL's length; or, with elidedFlag, its interned index (elide.go)
	bodyAt   uint32 // where the value starts; 0: not located, Body reads Bytes
	// rare holds what few entries have: the owners a served name shadows, and a tombstone's
	// time. Apart, so that an entry is 96 bytes, not 128 (three or more per service, millions
	// at scale). Never modified once set: an entry that differs gets its own.
	rare *entryRare
}

type entryRare struct {
	shadowed  []string
	deletedAt int64 // Unix nanoseconds: compaction removes the tombstone after the retention
}

// newEntry is the entry of an encoding, its body located.
func newEntry(name, version string, enc Encoded) *Entry {
	e := &Entry{Name: name, Version: version, Bytes: enc.raw(), checked: enc.checked}
	e.bodyType, e.bodyAt = locate(enc.raw())
	if enc.typ != 0 {
		e.bodyType = elidedFlag | enc.typ
	}
	return e
}

// Shadowed are the other owners that hold the name, whose copies are not served (see the
// conflict rule on Store); nil when one owner holds it.
func (e *Entry) Shadowed() []string {
	if e.rare == nil {
		return nil
	}
	return e.rare.shadowed
}

// deletedAt is when a tombstone was written, Unix nanoseconds; 0 for a live entry.
func (e *Entry) deletedAt() int64 {
	if e.rare == nil {
		return 0
	}
	return e.rare.deletedAt
}

// setShadowed records the owners e shadows. e is the writer's own, unpublished; what it
// shares with the entry it was copied from (rare) is replaced, never changed.
func (e *Entry) setShadowed(owners []string) {
	switch at := e.deletedAt(); {
	case len(owners) == 0 && at == 0:
		e.rare = nil
	default:
		e.rare = &entryRare{shadowed: owners, deletedAt: at}
	}
}

// Body returns the type URL and the encoded value of the resource's body Any, as views into
// Bytes (no copy); empty when the resource has no body.
func (e *Entry) Body() (typeURL string, value []byte) {
	if t, ok := e.elided(); ok {
		_, value = e.splitElided()
		return t, value
	}
	if e.bodyAt == 0 {
		return bodyOf(e.Bytes)
	}
	return bodyIn(e.Bytes, e.bodyType, e.bodyAt)
}

// BodySize is the length of the body's type URL and value, as Body would return them, without
// reading Bytes when the body was located.
func (e *Entry) BodySize() (typeURL, value int) {
	if t, ok := e.elided(); ok {
		_, v := e.splitElided()
		return len(t), len(v)
	}
	if e.bodyAt == 0 {
		t, v := bodyOf(e.Bytes)
		return len(t), len(v)
	}
	return int(e.bodyType), len(e.Bytes) - int(e.bodyAt)
}

// locate finds the body of an encoding laid out as Encode writes it (the body the last field,
// its value the last of the body, right after its type URL): the type URL's length and where
// the value starts. Otherwise, or for an encoding too large to point into, 0, 0: Body then
// reads the encoding.
func locate(b []byte) (typeLen uint16, valueAt uint32) {
	t, v := bodyOf(b)
	if len(b) > math.MaxUint32 || len(t) >= elidedFlag || v == nil {
		return 0, 0
	}
	// The offset of a subslice of b from the capacities: both end where b's capacity ends.
	at := cap(b) - cap(v)
	if at <= 0 || at+len(v) != len(b) {
		return 0, 0
	}
	if gotT, _ := bodyIn(b, uint16(len(t)), uint32(at)); gotT != t {
		return 0, 0 // the type URL is not right before the value
	}
	return uint16(len(t)), uint32(at)
}

// bodyIn is the type URL and value of a body located in b.
func bodyIn(b []byte, typeLen uint16, valueAt uint32) (typeURL string, value []byte) {
	value = b[valueAt:]
	end := int(valueAt) - 1 - protowire.SizeVarint(uint64(len(value))) // before the value's tag and length
	start := end - int(typeLen)
	if start < 0 {
		return bodyOf(b)
	}
	return view(b[start:end]), value
}

// CreateTime returns metadata.create_time, or the zero time when the resource has none.
func (e *Entry) CreateTime() time.Time {
	meta, _ := field(e.Bytes, 1)
	ts, ok := field(meta, 2)
	if !ok {
		return time.Time{}
	}
	var seconds, nanos int64
	for len(ts) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(ts)
		if tagLen < 0 {
			break
		}
		ts = ts[tagLen:]
		if typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(ts)
			if l < 0 {
				break
			}
			switch n {
			case 1:
				seconds = int64(v)
			case 2:
				nanos = int64(int32(v))
			}
		}
		l := protowire.ConsumeFieldValue(n, typ, ts)
		if l < 0 {
			break
		}
		ts = ts[l:]
	}
	return time.Unix(seconds, nanos).UTC()
}

// Encoded is the entry's resource as an Encoded: the same bytes, for a producer that writes
// again what it reads.
func (e *Entry) Encoded() Encoded {
	enc := encodedOf(e.Bytes, 0)
	if e.bodyType&elidedFlag != 0 {
		enc.typ = e.bodyType &^ elidedFlag
	}
	enc.checked = e.checked
	return enc
}

// takeBody makes e's body from's: the same bytes, located and vouched for as from's are. Every
// entry made of another's bytes takes them this way, so that what an entry knows of its
// body is never left behind.
func (e *Entry) takeBody(from *Entry) {
	e.Bytes, e.bodyType, e.bodyAt, e.checked = from.Bytes, from.bodyType, from.bodyAt, from.checked
}

// BodyChecked reports a body its producer vouched for (Encoded.Checked): a valid encoding of
// the message its type URL names. False says nothing either way: the reader checks.
func (e *Entry) BodyChecked() bool { return e.checked }

// Decode returns the resource decoded from Bytes: a new message, the caller's to keep.
func (e *Entry) Decode() (*mcpapi.Resource, error) {
	r := &mcpapi.Resource{}
	if err := proto.Unmarshal(e.Bytes, r); err != nil {
		return nil, err
	}
	if t, ok := e.elided(); ok && r.Body != nil {
		r.Body.TypeUrl = t
	}
	return r, nil
}

// bodyOf finds the body Any (field 2 of istio.mcp.v1alpha1.Resource) in an encoding, and its
// type URL (1) and value (2). The encodings are the store's own, so a malformed one is not
// expected; it reads as no body.
func bodyOf(b []byte) (typeURL string, value []byte) {
	anyBytes, ok := field(b, 2)
	if !ok {
		return "", nil
	}
	if t, ok := field(anyBytes, 1); ok {
		typeURL = view(t)
	}
	value, _ = field(anyBytes, 2)
	return typeURL, value
}

// metaOf returns the name (1) and version (3) of the Metadata (field 1) of an encoding, as
// views into it.
func metaOf(b []byte) (name, version string) {
	meta, ok := field(b, 1)
	if !ok {
		return "", ""
	}
	n, _ := field(meta, 1)
	v, _ := field(meta, 3)
	return view(n), view(v)
}

// field returns the last length-delimited field num of a message encoding (proto's rule for
// a repeated singular field: the last one wins).
func field(b []byte, num protowire.Number) (out []byte, found bool) {
	for len(b) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return out, found
		}
		b = b[tagLen:]
		valLen := protowire.ConsumeFieldValue(n, typ, b)
		if valLen < 0 {
			return out, found
		}
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			out, found = v, true
		}
		b = b[valLen:]
	}
	return out, found
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
