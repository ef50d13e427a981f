package envoy

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	"pgregory.net/rapid"
)

// TestScanServiceEntryReadsWhatUnmarshalReads: for random ServiceEntries, and for two encodings
// one after the other (which proto merges: repeated fields appended, the last scalar winning,
// messages merged), the scan reads the hosts, addresses, ports, resolution, workload selector and number
// of endpoints that proto.Unmarshal reads.
func TestScanServiceEntryReadsWhatUnmarshalReads(t *testing.T) {
	text := rapid.StringMatching(`[a-z0-9.*-]{0,8}`)
	gen := rapid.Custom(func(rt *rapid.T) *networking.ServiceEntry {
		se := &networking.ServiceEntry{
			Hosts:           rapid.SliceOfN(text, 0, 3).Draw(rt, "hosts"),
			Resolution:      networking.ServiceEntry_Resolution(rapid.IntRange(0, 4).Draw(rt, "resolution")),
			Addresses:       rapid.SliceOfN(text, 0, 2).Draw(rt, "addresses"),
			ExportTo:        rapid.SliceOfN(text, 0, 2).Draw(rt, "exportTo"),
			SubjectAltNames: rapid.SliceOfN(text, 0, 2).Draw(rt, "subjectAltNames"),
		}
		for range rapid.IntRange(0, 3).Draw(rt, "ports") {
			se.Ports = append(se.Ports, &networking.ServicePort{
				Number: rapid.Uint32().Draw(rt, "number"), TargetPort: rapid.Uint32().Draw(rt, "target"),
				Name: text.Draw(rt, "name"), Protocol: text.Draw(rt, "protocol")})
		}
		for range rapid.IntRange(0, 3).Draw(rt, "endpoints") {
			se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{Address: text.Draw(rt, "address"),
				Labels: rapid.MapOfN(text, text, 0, 2).Draw(rt, "labels")})
		}
		if rapid.Bool().Draw(rt, "selector") {
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: rapid.MapOfN(text, text, 0, 3).Draw(rt, "selector labels")}
		}
		return se
	})
	rapid.Check(t, func(rt *rapid.T) {
		b, err := proto.Marshal(gen.Draw(rt, "first"))
		if err != nil {
			rt.Fatal(err)
		}
		if rapid.Bool().Draw(rt, "merged") {
			second, err := proto.Marshal(gen.Draw(rt, "second"))
			if err != nil {
				rt.Fatal(err)
			}
			b = append(b, second...)
		}
		var want networking.ServiceEntry
		if err := proto.Unmarshal(b, &want); err != nil {
			rt.Fatal(err)
		}
		var got scanned
		scanServiceEntryInto(b, &got)
		var ports []servicePort
		for _, p := range want.GetPorts() {
			ports = append(ports, servicePort{number: p.GetNumber(), target: p.GetTargetPort(), name: p.GetName(), protocol: p.GetProtocol()})
		}
		switch {
		case !slices.Equal(got.hosts, want.GetHosts()):
			rt.Fatalf("hosts %q, want %q", got.hosts, want.GetHosts())
		case !slices.Equal(got.addresses, want.GetAddresses()):
			rt.Fatalf("addresses %q, want %q", got.addresses, want.GetAddresses())
		case !slices.Equal(got.ports, ports):
			rt.Fatalf("ports %+v, want %+v", got.ports, ports)
		case got.resolution != want.GetResolution():
			rt.Fatalf("resolution %v, want %v", got.resolution, want.GetResolution())
		case got.endpoints != len(want.GetEndpoints()):
			rt.Fatalf("%d endpoints, want %d", got.endpoints, len(want.GetEndpoints()))
		case !maps.Equal(got.selector, want.GetWorkloadSelector().GetLabels()):
			rt.Fatalf("selector %v, want %v", got.selector, want.GetWorkloadSelector().GetLabels())
		case !slices.Equal(got.sans, want.GetSubjectAltNames()):
			rt.Fatalf("subjectAltNames %q, want %q", got.sans, want.GetSubjectAltNames())
		}
	})
}

