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
// messages merged), the scan reads the hosts, ports, resolution, workload selector and number
// of endpoints that proto.Unmarshal reads.
func TestScanServiceEntryReadsWhatUnmarshalReads(t *testing.T) {
	text := rapid.StringMatching(`[a-z0-9.*-]{0,8}`)
	gen := rapid.Custom(func(rt *rapid.T) *networking.ServiceEntry {
		se := &networking.ServiceEntry{
			Hosts:      rapid.SliceOfN(text, 0, 3).Draw(rt, "hosts"),
			Resolution: networking.ServiceEntry_Resolution(rapid.IntRange(0, 4).Draw(rt, "resolution")),
			Addresses:  rapid.SliceOfN(text, 0, 2).Draw(rt, "addresses"),
			ExportTo:   rapid.SliceOfN(text, 0, 2).Draw(rt, "exportTo"),
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
		got := scanServiceEntry(b)
		var ports []servicePort
		for _, p := range want.GetPorts() {
			ports = append(ports, servicePort{number: p.GetNumber(), target: p.GetTargetPort(), name: p.GetName(), protocol: p.GetProtocol()})
		}
		switch {
		case !slices.Equal(got.hosts, want.GetHosts()):
			rt.Fatalf("hosts %q, want %q", got.hosts, want.GetHosts())
		case !slices.Equal(got.ports, ports):
			rt.Fatalf("ports %+v, want %+v", got.ports, ports)
		case got.resolution != want.GetResolution():
			rt.Fatalf("resolution %v, want %v", got.resolution, want.GetResolution())
		case got.endpoints != len(want.GetEndpoints()):
			rt.Fatalf("%d endpoints, want %d", got.endpoints, len(want.GetEndpoints()))
		case !maps.Equal(got.selector, want.GetWorkloadSelector().GetLabels()):
			rt.Fatalf("selector %v, want %v", got.selector, want.GetWorkloadSelector().GetLabels())
		}
	})
}
