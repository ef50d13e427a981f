package linkerd

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
)

// answer is what the bridge knows of an authority at one store revision: whether the service
// exists, and its endpoints. It is computed once per change for every stream that asks for
// the authority, and never modified after.
type answer struct {
	exists bool
	// namespace is the defining ServiceEntry's: consumers' rights are checked against it.
	namespace string
	labels    map[string]string // the set's metric labels
	identity  *identity         // from the ServiceEntry's subjectAltNames; nil: none
	endpoints []endpoint        // sorted by address
}

// identity is the TLS identity endpoints are expected to present.
type identity struct {
	uri, dns   string // one of them
	serverName string
}

// endpoint is one address of the service.
type endpoint struct {
	addr   netip.AddrPort
	weight uint32
	labels map[string]string
}

func (e *endpoint) equal(o *endpoint) bool {
	return e.addr == o.addr && e.weight == o.weight && maps.Equal(e.labels, o.labels)
}

// equal reports whether two answers tell a client the same.
func (a *answer) equal(b *answer) bool {
	if a.exists != b.exists || a.namespace != b.namespace || !maps.Equal(a.labels, b.labels) ||
		!a.sameIdentity(b) || len(a.endpoints) != len(b.endpoints) {
		return false
	}
	for i := range a.endpoints {
		if !a.endpoints[i].equal(&b.endpoints[i]) {
			return false
		}
	}
	return true
}

// sameIdentity: the set's labels and identity go with every address, so a change of either
// is a change of every address.
func (a *answer) sameIdentity(b *answer) bool {
	switch {
	case a.identity == nil || b.identity == nil:
		return a.identity == b.identity
	}
	return *a.identity == *b.identity
}

// resolver turns an authority into its answer, from the index and the store view it was
// synced to.
type resolver struct {
	idx          *index
	view         *store.View
	domainSuffix string // "svc." + suffix of Kubernetes service hosts, for the service label
}

// changed is when the view's last change of the resolved collections was written: the push
// latency of an update is measured from it.
func (r *resolver) changed() time.Time {
	se, we := r.view.Collection(ServiceEntries).Changed, r.view.Collection(WorkloadEntries).Changed
	if we.After(se) {
		return we
	}
	return se
}

// resolve answers an authority, following the ServiceEntry that defines its host:
//   - no ServiceEntry lists the host (or the address), or it has no such port: the service
//     does not exist;
//   - resolution DNS or DNS_ROUND_ROBIN: the bridge resolves no names, so the client is told
//     the service does not exist here and resolves the host by DNS itself;
//   - STATIC and NONE: the IP addresses of its endpoints and of the WorkloadEntries of its
//     namespace that its workloadSelector selects; an endpoint whose address is no IP is left
//     out. STATIC without one exists with no endpoints; NONE without one (traffic goes where
//     the client's own resolution sends it) is answered as not existing, so that the client
//     falls back to DNS.
func (r *resolver) resolve(a authority) *answer {
	win := r.idx.winner(a.host)
	if win == nil {
		return &answer{}
	}
	e := r.view.Get(ServiceEntries, win.key)
	if e == nil {
		return &answer{}
	}
	spec, ok := decodeServiceEntry(e)
	if !ok {
		return &answer{}
	}
	port := servicePort(spec, a.port)
	if port == nil {
		return &answer{}
	}
	switch spec.GetResolution() {
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		return &answer{}
	}
	name := hostName(win, a.host)
	ans := &answer{exists: true, namespace: win.namespace, identity: identityOf(spec, name),
		labels: map[string]string{"namespace": win.namespace, "service": r.serviceName(win, name)}}
	ans.endpoints = r.endpoints(spec, win, port)
	if len(ans.endpoints) == 0 && spec.GetResolution() == networking.ServiceEntry_NONE {
		return &answer{}
	}
	return ans
}

func servicePort(spec *networking.ServiceEntry, number uint32) *networking.ServicePort {
	for _, p := range spec.GetPorts() {
		if p.GetNumber() == number {
			return p
		}
	}
	return nil
}

// endpoints lists the addresses of a service port: the ServiceEntry's endpoints, then the
// WorkloadEntries it selects by name, each address:port once (the first).
func (r *resolver) endpoints(spec *networking.ServiceEntry, se *seInfo, port *networking.ServicePort) []endpoint {
	var out []endpoint
	seen := map[netip.AddrPort]bool{}
	add := func(we *networking.WorkloadEntry) {
		ip, err := netip.ParseAddr(we.GetAddress())
		if err != nil || ip.Zone() != "" {
			return // a DNS name or a Unix socket: no address for a TcpAddress
		}
		ap := netip.AddrPortFrom(ip.Unmap(), uint16(endpointPort(we, port)))
		if seen[ap] {
			return
		}
		seen[ap] = true
		out = append(out, endpoint{addr: ap, weight: max(we.GetWeight(), 1), labels: we.GetLabels()})
	}
	for _, we := range spec.GetEndpoints() {
		add(we)
	}
	for _, we := range r.idx.selected(se.namespace, spec.GetWorkloadSelector().GetLabels()) {
		add(we.spec)
	}
	sortEndpoints(out)
	return out
}

// sortEndpoints orders endpoints by address, the order diffs walk them in.
func sortEndpoints(eps []endpoint) {
	slices.SortFunc(eps, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
}

// endpointPort maps a service port to an endpoint's as Istio does: the endpoint's port of the
// same name, else the service port's targetPort, else its number.
func endpointPort(we *networking.WorkloadEntry, p *networking.ServicePort) uint32 {
	if n, ok := we.GetPorts()[p.GetName()]; ok && n > 0 && n <= 65535 {
		return n
	}
	if t := p.GetTargetPort(); t > 0 && t <= 65535 {
		return t
	}
	return p.GetNumber()
}

// hostName is the name of the service asked for: the host, or for a lookup by address the
// defining ServiceEntry's first host.
func hostName(se *seInfo, host string) string {
	if _, err := netip.ParseAddr(host); err == nil && len(se.hosts) > 0 {
		return se.hosts[0]
	}
	return host
}

// serviceName is the "service" metric label: NAME of a Kubernetes service's host
// NAME.NAMESPACE.svc.SUFFIX, else the host itself.
func (r *resolver) serviceName(se *seInfo, host string) string {
	if head, ok := strings.CutSuffix(host, r.domainSuffix); ok {
		if name, ns, ok := strings.Cut(head, "."); ok && ns == se.namespace && name != "" {
			return name
		}
	}
	return host
}

// identityOf is the TLS identity hint of a ServiceEntry: its first subjectAltName, a URI
// (spiffe://...) or a DNS-like name. The server name (SNI) is that name, or for a URI the
// host the client asked for.
func identityOf(spec *networking.ServiceEntry, host string) *identity {
	sans := spec.GetSubjectAltNames()
	if len(sans) == 0 || sans[0] == "" {
		return nil
	}
	if strings.Contains(sans[0], "://") {
		return &identity{uri: sans[0], serverName: host}
	}
	return &identity{dns: sans[0], serverName: sans[0]}
}
