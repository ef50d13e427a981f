package filesource

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// fastYAML reads the plain block YAML that Istio config files are made of — mappings and
// sequences by indentation, one scalar per line, strings, decimal integers, booleans, nulls,
// comment lines — into a tree of nodes, about ten times faster than the general YAML decoder;
// at 100,000 ServiceEntries the general decoder was a third of a full load's CPU. parse reports
// false for anything outside that subset, and the caller then uses the general decoder, which
// also gives the errors: so the fast path never changes what a document means, only how
// quickly it is read. FuzzFastYAMLAgreesWithYAML checks that on every input it accepts, it
// reads what sigs.k8s.io/yaml reads.
//
// Outside the subset (and so left to the general decoder): tabs, carriage returns, flow
// collections, anchors, aliases, tags, block scalars, multi-line scalars, comments after a
// value, document markers, escapes in double quotes, duplicate keys, keys over 1024 bytes, and
// every plain scalar YAML 1.1 could read as anything but a string, a decimal integer, true or
// false (booleans such as yes/on, floats, octal and hex numbers, timestamps, merge keys).
//
// A fastYAML is reused from document to document of a file, so that its slices are allocated
// once per file, not once per document.
type fastYAML struct {
	lines []blockLine
	pos   int
	nodes []yamlNode // nodes[0] is the root; none for a document that is null
	// extended: the document uses what the fast parser reads since it builds a tree (booleans,
	// plain strings that start with a digit or with "./"). Before, such documents went to the
	// YAML decoder, and when the fast decoder refuses one, they still do, so that their faults
	// are reported word for word as before (the decoder orders keys and escapes strings its own
	// way, which shows in protojson's messages).
	extended bool
	// views: the text parsed is the caller's own, never modified while the tree or anything
	// decoded from it is in use (a file the source read), and the tree's strings are views
	// into it; else they slice one copy of each document.
	views bool
	// values holds, with views, the encodings of the file's documents (see spec).
	values []byte
}

// own is a string of the tree to keep past the parse: a copy, unless views.
func (p *fastYAML) own(s string) string {
	if p.views {
		return s
	}
	return strings.Clone(s)
}

// nodeKind is what a node of the tree is.
type nodeKind uint8

const (
	mappingNode nodeKind = iota + 1
	sequenceNode
	stringNode
	intNode  // value holds the digits of a decimal integer
	boolNode // value is "true" or "false"
	nullNode
)

// yamlNode is one node of a document's tree. Nodes live in one slice and refer to each other by
// index, so that a tree costs a few allocations, not one per node; strings are slices of the
// document's text.
type yamlNode struct {
	kind  nodeKind
	key   string // the key of the node in its mapping
	value string // a scalar's value: see nodeKind
	first int32  // a collection's first child; -1 if none
	next  int32  // the next child of the same collection; -1 for the last
}

type blockLine struct {
	indent int
	text   string
}

// maxFastText bounds a document the fast parser reads, so that node indexes fit in an int32:
// every node has a byte of the text of its own (a scalar, a key's colon, an item's dash).
const maxFastText = math.MaxInt32

// parse reads one document into p.nodes; it reports false for a document outside the subset.
func (p *fastYAML) parse(data []byte) bool {
	p.lines, p.pos, p.nodes, p.extended = p.lines[:0], 0, p.nodes[:0], false
	if len(data) > maxFastText {
		return false
	}
	// One copy, which every string of the tree slices; none when the text is the caller's
	// (views): a file read only to be decoded was copied whole again, 400 bytes a
	// ServiceEntry of garbage.
	var text string
	if p.views {
		text = unsafe.String(unsafe.SliceData(data), len(data))
	} else {
		text = string(data)
	}
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		if !printable(line) {
			// tabs, carriage returns, control characters: the decoder's. So every string
			// of the tree is UTF-8, which the encoding of strings relies on (appendScalar,
			// appendMap): printable refuses lines that are not, and the tree's strings are
			// cut from a line only at ASCII bytes (colons, spaces, quotes, dashes), with no
			// escapes decoded ('' in single quotes aside).
			return false
		}
		content := strings.TrimLeft(line, " ")
		if len(content) == 0 || content[0] == '#' {
			continue
		}
		indent := len(line) - len(content)
		p.lines = append(p.lines, blockLine{indent: indent, text: strings.TrimRight(content, " ")})
	}
	if len(p.lines) == 0 {
		return true // null
	}
	_, ok := p.node(p.lines[0].indent)
	return ok && p.pos == len(p.lines)
}

