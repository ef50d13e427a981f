package envoy

import (
	"math"
	"slices"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// These tests hold istiod's sidecar plumbing (sidecar.go) to what istiod builds for a sidecar
// with iptables capture, under MeshConfig's defaults, field by field.

// isPlumbing tells the outputs of the plumbing, which every translation has whatever its inputs.
func isPlumbing(name string) bool {
	switch name {
	case VirtualOutboundListenerName, VirtualInboundListenerName, PassthroughClusterName, BlackHoleClusterName, InboundPassthroughCluster:
		return true
	}
	return false
}

// plumbing translates YAML under an outbound traffic policy and returns the plumbing's
// listeners and clusters, and every listener, each validated (inside its Anys too).
func plumbing(t *testing.T, yaml string, policy OutboundTrafficPolicy) (listeners map[string]*listenerpb.Listener, clusters map[string]*clusterpb.Cluster) {
	t.Helper()
	var inputs map[string][]*mcpapi.Resource
	if yaml != "" {
		inputs = decodeYAML(t, yaml)
	}
	outs, faults := Build(inputs, TranslatorOptions{OutboundTrafficPolicy: policy})
	if len(faults) > 0 {
		t.Errorf("faults: %v", faults)
	}
	listeners, clusters = map[string]*listenerpb.Listener{}, map[string]*clusterpb.Cluster{}
	for _, r := range outs {
		if err := validateDeep(r.Body()); err != nil {
			t.Errorf("%s %q fails validation: %v", typeName(r.TypeURL), r.Name, err)
		}
		switch r.TypeURL {
		case ListenerType:
			l := &listenerpb.Listener{}
			mustUnmarshal(t, r, l)
			if err := l.ValidateAll(); err != nil {
				t.Errorf("listener %s: %v", r.Name, err)
			}
			listeners[r.Name] = l
		case ClusterType:
			if !isPlumbing(r.Name) {
				continue
			}
			c := &clusterpb.Cluster{}
			mustUnmarshal(t, r, c)
			if err := c.ValidateAll(); err != nil {
				t.Errorf("cluster %s: %v", r.Name, err)
			}
			clusters[r.Name] = c
		}
	}
	return listeners, clusters
}

// assertTCPProxyTo checks a chain's only filter: a tcp_proxy to cluster, named by it.
func assertTCPProxyTo(t *testing.T, what string, fc *listenerpb.FilterChain, cluster string) {
	t.Helper()
	p, names := tcpProxyOf(t, fc)
	if len(names) != 1 || p.GetCluster() != cluster || p.GetStatPrefix() != cluster {
		t.Errorf("%s: filters %v, tcp_proxy to %q with stat_prefix %q, want only a tcp_proxy to %q under its name", what, names, p.GetCluster(), p.GetStatPrefix(), cluster)
	}
	if p.GetIdleTimeout() != nil || p.GetHashPolicy() != nil || p.GetAccessLog() != nil {
		t.Errorf("%s: tcp_proxy %v sets what istiod leaves unset", what, p)
	}
}

// virtualOutbound takes every captured outbound connection on 0.0.0.0:15001 and hands it to
// the listener of its original destination; the rest go to PassthroughCluster under ALLOW_ANY
// (istiod's default), to BlackHoleCluster under REGISTRY_ONLY; a connection to 15001 itself to
// BlackHoleCluster.
func TestVirtualOutboundHandsConnectionsOnByOriginalDestination(t *testing.T) {
	for _, tc := range []struct {
		policy OutboundTrafficPolicy
		egress string
	}{{AllowAny, PassthroughClusterName}, {RegistryOnly, BlackHoleClusterName}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			ls, _ := plumbing(t, "", tc.policy)
			l := ls[VirtualOutboundListenerName]
			if l == nil {
				t.Fatalf("no %s among %v", VirtualOutboundListenerName, sortedKeys(ls))
			}
			sa := l.GetAddress().GetSocketAddress()
			if sa.GetAddress() != "0.0.0.0" || sa.GetPortValue() != 15001 {
				t.Errorf("address %s:%d, want 0.0.0.0:15001", sa.GetAddress(), sa.GetPortValue())
			}
			if !l.GetUseOriginalDst().GetValue() || l.GetBindToPort() != nil || l.GetTransparent() != nil {
				t.Errorf("use_original_dst %v, bind_to_port %v, transparent %v; want use_original_dst, the port bound", l.GetUseOriginalDst(), l.GetBindToPort(), l.GetTransparent())
			}
			if l.GetTrafficDirection() != corepb.TrafficDirection_OUTBOUND || l.GetMaxConnectionsToAcceptPerSocketEvent().GetValue() != 1 {
				t.Errorf("traffic direction %v, max_connections_to_accept_per_socket_event %v", l.GetTrafficDirection(), l.GetMaxConnectionsToAcceptPerSocketEvent())
			}
			if len(l.GetListenerFilters()) != 0 || l.GetDefaultFilterChain() != nil || l.GetListenerFiltersTimeout() != nil {
				t.Errorf("listener filters %v, default chain %v, timeout %v: istiod sets none", l.GetListenerFilters(), l.GetDefaultFilterChain(), l.GetListenerFiltersTimeout())
			}
			fcs := l.GetFilterChains()
			if len(fcs) != 2 {
				t.Fatalf("%d filter chains, want the blackhole and the catch-all", len(fcs))
			}
			if fcs[0].GetName() != "virtualOutbound-blackhole" || fcs[0].GetFilterChainMatch().GetDestinationPort().GetValue() != 15001 {
				t.Errorf("first chain %q matching %v, want virtualOutbound-blackhole for destination port 15001", fcs[0].GetName(), fcs[0].GetFilterChainMatch())
			}
			assertTCPProxyTo(t, "blackhole chain", fcs[0], BlackHoleClusterName)
			if fcs[1].GetName() != "virtualOutbound-catchall-tcp" || fcs[1].GetFilterChainMatch() != nil {
				t.Errorf("second chain %q matching %v, want virtualOutbound-catchall-tcp matching everything", fcs[1].GetName(), fcs[1].GetFilterChainMatch())
			}
			assertTCPProxyTo(t, "catch-all chain", fcs[1], tc.egress)
			for _, fc := range fcs {
				if fc.GetTransportSocketConnectTimeout() != nil || fc.GetTransportSocket() != nil {
					t.Errorf("chain %s: %v", fc.GetName(), fc)
				}
			}
		})
	}
}

