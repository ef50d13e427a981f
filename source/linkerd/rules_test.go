package linkerd

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
)

const (
	host    = "reviews.bookinfo.svc.cluster.local"
	path    = host + ":9080"
	seName  = "bookinfo/reviews"
	seColl  = ServiceEntries
	weColl  = WorkloadEntries
	onlyOne = 300 * time.Millisecond // how long a test waits to see that nothing more comes
)

func assertKind(t *testing.T, u *Update, kind string, want ...string) {
	t.Helper()
	if u.Kind != kind {
		t.Fatalf("got %v, want %s %v", u, kind, want)
	}
	got := addrs(u)
	slices.Sort(got)
	slices.Sort(want)
	if len(want) > 0 && !slices.Equal(got, want) {
		t.Fatalf("%s of %v, want %v", kind, got, want)
	}
}

func assertNoEndpoints(t *testing.T, u *Update, exists bool) {
	t.Helper()
	if u.Kind != "no_endpoints" || u.Exists != exists {
		t.Fatalf("got %v, want no_endpoints{exists: %v}", u, exists)
	}
}

// The seed: "If the service exists and has endpoints available then the controller must send
// `add` that lists all ... of the endpoints", and a message at the start of a subscription.
func TestLinkerdFirstMessageIsAddOfEveryEndpoint(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil), ep("10.0.0.2", 0, nil), ep("2001:db8::1", 0, nil)))
		s := f.get(t, conduit, path)
		assertKind(t, s.next(), "add", "10.0.0.1:9080", "10.0.0.2:9080", "[2001:db8::1]:9080")
		s.none(onlyOne)
	})
}

// The seed: "If the service does not exist then the controller must send
// `no_endpoints{exists: false}` ASAP when a client subscribes".
func TestLinkerdNoEndpointsExistsFalseForUnknownService(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil)))
		for _, p := range []string{"unknown.example.com:80", host + ":9999", "10.9.9.9:80"} {
			assertNoEndpoints(t, f.get(t, conduit, p).next(), false)
		}
	})
}

// The seed: "If and only if the service exists but does not have any endpoints available then
// the controller SHOULD send `no_endpoints{exists: true}` when a client subscribes."
func TestLinkerdNoEndpointsExistsTrueForServiceWithoutEndpoints(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		f.put(t, seColl, seName, serviceEntry(host))
		s := f.get(t, conduit, path)
		assertNoEndpoints(t, s.next(), true)
		s.none(onlyOne)
	})
}

// The seed: "the controller must not send a `no_endpoints` message before an `add` message".
// A service written just before the subscription is answered by its `add`, never by a "does
// not exist" from a state the subscription did not read yet; and before the bridge is ready
// (its sources loading) nothing is sent, so the client keeps its last answers instead of
// being told the service does not exist and then that it does.
func TestLinkerdNoEndpointsNeverBeforeAdd(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		t.Run("written just before", func(t *testing.T) {
			f := start(t, Options{})
			for i := range 20 {
				h := "svc" + string(rune('a'+i)) + ".example.com"
				f.put(t, seColl, "ns/"+h, serviceEntry(h, ep("10.0.1.1", 0, nil)))
				assertKind(t, f.get(t, conduit, h+":9080").next(), "add", "10.0.1.1:9080")
			}
		})
		t.Run("before ready", func(t *testing.T) {
			ready := make(chan struct{})
			f := start(t, Options{Ready: ready})
			s := f.get(t, conduit, path)
			s.none(onlyOne) // the store is still empty: no answer yet
			f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil)))
			close(ready)
			assertKind(t, s.next(), "add", "10.0.0.1:9080")
		})
	})
}

// The seed: "The controller is expected to send an Update every time there is a change": the
// addresses that came in an `add`, those that went in a `remove`, a changed one again in an
// `add`; a change of nothing the client sees sends nothing.
func TestLinkerdAddAndRemoveOnChange(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil), ep("10.0.0.2", 0, nil)))
		s := f.get(t, conduit, path)
		assertKind(t, s.next(), "add", "10.0.0.1:9080", "10.0.0.2:9080")

		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil), ep("10.0.0.2", 0, nil), ep("10.0.0.3", 0, nil)))
		assertKind(t, s.next(), "add", "10.0.0.3:9080")

		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil), ep("10.0.0.3", 0, nil)))
		assertKind(t, s.next(), "remove", "10.0.0.2:9080")

		// A replacement: the new address first, then the old one's removal.
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil), ep("10.0.0.4", 0, nil)))
		assertKind(t, s.next(), "add", "10.0.0.4:9080")
		assertKind(t, s.next(), "remove", "10.0.0.3:9080")

		// A weight changed: that address again.
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 5, nil), ep("10.0.0.4", 0, nil)))
		u := s.next()
		assertKind(t, u, "add", "10.0.0.1:9080")
		if u.Addrs[0].Weight != 5 {
			t.Fatalf("weight %d, want 5", u.Addrs[0].Weight)
		}

		// Another port of the service changed: nothing for this one.
		se := serviceEntry(host, ep("10.0.0.1", 5, nil), ep("10.0.0.4", 0, nil))
		se.Ports = append(se.Ports, &networking.ServicePort{Number: 9443, Name: "tls", Protocol: "TLS"})
		f.put(t, seColl, seName, se)
		s.none(onlyOne)
	})
}

