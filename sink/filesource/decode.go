package filesource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbridge/mcpbridge/kinds"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Object is one decoded document: an Istio resource ready for the store.
type Object struct {
	Kind     *kinds.Kind
	Resource *mcpapi.Resource
	File     string
	Doc      int // 1-based index among the file's non-empty documents
	Line     int // the document's first line in the file
}

// Name is the resource's MCP name, "namespace/name".
func (o Object) Name() string { return o.Resource.GetMetadata().GetName() }

// DecodeError is a fault of one document of a file, or of the whole file (Doc 0). It names
// everything known about where the fault is, so that an operator can find it from the text alone.
type DecodeError struct {
	File string
	Doc  int // 1-based index among the file's non-empty documents; 0: the file as a whole
	// Line and Column are where the fault is in the file, 1-based: the field's key (or list
	// item) when Field is found in the document's YAML, the YAML parser's line for a syntax
	// error, else the document's first line. Line 0 is unknown (a fault of the whole file, or
	// not of a file); Column 0 is unknown (no field found).
	Line   int
	Column int
	Kind   string // the document's kind, when known
	Name   string // "namespace/name", when known
	Field  string // path of the field at fault ("spec.ports[0].number"), when known
	Err    error
}

// Error is "FILE:LINE:COLUMN: document N: KIND NAME: field FIELD: what is wrong", as compilers
// and linters print positions, so that editors and CI jump to it; what is unknown is left out.
func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	if e.Doc > 0 {
		fmt.Fprintf(&b, ": document %d", e.Doc)
	}
	if e.Kind != "" || e.Name != "" {
		b.WriteString(": ")
		b.WriteString(strings.TrimSpace(e.Kind + " " + e.Name))
	}
	if e.Field != "" {
		b.WriteString(": field ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Decode decodes a multi-document file of Kubernetes-style Istio YAML. Every document of a known
// kind becomes an Object; every faulty document becomes a *DecodeError, and the other documents
// are still decoded. Documents holding only comments or whitespace are skipped. Decode never
// panics, whatever the input.
//
// Documents are separated by lines that start with "---" (or "...", YAML's end of document),
// followed by nothing or by whitespace. Unknown fields are errors, in spec as at the top level
// and in metadata, so that a typo is reported instead of silently ignored; status and the
// metadata fields that only a Kubernetes API server sets are accepted and ignored.
//
// A document that decodes is then validated as istiod validates its kind (translate's
// Kind.Validate): each fault istiod would refuse it for is a *DecodeError of its own, naming the
// field. The decoded message is validated and dropped: what is kept is its encoding.
func Decode(data []byte, file string) ([]Object, []error) {
	return decode(data, file, true, false, nil)
}

// decodeOwned is Decode of data the caller owns and never modifies: the objects' strings,
// and the faults', may be views into it (a file's content, read to be decoded). It writes the
// documents' encodings into values's array while it has room (see fastYAML.spec): the
// caller's, recycled once the objects are dropped; nil: new arrays.
func decodeOwned(data []byte, file string, values []byte) ([]Object, []error) {
	return decode(data, file, true, true, values)
}

// DecodeUnchecked is Decode without istiod's validation: every document that decodes is an
// object, whatever istiod would say of it. It is for the tests of what must withstand
// resources istiod refuses (the translation reports its own faults on them), not for serving.
func DecodeUnchecked(data []byte, file string) ([]Object, []error) {
	return decode(data, file, false, false, nil)
}

// DecodeJSON decodes one object of Kubernetes-style Istio config from its JSON, as an API
// server returns it, and validates it as Decode does. origin is what its faults name in place
// of a file ("kubernetes"): each *DecodeError names the kind, namespace/name and field.
func DecodeJSON(js []byte, origin string) (*Object, []error) {
	d := &docDecoder{file: origin}
	obj, spec, derr := d.decodeGeneral(nil, js)
	if derr != nil {
		return nil, []error{derr}
	}
	if obj == nil {
		return nil, []error{d.fail("", errors.New("a null object"))}
	}
	faults := d.validate(obj, spec)
	if len(faults) == 0 {
		return obj, nil
	}
	errs := make([]error, len(faults))
	for i, f := range faults {
		errs[i] = f
	}
	return nil, errs
}

func decode(data []byte, file string, validate, views bool, values []byte) ([]Object, []error) {
	docs := splitDocuments(data)
	var (
		objs = make([]Object, 0, len(docs)) // an object a document, as most files are
		errs []error
		// first document of each (collection, name), to report a name defined twice: sized
		// for the documents, not grown one doubling at a time (a file of a thousand)
		seen = make(map[[2]string]int, len(docs))
		doc  = 0
		fast = &fastYAML{views: views} // reused by every document
	)
	if views {
		// The encodings' first block (spec): an encoding is mostly smaller than its YAML,
		// and a file of one document gets no more than its size.
		fast.values = values[:0]
		if cap(values) < min(valueChunk, len(data)) {
			fast.values = make([]byte, 0, min(valueChunk, len(data)))
		}
	}
	for _, d := range docs {
		if isBlank(d.text) {
			continue
		}
		doc++
		dd := &docDecoder{file: file, doc: doc, line: d.line, yaml: fast, unchecked: !validate}
		obj, faults := dd.decode(d.text)
		if len(faults) > 0 {
			d.locate(faults) // the error path only: the decoders keep no positions
			for _, f := range faults {
				errs = append(errs, f)
			}
			continue
		}
		if obj == nil {
			continue // a null document
		}
		k := [2]string{obj.Kind.Collection, obj.Name()}
		if first, dup := seen[k]; dup {
			f := dd.fail("metadata.name", fmt.Errorf("%s %s is already defined in document %d", obj.Kind.Kind, obj.Name(), first))
			d.locate([]*DecodeError{f})
			errs = append(errs, f)
			continue
		}
		seen[k] = doc
		objs = append(objs, *obj)
	}
	return objs, errs
}

// document is one YAML document's text and the line it starts on.
type document struct {
	text []byte
	line int
	col  int // the columns of line before text: 3 when text follows a marker on its line ("--- {")
}

// splitDocuments splits a YAML stream at its document markers. The YAML decoder converts only
// the first document of what it is given and ignores the rest silently, so every marker that
// YAML recognises must be split here.
//
// One pass from line to line, at memchr's speed (IndexByte), looks at the lines that start
// with '-' or '.' and counts lines as it goes. It was four: the markers counted to size the
// list, a search for each kind of marker, and the lines between them counted; each search
// stepped through the line breaks anyway (the marker's first byte), so a file's text was
// stepped through three times, 0.8 CPU-s of a million ServiceEntries' load.
func splitDocuments(data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	// Room for a document of a few hundred bytes, as most are; append grows it past that.
	docs := make([]document, 0, len(data)/256+2)
	start, startLine, startCol := 0, 1, 0
	for at, line := 0, 1; at < len(data); line++ {
		end := len(data) // of the line that starts at at, its line break included
		if i := bytes.IndexByte(data[at:], '\n'); i >= 0 {
			end = at + i + 1
		}
		if c := data[at]; (c == '-' || c == '.') && isMarker(data[at:end]) {
			docs = append(docs, document{text: data[start:at], line: startLine, col: startCol})
			// Text after the marker (a comment, or inline content) belongs to the next document.
			start, startLine, startCol = at+3, line, 3
			if isBlank(data[start:end]) {
				start, startLine, startCol = end, line+1, 0
			}
		}
		at = end
	}
	return append(docs, document{text: data[start:], line: startLine, col: startCol})
}

// isMarker reports whether a line is a document marker: "---" or "..." at its start, followed
// by the end of the line or by whitespace.
func isMarker(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) && !bytes.HasPrefix(line, []byte("...")) {
		return false
	}
	return len(line) == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r' || line[3] == '\n'
}

// isBlank reports whether text holds nothing but whitespace and comments.
func isBlank(text []byte) bool {
	for line := range bytes.Lines(text) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// docDecoder decodes one document and collects what is known of it for its errors.
type docDecoder struct {
	file       string
	doc, line  int
	kind, name string
	yaml       *fastYAML // the fast parser, shared by the documents of a file
	unchecked  bool      // DecodeUnchecked: no validation
}

func (d *docDecoder) fail(field string, err error) *DecodeError {
	return &DecodeError{File: d.file, Doc: d.doc, Line: d.line, Kind: d.kind, Name: d.name, Field: field, Err: err}
}

// topLevelFields are the fields a document may have; status is accepted and ignored, so that
// the output of kubectl get -o yaml can be served as it is.
var topLevelFields = []string{"apiVersion", "kind", "metadata", "spec", "status"}

// decode returns the document's object, or nil for a document that is YAML null, or its faults.
// The fast path (fastYAML, fastDecode) takes the plain documents; whatever it refuses, and every
// fault of decoding, goes to the general path. Either way, what decodes is then validated.
func (d *docDecoder) decode(text []byte) (*Object, []*DecodeError) {
	if d.yaml == nil {
		d.yaml = &fastYAML{}
	}
	var (
		obj  *Object
		spec proto.Message
		derr *DecodeError
	)
	p := d.yaml
	switch {
	case !p.parse(text):
		obj, spec, derr = d.decodeGeneral(text, nil)
	case p.null():
		return nil, nil
	default:
		var ok bool
		if obj, spec, ok = d.fastDecode(p); !ok {
			js := []byte(nil)
			if !p.extended {
				js = p.json()
			}
			obj, spec, derr = d.decodeGeneral(text, js)
		}
	}
	if derr != nil {
		return nil, []*DecodeError{derr}
	}
	if obj == nil {
		return nil, nil
	}
	if d.unchecked {
		return obj, nil
	}
	if faults := d.validate(obj, spec); len(faults) > 0 {
		return nil, faults
	}
	return obj, nil
}

// validate checks a decoded document as istiod would (translate's Kind.Validate), each fault
// a *DecodeError naming its field.
func (d *docDecoder) validate(obj *Object, spec proto.Message) []*DecodeError {
	if spec == surelyValid {
		return nil
	}
	err := obj.Kind.Validate(obj.Resource.GetMetadata(), spec)
	if err == nil {
		return nil
	}
	var invalid *kinds.InvalidError
	if !errors.As(err, &invalid) {
		return []*DecodeError{d.fail("spec", err)}
	}
	faults := make([]*DecodeError, 0, len(invalid.Faults)+1)
	for _, f := range invalid.Faults {
		faults = append(faults, d.fail(f.Field, errors.New(f.Message)))
	}
	if invalid.More > 0 {
		faults = append(faults, d.fail("spec", fmt.Errorf("%d more faults", invalid.More)))
	}
	return faults
}

// decodeGeneral decodes a document from its JSON: js, the fast parser's reading of text, or if
// nil, the YAML decoder's. It returns the object (nil for null) and its spec, not validated.
func (d *docDecoder) decodeGeneral(text, js []byte) (*Object, proto.Message, *DecodeError) {
	if js == nil {
		var err error
		if js, err = yaml.YAMLToJSONStrict(text); err != nil {
			return nil, nil, d.yamlFault(err)
		}
	}
	if bytes.Equal(js, []byte("null")) {
		return nil, nil, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, nil, d.fail("", errors.New("a document must be a mapping with apiVersion, kind, metadata and spec"))
	}
	// The kind first: a document of another kind is better reported as such than by its fields.
	k, derr := d.kindOf(top)
	if derr != nil {
		return nil, nil, derr
	}
	for _, f := range sortedKeys(top) {
		if !slices.Contains(topLevelFields, f) {
			return nil, nil, d.fail(f, errors.New("unknown field"))
		}
	}
	meta, derr := d.metadata(top["metadata"])
	if derr != nil {
		return nil, nil, derr
	}
	body, spec, derr := d.spec(k, top["spec"])
	if derr != nil {
		return nil, nil, derr
	}
	return &Object{
		Kind:     k,
		Resource: &mcpapi.Resource{Metadata: meta, Body: body},
		File:     d.file,
		Doc:      d.doc,
		Line:     d.line,
	}, spec, nil
}

// yamlLine finds the line numbers in the YAML parser's messages.
var yamlLine = regexp.MustCompile(`\bline (\d+)`)

// yamlFault is the fault of a document the YAML parser refuses, at the first line the
// parser's message names (it gives no column), else at the document's first line. The lines
// in the message become lines of the file: the parser saw only the document, whose first
// line is d.line.
func (d *docDecoder) yamlFault(err error) *DecodeError {
	first := 0
	text := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
		n, convErr := strconv.Atoi(strings.TrimPrefix(m, "line "))
		if convErr != nil || n < 1 {
			return m
		}
		n += d.line - 1
		if first == 0 {
			first = n
		}
		return "line " + strconv.Itoa(n)
	})
	fault := d.fail("", &cleanError{text: text, err: err})
	if first > 0 {
		fault.Line = first
	}
	return fault
}

