package envoy

import (
	"testing"

	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
)

// These tests hold the bridge to defaults istiod sets on every resource of a kind
// (cluster_traffic_policy.go, util/proxy_headers.go, xds/endpoints/endpoint_builder.go).

const panicMeshYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: plain, namespace: test}
spec:
  hosts: [plain.test.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: guarded, namespace: test}
spec:
  hosts: [guarded.test.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.2, labels: {version: v1}}, {address: 10.0.0.3, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: guarded, namespace: test}
spec:
  host: guarded.test.svc.cluster.local
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5, minHealthPercent: 30}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      outlierDetection: {consecutive5xxErrors: 2}
  - name: v2
    labels: {version: v2}
`

// Every Envoy cluster has common_lb_config.healthy_panic_threshold: 0% (panic mode off), as
// istiod's applyLoadBalancer sets it for services that may send unhealthy endpoints (all, by
// default), unless outlier detection set it from minHealthPercent (0 when unset); a proxyless
// gRPC client's cluster has no common_lb_config, as grpcgen builds it.
func TestHealthyPanicThresholdIsOffUnlessOutlierDetectionSetsIt(t *testing.T) {
	by, _ := built(t, panicMeshYAML)
	cases := []struct {
		cluster string
		want    float64
	}{
		{ClusterName(8080, "", "plain.test.svc.cluster.local"), 0},
		{ClusterName(8080, "", "guarded.test.svc.cluster.local"), 30},
		{ClusterName(8080, "v1", "guarded.test.svc.cluster.local"), 0}, // its own outlier detection, no minHealthPercent
		{ClusterName(8080, "v2", "guarded.test.svc.cluster.local"), 30},
	}
	for _, c := range cases {
		cl := clusterOf(t, by, ClusterType, c.cluster)
		if err := cl.ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.cluster, err)
		}
		got := cl.GetCommonLbConfig().GetHealthyPanicThreshold()
		if got == nil || got.GetValue() != c.want {
			t.Errorf("%s: healthy_panic_threshold %v, want %v%%", c.cluster, got, c.want)
		}
		if lc := cl.GetCommonLbConfig().GetLocalityConfigSpecifier(); lc != nil {
			t.Errorf("%s: common_lb_config has %v; istiod sets no locality config without localityLbSetting", c.cluster, lc)
		}
		g := clusterOf(t, by, GRPCClusterType, c.cluster)
		if err := g.ValidateAll(); err != nil {
			t.Errorf("gRPC %s: %v", c.cluster, err)
		}
		if g.GetCommonLbConfig() != nil {
			t.Errorf("gRPC %s: common_lb_config %v; grpcgen sets none", c.cluster, g.GetCommonLbConfig())
		}
	}
}

// Every virtual host has include_request_attempt_count, as istiod's: a sidecar's (the port's
// route configuration), a proxyless gRPC client's (the host's), with and without a
// VirtualService, and a gateway's.
func TestVirtualHostsIncludeRequestAttemptCount(t *testing.T) {
	yaml := panicMeshYAML + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: guarded, namespace: test}
spec:
  hosts: [guarded.test.svc.cluster.local, guarded.example.com]
  gateways: [mesh, ingress]
  http:
  - route: [{destination: {host: guarded.test.svc.cluster.local, subset: v1}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: test}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: [guarded.example.com]
`
	by, _ := built(t, yaml)
	var names []string
	for name := range by[RouteType] {
		names = append(names, name)
	}
	want := map[string]int{ // route configuration: virtual hosts it must have
		OutboundRouteName(8080):                               2,
		HostRouteName("plain.test.svc.cluster.local", 8080):   1,
		HostRouteName("guarded.test.svc.cluster.local", 8080): 1,
	}
	gateways := 0
	for _, name := range names {
		rc := &routepb.RouteConfiguration{}
		mustUnmarshal(t, by[RouteType][name], rc)
		if err := rc.ValidateAll(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if n, ok := want[name]; ok && len(rc.GetVirtualHosts()) != n {
			t.Errorf("%s: %d virtual hosts, want %d", name, len(rc.GetVirtualHosts()), n)
		}
		for _, vh := range rc.GetVirtualHosts() {
			if !vh.GetIncludeRequestAttemptCount() {
				t.Errorf("%s: virtual host %s has no include_request_attempt_count", name, vh.GetName())
			}
			if len(vh.GetRoutes()) == 0 {
				t.Errorf("%s: virtual host %s has no routes", name, vh.GetName())
			}
		}
		if _, ok := want[name]; !ok {
			gateways++
			if len(rc.GetVirtualHosts()) != 1 || rc.GetVirtualHosts()[0].GetDomains()[0] != "guarded.example.com" {
				t.Errorf("%s: virtual hosts %v, want guarded.example.com's", name, rc.GetVirtualHosts())
			}
		}
	}
	for name := range want {
		if _, ok := by[RouteType][name]; !ok {
			t.Errorf("no route configuration %s", name)
		}
	}
	if gateways != 1 {
		t.Errorf("%d gateway route configurations, want 1: %v", gateways, names)
	}
}