// The seed: "a `remove` that removes the last endpoint is equivalent to a
// `no_endpoints{exists: true}` message"; and no_endpoints{exists: false} "when the service
// stops existing", then an `add` when it is back.
func TestLinkerdLastEndpointGoneAndServiceGone(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil)))
		s := f.get(t, conduit, path)
		assertKind(t, s.next(), "add", "10.0.0.1:9080")
		f.put(t, seColl, seName, serviceEntry(host))
		assertNoEndpoints(t, s.next(), true)
		f.remove(t, seColl, seName)
		assertNoEndpoints(t, s.next(), false)
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.2", 0, nil)))
		assertKind(t, s.next(), "add", "10.0.0.2:9080")
		s.none(onlyOne)
	})
}

// Weights come from the endpoints' weight; unset is Istio's default, 1.
func TestLinkerdWeightsFromEndpointWeight(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 70, nil), ep("10.0.0.2", 30, nil), ep("10.0.0.3", 0, nil)))
		got := map[string]uint32{}
		for _, a := range f.get(t, conduit, path).next().Addrs {
			got[a.Addr] = a.Weight
		}
		want := map[string]uint32{"10.0.0.1:9080": 70, "10.0.0.2:9080": 30, "10.0.0.3:9080": 1}
		if !maps.Equal(got, want) {
			t.Fatalf("weights %v, want %v", got, want)
		}
	})
}

// The set's metric labels name the namespace and the service; each address carries its
// endpoint's labels.
func TestLinkerdMetricLabels(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, map[string]string{"version": "v2"})))
		f.put(t, seColl, "bookinfo/external", serviceEntry("api.example.com", ep("10.0.0.9", 0, nil)))
		u := f.get(t, conduit, path).next()
		if want := map[string]string{"namespace": "bookinfo", "service": "reviews"}; !maps.Equal(u.MetricLabels, want) {
			t.Fatalf("set labels %v, want %v", u.MetricLabels, want)
		}
		if want := map[string]string{"version": "v2"}; !maps.Equal(u.Addrs[0].MetricLabels, want) {
			t.Fatalf("address labels %v, want %v", u.Addrs[0].MetricLabels, want)
		}
		u = f.get(t, conduit, "api.example.com:9080").next()
		if want := map[string]string{"namespace": "bookinfo", "service": "api.example.com"}; !maps.Equal(u.MetricLabels, want) {
			t.Fatalf("set labels %v, want %v", u.MetricLabels, want)
		}
	})
}

// Today's API carries the TLS identity the endpoints present, from the ServiceEntry's
// subjectAltNames (a SPIFFE URI, or a DNS-like name); the seed's has no field for it.
func TestLinkerdTLSIdentityFromSubjectAltNames(t *testing.T) {
	f := start(t, Options{})
	se := serviceEntry(host, ep("10.0.0.1", 0, nil))
	se.SubjectAltNames = []string{"spiffe://cluster.local/ns/bookinfo/sa/reviews"}
	f.put(t, seColl, seName, se)
	dns := serviceEntry("db.example.com", ep("10.0.0.2", 0, nil))
	dns.SubjectAltNames = []string{"db.example.com"}
	f.put(t, seColl, "bookinfo/db", dns)

	a := f.get(t, false, path).next().Addrs[0]
	if a.TLSIdentity != "spiffe://cluster.local/ns/bookinfo/sa/reviews" || a.ServerName != host {
		t.Fatalf("identity %q server name %q", a.TLSIdentity, a.ServerName)
	}
	a = f.get(t, false, "db.example.com:9080").next().Addrs[0]
	if a.TLSIdentity != "db.example.com" || a.ServerName != "db.example.com" {
		t.Fatalf("identity %q server name %q", a.TLSIdentity, a.ServerName)
	}
	// The conduit message has no field 5: a conduit client sees none, not even as unknown.
	if a := f.get(t, true, path).next().Addrs[0]; a.UnknownFields != 0 {
		t.Fatalf("conduit client got %d bytes of fields its message does not define (today's TLS identity)", a.UnknownFields)
	}
	// A change of identity is a change of every address.
	se.SubjectAltNames = []string{"spiffe://cluster.local/ns/bookinfo/sa/reviews-v2"}
	s := f.get(t, false, path)
	s.next()
	f.put(t, seColl, seName, se)
	if a := s.next().Addrs[0]; a.TLSIdentity != "spiffe://cluster.local/ns/bookinfo/sa/reviews-v2" {
		t.Fatalf("identity after the change %q", a.TLSIdentity)
	}
}

