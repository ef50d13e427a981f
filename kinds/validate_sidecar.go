package kinds

import (
	"errors"
	"net"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// validateSidecar mirrors Istio's ValidateSidecar. Its warnings (a selector without labels,
// duplicated egress hosts, HTTP pool settings on a TCP port) are not faults.
func validateSidecar(v *validator, sc *networking.Sidecar) {
	spec := &specRoot
	if sc.WorkloadSelector != nil {
		sp := spec.f("workloadSelector")
		lp := sp.f("labels")
		before := len(v.faults)
		v.alphaWorkloadSelectorAt(&lp, sc.WorkloadSelector.GetLabels())
		if len(v.faults) > before {
			return // Istio stops at a bad selector
		}
	}
	if len(sc.Egress) == 0 && len(sc.Ingress) == 0 && sc.OutboundTrafficPolicy == nil && sc.InboundConnectionPool == nil {
		v.errorf(spec, "sidecar: empty configuration provided")
		return
	}

	ingress := spec.f("ingress")
	ports := map[uint32]bool{}
	for i, in := range sc.Ingress {
		ip := ingress.i(i)
		if in == nil {
			v.errorf(&ip, "sidecar: ingress may not be null")
			continue
		}
		pp := ip.f("port")
		if in.Port == nil {
			v.errorf(&pp, "sidecar: port is required for ingress listeners")
			continue
		}
		if in.Port.TargetPort > 0 { //nolint:staticcheck // deprecated, refused here by Istio
			tp := pp.f("targetPort")
			v.errorf(&tp, "targetPort has no impact on Sidecars")
		}
		v.sidecarPortAt(&pp, in.Port)
		if in.Bind != "" {
			bp := ip.f("bind")
			v.add(&bp, validateIPAddress(in.Bind))
		}
		if ports[in.Port.Number] {
			np := pp.f("number")
			v.errorf(&np, "sidecar: ports on IP bound listeners must be unique")
		}
		ports[in.Port.Number] = true
		if in.DefaultEndpoint != "" {
			dp := ip.f("defaultEndpoint")
			v.defaultEndpointAt(&dp, in.DefaultEndpoint)
		}
		if t := in.Tls; t != nil {
			tp := ip.f("tls")
			for _, f := range [...]struct {
				set bool
				msg string
			}{
				{len(t.SubjectAltNames) > 0, "sidecar: subjectAltNames is not supported in ingress tls"},
				{t.HttpsRedirect, "sidecar: httpsRedirect is not supported"},
				{t.CredentialName != "", "sidecar: credentialName is not currently supported"},
				{len(t.CredentialNames) > 0, "sidecar: credentialNames is not currently supported"},
				{len(t.TlsCertificates) > 0, "sidecar: tls_certificates is not currently supported"},
			} {
				if f.set {
					v.add(&tp, errors.New(f.msg))
				}
			}
			if t.Mode == networking.ServerTLSSettings_ISTIO_MUTUAL || t.Mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
				mp := tp.f("mode")
				v.errorf(&mp, "configuration is invalid: cannot set mode to %s in sidecar ingress tls", t.Mode)
			}
			if !parseProtocol(in.Port.Protocol).isTLS() {
				v.errorf(&tp, "server cannot have TLS settings for non HTTPS/TLS ports")
			}
			v.serverTLSAt(&tp, t)
		}
		cp := ip.f("connectionPool")
		v.connectionPoolAt(&cp, in.ConnectionPool)
	}
	icp := spec.f("inboundConnectionPool")
	v.connectionPoolAt(&icp, sc.InboundConnectionPool)

	egress := spec.f("egress")
	ports = map[uint32]bool{}
	unixSockets := map[string]bool{}
	catchAll := false
	for i, eg := range sc.Egress {
		ep := egress.i(i)
		if eg == nil {
			v.errorf(&ep, "egress listener may not be null")
			continue
		}
		pp := ep.f("port")
		if eg.Port == nil {
			// One egress listener may have no port: it catches the rest, and comes last.
			if catchAll {
				v.errorf(&ep, "sidecar: egress can have only one listener with empty port")
				continue
			}
			if i == len(sc.Egress)-1 {
				catchAll = true
			} else {
				v.errorf(&ep, "sidecar: the egress listener with empty port should be the last listener in the list")
			}
		} else {
			if eg.Port.TargetPort > 0 { //nolint:staticcheck // deprecated, refused here by Istio
				tp := pp.f("targetPort")
				v.errorf(&tp, "targetPort has no impact on Sidecars")
			}
			v.sidecarEgressPortAt(&ep, eg)
			if eg.Port.Number == 0 {
				if unixSockets[eg.Bind] {
					bp := ep.f("bind")
					v.errorf(&bp, "sidecar: unix domain socket values for listeners must be unique")
				}
				unixSockets[eg.Bind] = true
			} else {
				if ports[eg.Port.Number] {
					np := pp.f("number")
					v.errorf(&np, "sidecar: ports on IP bound listeners must be unique")
				}
				ports[eg.Port.Number] = true
			}
		}
		hosts := ep.f("hosts")
		if len(eg.Hosts) == 0 {
			v.errorf(&hosts, "sidecar: egress listener must contain at least one host")
		}
		for j, h := range eg.Hosts {
			hp := hosts.i(j)
			v.namespaceSlashWildcardHostnameAt(&hp, h, false, false)
		}
	}

	if tp := sc.OutboundTrafficPolicy; tp != nil {
		op := spec.f("outboundTrafficPolicy")
		v.sidecarOutboundTrafficPolicyAt(&op, tp)
	}
}