// null reports a parsed document that is YAML null: comments and blank lines only.
func (p *fastYAML) null() bool { return len(p.nodes) == 0 }

// fastYAMLToJSON converts a document in the fast path's subset to JSON; ok false: outside it.
func fastYAMLToJSON(text []byte) (js []byte, ok bool) {
	p := &fastYAML{}
	if !p.parse(text) {
		return nil, false
	}
	return p.json(), true
}

// json returns the parsed document as JSON text.
func (p *fastYAML) json() []byte {
	if p.null() {
		return []byte("null")
	}
	return p.appendJSON(nil, 0)
}

func (p *fastYAML) appendJSON(out []byte, i int32) []byte {
	n := &p.nodes[i]
	switch n.kind {
	case mappingNode, sequenceNode:
		open, end := byte('{'), byte('}')
		if n.kind == sequenceNode {
			open, end = '[', ']'
		}
		out = append(out, open)
		for c := n.first; c >= 0; c = p.nodes[c].next {
			if c != n.first {
				out = append(out, ',')
			}
			if n.kind == mappingNode {
				out = appendJSONString(out, p.nodes[c].key)
				out = append(out, ':')
			}
			out = p.appendJSON(out, c)
		}
		return append(out, end)
	case stringNode:
		return appendJSONString(out, n.value)
	case nullNode:
		return append(out, "null"...)
	default: // integers and booleans are written as they are
		return append(out, n.value...)
	}
}

// printable reports a line of YAML's printable characters, tab and carriage return aside, and
// without the line breaks of YAML 1.1 that are not ASCII (NEL, U+2028, U+2029).
// Eight bytes at a time while they are printable ASCII, as nearly every byte of a config
// file is: byte by byte, this was a sixth of the fast parser's time.
func printable(line string) bool {
	i := 0
	for ; i+8 <= len(line); i += 8 {
		if !printableASCII8(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(line[i:]), 8))) {
			break
		}
	}
	for i < len(line) {
		c := line[i]
		if c < 0x80 {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(line[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return false
		case r <= 0x9f, r >= 0xd800 && r <= 0xdfff, r == 0xfeff, r >= 0xfffe && r <= 0xffff:
			// C1 controls with NEL (U+0085) among them: printable to YAML, but a line
			// break to the decoder (YAML 1.1), as are U+2028 and U+2029 below: a line that
			// holds one is not one line to it, and is left to it.
			return false
		case r == 0x2028, r == 0x2029:
			return false
		}
		i += size
	}
	return true
}

// printableASCII8 reports eight bytes that are each printable ASCII: none under 0x20 (the
// subtraction borrows into its top bit), none 0x7f (the addition of one carries into it),
// none at 0x80 or above (their own top bit). A word that fails goes byte by byte, which
// tells the three apart.
func printableASCII8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	under20 := w - 0x20*ones    // a byte under 0x20 borrows: its top bit set
	is7f := (w &^ highs) + ones // 0x7f (of seven bits) carries into the top bit
	return (under20|is7f|w)&highs == 0
}

// add appends a node and returns its index.
func (p *fastYAML) add(kind nodeKind, value string) int32 {
	p.nodes = append(p.nodes, yamlNode{kind: kind, value: value, first: -1, next: -1})
	return int32(len(p.nodes) - 1)
}

// link makes child the next child of parent, after last.
func (p *fastYAML) link(parent int32, last *int32, child int32) {
	if *last < 0 {
		p.nodes[parent].first = child
	} else {
		p.nodes[*last].next = child
	}
	*last = child
}

