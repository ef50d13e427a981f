package store

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// Encoded is a resource versioned and encoded once, ready for the store (Update.Encoded): a
// producer that builds or decodes its resources on every CPU encodes them there too, and the
// store's write, which is serialised, only indexes them. Make one with Encode or
// EncodeMessage; its bytes become the store's and must not be modified.
//
// It is its bytes alone (producers hold hundreds of thousands of them): the name and version
// are read from the bytes when asked, as views, without a copy.
type Encoded struct {
	// ptr and n are the bytes (raw), without a capacity: they are never appended to, and a
	// producer holds hundreds of thousands of them (16 bytes each, not 32).
	ptr *byte
	n   uint32
	// typ is the index (plus one) under which the body's type URL is interned where the bytes
	// leave it out (elide.go); 0: they hold the whole Resource.
	typ uint16
	// checked: see Checked.
	checked bool
}

// Checked is the encoding marked as one whose producer checked its body: a valid encoding of
// the message its type URL names, as proto.Unmarshal would accept it (the producer built it
// from a typed message, or validated it). Its entry says so (Entry.BodyChecked), and the
// translation does not check the body again. Mark only what was checked: a reader that
// trusts the mark reads the body without checking it.
func (e Encoded) Checked() Encoded {
	e.checked = true
	return e
}

// encodedOf is the Encoded of these bytes, of an interned type URL left out (typ) or none
// (0). An encoding of 4 GiB or more is not one (the store's messages are far smaller).
func encodedOf(b []byte, typ uint16) Encoded {
	if len(b) == 0 {
		return Encoded{typ: typ}
	}
	if uint64(len(b)) > math.MaxUint32 {
		panic("store: an encoding of 4 GiB or more")
	}
	return Encoded{ptr: &b[0], n: uint32(len(b)), typ: typ}
}

// raw is the encoding's bytes.
func (e Encoded) raw() []byte {
	if e.ptr == nil {
		return nil
	}
	return unsafe.Slice(e.ptr, e.n)
}

// Name is the resource's metadata.name.
func (e Encoded) Name() string {
	name, _ := metaOf(e.raw())
	return name
}

// Version is the resource's metadata.version: the producer's, or a content hash.
func (e Encoded) Version() string {
	_, version := metaOf(e.raw())
	return version
}

// Bytes is the deterministic encoding of the istio.mcp.v1alpha1.Resource as the store keeps
// it: its body's type URL may be left out (elide.go), so that two Encoded of the same content
// have the same Bytes, but a reader of a Resource wants Entry.AppendResource. Not to be
// modified.
func (e Encoded) Bytes() []byte { return e.raw() }

// Body returns the type URL and encoded value of the body Any, as views into Bytes (the type
// URL interned, where Bytes leave it out).
func (e Encoded) Body() (typeURL string, value []byte) {
	typeURL, value = bodyOf(e.raw())
	if e.typ != 0 {
		typeURL = internedType(e.typ)
	}
	return typeURL, value
}

// view is a string over immutable bytes, without a copy: the store's encodings are never
// modified once made, so the names and versions it indexes by can point into them.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// Encode versions and encodes a resource: its metadata.version, or a content hash of the
// resource when it has none (the 64-bit xxHash of its deterministic encoding without a
// version, in 16 hex digits), and its deterministic encoding with that version. The hash
// only has to change with the content, not resist an adversary: whoever can write a
// resource can write any content under any version anyway. r is not
// modified and not kept.
//
// The encoding is written field by field (metadata = 1, body = 2; an Any's type_url = 1,
// value = 2), which is what proto's deterministic marshalling gives for these messages; the
// hash is fed the pieces, so no second copy of the body is made for it. A resource carrying
// unknown fields is marshalled the generic way.
func Encode(r *mcpapi.Resource) (Encoded, error) {
	if r == nil || r.Metadata == nil {
		return Encoded{}, errors.New("resource has no metadata")
	}
	body := r.GetBody()
	if len(r.ProtoReflect().GetUnknown()) > 0 || body != nil && len(body.ProtoReflect().GetUnknown()) > 0 {
		b, err := encodeGeneric(r)
		if err != nil {
			return Encoded{}, err
		}
		return encodedOf(b, 0), nil
	}
	var anyLen int // proto3 leaves empty scalar fields out
	var typ uint16 // the body's type URL interned, to leave out
	if body != nil {
		anyLen = stringSize(1, body.TypeUrl) + bytesSize(2, len(body.Value))
		typ = elidable(body.TypeUrl, len(body.Value))
	}
	if directMetadata(r.Metadata) {
		if enc, ok := encodeDirect(r.Metadata, body, anyLen, typ); ok {
			return enc, nil
		}
	}
	var metaBytes []byte
	var err error
	if r.Metadata.Version != "" {
		if metaBytes, err = deterministic.Marshal(r.Metadata); err != nil {
			return Encoded{}, err
		}
	} else {
		unversioned, err := deterministic.Marshal(r.Metadata)
		if err != nil {
			return Encoded{}, err
		}
		var h xxhash.Digest
		h.Reset()
		var scratch [2 * binary.MaxVarintLen64]byte
		h.Write(appendField(scratch[:0], 1, len(unversioned)))
		h.Write(unversioned)
		if body != nil {
			hashAny(&h, anyLen, body.TypeUrl, body.Value)
		}
		metaBytes = withVersion(unversioned, hexSum(&h))
	}
	size := fieldLen(1, len(metaBytes))
	if body != nil {
		size += fieldLen(2, storedAnyLen(body.TypeUrl, len(body.Value), typ != 0))
	}
	b := make([]byte, 0, size)
	b = append(appendField(b, 1, len(metaBytes)), metaBytes...)
	b = appendBody(b, body, typ)
	return encodedOf(b, typ), nil
}