// sidecarPortAt checks a listener's port as validateSidecarIngressPortAndBind does (its name
// optional, its protocol known, its number in range).
func (v *validator) sidecarPortAt(p *path, port *networking.SidecarPort) {
	if port.Name != "" {
		np := p.f("name")
		v.add(&np, validatePortName(port.Name))
	}
	prp := p.f("protocol")
	v.add(&prp, validateProtocol(port.Protocol))
	np := p.f("number")
	v.add(&np, validatePort(int(port.Number)))
}

// sidecarEgressPortAt mirrors validateSidecarEgressPortBindAndCaptureMode: port 0 is a Unix
// domain socket listener, bound to unix://PATH.
func (v *validator) sidecarEgressPortAt(p *path, eg *networking.IstioEgressListener) {
	port := eg.Port
	pp := p.f("port")
	bp := p.f("bind")
	if port.Number != 0 {
		v.sidecarPortAt(&pp, port)
		if eg.Bind != "" {
			v.add(&bp, validateIPAddress(eg.Bind))
		}
		return
	}
	if port.Name != "" {
		np := pp.f("name")
		v.add(&np, validatePortName(port.Name))
	}
	prp := pp.f("protocol")
	v.add(&prp, validateProtocol(port.Protocol))
	if rest, ok := strings.CutPrefix(eg.Bind, unixAddressPrefix); ok {
		v.add(&bp, validateUnixAddress(rest))
	} else {
		v.errorf(&bp, "sidecar: ports with 0 value must have a unix domain socket bind address")
	}
	if eg.CaptureMode != networking.CaptureMode_DEFAULT && eg.CaptureMode != networking.CaptureMode_NONE {
		cp := p.f("captureMode")
		v.errorf(&cp, "sidecar: captureMode must be DEFAULT/NONE for unix domain socket listeners")
	}
}

// defaultEndpointAt checks an ingress listener's defaultEndpoint as ValidateSidecar does:
// unix://PATH, or a loopback or unspecified address and a port.
func (v *validator) defaultEndpointAt(p *path, endpoint string) {
	if rest, ok := strings.CutPrefix(endpoint, unixAddressPrefix); ok {
		v.add(p, validateUnixAddress(rest))
		return
	}
	host, port, err := net.SplitHostPort(endpoint)
	v.add(p, err)
	if host != "" && host != "127.0.0.1" && host != "0.0.0.0" && host != "::1" && host != "::" {
		v.errorf(p, "sidecar: defaultEndpoint must be of form 127.0.0.1:<port>,0.0.0.0:<port>,[::1]:port,[::]:port,unix://filepath or unset")
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		v.errorf(p, "sidecar: defaultEndpoint port (%s) is not a number: %v", port, err)
	} else {
		v.add(p, validatePort(n))
	}
}

// sidecarOutboundTrafficPolicyAt mirrors validateSidecarOutboundTrafficPolicy.
func (v *validator) sidecarOutboundTrafficPolicyAt(p *path, tp *networking.OutboundTrafficPolicy) {
	mode := tp.GetMode()
	// ALLOW_ANY_DYNAMIC_DNS (3 in MeshConfig's enum) is for the mesh only.
	if int32(mode) == 3 {
		mp := p.f("mode")
		v.errorf(&mp, "sidecar: ALLOW_ANY_DYNAMIC_DNS mode is only supported in MeshConfig, not in Sidecar resource")
		return
	}
	if tp.EgressProxy == nil {
		return
	}
	ep := p.f("egressProxy")
	if mode != networking.OutboundTrafficPolicy_ALLOW_ANY {
		v.errorf(&ep, "sidecar: egress_proxy must be set only with ALLOW_ANY outbound_traffic_policy mode")
		return
	}
	hp := ep.f("host")
	v.add(&hp, validateFQDN(tp.EgressProxy.GetHost()))
	if tp.EgressProxy.Port == nil {
		pp := ep.f("port")
		v.errorf(&pp, "sidecar: egress_proxy port must be non-nil")
		return
	}
	v.destinationAt(&ep, tp.EgressProxy)
}