// WorkloadEntries of the ServiceEntry's namespace that its workloadSelector selects are
// endpoints, on the port their ports map the service port to; one that comes or goes, or
// changes labels, is an add or a remove.
func TestLinkerdWorkloadEntriesSelected(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		se := serviceEntry(host)
		se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "reviews"}}
		f.put(t, seColl, seName, se)
		f.put(t, weColl, "bookinfo/vm-1", &networking.WorkloadEntry{Address: "10.1.0.1", Labels: map[string]string{"app": "reviews"}, Ports: map[string]uint32{"http": 8080}})
		f.put(t, weColl, "other/vm-9", &networking.WorkloadEntry{Address: "10.1.0.9", Labels: map[string]string{"app": "reviews"}})
		s := f.get(t, conduit, path)
		assertKind(t, s.next(), "add", "10.1.0.1:8080")
		f.put(t, weColl, "bookinfo/vm-2", &networking.WorkloadEntry{Address: "10.1.0.2", Labels: map[string]string{"app": "reviews"}, Weight: 3})
		assertKind(t, s.next(), "add", "10.1.0.2:9080")
		f.put(t, weColl, "bookinfo/vm-1", &networking.WorkloadEntry{Address: "10.1.0.1", Labels: map[string]string{"app": "ratings"}})
		assertKind(t, s.next(), "remove", "10.1.0.1:8080")
		f.remove(t, weColl, "bookinfo/vm-2")
		assertNoEndpoints(t, s.next(), true)
	})
}

// DNS resolution is left to the client: a DNS ServiceEntry is answered as unknown here, so
// that the client resolves it itself; so is a NONE one without endpoints.
func TestLinkerdDNSResolutionLeftToClient(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		dns := serviceEntry("api.example.com")
		dns.Resolution = networking.ServiceEntry_DNS
		f.put(t, seColl, "bookinfo/api", dns)
		none := serviceEntry("passthrough.example.com")
		none.Resolution = networking.ServiceEntry_NONE
		f.put(t, seColl, "bookinfo/passthrough", none)
		assertNoEndpoints(t, f.get(t, conduit, "api.example.com:9080").next(), false)
		assertNoEndpoints(t, f.get(t, conduit, "passthrough.example.com:9080").next(), false)
	})
}

// The path forms: host:port in any case, a fully qualified name's trailing dot, a host without
// a port (80), and an address of the ServiceEntry (its VIP).
func TestLinkerdPathForms(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		se := serviceEntry(host, ep("10.0.0.1", 0, nil))
		se.Addresses = []string{"240.0.0.1"}
		se.Ports = append(se.Ports, &networking.ServicePort{Number: 80, Name: "http-80"})
		f.put(t, seColl, seName, se)
		for p, want := range map[string]string{
			"Reviews.Bookinfo.svc.cluster.local:9080": "10.0.0.1:9080",
			host + ".:9080":  "10.0.0.1:9080",
			host:             "10.0.0.1:80",
			"240.0.0.1:9080": "10.0.0.1:9080",
		} {
			u := f.get(t, conduit, p).next()
			assertKind(t, u, "add", want)
			if u.MetricLabels["service"] != "reviews" {
				t.Fatalf("%s: service label %q", p, u.MetricLabels["service"])
			}
		}
	})
}

// A path that is not host:port is refused InvalidArgument, which Linkerd proxies take as
// "not resolvable here".
func TestLinkerdInvalidPathIsInvalidArgument(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		for _, p := range []string{"", "host:0", "host:99999", "bad host:80", "a:b:c"} {
			err := f.get(t, conduit, p).end()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%q: %v, want InvalidArgument", p, err)
			}
		}
	})
}

