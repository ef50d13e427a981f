package filesource

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbridge/mcpbridge/kinds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// fastDecode decodes a document that the fast parser read straight from its tree into its
// object, field by field through protobuf reflection. The general path converts the document to
// JSON and decodes that three times over (into raw fields, into values to rewrite durations, and
// with protojson); at 100,000 ServiceEntries that was the largest single cost of a load.
//
// It reports false for anything it does not decode exactly as the general path does, and for
// every fault, so that the general path decodes the document and names what is wrong: the fast
// path may refuse anything, but what it accepts it decodes to the very object the general path
// gives. FuzzFastDecodeAgreesWithGeneral checks that on every input.
func (d *docDecoder) fastDecode(p *fastYAML) (*Object, proto.Message, bool) {
	if p.null() || p.nodes[0].kind != mappingNode {
		return nil, nil, false
	}
	var apiVersion, kind string
	meta, spec := int32(-1), int32(-1)
	for c := p.nodes[0].first; c >= 0; c = p.nodes[c].next {
		n := &p.nodes[c]
		ok := true
		switch n.key {
		case "apiVersion":
			apiVersion, ok = n.nonEmptyString()
		case "kind":
			kind, ok = n.nonEmptyString()
		case "metadata":
			meta = c
		case "spec":
			spec = c
		case "status": // ignored, whatever it holds, as by the general path
		default:
			ok = false
		}
		if !ok {
			return nil, nil, false
		}
	}
	if apiVersion == "" || kind == "" || meta < 0 || spec < 0 {
		return nil, nil, false
	}
	k, ok := kinds.ByGroupVersionKind(apiVersion, kind)
	if !ok {
		return nil, nil, false
	}
	md, ok := p.metadata(meta)
	if !ok {
		return nil, nil, false
	}
	body, msg, ok := p.spec(k, spec)
	if !ok {
		return nil, nil, false
	}
	// Decode names the kind and the name in the fault of a name defined twice. The lookup
	// matched kind exactly, so k.Kind is the document's kind.
	d.kind, d.name = k.Kind, md.Name
	return &Object{
		Kind:     k,
		Resource: &mcpapi.Resource{Metadata: md, Body: body},
		File:     d.file,
		Doc:      d.doc,
		Line:     d.line,
	}, msg, true
}

// nonEmptyString returns a string node's value; false for any other node or an empty string.
func (n *yamlNode) nonEmptyString() (string, bool) {
	return n.value, n.kind == stringNode && n.value != ""
}

// metadata decodes metadata as the general path's metadata does. The strings it keeps are
// copies: the tree's strings share the whole document's text, which the store should not keep.
func (p *fastYAML) metadata(i int32) (*mcpapi.Metadata, bool) {
	if p.nodes[i].kind != mappingNode {
		return nil, false
	}
	name, namespace := "", "default"
	meta := &mcpapi.Metadata{}
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		f := &p.nodes[c]
		ok := true
		switch f.key {
		case "name":
			name, ok = f.nonEmptyString()
		case "namespace":
			namespace, ok = f.nonEmptyString()
		case "labels":
			meta.Labels, ok = p.stringMap(c)
		case "annotations":
			meta.Annotations, ok = p.stringMap(c)
		case "resourceVersion":
			meta.Version, ok = strings.Clone(f.value), f.kind == stringNode
		case "creationTimestamp":
			meta.CreateTime, ok = f.timestamp()
		default:
			ok = slices.Contains(ignoredMetadata, f.key)
		}
		if !ok {
			return nil, false
		}
	}
	if name == "" || strings.ContainsAny(name, "/ \t\r\n") || strings.ContainsAny(namespace, "/ \t\r\n") {
		return nil, false
	}
	meta.Name = namespace + "/" + name
	return meta, true
}

// stringMap decodes labels or annotations: a mapping of strings to strings, and nothing else.
func (p *fastYAML) stringMap(i int32) (map[string]string, bool) {
	if p.nodes[i].kind != mappingNode {
		return nil, false
	}
	size := 0
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		size++
	}
	out := make(map[string]string, size)
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		if p.nodes[c].kind != stringNode {
			return nil, false
		}
		out[strings.Clone(p.nodes[c].key)] = strings.Clone(p.nodes[c].value)
	}
	return out, true
}

// timestamp decodes creationTimestamp as the general path's timestamp does: null, or RFC 3339.
func (n *yamlNode) timestamp() (*timestamppb.Timestamp, bool) {
	switch n.kind {
	case nullNode:
		return nil, true
	case stringNode:
		t, err := time.Parse(time.RFC3339, n.value)
		if err != nil {
			return nil, false
		}
		return timestamppb.New(t), true
	}
	return nil, false
}