// Endpoints carry no metadata: istiod's is telemetry and auto mTLS's, neither of which the
// bridge has, and the labels (which the bridge once put under envoy.lb) are not sent by
// istiod; subsets are clusters of their own. The directly encoded load assignment is what the
// message would be.
func TestEndpointsCarryNoLabelsOrNetworkMetadata(t *testing.T) {
	yaml := panicMeshYAML + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vm, namespace: test}
spec:
  hosts: [vm.test.svc.cluster.local]
  ports: [{number: 9090, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: vm}}
  endpoints: [{address: 10.0.1.1, network: east, locality: r/z, labels: {app: inline}}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: test}
spec:
  address: 10.0.1.2
  network: west
  labels: {app: vm, version: v3}
`
	by, _ := built(t, yaml)
	cases := map[string][]string{
		ClusterName(8080, "", "plain.test.svc.cluster.local"):     {"10.0.0.1"},
		ClusterName(8080, "v2", "guarded.test.svc.cluster.local"): {"10.0.0.3"},
		ClusterName(9090, "", "vm.test.svc.cluster.local"):        {"10.0.1.1", "10.0.1.2"},
		ClusterName(8080, "", "guarded.test.svc.cluster.local"):   {"10.0.0.2", "10.0.0.3"},
		ClusterName(8080, "v1", "guarded.test.svc.cluster.local"): {"10.0.0.2"},
	}
	for name, addrs := range cases {
		r, ok := by[EndpointType][name]
		if !ok {
			t.Errorf("no load assignment %s", name)
			continue
		}
		cla := &endpointpb.ClusterLoadAssignment{}
		mustUnmarshal(t, r, cla)
		if err := cla.ValidateAll(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		var got []string
		for _, lle := range cla.GetEndpoints() {
			for _, lb := range lle.GetLbEndpoints() {
				got = append(got, lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				if lb.GetMetadata() != nil {
					t.Errorf("%s: endpoint %s has metadata %v; istiod's has none here", name, got[len(got)-1], lb.GetMetadata())
				}
				if lb.GetLoadBalancingWeight().GetValue() != 1 {
					t.Errorf("%s: endpoint weight %v, want 1", name, lb.GetLoadBalancingWeight())
				}
			}
		}
		if !sameSet(got, addrs) {
			t.Errorf("%s: endpoints %v, want %v", name, got, addrs)
		}
	}
	// The direct encoding and the message agree on an endpoint with labels and a network.
	w := workload{address: "10.0.1.1", labels: labelsOf(map[string]string{"app": "a"}), network: "east", locality: "r/z"}
	eps := []endpoint{{workload: &w, port: 80}}
	enc, ok := encodeLoadAssignment("outbound|80||a", eps)
	if !ok {
		t.Fatal("the direct encoding refused a plain endpoint")
	}
	got := &endpointpb.ClusterLoadAssignment{}
	_, body := enc.Body()
	if err := proto.Unmarshal(body, got); err != nil {
		t.Fatal(err)
	}
	if want := loadAssignment("outbound|80||a", eps); !proto.Equal(got, want) || got.GetEndpoints()[0].GetLbEndpoints()[0].GetMetadata() != nil {
		t.Errorf("direct encoding %v, message %v; want equal, without metadata", got, want)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