func (d *docDecoder) kindOf(top map[string]json.RawMessage) (*kinds.Kind, *DecodeError) {
	apiVersion, err := requiredString(top, "apiVersion")
	if err != nil {
		return nil, d.fail("apiVersion", err)
	}
	kind, err := requiredString(top, "kind")
	if err != nil {
		return nil, d.fail("kind", err)
	}
	d.kind = kind
	k, ok := kinds.ByGroupVersionKind(apiVersion, kind)
	if !ok {
		return nil, d.fail("", fmt.Errorf("unknown kind: apiVersion %q, kind %q is not an Istio kind this bridge serves", apiVersion, kind))
	}
	return k, nil
}

func requiredString(fields map[string]json.RawMessage, key string) (string, error) {
	raw, ok := fields[key]
	if !ok {
		return "", errors.New("missing")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("must be a string, not %s", raw)
	}
	if s == "" {
		return "", errors.New("must not be empty")
	}
	return s, nil
}

// ignoredMetadata are the fields of Kubernetes' ObjectMeta that an API server sets or that have
// no meaning here: accepted, so that exported objects load, and ignored.
var ignoredMetadata = []string{
	"generateName", "selfLink", "uid", "generation", "deletionTimestamp",
	"deletionGracePeriodSeconds", "ownerReferences", "finalizers", "managedFields",
}