// spec decodes spec into the kind's message and wraps it in an Any, as the general path does;
// it returns the message too, to be validated.
func (p *fastYAML) spec(k *kinds.Kind, i int32) (*anypb.Any, proto.Message, bool) {
	msg := k.New()
	if !p.setFields(i, msg.ProtoReflect(), 0) {
		return nil, nil, false
	}
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, msg, deterministic); err != nil {
		return nil, nil, false
	}
	return body, msg, true
}

// maxMessageDepth bounds the nesting of messages the fast path decodes; Istio's messages nest a
// dozen deep at most, and the general path judges anything deeper against protojson's limit.
const maxMessageDepth = 100

// setFields sets the fields of m from a mapping, as protojson does: each key is a field's JSON
// name or its proto name. Unknown fields, a field given twice (under its two names), two members
// of one oneof, and nulls are refused; protojson rejects the first three and skips a null, which
// is rare enough to leave to it.
func (p *fastYAML) setFields(i int32, m protoreflect.Message, depth int) bool {
	if p.nodes[i].kind != mappingNode || depth > maxMessageDepth {
		return false
	}
	fields := m.Descriptor().Fields()
	var seenBuf [16]protoreflect.FieldNumber
	var oneofBuf [4]int
	seen, oneofs := seenBuf[:0], oneofBuf[:0]
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		key := p.nodes[c].key
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil || slices.Contains(seen, fd.Number()) || p.nodes[c].kind == nullNode {
			return false
		}
		seen = append(seen, fd.Number())
		if od := fd.ContainingOneof(); od != nil {
			if slices.Contains(oneofs, od.Index()) {
				return false
			}
			oneofs = append(oneofs, od.Index())
		}
		if !p.setField(c, m, fd, depth) {
			return false
		}
	}
	return true
}

// setField sets one field of m from node i.
func (p *fastYAML) setField(i int32, m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) bool {
	switch {
	case fd.IsList():
		return p.setList(i, m.Mutable(fd).List(), fd, depth)
	case fd.IsMap():
		return p.setMap(i, m.Mutable(fd).Map(), fd, depth)
	case fd.Kind() == protoreflect.MessageKind:
		v := m.NewField(fd)
		if !p.setMessage(i, v.Message(), depth+1) {
			return false
		}
		m.Set(fd, v)
	default:
		v, ok := p.scalarValue(i, fd)
		if !ok {
			return false
		}
		m.Set(fd, v)
	}
	return true
}

// setList appends a sequence's items to a repeated field.
func (p *fastYAML) setList(i int32, list protoreflect.List, fd protoreflect.FieldDescriptor, depth int) bool {
	if p.nodes[i].kind != sequenceNode {
		return false
	}
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		var v protoreflect.Value
		if fd.Kind() == protoreflect.MessageKind {
			v = list.NewElement()
			if !p.setMessage(c, v.Message(), depth+1) {
				return false
			}
		} else {
			var ok bool
			if v, ok = p.scalarValue(c, fd); !ok {
				return false
			}
		}
		list.Append(v)
	}
	return true
}

// setMap sets a map field with string keys from a mapping; other keys are left to protojson.
func (p *fastYAML) setMap(i int32, mm protoreflect.Map, fd protoreflect.FieldDescriptor, depth int) bool {
	if p.nodes[i].kind != mappingNode || fd.MapKey().Kind() != protoreflect.StringKind {
		return false
	}
	vd := fd.MapValue()
	for c := p.nodes[i].first; c >= 0; c = p.nodes[c].next {
		var v protoreflect.Value
		if vd.Kind() == protoreflect.MessageKind {
			v = mm.NewValue()
			if !p.setMessage(c, v.Message(), depth+1) {
				return false
			}
		} else {
			var ok bool
			if v, ok = p.scalarValue(c, vd); !ok {
				return false
			}
		}
		mm.Set(protoreflect.ValueOfString(p.nodes[c].key).MapKey(), v)
	}
	return true
}

// setMessage decodes a message-typed value: a well-known type in the form protojson reads it
// (a Duration, or a wrapper from its bare value), or else a message from a mapping. The other
// well-known types (Any, Timestamp, Struct, Value, ListValue, FieldMask, Empty, BytesValue)
// are left to protojson.
func (p *fastYAML) setMessage(i int32, m protoreflect.Message, depth int) bool {
	md := m.Descriptor()
	if md.FullName().Parent() != "google.protobuf" {
		return p.setFields(i, m, depth)
	}
	switch md.Name() {
	case "Duration":
		return p.setDuration(i, m)
	case "BoolValue", "Int32Value", "Int64Value", "UInt32Value", "UInt64Value",
		"FloatValue", "DoubleValue", "StringValue":
		fd := md.Fields().ByNumber(1) // value, in every wrapper
		v, ok := p.scalarValue(i, fd)
		if !ok {
			return false
		}
		m.Set(fd, v)
		return true
	}
	return false
}

