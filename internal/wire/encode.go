package wire

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

// MCPResourceTypeURL is the Any type URL of an istio.mcp.v1alpha1.Resource, the form in which
// MCP collections travel over xDS.
var MCPResourceTypeURL = "type.googleapis.com/" + string((&mcpapi.Resource{}).ProtoReflect().Descriptor().FullName())

// Form says how one stored entry is written into a response's repeated resources field.
type Form int

const (
	// FormMCPResource writes the istio.mcp.v1alpha1.Resource itself (MCP Resources, AMCS).
	FormMCPResource Form = iota
	// FormAnyMCPResource writes an Any holding the istio.mcp.v1alpha1.Resource (MCP over xDS).
	FormAnyMCPResource
	// FormAnyBody writes the resource's body Any as it is (Envoy resources over xDS).
	FormAnyBody
	// FormAnyBodyAsKey writes the body's value in an Any whose type URL is the message's Key,
	// the type URL the client asked for: the v3 Envoy resources served under their xDS v2
	// type URLs, whose messages share field numbers with v3 for everything the translation
	// sets (docs/xds-v2.md).
	FormAnyBodyAsKey
)

// Message is the content of one response, independent of the protocol that carries it.
type Message struct {
	Version string
	// Key is the client's name for the type: the collection (MCP) or type URL (AMCS, xDS).
	Key       string
	Resources []*store.Entry
	// Missing are subscribed names that do not exist; delta xDS answers each with a Resource
	// holding only the name (and, with AliasMissing, the name as its alias). Other layouts
	// ignore them.
	Missing []string
	// AliasMissing gives each missing name's Resource the name as its one alias: VHDS
	// answers an on-demand request for a host it does not know so (Envoy matches the
	// answer to the request by alias, and resumes the request that waits for it).
	AliasMissing bool
	Removed      []string
	Incremental  bool
	// Errors are per-resource errors (xDS resource_errors); layouts without the field leave
	// them out.
	Errors []ResourceError
	// TTL, when positive, is set on each resource's envoy.service.discovery.v3.Resource
	// wrapper (xds-protocol.rst, "TTL"): delta layouts always wrap; a state-of-the-world
	// layout wraps only with Wrap ("SotW TTL"). Layouts without the wrapper ignore it.
	TTL time.Duration
	// Wrap writes each resource of a state-of-the-world response as an Any of
	// envoy.service.discovery.v3.Resource (the client announced it can unwrap them).
	Wrap bool
	// Heartbeat leaves the body out of each wrapper: name, version and TTL only, which the
	// client takes as a renewal of the TTL of the version it holds, not as an update.
	Heartbeat bool
}

// ResourceWrapperTypeURL is the Any type URL of envoy.service.discovery.v3.Resource, the
// wrapper of each resource of a state-of-the-world response that carries TTLs.
const ResourceWrapperTypeURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// ResourceError is an error about one resource name ("*": every resource of the type), as
// envoy.service.discovery.v3.ResourceError carries it.
type ResourceError struct {
	Name    string
	Code    int32 // google.rpc.Code
	Message string
}

// Layout is where a response message keeps each part; 0 means it has no such field.
type Layout struct {
	version, resources, key, removed, nonce, incremental, errors protowire.Number
	// delta wraps each resource in envoy.service.discovery.v3.Resource{name, version, resource}
	delta                                  bool
	deltaName, deltaVersion, deltaResource protowire.Number
	deltaAliases                           protowire.Number // 0 where the wrapper has none
	// wrapper is envoy.service.discovery.v3.Resource's numbers when the layout can wrap
	// resources (delta always, state of the world on request): ttl is its TTL field.
	wrapper bool
	ttl     protowire.Number
	// bodyAsKey is Roles.BodyAsKey.
	bodyAsKey func(key string, e *store.Entry) []byte
}

// Roles names the fields of a response message by their role.
type Roles struct {
	Version, Resources, Key, Removed, Nonce, Incremental string
	// Errors is the repeated envoy.service.discovery.v3.ResourceError field, if any.
	Errors string
	// DeltaResource is the message of the resources field when it wraps each resource
	// (envoy.service.discovery.v3.Resource); nil when resources are written directly.
	DeltaResource proto.Message
	// Wrapper is envoy.service.discovery.v3.Resource for a state-of-the-world layout whose
	// resources may be wrapped in it, as Anys (Message.Wrap); nil: never wrapped.
	Wrapper proto.Message
	// BodyAsKey, if set, is the Any value of an entry in FormAnyBodyAsKey, served under the
	// type URL key (xDS v2: the v3 body with the fields v2 spells otherwise rewritten); nil:
	// the stored body's value.
	BodyAsKey func(key string, e *store.Entry) []byte
}

