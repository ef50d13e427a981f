package envoy

import (
	"math"
	"strings"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/translate"
)

// built translates a YAML mesh, validates every output deeply (Envoy's ValidateAll, inside
// Anys too) and returns the outputs by collection and name, and the faults.
func built(t *testing.T, yaml string) (map[string]map[string]Resource, []Fault) {
	t.Helper()
	ingress := translate.GatewayClass{Labels: map[string]string{"istio": "ingressgateway"}}
	outs, faults := Build(decodeYAML(t, yaml), TranslatorOptions{GatewayClasses: []translate.GatewayClass{ingress}})
	by := map[string]map[string]Resource{}
	for _, r := range outs {
		if err := validateDeep(r.Body()); err != nil {
			t.Errorf("%s %q fails validation: %v", typeName(r.TypeURL), r.Name, err)
		}
		if by[r.TypeURL] == nil {
			by[r.TypeURL] = map[string]Resource{}
		}
		by[r.TypeURL][r.Name] = r
	}
	return by, faults
}

func clusterOf(t *testing.T, by map[string]map[string]Resource, collection, name string) *clusterpb.Cluster {
	t.Helper()
	r, ok := by[collection][name]
	if !ok {
		t.Fatalf("no %s %q", collection, name)
	}
	c := &clusterpb.Cluster{}
	mustUnmarshal(t, r, c)
	return c
}

func protocolOptions(t *testing.T, c *clusterpb.Cluster) *upstreamhttp.HttpProtocolOptions {
	t.Helper()
	a := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey]
	if a == nil {
		return nil
	}
	o := &upstreamhttp.HttpProtocolOptions{}
	if err := a.UnmarshalTo(o); err != nil {
		t.Fatal(err)
	}
	return o
}

func upstreamTLS(t *testing.T, c *clusterpb.Cluster) *tlspb.UpstreamTlsContext {
	t.Helper()
	ts := c.GetTransportSocket()
	if ts == nil {
		return nil
	}
	if ts.GetName() != "envoy.transport_sockets.tls" {
		t.Errorf("transport socket %q, want envoy.transport_sockets.tls", ts.GetName())
	}
	ctx := &tlspb.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

func hasFault(fs []Fault, substr string) bool {
	for _, f := range fs {
		if strings.Contains(f.Message, substr) {
			return true
		}
	}
	return false
}

const mergeMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: ns}
spec:
  hosts: [svc.ns.svc.cluster.local]
  ports:
  - {number: 80, name: http, protocol: HTTP}
  - {number: 81, name: http-b, protocol: HTTP}
  resolution: STATIC
  endpoints:
  - {address: 10.0.0.1, labels: {v: one}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc, namespace: ns}
spec:
  host: svc.ns.svc.cluster.local
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
    connectionPool: {tcp: {maxConnections: 50}}
    outlierDetection: {consecutive5xxErrors: 3}
    portLevelSettings:
    - port: {number: 80}
      connectionPool: {http: {http2MaxRequests: 9}}
  subsets:
  - name: one
    labels: {v: one}
    trafficPolicy:
      outlierDetection: {consecutive5xxErrors: 5}
  - name: two
    labels: {v: one}
    trafficPolicy:
      portLevelSettings:
      - port: {number: 81}
        loadBalancer: {simple: RANDOM}