// scalarValue converts a scalar node to a value of fd's kind, accepting what protojson accepts
// from the JSON the general path makes of the node: strings for strings, true and false for
// bools, enum names and numbers for enums, integers in range for integers and floating point.
// Quoted numbers, which protojson also takes, are left to it; so are bytes.
func (p *fastYAML) scalarValue(i int32, fd protoreflect.FieldDescriptor) (protoreflect.Value, bool) {
	n := &p.nodes[i]
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(n.value), n.kind == stringNode
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(n.value == "true"), n.kind == boolNode
	case protoreflect.EnumKind:
		return enumValue(n, fd)
	}
	if n.kind != intNode {
		return protoreflect.Value{}, false
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		x, err := strconv.ParseInt(n.value, 10, 32)
		return protoreflect.ValueOfInt32(int32(x)), err == nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		x, err := strconv.ParseInt(n.value, 10, 64)
		return protoreflect.ValueOfInt64(x), err == nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		x, err := strconv.ParseUint(n.value, 10, 32)
		return protoreflect.ValueOfUint32(uint32(x)), err == nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		x, err := strconv.ParseUint(n.value, 10, 64)
		return protoreflect.ValueOfUint64(x), err == nil
	case protoreflect.FloatKind:
		x, err := strconv.ParseFloat(n.value, 32) // as protojson reads a number
		return protoreflect.ValueOfFloat32(float32(x)), err == nil
	case protoreflect.DoubleKind:
		x, err := strconv.ParseFloat(n.value, 64)
		return protoreflect.ValueOfFloat64(x), err == nil
	}
	return protoreflect.Value{}, false
}

// enumValue converts an enum's name, or its number within int32, as protojson does.
func enumValue(n *yamlNode, fd protoreflect.FieldDescriptor) (protoreflect.Value, bool) {
	switch n.kind {
	case stringNode:
		if ev := fd.Enum().Values().ByName(protoreflect.Name(n.value)); ev != nil {
			return protoreflect.ValueOfEnum(ev.Number()), true
		}
	case intNode:
		if x, err := strconv.ParseInt(n.value, 10, 32); err == nil {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(x)), true
		}
	}
	return protoreflect.Value{}, false
}

// setDuration decodes a google.protobuf.Duration from a string in protojson's form ("1.5s") or
// in Go's ("5m"), which the general path converts with protojsonDuration before protojson reads
// it; the conversion here is the same, so both paths read every duration alike.
func (p *fastYAML) setDuration(i int32, m protoreflect.Message) bool {
	n := &p.nodes[i]
	if n.kind != stringNode {
		return false
	}
	secs, nanos, ok := parseSeconds(n.value)
	if !ok {
		s, converted := protojsonDuration(n.value)
		if !converted {
			return false // neither form, or protojson's in a spelling parseSeconds leaves to it
		}
		if secs, nanos, ok = parseSeconds(s); !ok {
			return false
		}
	}
	fields := m.Descriptor().Fields()
	m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(secs))  // seconds
	m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(nanos)) // nanos
	return true
}

// maxDurationSeconds is protojson's bound on a Duration's seconds: 10,000 years.
const maxDurationSeconds = 315576000000

// parseSeconds reads a non-negative duration in protojson's form with its usual spelling: "10s",
// "0.25s" (an integer part without leading zero, at most nine decimals), and gives what protojson
// gives for it. It reports false for anything else, including spellings protojson also reads
// ("+1s", ".5s", "1.s", "-1s"), which are left to it.
func parseSeconds(s string) (secs int64, nanos int32, ok bool) {
	if len(s) < 2 || s[len(s)-1] != 's' {
		return 0, 0, false
	}
	whole, frac, hasFrac := strings.Cut(s[:len(s)-1], ".")
	if !digits(whole) || whole[0] == '0' && len(whole) > 1 || hasFrac && (!digits(frac) || len(frac) > 9) {
		return 0, 0, false
	}
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || secs > maxDurationSeconds {
		return 0, 0, false
	}
	for k := range 9 { // nanoseconds: the decimals padded to nine digits
		nanos *= 10
		if k < len(frac) {
			nanos += int32(frac[k] - '0')
		}
	}
	return secs, nanos, true
}

// digits reports a non-empty string of ASCII digits.
func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
