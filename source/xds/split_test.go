package xds

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

// splitLimit is the server's xds.max_response_size in these tests, and the receive limit of
// their delta clients.
const splitLimit = 64 << 10

// bigClusters are n clusters of about 1 KiB each.
func bigClusters(n int) map[string]proto.Message {
	out := map[string]proto.Message{}
	pad, _ := structpb.NewStruct(map[string]any{"pad": strings.Repeat("x", 1000)})
	for i := range n {
		name := fmt.Sprintf("c%03d", i)
		out[name] = &cluster.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Second),
			Metadata: &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"test": pad}}}
	}
	return out
}

// newLimitedDelta is a delta ADS client that refuses messages over splitLimit, as gRPC
// clients do over 4 MiB by default.
func newLimitedDelta(t *testing.T, addr string) *deltaClient {
	t.Helper()
	return newDeltaReceiving(t, addr, splitLimit)
}

// newDeltaReceiving is a delta ADS client that refuses messages over limit bytes.
func newDeltaReceiving(t *testing.T, addr string, limit int) *deltaClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	return &deltaClient{t: t, Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
		return ads.DeltaAggregatedResources(ctx)
	})}
}

// TestDeltaResponseLargerThanMaxResponseSizeIsSplit: 300 clusters (about 300 KiB) reach a
// delta client that takes at most 64 KiB per message, in several responses, each under the
// limit, each sent only once the one before was answered (at most one unacknowledged
// response per type), no name twice; a later change is one small response.
func TestDeltaResponseLargerThanMaxResponseSizeIsSplit(t *testing.T) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	s.putEnvoy(t, ClusterType, bigClusters(300))
	c := newLimitedDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	held := map[string]bool{}
	parts := 0
	for len(held) < 300 {
		m := c.recv()
		parts++
		if size := proto.Size(m); size > splitLimit {
			t.Fatalf("part %d is %d bytes, over the limit %d", parts, size, splitLimit)
		}
		for _, r := range m.Resources {
			if held[r.Name] {
				t.Fatalf("part %d sends %s again", parts, r.Name)
			}
			held[r.Name] = true
		}
		if len(held) < 300 {
			c.quiet(100 * time.Millisecond) // nothing more before the ACK
		}
		c.ack(m)
	}
	if parts < 5 {
		t.Fatalf("300 KiB of clusters in %d responses of at most 64 KiB", parts)
	}
	c.quiet(100 * time.Millisecond) // and nothing after the last

	s.removeEnvoy(t, ClusterType, "c000", "c001")
	m := c.recv()
	assertNames(t, "the change after the parts", m.RemovedResources, "c000", "c001")
	if len(m.Resources) != 0 {
		t.Fatalf("the removal resent %d clusters", len(m.Resources))
	}
}

// TestDeltaPartsOfSmallMCPResourcesStayUnderTheLimit: MCP collections travel over xDS as
// Anys of istio.mcp.v1alpha1.Resource, whose wrapping (the Any's type URL and the delta
// Resource's name and version) is large next to a small ServiceEntry. 3,000 of them reach a
// delta client that takes at most 64 KiB per message, in parts that each fit.
func TestDeltaPartsOfSmallMCPResourcesStayUnderTheLimit(t *testing.T) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	const n = 3000
	var rs []*mcpapi.Resource
	for i := range n {
		name := fmt.Sprintf("ns-%d/svc-%d", i%10, i)
		rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name},
			Body: anyOf(&networking.ServiceEntry{Hosts: []string{fmt.Sprintf("svc-%d.example", i)}})})
	}
	if _, err := s.store.Apply("test", store.Update{Collection: "istio/networking/v1alpha3/serviceentries", Resources: rs}); err != nil {
		t.Fatal(err)
	}
	c := newLimitedDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: "networking.istio.io/v1alpha3/ServiceEntry"})
	held, parts := 0, 0
	for held < n {
		m := c.recv()
		parts++
		if size := proto.Size(m); size > splitLimit {
			t.Fatalf("part %d is %d bytes, over the limit %d", parts, size, splitLimit)
		}
		held += len(m.Resources)
		c.ack(m)
	}
	if parts < 3 {
		t.Fatalf("%d ServiceEntries in %d responses of at most 64 KiB", n, parts)
	}
}