`

// A portLevelSettings entry stands alone (istiod's GetPortLevelTrafficPolicy): port 80's own
// connectionPool does not take the top level's maxConnections, and the top level's load
// balancer and outlier detection do not apply to port 80 at all. A subset replaces what it
// sets; a subset's port entry replaces all four settings.
func TestPortLevelSettingsStandAloneAsIstiodMergesThem(t *testing.T) {
	by, _ := built(t, mergeMesh)
	host := "svc.ns.svc.cluster.local"
	c80 := clusterOf(t, by, ClusterType, ClusterName(80, "", host))
	th := c80.GetCircuitBreakers().GetThresholds()[0]
	if th.GetMaxConnections().GetValue() != math.MaxUint32 || th.GetMaxRequests().GetValue() != 9 {
		t.Errorf("port 80: max_connections %d, max_requests %d; want unlimited (not the top level's 50) and 9",
			th.GetMaxConnections().GetValue(), th.GetMaxRequests().GetValue())
	}
	if c80.GetLbPolicy() != clusterpb.Cluster_LEAST_REQUEST || c80.GetOutlierDetection() != nil {
		t.Errorf("port 80: lb %v, outlier %v; want the defaults (LEAST_REQUEST, none), not the top level's", c80.GetLbPolicy(), c80.GetOutlierDetection())
	}
	c81 := clusterOf(t, by, ClusterType, ClusterName(81, "", host))
	if c81.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue() != 50 || c81.GetLbPolicy() != clusterpb.Cluster_ROUND_ROBIN ||
		c81.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 3 {
		t.Errorf("port 81 (no port entry): %v; want the top level's pool, ROUND_ROBIN and outlier detection", c81)
	}
	// Subset one on port 81: the top level, its outlier detection replaced.
	s1 := clusterOf(t, by, ClusterType, ClusterName(81, "one", host))
	if s1.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 5 || s1.GetLbPolicy() != clusterpb.Cluster_ROUND_ROBIN ||
		s1.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue() != 50 {
		t.Errorf("subset one, port 81: %v; want outlier 5 over the top level's ROUND_ROBIN and pool", s1)
	}
	// Subset one on port 80: port 80's entry, then the subset's outlier detection.
	s1p80 := clusterOf(t, by, ClusterType, ClusterName(80, "one", host))
	if s1p80.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 5 || s1p80.GetLbPolicy() != clusterpb.Cluster_LEAST_REQUEST ||
		s1p80.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue() != 9 {
		t.Errorf("subset one, port 80: %v; want port 80's pool, the default balancer and outlier 5", s1p80)
	}
	// Subset two on port 81: its port entry replaces all four: RANDOM, and no pool, no outlier.
	s2 := clusterOf(t, by, ClusterType, ClusterName(81, "two", host))
	if s2.GetLbPolicy() != clusterpb.Cluster_RANDOM || s2.GetOutlierDetection() != nil ||
		s2.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue() != math.MaxUint32 {
		t.Errorf("subset two, port 81: %v; want RANDOM alone", s2)
	}
}

// A plain EDS cluster of a ServiceEntry has what istiod's has (metadata aside): alt_stat_name,
// EDS over ADS without an initial fetch timeout, a 10s connect timeout, unlimited thresholds
// without remaining-capacity stats, a common_lb_config with the panic threshold off (0%),
// LEAST_REQUEST, and no protocol options for an HTTP port.
func TestPlainEDSClusterHasIstiodFields(t *testing.T) {
	by, _ := built(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1"))
	name := ClusterName(8080, "", "one.test.svc.cluster.local")
	c := clusterOf(t, by, ClusterType, name)
	want := &clusterpb.Cluster{
		Name: name, AltStatName: name + ";",
		ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_EDS},
		EdsClusterConfig:     &clusterpb.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: edsSource},
		ConnectTimeout:       c.GetConnectTimeout(),
		LbPolicy:             clusterpb.Cluster_LEAST_REQUEST,
		CommonLbConfig:       &clusterpb.Cluster_CommonLbConfig{HealthyPanicThreshold: &typepb.Percent{}},
		CircuitBreakers: &clusterpb.CircuitBreakers{Thresholds: []*clusterpb.CircuitBreakers_Thresholds{{
			MaxConnections: limit(0), MaxPendingRequests: limit(0), MaxRequests: limit(0), MaxRetries: limit(0)}}},
		TypedExtensionProtocolOptions: c.GetTypedExtensionProtocolOptions(),
	}
	if c.GetConnectTimeout().AsDuration() != 10*time.Second {
		t.Errorf("connect_timeout %v, want 10s", c.GetConnectTimeout().AsDuration())
	}
	if !proto.Equal(c, want) {
		t.Errorf("cluster:\n%v\nwant:\n%v", c, want)
	}
	if c.GetEdsClusterConfig().GetEdsConfig().GetInitialFetchTimeout() == nil {
		t.Error("eds_config.initial_fetch_timeout unset; istiod sets 0s")
	}
}

// An unset ServiceEntry port protocol is sniffed: its cluster uses the downstream protocol (a
// sidecar's, istiod's setUpstreamProtocol); HTTP gets no options; GRPC explicit HTTP/2.
func TestClusterProtocolFollowsTheServiceEntryProtocolField(t *testing.T) {
	by, _ := built(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: p, namespace: ns}
spec:
  hosts: [p.example.com]
  ports:
  - {number: 80, name: grpc}
  - {number: 81, name: px, protocol: HTTP}
  - {number: 82, name: py, protocol: GRPC}
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`)
	sniffed := protocolOptions(t, clusterOf(t, by, ClusterType, ClusterName(80, "", "p.example.com")))
	if sniffed.GetUseDownstreamProtocolConfig() == nil || sniffed.GetUseDownstreamProtocolConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("port 80 (no protocol, named grpc): %v; want use_downstream_protocol_config", sniffed)
	}
	if o := protocolOptions(t, clusterOf(t, by, ClusterType, ClusterName(81, "", "p.example.com"))); o != nil {
		t.Errorf("port 81 (HTTP): %v; want no protocol options, as istiod", o)
	}
	if o := protocolOptions(t, clusterOf(t, by, ClusterType, ClusterName(82, "", "p.example.com"))); o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("port 82 (GRPC): %v; want explicit HTTP/2", o)
	}
}