// virtualInbound takes captured inbound connections on 0.0.0.0:15006 with only istiod's
// passthrough chains that no workload changes: 15006 itself to BlackHoleCluster, plaintext
// HTTP through a connection manager to InboundPassthroughCluster, other plaintext and TLS
// through a tcp_proxy to it. No per-port chains (they need the proxy's own workload), no mTLS
// chains (the bridge does no Istio mTLS).
func TestVirtualInboundHasOnlyTheWorkloadIndependentPassthroughChains(t *testing.T) {
	ls, _ := plumbing(t, tcpServiceYAML("a", 1, "a.example.com", "[{number: 5432, name: tcp, protocol: TCP}]", "10.9.0.1", "STATIC", "[{address: 10.1.0.1}]"), AllowAny)
	l := ls[VirtualInboundListenerName]
	if l == nil {
		t.Fatalf("no %s among %v", VirtualInboundListenerName, sortedKeys(ls))
	}
	sa := l.GetAddress().GetSocketAddress()
	if sa.GetAddress() != "0.0.0.0" || sa.GetPortValue() != 15006 || l.GetBindToPort() != nil || l.GetUseOriginalDst() != nil {
		t.Errorf("address %s:%d, bind_to_port %v, use_original_dst %v; want 0.0.0.0:15006 bound, the original destination from its listener filter",
			sa.GetAddress(), sa.GetPortValue(), l.GetBindToPort(), l.GetUseOriginalDst())
	}
	if l.GetTrafficDirection() != corepb.TrafficDirection_INBOUND || !l.GetContinueOnListenerFiltersTimeout() ||
		l.GetListenerFiltersTimeout() == nil || l.GetListenerFiltersTimeout().AsDuration() != 0 || l.GetMaxConnectionsToAcceptPerSocketEvent().GetValue() != 1 {
		t.Errorf("direction %v, continue_on_listener_filters_timeout %v, listener_filters_timeout %v, max_connections_to_accept_per_socket_event %v",
			l.GetTrafficDirection(), l.GetContinueOnListenerFiltersTimeout(), l.GetListenerFiltersTimeout(), l.GetMaxConnectionsToAcceptPerSocketEvent())
	}
	var filters []string
	for _, f := range l.GetListenerFilters() {
		filters = append(filters, f.GetName())
		if f.GetName() == originalDstFilterName {
			if f.GetFilterDisabled() != nil {
				t.Errorf("original_dst disabled on %v", f.GetFilterDisabled())
			}
			continue
		}
		r := f.GetFilterDisabled().GetDestinationPortRange()
		if r.GetStart() != 15006 || r.GetEnd() != 15007 {
			t.Errorf("%s disabled on %v, want on destination port 15006", f.GetName(), f.GetFilterDisabled())
		}
	}
	if !slices.Equal(filters, []string{originalDstFilterName, tlsInspectorName, httpInspectorName}) {
		t.Errorf("listener filters %v, want original_dst, the TLS inspector, the HTTP inspector", filters)
	}
	ti := &tlsinspectorpb.TlsInspector{}
	if err := l.GetListenerFilters()[1].GetTypedConfig().UnmarshalTo(ti); err != nil || ti.GetInitialReadBufferSize().GetValue() != 512 {
		t.Errorf("TLS inspector %v (%v), want initial_read_buffer_size 512", ti, err)
	}

	type chain struct {
		name, transport string
		alpn            []string
		port            uint32
	}
	var got []chain
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		got = append(got, chain{fc.GetName(), m.GetTransportProtocol(), m.GetApplicationProtocols(), m.GetDestinationPort().GetValue()})
		if fc.GetTransportSocket() != nil || fc.GetTransportSocketConnectTimeout() != nil || len(m.GetPrefixRanges()) > 0 || len(m.GetServerNames()) > 0 {
			t.Errorf("chain %s: %v", fc.GetName(), fc)
		}
	}
	want := []chain{
		{"virtualInbound-blackhole", "", nil, 15006},
		{"virtualInbound-catchall-http", "raw_buffer", []string{"http/1.1", "h2c"}, 0},
		{"virtualInbound", "raw_buffer", nil, 0},
		{"virtualInbound", "tls", nil, 0},
	}
	if !slices.EqualFunc(got, want, func(a, b chain) bool {
		return a.name == b.name && a.transport == b.transport && slices.Equal(a.alpn, b.alpn) && a.port == b.port
	}) {
		t.Fatalf("chains %+v, want %+v", got, want)
	}
	fcs := l.GetFilterChains()
	assertTCPProxyTo(t, "blackhole chain", fcs[0], BlackHoleClusterName)
	assertTCPProxyTo(t, "plaintext chain", fcs[2], InboundPassthroughCluster)
	assertTCPProxyTo(t, "TLS chain", fcs[3], InboundPassthroughCluster)
	if len(l.GetDefaultFilterChain().GetFilters()) != 0 {
		t.Errorf("default chain %v: istiod sets none", l.GetDefaultFilterChain())
	}

	// The HTTP chain: istiod's inbound connection manager with its inline passthrough route.
	if f := fcs[1].GetFilters(); len(f) != 1 || f[0].GetName() != hcmFilterName {
		t.Fatalf("HTTP chain filters %v, want the connection manager alone", f)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if err := fcs[1].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if hcm.GetStatPrefix() != "InboundPassthroughCluster;" || hcm.GetServerName() != "istio-envoy" || hcm.GetUseRemoteAddress().GetValue() ||
		hcm.GetUseRemoteAddress() == nil || hcm.GetStreamIdleTimeout().AsDuration() != 0 || hcm.GetStreamIdleTimeout() == nil ||
		hcm.GetForwardClientCertDetails() != hcmpb.HttpConnectionManager_APPEND_FORWARD || !hcm.GetProxy_100Continue() ||
		!hcm.GetNormalizePath().GetValue() || hcm.GetPathWithEscapedSlashesAction() != hcmpb.HttpConnectionManager_KEEP_UNCHANGED ||
		hcm.GetCodecType() != hcmpb.HttpConnectionManager_AUTO {
		t.Errorf("connection manager settings: %v", hcm)
	}
	if cc := hcm.GetSetCurrentClientCertDetails(); !cc.GetSubject().GetValue() || !cc.GetDns() || !cc.GetUri() || cc.GetCert() || cc.GetChain() {
		t.Errorf("set_current_client_cert_details %v, want subject, DNS and URI", cc)
	}
	if u := hcm.GetUpgradeConfigs(); len(u) != 1 || u[0].GetUpgradeType() != "websocket" {
		t.Errorf("upgrades %v, want websocket", u)
	}
	var hf []string
	for _, f := range hcm.GetHttpFilters() {
		hf = append(hf, f.GetName())
	}
	if !slices.Equal(hf, []string{faultFilterName, corsFilterName, routerFilterName}) {
		t.Errorf("HTTP filters %v, want fault, CORS, router", hf)
	}
	rc := hcm.GetRouteConfig()
	if rc.GetName() != InboundPassthroughCluster || rc.GetValidateClusters() == nil || rc.GetValidateClusters().GetValue() || len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("inline route configuration %v", rc)
	}
	vh := rc.GetVirtualHosts()[0]
	if vh.GetName() != "inbound|http|0" || !slices.Equal(vh.GetDomains(), []string{"*"}) || len(vh.GetRoutes()) != 1 {
		t.Fatalf("virtual host %v", vh)
	}
	r := vh.GetRoutes()[0]
	ra := r.GetRoute()
	if r.GetName() != "default" || r.GetMatch().GetPrefix() != "/" || r.GetDecorator().GetOperation() != ":0/*" || ra.GetCluster() != InboundPassthroughCluster {
		t.Errorf("route %v", r)
	}
	if ra.GetTimeout() == nil || ra.GetTimeout().AsDuration() != 0 || ra.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration() != 0 ||
		ra.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax() == nil || ra.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax().AsDuration() != 0 {
		t.Errorf("route timeouts %v, want none (0s), the grpc-timeout header not used", ra)
	}
	if rp := ra.GetRetryPolicy(); rp.GetRetryOn() != "reset-before-request" || rp.GetNumRetries().GetValue() != 2 || len(rp.GetRetriableStatusCodes()) > 0 {
		t.Errorf("retry policy %v, want 2 retries on reset-before-request", rp)
	}
}