// TestDeltaPartsOfSmallClustersFillThem: 3,000 small clusters (about 100 bytes as sent) reach
// a delta client that takes at most 64 KiB per message in parts that each fit, and that use
// the room: every part but the last is over three quarters of the limit. (Sized by their
// stored encoding, which holds the name and version too, parts of small Envoy resources were
// under half full: twice the round trips for a client taking a million.)
func TestDeltaPartsOfSmallClustersFillThem(t *testing.T) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	const n = 3000
	clusters := map[string]proto.Message{}
	for i := range n {
		name := fmt.Sprintf("outbound|8080||svc-%d.ns-%d.example", i, i%10)
		clusters[name] = &cluster.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Second)}
	}
	s.putEnvoy(t, ClusterType, clusters)
	c := newLimitedDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	var sizes []int
	for held := 0; held < n; {
		m := c.recv()
		size := proto.Size(m)
		if size > splitLimit {
			t.Fatalf("part %d is %d bytes, over the limit %d", len(sizes)+1, size, splitLimit)
		}
		sizes = append(sizes, size)
		held += len(m.Resources)
		c.ack(m)
	}
	if len(sizes) < 2 {
		t.Fatalf("%d clusters in one response of at most 64 KiB", n)
	}
	for i, size := range sizes[:len(sizes)-1] {
		if size < splitLimit*3/4 {
			t.Errorf("part %d of %d is %d bytes, under three quarters of the limit %d (parts: %v)", i+1, len(sizes), size, splitLimit, sizes)
		}
	}
}

// TestEndpointsWaitForEveryClusterPart: on one ADS stream, endpoints go after the clusters
// they belong to; when the clusters go in parts, after the last part.
func TestEndpointsWaitForEveryClusterPart(t *testing.T) {
	s, names := splitClustersAndEndpoints(t)
	c := newLimitedDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: names})
	clustersHeld := 0
	for {
		m := c.recv()
		if m.TypeUrl == EndpointType {
			if clustersHeld < 300 {
				t.Fatalf("endpoints sent when %d of the 300 clusters were", clustersHeld)
			}
			for got := len(m.Resources); got < 300; got += len(m.Resources) { // in parts too
				c.ack(m)
				m = c.recv()
			}
			return
		}
		clustersHeld += len(m.Resources)
		c.ack(m)
	}
}

// TestEndpointsOfAClusterPartGoBeforeTheLastPart: an Envoy subscribes to the endpoints of the
// clusters of each part as it arrives. Those endpoints name only clusters the client was sent
// (make before break, name by name), so they go while the later parts are still to come,
// each type still with at most one unacknowledged response: a million clusters' endpoints no longer
// wait for the last of about seventy cluster parts, a round trip each. A request that names a
// cluster of a part still to go keeps the whole response waiting (TestEndpointsWaitForEveryClusterPart).
func TestEndpointsOfAClusterPartGoBeforeTheLastPart(t *testing.T) {
	s, _ := splitClustersAndEndpoints(t)
	c := newLimitedDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	clusters, endpoints := map[string]bool{}, map[string]bool{}
	clusterParts, endpointsBeforeLastPart := 0, 0
	for len(clusters) < 300 || len(endpoints) < 300 {
		m := c.recv()
		var fresh []string
		for _, r := range m.Resources {
			switch m.TypeUrl {
			case ClusterType:
				clusters[r.Name] = true
				fresh = append(fresh, r.Name)
			case EndpointType:
				if !clusters[r.Name] {
					t.Fatalf("endpoints of %s came before the cluster", r.Name)
				}
				endpoints[r.Name] = true
				if len(clusters) < 300 {
					endpointsBeforeLastPart++
				}
			}
		}
		if m.TypeUrl == ClusterType {
			clusterParts++
		}
		c.ack(m)
		if len(fresh) > 0 {
			c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: fresh})
		}
	}
	if clusterParts < 5 {
		t.Fatalf("300 KiB of clusters in %d responses of at most 64 KiB", clusterParts)
	}
	if endpointsBeforeLastPart == 0 {
		t.Fatalf("no endpoints came before the last of %d cluster parts", clusterParts)
	}
	c.quiet(100 * time.Millisecond)
}

