package linkerd

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// authority is what a client asks for: a host (a DNS name, lower case, without a trailing
// dot, or an IP address) and a port.
type authority struct {
	host string
	port uint32
}

func (a authority) String() string {
	return net.JoinHostPort(a.host, strconv.FormatUint(uint64(a.port), 10))
}

// defaultPort is the port of a path that names none, as Linkerd's own destination service
// takes it.
const defaultPort = 80

// maxPathLen bounds the path read: a DNS name is at most 253 bytes, a port 5 digits.
const maxPathLen = 512

// parsePath reads a Destination's path, "host:port": a DNS name (a ServiceEntry host, such as
// reviews.bookinfo.svc.cluster.local, with or without the trailing dot of a fully qualified
// name, in any case) or an IP address ("[::1]:80" for IPv6), and a port, 80 when it is left
// out. Anything else is an error that says what is wrong.
func parsePath(path string) (authority, error) {
	if path == "" {
		return authority{}, fmt.Errorf("empty path: want host:port")
	}
	if len(path) > maxPathLen {
		return authority{}, fmt.Errorf("path of %d bytes is too long for host:port", len(path))
	}
	host, portText := path, ""
	switch {
	case strings.HasPrefix(path, "["): // [IPv6] or [IPv6]:port
		h, p, err := net.SplitHostPort(path)
		if err != nil {
			if !strings.HasSuffix(path, "]") {
				return authority{}, fmt.Errorf("path %q: %v", path, err)
			}
			h = path[1 : len(path)-1]
		}
		host, portText = h, p
	case strings.Count(path, ":") == 1:
		host, portText, _ = strings.Cut(path, ":")
		if portText == "" {
			return authority{}, fmt.Errorf("path %q: empty port", path)
		}
	case strings.Contains(path, ":"): // a bare IPv6 address
		if _, err := netip.ParseAddr(path); err != nil {
			return authority{}, fmt.Errorf("path %q: not host:port (an IPv6 address with a port goes in brackets: [::1]:80)", path)
		}
	}
	a := authority{port: defaultPort}
	if portText != "" {
		n, err := strconv.ParseUint(portText, 10, 32)
		if err != nil || n == 0 || n > 65535 {
			return authority{}, fmt.Errorf("path %q: port %q is not a number from 1 to 65535", path, portText)
		}
		a.port = uint32(n)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return authority{}, fmt.Errorf("path %q: an IP address with a zone is not a service address", path)
		}
		a.host = ip.Unmap().String()
		return a, nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if !dnsName(host) {
		return authority{}, fmt.Errorf("path %q: host %q is not a DNS name or an IP address", path, host)
	}
	a.host = host
	return a, nil
}

// dnsName reports whether s is a DNS name as ServiceEntry hosts are written: labels of
// letters, digits, '-' and '_' (not at a label's ends), at most 63 bytes each, 253 in all.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
			inner := c == '-' || c == '_'
			if !alnum && !(inner && i > 0 && i < len(label)-1) {
				return false
			}
		}
	}
	return true
}
