package zksource

import (
	"fmt"
	"maps"
	"testing"
)

// springJSON is an instance as Spring Cloud ZooKeeper registers it (Curator's ServiceInstance
// with Spring's ZookeeperInstance payload), with the given address, ports and metadata.
func springJSON(name, id, address string, port int, sslPort, metadata string) string {
	return fmt.Sprintf(`{"name":%q,"id":%q,"address":%q,"port":%d,"sslPort":%s,`+
		`"payload":{"@class":"org.springframework.cloud.zookeeper.discovery.ZookeeperInstance","id":%q,"name":%q,"metadata":%s},`+
		`"registrationTimeUTC":1700000000000,"serviceType":"DYNAMIC","uriSpec":{"parts":[{"value":"scheme","variable":true},{"value":"://","variable":false}]}}`,
		name, id, address, port, sslPort, name, name, metadata)
}

// A Spring Cloud instance becomes an endpoint of its service's ServiceEntry; a change of its
// data is followed; removed, the ServiceEntry goes.
func TestSpringCloudInstanceRegisteredChangedAndRemoved(t *testing.T) {
	e := newEnv(t)
	r := e.run(nil)
	r.ready(t)
	name := "reg/orders-api.spring"
	p := e.registerSpring("/services", "orders-api", "6f1c-01", springJSON("orders-api", "6f1c-01", "10.1.0.1", 8080, "null",
		`{"zone":"eu-west-1a","instance_status":"UP","not a label":"x","build":"2024-01-01T10:00:00Z"}`))
	e.waitFor(r, "instance served", e.hasEndpoints(name, "10.1.0.1 http-8080=8080"))
	se := e.entries("zookeeper:reg")[name]
	if h := se.GetHosts(); len(h) != 1 || h[0] != "orders-api.spring" {
		t.Fatalf("hosts %q", h)
	}
	if port := se.GetPorts()[0]; port.GetProtocol() != "HTTP" || port.GetNumber() != 8080 {
		t.Fatalf("port %v, want 8080 HTTP", port)
	}
	want := map[string]string{"zone": "eu-west-1a", "instance_status": "UP"}
	if got := se.GetEndpoints()[0].GetLabels(); !maps.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}

	// Its data changed: another port, an sslPort, other metadata.
	e.set(p, springJSON("orders-api", "6f1c-01", "10.1.0.1", 8081, "8443", `{"zone":"eu-west-1b"}`))
	e.waitFor(r, "changed instance followed", e.hasEndpoints(name, "10.1.0.1 http-8081=8081,https-8443=8443"))
	if got := e.entries("zookeeper:reg")[name].GetEndpoints()[0].GetLabels(); !maps.Equal(got, map[string]string{"zone": "eu-west-1b"}) {
		t.Fatalf("labels after the change %v", got)
	}

	// A second instance without an sslPort: the service has no HTTPS port any more.
	q := e.registerSpring("/services", "orders-api", "6f1c-02", springJSON("orders-api", "6f1c-02", "10.1.0.2", 8081, "null", `{}`))
	e.waitFor(r, "second instance served", e.hasEndpoints(name, "10.1.0.1 http-8081=8081", "10.1.0.2 http-8081=8081"))

	e.remove(p)
	e.waitFor(r, "removed instance gone", e.hasEndpoints(name, "10.1.0.2 http-8081=8081"))
	e.remove(q)
	e.waitFor(r, "ServiceEntry gone with its last instance", e.absent(name))
	if f := r.Faults(); len(f) != 0 {
		t.Fatalf("faults %v", f)
	}
}

// Malformed entries are faults naming their znodes and what is wrong; the valid ones of the
// same services are served, and a fault goes with its znode.
func TestMalformedEntriesAreFaultsAndTheRestIsServed(t *testing.T) {
	e := newEnv(t)
	iface := "com.example.Mixed"
	e.register("/dubbo", iface, providerURL("dubbo", "10.2.0.1:20880", iface), 0)
	dir := "/dubbo/com.example.Mixed/providers/"
	bad := map[string]string{ // znode name → the fault's words
		"dubbo%3A%2F%2F10.2.0.2%3A20880%2Fx%3Fa%3D%ZZ": "not URL-encoded",
		"dubbo%3A%2F%2Fhost.example%3A20880%2Fx":       `address "host.example" is not an IP address`,
		"dubbo%3A%2F%2F10.2.0.3%2Fx":                   "no port",
		"dubbo%3A%2F%2F10.2.0.4%3A70000%2Fx":           `port "70000"`,
		"just-a-name":                                  "is not PROTOCOL://IP:PORT",
	}
	for n := range bad {
		e.create(dir+n, nil, 0)
	}
	e.registerSpring("/services", "billing", "ok", springJSON("billing", "ok", "10.3.0.1", 9090, "null", `{}`))
	badJSON := e.registerSpring("/services", "billing", "broken", `{"address":"10.3.0.2","port":`)
	e.registerSpring("/services", "billing", "named", springJSON("billing", "named", "billing-1.internal", 9090, "null", `{}`))
	e.registerSpring("/services", "billing", "off", `{"address":"10.3.0.4","port":9090,"enabled":false}`)

	r := e.run(nil)
	r.ready(t)
	e.waitFor(r, "valid provider served", e.hasEndpoints("reg/com.example.mixed.dubbo", "10.2.0.1 dubbo-20880=20880"))
	e.waitFor(r, "valid instance served", e.hasEndpoints("reg/billing.spring", "10.3.0.1 http-9090=9090"))
	for n, words := range bad {
		if got := faultsMatching(r, dir+n+": ", words); len(got) != 1 {
			t.Errorf("no fault for %s saying %q; faults %v", dir+n, words, r.Faults())
		}
	}
	if got := faultsMatching(r, badJSON+": ", "not Curator's ServiceInstance JSON"); len(got) != 1 {
		t.Errorf("no fault for %s; faults %v", badJSON, r.Faults())
	}
	if got := faultsMatching(r, "/services/billing/named: ", "prefer-ip-address"); len(got) != 1 {
		t.Errorf("no fault for the instance registered by name; faults %v", r.Faults())
	}
	if n := len(r.Faults()); n != len(bad)+2 {
		t.Errorf("%d faults, want %d (a disabled instance is not one): %v", n, len(bad)+2, r.Faults())
	}

	// Fixed: the fault goes.
	e.set(badJSON, springJSON("billing", "broken", "10.3.0.2", 9090, "null", `{}`))
	e.waitFor(r, "fixed instance served", e.hasEndpoints("reg/billing.spring", "10.3.0.1 http-9090=9090", "10.3.0.2 http-9090=9090"))
	for n := range bad {
		e.remove(dir + n)
	}
	e.waitFor(r, "faults gone with their znodes", func() error {
		if f := r.Faults(); len(f) != 1 {
			return fmt.Errorf("faults %v, want the named instance's only", f)
		}
		return nil
	})
}
