package envoy

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/internal/hostname"
	networking "istio.io/api/networking/v1alpha3"
)

// protocol is a port's application protocol, as far as the translation cares.
type protocol uint8

const (
	protoAuto  protocol = iota // not declared (or not one Istio knows): Istio sniffs it
	protoHTTP                  // HTTP/1.1
	protoHTTP2                 // HTTP2, GRPC, GRPC-Web: HTTP/2 to the upstream
	protoOther                 // TCP, TLS, HTTPS, MONGO, ...: no HTTP routes
)

// parseProtocol reads a ServiceEntry port's protocol as istiod does (protocol.Parse): the
// protocol field alone, case-insensitive. The port's name does not count (istiod reads the
// name only for Kubernetes Services); an unset or unknown protocol is protocol sniffing.
func parseProtocol(declared string) protocol {
	switch strings.ToUpper(declared) {
	case "HTTP":
		return protoHTTP
	case "HTTP2", "GRPC", "GRPC-WEB":
		return protoHTTP2
	case "TCP", "TLS", "HTTPS", "MONGO", "MYSQL", "REDIS", "UDP":
		return protoOther
	}
	return protoAuto
}

// routed reports whether the port gets HTTP routes, listeners and route configurations.
func (p protocol) routed() bool { return p != protoOther }

// port is a validated ServiceEntry port.
type port struct {
	number, target uint32
	name           string
	protocol       protocol
}

// validHost reports what Istio accepts as a host: at most 253 bytes of DNS labels (letters,
// digits, '-' and '_', neither of those two first or last), optionally behind "*.", or "*".
// Written out rather than a regular expression: every host's build checks it, and the
// expression's matcher was 2% of a million-host load. TestValidHostIsThePattern holds it to
// the expression.
func validHost(h string) bool {
	if len(h) > 253 {
		return false
	}
	if h == "*" {
		return true
	}
	h = strings.TrimPrefix(h, "*.")
	for {
		label, rest, more := strings.Cut(h, ".")
		if !validLabel(label) {
			return false
		}
		if !more {
			return true
		}
		h = rest
	}
}

