package csds

import (
	"testing"

	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// present_match false matches nothing, as in Envoy; a number range is [start, end); a
// start after the end is refused.
func TestCSDSMatcherEdgesFollowEnvoy(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"n": 2, "s": "x"})
	value := func(v *matcher.ValueMatcher, key string) nodeFilter {
		f, err := compileMatchers([]*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{{
			Path: []*matcher.StructMatcher_PathSegment{{Segment: &matcher.StructMatcher_PathSegment_Key{Key: key}}}, Value: v}}}})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	rng := func(start, end float64) *matcher.ValueMatcher {
		return &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_DoubleMatch{DoubleMatch: &matcher.DoubleMatcher{
			MatchPattern: &matcher.DoubleMatcher_Range{Range: &typev3.DoubleRange{Start: start, End: end}}}}}
	}
	for _, c := range []struct {
		name string
		f    nodeFilter
		want bool
	}{
		{"present_match false", value(&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_PresentMatch{PresentMatch: false}}, "s"), false},
		{"present_match true, absent", value(&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_PresentMatch{PresentMatch: true}}, "nope"), false},
		{"range includes start", value(rng(2, 3), "n"), true},
		{"range excludes end", value(rng(1, 2), "n"), false},
		{"a string is no number", value(rng(0, 10), "s"), false},
		{"or_match", value(&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_OrMatch{OrMatch: &matcher.OrMatcher{ValueMatchers: []*matcher.ValueMatcher{
			{MatchPattern: &matcher.ValueMatcher_BoolMatch{BoolMatch: true}}, rng(0, 5)}}}}, "n"), true},
	} {
		if got := c.f("node", md); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if _, err := compileMatchers([]*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{{
		Path: []*matcher.StructMatcher_PathSegment{{Segment: &matcher.StructMatcher_PathSegment_Key{Key: "n"}}}, Value: rng(3, 1)}}}}); err == nil {
		t.Error("a range whose start is after its end was accepted")
	}
}

// FuzzCompileMatchers: any ClientStatusRequest a client sends compiles or is refused, and a
// compiled filter runs on any node, without panicking.
func FuzzCompileMatchers(f *testing.F) {
	seed, _ := proto.Marshal(&status.ClientStatusRequest{NodeMatchers: []*matcher.NodeMatcher{{
		NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "a.*"}}},
		NodeMetadatas: []*matcher.StructMatcher{{
			Path:  []*matcher.StructMatcher_PathSegment{{Segment: &matcher.StructMatcher_PathSegment_Key{Key: "k"}}},
			Value: &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "v"}}}},
		}},
	}}})
	f.Add(seed)
	f.Add([]byte{})
	md, _ := structpb.NewStruct(map[string]any{"k": "v1", "n": 1, "b": true, "z": nil, "s": map[string]any{"k": "v"}})
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &status.ClientStatusRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		filter, err := compileMatchers(req.GetNodeMatchers())
		if err != nil || filter == nil {
			return
		}
		filter("abc", md)
		filter("", nil)
	})
}
