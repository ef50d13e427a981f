package envoy

import (
	"strconv"
	"strings"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
)

// TLS origination (DestinationRule tls), built as istiod builds it (cluster_tls.go,
// buildUpstreamClusterTLSContext). The certificates are named for SDS as istiod names them;
// the bridge serves no secret, the proxy's agent (sds-grpc) serves the workload's own
// ("default", "ROOTCA") and files ("file-cert:CERT~KEY", "file-root:CA").

// ALPN istiod offers upstream (PILOT_ENABLE_METADATA_EXCHANGE on, its default).
var (
	alpnIstioMutual   = []string{"istio-peer-exchange", "istio"}
	alpnIstioMutualH2 = []string{"istio-peer-exchange", "istio", "h2"}
	alpnH2            = []string{"h2"}
)

// tlsTarget is what TLS origination reads of the cluster besides the settings.
type tlsTarget struct {
	host, subset string
	port         uint32
	// sans are the ServiceEntry's subjectAltNames, istiod's service accounts of a ServiceEntry
	// host (those of the WorkloadEntries it selects need the mesh's trust domain, which the
	// bridge does not know).
	sans []string
}

// applyTLS sets the cluster's transport socket from the policy's tls, and returns the upstream
// HTTP options with auto SNI and SAN validation where istiod sets them (SIMPLE and MUTUAL
// without sni or subjectAltNames). A setting the proxy cannot follow as written leaves the
// cluster in plaintext, as istiod's does, and is reported.
func (p *policy) applyTLS(c *clusterpb.Cluster, t tlsTarget, opts *upstreamhttp.HttpProtocolOptions, fs *faults) *upstreamhttp.HttpProtocolOptions {
	tls := p.tls
	if tls == nil || tls.GetMode() == networking.ClientTLSSettings_DISABLE {
		return opts
	}
	h2 := opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
	var ctx *tlspb.UpstreamTlsContext
	switch tls.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		ctx = istioMutualContext(tls, t, h2)
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		mutual := tls.GetMode() == networking.ClientTLSSettings_MUTUAL
		if mutual && tls.GetCredentialName() == "" && (tls.GetClientCertificate() == "" || tls.GetPrivateKey() == "") {
			p.fault(fs, "tls: MUTUAL needs clientCertificate and privateKey (or a credentialName); cluster %s connects in plaintext, as istiod's does", c.GetName())
			return opts
		}
		if tls.GetCredentialName() != "" {
			p.fault(fs, "tls.credentialName: %q is fetched over ADS as istiod names it (%s), but the bridge serves no secrets: a gateway proxy's cluster %s waits for it (sidecars get the cluster without TLS, as istiod gives it them for a rule without workloadSelector)",
				tls.GetCredentialName(), credentialResourceName(tls.GetCredentialName()), c.GetName())
		}
		ctx = simpleOrMutualContext(tls, t, mutual, h2)
		opts = autoSNI(tls, opts)
	}
	typed, err := pack(ctx)
	if err != nil {
		p.fault(fs, "tls: the upstream TLS context of cluster %s is invalid (%v); it connects in plaintext", c.GetName(), err)
		return opts
	}
	c.TransportSocket = &corepb.TransportSocket{Name: tlsTransportSocketName, ConfigType: &corepb.TransportSocket_TypedConfig{TypedConfig: typed}}
	return opts
}

func upstreamCommon() *tlspb.CommonTlsContext {
	return &tlspb.CommonTlsContext{TlsParams: &tlspb.TlsParameters{
		TlsMinimumProtocolVersion: tlspb.TlsParameters_TLSv1_2,
		TlsMaximumProtocolVersion: tlspb.TlsParameters_TLSv1_3,
	}}
}

// istioMutualContext is the workload's own certificate and the mesh root from the proxy's
// agent, the SNI istiod names (outbound_.PORT_.SUBSET_.HOST) unless set, the rule's
// subjectAltNames or else the ServiceEntry's, and Istio's ALPN.
func istioMutualContext(tls *networking.ClientTLSSettings, t tlsTarget, h2 bool) *tlspb.UpstreamTlsContext {
	sni := tls.GetSni()
	if sni == "" {
		sni = "outbound_." + strconv.FormatUint(uint64(t.port), 10) + "_." + t.subset + "_." + t.host
	}
	sans := tls.GetSubjectAltNames()
	if sans == nil {
		sans = t.sans
	}
	common := upstreamCommon()
	common.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{agentSecret("default")}
	common.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
		DefaultValidationContext:         &tlspb.CertificateValidationContext{MatchSubjectAltNames: exactMatchers(sans)},
		ValidationContextSdsSecretConfig: agentSecret("ROOTCA"),
	}}
	common.AlpnProtocols = alpnIstioMutual
	if h2 {
		common.AlpnProtocols = alpnIstioMutualH2
	}
	return &tlspb.UpstreamTlsContext{CommonTlsContext: common, Sni: sni}
}

