package filesource

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// fastYAMLToJSON converts the plain block YAML that Istio config files are made of —
// mappings and sequences by indentation, one scalar per line, strings, decimal integers,
// nulls, comment lines — to JSON, about ten times faster than the general YAML decoder; at
// 100,000 ServiceEntries the general decoder was a third of a full load's CPU. It reports
// ok false for anything outside that subset, and the caller then uses the general decoder,
// which also gives the errors: so the fast path never changes what a document means, only how
// quickly it is read. FuzzFastYAMLAgreesWithYAML checks that on every input it accepts, it
// gives what sigs.k8s.io/yaml gives.
//
// Outside the subset (and so left to the general decoder): tabs, carriage returns, flow
// collections, anchors, aliases, tags, block scalars, multi-line scalars, comments after a
// value, document markers, escapes in double quotes, duplicate keys, and every plain scalar
// YAML 1.1 could read as anything but a string or a decimal integer (booleans such as yes/on,
// floats, octal and hex numbers, timestamps, merge keys).
func fastYAMLToJSON(text []byte) (js []byte, ok bool) {
	p := &fastYAML{}
	for line := range bytes.Lines(text) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		if !printable(line) {
			return nil, false // tabs, carriage returns, control characters: the decoder's
		}
		content := bytes.TrimLeft(line, " ")
		if len(content) == 0 || content[0] == '#' {
			continue
		}
		indent := len(line) - len(content)
		p.lines = append(p.lines, blockLine{indent: indent, text: bytes.TrimRight(content, " ")})
	}
	if len(p.lines) == 0 {
		return []byte("null"), true
	}
	out, ok := p.node(nil, p.lines[0].indent)
	if !ok || p.pos != len(p.lines) {
		return nil, false
	}
	return out, true
}

// printable reports a line of YAML's printable characters, tab and carriage return aside.
func printable(line []byte) bool {
	for i := 0; i < len(line); {
		c := line[i]
		if c < 0x80 {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(line[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return false
		case r <= 0x9f && r != 0x85, r >= 0xd800 && r <= 0xdfff, r == 0xfeff, r >= 0xfffe && r <= 0xffff:
			return false
		}
		i += size
	}
	return true
}

type blockLine struct {
	indent int
	text   []byte
}

type fastYAML struct {
	lines []blockLine
	pos   int
}

// node converts the block at the current line, whose lines are at indent.
func (p *fastYAML) node(out []byte, indent int) ([]byte, bool) {
	if isItem(p.lines[p.pos].text) {
		return p.sequence(out, indent)
	}
	return p.mapping(out, indent)
}

func isItem(text []byte) bool { return len(text) >= 2 && text[0] == '-' && text[1] == ' ' }

// mapping converts the entries at indent, up to the first line that is not one.
func (p *fastYAML) mapping(out []byte, indent int) ([]byte, bool) {
	out = append(out, '{')
	var keys [][]byte
	for p.pos < len(p.lines) && p.lines[p.pos].indent == indent && !isItem(p.lines[p.pos].text) {
		key, rest, ok := splitEntry(p.lines[p.pos].text)
		if !ok {
			return nil, false
		}
		for _, k := range keys {
			if bytes.Equal(k, key) {
				return nil, false // the general decoder reports it
			}
		}
		keys = append(keys, key)
		if len(keys) > 1 {
			out = append(out, ',')
		}
		out = appendJSONString(out, key)
		out = append(out, ':')
		p.pos++
		if out, ok = p.value(out, rest, indent, true); !ok {
			return nil, false
		}
	}
	if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
		return nil, false // indented deeper than anything that could hold it
	}
	return append(out, '}'), true
}

// sequence converts the items at indent ("- " lines), up to the first line that is not one.
func (p *fastYAML) sequence(out []byte, indent int) ([]byte, bool) {
	out = append(out, '[')
	for n := 0; p.pos < len(p.lines) && p.lines[p.pos].indent == indent && isItem(p.lines[p.pos].text); n++ {
		if n > 0 {
			out = append(out, ',')
		}
		item := bytes.TrimLeft(p.lines[p.pos].text[2:], " ")
		itemIndent := indent + len(p.lines[p.pos].text) - len(item)
		if _, _, isEntry := splitEntry(item); isEntry || isItem(item) {
			// "- key: value": a mapping (or "- - x": a sequence) whose first line starts here,
			// at the item's column.
			p.lines[p.pos] = blockLine{indent: itemIndent, text: item}
			var ok bool
			if out, ok = p.node(out, itemIndent); !ok {
				return nil, false
			}
			continue
		}
		p.pos++
		var ok bool
		if out, ok = p.value(out, item, indent, false); !ok {
			return nil, false
		}
	}
	if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
		return nil, false
	}
	return append(out, ']'), true
}

