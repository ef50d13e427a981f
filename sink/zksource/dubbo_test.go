package zksource

import (
	"fmt"
	"maps"
	"testing"

	"github.com/go-zookeeper/zk"
)

const demoHost = "com.example.demoservice.v-1-0-0.g-g1.dubbo"

// Providers registered as Dubbo's registry writes them become one ServiceEntry's endpoints;
// one that leaves is removed from it, and the ServiceEntry goes with the last one.
func TestDubboProvidersRegisteredAndRemoved(t *testing.T) {
	e := newEnv(t)
	r := e.run(nil)
	r.ready(t)
	name := "reg/" + demoHost
	params := []string{"version", "1.0.0", "group", "g1", "methods", "sayHello,sayBye"}

	a := e.register("/dubbo", "com.example.DemoService", providerURL("dubbo", "10.0.0.1:20880", "com.example.DemoService", params...), zk.FlagEphemeral)
	e.waitFor(r, "first provider served", e.hasEndpoints(name, "10.0.0.1 dubbo-20880=20880"))
	se := e.entries("zookeeper:reg")[name]
	if got := se.GetHosts(); len(got) != 1 || got[0] != demoHost {
		t.Fatalf("hosts %q, want [%s]", got, demoHost)
	}
	if p := se.GetPorts(); len(p) != 1 || p[0].GetNumber() != 20880 || p[0].GetName() != "dubbo-20880" || p[0].GetProtocol() != "TCP" {
		t.Fatalf("ports %v, want dubbo-20880 TCP", p)
	}
	if se.GetResolution().String() != "STATIC" || se.GetLocation().String() != "MESH_INTERNAL" || len(se.GetExportTo()) != 0 {
		t.Fatalf("resolution %v, location %v, exportTo %v", se.GetResolution(), se.GetLocation(), se.GetExportTo())
	}
	labels := se.GetEndpoints()[0].GetLabels()
	want := map[string]string{"application": "demo", "group": "g1", "version": "1.0.0", "side": "provider", "interface": "com.example.DemoService"}
	if !maps.Equal(labels, want) {
		t.Fatalf("labels %v, want %v (methods=a,b is not a label value)", labels, want)
	}

	b := e.register("/dubbo", "com.example.DemoService", providerURL("dubbo", "10.0.0.2:20880", "com.example.DemoService", params...), zk.FlagEphemeral)
	e.waitFor(r, "second provider served", e.hasEndpoints(name, "10.0.0.1 dubbo-20880=20880", "10.0.0.2 dubbo-20880=20880"))

	// A provider on another port: the service has both ports, and each endpoint maps both to
	// its own.
	c := e.register("/dubbo", "com.example.DemoService", providerURL("dubbo", "10.0.0.3:20881", "com.example.DemoService", params...), zk.FlagEphemeral)
	e.waitFor(r, "provider on another port served", e.hasEndpoints(name,
		"10.0.0.1 dubbo-20880=20880,dubbo-20881=20880",
		"10.0.0.2 dubbo-20880=20880,dubbo-20881=20880",
		"10.0.0.3 dubbo-20880=20881,dubbo-20881=20881"))

	e.remove(a)
	e.waitFor(r, "removed provider gone", e.hasEndpoints(name,
		"10.0.0.2 dubbo-20880=20880,dubbo-20881=20880",
		"10.0.0.3 dubbo-20880=20881,dubbo-20881=20881"))
	e.remove(b)
	e.remove(c)
	e.waitFor(r, "ServiceEntry gone with its last provider", e.absent(name))
	if f := r.Faults(); len(f) != 0 {
		t.Fatalf("faults %v", f)
	}
	e.waitFor(r, "stats of an empty registry", func() error { // published just after the write
		if st := r.Stats(); !st.Connected || st.Services != 0 || st.Instances != 0 || st.Connects != 1 || st.LastSync.IsZero() {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// Each group, version and protocol of an interface is a service of its own; a group-less,
// version-less dubbo provider is the interface's plain host.
func TestDubboGroupsVersionsAndProtocolsAreServicesOfTheirOwn(t *testing.T) {
	e := newEnv(t)
	r := e.run(nil)
	r.ready(t)
	iface := "org.apache.dubbo.samples.Greeter"
	e.register("/dubbo", iface, providerURL("dubbo", "10.0.1.1:20880", iface), zk.FlagEphemeral)
	e.register("/dubbo", iface, providerURL("tri", "10.0.1.1:50051", iface), zk.FlagEphemeral)
	e.register("/dubbo", iface, providerURL("dubbo", "10.0.1.2:20880", iface, "version", "2.0"), zk.FlagEphemeral)
	e.register("/dubbo", iface, providerURL("rest", "10.0.1.3:8080", iface, "group", "Blue_Team"), zk.FlagEphemeral)
	base := "reg/org.apache.dubbo.samples.greeter."
	e.waitFor(r, "four services", func() error {
		got := e.entries("zookeeper:reg")
		for name, proto := range map[string]string{
			base + "dubbo": "TCP", base + "tri.dubbo": "GRPC", base + "v-2-0.dubbo": "TCP", base + "g-blue-team.rest.dubbo": "HTTP",
		} {
			se, ok := got[name]
			if !ok {
				return fmt.Errorf("no %s among %d", name, len(got))
			}
			if p := se.GetPorts()[0].GetProtocol(); p != proto {
				return fmt.Errorf("%s: protocol %s, want %s", name, p, proto)
			}
		}
		if len(got) != 4 {
			return fmt.Errorf("%d services, want 4", len(got))
		}
		return nil
	})
}

// Two interfaces whose names differ only in case would have one host: the first by key is
// served, the other is a fault naming both.
func TestDubboHostCollisionIsAFault(t *testing.T) {
	e := newEnv(t)
	r := e.run(nil)
	r.ready(t)
	e.register("/dubbo", "com.example.Foo", providerURL("dubbo", "10.0.2.1:20880", "com.example.Foo"), zk.FlagEphemeral)
	e.register("/dubbo", "com.example.foo", providerURL("dubbo", "10.0.2.2:20880", "com.example.foo"), zk.FlagEphemeral)
	e.waitFor(r, "collision reported", func() error {
		if f := faultsMatching(r, "/dubbo/com.example.foo/providers: ", "host com.example.foo.dubbo is also that of /dubbo/com.example.Foo/providers"); len(f) != 1 {
			return fmt.Errorf("no collision fault")
		}
		return nil
	})
	e.waitFor(r, "first served", e.hasEndpoints("reg/com.example.foo.dubbo", "10.0.2.1 dubbo-20880=20880"))
}

// The Dubbo root may appear after the source started: it is watched until it exists.
func TestDubboRootCreatedLaterIsFollowed(t *testing.T) {
	e := newEnv(t)
	r := e.run(func(o *Options, _ *Source) { o.DubboRoot = "/later/dubbo" })
	r.ready(t)
	if n := len(e.entries("zookeeper:reg")); n != 0 {
		t.Fatalf("%d services before the root exists", n)
	}
	e.register("/later/dubbo", "com.example.Late", providerURL("dubbo", "10.0.3.1:20880", "com.example.Late"), zk.FlagEphemeral)
	e.waitFor(r, "provider under the new root served", e.hasEndpoints("reg/com.example.late.dubbo", "10.0.3.1 dubbo-20880=20880"))
	// The interface's providers znode removed whole: its services go.
	e.retry("delete", func() error {
		for _, p := range []string{"/later/dubbo/com.example.Late/providers"} {
			kids, _, err := e.client.Children(p)
			if err != nil {
				return err
			}
			for _, k := range kids {
				if err := e.client.Delete(p+"/"+k, -1); err != nil {
					return err
				}
			}
			if err := e.client.Delete(p, -1); err != nil {
				return err
			}
		}
		return nil
	})
	e.waitFor(r, "service gone with its providers znode", e.absent("reg/com.example.late.dubbo"))
	e.register("/later/dubbo", "com.example.Late", providerURL("dubbo", "10.0.3.2:20880", "com.example.Late"), zk.FlagEphemeral)
	e.waitFor(r, "providers znode created again is followed", e.hasEndpoints("reg/com.example.late.dubbo", "10.0.3.2 dubbo-20880=20880"))
}
