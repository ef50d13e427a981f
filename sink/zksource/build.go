package zksource

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// serviceEntryKind is the kind the source writes.
var serviceEntryKind = mustKind("istio/networking/v1alpha3/serviceentries")

// Collection is the store collection the source writes: the ServiceEntries'.
func Collection() string { return serviceEntryKind.Collection }

func mustKind(collection string) *kinds.Kind {
	k, ok := kinds.ByCollection(collection)
	if !ok {
		panic("zksource: kinds has no " + collection) // the table is compiled in
	}
	return k
}

// buildDubbo is the ServiceEntry of one Dubbo service from its providers, in the order of
// their znode names. Its ports are every port a provider listens on, each named
// PROTOCOL-NUMBER; every endpoint maps every port to its own, so that a client may use any of
// them and reach every provider where it listens (istiod would send a port an endpoint does
// not map to that port's number). Two providers at the same address and port are one
// endpoint: the first one's labels are kept.
func buildDubbo(iface string, k dubboKey, providers []endpoint) *networking.ServiceEntry {
	eps := dedupe(providers)
	numbers := distinct(eps, func(e endpoint) uint32 { return e.port })
	scheme := hostLabel(k.scheme)
	ports := make([]*networking.ServicePort, len(numbers))
	for i, n := range numbers {
		ports[i] = &networking.ServicePort{Number: n, Name: portName(scheme, n), Protocol: protocolOf(k.scheme)}
	}
	out := make([]*networking.WorkloadEntry, len(eps))
	for i, e := range eps {
		m := make(map[string]uint32, len(ports))
		for _, p := range ports {
			m[p.Name] = e.port
		}
		out[i] = &networking.WorkloadEntry{Address: e.address, Ports: m, Labels: e.labels}
	}
	return serviceEntry(dubboHost(iface, k), ports, out)
}

// buildSpring is the ServiceEntry of one Spring Cloud service from its instances, in the order
// of their IDs: HTTP ports (http-NUMBER) when every instance has a port, HTTPS ports
// (https-NUMBER) when every instance has an sslPort, each mapped as buildDubbo's are. An
// HTTPS number that is also an HTTP one is left out.
func buildSpring(name string, instances []endpoint) (*networking.ServiceEntry, error) {
	eps := dedupe(instances)
	var ports []*networking.ServicePort
	plain := !slices.ContainsFunc(eps, func(e endpoint) bool { return e.port == 0 })
	tls := !slices.ContainsFunc(eps, func(e endpoint) bool { return e.sslPort == 0 })
	var httpNumbers []uint32
	if plain {
		httpNumbers = distinct(eps, func(e endpoint) uint32 { return e.port })
		for _, n := range httpNumbers {
			ports = append(ports, &networking.ServicePort{Number: n, Name: portName("http", n), Protocol: "HTTP"})
		}
	}
	if tls {
		for _, n := range distinct(eps, func(e endpoint) uint32 { return e.sslPort }) {
			if !slices.Contains(httpNumbers, n) {
				ports = append(ports, &networking.ServicePort{Number: n, Name: portName("https", n), Protocol: "HTTPS"})
			}
		}
	}
	if len(ports) == 0 {
		return nil, errors.New("its instances share neither a port nor an sslPort")
	}
	out := make([]*networking.WorkloadEntry, len(eps))
	for i, e := range eps {
		m := make(map[string]uint32, len(ports))
		for _, p := range ports {
			if p.Protocol == "HTTPS" {
				m[p.Name] = e.sslPort
			} else {
				m[p.Name] = e.port
			}
		}
		out[i] = &networking.WorkloadEntry{Address: e.address, Ports: m, Labels: e.labels}
	}
	return serviceEntry(springHost(name), ports, out), nil
}

func serviceEntry(host string, ports []*networking.ServicePort, eps []*networking.WorkloadEntry) *networking.ServiceEntry {
	return &networking.ServiceEntry{
		Hosts:      []string{host},
		Ports:      ports,
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Endpoints:  eps,
	}
}

// dedupe keeps the first endpoint of each address and ports, sorted by address and port.
func dedupe(eps []endpoint) []endpoint {
	type at struct {
		address       string
		port, sslPort uint32
	}
	seen := make(map[at]bool, len(eps))
	out := make([]endpoint, 0, len(eps))
	for _, e := range eps {
		k := at{e.address, e.port, e.sslPort}
		if !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b endpoint) int {
		return cmp.Or(cmp.Compare(a.address, b.address), cmp.Compare(a.port, b.port), cmp.Compare(a.sslPort, b.sslPort))
	})
	return out
}

// distinct is the sorted, distinct values of f over eps.
func distinct(eps []endpoint, f func(endpoint) uint32) []uint32 {
	out := make([]uint32, 0, 1)
	for _, e := range eps {
		out = append(out, f(e))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// portName is PREFIX-NUMBER, the prefix cut so that the name stays a DNS-1123 label.
func portName(prefix string, n uint32) string {
	num := strconv.FormatUint(uint64(n), 10)
	if room := maxLabel - 1 - len(num); len(prefix) > room {
		prefix = prefix[:room]
	}
	return prefix + "-" + num
}

// encodeEntry validates a ServiceEntry as istiod would and encodes it as the resource
// NAMESPACE/HOST, the host being a DNS-1123 subdomain already.
func encodeEntry(namespace string, se *networking.ServiceEntry) (store.Encoded, error) {
	host := se.GetHosts()[0]
	if !isDNSSubdomain(host) {
		return store.Encoded{}, fmt.Errorf("host %q is longer than %d characters", host, maxHost)
	}
	name := namespace + "/" + host
	if err := serviceEntryKind.Validate(&mcpapi.Metadata{Name: name}, se); err != nil {
		return store.Encoded{}, err
	}
	enc, err := store.EncodeMessage(name, serviceEntryKind.AMCSTypeURL, se)
	return enc.Checked(), err // marshalled from the typed message
}
