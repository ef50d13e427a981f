package envoy

import (
	"errors"
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

// certificates are the SDS names of a terminating server's certificate and, for mutual TLS,
// of the CA its clients' certificates are verified against; as Istio's agent serves them.
type certificates struct {
	cert, ca string
	mutual   bool
}

// serverCertificates names a server's certificates as istiod does: credentialName is a
// Kubernetes secret the agent reads ("kubernetes://NAME", its CA "kubernetes://NAME-cacert");
// files are "file-cert:CERT~KEY" and "file-root:CA"; ISTIO_MUTUAL is the workload's own
// certificate, "default", and the mesh's root, "ROOTCA".
func serverCertificates(tls *networking.ServerTLSSettings) (certificates, error) {
	c := certificates{mutual: tls.GetMode() != networking.ServerTLSSettings_SIMPLE}
	switch {
	case tls.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL:
		return certificates{cert: "default", ca: "ROOTCA", mutual: true}, nil
	case tls.GetCredentialName() != "":
		c.cert = "kubernetes://" + tls.GetCredentialName()
		if c.mutual {
			c.ca = c.cert + "-cacert"
		}
	case tls.GetServerCertificate() != "" && tls.GetPrivateKey() != "":
		c.cert = "file-cert:" + tls.GetServerCertificate() + "~" + tls.GetPrivateKey()
		if c.mutual {
			if tls.GetCaCertificates() == "" {
				return c, errors.New("tls.caCertificates: MUTUAL needs the CA of the clients' certificates (or a credentialName)")
			}
			c.ca = "file-root:" + tls.GetCaCertificates()
		}
	default:
		return c, fmt.Errorf("tls: %s needs a credentialName, or serverCertificate and privateKey", tls.GetMode())
	}
	return c, nil
}

// downstreamTLS is the TLS context of a terminating server: its certificates by SDS, the
// protocol versions and ciphers it sets, and for mutual TLS the client certificates required.
func downstreamTLS(tls *networking.ServerTLSSettings, c certificates, alpn []string) *tlspb.DownstreamTlsContext {
	common := &tlspb.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlspb.SdsSecretConfig{sdsSecret(c.cert)},
		AlpnProtocols:                  alpn,
		TlsParams: &tlspb.TlsParameters{
			TlsMinimumProtocolVersion: tlsVersion(tls.GetMinProtocolVersion(), tlspb.TlsParameters_TLSv1_2),
			TlsMaximumProtocolVersion: tlsVersion(tls.GetMaxProtocolVersion(), tlspb.TlsParameters_TLS_AUTO),
			CipherSuites:              tls.GetCipherSuites(),
		},
	}
	if c.mutual {
		common.ValidationContextType = &tlspb.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: sdsSecret(c.ca)}
	}
	return &tlspb.DownstreamTlsContext{CommonTlsContext: common, RequireClientCertificate: wrapperspb.Bool(c.mutual)}
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
