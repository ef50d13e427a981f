package kinds

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// validateWorkloadEntry mirrors Istio's ValidateWorkloadEntry: validateWorkloadEntry with no
// service ports to check against, an FQDN allowed as the address.
func validateWorkloadEntry(v *validator, we *networking.WorkloadEntry) {
	v.workloadEntryAt(&specRoot, we, nil, true)
}

// workloadEntryAt mirrors validateWorkloadEntry, for a WorkloadEntry (servicePorts nil) or a
// ServiceEntry's STATIC endpoint (its ports by name; an address must then be an IP or a Unix
// socket).
func (v *validator) workloadEntryAt(p *path, we *networking.WorkloadEntry, servicePorts map[string]bool, allowFQDNAddresses bool) {
	addr := we.GetAddress()
	ap := p.f("address")
	if addr == "" && we.GetNetwork() == "" {
		v.errorf(&ap, "address is required")
		return
	}
	unix := false
	if rest, ok := strings.CutPrefix(addr, unixAddressPrefix); ok {
		unix = true
		v.add(&ap, validateUnixAddress(rest))
		if len(we.GetPorts()) != 0 {
			pp := p.f("ports")
			v.errorf(&pp, "unix endpoint %s must not include ports", addr)
		}
	} else if addr != "" && !isValidIPAddress(addr) {
		if !allowFQDNAddresses {
			v.errorf(&ap, "endpoint address %q is not a valid IP address", addr)
		} else if validateFQDN(addr) != nil {
			v.errorf(&ap, "endpoint address %q is not a valid FQDN or an IP address", addr)
		}
	}
	ports := p.f("ports")
	for name, port := range we.GetPorts() {
		kp := ports.k(name)
		if servicePorts != nil && !servicePorts[name] {
			v.errorf(&kp, "endpoint port %v is not defined by the service entry", port)
		}
		v.add(&kp, validatePortName(name))
		v.add(&kp, validatePort(int(port)))
	}
	lp := p.f("labels")
	v.labelsAt(&lp, we.GetLabels())
	if unix && servicePorts != nil && len(servicePorts) != 1 {
		v.errorf(p, "exactly 1 service port required for unix endpoints")
	}
}

// validateWorkloadGroup mirrors Istio's ValidateWorkloadGroup. The template is not checked as
// a WorkloadEntry: its address and other fields are filled in when a workload registers.
func validateWorkloadGroup(v *validator, wg *networking.WorkloadGroup) {
	if wg.Template == nil {
		tp := specRoot.f("template")
		v.errorf(&tp, "template is required")
		return
	}
	if md := wg.Metadata; md != nil {
		mp := specRoot.f("metadata")
		lp := mp.f("labels")
		before := len(v.faults)
		v.labelsAt(&lp, md.Labels)
		for i := before; i < len(v.faults); i++ {
			v.faults[i].Message = "invalid labels: " + v.faults[i].Message
		}
		if len(v.faults) > before {
			return // Istio stops at invalid labels
		}
	}
	pp := specRoot.f("probe")
	v.readinessProbeAt(&pp, wg.Probe)
}

// readinessProbeAt mirrors validateReadinessProbe.
func (v *validator) readinessProbeAt(p *path, probe *networking.ReadinessProbe) {
	if probe == nil {
		return
	}
	for _, f := range [...]struct {
		name  string
		value int32
	}{
		{"periodSeconds", probe.PeriodSeconds},
		{"initialDelaySeconds", probe.InitialDelaySeconds},
		{"timeoutSeconds", probe.TimeoutSeconds},
		{"successThreshold", probe.SuccessThreshold},
		{"failureThreshold", probe.FailureThreshold},
	} {
		if f.value < 0 {
			fp := p.f(f.name)
			v.errorf(&fp, "%s must be non-negative", f.name)
		}
	}
	switch m := probe.HealthCheckMethod.(type) {
	case *networking.ReadinessProbe_HttpGet:
		hp := p.f("httpGet")
		h := m.HttpGet
		if h == nil {
			v.errorf(&hp, "httpGet may not be nil")
			return
		}
		portp := hp.f("port")
		v.add(&portp, validatePort(int(h.Port)))
		if h.Scheme != "" && h.Scheme != "HTTPS" && h.Scheme != "HTTP" {
			sp := hp.f("scheme")
			v.errorf(&sp, `httpGet.scheme must be one of %q, %q`, "HTTPS", "HTTP")
		}
		headers := hp.f("httpHeaders")
		for i, header := range h.HttpHeaders {
			ip := headers.i(i)
			if header == nil {
				v.errorf(&ip, "invalid nil header")
				continue
			}
			np := ip.f("name")
			v.add(&np, validateProbeHeaderName(header.Name))
		}
	case *networking.ReadinessProbe_TcpSocket:
		tp := p.f("tcpSocket")
		if m.TcpSocket == nil {
			v.errorf(&tp, "tcpSocket may not be nil")
			return
		}
		portp := tp.f("port")
		v.add(&portp, validatePort(int(m.TcpSocket.Port)))
	case *networking.ReadinessProbe_Exec:
		ep := p.f("exec")
		if m.Exec == nil {
			v.errorf(&ep, "exec may not be nil")
			return
		}
		if len(m.Exec.Command) == 0 {
			cp := ep.f("command")
			v.errorf(&cp, "exec.command is required")
		}
	default:
		v.errorf(p, "unknown health check method %T", m)
	}
}
