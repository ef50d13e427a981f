package filesource

import (
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The fast path writes a spec's wire encoding straight from the parsed tree, as a
// deterministic proto.Marshal of the message the tree decodes to would write it, without
// making the message first: at 1,000,000 ServiceEntries, setting a message's fields through
// protobuf reflection and marshalling it again were 60% of a load's decoding. The message,
// which validation needs, is then unmarshalled from those bytes by the generated code, which
// costs a fraction of either.
//
// The encoding follows protobuf-go's deterministic marshalling: fields in its order
// (marshalOrder);
// scalars without presence left out when zero (a float or double only when +0); repeated
// scalars packed where the field is (proto3's numeric ones), each string of a repeated field
// written even when empty; a map's entries in key order, each with its key and its value even
// when zero; a message field written even when empty. It accepts what protojson reads the
// same way (below) and refuses the rest: an unknown field, a field given twice (under its two
// names), two members of one oneof, a null, quoted numbers, bytes, map keys other than
// strings, the well-known types but Duration and the wrappers. The general path then decodes
// the document and names what is wrong. FuzzFastDecodeAgreesWithGeneral holds the bytes to the
// general path's on every input.

// fieldNode is one field of a mapping: its descriptor and the node of its value.
type fieldNode struct {
	fd   protoreflect.FieldDescriptor
	node int32
}

// appendMessage appends the encoding of the message of descriptor md that the node decodes
// to: a well-known type in the form protojson reads it, else the fields of a mapping, each
// key a field's JSON name or its proto name, as protojson reads them.
func (p *fastYAML) appendMessage(b []byte, i int32, md protoreflect.MessageDescriptor, depth int) ([]byte, bool) {
	if md.FullName().Parent() == "google.protobuf" {
		return p.appendWellKnown(b, i, md)
	}
	if p.nodes[i].kind != mappingNode || depth > maxMessageDepth {
		return b, false
	}
	var fieldBuf [16]fieldNode
	var oneofBuf [4]int
	fields, oneofs := fieldBuf[:0], oneofBuf[:0]
	all := md.Fields()
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		key := p.nodes[c].key
		fd := all.ByJSONName(key)
		if fd == nil {
			fd = all.ByTextName(key)
		}
		if fd == nil || p.nodes[c].kind == nullNode || slices.ContainsFunc(fields, func(f fieldNode) bool { return f.fd.Number() == fd.Number() }) {
			return b, false
		}
		if od := fd.ContainingOneof(); od != nil {
			if slices.Contains(oneofs, od.Index()) {
				return b, false
			}
			oneofs = append(oneofs, od.Index())
		}
		fields = append(fields, fieldNode{fd, c})
	}
	slices.SortFunc(fields, func(x, y fieldNode) int { return marshalOrder(x.fd, y.fd) })
	for _, f := range fields {
		var ok bool
		if b, ok = p.appendField(b, f.node, f.fd, depth); !ok {
			return b, false
		}
	}
	return b, true
}

// marshalOrder is the order protobuf-go marshals a generated message's fields in (its
// internal order.LegacyFieldOrder, "to preserve compatibility with historic wire output"):
// the fields outside a oneof by number, then the members of oneofs, by the oneof's
// declaration, then by number. A proto3 optional field's synthetic oneof is no oneof here.
func marshalOrder(x, y protoreflect.FieldDescriptor) int {
	ox, oy := realOneof(x), realOneof(y)
	switch {
	case (ox == nil) != (oy == nil):
		if ox == nil {
			return -1
		}
		return 1
	case ox != nil && ox != oy:
		return ox.Index() - oy.Index()
	}
	return int(x.Number()) - int(y.Number())
}

// realOneof is the oneof a field is a member of; nil for none or a synthetic one.
func realOneof(fd protoreflect.FieldDescriptor) protoreflect.OneofDescriptor {
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		return od
	}
	return nil
}

// appendField appends one field of a message from node i.
func (p *fastYAML) appendField(b []byte, i int32, fd protoreflect.FieldDescriptor, depth int) ([]byte, bool) {
	switch {
	case fd.IsList():
		return p.appendList(b, i, fd, depth)
	case fd.IsMap():
		return p.appendMap(b, i, fd, depth)
	case fd.Kind() == protoreflect.MessageKind:
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return p.appendLengthPrefixed(b, func(b []byte) ([]byte, bool) { return p.appendMessage(b, i, fd.Message(), depth+1) })
	}
	return p.appendScalarField(b, i, fd, fd.HasPresence())
}