// envoyFollower is a delta ADS client that holds what it is sent and fails the test when it is
// sent the endpoints of a cluster it does not hold (make before break).
type envoyFollower struct {
	*deltaClient
	clusters, endpoints map[string]string
}

func newEnvoyFollower(t *testing.T, addr string) *envoyFollower {
	return &envoyFollower{deltaClient: newLimitedDelta(t, addr), clusters: map[string]string{}, endpoints: map[string]string{}}
}

// take receives one response, checks it and applies it; it returns the names of the clusters
// it carried.
func (f *envoyFollower) take() (m *discovery.DeltaDiscoveryResponse, clusters []string) {
	f.t.Helper()
	m = f.recv()
	for _, r := range m.Resources {
		switch m.TypeUrl {
		case ClusterType:
			f.clusters[r.Name] = r.Version
			clusters = append(clusters, r.Name)
		case EndpointType:
			if r.Resource == nil {
				continue
			}
			if _, ok := f.clusters[r.Name]; !ok {
				f.t.Fatalf("the endpoints of %s came before the cluster", r.Name)
			}
			f.endpoints[r.Name] = r.Version
		}
	}
	return m, clusters
}

// TestEndpointsWaitWhileAClusterPartLeftAChangedClusterOut: a cluster that changes while its
// part waits is left out of the part (its new version goes in the next response): the client
// does not hold it, so endpoints that name it, asked for by a client that knew the name, wait
// until it is sent.
func TestEndpointsWaitWhileAClusterPartLeftAChangedClusterOut(t *testing.T) {
	s, names := splitClustersAndEndpoints(t)
	f := newEnvoyFollower(t, s.addr)
	f.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	part1, got := f.take()
	changed := names[len(got)] // the first cluster of the second part
	s.putEnvoy(t, ClusterType, map[string]proto.Message{changed: &cluster.Cluster{Name: changed, ConnectTimeout: durationpb.New(2 * time.Second)}})
	f.ack(part1)
	part2, got2 := f.take()
	if part2.TypeUrl != ClusterType || slices.Contains(got2, changed) {
		t.Fatalf("the second part should be clusters without %s: %s %v", changed, part2.TypeUrl, got2)
	}
	f.ack(part2)
	f.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: append(append(got, got2...), changed)})
	for len(f.endpoints) < len(got)+len(got2)+1 {
		m, _ := f.take()
		f.ack(m)
	}
}

// TestEndpointsWaitForAClusterAskedAnewDuringTheParts: a cluster asked for by name while the
// parts go is sent after them; endpoints that name it wait for it, even if every other name
// they carry was sent.
func TestEndpointsWaitForAClusterAskedAnewDuringTheParts(t *testing.T) {
	s, names := splitClustersAndEndpoints(t)
	f := newEnvoyFollower(t, s.addr)
	f.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: names[100:]})
	part1, got := f.take()
	if len(got) == 0 || len(f.clusters) >= 200 {
		t.Fatalf("want the first of several parts, got %d clusters", len(got))
	}
	f.ack(part1)
	late := names[0] // below every name of the parts
	f.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{late}})
	f.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: append(got, late)})
	for len(f.endpoints) < len(got)+1 {
		m, _ := f.take()
		f.ack(m)
	}
}