// TestScanEndpointsReadsWhatUnmarshalReads: a ServiceEntry's inline endpoints read from its
// encoding are the workloads its decoded endpoints make, merged encodings included (a map key
// given twice keeps its last value); read into a slice an earlier build gave back (emptied,
// as the builds' pool keeps them, with room for labels), nothing of the earlier ones stays.
func TestScanEndpointsReadsWhatUnmarshalReads(t *testing.T) {
	text := rapid.StringMatching(`[a-z0-9./-]{0,6}`)
	rapid.Check(t, func(rt *rapid.T) {
		var earlier, b []byte
		for range rapid.IntRange(0, 2).Draw(rt, "earlier encodings") {
			se := &networking.ServiceEntry{Hosts: []string{"b.example"}}
			for range rapid.IntRange(0, 4).Draw(rt, "earlier endpoints") {
				se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
					Address: text.Draw(rt, "earlier address"), Labels: rapid.MapOfN(text, text, 0, 4).Draw(rt, "earlier labels")})
			}
			enc, err := proto.Marshal(se)
			if err != nil {
				rt.Fatal(err)
			}
			earlier = append(earlier, enc...)
		}
		pooled := emptied(appendEndpoints(nil, earlier, kindServiceEntry, "ns/earlier"))
		for _, w := range pooled[:cap(pooled)] {
			if w.address != "" || slices.ContainsFunc(w.labels[:cap(w.labels)], func(l label) bool { return l != label{} }) {
				rt.Fatalf("an emptied workload keeps %+v", w)
			}
		}
		for range rapid.IntRange(1, 2).Draw(rt, "encodings") {
			se := &networking.ServiceEntry{Hosts: []string{"a.example"}}
			for range rapid.IntRange(0, 4).Draw(rt, "endpoints") {
				se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
					Address: text.Draw(rt, "address"), Network: text.Draw(rt, "network"),
					Locality: text.Draw(rt, "locality"), Weight: rapid.Uint32().Draw(rt, "weight"),
					Labels: rapid.MapOfN(text, text, 0, 3).Draw(rt, "labels"),
					Ports:  rapid.MapOfN(text, rapid.Uint32(), 0, 2).Draw(rt, "ports"),
				})
			}
			enc, err := proto.Marshal(se)
			if err != nil {
				rt.Fatal(err)
			}
			b = append(b, enc...)
		}
		var want networking.ServiceEntry
		if err := proto.Unmarshal(b, &want); err != nil {
			rt.Fatal(err)
		}
		got := appendEndpoints(pooled, b, kindServiceEntry, "ns/se")
		if len(got) != len(want.GetEndpoints()) {
			rt.Fatalf("%d endpoints, want %d", len(got), len(want.GetEndpoints()))
		}
		for i, ep := range want.GetEndpoints() {
			w := workloadOf(kindServiceEntry, "ns/se", i, ep)
			g := got[i]
			if g.address != w.address || g.network != w.network || g.locality != w.locality || g.weight != w.weight ||
				g.index != i || !slices.Equal(g.labels, w.labels) || !slices.Equal(g.ports, w.ports) {
				rt.Fatalf("endpoint %d: scanned %+v, decoded %+v", i, g, w)
			}
		}
	})
}

// TestMapKeyGivenTwiceKeepsItsLastValue: proto's rule for a map entry whose key repeats, as
// the scans apply it to labels and ports.
func TestMapKeyGivenTwiceKeepsItsLastValue(t *testing.T) {
	got := labels{{"b", "1"}, {"a", "1"}, {"b", "2"}, {"c", "1"}, {"b", "3"}}.settled()
	if want := (labels{{"a", "1"}, {"b", "3"}, {"c", "1"}}); !slices.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	ports := settledPorts([]namedPort{{"http", 1}, {"grpc", 2}, {"http", 3}})
	if want := []namedPort{{"grpc", 2}, {"http", 3}}; !slices.Equal(ports, want) {
		t.Errorf("ports %v, want %v", ports, want)
	}
}

// TestPortWordIsTheBytesAsAString: a port's name or protocol reads as written, whether it is
// one of the table's words (taken without a copy) or not (copied, so that the record never
// aliases the encoding it was scanned from).
func TestPortWordIsTheBytesAsAString(t *testing.T) {
	for _, w := range []string{"HTTP", "http", "HTTPS", "https", "HTTP2", "http2", "GRPC", "grpc", "TCP", "tcp", "TLS", "tls",
		"Http", "http-web", "", "GRPC-WEB", "mongo", "h\xffx"} {
		b := []byte(w)
		got := portWord(b)
		for i := range b {
			b[i] = 'X' // the scanned bytes may be reused: the string must not change with them
		}
		if got != w {
			t.Errorf("portWord(%q) = %q", w, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = portWord([]byte("http")) }); n != 0 {
		t.Errorf("portWord of a protocol name allocates %v times, want none", n)
	}
}