// metadata decodes metadata into the MCP metadata: the name becomes "namespace/name".
func (d *docDecoder) metadata(raw json.RawMessage) (*mcpapi.Metadata, *DecodeError) {
	var fields map[string]json.RawMessage
	if raw == nil || json.Unmarshal(raw, &fields) != nil || fields == nil {
		return nil, d.fail("metadata", errors.New("must be a mapping with at least a name"))
	}
	name, err := requiredString(fields, "name")
	if err != nil {
		return nil, d.fail("metadata.name", err)
	}
	namespace := "default"
	if _, ok := fields["namespace"]; ok {
		if namespace, err = requiredString(fields, "namespace"); err != nil {
			return nil, d.fail("metadata.namespace", err)
		}
	}
	// "/" separates namespace and name in the MCP name.
	for _, f := range [...][2]string{{"name", name}, {"namespace", namespace}} {
		if strings.ContainsAny(f[1], "/ \t\r\n") {
			return nil, d.fail("metadata."+f[0], fmt.Errorf("%q must not contain '/' or whitespace", f[1]))
		}
	}
	d.name = namespace + "/" + name
	meta := &mcpapi.Metadata{Name: d.name}
	for _, f := range sortedKeys(fields) {
		if derr := d.metadataField(meta, f, fields[f]); derr != nil {
			return nil, derr
		}
	}
	return meta, nil
}

