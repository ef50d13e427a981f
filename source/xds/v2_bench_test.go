package xds

import (
	"fmt"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2"
)

// BenchmarkFanOutV2VsV3: one change delivered to 200 ADS streams of one transport version
// over loopback, for a whole type (CDS: 1,000 clusters, sent whole on every change; v2 reads
// each cluster once per change for fields to rewrite) and a named one (EDS: 1,000 load
// assignments, 100 names a stream, one changed; never read). ms/change is from the store write
// to the last stream's response, encodes/op the bodies encoded per change: one, whatever the
// version. The versions must cost about the same.
func BenchmarkFanOutV2VsV3(b *testing.B) {
	for _, typ := range []string{"clusters", "endpoints"} {
		for _, version := range []string{"v3", "v2"} {
			b.Run(typ+"/"+version, func(b *testing.B) { benchFanOutVersion(b, typ, version) })
		}
	}
}

// fanOut is one stream of either version: recv returns the next response's type, version and
// nonce; ack acknowledges it.
type fanOut struct {
	recv func() (typeURL, version, nonce string)
	ack  func(typeURL, version, nonce string)
}

func openFanOut(b *testing.B, addr, version, typeURL string, names []string) fanOut {
	if version == "v2" {
		c := newADSV2(b, addr)
		c.Send(&apiv2.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
		return fanOut{
			recv: func() (string, string, string) { m := c.Recv(); return m.TypeUrl, m.VersionInfo, m.Nonce },
			ack: func(t, v, n string) {
				c.Send(&apiv2.DiscoveryRequest{TypeUrl: t, VersionInfo: v, ResponseNonce: n, ResourceNames: names})
			},
		}
	}
	c := newSotW(b, addr)
	c.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
	return fanOut{
		recv: func() (string, string, string) { m := c.Recv(); return m.TypeUrl, m.VersionInfo, m.Nonce },
		ack: func(t, v, n string) {
			c.Send(&discovery.DiscoveryRequest{TypeUrl: t, VersionInfo: v, ResponseNonce: n, ResourceNames: names})
		},
	}
}

func benchFanOutVersion(b *testing.B, typ, version string) {
	s := startServerLogging(b, nil)
	const streams, resources = 200, 1000
	names := make([]string, resources)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%d.ns.svc.cluster.local", i)
	}
	var typeURL string
	var subscribed []string // none: wildcard
	var change func(round int)
	if typ == "clusters" {
		typeURL = ClusterType
		s.putEnvoy(b, ClusterType, clusters(names...))
		change = func(round int) {
			n := names[round%resources]
			s.putEnvoy(b, ClusterType, map[string]proto.Message{n: &cluster.Cluster{Name: n, ConnectTimeout: durationpb.New(time.Duration(round+2) * time.Second)}})
		}
	} else {
		typeURL, subscribed = EndpointType, names[:100]
		s.putEnvoy(b, EndpointType, loadAssignments("v0", names...))
		change = func(round int) {
			s.putEnvoy(b, EndpointType, loadAssignments(fmt.Sprint("v", round+1), names[round%100]))
		}
	}
	if version == "v2" {
		typeURL = map[string]string{ClusterType: ClusterTypeV2, EndpointType: EndpointTypeV2}[typeURL]
	}
	cs := make([]fanOut, streams)
	for i := range cs {
		cs[i] = openFanOut(b, s.addr, version, typeURL, subscribed)
		cs[i].ack(cs[i].recv())
	}
	var total time.Duration
	encodes := s.engine.Stats().Encodes
	round := 0
	for b.Loop() {
		b.StopTimer()
		waitAllAcknowledged(b, s.engine)
		b.StartTimer()
		start := time.Now()
		change(round)
		round++
		for _, c := range cs {
			t, v, n := c.recv()
			if t != typeURL {
				b.Fatalf("response of %s, want %s", t, typeURL)
			}
			c.ack(t, v, n)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/change")
	b.ReportMetric(float64(s.engine.Stats().Encodes-encodes)/float64(b.N), "encodes/op")
}
