package kinds

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// validateServiceEntry mirrors Istio's ValidateServiceEntry. Its warnings (a selector without
// labels, partial wildcards, TCP ports without addresses) are not faults.
func validateServiceEntry(v *validator, se *networking.ServiceEntry) {
	spec := &specRoot
	if se.WorkloadSelector != nil {
		sp := spec.f("workloadSelector")
		lp := sp.f("labels")
		v.alphaWorkloadSelectorAt(&lp, se.WorkloadSelector.GetLabels())
		if se.Endpoints != nil {
			v.errorf(&sp, "only one of WorkloadSelector or Endpoints is allowed in Service Entry")
		}
	}

	hosts := spec.f("hosts")
	if len(se.Hosts) == 0 {
		v.errorf(&hosts, "service entry must have at least one host")
	}
	for i, h := range se.Hosts {
		hp := hosts.i(i)
		if h == "*" {
			v.errorf(&hp, "invalid host %s", h)
		} else {
			v.add(&hp, validateWildcardDomain(h))
		}
	}

	addresses := spec.f("addresses")
	cidrFound := false
	for i, a := range se.Addresses {
		cidrFound = cidrFound || strings.Contains(a, "/")
		ap := addresses.i(i)
		v.add(&ap, validateIPSubnet(a))
	}
	if cidrFound && se.Resolution != networking.ServiceEntry_NONE && se.Resolution != networking.ServiceEntry_STATIC {
		v.errorf(&addresses, "CIDR addresses are allowed only for NONE/STATIC resolution types")
	}

	ports := spec.f("ports")
	portNames := make(map[string]bool, len(se.Ports))
	portNumbers := make(map[uint32]bool, len(se.Ports))
	for i, port := range se.Ports {
		pp := ports.i(i)
		if port == nil {
			v.errorf(&pp, "service entry port may not be null")
			continue
		}
		np, nump := pp.f("name"), pp.f("number")
		if portNames[port.Name] {
			v.errorf(&np, "service entry port name %q already defined", port.Name)
		}
		portNames[port.Name] = true
		if portNumbers[port.Number] {
			v.errorf(&nump, "service entry port %d already defined", port.Number)
		}
		portNumbers[port.Number] = true
		if port.TargetPort != 0 {
			tp := pp.f("targetPort")
			v.add(&tp, validatePort(int(port.TargetPort)))
		}
		v.add(&np, validatePortName(port.Name))
		prp := pp.f("protocol")
		v.add(&prp, validateProtocol(port.Protocol))
		v.add(&nump, validatePort(int(port.Number)))
	}

	resolution := spec.f("resolution")
	endpoints := spec.f("endpoints")
	switch se.Resolution {
	case networking.ServiceEntry_NONE:
		if len(se.Endpoints) != 0 {
			v.errorf(&endpoints, "no endpoints should be provided for resolution type none")
		}
	case networking.ServiceEntry_STATIC:
		for i, ep := range se.Endpoints {
			ip := endpoints.i(i)
			if ep == nil {
				v.errorf(&ip, "endpoint cannot be nil")
				continue
			}
			v.workloadEntryAt(&ip, ep, portNames, false)
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(se.Endpoints) == 0 {
			for i, h := range se.Hosts {
				if err := validateFQDN(h); err != nil {
					hp := hosts.i(i)
					v.errorf(&hp, "hosts must be FQDN or contain only prefix wildcards if no endpoints are provided for resolution mode %s, %v", se.Resolution, err)
					break
				}
			}
		}
		if se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && len(se.Endpoints) > 1 {
			v.errorf(&endpoints, "there must only be 0 or 1 endpoint for resolution mode %s", se.Resolution)
		}
		for i, ep := range se.Endpoints {
			ip := endpoints.i(i)
			if ep == nil {
				v.errorf(&ip, "endpoint cannot be nil")
				continue
			}
			if !isValidIPAddress(ep.Address) && validateFQDN(ep.Address) != nil {
				ap := ip.f("address")
				v.errorf(&ap, "endpoint address %q is not a valid FQDN or an IP address", ep.Address)
			}
			lp := ip.f("labels")
			v.labelsAt(&lp, ep.Labels)
			pp := ip.f("ports")
			for name, port := range ep.Ports {
				kp := pp.k(name)
				if !portNames[name] {
					v.errorf(&kp, "endpoint port %v is not defined by the service entry", port)
				}
				v.add(&kp, validatePortName(name))
				v.add(&kp, validatePort(int(port)))
			}
		}
	case networking.ServiceEntry_DYNAMIC_DNS:
		for i, h := range se.Hosts {
			if !strings.HasPrefix(h, "*") {
				hp := hosts.i(i)
				v.errorf(&hp, "host must be wildcarded for resolution mode %s", se.Resolution)
			}
		}
		if len(se.Addresses) != 0 {
			v.errorf(&addresses, "addresses cannot be set for resolution type %s. HTTP route domains will only be generated"+
				"from the hosts field values", se.Resolution)
		}
		if len(se.Endpoints) != 0 {
			v.errorf(&endpoints, "endpoints cannot be set for resolution type %s. Destination IP address determined from hosts"+
				"field values", se.Resolution)
		}
		for i, port := range se.Ports {
			if port == nil {
				continue // reported above
			}
			if p := parseProtocol(port.Protocol); p != protoHTTP && p != protoTLS && p != protoGRPC && p != protoHTTP2 {
				pp := ports.i(i)
				prp := pp.f("protocol")
				v.errorf(&prp, "only HTTP, TLS, GRPC, and HTTP2 protocols are supported for resolution type %s", se.Resolution)
			}
		}
		location := spec.f("location")
		if se.Location != networking.ServiceEntry_MESH_EXTERNAL && se.Location != networking.ServiceEntry_MESH_INTERNAL {
			v.errorf(&location, "location must be MESH_EXTERNAL or MESH_INTERNAL for resolution type %s", se.Resolution)
		}
		if se.Location == networking.ServiceEntry_MESH_INTERNAL && v.usesWaypoint() {
			v.errorf(&location, "location MESH_INTERNAL with resolution type %s is not supported when using waypoints", se.Resolution)
		}
	default:
		v.errorf(&resolution, "unsupported resolution type %s", networking.ServiceEntry_Resolution_name[int32(se.Resolution)])
	}

	// Several hosts on a plain TCP port cannot be told apart, unless the hosts are ignored
	// (resolution NONE).
	if se.Resolution != networking.ServiceEntry_NONE && len(se.Hosts) > 1 {
		for i, port := range se.Ports {
			if port == nil {
				continue // reported above
			}
			if p := parseProtocol(port.Protocol); !p.isHTTP() && !p.isTLS() {
				pp := ports.i(i)
				v.errorf(&pp, "multiple hosts provided with non-HTTP, non-TLS ports")
				break
			}
		}
	}

	ep := spec.f("exportTo")
	v.exportToAt(&ep, se.ExportTo, true, false)
}

// usesWaypoint mirrors usesWaypoint: the istio.io/use-waypoint label names a waypoint.
func (v *validator) usesWaypoint() bool {
	w, ok := v.labels["istio.io/use-waypoint"]
	return ok && w != "" && !strings.EqualFold(w, "none")
}
