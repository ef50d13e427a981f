package zksource

import (
	"maps"
	"net/url"
	"strings"
	"testing"

	"github.com/mcpbridge/mcpbridge/store"
)

func TestHostLabelIsAValidLabelOfAnyText(t *testing.T) {
	long := strings.Repeat("Segment", 12)
	for in, want := range map[string]string{
		"DemoService":     "demoservice",
		"1.0.0-SNAPSHOT":  "1-0-0-snapshot",
		"_Inner$Service_": "inner-service",
		"":                "x" + hash8(""),
		"世界":              "x" + hash8("世界"),
		long:              strings.TrimRight(strings.ToLower(long)[:54], "-") + "-" + hash8(long),
	} {
		got := hostLabel(in)
		if got != want {
			t.Errorf("hostLabel(%q) = %q, want %q", in, got, want)
		}
		if !isDNSLabel(got) {
			t.Errorf("hostLabel(%q) = %q is not a DNS-1123 label", in, got)
		}
	}
	if hostLabel(long+"a") == hostLabel(long+"b") {
		t.Error("two long texts that differ at their ends give one label")
	}
}

func TestDubboHostNamesInterfaceVersionGroupAndProtocol(t *testing.T) {
	for _, c := range []struct {
		iface string
		k     dubboKey
		want  string
	}{
		{"com.example.DemoService", dubboKey{scheme: "dubbo"}, "com.example.demoservice.dubbo"},
		{"com.example.DemoService", dubboKey{version: "1.0.0", group: "g1", scheme: "dubbo"}, "com.example.demoservice.v-1-0-0.g-g1.dubbo"},
		{"com.example.DemoService", dubboKey{version: "2", scheme: "tri"}, "com.example.demoservice.v-2.tri.dubbo"},
		{"com.example.DemoService", dubboKey{group: "Blue Team", scheme: "rest"}, "com.example.demoservice.g-blue-team.rest.dubbo"},
	} {
		if got := dubboHost(c.iface, c.k); got != c.want {
			t.Errorf("dubboHost(%q, %+v) = %q, want %q", c.iface, c.k, got, c.want)
		}
	}
	if got := springHost("Orders.API"); got != "orders.api.spring" {
		t.Errorf("springHost = %q", got)
	}
}

func TestDecodeProviderReadsDubbosURL(t *testing.T) {
	u := "dubbo://[fd00::5]:20880/com.example.Svc?application=my app&version=1.0&group=g&methods=a,b&tag=x&tag=y&dubbo.tag=gray&bad key=1"
	k, ep, err := decodeProvider(url.QueryEscape(u))
	if err != nil {
		t.Fatal(err)
	}
	if k != (dubboKey{group: "g", version: "1.0", scheme: "dubbo"}) {
		t.Fatalf("key %+v", k)
	}
	if ep.address != "fd00::5" || ep.port != 20880 {
		t.Fatalf("endpoint %+v", ep)
	}
	// "my app" has a space, methods a comma, tag is given twice, "bad key" a space.
	want := map[string]string{"version": "1.0", "group": "g", "dubbo.tag": "gray"}
	if !maps.Equal(ep.labels, want) {
		t.Fatalf("labels %v, want %v", ep.labels, want)
	}
	k, _, err = decodeProvider(url.QueryEscape("TRI://10.0.0.1:50051/x"))
	if err != nil || k.scheme != "tri" {
		t.Fatalf("upper-case scheme: %+v, %v", k, err)
	}
}

func TestDecodeSpringReadsCuratorsInstance(t *testing.T) {
	ep, err := decodeSpring([]byte(`{"name":"a","id":"1","address":"10.0.0.1","port":8080,"sslPort":8443,
		"payload":{"@class":"x","metadata":{"zone":"z1","n":3,"k8s.io/app":"web","Bad Key":"v"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"zone": "z1", "k8s.io/app": "web"}
	if ep.address != "10.0.0.1" || ep.port != 8080 || ep.sslPort != 8443 || !maps.Equal(ep.labels, want) {
		t.Fatalf("endpoint %+v", ep)
	}
	for data, words := range map[string]string{
		``:                                    "no instance data",
		`[]`:                                  "not Curator's ServiceInstance JSON",
		`{"address":"10.0.0.1"}`:              "neither a port nor an sslPort",
		`{"address":"10.0.0.1","port":0}`:     "port 0 is not 1-65535",
		`{"address":"10.0.0.1","port":1e9}`:   "not Curator's",
		`{"address":"a.b","port":1}`:          "prefer-ip-address",
		`{"address":"fe80::1%eth0","port":1}`: "not an IP address",
	} {
		if _, err := decodeSpring([]byte(data)); err == nil || !strings.Contains(err.Error(), words) {
			t.Errorf("decodeSpring(%s): %v, want %q", data, err, words)
		}
	}
}

// The built ServiceEntries pass istiod's validation, ports mapped on every endpoint.
func TestBuiltServiceEntriesValidate(t *testing.T) {
	eps := []endpoint{
		{address: "10.0.0.2", port: 20881, labels: map[string]string{"a": "1"}},
		{address: "10.0.0.1", port: 20880},
		{address: "10.0.0.1", port: 20880, labels: map[string]string{"dup": "dropped"}},
	}
	se := buildDubbo("com.example.Svc", dubboKey{scheme: "dubbo"}, eps)
	enc, err := encodeEntry("reg", se)
	if err != nil {
		t.Fatal(err)
	}
	if !store.EntryOf(enc).BodyChecked() {
		t.Errorf("the encoding of a ServiceEntry marshalled here is not vouched for")
	}
	if len(se.GetEndpoints()) != 2 || se.GetEndpoints()[0].GetAddress() != "10.0.0.1" || se.GetEndpoints()[0].GetLabels() != nil {
		t.Fatalf("endpoints %v", se.GetEndpoints())
	}
	spring, err := buildSpring("web", []endpoint{{address: "10.0.0.1", port: 8443, sslPort: 8443}, {address: "10.0.0.2", port: 80, sslPort: 443}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := encodeEntry("reg", spring); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range spring.GetPorts() {
		names = append(names, p.GetName())
	}
	if strings.Join(names, " ") != "http-80 http-8443 https-443" {
		t.Fatalf("ports %q: an HTTPS number that is an HTTP one is left out", names)
	}
	if _, err := buildSpring("web", []endpoint{{address: "10.0.0.1", port: 80}, {address: "10.0.0.2", sslPort: 443}}); err == nil {
		t.Fatal("instances without a common kind of port built a ServiceEntry")
	}
}