// node reads the block at the current line, whose lines are at indent.
func (p *fastYAML) node(indent int) (int32, bool) {
	if isItem(p.lines[p.pos].text) {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func isItem(text string) bool { return len(text) >= 2 && text[0] == '-' && text[1] == ' ' }

// mapping reads the entries at indent, up to the first line that is not one.
func (p *fastYAML) mapping(indent int) (int32, bool) {
	m, last := p.add(mappingNode, ""), int32(-1)
	for p.pos < len(p.lines) && p.lines[p.pos].indent == indent && !isItem(p.lines[p.pos].text) {
		key, rest, ok := p.splitEntry(p.lines[p.pos].text)
		if !ok || p.hasKey(m, key) {
			return -1, false // a duplicate key: the general decoder reports it
		}
		p.pos++
		v, ok := p.value(rest, indent, true)
		if !ok {
			return -1, false
		}
		p.nodes[v].key = key
		p.link(m, &last, v)
	}
	if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
		return -1, false // indented deeper than anything that could hold it
	}
	return m, true
}

func (p *fastYAML) hasKey(m int32, key string) bool {
	for c := p.nodes[m].first; c >= 0; c = p.nodes[c].next {
		if p.nodes[c].key == key {
			return true
		}
	}
	return false
}

// sequence reads the items at indent ("- " lines), up to the first line that is not one.
func (p *fastYAML) sequence(indent int) (int32, bool) {
	s, last := p.add(sequenceNode, ""), int32(-1)
	for p.pos < len(p.lines) && p.lines[p.pos].indent == indent && isItem(p.lines[p.pos].text) {
		text := p.lines[p.pos].text
		item := strings.TrimLeft(text[2:], " ")
		itemIndent := indent + len(text) - len(item)
		var v int32
		var ok bool
		if _, _, isEntry := p.splitEntry(item); isEntry || isItem(item) {
			// "- key: value": a mapping (or "- - x": a sequence) whose first line starts here,
			// at the item's column.
			p.lines[p.pos] = blockLine{indent: itemIndent, text: item}
			v, ok = p.node(itemIndent)
		} else {
			p.pos++
			v, ok = p.value(item, indent, false)
		}
		if !ok {
			return -1, false
		}
		p.link(s, &last, v)
	}
	if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
		return -1, false
	}
	return s, true
}

// value reads what follows a key (inMapping) or a dash at indent: a scalar on the same line, or
// else the block on the next lines: deeper, or, for a key, a sequence at the same indent (YAML
// lets a mapping's sequence value start at the key's column), or else null.
func (p *fastYAML) value(rest string, indent int, inMapping bool) (int32, bool) {
	if len(rest) > 0 {
		return p.scalar(rest)
	}
	if p.pos < len(p.lines) {
		next := p.lines[p.pos]
		if next.indent > indent || inMapping && next.indent == indent && isItem(next.text) {
			return p.node(next.indent)
		}
	}
	if !inMapping {
		return -1, false // "-" alone: rare; left to the general decoder
	}
	return p.add(nullNode, ""), true
}

// maxKey is YAML's bound on an implicit key, 1024 characters: the decoder rejects a longer one.
// The fast parser counts bytes, which refuses a few keys the decoder takes, and none it rejects.
const maxKey = 1024

// splitEntry splits "key: value" or "key:" into a plain key and the value's text.
func (p *fastYAML) splitEntry(text string) (key, rest string, ok bool) {
	i := strings.IndexByte(text, ':')
	if i <= 0 {
		return "", "", false
	}
	key = text[:i]
	switch {
	case i == len(text)-1:
		rest = ""
	case text[i+1] == ' ':
		rest = strings.Trim(text[i+2:], " ")
	default:
		return "", "", false // "a:b" is a plain scalar, not an entry
	}
	if len(key) > maxKey || strings.IndexByte(key, ' ') >= 0 || !plainString(key) {
		return "", "", false
	}
	p.markExtended(key)
	return key, rest, true
}

// scalar reads a one-line scalar: quoted strings, null, decimal integers, true and false, and
// the plain scalars that YAML 1.1 can only read as strings.
func (p *fastYAML) scalar(s string) (int32, bool) {
	switch s[0] {
	case '\'':
		if len(s) < 2 || s[len(s)-1] != '\'' {
			return -1, false
		}
		inner := s[1 : len(s)-1]
		if strings.IndexByte(inner, '\'') < 0 {
			return p.add(stringNode, inner), true
		}
		unquoted := strings.ReplaceAll(inner, "''", "'")
		if strings.Count(inner, "'") != 2*strings.Count(unquoted, "'") {
			return -1, false // a lone quote inside
		}
		return p.add(stringNode, unquoted), true
	case '"':
		if len(s) < 2 || s[len(s)-1] != '"' {
			return -1, false
		}
		inner := s[1 : len(s)-1]
		if strings.ContainsAny(inner, "\\\"") {
			return -1, false
		}
		return p.add(stringNode, inner), true
	}
	switch s {
	case "~", "null", "Null", "NULL":
		return p.add(nullNode, ""), true
	case "true", "True", "TRUE":
		p.extended = true
		return p.add(boolNode, "true"), true
	case "false", "False", "FALSE":
		p.extended = true
		return p.add(boolNode, "false"), true
	}
	if decimalInt(s) {
		return p.add(intNode, s), true
	}
	if !plainString(s) {
		return -1, false
	}
	p.markExtended(s)
	return p.add(stringNode, s), true
}