// The clusters the plumbing sends to, as istiod builds them: PassthroughCluster to the
// original destination, InboundPassthroughCluster likewise from 127.0.0.6, BlackHoleCluster a
// static cluster without endpoints.
func TestPassthroughAndBlackHoleClustersAsIstiodBuildsThem(t *testing.T) {
	_, cs := plumbing(t, "", AllowAny)
	bh := cs[BlackHoleClusterName]
	if bh == nil {
		t.Fatalf("no %s among %v", BlackHoleClusterName, sortedKeys(cs))
	}
	want := &clusterpb.Cluster{
		Name: BlackHoleClusterName, AltStatName: "BlackHoleCluster;",
		ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_STATIC},
		ConnectTimeout:       bh.GetConnectTimeout(),
	}
	if !proto.Equal(bh, want) || bh.GetConnectTimeout().AsDuration() != 10*time.Second {
		t.Errorf("BlackHoleCluster %v, want %v with a 10s connect timeout", bh, want)
	}
	for _, name := range []string{PassthroughClusterName, InboundPassthroughCluster} {
		c := cs[name]
		if c == nil {
			t.Fatalf("no %s among %v", name, sortedKeys(cs))
		}
		if c.GetAltStatName() != "PassthroughCluster;" || c.GetType() != clusterpb.Cluster_ORIGINAL_DST ||
			c.GetLbPolicy() != clusterpb.Cluster_CLUSTER_PROVIDED || c.GetConnectTimeout().AsDuration() != 10*time.Second {
			t.Errorf("%s: alt_stat_name %q, type %v, lb_policy %v, connect_timeout %v", name, c.GetAltStatName(), c.GetType(), c.GetLbPolicy(), c.GetConnectTimeout())
		}
		th := c.GetCircuitBreakers().GetThresholds()
		if len(th) != 1 || th[0].GetMaxConnections().GetValue() != math.MaxUint32 || th[0].GetMaxPendingRequests().GetValue() != math.MaxUint32 ||
			th[0].GetMaxRequests().GetValue() != math.MaxUint32 || th[0].GetMaxRetries().GetValue() != math.MaxUint32 || th[0].GetTrackRemaining() {
			t.Errorf("%s: circuit breakers %v, want every threshold unlimited", name, c.GetCircuitBreakers())
		}
		opts := &upstreamhttp.HttpProtocolOptions{}
		if len(c.GetTypedExtensionProtocolOptions()) != 1 {
			t.Fatalf("%s: protocol options %v", name, c.GetTypedExtensionProtocolOptions())
		}
		if err := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey].UnmarshalTo(opts); err != nil {
			t.Fatal(err)
		}
		ud := opts.GetUseDownstreamProtocolConfig()
		if opts.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration() != 5*time.Minute || ud.GetHttpProtocolOptions() == nil || ud.GetHttp2ProtocolOptions() == nil ||
			!proto.Equal(ud.GetHttp2ProtocolOptions(), &corepb.Http2ProtocolOptions{}) {
			t.Errorf("%s: protocol options %v, want the downstream protocol and a 5m idle timeout", name, opts)
		}
		if c.GetLoadAssignment() != nil || c.GetEdsClusterConfig() != nil || c.GetTransportSocket() != nil || len(c.GetFilters()) != 0 || c.GetOutlierDetection() != nil {
			t.Errorf("%s: %v", name, c)
		}
		src := c.GetUpstreamBindConfig().GetSourceAddress()
		if name == PassthroughClusterName && c.GetUpstreamBindConfig() != nil {
			t.Errorf("%s binds %v", name, c.GetUpstreamBindConfig())
		}
		if name == InboundPassthroughCluster && (src.GetAddress() != "127.0.0.6" || src.GetPortValue() != 0 || len(c.GetUpstreamBindConfig().GetExtraSourceAddresses()) != 0) {
			t.Errorf("%s binds %v, want 127.0.0.6", name, c.GetUpstreamBindConfig())
		}
	}
}