// DNS clusters get istiod's DNS settings.
func TestDNSClustersGetIstiodDNSSettings(t *testing.T) {
	by, _ := built(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: d, namespace: ns}
spec:
  hosts: [d.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: l, namespace: ns}
spec:
  hosts: [l.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS_ROUND_ROBIN
`)
	for host, typ := range map[string]clusterpb.Cluster_DiscoveryType{"d.example.com": clusterpb.Cluster_STRICT_DNS, "l.example.com": clusterpb.Cluster_LOGICAL_DNS} {
		c := clusterOf(t, by, ClusterType, ClusterName(443, "", host))
		switch {
		case c.GetType() != typ:
			t.Errorf("%s: type %v, want %v", host, c.GetType(), typ)
		case c.GetDnsLookupFamily() != clusterpb.Cluster_V4_ONLY:
			t.Errorf("%s: dns_lookup_family %v, want V4_ONLY", host, c.GetDnsLookupFamily())
		case !c.GetRespectDnsTtl(): //nolint:staticcheck // istiod sets it
			t.Errorf("%s: respect_dns_ttl false", host)
		case c.GetDnsRefreshRate().AsDuration() != 60*time.Second: //nolint:staticcheck // istiod sets it
			t.Errorf("%s: dns_refresh_rate %v, want 60s", host, c.GetDnsRefreshRate()) //nolint:staticcheck
		case c.GetDnsJitter().AsDuration() != 100*time.Millisecond:
			t.Errorf("%s: dns_jitter %v, want 100ms", host, c.GetDnsJitter())
		case c.GetTypedDnsResolverConfig().GetName() != "envoy.network.dns_resolver.cares":
			t.Errorf("%s: typed_dns_resolver_config %v, want c-ares", host, c.GetTypedDnsResolverConfig())
		}
	}
}

// maxConnectionDuration applies to TCP clusters too, as common HTTP protocol options (istiod
// sets them on any cluster), with the explicit HTTP/1 istiod completes them with.
func TestMaxConnectionDurationIsSetOnTCPClusters(t *testing.T) {
	by, _ := built(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: ns}
spec:
  hosts: [db.example.com]
  ports: [{number: 5432, name: pg, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: ns}
spec:
  host: db.example.com
  trafficPolicy: {connectionPool: {tcp: {maxConnectionDuration: 600s, idleTimeout: 30s}}}
`)
	o := protocolOptions(t, clusterOf(t, by, ClusterType, ClusterName(5432, "", "db.example.com")))
	if o.GetCommonHttpProtocolOptions().GetMaxConnectionDuration().AsDuration() != 600*time.Second {
		t.Errorf("max_connection_duration %v, want 600s", o.GetCommonHttpProtocolOptions().GetMaxConnectionDuration())
	}
	if o.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration() != 30*time.Second {
		t.Errorf("idle_timeout %v, want the TCP idle timeout, 30s", o.GetCommonHttpProtocolOptions().GetIdleTimeout())
	}
	if o.GetExplicitHttpConfig().GetHttpProtocolOptions() == nil {
		t.Errorf("upstream protocol %v, want explicit HTTP/1 as istiod completes it", o.GetUpstreamProtocolOptions())
	}
}

const tlsMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: ns}
spec:
  hosts: [api.example.com]
  subjectAltNames: [spiffe://example/ns/api/sa/api]
  ports:
  - {number: 443, name: https, protocol: HTTPS}
  - {number: 8443, name: grpc, protocol: GRPC}
  - {number: 9443, name: m, protocol: HTTPS}
  - {number: 9444, name: c, protocol: HTTPS}
  - {number: 9445, name: bad, protocol: HTTPS}
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: ns}
spec:
  host: api.example.com
  trafficPolicy:
    tls: {mode: SIMPLE}
    portLevelSettings:
    - port: {number: 8443}
      tls: {mode: ISTIO_MUTUAL}
    - port: {number: 9443}
      tls: {mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem, caCertificates: /ca.pem, sni: api.example.com, subjectAltNames: [api.example.com]}
    - port: {number: 9444}
      tls: {mode: MUTUAL, credentialName: api-cred, insecureSkipVerify: true}
    - port: {number: 9445}
      tls: {mode: MUTUAL}
`

// DestinationRule TLS origination builds istiod's upstream TLS context (constructUpstreamTLS
// and the ISTIO_MUTUAL case of buildUpstreamClusterTLSContext).
func TestTLSOriginationBuildsIstiodTransportSocket(t *testing.T) {
	by, faults := built(t, tlsMesh)
	host := "api.example.com"
	sa := "spiffe://example/ns/api/sa/api"

	// SIMPLE: the system CA by file SDS, the ServiceEntry's SANs, auto SNI and SAN validation.
	simple := clusterOf(t, by, ClusterType, ClusterName(443, "", host))
	ctx := upstreamTLS(t, simple)
	common := ctx.GetCommonTlsContext()
	vc := common.GetCombinedValidationContext()
	switch {
	case ctx.GetSni() != "":
		t.Errorf("SIMPLE: sni %q, want none (auto_sni)", ctx.GetSni())
	case common.GetTlsParams().GetTlsMinimumProtocolVersion() != tlspb.TlsParameters_TLSv1_2 || common.GetTlsParams().GetTlsMaximumProtocolVersion() != tlspb.TlsParameters_TLSv1_3:
		t.Errorf("SIMPLE: tls_params %v, want TLSv1_2..TLSv1_3", common.GetTlsParams())
	case len(common.GetTlsCertificateSdsSecretConfigs()) != 0:
		t.Errorf("SIMPLE: a client certificate %v", common.GetTlsCertificateSdsSecretConfigs())
	case vc.GetValidationContextSdsSecretConfig().GetName() != "file-root:system":
		t.Errorf("SIMPLE: CA %q, want file-root:system", vc.GetValidationContextSdsSecretConfig().GetName())
	case vc.GetValidationContextSdsSecretConfig().GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc":
		t.Errorf("SIMPLE: CA source %v, want the agent (sds-grpc)", vc.GetValidationContextSdsSecretConfig().GetSdsConfig())
	case len(vc.GetDefaultValidationContext().GetMatchSubjectAltNames()) != 1 || vc.GetDefaultValidationContext().GetMatchSubjectAltNames()[0].GetExact() != sa:
		t.Errorf("SIMPLE: SANs %v, want the ServiceEntry's %s", vc.GetDefaultValidationContext().GetMatchSubjectAltNames(), sa)
	case len(common.GetAlpnProtocols()) != 0:
		t.Errorf("SIMPLE on HTTPS: ALPN %v, want none", common.GetAlpnProtocols())
	}
	if up := protocolOptions(t, simple).GetUpstreamHttpProtocolOptions(); !up.GetAutoSni() || !up.GetAutoSanValidation() {
		t.Errorf("SIMPLE: upstream_http_protocol_options %v, want auto_sni and auto_san_validation", up)
	}

	// ISTIO_MUTUAL on the HTTP/2 port: the agent's default and ROOTCA, Istio's SNI and ALPN.
	im := upstreamTLS(t, clusterOf(t, by, ClusterType, ClusterName(8443, "", host)))
	imc := im.GetCommonTlsContext()
	switch {
	case im.GetSni() != "outbound_.8443_._.api.example.com":
		t.Errorf("ISTIO_MUTUAL: sni %q, want outbound_.8443_._.api.example.com", im.GetSni())
	case len(imc.GetTlsCertificateSdsSecretConfigs()) != 1 || imc.GetTlsCertificateSdsSecretConfigs()[0].GetName() != "default" ||
		imc.GetTlsCertificateSdsSecretConfigs()[0].GetSdsConfig().GetInitialFetchTimeout() == nil:
		t.Errorf("ISTIO_MUTUAL: certificate %v, want default (initial_fetch_timeout 0s)", imc.GetTlsCertificateSdsSecretConfigs())
	case imc.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "ROOTCA":
		t.Errorf("ISTIO_MUTUAL: CA %v, want ROOTCA", imc.GetCombinedValidationContext())
	case strings.Join(imc.GetAlpnProtocols(), ",") != "istio-peer-exchange,istio,h2":
		t.Errorf("ISTIO_MUTUAL on GRPC: ALPN %v, want istio-peer-exchange, istio, h2", imc.GetAlpnProtocols())
	case imc.GetCombinedValidationContext().GetDefaultValidationContext().GetMatchSubjectAltNames()[0].GetExact() != sa:
		t.Errorf("ISTIO_MUTUAL: SANs %v, want the ServiceEntry's", imc.GetCombinedValidationContext().GetDefaultValidationContext())
	}

	// MUTUAL by files, with sni and SANs: no auto SNI; the files by the agent.
	mc := clusterOf(t, by, ClusterType, ClusterName(9443, "", host))
	m := upstreamTLS(t, mc)
	switch {
	case m.GetSni() != "api.example.com":
		t.Errorf("MUTUAL: sni %q", m.GetSni())
	case m.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName() != "file-cert:/c.pem~/k.pem":
		t.Errorf("MUTUAL: certificate %v, want file-cert:/c.pem~/k.pem", m.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs())
	case m.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "file-root:/ca.pem":
		t.Errorf("MUTUAL: CA %v, want file-root:/ca.pem", m.GetCommonTlsContext().GetCombinedValidationContext())
	}
	if o := protocolOptions(t, mc); o != nil {
		t.Errorf("MUTUAL with sni: protocol options %v, want none", o)
	}

	// credentialName, insecureSkipVerify: for gateways (their overlay of the clusters),
	// kubernetes://NAME over ADS, no validation; a fault. Sidecars get no TLS.
	if ts := clusterOf(t, by, ClusterType, ClusterName(9444, "", host)).GetTransportSocket(); ts != nil {
		t.Errorf("credentialName: the sidecars' cluster has TLS %v, want none (istiod's, without workloadSelector)", ts)
	}
	cc := upstreamTLS(t, clusterOf(t, by, translate.GatewayCollection(ClusterType), ClusterName(9444, "", host))).GetCommonTlsContext()
	if s := cc.GetTlsCertificateSdsSecretConfigs(); len(s) != 1 || s[0].GetName() != "kubernetes://api-cred" || s[0].GetSdsConfig().GetAds() == nil {
		t.Errorf("credentialName: certificate %v, want kubernetes://api-cred over ADS", s)
	}
	if cc.GetValidationContextType() != nil {
		t.Errorf("insecureSkipVerify with a credential: validation %v, want none", cc.GetValidationContextType())
	}
	if !hasFault(faults, `tls.credentialName: "api-cred"`) {
		t.Errorf("no fault for the credential the bridge cannot serve: %v", faults)
	}
	// MUTUAL without certificates: plaintext, as istiod's, and a fault.
	if ts := clusterOf(t, by, ClusterType, ClusterName(9445, "", host)).GetTransportSocket(); ts != nil {
		t.Errorf("MUTUAL without certificates: transport socket %v, want none", ts)
	}
	if !hasFault(faults, "MUTUAL needs clientCertificate and privateKey") {
		t.Errorf("no fault for MUTUAL without certificates: %v", faults)
	}
}

// Proxyless gRPC clients get grpcgen's clusters: round robin (unset) by default, no connect
// timeout or thresholds, EDS over plain ADS, TLS only for ISTIO_MUTUAL, by certificate
// providers; the Envoy cluster of the same name keeps Envoy's form.
func TestProxylessClustersAreBuiltAsIstiodsGRPCGenerator(t *testing.T) {
	by, faults := built(t, tlsMesh+`---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: plain, namespace: ns}
