// Package envoyv2 serves the translation's v3 Envoy resources to xDS v2 clients: Value is a
// resource's body as the v2 transport sends it (source/xds, docs/xds-v2.md).
package envoyv2

import (
	"strings"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mcpbridge/mcpbridge/translate"
)

// Value is the body of a translated resource of the v3 type typeURL as the xDS v2 transport
// serves it (source/xds, docs/xds-v2.md). Its clients are Envoys of 1.16 and before (and
// grpc-go before 1.36). The v2 messages share every field number with v3 for what the
// translation sets but a few fields that v3 or Envoy 1.17 added, which such a client would
// ignore or refuse, changing the meaning of the route or cluster. Those are rewritten to the
// spelling Envoy 1.16 reads, which v3 keeps, deprecated, under the v2 field numbers:
//
//   - HeaderMatcher.string_match (exact, prefix, suffix, safe_regex) becomes exact_match,
//     prefix_match, suffix_match or safe_regex_match;
//   - HeaderValueOption.append_action OVERWRITE_IF_EXISTS_OR_ADD becomes append: false
//     (APPEND_IF_EXISTS_OR_ADD is v2's default, append unset);
//   - RouteAction.max_stream_duration.grpc_timeout_header_max becomes max_grpc_timeout; the
//     rest of max_stream_duration, which the translation sets equal to timeout, is left out;
//   - the cluster's typed_extension_protocol_options envoy.extensions.upstreams.http.v3
//     .HttpProtocolOptions (Envoy 1.17) become the cluster's http2_protocol_options,
//     http_protocol_options, protocol_selection, common_http_protocol_options,
//     upstream_http_protocol_options and max_requests_per_connection;
//   - the ADS config sources of EDS clusters name resource_api_version V2, not V3, so that
//     the client asks for their endpoints under the v2 type URL (not yet the RDS sources of
//     listeners, whose connection managers are in Anys this walk does not open: docs/xds-v2.md);
//   - the retry host predicate envoy.extensions.retry.host.previous_hosts.v3
//     .PreviousHostsPredicate is typed as Envoy 1.16's envoy.config.retry.previous_hosts.v2
//     .PreviousHostsPredicate (both empty);
//   - Listener.bind_to_port becomes deprecated_v1.bind_to_port;
//   - Listener.default_filter_chain (Envoy 1.17) becomes the listener's last filter chain,
//     its match empty, as istiod wrote its PassthroughFilterChain before: Envoy 1.16 takes it
//     for what no other chain matches at the first criterion where they differ (a connection
//     that matches a chain's transport protocol but not its application protocols finds no
//     chain there, where the default chain would take it);
//
// and those v2 has no field for are left out: Cluster.maglev_lb_config (the Maglev table
// size; a v2 client uses its default, 65537); FilterChain.transport_socket_connect_timeout
// (Envoy 1.16 has no such timeout); Listener.max_connections_to_accept_per_socket_event
// (Envoy 1.16 accepts every pending connection per socket event); the TLS inspector's initial_read_buffer_size (Envoy
// 1.16's reads what it needs); HeaderMatcher.treat_missing_header_as_empty (a v2 client does
// not match a withoutHeaders condition when the header is missing);
// RequestMirrorPolicy.disable_shadow_host_suffix_append (it appends "-shadow" to a mirrored
// request's Host); RouteConfiguration.max_direct_response_body_size_bytes (its default, 4 KiB,
// holds); and RouteConfiguration.ignore_port_in_host_matching, for which each domain of the
// route configuration without a port is also given as "DOMAIN:*", a prefix wildcard that
// matches the domain with any port, as the v3 client matches the domain alone;
// Cluster.dns_jitter and typed_dns_resolver_config (Envoy 1.16 resolves with c-ares, without
// jitter); and the connection managers' path_with_escaped_slashes_action KEEP_UNCHANGED (what
// Envoy 1.16 does with escaped slashes anyway). TestV3BodiesReadAsV2 proves, over every
// golden input, that nothing else is unknown to Envoy 1.16's API, inside Anys too. A body
// that holds none of them is returned as it is, not marshalled again; only routes, clusters
// and listeners are read at all.
func Value(typeURL string, value []byte) []byte {
	var m proto.Message
	switch typeURL {
	case translate.EnvoyRouteType:
		m = &routepb.RouteConfiguration{}
	case translate.EnvoyClusterType:
		m = &clusterpb.Cluster{}
	case translate.EnvoyListenerType:
		m = &listenerpb.Listener{}
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
	case *routepb.RouteConfiguration:
		if v.GetIgnorePortInHostMatching() {
			v.IgnorePortInHostMatching = false
			for _, vh := range v.GetVirtualHosts() {
				vh.Domains = withAnyPort(vh.GetDomains())
			}
			changed = true
		}
		if v.GetMaxDirectResponseBodySizeBytes() != nil {
			v.MaxDirectResponseBodySizeBytes = nil
			changed = true
		}
	case *routepb.RouteAction_RequestMirrorPolicy:
		if v.GetDisableShadowHostSuffixAppend() {
			v.DisableShadowHostSuffixAppend = false
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
		// istiod's DNS settings that Envoy 1.16 has no field for: the jitter (none there) and
		// the typed resolver (c-ares there anyway, with its own query limit).
		if v.GetDnsJitter() != nil || v.GetTypedDnsResolverConfig() != nil {
			v.DnsJitter, v.TypedDnsResolverConfig = nil, nil
			changed = true
		}
		changed = protocolOptionsToV2(v) || changed
	case *corepb.ConfigSource:
		// The EDS and RDS config sources name the resource version their client asks in. A v2
		// client asked for v2 resources gets v2 ones, so that it asks for their endpoints and
		// routes in v2 too, and gets them in the spelling it reads; Envoy 1.16 would otherwise
		// ask for v3 ones, served as stored, with fields too new for it. SDS sources (a
		// gateway's own agent, not the bridge) keep theirs.
		if v.GetAds() != nil && v.GetResourceApiVersion() == corepb.ApiVersion_V3 {
			v.ResourceApiVersion = corepb.ApiVersion_V2 //nolint:staticcheck // the v2 value, on purpose
			changed = true
		}
	case *listenerpb.Listener:
		if a := v.GetApiListener().GetApiListener(); a.GetTypeUrl() == hcmTypeURL {
			// grpc-go 1.34 reads an API listener's connection manager under its v2 name only
			// (1.35 takes both); the fields a proxyless client's has are the same in v2. An
			// Envoy's connection managers keep their v3 name, which Envoy 1.16 reads, with
			// fields (in inline routes) that its v2 one lacks.
			hcmToV2(a)
			a.TypeUrl = hcmV2TypeURL
			changed = true
		}
		if v.GetBindToPort() != nil {
			v.DeprecatedV1 = &listenerpb.Listener_DeprecatedV1{BindToPort: v.GetBindToPort()} //nolint:staticcheck // the v2 field, on purpose
			v.BindToPort = nil
			changed = true
		}
		if dc := v.GetDefaultFilterChain(); dc != nil {
			v.FilterChains = append(v.FilterChains, dc)
			v.DefaultFilterChain = nil
			changed = true
		}
		if v.GetMaxConnectionsToAcceptPerSocketEvent() != nil {
			v.MaxConnectionsToAcceptPerSocketEvent = nil
			changed = true
		}
	case *listenerpb.FilterChain:
		if v.GetTransportSocketConnectTimeout() != nil {
			v.TransportSocketConnectTimeout = nil
			changed = true
		}
	case *anypb.Any:
		changed = tlsInspectorToV2(v) || changed
		changed = hcmToV2(v) || changed
		if to, ok := anyTypeV2[v.GetTypeUrl()]; ok {
			v.TypeUrl = to
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

// anyTypeV2 renames the types of Anys that Envoy 1.16 knows under another name, with the
// same fields (the message below is empty in both).
var anyTypeV2 = map[string]string{
	"type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate":            "type.googleapis.com/envoy.config.retry.previous_hosts.v2.PreviousHostsPredicate",
	"type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig": "type.googleapis.com/envoy.config.retry.previous_priorities.PreviousPrioritiesConfig",
}

// withAnyPort adds to the domains without a port (not "*", not an IPv6 address' "[...]"
// with one) the form "DOMAIN:*", which an Envoy of before ignore_port_in_host_matching
// (1.19) takes as a prefix wildcard: the domain with any port.
func withAnyPort(domains []string) []string {
	out := make([]string, 0, 2*len(domains))
	for _, d := range domains {
		out = append(out, d)
		if d == "*" || strings.HasSuffix(d, "*") {
			continue
		}
		if i := strings.LastIndexByte(d, ':'); i >= 0 && !strings.HasSuffix(d, "]") {
			continue // has a port already
		}
		out = append(out, d+":*")
	}
	return out
}

// httpProtocolOptionsKey is the typed_extension_protocol_options key of the upstream HTTP
// options, which Envoy 1.17 introduced: before, they were the cluster's own fields.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// protocolOptionsToV2 moves the upstream HTTP options out of typed_extension_protocol_options
// into the cluster fields Envoy 1.16 reads (v3 keeps them, deprecated, under the v2 numbers):
// the protocol (HTTP/2, HTTP/1, or the downstream's), the common options (idle timeout,
// connection duration, requests per connection) and the upstream options. Options it has no
// field for (auto, HTTP/3) are left as they are; the translation sets none.
func protocolOptionsToV2(c *clusterpb.Cluster) bool {
	a := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey]
	if a == nil {
		return false
	}
	var o upstreamhttp.HttpProtocolOptions
	if a.UnmarshalTo(&o) != nil {
		return false
	}
	//nolint:staticcheck // the v2 fields, on purpose
	switch p := o.GetUpstreamProtocolOptions().(type) {
	case *upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_:
		switch {
		case p.ExplicitHttpConfig.GetHttp2ProtocolOptions() != nil:
			c.Http2ProtocolOptions = p.ExplicitHttpConfig.GetHttp2ProtocolOptions()
		case p.ExplicitHttpConfig.GetHttpProtocolOptions() != nil:
			c.HttpProtocolOptions = p.ExplicitHttpConfig.GetHttpProtocolOptions()
		default:
			return false
		}
	case *upstreamhttp.HttpProtocolOptions_UseDownstreamProtocolConfig:
		if p.UseDownstreamProtocolConfig.GetHttp3ProtocolOptions() != nil {
			return false
		}
		c.ProtocolSelection = clusterpb.Cluster_USE_DOWNSTREAM_PROTOCOL
		c.HttpProtocolOptions = p.UseDownstreamProtocolConfig.GetHttpProtocolOptions()
		c.Http2ProtocolOptions = p.UseDownstreamProtocolConfig.GetHttp2ProtocolOptions()
	case nil:
	default:
		return false
	}
	if common := o.GetCommonHttpProtocolOptions(); common != nil {
		// Envoy 1.16 had max_requests_per_connection on the cluster, not in the common options.
		c.MaxRequestsPerConnection = common.GetMaxRequestsPerConnection() //nolint:staticcheck // the v2 field
		common.MaxRequestsPerConnection = nil
		if proto.Size(common) > 0 {
			c.CommonHttpProtocolOptions = common //nolint:staticcheck // the v2 field
		}
	}
	c.UpstreamHttpProtocolOptions = o.GetUpstreamHttpProtocolOptions() //nolint:staticcheck // the v2 field
	delete(c.TypedExtensionProtocolOptions, httpProtocolOptionsKey)
	if len(c.TypedExtensionProtocolOptions) == 0 {
		c.TypedExtensionProtocolOptions = nil
	}
	return true
}

// headerMatcherToV2 moves a string_match to the v2 field of the same pattern. ignore_case and
// contains have none; the translation sets neither (a match it cannot spell in v2 stays, and
// TestV3BodiesReadAsV2 fails).
func headerMatcherToV2(h *routepb.HeaderMatcher) bool {
	changed := h.GetTreatMissingHeaderAsEmpty()
	h.TreatMissingHeaderAsEmpty = false
	return stringMatchToV2(h) || changed
}

func stringMatchToV2(h *routepb.HeaderMatcher) bool {
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

// tlsInspectorToV2 drops the TLS inspector's initial_read_buffer_size, which Envoy 1.16 does
// not have.
func tlsInspectorToV2(a *anypb.Any) bool {
	var ti tlsinspectorpb.TlsInspector
	if a.GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector" || a.UnmarshalTo(&ti) != nil || ti.GetInitialReadBufferSize() == nil {
		return false
	}
	ti.InitialReadBufferSize = nil
	out, err := anypb.New(&ti)
	if err != nil {
		return false
	}
	a.Value = out.GetValue()
	return true
}

// hcmToV2 leaves path_with_escaped_slashes_action KEEP_UNCHANGED (Envoy 1.18; what older
// Envoys do) out of a connection manager.
func hcmToV2(a *anypb.Any) bool {
	if a.GetTypeUrl() != hcmTypeURL {
		return false
	}
	var m hcmpb.HttpConnectionManager
	if a.UnmarshalTo(&m) != nil || m.GetPathWithEscapedSlashesAction() != hcmpb.HttpConnectionManager_KEEP_UNCHANGED {
		return false
	}
	m.PathWithEscapedSlashesAction = hcmpb.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&m)
	if err != nil {
		return false
	}
	a.Value = b
	return true
}

const (
	hcmTypeURL   = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	hcmV2TypeURL = "type.googleapis.com/envoy.config.filter.network.http_connection_manager.v2.HttpConnectionManager"
)