// metadataField decodes one field of metadata other than name and namespace into meta.
func (d *docDecoder) metadataField(meta *mcpapi.Metadata, field string, raw json.RawMessage) *DecodeError {
	path := "metadata." + field
	var err error
	switch field {
	case "name", "namespace":
		return nil // done by metadata
	case "labels":
		meta.Labels, err = stringMap(raw, path)
	case "annotations":
		meta.Annotations, err = stringMap(raw, path)
	case "resourceVersion":
		if err = json.Unmarshal(raw, &meta.Version); err != nil {
			err = fmt.Errorf("must be a string, not %s", raw)
		}
	case "creationTimestamp":
		meta.CreateTime, err = timestamp(raw)
	default:
		if !slices.Contains(ignoredMetadata, field) {
			err = errors.New("unknown field")
		}
	}
	if err == nil {
		return nil
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return d.fail(fe.path, fe.err)
	}
	return d.fail(path, err)
}

// fieldError is a fault deeper than the field being decoded.
type fieldError struct {
	path string
	err  error
}

func (e *fieldError) Error() string { return e.path + ": " + e.err.Error() }

// stringMap decodes labels or annotations: a mapping of strings to strings. YAML turns an
// unquoted 1 or true into a number or boolean, which Kubernetes refuses, and so does this.
func stringMap(raw json.RawMessage, path string) (map[string]string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("must be a mapping of strings to strings, not %s", raw)
	}
	if len(fields) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(fields))
	for _, k := range sortedKeys(fields) {
		var v string
		if err := json.Unmarshal(fields[k], &v); err != nil || bytes.Equal(fields[k], []byte("null")) {
			return nil, &fieldError{path: appendKey(path, k), err: fmt.Errorf("must be a string, not %s (quote it)", fields[k])}
		}
		out[k] = v
	}
	return out, nil
}

