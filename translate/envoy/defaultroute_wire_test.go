package envoy

import (
	"bytes"
	"strings"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"pgregory.net/rapid"
)

// TestDefaultRouteRestIsTheMarshalledMessage: the default route's virtual host rest written
// from parts is, byte for byte, the rest the message path makes (the whole virtual host
// validated, then marshalled without name and domains), for names whose lengths take one and
// two bytes.
func TestDefaultRouteRestIsTheMarshalledMessage(t *testing.T) {
	long := strings.Repeat("a", 70) + "." + strings.Repeat("b", 70) + ".example.com"
	for _, c := range []struct {
		host string
		port uint32
	}{
		{"reviews.bookinfo.svc.cluster.local", 9080},
		{"a.b", 1},
		{long, 65535},
		{"*.example.com", 80},
	} {
		name := domainName(c.host, c.port)
		domains := []string{c.host, c.host + ":" + "80"}
		cluster, op := ClusterName(c.port, "", c.host), defaultRouteOperation(c.host, c.port)
		vh := &routepb.VirtualHost{Name: name, Domains: domains, Routes: []*routepb.Route{defaultRouteFor(cluster, op)},
			IncludeRequestAttemptCount: includeRequestAttemptCount}
		if err := vh.ValidateAll(); err != nil {
			t.Fatalf("%+v: the message is invalid: %v", c, err)
		}
		vh.Name, vh.Domains = "", nil
		want, err := deterministic.Marshal(vh)
		if err != nil {
			t.Fatal(err)
		}
		got, err := defaultRouteRest(name, domains, cluster, op)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%+v: encoded\n%x\nmarshalled\n%x", c, got, want)
		}
	}
}

// TestDefaultTailIsTheDefaultRouteRest: a host's default route kept as host and port, and
// written as a port's route configuration is assembled, is the rest defaultRouteRest writes of
// the host's cluster and operation, for port numbers of every length and hosts that are
// addresses (an IPv6 one is bracketed in the operation).
func TestDefaultTailIsTheDefaultRouteRest(t *testing.T) {
	for _, c := range []defaultTail{
		{"reviews.bookinfo.svc.cluster.local", 9080},
		{"a.b", 1}, {"a.b", 10}, {"a.b", 443}, {"a.b", 65535},
		{strings.Repeat("h", 200) + ".example.com", 8080},
		{"10.0.0.1", 80},
		{"2001:db8::1", 80},
	} {
		name := domainName(c.host, c.port)
		want, err := defaultRouteRest(name, []string{c.host}, ClusterName(c.port, "", c.host), defaultRouteOperation(c.host, c.port))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		got := c.appendRest([]byte("x"))
		if !bytes.Equal(got[1:], want) || c.restSize() != len(want) {
			t.Errorf("%+v: written (size %d)\n%x\nwant (size %d)\n%x", c, c.restSize(), got[1:], len(want), want)
		}
		parts := vhostParts{head: []byte("head"), dflt: c}
		if enc := parts.appendTo(nil); parts.size() != len(enc) || !bytes.Equal(enc, append([]byte("head"), want...)) {
			t.Errorf("%+v: the virtual host's parts write %d bytes, sized %d", c, len(enc), parts.size())
		}
	}
}

// TestDefaultRouteRestRefusesWhatValidationRefuses: what the virtual host's validation or
// proto.Marshal refuses, the encoding refuses, and the message path agrees on each.
func TestDefaultRouteRestRefusesWhatValidationRefuses(t *testing.T) {
	for _, c := range []struct {
		name, cluster, op string
		domains           []string
	}{
		{"", "c", "o", []string{"a"}},
		{"n", "c", "o", nil},
		{"n", "c", "o", []string{"a\nb"}},
		{"n", "c", "o", []string{"a\x00"}},
		{"n", "c", "o", []string{"ok", "a\r"}},
		{"n", "", "o", []string{"a"}},
		{"n", "c", "", []string{"a"}},
		{"n", "c\xff", "o", []string{"a"}},
	} {
		if _, err := defaultRouteRest(c.name, c.domains, c.cluster, c.op); err == nil {
			t.Errorf("%+v: encoded", c)
		}
		vh := &routepb.VirtualHost{Name: c.name, Domains: c.domains, Routes: []*routepb.Route{defaultRouteFor(c.cluster, c.op)},
			IncludeRequestAttemptCount: includeRequestAttemptCount}
		if vh.ValidateAll() == nil {
			if _, err := deterministic.Marshal(vh); err == nil {
				t.Errorf("%+v: the message is valid and marshals; the encoding should not refuse it", c)
			}
		}
	}
}

