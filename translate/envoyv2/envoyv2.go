// Package envoyv2 serves the translation's v3 Envoy resources to xDS v2 clients: Value is a
// resource's body as the v2 transport sends it (source/xds, docs/xds-v2.md).
package envoyv2

import (
	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mcpbridge/mcpbridge/translate"
)

// Value is the body of a translated resource of the v3 type typeURL as the xDS v2 transport
// serves it (source/xds, docs/xds-v2.md). The v2 messages share every field number with v3
// for what the translation sets but a few fields v3 added, which a v2 client would ignore,
// changing the meaning of the route or cluster. Those are rewritten to the v2 spelling of the
// same meaning, which v3 keeps, deprecated, under the v2 field number:
//
//   - HeaderMatcher.string_match (exact, prefix, suffix, safe_regex) becomes exact_match,
//     prefix_match, suffix_match or safe_regex_match;
//   - HeaderValueOption.append_action OVERWRITE_IF_EXISTS_OR_ADD becomes append: false
//     (APPEND_IF_EXISTS_OR_ADD is v2's default, append unset);
//   - RouteAction.max_stream_duration.grpc_timeout_header_max becomes max_grpc_timeout; the
//     rest of max_stream_duration, which the translation sets equal to timeout, is left out.
//
// and one, which v2 has no field for, is left out: Cluster.maglev_lb_config (the Maglev
// table size; a v2 client uses its default, 65537). TestV3BodiesReadAsV2 proves, over every
// golden input, that nothing else is unknown to v2. A body that holds none of them is returned
// as it is, not marshalled again; only routes and clusters are read at all.
func Value(typeURL string, value []byte) []byte {
	var m proto.Message
	switch typeURL {
	case translate.EnvoyRouteType:
		m = &routepb.RouteConfiguration{}
	case translate.EnvoyClusterType:
		m = &clusterpb.Cluster{}
	default:
		return value
	}
	if err := proto.Unmarshal(value, m); err != nil {
		return value // not the translation's; served as stored
	}
	if !toV2(m.ProtoReflect()) {
		return value
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return value
	}
	return out
}

// toV2 rewrites m and every message under it (not inside Anys, whose type URLs say what they
// are) into the v2 spelling; it reports whether anything changed.
func toV2(m protoreflect.Message) bool {
	changed := false
	switch v := m.Interface().(type) {
	case *routepb.HeaderMatcher:
		changed = headerMatcherToV2(v)
	case *corepb.HeaderValueOption:
		if v.AppendAction == corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			v.AppendAction = corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
			v.Append = wrapperspb.Bool(false) //nolint:staticcheck // the v2 field, on purpose
			changed = true
		}
	case *routepb.RouteAction:
		if d := v.GetMaxStreamDuration(); d != nil {
			v.MaxGrpcTimeout = d.GetGrpcTimeoutHeaderMax() //nolint:staticcheck // the v2 field, on purpose
			v.MaxStreamDuration = nil
			changed = true
		}
	case *clusterpb.Cluster:
		if v.GetMaglevLbConfig() != nil {
			v.LbConfig = nil
			changed = true
		}
	}
	m.Range(func(f protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if f.Kind() != protoreflect.MessageKind {
			return true
		}
		switch {
		case f.IsMap():
			if f.MapValue().Kind() == protoreflect.MessageKind {
				val.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
					changed = toV2(v.Message()) || changed
					return true
				})
			}
		case f.IsList():
			for i := range val.List().Len() {
				changed = toV2(val.List().Get(i).Message()) || changed
			}
		default:
			changed = toV2(val.Message()) || changed
		}
		return true
	})
	return changed
}

// headerMatcherToV2 moves a string_match to the v2 field of the same pattern. ignore_case and
// contains have none; the translation sets neither (a match it cannot spell in v2 stays, and
// TestV3BodiesReadAsV2 fails).
func headerMatcherToV2(h *routepb.HeaderMatcher) bool {
	sm := h.GetStringMatch()
	if sm == nil || sm.GetIgnoreCase() {
		return false
	}
	//nolint:staticcheck // the v2 fields, on purpose
	switch p := sm.GetMatchPattern().(type) {
	case *matcherpb.StringMatcher_Exact:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_ExactMatch{ExactMatch: p.Exact}
	case *matcherpb.StringMatcher_Prefix:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_PrefixMatch{PrefixMatch: p.Prefix}
	case *matcherpb.StringMatcher_Suffix:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_SuffixMatch{SuffixMatch: p.Suffix}
	case *matcherpb.StringMatcher_SafeRegex:
		h.HeaderMatchSpecifier = &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: p.SafeRegex}
	default:
		return false
	}
	return true
}
