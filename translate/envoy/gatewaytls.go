package envoy

import (
	"fmt"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxypb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Names Envoy knows the TLS pieces by.
const (
	tlsInspectorName       = "envoy.filters.listener.tls_inspector"
	tlsTransportSocketName = "envoy.transport_sockets.tls"
	tcpProxyFilterName     = "envoy.filters.network.tcp_proxy"
	// sdsClusterName is the cluster of a gateway proxy's own agent, which serves its
	// certificates by SDS (Istio's bootstrap defines it): the bridge serves no secret.
	sdsClusterName = "sds-grpc"
)

// checkServerTLS reports what keeps an HTTPS server from being translated, as Istio's Gateway
// validation would refuse it: SIMPLE, MUTUAL and OPTIONAL_MUTUAL need a credentialName (or
// credentialNames), serverCertificate and privateKey, or tlsCertificates; MUTUAL and
// OPTIONAL_MUTUAL with files need the clients' CA.
func checkServerTLS(tls *networking.ServerTLSSettings) error {
	mode := tls.GetMode()
	switch {
	case mode == networking.ServerTLSSettings_ISTIO_MUTUAL, tls.GetCredentialName() != "", len(tls.GetCredentialNames()) > 0:
		return nil
	case tls.GetServerCertificate() == "" || tls.GetPrivateKey() == "":
		if len(tls.GetTlsCertificates()) == 0 {
			return fmt.Errorf("tls: %s needs a credentialName, or serverCertificate and privateKey", mode)
		}
	}
	if mode != networking.ServerTLSSettings_SIMPLE && tls.GetCaCertificates() == "" {
		return fmt.Errorf("tls.caCertificates: %s needs the CA of the clients' certificates (or a credentialName)", mode)
	}
	return nil
}

// gatewayTLSContext is the TLS context of a terminating HTTPS server, as istiod's
// BuildListenerTLSContext builds it for a gateway:
//
//   - ALPN h2 and http/1.1; client certificates required for MUTUAL and ISTIO_MUTUAL (and
//     validated, not required, for OPTIONAL_MUTUAL).
//   - ISTIO_MUTUAL: the workload's certificate ("default") and the mesh root ("ROOTCA") from
//     the proxy's agent (sds-grpc), the clients' subjectAltNames, caCrl and
//     insecureSkipVerify in the default validation context.
//   - credentialName (or credentialNames): "kubernetes://NAME" over ADS from the proxy's
//     xDS server (ApplyCredentialSDSToServerCommonTLSContext); for MUTUAL and OPTIONAL_MUTUAL
//     the CA "NAME-cacert" (or caCertCredentialName) over ADS, with subjectAltNames,
//     verifyCertificateSpki, verifyCertificateHash and insecureSkipVerify; for SIMPLE,
//     subjectAltNames alone, when set.
//   - Files: "file-cert:CERT~KEY" (each of tlsCertificates, or serverCertificate and
//     privateKey) and, for MUTUAL and OPTIONAL_MUTUAL, "file-root:CA" from the proxy's agent,
//     with subjectAltNames, caCrl and insecureSkipVerify.
//   - SIMPLE, MUTUAL, OPTIONAL_MUTUAL: TLS parameters only for what the server sets (minimum
//     and maximum versions, cipher suites); Envoy's defaults otherwise, as istiod (no mesh
//     tlsDefaults: the bridge has no MeshConfig).
//
// The bridge serves no secrets: a credentialName's certificate waits for an ADS server of
// secrets (its Gateway reports it).
func gatewayTLSContext(tls *networking.ServerTLSSettings) *tlspb.DownstreamTlsContext {
	mode := tls.GetMode()
	common := &tlspb.CommonTlsContext{AlpnProtocols: gatewayALPN}
	validate := mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_ISTIO_MUTUAL ||
		mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	skip := tls.GetInsecureSkipVerify().GetValue()
	clientValidation := func(crl bool) *tlspb.CertificateValidationContext {
		vc := &tlspb.CertificateValidationContext{MatchSubjectAltNames: exactMatchers(tls.GetSubjectAltNames())}
		if crl && tls.GetCaCrl() != "" {
			vc.Crl = &corepb.DataSource{Specifier: &corepb.DataSource_Filename{Filename: tls.GetCaCrl()}}
		}
		if skip {
			vc.TrustChainVerification = tlspb.CertificateValidationContext_ACCEPT_UNTRUSTED
		}
		return vc
	}
	combined := func(vc *tlspb.CertificateValidationContext, ca *tlspb.SdsSecretConfig) *tlspb.CommonTlsContext_CombinedValidationContext {
		return &tlspb.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: vc, ValidationContextSdsSecretConfig: ca,
		}}
	}
	switch names := tls.GetCredentialNames(); {
	case mode == networking.ServerTLSSettings_ISTIO_MUTUAL:
		common.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{agentSecret("default")}
		common.ValidationContextType = combined(clientValidation(true), agentSecret("ROOTCA"))
	case len(names) > 0 || tls.GetCredentialName() != "":
		ca := tls.GetCredentialName() + "-cacert"
		if len(names) > 0 {
			for _, n := range names {
				common.TlsCertificateSdsSecretConfigs = append(common.TlsCertificateSdsSecretConfigs, credentialSecret(n))
			}
			ca = names[0] + "-cacert"
		} else {
			common.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{credentialSecret(tls.GetCredentialName())}
		}
		if n := tls.GetCaCertCredentialName(); n != "" {
			ca = n
		}
		if mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL {
			vc := clientValidation(false)
			vc.VerifyCertificateSpki = tls.GetVerifyCertificateSpki()
			vc.VerifyCertificateHash = tls.GetVerifyCertificateHash()
			common.ValidationContextType = combined(vc, credentialSecret(ca))
		} else if len(tls.GetSubjectAltNames()) > 0 {
			common.ValidationContextType = &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{
				MatchSubjectAltNames: exactMatchers(tls.GetSubjectAltNames())}}
		}
	default:
		if certs := tls.GetTlsCertificates(); len(certs) > 0 {
			for _, c := range certs {
				common.TlsCertificateSdsSecretConfigs = append(common.TlsCertificateSdsSecretConfigs, agentSecret(fileCert(c.GetServerCertificate(), c.GetPrivateKey())))
			}
		} else {
			common.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{agentSecret(fileCert(tls.GetServerCertificate(), tls.GetPrivateKey()))}
		}
		if validate {
			root := "ROOTCA"
			if ca := tls.GetCaCertificates(); ca != "" {
				root = "file-root:" + ca
			}
			common.ValidationContextType = combined(clientValidation(true), agentSecret(root))
		}
	}
	if mode != networking.ServerTLSSettings_ISTIO_MUTUAL {
		common.TlsParams = serverTLSParams(tls)
	}
	require := mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_ISTIO_MUTUAL
	return &tlspb.DownstreamTlsContext{CommonTlsContext: common, RequireClientCertificate: wrapperspb.Bool(require)}
}

