package kinds

import (
	"errors"
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// validateGateway mirrors Istio's ValidateGateway. The gateway's own name must be a DNS label,
// unless istiod converted it from the Gateway API.
func validateGateway(v *validator, gw *networking.Gateway) {
	gatewaySemantics := v.annotations[annotationGatewaySemantics] == "gateway"
	if !isDNS1123Label(v.name) && !gatewaySemantics {
		np := metadataRoot.f("name")
		v.errorf(&np, "invalid gateway name: %q", v.name)
	}
	servers := specRoot.f("servers")
	if len(gw.Servers) == 0 {
		v.errorf(&servers, "gateway must have at least one server")
	}
	portNames := make(map[string]bool, len(gw.Servers))
	for i, s := range gw.Servers {
		sp := servers.i(i)
		if s == nil {
			v.errorf(&sp, "server may not be nil")
			continue
		}
		v.serverAt(&sp, s, gatewaySemantics)
		if s.Port != nil {
			pp := sp.f("port")
			np := pp.f("name")
			if portNames[s.Port.Name] {
				v.errorf(&np, "port names in servers must be unique: duplicate name %s", s.Port.Name)
			}
			portNames[s.Port.Name] = true
		}
	}
}

// serverAt mirrors validateServer.
func (v *validator) serverAt(p *path, s *networking.Server, gatewaySemantics bool) {
	hosts := p.f("hosts")
	if len(s.Hosts) == 0 {
		v.errorf(&hosts, "server config must contain at least one host")
	}
	for i, h := range s.Hosts {
		hp := hosts.i(i)
		v.namespaceSlashWildcardHostnameAt(&hp, h, true, gatewaySemantics)
	}
	pp := p.f("port")
	portOK := v.serverPortAt(&pp, s.Port, s.Bind)
	bp := p.f("bind")
	if rest, ok := strings.CutPrefix(s.Bind, unixAddressPrefix); ok {
		v.add(&bp, validateUnixAddress(rest))
		if s.Port != nil && s.Port.Number != 0 {
			v.errorf(&bp, "port number must be 0 for unix domain socket: %v", s.Port)
		}
	} else if s.Bind != "" {
		v.add(&bp, validateIPAddress(s.Bind))
	}
	tp := p.f("tls")
	v.serverTLSAt(&tp, s.Tls)
	if !portOK {
		return
	}
	proto := parseProtocol(s.Port.Protocol)
	switch {
	case proto.isTLS() && s.Tls == nil:
		v.errorf(&tp, "server must have TLS settings for HTTPS/TLS protocols")
	case !proto.isTLS() && s.Tls != nil && proto.isHTTP():
		// Plain HTTP takes TLS settings only to redirect to HTTPS, without certificates.
		passThrough := s.Tls.Mode == networking.ServerTLSSettings_PASSTHROUGH || s.Tls.Mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH
		if !passThrough || s.Tls.CaCertificates != "" || s.Tls.PrivateKey != "" || s.Tls.ServerCertificate != "" {
			v.errorf(&tp, "server cannot have TLS settings for plain text HTTP ports")
		}
	case !proto.isTLS() && s.Tls != nil:
		v.errorf(&tp, "server cannot have TLS settings for non HTTPS/TLS ports")
	}
}

// serverPortAt mirrors validateServerPort; it reports whether the port is valid.
func (v *validator) serverPortAt(p *path, port *networking.Port, bind string) bool {
	if port == nil {
		v.errorf(p, "port is required")
		return false
	}
	before := len(v.faults)
	if parseProtocol(port.Protocol) == protoUnsupported {
		pp := p.f("protocol")
		v.errorf(&pp, "invalid protocol %q, supported protocols are HTTP, HTTP2, GRPC, GRPC-WEB, MONGO, REDIS, MYSQL, TCP", port.Protocol)
	}
	if port.Number > 0 || !strings.HasPrefix(bind, unixAddressPrefix) {
		np := p.f("number")
		v.add(&np, validatePort(int(port.Number)))
	}
	if port.TargetPort > 0 { //nolint:staticcheck // deprecated, refused here by Istio
		tp := p.f("targetPort")
		v.errorf(&tp, "targetPort has no impact on Gateways")
	}
	if port.Name == "" {
		np := p.f("name")
		v.errorf(&np, "port name must be set: %v", port)
	}
	return len(v.faults) == before
}

// namespaceSlashWildcardHostnameAt mirrors agent.ValidateNamespaceSlashWildcardHostname: a
// Gateway's or a Sidecar's host, namespace/dnsName (a Gateway may also give the dnsName alone).
func (v *validator) namespaceSlashWildcardHostnameAt(p *path, hostname string, isGateway, gatewaySemantics bool) {
	ns, name, ok := strings.Cut(hostname, "/")
	if !ok {
		if isGateway {
			v.sidecarOrGatewayHostnamePartAt(p, hostname, true)
			return
		}
		v.errorf(p, "host must be of form namespace/dnsName")
		return
	}
	if ns == "" || name == "" {
		v.errorf(p, "config namespace and dnsName in host entry cannot be empty")
	}
	if !isGateway {
		// A Sidecar's namespace may be *, ., or a DNS label, each perhaps after a ~ that excludes it.
		if n := strings.TrimPrefix(ns, "~"); n != "" && n != "*" && n != "." && !isDNS1123Label(n) {
			v.errorf(p, "invalid namespace value %q in sidecar", ns)
		}
	} else if ns != "*" && ns != "." && (ns != "~" || !gatewaySemantics) && !isDNS1123Label(ns) {
		v.errorf(p, "invalid namespace value %q in gateway", ns)
	}
	v.sidecarOrGatewayHostnamePartAt(p, name, isGateway)
}

// sidecarOrGatewayHostnamePartAt mirrors validateSidecarOrGatewayHostnamePart.
func (v *validator) sidecarOrGatewayHostnamePartAt(p *path, hostname string, isGateway bool) {
	if hostname != "*" && !strings.Contains(hostname, ".") {
		v.errorf(p, "short names (non FQDN) are not allowed")
	}
	if err := validateWildcardDomain(hostname); err != nil {
		if !isGateway {
			v.add(p, err)
		}
		if !isValidIPAddress(hostname) { // a Gateway's host may be an IP address
			v.add(p, err)
		}
	}
	v.add(p, validatePartialWildCard(hostname))
}

// serverTLSAt mirrors validateTLSOptions; its warnings (cipher suites, certificates that
// PASSTHROUGH ignores) are not faults.
func (v *validator) serverTLSAt(p *path, tls *networking.ServerTLSSettings) {
	if tls == nil {
		return
	}
	if tls.Mode == networking.ServerTLSSettings_ISTIO_MUTUAL {
		// ISTIO_MUTUAL takes its certificates from Istio, none of the settings.
		for _, f := range [...]struct {
			set        bool
			field, msg string
		}{
			{tls.ServerCertificate != "", "serverCertificate", "ISTIO_MUTUAL TLS cannot have associated server certificate"},
			{tls.PrivateKey != "", "privateKey", "ISTIO_MUTUAL TLS cannot have associated private key"},
			{tls.CaCertificates != "", "caCertificates", "ISTIO_MUTUAL TLS cannot have associated CA bundle"},
			{len(tls.TlsCertificates) > 0, "tlsCertificates", "ISTIO_MUTUAL TLS cannot have associated tlsCertificates"},
			{tls.CredentialName != "", "credentialName", "ISTIO_MUTUAL TLS cannot have associated credentialName"},
			{len(tls.CredentialNames) > 0, "credentialNames", "ISTIO_MUTUAL TLS cannot have associated credentialNames"},
		} {
			if f.set {
				fp := p.f(f.field)
				v.add(&fp, errors.New(f.msg))
			}
		}
		return
	}
	sources := 0
	if tls.ServerCertificate != "" && tls.PrivateKey != "" {
		sources++
	}
	if tls.CredentialName != "" {
		sources++
	}
	if len(tls.CredentialNames) > 0 {
		sources++
	}
	if len(tls.TlsCertificates) > 0 {
		sources++
	}
	if sources > 1 {
		v.errorf(p, "only one of credential_name, credential_names, server_certificate/private_key, tls_certificates should be specified")
	}
	terminates := tls.Mode == networking.ServerTLSSettings_SIMPLE || tls.Mode == networking.ServerTLSSettings_MUTUAL ||
		tls.Mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	if terminates && (tls.CredentialName != "" || len(tls.CredentialNames) > 0) {
		return // the credentials are fetched by name: no certificate files needed
	}
	if terminates {
		prefix := "SIMPLE TLS"
		if tls.Mode != networking.ServerTLSSettings_SIMPLE {
			prefix = "MUTUAL TLS"
			if tls.CaCertificates == "" {
				cp := p.f("caCertificates")
				v.errorf(&cp, "%s requires a client CA bundle", prefix)
			}
		}
		certs := tls.TlsCertificates
		if len(certs) == 0 {
			certs = []*networking.ServerTLSSettings_TLSCertificate{{ServerCertificate: tls.ServerCertificate, PrivateKey: tls.PrivateKey}}
		}
		for _, c := range certs {
			if c.GetServerCertificate() == "" {
				sp := p.f("serverCertificate")
				v.errorf(&sp, "%s requires a server certificate", prefix)
			}
			if c.GetPrivateKey() == "" {
				kp := p.f("privateKey")
				v.errorf(&kp, "%s requires a private key", prefix)
			}
		}
	}
	if tls.CaCrl != "" {
		cp := p.f("caCrl")
		if tls.CredentialName != "" {
			v.add(&cp, fmt.Errorf("CRL is not supported with credentialName. CRL has to be specified in the credential"))
		}
		if tls.Mode == networking.ServerTLSSettings_SIMPLE {
			v.add(&cp, fmt.Errorf("CRL is not supported with SIMPLE TLS"))
		}
	}
}