// appendList appends a repeated field from a sequence: packed where the field is, else an
// element per item.
func (p *fastYAML) appendList(b []byte, i int32, fd protoreflect.FieldDescriptor, depth int) ([]byte, bool) {
	if p.nodes[i].kind != sequenceNode {
		return b, false
	}
	first := p.nodes[i].first
	if fd.IsPacked() {
		if first < 0 {
			return b, true // an empty packed field is not written
		}
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return p.appendLengthPrefixed(b, func(b []byte) ([]byte, bool) {
			for c := first; c >= 0; c = p.nodes[c].next {
				var ok bool
				if b, ok = p.appendScalar(b, c, fd); !ok {
					return b, false
				}
			}
			return b, true
		})
	}
	for c := first; c >= 0; c = p.nodes[c].next {
		var ok bool
		if fd.Kind() == protoreflect.MessageKind {
			b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
			b, ok = p.appendLengthPrefixed(b, func(b []byte) ([]byte, bool) { return p.appendMessage(b, c, fd.Message(), depth+1) })
		} else {
			b, ok = p.appendScalarField(b, c, fd, true) // an element is written even when zero
		}
		if !ok {
			return b, false
		}
	}
	return b, true
}

// appendMap appends a map field with string keys from a mapping, its entries in key order
// (deterministic marshalling), each with its key and its value, zero or not.
func (p *fastYAML) appendMap(b []byte, i int32, fd protoreflect.FieldDescriptor, depth int) ([]byte, bool) {
	if p.nodes[i].kind != mappingNode || fd.MapKey().Kind() != protoreflect.StringKind {
		return b, false
	}
	var entryBuf [8]int32
	entries := entryBuf[:0]
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		entries = append(entries, c) // its key UTF-8, as every string of the tree (parse)
	}
	slices.SortFunc(entries, func(x, y int32) int {
		switch kx, ky := p.nodes[x].key, p.nodes[y].key; {
		case kx < ky:
			return -1
		case kx > ky:
			return 1
		}
		return 0
	})
	key, value := fd.MapKey(), fd.MapValue()
	for n, c := range entries {
		if n > 0 && p.nodes[entries[n-1]].key == p.nodes[c].key {
			return b, false // a key twice: the general path says what it makes of it
		}
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		var ok bool
		b, ok = p.appendLengthPrefixed(b, func(b []byte) ([]byte, bool) {
			b = protowire.AppendTag(b, key.Number(), protowire.BytesType)
			b = protowire.AppendString(b, p.nodes[c].key)
			if value.Kind() == protoreflect.MessageKind {
				b = protowire.AppendTag(b, value.Number(), protowire.BytesType)
				return p.appendLengthPrefixed(b, func(b []byte) ([]byte, bool) { return p.appendMessage(b, c, value.Message(), depth+1) })
			}
			return p.appendScalarField(b, c, value, true)
		})
		if !ok {
			return b, false
		}
	}
	return b, true
}

// appendWellKnown appends the well-known types the fast path reads: a Duration from a string
// (protojson's form or Go's, as the general path's protojsonDuration converts it), a wrapper
// from its bare value. The others are left to protojson.
func (p *fastYAML) appendWellKnown(b []byte, i int32, md protoreflect.MessageDescriptor) ([]byte, bool) {
	switch md.Name() {
	case "Duration":
		secs, nanos, ok := p.duration(i)
		if !ok {
			return b, false
		}
		if secs != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(secs))
		}
		if nanos != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(nanos)))
		}
		return b, true
	case "BoolValue", "Int32Value", "Int64Value", "UInt32Value", "UInt64Value",
		"FloatValue", "DoubleValue", "StringValue":
		return p.appendScalarField(b, i, md.Fields().ByNumber(1), false) // value, in every wrapper
	}
	return b, false
}

// appendScalarField appends a scalar field's tag and value; a zero value is left out unless
// written is set (a field with presence, an element of a list, a map entry's value).
func (p *fastYAML) appendScalarField(b []byte, i int32, fd protoreflect.FieldDescriptor, written bool) ([]byte, bool) {
	start := len(b)
	b = protowire.AppendTag(b, fd.Number(), wireType(fd.Kind()))
	tagged := len(b)
	b, ok := p.appendScalar(b, i, fd)
	if ok && !written && isZero(b[tagged:], fd.Kind()) {
		b = b[:start]
	}
	return b, ok
}