// reportCredentialSecrets reports a terminating server's credentialName secrets: the gateway
// proxy fetches them over ADS, as istiod serves them, and the bridge serves none.
func reportCredentialSecrets(fs *faults, key string, i int, tls *networking.ServerTLSSettings) {
	names := tls.GetCredentialNames()
	if len(names) == 0 && tls.GetCredentialName() != "" {
		names = []string{tls.GetCredentialName()}
	}
	for _, n := range names {
		if n == "builtin://" {
			continue // the workload's own certificate, from the proxy's agent
		}
		fs.add(kindGateway, key, "servers[%d].tls: credential %q is fetched over ADS as istiod names it (%s), but the bridge serves no secrets: the gateway proxy's filter chain has no certificate until a server of secrets answers",
			i, n, credentialResourceName(n))
	}
}

// gatewayALPN is istiod's ALPN of an HTTPS server (util.ALPNHttp). Shared, only read.
var gatewayALPN = []string{"h2", "http/1.1"}

// fileCert is the agent's name of a certificate and key read from files
// (SdsCertificateConfig.GetResourceName), or its own certificate, "default", without both.
func fileCert(cert, key string) string {
	if cert == "" || key == "" {
		return "default"
	}
	return "file-cert:" + cert + "~" + key
}

// serverTLSParams is istiod's applyServerTLSSettings: only what the server sets; nil for none.
func serverTLSParams(tls *networking.ServerTLSSettings) *tlspb.TlsParameters {
	p := &tlspb.TlsParameters{
		TlsMinimumProtocolVersion: tlsVersion(tls.GetMinProtocolVersion(), tlspb.TlsParameters_TLS_AUTO),
		TlsMaximumProtocolVersion: tlsVersion(tls.GetMaxProtocolVersion(), tlspb.TlsParameters_TLS_AUTO),
		CipherSuites:              tls.GetCipherSuites(),
	}
	if p.TlsMinimumProtocolVersion == tlspb.TlsParameters_TLS_AUTO && p.TlsMaximumProtocolVersion == tlspb.TlsParameters_TLS_AUTO && len(p.CipherSuites) == 0 {
		return nil
	}
	return p
}

