package csds

import (
	"fmt"
	"regexp"
	"strings"

	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// A ClientStatusRequest's node_matchers select nodes, as Envoy's matchers do: a node is
// selected when any matcher matches it (OR); a matcher matches when its node_id matches the
// node's id and every one of its node_metadatas matches the node's metadata (AND); no
// matchers select every node.
//
// Supported: string matchers exact, prefix, suffix, contains (each with ignore_case) and
// safe_regex (RE2, matched against the whole string, as Envoy does); metadata matchers by
// key path with a value matcher of string_match, bool_match, double_match (exact, or the
// range [start, end)), present_match, null_match, or_match of those. A matcher of anything
// else (custom string matchers, list_match) is refused, naming it, rather than ignored: a
// filter silently dropped would show nodes the operator meant to exclude.

// nodeFilter matches a node by its id and metadata.
type nodeFilter func(id string, metadata *structpb.Struct) bool

// compileMatchers compiles node_matchers into one filter; nil selects every node. An error
// names the field of the unsupported or malformed matcher.
func compileMatchers(ms []*matcher.NodeMatcher) (nodeFilter, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	var any []nodeFilter
	for i, m := range ms {
		f, err := compileNode(m)
		if err != nil {
			return nil, fmt.Errorf("node_matchers[%d].%w", i, err)
		}
		any = append(any, f)
	}
	return func(id string, md *structpb.Struct) bool {
		for _, f := range any {
			if f(id, md) {
				return true
			}
		}
		return false
	}, nil
}

func compileNode(m *matcher.NodeMatcher) (nodeFilter, error) {
	var idMatch func(string) bool
	if m.GetNodeId() != nil {
		var err error
		if idMatch, err = compileString(m.GetNodeId()); err != nil {
			return nil, fmt.Errorf("node_id: %w", err)
		}
	}
	metas := make([]func(*structpb.Struct) bool, 0, len(m.GetNodeMetadatas()))
	for j, sm := range m.GetNodeMetadatas() {
		f, err := compileStruct(sm)
		if err != nil {
			return nil, fmt.Errorf("node_metadatas[%d].%w", j, err)
		}
		metas = append(metas, f)
	}
	return func(id string, md *structpb.Struct) bool {
		if idMatch != nil && !idMatch(id) {
			return false
		}
		for _, f := range metas {
			if !f(md) {
				return false
			}
		}
		return true
	}, nil
}

// compileString compiles a StringMatcher.
func compileString(m *matcher.StringMatcher) (func(string) bool, error) {
	fold := m.GetIgnoreCase()
	norm := func(s string) string {
		if fold {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
		want := norm(p.Exact)
		return func(s string) bool { return norm(s) == want }, nil
	case *matcher.StringMatcher_Prefix:
		if p.Prefix == "" {
			return nil, fmt.Errorf("prefix: empty")
		}
		want := norm(p.Prefix)
		return func(s string) bool { return strings.HasPrefix(norm(s), want) }, nil
	case *matcher.StringMatcher_Suffix:
		if p.Suffix == "" {
			return nil, fmt.Errorf("suffix: empty")
		}
		want := norm(p.Suffix)
		return func(s string) bool { return strings.HasSuffix(norm(s), want) }, nil
	case *matcher.StringMatcher_Contains:
		if p.Contains == "" {
			return nil, fmt.Errorf("contains: empty")
		}
		want := norm(p.Contains)
		return func(s string) bool { return strings.Contains(norm(s), want) }, nil
	case *matcher.StringMatcher_SafeRegex:
		// Envoy's safe_regex is RE2, as Go's regexp is, and must match the whole string.
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %q: %v", p.SafeRegex.GetRegex(), err)
		}
		return re.MatchString, nil
	case *matcher.StringMatcher_Custom:
		return nil, fmt.Errorf("custom: not supported (supported: exact, prefix, suffix, contains, safe_regex)")
	}
	return nil, fmt.Errorf("no match pattern: give one of exact, prefix, suffix, contains, safe_regex")
}

// compileStruct compiles a StructMatcher: a path of keys into the metadata, and a matcher of
// the value found there.
func compileStruct(m *matcher.StructMatcher) (func(*structpb.Struct) bool, error) {
	if len(m.GetPath()) == 0 {
		return nil, fmt.Errorf("path: empty; give the keys that lead to the value")
	}
	keys := make([]string, len(m.GetPath()))
	for i, seg := range m.GetPath() {
		if seg.GetKey() == "" {
			return nil, fmt.Errorf("path[%d].key: empty", i)
		}
		keys[i] = seg.GetKey()
	}
	if m.GetValue() == nil {
		return nil, fmt.Errorf("value: missing")
	}
	vm, err := compileValue(m.GetValue())
	if err != nil {
		return nil, fmt.Errorf("value.%w", err)
	}
	return func(md *structpb.Struct) bool {
		return vm(lookup(md, keys))
	}, nil
}

// lookup follows keys into a Struct; nil when the path leads nowhere.
func lookup(md *structpb.Struct, keys []string) *structpb.Value {
	var v *structpb.Value
	for _, k := range keys {
		if md == nil {
			return nil
		}
		v = md.GetFields()[k]
		if v == nil {
			return nil
		}
		md = v.GetStructValue()
	}
	return v
}

// compileValue compiles a ValueMatcher; the value is nil when the path led nowhere.
func compileValue(m *matcher.ValueMatcher) (func(*structpb.Value) bool, error) {
	switch p := m.GetMatchPattern().(type) {
	case *matcher.ValueMatcher_NullMatch_:
		return func(v *structpb.Value) bool {
			_, ok := v.GetKind().(*structpb.Value_NullValue)
			return ok
		}, nil
	case *matcher.ValueMatcher_StringMatch:
		sm, err := compileString(p.StringMatch)
		if err != nil {
			return nil, fmt.Errorf("string_match.%w", err)
		}
		return func(v *structpb.Value) bool {
			s, ok := v.GetKind().(*structpb.Value_StringValue)
			return ok && sm(s.StringValue)
		}, nil
	case *matcher.ValueMatcher_BoolMatch:
		return func(v *structpb.Value) bool {
			b, ok := v.GetKind().(*structpb.Value_BoolValue)
			return ok && b.BoolValue == p.BoolMatch
		}, nil
	case *matcher.ValueMatcher_DoubleMatch:
		return compileDouble(p.DoubleMatch)
	case *matcher.ValueMatcher_PresentMatch:
		// As Envoy: present_match true matches any value at the path; false matches nothing.
		return func(v *structpb.Value) bool { return p.PresentMatch && v.GetKind() != nil }, nil
	case *matcher.ValueMatcher_OrMatch:
		var any []func(*structpb.Value) bool
		for i, om := range p.OrMatch.GetValueMatchers() {
			f, err := compileValue(om)
			if err != nil {
				return nil, fmt.Errorf("or_match.value_matchers[%d].%w", i, err)
			}
			any = append(any, f)
		}
		if len(any) == 0 {
			return nil, fmt.Errorf("or_match: no value_matchers")
		}
		return func(v *structpb.Value) bool {
			for _, f := range any {
				if f(v) {
					return true
				}
			}
			return false
		}, nil
	case *matcher.ValueMatcher_ListMatch:
		return nil, fmt.Errorf("list_match: not supported (supported: string_match, bool_match, double_match, present_match, null_match, or_match)")
	}
	return nil, fmt.Errorf("match_pattern: none; give one of string_match, bool_match, double_match, present_match, null_match, or_match")
}

func compileDouble(m *matcher.DoubleMatcher) (func(*structpb.Value) bool, error) {
	var in func(float64) bool
	switch p := m.GetMatchPattern().(type) {
	case *matcher.DoubleMatcher_Exact:
		in = func(x float64) bool { return x == p.Exact }
	case *matcher.DoubleMatcher_Range:
		start, end := p.Range.GetStart(), p.Range.GetEnd()
		if start > end {
			return nil, fmt.Errorf("double_match.range: start %v is after end %v", start, end)
		}
		in = func(x float64) bool { return x >= start && x < end }
	default:
		return nil, fmt.Errorf("double_match: give exact or range")
	}
	return func(v *structpb.Value) bool {
		n, ok := v.GetKind().(*structpb.Value_NumberValue)
		return ok && in(n.NumberValue)
	}, nil
}
