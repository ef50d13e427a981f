package envoy

import (
	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// Proxyless gRPC clients (node metadata GENERATOR=grpc, as Istio's gRPC bootstrap sets it)
// are served their clusters from a collection of their own, GRPCClusterType, under the same
// names: istiod's gRPC generator (grpcgen) builds them apart from Envoy's, with only what
// grpc-go reads. An Envoy cluster's defaults would not do: its LEAST_REQUEST policy (Istio's
// default) is refused by grpc-go before 1.62 and over xDS v2, and its TLS context names SDS
// secrets, which grpc-go refuses (it takes certificate providers only). Load assignments are
// the same for both; the API listeners (HOST:PORT) and the per-host route configurations
// (outbound|PORT||HOST) are read by proxyless clients alone (Envoy sidecars route by the
// port's route configuration).
//
// The controller builds these proxyless outputs only for the hosts a connected client asks
// for (SetProxylessHost, Controller.AcquireProxylessHost): a client that asks for an API
// listener HOST:PORT by name or a route configuration outbound|PORT||HOST, whatever its node
// says (a grpc-go client without Istio's bootstrap has no GENERATOR), and a GENERATOR=grpc
// node that asks for a cluster outbound|PORT|SUBSET|HOST (source/xds ProxylessHostsOf). istiod builds a proxyless client's
// configuration on demand too. With 1,000,000 services they would be two of every host's
// five outputs, 40% of the translation's encodings, for meshes of Envoys that never read
// them; and a client of a few services would make the translation build them for every host.
// SetProxyless builds them for every host (tools, tests, and clients the bridge cannot tell
// the hosts of: REST polls and file exports that ask for them).

// GRPCClusterType is the store collection of the proxyless gRPC clients' clusters. Its
// resources are Clusters (their bodies' type URL is ClusterType); source/xds serves it under
// ClusterType to a client whose node says GENERATOR=grpc.
const GRPCClusterType = translate.EnvoyGRPCClusterCollection

// SetProxylessHost starts (or stops) building a host's proxyless outputs from the next
// Translate: the host alone is built again.
func (t *Translator) SetProxylessHost(host string, on bool) {
	if setMember(t.proxylessHosts, host, on) && !t.proxyless {
		t.mark(unitKey{unitHost, host})
	}
}

// proxylessFor tells whether a host's proxyless outputs are built.
func (t *Translator) proxylessFor(host string) bool {
	if t.proxyless {
		return true
	}
	_, ok := t.proxylessHosts[host]
	return ok
}

// SetProxyless starts (or stops) building every host's proxyless outputs (their clusters, API
// listeners and per-host route configurations), from the next Translate: every host is built
// again. The controller sets it while a client it cannot tell the hosts of holds them
// (Controller.AcquireProxyless).
func (t *Translator) SetProxyless(on bool) {
	if t.proxyless == on {
		return
	}
	t.proxyless = on
	for h := range t.units.hostNames() {
		t.mark(unitKey{unitHost, h})
	}
}

// grpcADSSource is grpcgen's config source of EDS and RDS: ADS, nothing else.
var grpcADSSource = &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}}

// addGRPCCluster adds the proxyless form of an Envoy cluster (c), as grpcgen builds it
// (clusterBuilder.edsCluster, applyTrafficPolicy): the name, EDS over ADS, the load balancer
// only when the rule asks for one grpc-go has (ROUND_ROBIN, grpc-go's default, is left
// unset), a circuit breaker only for http2MaxRequests (gRFC A32: the one threshold grpc-go
// reads), and TLS only for ISTIO_MUTUAL, by certificate providers. A DNS cluster, which
// grpcgen would also send as EDS, keeps its type and inline endpoints (grpc-go resolves
// LOGICAL_DNS itself; the bridge has no load assignment for it).
func (b *hostBuild) addGRPCCluster(c *clusterpb.Cluster, pol policy) {
	g := &clusterpb.Cluster{Name: c.GetName(), AltStatName: c.GetAltStatName(), ClusterDiscoveryType: c.GetClusterDiscoveryType()}
	if c.GetType() == clusterpb.Cluster_EDS {
		g.EdsClusterConfig = &clusterpb.Cluster_EdsClusterConfig{ServiceName: c.GetName(), EdsConfig: grpcADSSource}
	} else {
		g.LoadAssignment = c.GetLoadAssignment()
	}
	lb := pol.lb
	switch {
	case lb.GetConsistentHash() != nil:
		applyConsistentHash(g, lb.GetConsistentHash())
	case lb.GetSimple() == networking.LoadBalancerSettings_LEAST_REQUEST:
		g.LbPolicy = clusterpb.Cluster_LEAST_REQUEST
	case lb.GetSimple() != networking.LoadBalancerSettings_ROUND_ROBIN && lb.GetSimple() != networking.LoadBalancerSettings_UNSPECIFIED:
		pol.fault(&b.fs, "loadBalancer.simple: %s is not a gRPC policy; proxyless gRPC clients balance round robin, as istiod's gRPC generator sends them", lb.GetSimple())
	}
	if n := pol.pool.GetHttp().GetHttp2MaxRequests(); n > 0 {
		g.CircuitBreakers = &clusterpb.CircuitBreakers{Thresholds: []*clusterpb.CircuitBreakers_Thresholds{{MaxRequests: wrapperspb.UInt32(uint32(n))}}}
	}
	switch mode := pol.tls.GetMode(); mode {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		typed, err := pack(&tlspb.UpstreamTlsContext{CommonTlsContext: grpcMutualTLS(b.se.sans())})
		if err != nil {
			b.invalid("Cluster", g.GetName(), err)
			return
		}
		g.TransportSocket = &corepb.TransportSocket{Name: tlsTransportSocketName, ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: typed}}
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		pol.fault(&b.fs, "tls: mode %s is not sent to proxyless gRPC clients (istiod's gRPC generator sends ISTIO_MUTUAL only); cluster %s is plaintext for them", mode, g.GetName())
	}
	if err := g.ValidateAll(); err != nil {
		b.invalid("Cluster", g.GetName(), err)
		return
	}
	// The body is a Cluster: encoded under ClusterType, kept in the gRPC collection.
	enc, err := store.EncodeMessage(g.GetName(), ClusterType, g)
	if err != nil {
		b.invalid("Cluster", g.GetName(), err)
		return
	}
	b.u.set(output{GRPCClusterType, enc})
}

// grpcMutualTLS is grpcgen's buildCommonTLSContext as far as Envoy's validation allows: the
// workload certificate of the client's "default" certificate provider (the current field and
// the deprecated one older clients read), and the root of the same provider with the
// service's identities as subject alt names. grpcgen puts the root in a
// combined_validation_context without an SDS config, which fails Envoy's validation (its
// validation_context_sds_secret_config is required); the plain validation_context carries the
// same provider and names, as grpc-go reads it.
func grpcMutualTLS(sans []string) *tlspb.CommonTlsContext {
	return &tlspb.CommonTlsContext{
		TlsCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "default", CertificateName: "default"},
		TlsCertificateCertificateProviderInstance: &tlspb.CommonTlsContext_CertificateProviderInstance{ //nolint:staticcheck // for older clients, as grpcgen
			InstanceName: "default", CertificateName: "default"},
		ValidationContextType: &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
			MatchSubjectAltNames:          exactMatchers(sans),
			CaCertificateProviderInstance: &tlspb.CertificateProviderPluginInstance{InstanceName: "default", CertificateName: "ROOTCA"},
		}},
	}
}