spec:
  hosts: [plain.example.com]
  ports: [{number: 80, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.2}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: ns}
spec:
  host: plain.example.com
  trafficPolicy: {connectionPool: {http: {http2MaxRequests: 11}, tcp: {maxConnections: 3}}}
  subsets:
  - {name: r, labels: {}, trafficPolicy: {loadBalancer: {simple: RANDOM}}}
  - {name: l, labels: {}, trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}}
`)
	name := ClusterName(80, "", "plain.example.com")
	g := clusterOf(t, by, GRPCClusterType, name)
	want := &clusterpb.Cluster{
		Name: name, AltStatName: name + ";",
		ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_EDS},
		EdsClusterConfig: &clusterpb.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: &corepb.ConfigSource{
			ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}}},
		CircuitBreakers: &clusterpb.CircuitBreakers{Thresholds: []*clusterpb.CircuitBreakers_Thresholds{{MaxRequests: limit(11)}}},
	}
	if !proto.Equal(g, want) {
		t.Errorf("gRPC cluster:\n%v\nwant:\n%v", g, want)
	}
	if body := by[GRPCClusterType][name].Body(); body.GetTypeUrl() != ClusterType {
		t.Errorf("gRPC cluster body type %q, want %q", body.GetTypeUrl(), ClusterType)
	}
	if e := clusterOf(t, by, ClusterType, name); e.GetLbPolicy() != clusterpb.Cluster_LEAST_REQUEST || e.GetConnectTimeout() == nil {
		t.Errorf("Envoy cluster of the same name: %v; want Envoy's form", e)
	}
	if r := clusterOf(t, by, GRPCClusterType, ClusterName(80, "r", "plain.example.com")); r.GetLbPolicy() != clusterpb.Cluster_ROUND_ROBIN {
		t.Errorf("RANDOM for gRPC: %v, want round robin", r.GetLbPolicy())
	}
	if !hasFault(faults, "RANDOM is not a gRPC policy") {
		t.Errorf("no fault for RANDOM on proxyless clients: %v", faults)
	}
	if l := clusterOf(t, by, GRPCClusterType, ClusterName(80, "l", "plain.example.com")); l.GetLbPolicy() != clusterpb.Cluster_LEAST_REQUEST {
		t.Errorf("LEAST_REQUEST for gRPC: %v", l.GetLbPolicy())
	}
	// ISTIO_MUTUAL: certificate providers, the ServiceEntry's SANs; SIMPLE: none, reported.
	im := upstreamTLS(t, clusterOf(t, by, GRPCClusterType, ClusterName(8443, "", "api.example.com"))).GetCommonTlsContext()
	if im.GetTlsCertificateProviderInstance().GetInstanceName() != "default" || im.GetTlsCertificateProviderInstance().GetCertificateName() != "default" ||
		im.GetValidationContext().GetCaCertificateProviderInstance().GetCertificateName() != "ROOTCA" ||
		im.GetValidationContext().GetMatchSubjectAltNames()[0].GetExact() != "spiffe://example/ns/api/sa/api" ||
		len(im.GetTlsCertificateSdsSecretConfigs()) != 0 || im.GetTlsParams() != nil {
		t.Errorf("ISTIO_MUTUAL for gRPC: %v; want grpcgen's certificate providers only", im)
	}
	if ts := clusterOf(t, by, GRPCClusterType, ClusterName(443, "", "api.example.com")).GetTransportSocket(); ts != nil {
		t.Errorf("SIMPLE for gRPC: %v, want none (grpcgen sends ISTIO_MUTUAL only)", ts)
	}
	if !hasFault(faults, "is not sent to proxyless gRPC clients") {
		t.Errorf("no fault for SIMPLE on proxyless clients: %v", faults)
	}
}

func hcmOf(t *testing.T, r Resource, api bool) *hcmpb.HttpConnectionManager {
	t.Helper()
	l := &listenerpb.Listener{}
	mustUnmarshal(t, r, l)
	a := l.GetApiListener().GetApiListener()
	if !api {
		a = l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig()
	}
	m := &hcmpb.HttpConnectionManager{}
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Connection managers get istiod's defaults: WebSockets, no stream idle timeout, path
// normalization, XFCC and use_remote_address on gateways; the API listener grpcgen's bare one.
func TestConnectionManagersGetIstiodDefaults(t *testing.T) {
	by, _ := built(t, serviceEntryYAML("one", "one.test.svc.cluster.local", 8080, "10.0.0.1")+`---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: test}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*"]