// value converts what follows a key (inMapping) or a dash at indent: a scalar on the same
// line, or else the block on the next lines: deeper, or, for a key, a sequence at the same
// indent (YAML lets a mapping's sequence value start at the key's column), or else null.
func (p *fastYAML) value(out, rest []byte, indent int, inMapping bool) ([]byte, bool) {
	if len(rest) > 0 {
		return appendScalar(out, rest)
	}
	if p.pos < len(p.lines) {
		next := p.lines[p.pos]
		if next.indent > indent || inMapping && next.indent == indent && isItem(next.text) {
			return p.node(out, next.indent)
		}
	}
	if !inMapping {
		return nil, false // "-" alone: rare; left to the general decoder
	}
	return append(out, "null"...), true
}

// splitEntry splits "key: value" or "key:" into a plain key and the value's text.
func splitEntry(text []byte) (key, rest []byte, ok bool) {
	i := bytes.IndexByte(text, ':')
	if i <= 0 {
		return nil, nil, false
	}
	key = text[:i]
	switch {
	case i == len(text)-1:
		rest = nil
	case text[i+1] == ' ':
		rest = bytes.TrimRight(text[i+2:], " ")
		rest = bytes.TrimLeft(rest, " ")
	default:
		return nil, nil, false // "a:b" is a plain scalar, not an entry
	}
	if !plainString(key) || bytes.ContainsRune(key, ' ') {
		return nil, nil, false
	}
	return key, rest, true
}

// appendScalar converts a one-line scalar: quoted strings, null, decimal integers and the
// plain scalars that YAML 1.1 can only read as strings.
func appendScalar(out, s []byte) ([]byte, bool) {
	switch s[0] {
	case '\'':
		if len(s) < 2 || s[len(s)-1] != '\'' {
			return nil, false
		}
		inner := s[1 : len(s)-1]
		unquoted := bytes.ReplaceAll(inner, []byte("''"), []byte("'"))
		if bytes.Count(inner, []byte("'")) != 2*bytes.Count(unquoted, []byte("'")) {
			return nil, false // a lone quote inside
		}
		return appendJSONString(out, unquoted), true
	case '"':
		if len(s) < 2 || s[len(s)-1] != '"' {
			return nil, false
		}
		inner := s[1 : len(s)-1]
		if bytes.ContainsAny(inner, "\\\"") {
			return nil, false
		}
		return appendJSONString(out, inner), true
	}
	switch string(s) {
	case "~", "null", "Null", "NULL":
		return append(out, "null"...), true
	}
	if decimalInt(s) {
		return append(out, s...), true
	}
	if !plainString(s) {
		return nil, false
	}
	return appendJSONString(out, s), true
}

// decimalInt reports a plain decimal integer without sign, leading zero or digit separators,
// short enough to be the same number everywhere.
func decimalInt(s []byte) bool {
	if len(s) == 0 || len(s) > 15 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// plainString reports whether a plain scalar can only be a string in YAML 1.1 as the general
// decoder reads it: not a boolean word, not something that starts like a number, a float, an
// indicator or a merge key, and without ": " or " #" inside. Dotted numbers with three or more
// parts (IPv4 addresses, versions) are strings: no number has two dots.
func plainString(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	switch string(s) {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
		"true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF", "~", "null", "Null", "NULL":
		return false
	}
	switch c := s[0]; {
	case c >= '0' && c <= '9':
		if !dottedNumbers(s) {
			return false
		}
	case bytes.IndexByte([]byte("-+.!&*{}[]|>'\"%@`?:,#<=\\"), c) >= 0:
		return false
	}
	if s[len(s)-1] == ':' || bytes.Contains(s, []byte(": ")) || bytes.Contains(s, []byte(" #")) {
		return false
	}
	return true
}

// dottedNumbers reports digits in three or more dot-separated groups (10.0.0.1).
func dottedNumbers(s []byte) bool {
	groups := bytes.Split(s, []byte("."))
	if len(groups) < 3 {
		return false
	}
	for _, g := range groups {
		if len(g) == 0 {
			return false
		}
		for _, c := range g {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// appendJSONString appends s as a JSON string.
func appendJSONString(out, s []byte) []byte {
	out = append(out, '"')
	for _, r := range string(s) {
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
