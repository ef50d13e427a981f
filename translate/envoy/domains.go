package envoy

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Virtual host domains, as istiod generates them for a sidecar's outbound route
// configuration and a proxyless gRPC client's (generateVirtualHostDomains,
// GenerateAltVirtualHosts): the host; its absolute form "HOST." (istiod's
// PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN, on by default); for a Kubernetes-style host
// (NAME.NAMESPACE.svc.SUFFIX, SUFFIX the proxy's cluster domain) the shorter names a client
// may use, "NAME.NAMESPACE" and "NAME.NAMESPACE.svc", and for a client in NAMESPACE also
// "NAME"; and the service's address (its VIP). An Envoy sidecar ignores the port in the Host
// header (its route configurations set ignore_port_in_host_matching), so its domains have
// none; a proxyless gRPC client matches "HOST:PORT", so each domain is also given with the
// port.
//
// What a client may call a host by depends on the client's namespace: "reviews" is
// reviews.bookinfo.svc.cluster.local only within bookinfo. The mesh-wide route configurations
// are built for a proxy in no namespace (sharedProxyDomain): the names every client may use,
// which is exactly what istiod gives a proxy of another namespace. The bare name ("reviews"),
// in the order istiod gives a proxy of the host's own namespace ("reviews",
// "reviews.bookinfo.svc", "reviews.bookinfo"), is in that namespace's scope (scope.go), built
// while a proxy of it is connected.

// sharedProxyDomain is the DNS domain of a proxy in no namespace, ".svc.SUFFIX": no host's
// namespace is its own, so only the names every namespace may use are generated.
func sharedProxyDomain(suffix string) string { return ".svc." + suffix }

// proxyDNSDomain is the DNS domain of a proxy in a namespace, as istiod sets it for a
// Kubernetes proxy: "NAMESPACE.svc.SUFFIX".
func proxyDNSDomain(namespace, suffix string) string { return namespace + ".svc." + suffix }

// virtualHostDomains are the domains of a host's virtual host on a port, for a proxy of a DNS
// domain: with ports (proxyless gRPC clients) or without (Envoy sidecars, which ignore the
// port). vip is the host's address, "" for none. A shorter name that is some other host's own
// (taken, which may be nil) is left out, as istiod leaves it out.
func virtualHostDomains(host string, port uint32, vip, proxyDomain string, withPort bool, taken func(string) bool) []string {
	p := port
	if !withPort {
		p = 0
	}
	alts := altHosts(host, proxyDomain)
	if taken != nil {
		alts = slices.DeleteFunc(alts, taken) // altHosts' list is the call's own
	}
	absolute := !mayBeIP(host) || net.ParseIP(host) == nil
	withVIP := vip != "" && vip != "0.0.0.0"
	// Sized exactly: a million hosts build two lists each.
	each := 1
	if p != 0 {
		each = 2
	}
	n := each * (2 + len(alts)) // the host, its absolute name and its short names
	if !absolute {
		n-- // an address has no "ADDRESS." (but has "ADDRESS.:PORT")
	}
	if withVIP {
		n += each
	}
	domains := make([]string, 0, n)
	domains = appendDomainPort(domains, host, p)
	// The absolute name: "HOST." (and "HOST.:PORT").
	if absolute {
		domains = append(domains, host+".")
	}
	if p != 0 {
		domains = append(domains, domainName(host+".", p))
	}
	for _, a := range alts {
		domains = appendDomainPort(domains, a, p)
	}
	if withVIP {
		domains = appendDomainPort(domains, vip, p)
	}
	return domains
}

// altHosts are the shorter names of a host for a proxy of a DNS domain "NAMESPACE.svc.SUFFIX"
// (istiod's generateAltVirtualHostsForKubernetesService): for NAME.NS.svc.SUFFIX, "NAME",
// "NAME.NS.svc" and "NAME.NS" when NS is the proxy's namespace, else "NAME.NS" and
// "NAME.NS.svc". A host outside the proxy's cluster domain has none: a short form could be
// another cluster service's.
func altHosts(host, proxyDomain string) []string {
	proxyNS, suffix, ok := strings.Cut(proxyDomain, ".svc.")
	if !ok || !strings.HasSuffix(host, ".svc."+suffix) {
		return nil
	}
	ih := strings.Index(host, ".svc.")
	ns := strings.IndexByte(host, '.')
	if ih <= 0 || ns+1 >= len(host) || ns+1 > ih {
		return nil
	}
	if host[ns+1:ih] == proxyNS {
		return []string{host[:ns], host[:ih] + ".svc", host[:ih]}
	}
	return []string{host[:ih], host[:ih] + ".svc"}
}

// appendDomainPort appends a domain and, with a port, the domain with the port.
func appendDomainPort(domains []string, domain string, port uint32) []string {
	if port == 0 {
		return append(domains, ipv6Compliant(domain))
	}
	return append(domains, ipv6Compliant(domain), domainName(domain, port))
}

// domainName is "HOST:PORT", an IPv6 address in brackets (istiod's util.DomainName).
func domainName(host string, port uint32) string {
	var num [10]byte
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]:" + string(strconv.AppendUint(num[:0], uint64(port), 10))
	}
	return host + ":" + string(strconv.AppendUint(num[:0], uint64(port), 10))
}

func ipv6Compliant(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// serviceVIP is the address istiod gives a ServiceEntry's hosts: the first of its addresses
// that is an IP address (as written) or a CIDR range (a single address' range as that
// address); "" when none is. istiod makes one service per host and address, and a proxy keeps
// the first of those with the same host name. Without addresses, istiod may allocate one
// (PILOT_ENABLE_IP_AUTOALLOCATE, DNS capture), per proxy: the bridge allocates none.
func serviceVIP(addresses []string) string {
	for _, a := range addresses {
		if _, err := netip.ParseAddr(a); err == nil {
			return a
		}
		if p, err := netip.ParsePrefix(a); err == nil {
			if p.Bits() == p.Addr().BitLen() {
				return p.Addr().String()
			}
			return a
		}
	}
	return ""
}

// mayBeIP reports whether s may parse as an IP address: IPv4 ends in a digit, IPv6 holds a
// colon. Most hosts are DNS names, and net.ParseIP allocates.
func mayBeIP(s string) bool {
	return s != "" && ('0' <= s[len(s)-1] && s[len(s)-1] <= '9' || strings.IndexByte(s, ':') >= 0)
}