// Every 0.0.0.0_PORT is istiod's, an HTTP-only one too: not bound (virtualOutbound hands it
// its connections), the HTTP inspector, the connection manager's chain matched by plaintext
// HTTP's protocols with a 15s transport socket connect timeout, and the PassthroughFilterChain
// for the rest, to the egress cluster of the outbound traffic policy.
func TestHTTPOnlyPortListenerIsIstiodsWithThePassthroughDefault(t *testing.T) {
	yaml := `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.1.0.1}]
`
	for _, tc := range []struct {
		policy OutboundTrafficPolicy
		egress string
	}{{AllowAny, PassthroughClusterName}, {RegistryOnly, BlackHoleClusterName}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			ls, _ := plumbing(t, yaml, tc.policy)
			l := ls[OutboundListenerName(9080)]
			assertOutboundTCPListener(t, l, wildcardBind, 9080)
			if lf := l.GetListenerFilters(); len(lf) != 1 || lf[0].GetName() != httpInspectorName {
				t.Errorf("listener filters %v, want the HTTP inspector", lf)
			}
			fcs := l.GetFilterChains()
			if len(fcs) != 1 {
				t.Fatalf("%d chains, want the HTTP chain", len(fcs))
			}
			m := fcs[0].GetFilterChainMatch()
			if m.GetTransportProtocol() != "raw_buffer" || !slices.Equal(m.GetApplicationProtocols(), []string{"http/1.1", "h2c"}) {
				t.Errorf("HTTP chain match %v, want raw_buffer with http/1.1 and h2c", m)
			}
			hcm := &hcmpb.HttpConnectionManager{}
			if err := fcs[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil || hcm.GetRds().GetRouteConfigName() != "9080" {
				t.Errorf("HTTP chain connection manager %v (%v), want RDS of 9080", hcm, err)
			}
			dc := l.GetDefaultFilterChain()
			if dc.GetName() != "PassthroughFilterChain" || dc.GetFilterChainMatch() == nil || !proto.Equal(dc.GetFilterChainMatch(), &listenerpb.FilterChainMatch{}) ||
				dc.GetTransportSocketConnectTimeout() != nil {
				t.Errorf("default chain %v, want PassthroughFilterChain with an empty match", dc)
			}
			assertTCPProxyTo(t, "PassthroughFilterChain", dc, tc.egress)
		})
	}
}

