package scale

import (
	"fmt"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// The full-update comparison's workload (BenchmarkCompareFullUpdate): ServiceEntry i, generation
// gen, is host Host(i), port http 8080 (HTTP), STATIC, with ten endpoints at fixed addresses
// spread over three localities, each with three labels. Every generation changes every
// endpoint: its port (the WorkloadEntry's http port) and its version label.
//
// FullUpdateServiceEntry is what a producer pushes to mcpbridge; FullUpdateAssignment is the
// ClusterLoadAssignment mcpbridge derives from it (cluster Cluster(i)), which go-control-plane's
// side builds directly. The benchmark checks that both servers serve equal assignments.

// fullUpdateEndpoints is how many endpoints each ServiceEntry has.
const fullUpdateEndpoints = 10

func fullUpdateAddress(i, e int) string {
	return fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, e+1)
}

func fullUpdatePort(gen int) uint32 { return uint32(10000 + gen%50000) }

func fullUpdateZone(e int) string { return "zone-" + strconv.Itoa(e%3) }

func fullUpdateLabels(i, e, gen int) map[string]string {
	return map[string]string{"app": "svc-" + strconv.Itoa(i), "version": "v" + strconv.Itoa(gen),
		"topology.kubernetes.io/zone": fullUpdateZone(e)}
}

// FullUpdateServiceEntry is ServiceEntry i of the full-update workload, generation gen.
func FullUpdateServiceEntry(i, gen int) *networking.ServiceEntry {
	se := &networking.ServiceEntry{
		Hosts:      []string{Host(i)},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Ports:      []*networking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC,
	}
	for e := range fullUpdateEndpoints {
		se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
			Address:  fullUpdateAddress(i, e),
			Ports:    map[string]uint32{"http": fullUpdatePort(gen)},
			Labels:   fullUpdateLabels(i, e, gen),
			Locality: "region/" + fullUpdateZone(e),
		})
	}
	return se
}

// FullUpdateAssignment is the ClusterLoadAssignment of ServiceEntry i, generation gen, as
// mcpbridge's translation derives it: one LocalityLbEndpoints per locality (sorted), weighing
// the sum of its endpoints' weights (1 each); endpoints without metadata (istiod sends none
// of their labels; the bridge neither).
func FullUpdateAssignment(i, gen int) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: Cluster(i)}
	for z := range 3 {
		lle := &endpoint.LocalityLbEndpoints{Locality: &core.Locality{Region: "region", Zone: fullUpdateZone(z)}}
		for e := z; e < fullUpdateEndpoints; e += 3 {
			lle.LbEndpoints = append(lle.LbEndpoints, &endpoint.LbEndpoint{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
					Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Address: fullUpdateAddress(i, e), PortSpecifier: &core.SocketAddress_PortValue{PortValue: fullUpdatePort(gen)},
					}}},
				}},
				LoadBalancingWeight: wrapperspb.UInt32(1),
			})
		}
		lle.LoadBalancingWeight = wrapperspb.UInt32(uint32(len(lle.LbEndpoints)))
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	return cla
}