// appendScalar appends a scalar value of fd's kind (without a tag) from node i, accepting what
// protojson accepts from the JSON the general path makes of the node: strings for strings,
// true and false for bools, enum names and numbers for enums, integers in range for integers
// and floating point. Quoted numbers, which protojson also takes, are left to it; so are bytes.
func (p *fastYAML) appendScalar(b []byte, i int32, fd protoreflect.FieldDescriptor) ([]byte, bool) {
	n := &p.nodes[i]
	switch fd.Kind() {
	case protoreflect.StringKind:
		// UTF-8, as every string of the tree: parse takes only lines that are (printable).
		if n.kind != stringNode {
			return b, false
		}
		return protowire.AppendString(b, n.value), true
	case protoreflect.BoolKind:
		return protowire.AppendVarint(b, protowire.EncodeBool(n.value == "true")), n.kind == boolNode
	case protoreflect.EnumKind:
		v, ok := enumValue(n, fd)
		if !ok {
			return b, false
		}
		return protowire.AppendVarint(b, uint64(int64(v.Enum()))), true
	}
	if n.kind != intNode {
		return b, false
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		x, err := strconv.ParseInt(n.value, 10, 32)
		return appendInt(b, fd.Kind(), x), err == nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		x, err := strconv.ParseInt(n.value, 10, 64)
		return appendInt(b, fd.Kind(), x), err == nil
	case protoreflect.Uint32Kind:
		x, err := strconv.ParseUint(n.value, 10, 32)
		return protowire.AppendVarint(b, x), err == nil
	case protoreflect.Fixed32Kind:
		x, err := strconv.ParseUint(n.value, 10, 32)
		return protowire.AppendFixed32(b, uint32(x)), err == nil
	case protoreflect.Uint64Kind:
		x, err := strconv.ParseUint(n.value, 10, 64)
		return protowire.AppendVarint(b, x), err == nil
	case protoreflect.Fixed64Kind:
		x, err := strconv.ParseUint(n.value, 10, 64)
		return protowire.AppendFixed64(b, x), err == nil
	case protoreflect.FloatKind:
		x, err := strconv.ParseFloat(n.value, 32) // as protojson reads a number
		return protowire.AppendFixed32(b, math.Float32bits(float32(x))), err == nil
	case protoreflect.DoubleKind:
		x, err := strconv.ParseFloat(n.value, 64)
		return protowire.AppendFixed64(b, math.Float64bits(x)), err == nil
	}
	return b, false
}

// appendInt appends a signed integer in its kind's encoding.
func appendInt(b []byte, k protoreflect.Kind, x int64) []byte {
	switch k {
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.AppendVarint(b, protowire.EncodeZigZag(x))
	case protoreflect.Sfixed32Kind:
		return protowire.AppendFixed32(b, uint32(int32(x)))
	case protoreflect.Sfixed64Kind:
		return protowire.AppendFixed64(b, uint64(x))
	}
	return protowire.AppendVarint(b, uint64(x)) // int32 and int64: a negative one in ten bytes
}

// wireType is the wire type of a scalar kind.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return protowire.BytesType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// isZero reports whether an encoded scalar value (no tag) is its kind's zero, which a field
// without presence does not write: an empty string, a varint 0, fixed bits all zero (a float
// or double +0; -0 is written, as protobuf-go writes it).
func isZero(v []byte, k protoreflect.Kind) bool {
	switch wireType(k) {
	case protowire.BytesType:
		return len(v) == 1 && v[0] == 0 // the length 0
	case protowire.VarintType:
		return len(v) == 1 && v[0] == 0
	}
	for _, c := range v {
		if c != 0 {
			return false
		}
	}
	return true
}

// appendLengthPrefixed appends what fill appends behind its length, as a varint. One byte is
// set aside for the length, which is enough below 128 bytes (most of what a spec nests);
// longer content is moved up to make room.
func (p *fastYAML) appendLengthPrefixed(b []byte, fill func([]byte) ([]byte, bool)) ([]byte, bool) {
	at := len(b)
	b = append(b, 0)
	b, ok := fill(b)
	if !ok {
		return b, false
	}
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b, true
	}
	size := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, size-1)...)
	copy(b[at+size:], b[at+1:at+1+n])
	protowire.AppendVarint(b[:at], uint64(n))
	return b, true
}

// duration reads a Duration node: protojson's form ("1.5s") or Go's ("5m"), which the general
// path converts with protojsonDuration before protojson reads it; the conversion here is the
// same, so both paths read every duration alike.
func (p *fastYAML) duration(i int32) (secs int64, nanos int32, ok bool) {
	n := &p.nodes[i]
	if n.kind != stringNode {
		return 0, 0, false
	}
	if secs, nanos, ok = parseSeconds(n.value); ok {
		return secs, nanos, true
	}
	s, converted := protojsonDuration(n.value)
	if !converted {
		return 0, 0, false
	}
	return parseSeconds(s)
}