// NewLayout reads the field numbers of msg by the names in roles. It panics on a name msg does
// not have: layouts are built once, at start, from the generated types.
func NewLayout(msg proto.Message, roles Roles) *Layout {
	d := msg.ProtoReflect().Descriptor()
	l := &Layout{
		version: number(d, roles.Version), resources: number(d, roles.Resources), key: number(d, roles.Key),
		removed: number(d, roles.Removed), nonce: number(d, roles.Nonce), incremental: number(d, roles.Incremental),
		errors: number(d, roles.Errors), bodyAsKey: roles.BodyAsKey,
	}
	wrapper := roles.DeltaResource
	if wrapper == nil {
		wrapper = roles.Wrapper
	}
	if wrapper != nil {
		rd := wrapper.ProtoReflect().Descriptor()
		l.delta = roles.DeltaResource != nil
		l.wrapper = true
		l.deltaName, l.deltaVersion, l.deltaResource = number(rd, "name"), number(rd, "version"), number(rd, "resource")
		if f := rd.Fields().ByName("aliases"); f != nil {
			l.deltaAliases = f.Number()
		}
		// The v2 Resource has no TTL: TTLs are not carried there (Message.TTL is ignored).
		if f := rd.Fields().ByName("ttl"); f != nil {
			l.ttl = f.Number()
		}
	}
	return l
}

// FieldNumber is the number of a message's field by name, for code that reads or writes
// encodings itself; it panics on a name the message does not have (read once, at start,
// from the generated types).
func FieldNumber(m proto.Message, name string) protowire.Number {
	return number(m.ProtoReflect().Descriptor(), name)
}

func number(d protoreflect.MessageDescriptor, name string) protowire.Number {
	if name == "" {
		return 0
	}
	f := d.Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("wire: %s has no field %q", d.FullName(), name))
	}
	return f.Number()
}

// Encode returns the message's bytes without the nonce (see Tail). It copies the entries'
// pre-marshalled bytes; nothing is marshalled again.
func (l *Layout) Encode(m *Message, form Form) []byte {
	return l.AppendEncoded(make([]byte, 0, l.SizeHint(m, form)), m, form)
}

// AppendEncoded appends the message's bytes without the nonce to b: into a buffer of
// SizeHint's capacity, it allocates nothing.
func (l *Layout) AppendEncoded(b []byte, m *Message, form Form) []byte {
	b = appendString(b, l.version, m.Version)
	b = appendString(b, l.key, m.Key)
	wrapped := l.wrapper && (l.delta || m.Wrap)
	for _, e := range m.Resources {
		var r resourceBytes // a heartbeat's wrappers carry no body: none is read for them
		if !wrapped || !m.Heartbeat {
			r = l.resource(e, form, m.Key)
		}
		switch {
		case wrapped && l.delta:
			b = protowire.AppendTag(b, l.resources, protowire.BytesType)
			b = l.appendWrapper(b, e, r, m, l.wrapperSize(e, r, m))
		case wrapped: // state of the world: an Any of the wrapper
			size := l.wrapperSize(e, r, m)
			b = protowire.AppendTag(b, l.resources, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(stringSize(1, ResourceWrapperTypeURL)+protowire.SizeTag(2)+protowire.SizeBytes(size)))
			b = appendString(b, 1, ResourceWrapperTypeURL)
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = l.appendWrapper(b, e, r, m, size)
		default:
			b = r.append(b, l.resources)
		}
	}
	if l.delta {
		for _, name := range m.Missing {
			b = protowire.AppendTag(b, l.resources, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(l.missingSize(m, name)))
			b = appendString(b, l.deltaName, name)
			if l.aliasing(m) {
				b = appendString(b, l.deltaAliases, name)
			}
		}
	}
	if l.removed != 0 {
		for _, name := range m.Removed {
			b = protowire.AppendTag(b, l.removed, protowire.BytesType)
			b = protowire.AppendString(b, name)
		}
	}
	if l.incremental != 0 && m.Incremental {
		b = protowire.AppendTag(b, l.incremental, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if l.errors != 0 {
		for _, e := range m.Errors {
			b = appendResourceError(b, l.errors, e)
		}
	}
	return b
}

// aliasing tells whether the message's missing names carry themselves as aliases.
func (l *Layout) aliasing(m *Message) bool { return m.AliasMissing && l.deltaAliases != 0 }

// missingSize is the size of a missing name's Resource: its name, and its alias.
func (l *Layout) missingSize(m *Message, name string) int {
	size := stringSize(l.deltaName, name)
	if l.aliasing(m) {
		size += stringSize(l.deltaAliases, name)
	}
	return size
}

// appendResourceError writes envoy.service.discovery.v3.ResourceError{resource_name (1):
// ResourceName{name (1)}, error_detail (2): google.rpc.Status{code (1), message (2)}}.
func appendResourceError(b []byte, field protowire.Number, e ResourceError) []byte {
	nameLen := stringSize(1, e.Name)
	statusLen := stringSize(2, e.Message)
	if e.Code != 0 {
		statusLen += protowire.SizeTag(1) + protowire.SizeVarint(uint64(e.Code))
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(nameLen)+protowire.SizeTag(2)+protowire.SizeBytes(statusLen)))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(nameLen))
	b = appendString(b, 1, e.Name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(statusLen))
	if e.Code != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.Code))
	}
	return appendString(b, 2, e.Message)
}

