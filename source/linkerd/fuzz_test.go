package linkerd

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParsePath: a client's path never panics the parser, and what it accepts is a valid
// authority that reads back as itself.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"reviews.bookinfo.svc.cluster.local:9080", "Reviews.Bookinfo.svc.cluster.local.:9080", "api.example.com",
		"10.0.0.1:80", "[2001:db8::1]:443", "2001:db8::1", "[::ffff:10.0.0.1]:80", "[fe80::1%eth0]:80",
		"", ":", "host:", ":80", "host:0", "host:65536", "a:b:c", "a..b:80", "-a.b:80", "a_b.c:80", "[::1", "[::1]x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		a, err := parsePath(path)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error that says nothing")
			}
			return
		}
		if a.port == 0 || a.port > 65535 {
			t.Fatalf("%q: port %d", path, a.port)
		}
		if ip, err := netip.ParseAddr(a.host); err == nil {
			if ip.Zone() != "" || ip.Is4In6() {
				t.Fatalf("%q: address %s", path, a.host)
			}
		} else if !dnsName(a.host) || a.host != strings.ToLower(a.host) {
			t.Fatalf("%q: host %q", path, a.host)
		}
		again, err := parsePath(a.String())
		if err != nil || again != a {
			t.Fatalf("%q read as %v, which reads back as %v, %v", path, a, again, err)
		}
	})
}