// appendBody writes the body field of a resource: an Any of its type URL, left out where typ
// names it interned, and value. Nothing for a resource without a body.
func appendBody(b []byte, body *anypb.Any, typ uint16) []byte {
	if body == nil {
		return b
	}
	b = appendField(b, 2, storedAnyLen(body.TypeUrl, len(body.Value), typ != 0))
	if typ == 0 {
		b = appendString(b, 1, body.TypeUrl)
	}
	return appendBytes(b, 2, body.Value)
}

// directMetadata tells whether encodeDirect may write m (no unknown fields in it or its
// timestamp, and its name and version UTF-8; the maps' strings are checked as encodeDirect
// reads them): else it is marshalled the generic way, with the error marshalling gives.
func directMetadata(m *mcpapi.Metadata) bool {
	if len(m.ProtoReflect().GetUnknown()) > 0 || m.CreateTime != nil && len(m.CreateTime.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	return utf8.ValidString(m.Name) && utf8.ValidString(m.Version)
}

// encodeDirect is Encode of a resource whose metadata directMetadata vouches for, written
// field by field into one allocation: deterministic marshalling sorts a map's keys through
// reflection (several allocations a resource, every document of every file), and the
// content-hash version was an unversioned encoding, a hex string and a copy with the version.
// The hash is fed the same bytes as before (the unversioned metadata, then the body), from
// the pieces around the version's place, which is then filled in as EncodeBody fills it.
//
// It writes the fields TestMetadataHasTheFieldsEncodeWrites holds Metadata to; ok false (a
// label or annotation that is not UTF-8, or sizes and bytes written that disagree: a map
// changed meanwhile, which is the caller's race) sends the resource the generic way.
func encodeDirect(m *mcpapi.Metadata, body *anypb.Any, anyLen int, typ uint16) (enc Encoded, ok bool) {
	var room [2][8]mapEntry // most resources have a few labels and annotations
	labels, ok1 := sortedEntries(room[0][:0], m.Labels)
	annotations, ok2 := sortedEntries(room[1][:0], m.Annotations)
	if !ok1 || !ok2 {
		return Encoded{}, false
	}
	version := m.Version
	hashed := version == ""
	if hashed {
		version = versionPlaceholder // filled in with the hash below
	}
	head := stringSize(1, m.Name) // name and create_time: before the version
	if ts := m.CreateTime; ts != nil {
		head += fieldLen(2, timestampSize(ts.Seconds, ts.Nanos))
	}
	tail := mapSize(4, labels) + mapSize(5, annotations)
	metaLen := head + stringSize(3, version) + tail
	size := fieldLen(1, metaLen)
	if body != nil {
		size += fieldLen(2, storedAnyLen(body.TypeUrl, len(body.Value), typ != 0))
	}
	b := make([]byte, 0, size)
	b = appendField(b, 1, metaLen)
	headAt := len(b)
	b = appendString(b, 1, m.Name)
	if ts := m.CreateTime; ts != nil {
		b = appendField(b, 2, timestampSize(ts.Seconds, ts.Nanos))
		b = appendTimestamp(b, ts.Seconds, ts.Nanos)
	}
	versionAt := len(b)
	b = appendString(b, 3, version)
	tailAt := len(b)
	b = appendMap(b, 4, labels)
	b = appendMap(b, 5, annotations)
	b = appendBody(b, body, typ)
	if hashed {
		var h xxhash.Digest
		h.Reset()
		var scratch [2 * binary.MaxVarintLen64]byte
		h.Write(appendField(scratch[:0], 1, head+tail))
		h.Write(b[headAt:versionAt])
		h.Write(b[tailAt : tailAt+tail])
		if body != nil {
			hashAny(&h, anyLen, body.TypeUrl, body.Value)
		}
		putHash(b[versionAt+fieldLen(3, versionLen)-versionLen:], &h)
	}
	return encodedOf(b, typ), len(b) == size
}

// mapEntry is one entry of a map<string, string>.
type mapEntry struct{ k, v string }

// sortedEntries appends m's entries to room in the order deterministic marshalling writes
// them (by key); ok false for a key or value that is not UTF-8, which marshalling refuses.
func sortedEntries(room []mapEntry, m map[string]string) ([]mapEntry, bool) {
	for k, v := range m {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, false
		}
		room = append(room, mapEntry{k, v})
	}
	slices.SortFunc(room, func(a, b mapEntry) int { return strings.Compare(a.k, b.k) })
	return room, true
}

