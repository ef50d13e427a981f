package filesource

import (
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
)

// Positions of faults. The decoders keep no positions: the fast path reads a million documents
// in a large load and must not pay for them. Only a document with a fault is read again, once,
// by yaml.v3 into a tree of nodes, each with its line and column; the fault's field path is
// then followed down that tree.

// locate sets the line and column of each fault that names a field to those of the field in
// the document: the key of a mapping's field, the item of a list's index. A fault whose field
// is not in the document (a missing field), or of a document yaml.v3 cannot read, keeps the
// document's first line.
func (doc document) locate(faults []*DecodeError) {
	var root *yaml3.Node
	parsed := false
	for _, f := range faults {
		if f.Field == "" {
			continue
		}
		if !parsed {
			root, parsed = parseNodes(doc.text), true
		}
		line, col, ok := fieldPosition(root, f.Field)
		if !ok {
			continue
		}
		if line == 1 {
			col += doc.col // the document began after a marker on its line: "--- {...}"
		}
		f.Line, f.Column = doc.line+line-1, col
	}
}

// parseNodes reads one document into yaml.v3's node tree, or returns nil. yaml.v3 returns its
// errors rather than panicking, but a position is not worth a crash: a panic of the parser
// on input it cannot read is taken as that, and the fault keeps the document's line.
func parseNodes(text []byte) (root *yaml3.Node) {
	defer func() {
		if recover() != nil {
			root = nil
		}
	}()
	var doc yaml3.Node
	if yaml3.Unmarshal(text, &doc) != nil {
		return nil
	}
	return &doc
}

// fieldPosition returns the 1-based line and column, in the node tree's text, of the field a
// path names: "spec.ports[0].number", `metadata.annotations["example.com/x"]`.
func fieldPosition(root *yaml3.Node, field string) (line, col int, ok bool) {
	steps, ok := parseFieldPath(field)
	if !ok || root == nil {
		return 0, 0, false
	}
	n := root
	if n.Kind == yaml3.DocumentNode {
		if len(n.Content) != 1 {
			return 0, 0, false
		}
		n = n.Content[0]
	}
	for i, s := range steps {
		at, value := s.find(n)
		if at == nil {
			return 0, 0, false
		}
		if i == len(steps)-1 {
			return at.Line, at.Column, at.Line > 0
		}
		n = value
	}
	return 0, 0, false
}

// pathStep is one step of a field path: a mapping's key, or a list's index when isIndex.
type pathStep struct {
	key     string
	index   int
	isIndex bool
}

// parseFieldPath splits a field path as the decoder and the validation write them: a first
// name, then ".name", "[N]" or a quoted `["key"]` (strconv.Quote) for a key that is not plain.
func parseFieldPath(field string) ([]pathStep, bool) {
	var steps []pathStep
	rest := field
	for first := true; rest != ""; first = false {
		var s pathStep
		var ok bool
		switch {
		case rest[0] == '[':
			s, rest, ok = parseBracket(rest[1:])
		case rest[0] == '.' && !first:
			s.key, rest = splitName(rest[1:])
			ok = s.key != ""
		case first:
			s.key, rest = splitName(rest)
			ok = s.key != ""
		}
		if !ok {
			return nil, false
		}
		steps = append(steps, s)
	}
	return steps, len(steps) > 0
}

// splitName splits a plain name from the rest of a path, at its next "." or "[".
func splitName(path string) (name, rest string) {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i], path[i:]
	}
	return path, ""
}

// parseBracket reads what follows a "[": an index "N]" or a quoted key `"key"]`.
func parseBracket(path string) (pathStep, string, bool) {
	if strings.HasPrefix(path, `"`) {
		quoted, err := strconv.QuotedPrefix(path)
		if err != nil || !strings.HasPrefix(path[len(quoted):], "]") {
			return pathStep{}, "", false
		}
		key, err := strconv.Unquote(quoted)
		return pathStep{key: key}, path[len(quoted)+1:], err == nil
	}
	end := strings.IndexByte(path, ']')
	if end < 0 {
		return pathStep{}, "", false
	}
	i, err := strconv.Atoi(path[:end])
	return pathStep{index: i, isIndex: true}, path[end+1:], err == nil && i >= 0
}

// maxHops bounds the aliases followed from one node, and maxVisits the mappings searched for
// one key through merges ("<<: [*a, *b]"): yaml.v3 refuses an alias to itself, but merges of
// merges can fan out, and a position is not worth a long walk.
const (
	maxHops   = 16
	maxVisits = 256
)

// find returns the node that marks the step in n (the key, or the item) and the value to go on
// from; nil when n does not have it.
func (s pathStep) find(n *yaml3.Node) (at, value *yaml3.Node) {
	n = resolveAlias(n)
	if n == nil {
		return nil, nil
	}
	if s.isIndex {
		if n.Kind != yaml3.SequenceNode || s.index >= len(n.Content) {
			return nil, nil
		}
		return n.Content[s.index], n.Content[s.index]
	}
	if k, v := (&keyFinder{key: s.key, same: sameKey}).find(n); k != nil {
		return k, v
	}
	// Protobuf's JSON reads a field by its proto name too (target_port for targetPort): the
	// validation names the field by its JSON name, the file may spell it either way.
	return (&keyFinder{key: s.key, same: sameJSONName}).find(n)
}

// resolveAlias follows aliases (*anchor) to the node they name.
func resolveAlias(n *yaml3.Node) *yaml3.Node {
	for hops := 0; n != nil && n.Kind == yaml3.AliasNode; hops++ {
		if hops == maxHops {
			return nil
		}
		n = n.Alias
	}
	return n
}

// keyFinder looks for a key in a mapping and in the mappings merged into it.
type keyFinder struct {
	key    string
	same   func(yamlKey, key string) bool
	visits int
}

// find returns the key node and value node of the key in mapping n, looking into the mappings
// merged into it when n does not have the key itself.
func (f *keyFinder) find(n *yaml3.Node) (k, v *yaml3.Node) {
	n = resolveAlias(n)
	if f.visits++; n == nil || n.Kind != yaml3.MappingNode || f.visits > maxVisits {
		return nil, nil
	}
	var merges []*yaml3.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		switch {
		case kn.Kind != yaml3.ScalarNode:
		case kn.Tag == "!!merge":
			merges = append(merges, vn)
		case f.same(kn.Value, f.key):
			return kn, vn
		}
	}
	for _, m := range merges {
		if k, v := f.findMerged(m); k != nil {
			return k, v
		}
	}
	return nil, nil
}

// findMerged looks for the key in what "<<" merges: a mapping, or a list of mappings.
func (f *keyFinder) findMerged(m *yaml3.Node) (k, v *yaml3.Node) {
	m = resolveAlias(m)
	if m == nil || m.Kind != yaml3.SequenceNode {
		return f.find(m)
	}
	for _, item := range m.Content {
		if k, v := f.find(item); k != nil {
			return k, v
		}
	}
	return nil, nil
}

func sameKey(yamlKey, key string) bool { return yamlKey == key }

// sameJSONName reports whether a key spelt with underscores is key once protobuf's JSON naming
// is applied: an underscore dropped, the letter after it in upper case.
func sameJSONName(yamlKey, key string) bool {
	if !strings.Contains(yamlKey, "_") {
		return false
	}
	var b strings.Builder
	upper := false
	for _, r := range yamlKey {
		switch {
		case r == '_':
			upper = true
		case upper && r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			upper = false
		default:
			b.WriteRune(r)
			upper = false
		}
	}
	return b.String() == key
}
