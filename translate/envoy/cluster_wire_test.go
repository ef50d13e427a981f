package envoy

import (
	"bytes"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// The plain cluster written from parts is byte for byte the one the message path encodes, for
// every protocol and for names of every length (a length over 127 takes two bytes).
func TestPlainClusterEncodingIsTheMessagePath(t *testing.T) {
	names := []string{
		"outbound|80||a",
		"outbound|9080||reviews.bookinfo.svc.cluster.local",
		"outbound|8080|v1|" + strings.Repeat("long-label.", 20) + "example.com",
		"outbound|443||bücher.example",
	}
	for proto := range plainClusterParts {
		if err := plainClusterParts[proto].err; err != nil {
			t.Fatalf("protocol %d: no parts: %v", proto, err)
		}
		for _, name := range names {
			want, err := plainClusterByMessage(name, protocol(proto))
			if err != nil {
				t.Fatal(err)
			}
			b := &hostBuild{host: "example.com", se: &serviceEntry{resolution: networking.ServiceEntry_STATIC}}
			b.build = newBuild(NewTranslator(TranslatorOptions{LazyProxyless: true}), kindServiceEntry, "ns/example")
			if !b.plainCluster(port{number: 80, protocol: protocol(proto)}) {
				t.Fatalf("protocol %d: the plain cluster is not written from parts", proto)
			}
			b.putPlainCluster(name, protocol(proto))
			if len(b.u.outputs) != 1 {
				t.Fatalf("protocol %d, %s: %d outputs, faults %v", proto, name, len(b.u.outputs), b.fs)
			}
			if got := b.u.outputs[0].value(); !bytes.Equal(got, want) {
				t.Errorf("protocol %d, %s:\nfrom parts   %x\nmessage path %x", proto, name, got, want)
			}
		}
	}
}

// Only the common cluster is written from parts: a DestinationRule, a resolution other than
// STATIC, or the proxyless outputs (which need the message) take the message path.
func TestPlainClusterOnlyWhereItApplies(t *testing.T) {
	for _, c := range []struct {
		what       string
		resolution networking.ServiceEntry_Resolution
		dr         *destinationRule
		proxyless  bool
		want       bool
	}{
		{"STATIC", networking.ServiceEntry_STATIC, nil, false, true},
		{"a DestinationRule", networking.ServiceEntry_STATIC, &destinationRule{}, false, false},
		{"DNS", networking.ServiceEntry_DNS, nil, false, false},
		{"NONE", networking.ServiceEntry_NONE, nil, false, false},
		{"proxyless outputs built", networking.ServiceEntry_STATIC, nil, true, false},
	} {
		tr := NewTranslator(TranslatorOptions{LazyProxyless: !c.proxyless})
		b := &hostBuild{host: "example.com", se: &serviceEntry{resolution: c.resolution}, dr: c.dr}
		b.build = newBuild(tr, kindServiceEntry, "ns/example")
		if got := b.plainCluster(port{number: 80, protocol: protoHTTP}); got != c.want {
			t.Errorf("%s: from parts %v, want %v", c.what, got, c.want)
		}
	}
}