// TestWireTemplateRefusesFieldsOutOfOrder: a template whose holes are not in the order the
// encoding has them, or missing, is an error, not a wrong encoding.
func TestWireTemplateRefusesFieldsOutOfOrder(t *testing.T) {
	r := defaultRouteFor("c", "o")
	if _, err := newWireTemplate(r, routeRouteField, routeDecoratorField); err == nil { // the action, a oneof, comes last
		t.Error("holes out of order: no error")
	}
	if _, err := newWireTemplate(&routepb.Route{Name: "x"}, routeRouteField); err == nil {
		t.Error("a hole the message does not set: no error")
	}
}

// TestVirtualHostHeadIsTheMarshalledMessage: a virtual host's head written directly is, byte
// for byte, proto.Marshal's of VirtualHost{name, domains}, for names and domains whose
// lengths take one and two bytes, no name, no domains, empty domains; and a string that is
// not UTF-8 is refused as proto.Marshal refuses it.
func TestVirtualHostHeadIsTheMarshalledMessage(t *testing.T) {
	long := strings.Repeat("h", 200) + ".example"
	for _, c := range []struct {
		name    string
		domains []string
	}{
		{"reviews.bookinfo.svc.cluster.local:9080", []string{"reviews.bookinfo.svc.cluster.local", "reviews.bookinfo.svc.cluster.local.", "reviews.bookinfo", "240.0.0.9"}},
		{long + ":80", []string{long, long + ":80", "[::1]", "[::1]:80"}},
		{"", []string{"a"}},
		{"a:1", nil},
		{"a:1", []string{"", "b"}},
		{"bad\xff:1", []string{"a"}},
		{"a:1", []string{"ok", "bad\xfe"}},
	} {
		want, wantErr := deterministic.Marshal(&routepb.VirtualHost{Name: c.name, Domains: c.domains})
		got, err := virtualHostHead(c.name, c.domains)
		if (err != nil) != (wantErr != nil) {
			t.Errorf("%q %q: error %v, proto.Marshal's %v", c.name, c.domains, err, wantErr)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%q %q: written\n%x\nmarshalled\n%x", c.name, c.domains, got, want)
		}
	}
}

// TestDefaultRouteSurelyValidOnlyWhenTheCheckPasses: the shortcut that checks a sidecar's
// default route on the sidecar's domains and the host, making no gRPC domains, cluster or
// operation, says valid only where the full check (checkDefaultRoute on those) passes, and
// for a non-empty host exactly where it does: hosts and addresses with NUL, CR, LF, bytes
// that are not UTF-8, IPv4 and IPv6 addresses, the names a proxy calls a host by.
func TestDefaultRouteSurelyValidOnlyWhenTheCheckPasses(t *testing.T) {
	text := rapid.OneOf(
		rapid.StringMatching(`[a-z0-9.*-]{0,20}`),
		rapid.SampledFrom([]string{"", "10.1.2.3", "fd00::1", "a.ns.svc.cluster.local", "x\x00y", "x\ry", "x\ny", "\xff.example", "é.example"}),
	)
	rapid.Check(t, func(rt *rapid.T) {
		host := text.Draw(rt, "host")
		vip := rapid.SampledFrom([]string{"", "0.0.0.0", "240.0.0.1", "fd00::2", "bad\nvip", "\xfe"}).Draw(rt, "vip")
		port := uint32(rapid.IntRange(1, 65535).Draw(rt, "port"))
		proxyDomain := sharedProxyDomain("cluster.local")
		name := domainName(host, port)
		sidecar := virtualHostDomains(host, port, vip, proxyDomain, false, nil)
		grpc := virtualHostDomains(host, port, vip, proxyDomain, true, nil)
		full := checkDefaultRoute(name, grpc, ClusterName(port, "", host), defaultRouteOperation(host, port)) == nil
		sure := defaultRouteSurelyValid(name, sidecar, host)
		if sure && !full {
			rt.Fatalf("host %q vip %q port %d: the shortcut says valid, the full check refuses", host, vip, port)
		}
		if host != "" && sure != full {
			rt.Fatalf("host %q vip %q port %d: the shortcut says %v, the full check %v", host, vip, port, sure, full)
		}
	})
}