`)
	sidecar := hcmOf(t, by[ListenerType][OutboundListenerName(8080)], false)
	var gw *hcmpb.HttpConnectionManager
	for name, r := range by[ListenerType] {
		if strings.HasPrefix(name, "gateway.") {
			gw = hcmOf(t, r, false)
		}
	}
	if gw == nil {
		t.Fatalf("no gateway listener among %v", by[ListenerType])
	}
	for class, m := range map[string]*hcmpb.HttpConnectionManager{"sidecar": sidecar, "gateway": gw} {
		switch {
		case len(m.GetUpgradeConfigs()) != 1 || m.GetUpgradeConfigs()[0].GetUpgradeType() != "websocket":
			t.Errorf("%s: upgrade_configs %v, want websocket", class, m.GetUpgradeConfigs())
		case m.GetStreamIdleTimeout() == nil || m.GetStreamIdleTimeout().AsDuration() != 0:
			t.Errorf("%s: stream_idle_timeout %v, want 0s", class, m.GetStreamIdleTimeout())
		case !m.GetNormalizePath().GetValue() || m.GetMergeSlashes():
			t.Errorf("%s: normalize_path %v, merge_slashes %v; want true, false", class, m.GetNormalizePath(), m.GetMergeSlashes())
		case m.GetPathWithEscapedSlashesAction() != hcmpb.HttpConnectionManager_KEEP_UNCHANGED:
			t.Errorf("%s: path_with_escaped_slashes_action %v", class, m.GetPathWithEscapedSlashesAction())
		case m.GetServerHeaderTransformation() != hcmpb.HttpConnectionManager_OVERWRITE || !m.GetProxy_100Continue():
			t.Errorf("%s: server_header_transformation %v, proxy_100_continue %v", class, m.GetServerHeaderTransformation(), m.GetProxy_100Continue())
		case m.GetRds().GetConfigSource().GetInitialFetchTimeout() == nil:
			t.Errorf("%s: RDS without initial_fetch_timeout 0s", class)
		case m.GetUseRemoteAddress() == nil || m.GetUseRemoteAddress().GetValue() != (class == "gateway"):
			t.Errorf("%s: use_remote_address %v", class, m.GetUseRemoteAddress())
		}
	}
	if sidecar.GetForwardClientCertDetails() != hcmpb.HttpConnectionManager_SANITIZE || sidecar.GetServerName() != "" {
		t.Errorf("sidecar: XFCC %v, server name %q; want Envoy's defaults", sidecar.GetForwardClientCertDetails(), sidecar.GetServerName())
	}
	xfcc := gw.GetSetCurrentClientCertDetails()
	if gw.GetForwardClientCertDetails() != hcmpb.HttpConnectionManager_SANITIZE_SET || !xfcc.GetSubject().GetValue() || !xfcc.GetCert() || !xfcc.GetDns() || !xfcc.GetUri() ||
		gw.GetServerName() != "istio-envoy" || gw.GetHttpProtocolOptions() == nil {
		t.Errorf("gateway: %v; want SANITIZE_SET with subject, cert, DNS and URI, server istio-envoy", gw)
	}
	api := hcmOf(t, by[ListenerType][APIListenerName("one.test.svc.cluster.local", 8080)], true)
	if api.GetUpgradeConfigs() != nil || api.GetStreamIdleTimeout() != nil || api.GetNormalizePath() != nil ||
		api.GetRds().GetConfigSource().GetInitialFetchTimeout() != nil || api.GetRds().GetConfigSource().GetAds() == nil {
		t.Errorf("API listener: %v; want grpcgen's: filters and RDS over ADS only", api)
	}
}