// The plumbing is built once: a change to the mesh does not rebuild or rewrite it, and it
// stays when the mesh is emptied.
func TestPlumbingIsBuiltOnceAndStays(t *testing.T) {
	tr := NewTranslator(TranslatorOptions{})
	d, _ := tr.Translate()
	var first []string
	for _, r := range d.Resources() {
		first = append(first, r.Name)
	}
	slices.Sort(first)
	want := []string{BlackHoleClusterName, InboundPassthroughCluster, PassthroughClusterName, VirtualInboundListenerName, VirtualOutboundListenerName}
	if !slices.Equal(first, want) {
		t.Fatalf("first translation of nothing: %v, want %v", first, want)
	}
	for coll, rs := range decodeYAML(t, tcpServiceYAML("a", 1, "a.example.com", "[{number: 5432, name: tcp, protocol: TCP}]", "10.9.0.1", "STATIC", "[{address: 10.1.0.1}]")) {
		in := make([]Input, len(rs))
		for i, r := range rs {
			in[i] = InputOf(r)
		}
		tr.Update(coll, in, nil)
	}
	d, _ = tr.Translate()
	for _, r := range d.Resources() {
		if isPlumbing(r.Name) {
			t.Errorf("%s rewritten by a ServiceEntry", r.Name)
		}
	}
	var names []string
	for _, r := range tr.Outputs() {
		if isPlumbing(r.Name) {
			names = append(names, r.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("plumbing %v, want %v", names, want)
	}
}

// The outbound traffic policy reads as MeshConfig spells it.
func TestOutboundTrafficPolicyParsesMeshConfigModes(t *testing.T) {
	for s, want := range map[string]OutboundTrafficPolicy{"": AllowAny, "ALLOW_ANY": AllowAny, "REGISTRY_ONLY": RegistryOnly} {
		if got, err := ParseOutboundTrafficPolicy(s); err != nil || got != want {
			t.Errorf("%q: %v (%v), want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"allow_any", "ALLOW_ANY_DYNAMIC_DNS", "NONE"} {
		if _, err := ParseOutboundTrafficPolicy(s); err == nil {
			t.Errorf("%q parses", s)
		}
	}
}
