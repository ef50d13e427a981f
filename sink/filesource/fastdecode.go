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
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// fastDecode decodes a document that the fast parser read straight from its tree into its
// object, its spec encoded from the tree (fastwire.go). The general path converts the document to
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
	body, msg, ok := p.spec(k, spec, md)
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
// copies (own): the tree's strings share the whole document's text, which an object kept by
// Decode's caller should not keep; the file source's own decode (views) encodes the object
// and drops it, and takes them as they are.
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
			meta.Version, ok = p.own(f.value), f.kind == stringNode
		case "creationTimestamp":
			meta.CreateTime, ok = f.timestamp()
		default:
			ok = slices.Contains(ignoredMetadata, f.key)
		}
		if !ok {
			return nil, false
		}
	}
	if name == "" || !plainName(name) || !plainName(namespace) {
		return nil, false
	}
	meta.Name = namespace + "/" + name
	return meta, true
}

// plainName reports a name or namespace without a slash, space, tab or line break: the
// tree's strings hold no control character (parse takes only printable lines), so a slash
// and a space are all there is to look for, at memchr's speed (ContainsAny built a set of
// five for every document).
func plainName(s string) bool {
	return strings.IndexByte(s, '/') < 0 && strings.IndexByte(s, ' ') < 0
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
		out[p.own(p.nodes[c].key)] = p.own(p.nodes[c].value)
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

// spec encodes spec as the kind's message in an Any, as the general path does (fastwire.go),
// and returns the message too, to be validated: unmarshalled from those bytes. When the kind
// says the bytes are surely valid with md (Kind.SurelyValidWellFormed), there is nothing left
// to validate and the message is not built: it returns the sentinel surelyValid instead.
func (p *fastYAML) spec(k *kinds.Kind, i int32, md *mcpapi.Metadata) (*anypb.Any, proto.Message, bool) {
	desc := k.Descriptor()
	// With views, the file source's decode, the documents' encodings are appended to blocks
	// of the file's (values), not each grown from nothing, three allocations a document: the
	// values live until the file's objects are encoded. The first block is sized for the
	// file (decode), a used block with little room left is replaced by a new one, and a
	// value that outgrows its block goes to the array append grew for it, the block staying
	// as it was: a value keeps the array it was written in.
	var room []byte
	if p.views {
		if len(p.values) > 0 && cap(p.values)-len(p.values) < valueRoomMin {
			p.values = make([]byte, 0, valueChunk)
		}
		room = p.values
	}
	all, ok := p.appendMessage(room, i, desc, 0)
	if !ok {
		return nil, nil, false
	}
	value := all[len(room):len(all):len(all)]
	if p.views && cap(all) == cap(room) { // written in the block, not in a grown copy of it
		p.values = all
	}
	body := &anypb.Any{TypeUrl: k.AMCSTypeURL, Value: value}
	// Well formed as written (FuzzFastDecodeAgreesWithGeneral holds every value to it), so
	// not walked again to be found so.
	if k.SurelyValidWellFormed(md, value) {
		return body, surelyValid, true
	}
	msg := k.New()
	if err := proto.Unmarshal(value, msg); err != nil {
		return nil, nil, false
	}
	return body, msg, true
}

// valueChunk is the most room a block of document encodings is made with (see spec), and
// valueRoomMin the room a used block must have left for the next document's: most are a few
// hundred bytes.
const (
	valueChunk   = 256 << 10
	valueRoomMin = 16 << 10
)

// surelyValid stands for the message of a body Kind.SurelyValidWellFormed vouched for: validate
// passes it without asking the kind. Nothing reads it: it is compared by identity.
var surelyValid proto.Message = new(emptypb.Empty)

// maxMessageDepth bounds the nesting of messages the fast path decodes; Istio's messages nest a
// dozen deep at most, and the general path judges anything deeper against protojson's limit.
const maxMessageDepth = 100

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