// validLabel reports a DNS label as validHost takes it.
func validLabel(l string) bool {
	if l == "" || !alnum(l[0]) || !alnum(l[len(l)-1]) {
		return false
	}
	for i := 1; i < len(l)-1; i++ {
		if c := l[i]; !alnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// subsetPattern keeps subset names to what can sit between the bars of a cluster name.
var subsetPattern = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`)

// servicePorts validates a ServiceEntry's ports: a number in 1..65535, each number and name
// once. A faulty port is left out.
func servicePorts(se *serviceEntry, fs *faults) []port {
	return appendServicePorts(make([]port, 0, len(se.ports)), se, fs)
}

// appendServicePorts is servicePorts appending to out: a build of a host passes room on its
// stack (two lists a host, a million hosts).
func appendServicePorts(out []port, se *serviceEntry, fs *faults) []port {
	out = slices.Grow(out, len(se.ports))
	seen := portsSeen(out)
	for i, p := range se.ports {
		switch {
		case p.number == 0 || p.number > 65535:
			fs.add(kindServiceEntry, se.Key, "ports[%d].number: %d is not a port number; the port is left out", i, p.number)
			continue
		case seen.has(out, p.number):
			fs.add(kindServiceEntry, se.Key, "ports[%d].number: port %d is listed twice; the first is used", i, p.number)
			continue
		case p.target > 65535:
			fs.add(kindServiceEntry, se.Key, "ports[%d].targetPort: %d is not a port number; the port is left out", i, p.target)
			continue
		}
		seen.add(p.number)
		out = append(out, port{number: p.number, target: p.target, name: p.name, protocol: parseProtocol(p.protocol)})
	}
	return out
}

// portSet is the port numbers servicePorts kept: a map for a ServiceEntry of many ports, else
// nil, and the kept ports are searched (every host's build reads its ports; a map each was 1%
// of a million-host load).
type portSet map[uint32]bool

func portsSeen(out []port) portSet {
	if cap(out) > 16 {
		return portSet{}
	}
	return nil
}

func (s portSet) has(kept []port, number uint32) bool {
	if s != nil {
		return s[number]
	}
	return slices.ContainsFunc(kept, func(p port) bool { return p.number == number })
}

func (s portSet) add(number uint32) {
	if s != nil {
		s[number] = true
	}
}

// workload is one endpoint of a service: a ServiceEntry's inline endpoint or a
// WorkloadEntry it selects.
type workload struct {
	kind, key string // where it comes from, for faults
	index     int    // of a ServiceEntry's inline endpoint; -1 for a WorkloadEntry
	address   string
	ports     []namedPort // by name
	labels    labels
	network   string
	locality  string
	weight    uint32
}

// workloads lists a ServiceEntry's endpoints: its inline endpoints in order, then the
// WorkloadEntries of its namespace that its workloadSelector selects, by name.
func (t *Translator) workloads(se *serviceEntry) []workload {
	return t.appendWorkloads(make([]workload, 0, se.inline), se)
}

// appendWorkloads is workloads appended to out.
func (t *Translator) appendWorkloads(out []workload, se *serviceEntry) []workload {
	if se.inline > 0 {
		out = appendEndpoints(out, se.body, kindServiceEntry, se.Key)
	}
	sel := se.selector()
	if len(sel) == 0 {
		return out
	}
	for _, key := range slices.Sorted(maps.Keys(t.weByNamespace[se.Namespace])) {
		we := t.wes[key]
		if we.labels.selectedBy(sel) {
			out = append(out, workloadOf(kindWorkloadEntry, key, -1, we.spec))
		}
	}
	return out
}

func workloadOf(kind, key string, index int, we *networking.WorkloadEntry) workload {
	return workload{
		kind: kind, key: key, index: index,
		address: we.GetAddress(), ports: portsOf(we.GetPorts()), labels: labelsOf(we.GetLabels()),
		network: we.GetNetwork(), locality: we.GetLocality(), weight: we.GetWeight(),
	}
}

// field is where the workload is in its resource, for faults: made only when one is
// reported, not for every endpoint of every build.
func (w *workload) field() string {
	if w.index < 0 {
		return "spec"
	}
	return fmt.Sprintf("endpoints[%d]", w.index)
}

// endpointPort maps a service port to a workload's port as Istio does: the workload's port of
// the same name, else the service port's targetPort, else the service port's number.
func (w *workload) endpointPort(p port) uint32 {
	if n, ok := portNamed(w.ports, p.name); ok && n > 0 && n <= 65535 {
		return n
	}
	if p.target != 0 {
		return p.target
	}
	return p.number
}

// endpoint is a workload placed on one service port.
type endpoint struct {
	*workload
	port uint32
}

// portEndpoints places the workloads on a port. When ips is set (STATIC and NONE: EDS, which
// takes only IP addresses) an address that is not an IP is left out with a fault. An
// address:port that appears twice is kept once, and weights may not add up past 2^32-1:
// grpc-go rejects a load assignment with a duplicate address or an overflowing weight sum.
func portEndpoints(ws []workload, p port, ips bool, fs *faults) []endpoint {
	return appendPortEndpoints(make([]endpoint, 0, len(ws)), ws, p, ips, fs)
}

// appendPortEndpoints is portEndpoints into out, empty with room: a build of load
// assignments passes room on its stack (a list a host, read only while it is encoded).
func appendPortEndpoints(out []endpoint, ws []workload, p port, ips bool, fs *faults) []endpoint {
	out = slices.Grow(out, len(ws))
	var seen map[hostPort]bool // for many endpoints; a few are searched among out
	if len(ws) > 16 {
		seen = make(map[hostPort]bool, len(ws))
	}
	listed := func(ep endpoint) bool {
		if seen != nil {
			return seen[hostPort{ep.address, ep.port}]
		}
		return slices.ContainsFunc(out, func(o endpoint) bool { return o.address == ep.address && o.port == ep.port })
	}
	var total uint64
	for i := range ws {
		w := &ws[i]
		if w.address == "" {
			fs.add(w.kind, w.key, "%s.address is empty; the endpoint is left out", w.field())
			continue
		}
		if ips {
			if _, err := netip.ParseAddr(w.address); err != nil {
				fs.add(w.kind, w.key, "%s.address: %q is not an IP address, which resolution STATIC needs; the endpoint is left out", w.field(), w.address)
				continue
			}
		}
		ep := endpoint{workload: w, port: w.endpointPort(p)}
		if listed(ep) {
			fs.add(w.kind, w.key, "%s: endpoint %s:%d of port %d is listed twice; it is used once", w.field(), ep.address, ep.port, p.number)
			continue
		}
		if total += uint64(max(w.weight, 1)); total > math.MaxUint32 {
			fs.add(w.kind, w.key, "%s.weight: the endpoints' weights add up past %d; the endpoint is left out", w.field(), uint64(math.MaxUint32))
			total -= uint64(max(w.weight, 1))
			continue
		}
		if seen != nil {
			seen[hostPort{ep.address, ep.port}] = true
		}
		out = append(out, ep)
	}
	return out
}

// hostPort is an endpoint's address and port, as portEndpoints tells them apart.
type hostPort struct {
	address string
	port    uint32
}

// subsetEndpoints returns the endpoints that carry every label of a subset. A subset
// without labels has every endpoint.
func subsetEndpoints(eps []endpoint, labels map[string]string) []endpoint {
	if len(labels) == 0 {
		return eps
	}
	var out []endpoint
	for _, ep := range eps {
		if ep.labels.selectedBy(labels) {
			out = append(out, ep)
		}
	}
	return out
}

// serviceEntryFor returns the ServiceEntry that defines a host, and the others that also
// list it: the oldest wins, then the first by namespace/name (Istio's rule for a host
// defined twice).
func (t *Translator) serviceEntryFor(host string) (*serviceEntry, []*serviceEntry) {
	return oldest(t.seByHost.get(host))
}

// destinationRuleFor returns the DestinationRule of a host, and the shadowed others: the
// rules for exactly that host first (oldest wins), else the most specific wildcard rule.
func (t *Translator) destinationRuleFor(host string) (*destinationRule, []*destinationRule) {
	if win, others := first(t.drByHost[host], t.drs); win != nil {
		return win, others
	}
	var best *destinationRule
	for key := range t.drWildcard {
		dr := t.drs[key]
		if dr.host == host || !hostname.Matches(dr.host, host) {
			continue
		}
		if best == nil || len(dr.host) > len(best.host) || (len(dr.host) == len(best.host) && dr.before(&best.meta)) {
			best = dr
		}
	}
	return best, nil
}

// meshVirtualServiceFor returns the VirtualService that routes a host for the mesh, and the
// shadowed others: those listing exactly that host first (oldest wins), else the one with
// the most specific wildcard host that covers it.
func (t *Translator) meshVirtualServiceFor(host string) (*virtualService, []*virtualService) {
	return t.meshVirtualServiceWhere(host, nil)
}

// meshVirtualServiceWhere is meshVirtualServiceFor among the VirtualServices keep takes (nil:
// all).
func (t *Translator) meshVirtualServiceWhere(host string, keep func(*virtualService) bool) (*virtualService, []*virtualService) {
	var mesh keyList
	for _, key := range t.vsByHost[host] {
		if vs := t.vss[key]; vs.mesh && (keep == nil || keep(vs)) {
			mesh = append(mesh, key)
		}
	}
	if win, others := first(mesh, t.vss); win != nil {
		return win, others
	}
	var best *virtualService
	bestLen := 0
	for key := range t.vsWildcard {
		vs := t.vss[key]
		if !vs.mesh || keep != nil && !keep(vs) {
			continue
		}
		for _, h := range vs.hosts {
			if h == host || !hostname.Matches(h, host) {
				continue
			}
			if best == nil || len(h) > bestLen || (len(h) == bestLen && vs.before(&best.meta)) {
				best, bestLen = vs, len(h)
			}
		}
	}
	return best, nil
}

// record is what first needs of an input.
type record interface{ metaOf() *meta }

func (m *meta) metaOf() *meta { return m }

// first returns the oldest of a set of inputs (ties by key) and the rest in order.
func first[R record](keys keyList, all map[string]R) (R, []R) {
	if len(keys) == 1 {
		return all[keys[0]], nil
	}
	rs := make([]R, 0, len(keys))
	for _, k := range keys {
		rs = append(rs, all[k])
	}
	return sortByAge(rs)
}

// oldest is first of inputs held rather than keys; rs is not changed.
func oldest[R record](rs []R) (R, []R) {
	if len(rs) == 1 {
		return rs[0], nil
	}
	return sortByAge(slices.Clone(rs))
}

// sortByAge sorts rs by age and returns the oldest and the rest.
func sortByAge[R record](rs []R) (R, []R) {
	if len(rs) == 0 {
		var zero R
		return zero, nil
	}
	slices.SortFunc(rs, byAge)
	return rs[0], rs[1:]
}

// byAge orders inputs oldest first, then by namespace/name.
func byAge[R record](a, b R) int {
	switch am, bm := a.metaOf(), b.metaOf(); {
	case am.before(bm):
		return -1
	case bm.before(am):
		return 1
	}
	return 0
}
