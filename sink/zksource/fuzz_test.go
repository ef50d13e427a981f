package zksource

import (
	"net/url"
	"testing"
)

// FuzzDubboURL decodes any znode name under a providers znode: it never panics, and a
// provider it decodes builds a ServiceEntry that istiod's validation accepts, whatever the
// interface is named.
func FuzzDubboURL(f *testing.F) {
	for _, s := range []string{
		url.QueryEscape("dubbo://10.0.0.1:20880/com.example.Svc?application=demo&version=1.0.0&group=g1&methods=a,b"),
		url.QueryEscape("tri://[::1]:50051/x?group=" + url.QueryEscape("a b/c")),
		url.QueryEscape("rest://10.0.0.1:8080/ctx?dubbo.tag=gray&k8s.io%2Fapp=web"),
		"dubbo%3A%2F%2F10.0.0.1%3A0%2Fx",
		"%ZZ",
	} {
		f.Add(s, "com.example.Svc")
	}
	f.Fuzz(func(t *testing.T, name, iface string) {
		k, ep, err := decodeProvider(name)
		if err != nil {
			return
		}
		se := buildDubbo(iface, k, []endpoint{ep})
		if _, err := encodeEntry("reg", se); err != nil && isDNSSubdomain(se.GetHosts()[0]) {
			t.Fatalf("provider %q of %q: %v", name, iface, err)
		}
	})
}

// FuzzSpringInstance decodes any instance data: it never panics, and an instance it decodes
// builds a ServiceEntry that istiod's validation accepts.
func FuzzSpringInstance(f *testing.F) {
	f.Add([]byte(`{"name":"a","id":"1","address":"10.0.0.1","port":8080,"sslPort":null,"payload":{"metadata":{"zone":"z"}}}`), "orders-api")
	f.Add([]byte(`{"address":"::1","port":1,"sslPort":65535,"payload":{"metadata":{"a/b":"c","k":1}}}`), "A.B")
	f.Add([]byte(`{"address":"10.0.0.1","enabled":false}`), "x")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		ep, err := decodeSpring(data)
		if err != nil {
			return
		}
		se, err := buildSpring(name, []endpoint{ep})
		if err != nil {
			t.Fatalf("one decoded instance %s builds nothing: %v", data, err)
		}
		if _, err := encodeEntry("reg", se); err != nil && isDNSSubdomain(se.GetHosts()[0]) {
			t.Fatalf("instance %s of %q: %v", data, name, err)
		}
	})
}