// mapSize is the size of a map<string, string> field num of these entries: each a message
// of its key (1) and value (2), both written even when empty.
func mapSize(num protowire.Number, entries []mapEntry) int {
	n := 0
	for _, e := range entries {
		n += fieldLen(num, entrySize(e))
	}
	return n
}

func entrySize(e mapEntry) int { return fieldLen(1, len(e.k)) + fieldLen(2, len(e.v)) }

func appendMap(b []byte, num protowire.Number, entries []mapEntry) []byte {
	for _, e := range entries {
		b = appendField(b, num, entrySize(e))
		b = append(appendField(b, 1, len(e.k)), e.k...)
		b = append(appendField(b, 2, len(e.v)), e.v...)
	}
	return b
}

// timestampSize is the size of a google.protobuf.Timestamp's fields: seconds (1) and nanos
// (2), varints left out when zero, nanos sign-extended as an int32 is.
func timestampSize(seconds int64, nanos int32) int {
	n := 0
	if seconds != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(seconds))
	}
	if nanos != 0 {
		n += protowire.SizeTag(2) + protowire.SizeVarint(uint64(int64(nanos)))
	}
	return n
}

func appendTimestamp(b []byte, seconds int64, nanos int32) []byte {
	if seconds != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), uint64(seconds))
	}
	if nanos != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), uint64(int64(nanos)))
	}
	return b
}

// versionLen is the length of a content-hash version: 64 bits in hex.
const versionLen = 16

// versionPlaceholder holds a content-hash version's place while the bytes it hashes are
// written; putHash fills it in.
const versionPlaceholder = "0000000000000000"

// putHash writes the hash's sum, a content-hash version, over the placeholder at dst.
func putHash(dst []byte, h *xxhash.Digest) {
	sum := sumOf(h)
	hex.Encode(dst[:versionLen], sum[:])
}

// EncodeMessage encodes msg as the body of a resource named name with the given Any type URL,
// versioned by a content hash: the same bytes and version as Encode gives for
// Resource{metadata: {name}, body: Any(msg)} with msg marshalled deterministically, made
// with one allocation: the message is marshalled in place, after the resource's header.
func EncodeMessage(name, typeURL string, msg proto.Message) (Encoded, error) {
	opts := proto.MarshalOptions{Deterministic: true, UseCachedSize: true}
	return EncodeBody(name, typeURL, opts.Size(msg), func(b []byte) ([]byte, error) {
		return opts.MarshalAppend(b, msg)
	})
}