func tlsVersion(v networking.ServerTLSSettings_TLSProtocol, unset tlspb.TlsParameters_TlsProtocol) tlspb.TlsParameters_TlsProtocol {
	switch v {
	case networking.ServerTLSSettings_TLSV1_0:
		return tlspb.TlsParameters_TLSv1_0
	case networking.ServerTLSSettings_TLSV1_1:
		return tlspb.TlsParameters_TLSv1_1
	case networking.ServerTLSSettings_TLSV1_2:
		return tlspb.TlsParameters_TLSv1_2
	case networking.ServerTLSSettings_TLSV1_3:
		return tlspb.TlsParameters_TLSv1_3
	}
	return unset
}

// sdsSecret names a secret the proxy gets from its agent's SDS server.
func sdsSecret(name string) *tlspb.SdsSecretConfig {
	return &tlspb.SdsSecretConfig{Name: name, SdsConfig: &corepb.ConfigSource{
		ResourceApiVersion: corepb.ApiVersion_V3,
		ConfigSourceSpecifier: &corepb.ConfigSource_ApiConfigSource{ApiConfigSource: &corepb.ApiConfigSource{
			ApiType: corepb.ApiConfigSource_GRPC, TransportApiVersion: corepb.ApiVersion_V3, SetNodeOnFirstMessageOnly: true,
			GrpcServices: []*corepb.GrpcService{{TargetSpecifier: &corepb.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corepb.GrpcService_EnvoyGrpc{ClusterName: sdsClusterName},
			}}},
		}},
	}}
}

// tcpProxyChain is the filter chain of a passthrough route: its SNI hosts to a TCP proxy to
// the route's destinations (weighted when several), the TLS left unopened.
func (rc *routeContext) tcpProxyChain(vs *virtualService, pr passthroughRoute, hosts []string) *listenerpb.FilterChain {
	var ds []resolved
	for i, rd := range pr.route.GetRoute() {
		field := fmt.Sprintf("%s.route[%d].destination", pr.field, i)
		d, ok := rc.destination(vs, field, rd.GetDestination())
		if !ok {
			continue
		}
		d.weight = uint32(max(rd.GetWeight(), 0))
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		rc.fs.add(kindVirtualService, vs.Key, "%s: no destination is left; the route is left out", pr.field)
		return nil
	}
	proxy := &tcpproxypb.TcpProxy{StatPrefix: ds[0].cluster}
	if len(ds) == 1 {
		proxy.ClusterSpecifier = &tcpproxypb.TcpProxy_Cluster{Cluster: ds[0].cluster}
	} else {
		wc := &tcpproxypb.TcpProxy_WeightedCluster{}
		for _, d := range ds {
			wc.Clusters = append(wc.Clusters, &tcpproxypb.TcpProxy_WeightedCluster_ClusterWeight{Name: d.cluster, Weight: max(d.weight, 1)})
		}
		proxy.StatPrefix = "weighted"
		proxy.ClusterSpecifier = &tcpproxypb.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	typed, err := pack(proxy)
	if err != nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s: the TCP proxy is invalid (%v); the route is left out", pr.field, err)
		return nil
	}
	return &listenerpb.FilterChain{
		FilterChainMatch: &listenerpb.FilterChainMatch{ServerNames: hosts},
		Filters:          []*listenerpb.Filter{{Name: tcpProxyFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: typed}}},
	}
}