// simpleOrMutualContext is istiod's constructUpstreamTLS: a credentialName's certificate and
// CA ("-cacert") over ADS, or files served by the agent (the CA defaulting to the system's,
// "file-root:system"); no validation with insecureSkipVerify; the rule's subjectAltNames, or
// else the ServiceEntry's; ALPN h2 on an HTTP/2 cluster.
func simpleOrMutualContext(tls *networking.ClientTLSSettings, t tlsTarget, mutual, h2 bool) *tlspb.UpstreamTlsContext {
	common := upstreamCommon()
	sans := tls.GetSubjectAltNames()
	if len(sans) == 0 {
		sans = t.sans
	}
	skip := tls.GetInsecureSkipVerify().GetValue()
	if name := tls.GetCredentialName(); name != "" {
		if mutual {
			common.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{credentialSecret(name)}
		}
		if !skip {
			common.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlspb.CertificateValidationContext{MatchSubjectAltNames: exactMatchers(sans)},
				ValidationContextSdsSecretConfig: credentialSecret(name + "-cacert"),
			}}
		}
	} else {
		if mutual {
			common.TlsCertificateSdsSecretConfigs = []*tlspb.SdsSecretConfig{
				agentSecret("file-cert:" + tls.GetClientCertificate() + "~" + tls.GetPrivateKey())}
		}
		ca := tls.GetCaCertificates()
		if ca == "" {
			ca = "system"
		}
		if skip {
			common.ValidationContextType = &tlspb.CommonTlsContext_ValidationContext{ValidationContext: &tlspb.CertificateValidationContext{}}
		} else {
			vc := &tlspb.CertificateValidationContext{MatchSubjectAltNames: exactMatchers(sans)}
			if crl := tls.GetCaCrl(); crl != "" {
				vc.Crl = &corepb.DataSource{Specifier: &corepb.DataSource_Filename{Filename: crl}}
			}
			common.ValidationContextType = &tlspb.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlspb.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: vc, ValidationContextSdsSecretConfig: agentSecret("file-root:" + ca),
			}}
		}
	}
	if h2 {
		common.AlpnProtocols = alpnH2
	}
	return &tlspb.UpstreamTlsContext{CommonTlsContext: common, Sni: tls.GetSni()}
}

// autoSNI is istiod's setAutoSniAndAutoSanValidation for a cluster that is not a dynamic
// forward proxy: auto_sni without an sni, and auto_san_validation too when the rule also
// names no subjectAltNames and verifies.
func autoSNI(tls *networking.ClientTLSSettings, opts *upstreamhttp.HttpProtocolOptions) *upstreamhttp.HttpProtocolOptions {
	if tls.GetSni() != "" {
		return opts
	}
	if opts == nil {
		opts = &upstreamhttp.HttpProtocolOptions{}
	}
	if opts.UpstreamHttpProtocolOptions == nil {
		opts.UpstreamHttpProtocolOptions = &corepb.UpstreamHttpProtocolOptions{}
	}
	opts.UpstreamHttpProtocolOptions.AutoSni = true
	if len(tls.GetSubjectAltNames()) == 0 && !tls.GetInsecureSkipVerify().GetValue() {
		opts.UpstreamHttpProtocolOptions.AutoSanValidation = true
	}
	return opts
}

func exactMatchers(ss []string) []*matcherpb.StringMatcher {
	if len(ss) == 0 {
		return nil
	}
	out := make([]*matcherpb.StringMatcher, len(ss))
	for i, s := range ss {
		out[i] = &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: s}}
	}
	return out
}

// agentSecret names a secret the proxy's own agent serves (cluster sds-grpc), as istiod's
// ConstructSdsSecretConfig does: "default" and "ROOTCA" wait for it without a timeout.
func agentSecret(name string) *tlspb.SdsSecretConfig {
	s := sdsSecret(name)
	if name == "default" || name == "ROOTCA" {
		s.SdsConfig.InitialFetchTimeout = durationpb.New(0)
	}
	return s
}

// credentialSecret names a credentialName's secret as istiod does
// (ConstructSdsSecretConfigForCredential): "kubernetes://NAME", fetched over ADS. The
// built-in "builtin://" credential is the workload's own certificate.
func credentialSecret(name string) *tlspb.SdsSecretConfig {
	switch name {
	case "builtin://":
		return agentSecret("default")
	case "builtin://-cacert":
		return agentSecret("ROOTCA")
	}
	return &tlspb.SdsSecretConfig{Name: credentialResourceName(name), SdsConfig: &corepb.ConfigSource{
		ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
		ResourceApiVersion:    corepb.ApiVersion_V3,
	}}
}

// credentialResourceName is istiod's credentials.ToResourceName: kubernetes://,
// kubernetes-gateway:// and configmap:// names as written, anything else a Kubernetes secret.
func credentialResourceName(name string) string {
	for _, scheme := range []string{"kubernetes://", "kubernetes-gateway://", "configmap://"} {
		if strings.HasPrefix(name, scheme) {
			return name
		}
	}
	return "kubernetes://" + name
}