// EncodeBody is EncodeMessage for a body its producer encodes itself: appendValue appends
// exactly valueLen bytes, the body's encoding, to the resource's header.
func EncodeBody(name, typeURL string, valueLen int, appendValue func([]byte) ([]byte, error)) (Encoded, error) {
	anyLen := stringSize(1, typeURL) + bytesSize(2, valueLen) // as hashed: the whole Any
	typ := elidable(typeURL, valueLen)
	storedAny := storedAnyLen(typeURL, valueLen, typ != 0)
	unversionedMeta := stringSize(1, name)
	metaLen := unversionedMeta + fieldLen(3, versionLen)
	b := make([]byte, 0, fieldLen(1, metaLen)+fieldLen(2, storedAny))
	b = appendField(b, 1, metaLen)
	b = appendString(b, 1, name)
	b = appendField(b, 3, versionLen)
	versionAt := len(b)
	b = append(b, versionPlaceholder...)
	b = appendField(b, 2, storedAny)
	if typ == 0 {
		b = appendString(b, 1, typeURL)
	}
	if valueLen > 0 {
		b = appendField(b, 2, valueLen)
	}
	valueAt := len(b)
	b, err := appendValue(b)
	if err != nil {
		return Encoded{}, fmt.Errorf("encoding %s: %w", name, err)
	}
	if len(b)-valueAt != valueLen {
		return Encoded{}, fmt.Errorf("encoding %s: %d bytes, sized %d", name, len(b)-valueAt, valueLen)
	}
	// The hash and its scratch stay on the stack: every output of every build is encoded here.
	var h xxhash.Digest
	h.Reset()
	var scratch [2 * binary.MaxVarintLen64]byte
	h.Write(appendField(scratch[:0], 1, unversionedMeta))
	if name != "" { // as appendString writes it
		h.Write(appendField(scratch[:0], 1, len(name)))
		h.WriteString(name)
	}
	hashAny(&h, anyLen, typeURL, b[valueAt:])
	putHash(b[versionAt:], &h)
	return encodedOf(b, typ), nil
}

// hashAny feeds a hash the body field (2) of a resource: an Any of anyLen bytes.
func hashAny(h *xxhash.Digest, anyLen int, typeURL string, value []byte) {
	var scratch [2 * binary.MaxVarintLen64]byte
	h.Write(appendField(scratch[:0], 2, anyLen))
	if typeURL != "" {
		h.Write(appendField(scratch[:0], 1, len(typeURL)))
		h.WriteString(typeURL)
	}
	if len(value) > 0 {
		h.Write(appendField(scratch[:0], 2, len(value)))
		h.Write(value)
	}
}

// withVersion inserts metadata.version (field 3) into a deterministic encoding of Metadata
// without one: after the fields numbered below it, as deterministic marshalling orders them.
func withVersion(meta []byte, version string) []byte {
	at := len(meta)
	for rest := meta; len(rest) > 0; {
		n, typ, tagLen := protowire.ConsumeTag(rest)
		if tagLen < 0 || n > 3 {
			at = len(meta) - len(rest)
			break
		}
		valLen := protowire.ConsumeFieldValue(n, typ, rest[tagLen:])
		if valLen < 0 {
			break
		}
		rest = rest[tagLen+valLen:]
	}
	out := make([]byte, 0, len(meta)+stringSize(3, version))
	out = append(out, meta[:at]...)
	out = appendString(out, 3, version)
	return append(out, meta[at:]...)
}

func hexSum(h *xxhash.Digest) string {
	sum := sumOf(h)
	return hex.EncodeToString(sum[:])
}

// sumOf is the hash's sum as Digest.Sum appends it (big-endian), without an allocation.
func sumOf(h *xxhash.Digest) (sum [8]byte) {
	binary.BigEndian.PutUint64(sum[:], h.Sum64())
	return sum
}

func encodeGeneric(r *mcpapi.Resource) ([]byte, error) {
	if r.Metadata.Version != "" {
		return deterministic.Marshal(r)
	}
	unversioned, err := deterministic.Marshal(r)
	if err != nil {
		return nil, err
	}
	c := proto.Clone(r).(*mcpapi.Resource)
	c.Metadata.Version = fmt.Sprintf("%016x", xxhash.Sum64(unversioned))
	return deterministic.Marshal(c)
}

// appendField appends the tag and length of a length-delimited field.
func appendField(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return append(appendField(b, num, len(s)), s...)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return append(appendField(b, num, len(v)), v...)
}

// fieldLen is the encoded size of a length-delimited field holding n bytes.
func fieldLen(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func stringSize(num protowire.Number, s string) int { return bytesSize(num, len(s)) }

// bytesSize is the size of a length-delimited field of n bytes that proto3 leaves out when empty.
func bytesSize(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return fieldLen(num, n)
}