// The seed: an update "at least once every ADDRESS_UPDATE_INTERVAL ... If no service
// discovery updates have taken place, the controller can simply send an empty `add`."
func TestLinkerdKeepaliveEmptyAdd(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		const interval = 200 * time.Millisecond
		const early = interval * 3 / 4 // the client's clock starts a little after the server's
		f := start(t, Options{KeepaliveInterval: interval})
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil)))
		s := f.get(t, conduit, path)
		assertKind(t, s.next(), "add", "10.0.0.1:9080")
		last := time.Now()
		for range 2 {
			u := s.next()
			if u.Kind != "add" || len(u.Addrs) != 0 || len(u.MetricLabels) != 0 {
				t.Fatalf("keep-alive %v, want an empty add", u)
			}
			if since := time.Since(last); since < early {
				t.Fatalf("keep-alive %s after the last message, before the interval %s", since, interval)
			}
			last = time.Now()
		}
		// A change resets the interval: the next keep-alive comes an interval after it.
		f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.2", 0, nil)))
		u := s.next()
		for len(u.Addrs) == 0 { // a keep-alive that went before the change
			u = s.next()
		}
		assertKind(t, u, "add", "10.0.0.2:9080")
		assertKind(t, s.next(), "remove", "10.0.0.1:9080")
		changed := time.Now()
		if u := s.next(); u.Kind != "add" || len(u.Addrs) != 0 {
			t.Fatalf("got %v, want the keep-alive", u)
		}
		if since := time.Since(changed); since < early {
			t.Fatalf("keep-alive %s after a change, before the interval %s", since, interval)
		}
	})
}

// The bridge stopping ends every stream with Unavailable.
func TestLinkerdStopEndsStreamsUnavailable(t *testing.T) {
	f := start(t, Options{})
	s := f.get(t, false, path)
	s.next()
	f.srv.Stop()
	if err := s.end(); status.Code(err) != codes.Unavailable {
		t.Fatalf("ended with %v, want Unavailable", err)
	}
}

// A host listed by several ServiceEntries is the oldest one's (then the first by name), as in
// Istio; when it goes, the next one's answer replaces it: its addresses, its labels.
func TestLinkerdOldestServiceEntryDefinesHost(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		older := resource("a/reviews", serviceEntry(host, ep("10.0.0.1", 0, nil)))
		older.Metadata.CreateTime = timestamppb.New(time.Unix(1000, 0))
		newer := resource("b/reviews", serviceEntry(host, ep("10.0.0.2", 0, nil)))
		newer.Metadata.CreateTime = timestamppb.New(time.Unix(2000, 0))
		if _, err := f.store.Apply("test", store.Update{Collection: seColl, Resources: []*mcpapi.Resource{newer, older}}); err != nil {
			t.Fatal(err)
		}
		s := f.get(t, conduit, path)
		u := s.next()
		assertKind(t, u, "add", "10.0.0.1:9080")
		if u.MetricLabels["namespace"] != "a" {
			t.Fatalf("labels %v", u.MetricLabels)
		}
		f.remove(t, seColl, "a/reviews")
		u = s.next()
		assertKind(t, u, "add", "10.0.0.2:9080")
		if u.MetricLabels["namespace"] != "b" {
			t.Fatalf("labels %v", u.MetricLabels)
		}
		assertKind(t, s.next(), "remove", "10.0.0.1:9080")
	})
}

// An endpoint's port is its own port of the service port's name, else the service port's
// targetPort, else the service port; a WorkloadEntry whose address is a DNS name is left out
// (a TcpAddress is an IP).
func TestLinkerdEndpointPorts(t *testing.T) {
	forBoth(t, func(t *testing.T, conduit bool) {
		f := start(t, Options{})
		se := serviceEntry(host)
		se.Ports[0].TargetPort = 8080
		se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "reviews"}}
		f.put(t, seColl, seName, se)
		app := map[string]string{"app": "reviews"}
		f.put(t, weColl, "bookinfo/vm-1", &networking.WorkloadEntry{Address: "10.0.0.1", Labels: app, Ports: map[string]uint32{"http": 8081}})
		f.put(t, weColl, "bookinfo/vm-2", &networking.WorkloadEntry{Address: "10.0.0.2", Labels: app})
		f.put(t, weColl, "bookinfo/vm-3", &networking.WorkloadEntry{Address: "vm.example.com", Labels: app})
		assertKind(t, f.get(t, conduit, path).next(), "add", "10.0.0.1:8081", "10.0.0.2:8080")
	})
}