// timestamp decodes creationTimestamp: RFC 3339, or null as kubectl writes for a new object.
func timestamp(raw json.RawMessage) (*timestamppb.Timestamp, error) {
	var s *string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("must be an RFC 3339 time, not %s", raw)
	}
	if s == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return nil, fmt.Errorf("must be an RFC 3339 time: %w", err)
	}
	return timestamppb.New(t), nil
}

// deterministic makes a body's bytes a function of its content: the store versions a resource
// without resourceVersion by a hash of its bytes, and map order must not change that hash.
var deterministic = proto.MarshalOptions{Deterministic: true}

// spec decodes spec into the kind's message, unknown fields being errors, and wraps it in an
// Any; it returns the message too, to be validated.
func (d *docDecoder) spec(k *kinds.Kind, raw json.RawMessage) (*anypb.Any, proto.Message, *DecodeError) {
	if raw == nil || bytes.Equal(raw, []byte("null")) {
		return nil, nil, d.fail("spec", errors.New("missing"))
	}
	msg := k.New()
	raw = normalizeDurations(raw, msg.ProtoReflect().Descriptor())
	if err := protojson.Unmarshal(raw, msg); err != nil {
		return nil, nil, d.fail(protojsonField(raw, err), cleanProtojsonError(err))
	}
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, msg, deterministic); err != nil {
		return nil, nil, d.fail("spec", fmt.Errorf("encoding %s: %w", k.Message, err))
	}
	return body, msg, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appendKey extends a field path by a mapping key: ".key" for a plain key, `["a.b/c"]` for
// one that would be ambiguous.
func appendKey(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// protojsonPosition finds the "(line L:C)" that protojson puts in most of its errors.
var protojsonPosition = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// protojsonField returns the path of the field a protojson error is about, from the position
// it names in spec's JSON: "spec.ports[0].number". Without a position, it returns "spec".
func protojsonField(spec []byte, err error) string {
	m := protojsonPosition.FindStringSubmatch(err.Error())
	if m == nil {
		return "spec"
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	return "spec" + jsonPathAt(spec, byteOffset(spec, line, col))
}

// byteOffset converts protojson's 1-based line and column (counted in runes) to a byte offset.
func byteOffset(data []byte, line, col int) int {
	off := 0
	for ; line > 1 && off < len(data); line-- {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	for r := range string(data[off:]) {
		if col <= 1 {
			return off + r
		}
		col--
	}
	return len(data)
}

// protojsonNoise is what of protojson's error text means nothing to the author of the YAML: the
// "proto:" prefix (followed by a space or a non-breaking one) and positions in the JSON the
// YAML was converted to.
var protojsonNoise = regexp.MustCompile(`^proto:[\s\x{a0}]*|\s*\(line \d+:\d+\)`)

// cleanProtojsonError keeps the original error for errors.Is and errors.As, with a text for
// the author of the YAML.
func cleanProtojsonError(err error) error {
	text := protojsonNoise.ReplaceAllString(err.Error(), "")
	return &cleanError{text: strings.TrimPrefix(text, ": "), err: err}
}

// cleanError is an error with its text rewritten for the reader, its cause kept for errors.As.
type cleanError struct {
	text string
	err  error
}

func (e *cleanError) Error() string { return e.text }
func (e *cleanError) Unwrap() error { return e.err }