// Tail is the per-stream suffix of a response: its nonce.
func (l *Layout) Tail(nonce string) []byte { return appendString(nil, l.nonce, nonce) }

// SizeHint is a little more than the message takes in form, so that Encode allocates its
// buffer once: a response in parts is 4 MB a part, and a hint short by the type URL each MCP
// resource's Any adds doubled and copied every buffer, one too long by the name and version an
// Envoy body already holds took a quarter more memory than needed. Each resource's share is
// exact where its bytes are known (entrySize): an Envoy part of 4 MiB was hinted 5% over,
// which put it in a larger class of pooled buffers than an MCP part of the same size.
func (l *Layout) SizeHint(m *Message, form Form) int {
	n := 64 + len(m.Version) + len(m.Key)
	wrapped := l.wrapper && (l.delta || m.Wrap)
	for _, e := range m.Resources {
		n += l.entrySize(e, m, form, wrapped)
	}
	for _, s := range m.Missing {
		n += 2*len(s) + 12 // with its alias, where it has one
	}
	for _, s := range m.Removed {
		n += len(s) + 4
	}
	for _, e := range m.Errors {
		n += len(e.Name) + len(e.Message) + 24
	}
	return n
}

// TTLSize bounds what a TTL adds to a resource's wrapper: the field's tag and length, and a
// Duration's two varints and their tags.
const TTLSize = 2 + 1 + 10 + 1 + 5

// appendWrapper writes the length and the fields of one envoy.service.discovery.v3.Resource:
// name, version, the resource unless m is a heartbeat, and the TTL when m has one.
func (l *Layout) appendWrapper(b []byte, e *store.Entry, r resourceBytes, m *Message, size int) []byte {
	b = protowire.AppendVarint(b, uint64(size))
	b = appendString(b, l.deltaName, e.Name)
	b = appendString(b, l.deltaVersion, e.Version)
	if !m.Heartbeat {
		b = r.append(b, l.deltaResource)
	}
	if m.TTL > 0 && l.ttl != 0 {
		b = protowire.AppendTag(b, l.ttl, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(m.TTL)))
		b = appendDuration(b, m.TTL)
	}
	return b
}

func (l *Layout) wrapperSize(e *store.Entry, r resourceBytes, m *Message) int {
	return l.wrapperSizeOf(e, r.size(l.deltaResource), m)
}

// wrapperSizeOf is wrapperSize for a resource that takes resource bytes as a field of the
// wrapper (its tag included); a heartbeat's takes none.
func (l *Layout) wrapperSizeOf(e *store.Entry, resource int, m *Message) int {
	n := stringSize(l.deltaName, e.Name) + stringSize(l.deltaVersion, e.Version)
	if !m.Heartbeat {
		n += resource
	}
	if m.TTL > 0 && l.ttl != 0 {
		n += protowire.SizeTag(l.ttl) + protowire.SizeBytes(durationSize(m.TTL))
	}
	return n
}

// appendDuration writes google.protobuf.Duration{seconds (1), nanos (2)} of a positive d.
func appendDuration(b []byte, d time.Duration) []byte {
	secs, nanos := int64(d/time.Second), int64(d%time.Second)
	if secs != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	return b
}

