package store

import (
	"bytes"
	"encoding/binary"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
)

// The store keeps most encodings without their body's type URL: every resource of a type
// carries the same one, 51 to 65 bytes for the Envoy types and an Istio kind's, against 200
// to 300 for the whole encoding (170 MB at a million services, three resources each). An encoding that leaves it out ("elided") writes its body Any with its value alone;
// the type URL is interned in typeTable, and the Encoded and the Entry made of the bytes name
// it by its index there. Everything that reads an encoding as a Resource puts it back:
// Entry.Body and Decode, AppendResource for the MCP forms of a response and for the
// replicated backend, which stores and reads whole Resources (EncodedFromBytes leaves the
// type URL out again). The content-hash version is computed over the whole Resource, so it
// does not depend on the form.
//
// A type URL is interned only while the table holds fewer than maxElidedTypes (a producer
// may push resources of any type URL): past that, encodings keep theirs, which every reader
// handles as before. A body whose value is empty keeps its type URL too (the Any would be
// empty, and nothing would mark where the value starts).

// maxElidedTypes bounds the type URLs interned: the store's collections are of tens of types.
const maxElidedTypes = 1024

// maxElidedTypeLen bounds an interned type URL's length: longer ones are kept in place.
const maxElidedTypeLen = 1024

// typeInterner interns type URLs, up to max of them: an index (plus one) for each. Readers
// take the current table without a lock (every encoding of every build asks); a new type URL
// replaces it with a copy, under mu, at most max times.
type typeInterner struct {
	max   int
	mu    sync.Mutex
	table atomic.Pointer[internedTypes]
}

// internedTypes is one version of the table, never modified once published.
type internedTypes struct {
	urls  []string
	index map[string]uint16 // type URL -> its index in urls, plus one
}

// typeTable is the store's.
var typeTable = typeInterner{max: maxElidedTypes}

// internType returns the index plus one under which the store's table holds typeURL,
// interning it if the table has room; 0 when it does not, or for a type URL not to elide.
func internType(typeURL string) uint16 { return typeTable.intern(typeURL) }

// internedType is the type URL interned under i (internType's result, not 0).
func internedType(i uint16) string { return typeTable.lookup(i) }

func (t *typeInterner) intern(typeURL string) uint16 {
	if typeURL == "" || len(typeURL) > maxElidedTypeLen {
		return 0
	}
	if cur := t.table.Load(); cur != nil {
		if i, ok := cur.index[typeURL]; ok {
			return i
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.table.Load()
	if cur == nil {
		cur = &internedTypes{}
	}
	if i, ok := cur.index[typeURL]; ok {
		return i
	}
	if len(cur.urls) >= t.max {
		return 0
	}
	// The type URL is copied: it may be a view into someone's bytes.
	u := strings.Clone(typeURL)
	next := &internedTypes{urls: append(cur.urls[:len(cur.urls):len(cur.urls)], u), index: make(map[string]uint16, len(cur.index)+1)}
	maps.Copy(next.index, cur.index)
	next.index[u] = uint16(len(next.urls))
	t.table.Store(next)
	return uint16(len(next.urls))
}

func (t *typeInterner) lookup(i uint16) string { return t.table.Load().urls[i-1] }

// elidedFlag marks Entry.bodyType as an interned type's index (plus one) rather than the
// length of a type URL in Bytes.
const elidedFlag = 1 << 15

// elidable tells under which index a body's type URL can be left out of its encoding; 0: not.
func elidable(typeURL string, valueLen int) uint16 {
	if valueLen == 0 {
		return 0
	}
	return internType(typeURL)
}

// storedAnyLen is the size of a body Any as an encoding writes it: without its type URL when
// elided.
func storedAnyLen(typeURL string, valueLen int, elided bool) int {
	if elided {
		return bytesSize(2, valueLen)
	}
	return stringSize(1, typeURL) + bytesSize(2, valueLen)
}

// elided is the type URL left out of an entry's encoding, and whether one was.
func (e *Entry) elided() (string, bool) {
	if e.bodyType&elidedFlag == 0 {
		return "", false
	}
	return internedType(e.bodyType &^ elidedFlag), true
}

// ResourceSize is the size of the entry's istio.mcp.v1alpha1.Resource encoding, as
// AppendResource writes it.
func (e *Entry) ResourceSize() int {
	typeURL, ok := e.elided()
	if !ok {
		return len(e.Bytes)
	}
	head, value := e.splitElided()
	return head + fieldLen(2, stringSize(1, typeURL)+bytesSize(2, len(value)))
}

// AppendResource appends the entry's istio.mcp.v1alpha1.Resource encoding to b: Bytes, with
// the body's type URL put back where the store left it out.
func (e *Entry) AppendResource(b []byte) []byte {
	typeURL, ok := e.elided()
	if !ok {
		return append(b, e.Bytes...)
	}
	head, value := e.splitElided()
	b = append(b, e.Bytes[:head]...)
	b = appendField(b, 2, stringSize(1, typeURL)+bytesSize(2, len(value)))
	b = appendString(b, 1, typeURL)
	return appendBytes(b, 2, value)
}

// ResourceBytes is the entry's istio.mcp.v1alpha1.Resource encoding: Bytes itself where
// they hold it whole, else a new copy with the type URL put back (AppendResource).
func (e *Entry) ResourceBytes() []byte {
	if e.bodyType&elidedFlag == 0 {
		return e.Bytes
	}
	return e.AppendResource(make([]byte, 0, e.ResourceSize()))
}

// splitElided splits an elided encoding into what precedes its body field (its length) and
// the body's value: the body is the encoding's last field, its value the Any's only one.
func (e *Entry) splitElided() (head int, value []byte) {
	if e.bodyAt == 0 { // not located: read it
		_, value = bodyOf(e.Bytes)
	} else {
		value = e.Bytes[e.bodyAt:]
	}
	anyLen := bytesSize(2, len(value))
	return len(e.Bytes) - fieldLen(2, anyLen), value
}

// elideEncoding is b, the whole encoding of a Resource (as the replicated backend stores
// it), in the store's form: its body's type URL left out, in a copy, where b is laid out as
// the store writes (the body last, its value last in it, right after its type URL) and the
// type URL can be interned; b itself otherwise.
func elideEncoding(b []byte) Encoded {
	typeLen, valueAt := locate(b)
	if valueAt == 0 {
		return encodedOf(b, 0)
	}
	typeURL, value := bodyIn(b, typeLen, valueAt)
	typ := elidable(typeURL, len(value))
	if typ == 0 {
		return encodedOf(b, 0)
	}
	// The body field must be the Any of the type URL and the value alone: its header, right
	// where a body of just those would start (locate found them last, in that order).
	anyLen := stringSize(1, typeURL) + bytesSize(2, len(value))
	head := len(b) - fieldLen(2, anyLen)
	var room [1 + binary.MaxVarintLen64]byte
	if head < 0 || !bytes.HasPrefix(b[head:], appendField(room[:0], 2, anyLen)) {
		return encodedOf(b, 0) // another layout (an Any with more fields): kept whole
	}
	out := make([]byte, 0, head+fieldLen(2, bytesSize(2, len(value))))
	out = append(out, b[:head]...)
	out = appendField(out, 2, bytesSize(2, len(value)))
	out = appendBytes(out, 2, value)
	return encodedOf(out, typ)
}

// EntryOf is the entry the store makes of enc, named and versioned as enc is: for code that
// writes responses of resources it holds outside a store (and its tests).
func EntryOf(enc Encoded) *Entry { return newEntry(enc.Name(), enc.Version(), enc) }