// TestEndpointRemovalsWaitForTheClusterPartsBeforeThem: a removal of endpoints goes between
// the cluster parts only once the part of its cluster's name went (a later part may change
// that cluster, and the removal must not overtake it). Here the client holds the endpoints
// of c000 and c250 before it asks for clusters; c250's are deleted while it has not answered,
// and the clusters' parts are read after that.
func TestEndpointRemovalsWaitForTheClusterPartsBeforeThem(t *testing.T) {
	s, names := splitClustersAndEndpoints(t)
	gone := names[250]
	f := newEnvoyFollower(t, s.addr)
	f.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{names[0], gone}})
	first := f.recv() // before any cluster is asked for: not the follower's check
	s.removeEnvoy(t, EndpointType, gone)
	changed := bigClusters(300) // written again, changed: the clusters' parts are read after the removal
	for _, c := range changed {
		c.(*cluster.Cluster).ConnectTimeout = durationpb.New(2 * time.Second)
	}
	s.putEnvoy(t, ClusterType, changed)
	f.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	part1, _ := f.take()
	if part1.TypeUrl != ClusterType {
		t.Fatalf("got %s, want the first cluster part", part1.TypeUrl)
	}
	f.ack(first) // the removal is due now, with the cluster parts still to go
	f.ack(part1)
	for removed := false; !removed; {
		m, _ := f.take()
		if m.TypeUrl == EndpointType && slices.Contains(m.RemovedResources, gone) {
			if _, ok := f.clusters[gone]; !ok {
				t.Fatalf("the removal of the endpoints of %s came before the cluster part of that name", gone)
			}
			removed = true
		}
		f.ack(m)
	}
}

// splitClustersAndEndpoints starts a server that splits responses at splitLimit, holding 300
// clusters of about 1 KiB (bigClusters) and their load assignments; it returns their names,
// sorted. The endpoints are written first: a response of them may go between the cluster
// parts once each part was read at their revision or later (the translation writes both at
// once), so that what the endpoints carry decides.
func splitClustersAndEndpoints(t *testing.T) (*server, []string) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	cs := bigClusters(300)
	names := slices.Sorted(maps.Keys(cs))
	s.putEnvoy(t, EndpointType, loadAssignments("z", names...))
	s.putEnvoy(t, ClusterType, cs)
	return s, names
}

// TestStateOfTheWorldIsNeverSplit: a state-of-the-world response replaces what the client
// holds, so a part would take the rest away: it is sent whole, however large.
func TestStateOfTheWorldIsNeverSplit(t *testing.T) {
	s := startServerWith(t, source.Options{Logger: testLogger(t), MaxResponseSize: splitLimit})
	s.putEnvoy(t, ClusterType, bigClusters(300))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	m := c.recv()
	if len(m.Resources) != 300 || proto.Size(m) <= splitLimit {
		t.Fatalf("state of the world: %d clusters in %d bytes, want all 300 in one response over the limit", len(m.Resources), proto.Size(m))
	}
}

// TestPushIntervalCoalescesChanges: with xds.push_interval, the first change after a quiet
// interval goes at once, and changes that follow within the interval go together in the next
// response, whatever their number; every change reaches the client.
func TestPushIntervalCoalescesChanges(t *testing.T) {
	const interval = 300 * time.Millisecond
	s := startServerWith(t, source.Options{Logger: testLogger(t), PushInterval: interval})
	s.putEnvoy(t, ClusterType, clusters("c0"))
	c := newDelta(t, s.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	c.ack(c.recv())
	time.Sleep(interval) // quiet

	start := time.Now()
	s.putEnvoy(t, ClusterType, clusters("c1"))
	first := c.recv()
	if took := time.Since(start); took > interval/2 {
		t.Fatalf("the first change after a quiet interval took %v", took)
	}
	assertNames(t, "first change", deltaNames(first), "c1")
	c.ack(first)
	for i := 2; i <= 10; i++ {
		s.putEnvoy(t, ClusterType, clusters(fmt.Sprintf("c%d", i)))
	}
	second := c.recv()
	if took := time.Since(start); took < interval*9/10 {
		t.Fatalf("changes within the interval went after %v, before the interval of %v", took, interval)
	}
	assertNames(t, "the changes within the interval", deltaNames(second), "c10", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9")
	c.ack(second)
	c.quiet(interval + 100*time.Millisecond)
}