// decimalInt reports a plain decimal integer without sign, leading zero or digit separators,
// short enough to be the same number everywhere.
func decimalInt(s string) bool {
	if len(s) == 0 || len(s) > 15 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// plainString reports whether a plain scalar can only be a string in YAML 1.1 as the general
// decoder reads it: not a boolean word, not something that could be a number, a float or a
// timestamp, not an indicator or a merge key, and without ": " or " #" inside.
func plainString(s string) bool {
	if len(s) == 0 {
		return false
	}
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
		"true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF", "~", "null", "Null", "NULL":
		return false
	}
	switch c := s[0]; {
	case c >= '0' && c <= '9':
		if !dottedNumbers(s) && !digitLedString(s) {
			return false
		}
	case c == '.' && strings.HasPrefix(s, "./"):
		// A relative host, as Sidecars write "./*": the decoder tries a scalar that starts
		// with a dot only as a float, and no float has a slash.
	case indicator[c]:
		return false
	}
	// The colons and hashes found at memchr's speed: most keys and values have none.
	for i := strings.IndexByte(s, ':'); i >= 0; {
		if i == len(s)-1 || s[i+1] == ' ' {
			return false // an entry's colon
		}
		next := strings.IndexByte(s[i+1:], ':')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	for i := strings.IndexByte(s, '#'); i >= 0; {
		if i > 0 && s[i-1] == ' ' {
			return false // a comment
		}
		next := strings.IndexByte(s[i+1:], '#')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return true
}

// indicator holds the characters a plain scalar may not start with here: YAML's indicators,
// and the signs, dots and marks the decoder would read as something else (a number, a
// directive, a merge key). A table, not a search of a string of them: it is asked of every
// key and value of every document.
var indicator = func() (t [256]bool) {
	for _, c := range []byte("-+.!&*{}[]|>'\"%@`?:,#<=\\") {
		t[c] = true
	}
	return t
}()

// dottedNumbers reports digits in three or more dot-separated groups (10.0.0.1, a version): no
// number has two dots.
func dottedNumbers(s string) bool {
	groups, digits := 1, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && digits > 0:
			groups, digits = groups+1, 0
		default:
			return false
		}
	}
	return groups >= 3 && digits > 0
}

// digitLedString reports a plain scalar that starts with a digit and that YAML 1.1 still reads
// as a string: durations ("10s", "1h30m"), retry conditions ("5xx,reset"). The decoder tries
// such a scalar as a timestamp (four digits and a dash first), as an integer (Go's syntax with
// base prefixes, underscores dropped), and as a float (digits, dots, signs and exponents only):
// a scalar with no base prefix nor underscore, not shaped like a date, and with a character none
// of these use, is none of them.
func digitLedString(s string) bool {
	if len(s) >= 5 && strings.Trim(s[:4], "0123456789") == "" && s[4] == '-' {
		return false // a timestamp, perhaps
	}
	if strings.IndexByte(s, '_') >= 0 {
		return false // the decoder drops underscores before it reads a number: 0_x1F is 31
	}
	if len(s) >= 2 && s[0] == '0' && strings.IndexByte("xXoObB", s[1]) >= 0 {
		return false // 0x1F, 0o17, 0b101
	}
	if strings.Trim(s, "0123456789.eE+-") == "" {
		return false // 1e3, 1.5
	}
	return true
}

// markExtended notes a plain string that the subset took only when it grew a tree (see
// extended): one that starts with a digit and is not dotted numbers, or with "./".
func (p *fastYAML) markExtended(s string) {
	if s[0] >= '0' && s[0] <= '9' && !dottedNumbers(s) || s[0] == '.' {
		p.extended = true
	}
}

// appendJSONString appends s as a JSON string.
func appendJSONString(out []byte, s string) []byte {
	out = append(out, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			out = append(out, '\\', byte(r))
		case r < 0x20:
			out = append(out, `\u00`...)
			out = append(out, "0123456789abcdef"[r>>4], "0123456789abcdef"[r&0xf])
		case r == '\u2028' || r == '\u2029':
			out = append(out, `\u`...)
			out = strconv.AppendInt(out, int64(r), 16)
		default:
			out = utf8.AppendRune(out, r)
		}
	}
	return append(out, '"')
}