func durationSize(d time.Duration) int {
	secs, nanos := int64(d/time.Second), int64(d%time.Second)
	n := 0
	if secs != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += protowire.SizeTag(2) + protowire.SizeVarint(uint64(nanos))
	}
	return n
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	if field == 0 || s == "" {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func stringSize(field protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(len(s))
}

// resourceBytes is one entry as a response carries it: the bytes themselves (raw), or an Any
// of typeURL and value; res, when set, stands for value: the entry's whole Resource, which
// its stored bytes may hold without their body's type URL (store.Entry.AppendResource).
type resourceBytes struct {
	raw     bool
	typeURL string
	value   []byte
	res     *store.Entry
}

// valueLen is the length of the value: of the Resource res writes, where res is set.
func (r resourceBytes) valueLen() int {
	if r.res != nil {
		return r.res.ResourceSize()
	}
	return len(r.value)
}

// appendValue appends the value's bytes.
func (r resourceBytes) appendValue(b []byte) []byte {
	if r.res != nil {
		return r.res.AppendResource(b)
	}
	return append(b, r.value...)
}

// resource is how an entry is written in the given form; key is the message's. The body of
// FormAnyBodyAsKey is computed here once per entry and response.
func (l *Layout) resource(e *store.Entry, form Form, key string) resourceBytes {
	switch form {
	case FormMCPResource:
		return resourceBytes{raw: true, res: e}
	case FormAnyBody:
		typeURL, value := e.Body()
		return resourceBytes{typeURL: typeURL, value: value}
	case FormAnyBodyAsKey:
		if l.bodyAsKey != nil {
			return resourceBytes{typeURL: key, value: l.bodyAsKey(key, e)}
		}
		_, value := e.Body()
		return resourceBytes{typeURL: key, value: value}
	}
	return resourceBytes{typeURL: MCPResourceTypeURL, res: e}
}

// anySize is the size of an Any's fields of these lengths.
func anySize(typeURL string, value int) int {
	n := stringSize(1, typeURL)
	if value > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(value)
	}
	return n
}

// size is what append writes.
func (r resourceBytes) size(field protowire.Number) int {
	return resourceSize(field, r.raw, len(r.typeURL), r.valueLen())
}

// resourceSize is what resourceBytes.append writes for a resource of these lengths.
func resourceSize(field protowire.Number, raw bool, typeURL, value int) int {
	if raw {
		return protowire.SizeTag(field) + protowire.SizeBytes(value)
	}
	any := 0
	if typeURL > 0 {
		any += protowire.SizeTag(1) + protowire.SizeBytes(typeURL)
	}
	if value > 0 {
		any += protowire.SizeTag(2) + protowire.SizeBytes(value)
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(any)
}

// entrySize is what Encode writes for one entry in form: exactly, where its bytes are known
// without computing them; for FormAnyBodyAsKey, whose body is re-encoded for an older version,
// with room for a body a sixteenth longer than stored.
func (l *Layout) entrySize(e *store.Entry, m *Message, form Form, wrapped bool) int {
	var raw bool
	var typeURL, value int
	switch form {
	case FormMCPResource:
		raw, value = true, e.ResourceSize()
	case FormAnyBody:
		typeURL, value = e.BodySize()
	case FormAnyMCPResource:
		typeURL, value = len(MCPResourceTypeURL), e.ResourceSize()
	case FormAnyBodyAsKey:
		_, stored := e.BodySize()
		typeURL, value = len(m.Key), stored+stored/16+16
	}
	if !wrapped {
		return resourceSize(l.resources, raw, typeURL, value)
	}
	w := l.wrapperSizeOf(e, resourceSize(l.deltaResource, raw, typeURL, value), m)
	if !l.delta { // state of the world: an Any of the wrapper
		w = stringSize(1, ResourceWrapperTypeURL) + protowire.SizeTag(2) + protowire.SizeBytes(w)
	}
	return protowire.SizeTag(l.resources) + protowire.SizeBytes(w)
}

// append writes the resource as a length-delimited field: the bytes, or an Any (type_url = 1,
// value = 2, as google.protobuf.Any defines them) around them.
func (r resourceBytes) append(b []byte, field protowire.Number) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	value := r.valueLen()
	if r.raw {
		return r.appendValue(protowire.AppendVarint(b, uint64(value)))
	}
	b = protowire.AppendVarint(b, uint64(anySize(r.typeURL, value)))
	b = appendString(b, 1, r.typeURL)
	if value > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = r.appendValue(protowire.AppendVarint(b, uint64(value)))
	}
	return b
}

// The Any field numbers used above are those of google.protobuf.Any; checked at init.
func init() {
	d := (&anypb.Any{}).ProtoReflect().Descriptor().Fields()
	if d.ByName("type_url").Number() != 1 || d.ByName("value").Number() != 2 {
		panic("wire: google.protobuf.Any field numbers changed")
	}
	dd := (&durationpb.Duration{}).ProtoReflect().Descriptor().Fields()
	if dd.ByName("seconds").Number() != 1 || dd.ByName("nanos").Number() != 2 {
		panic("wire: google.protobuf.Duration field numbers changed")
	}
}
