package envoy

import (
	"bytes"
	"strings"
	"testing"
)

// TestAPIListenerEncodingIsTheMarshalledMessage: the API listener written from its parts is,
// byte for byte, the deterministic encoding of the message apiListener builds, and that
// message is valid, for names, addresses and ports whose lengths take one and two bytes.
func TestAPIListenerEncodingIsTheMarshalledMessage(t *testing.T) {
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + ".example.com" // > 127 bytes with the port
	for _, c := range []struct {
		host, vip string
		port      uint32
	}{
		{"reviews.bookinfo.svc.cluster.local", "", 9080},
		{"reviews.bookinfo.svc.cluster.local", "10.96.0.20", 1},
		{"a.b", "2001:db8::1", 65535},
		{long, "10.0.0.1", 127},
		{long, "", 128},
		{"*.example.com", "", 16384},
		{"a.example", "", 0},
	} {
		want, err := apiListener(c.host, c.vip, c.port)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if err := want.ValidateAll(); err != nil {
			t.Fatalf("%+v: the message is invalid: %v", c, err)
		}
		wantBytes, err := deterministic.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeAPIListener(c.host, c.vip, c.port)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !bytes.Equal(got, wantBytes) {
			t.Errorf("%+v: encoded\n%x\nmarshalled\n%x", c, got, wantBytes)
		}
	}
}

// TestAPIListenerEncodingRefusesWhatMarshalRefuses: a port out of range and a name that is
// not UTF-8 are errors, as validation and proto.Marshal make them (the message builder and
// the encoding agree on each).
func TestAPIListenerEncodingRefusesWhatMarshalRefuses(t *testing.T) {
	for _, c := range []struct {
		host string
		port uint32
	}{{"a.example", 65536}, {"a\xff.example", 80}} {
		if _, err := encodeAPIListener(c.host, "", c.port); err == nil {
			t.Errorf("%q port %d: encoded", c.host, c.port)
		}
		if l, err := apiListener(c.host, "", c.port); err == nil {
			if err := l.ValidateAll(); err == nil {
				if _, err := deterministic.Marshal(l); err == nil {
					t.Errorf("%q port %d: the message is valid and marshals; the encoding should not refuse it", c.host, c.port)
				}
			}
		}
	}
}

// encodeAPIListener is the encoding putAPIListener writes, on its own.
func encodeAPIListener(host, vip string, port uint32) ([]byte, error) {
	w := newAPIListenerWire(host, vip, port)
	return w.append(make([]byte, 0, w.size()))
}
