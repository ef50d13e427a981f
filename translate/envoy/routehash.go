package envoy

import (
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"
)

// A route's hash policy is the route's side of its destination's consistent hashing (the
// cluster's is its ring hash or Maglev load balancer). istiod looks for the consistent hash on
// its own, not through the merged traffic policy the cluster gets: only the loadBalancer's
// consistentHash counts at each level, so a level that sets a simple load balancer does not
// take away the hash of the level under it.

// destinationHash is a route destination's consistent hash, as istiod finds it
// (HashForHTTPDestination): the subset's port-level settings, else the subset's, else the
// rule's port-level settings, else the rule's; port-level settings count only when the
// destination names its port.
func destinationHash(dr *destinationRule, d *networking.Destination) *networking.LoadBalancerSettings_ConsistentHashLB {
	if dr == nil {
		return nil
	}
	tp := dr.spec.GetTrafficPolicy()
	hash := tp.GetLoadBalancer().GetConsistentHash()
	plsHash := portLevelHash(d, tp.GetPortLevelSettings())
	var subsetHash, subsetPLSHash *networking.LoadBalancerSettings_ConsistentHashLB
	for _, ss := range dr.spec.GetSubsets() {
		if ss.GetName() == d.GetSubset() {
			subsetHash = ss.GetTrafficPolicy().GetLoadBalancer().GetConsistentHash()
			subsetPLSHash = portLevelHash(d, ss.GetTrafficPolicy().GetPortLevelSettings())
			break
		}
	}
	switch {
	case subsetPLSHash != nil:
		return subsetPLSHash
	case subsetHash != nil:
		return subsetHash
	case plsHash != nil:
		return plsHash
	}
	return hash
}

func portLevelHash(d *networking.Destination, pls []*networking.TrafficPolicy_PortTrafficPolicy) *networking.LoadBalancerSettings_ConsistentHashLB {
	if d.GetPort() == nil {
		return nil
	}
	for _, s := range pls {
		if s.GetPort().GetNumber() == d.GetPort().GetNumber() {
			return s.GetLoadBalancer().GetConsistentHash()
		}
	}
	return nil
}

// serviceHash is the consistent hash of a host's default route, as istiod finds it
// (hashForService): the rule's, replaced by that of the first port-level setting of the port
// when it has one.
func serviceHash(dr *destinationRule, port uint32) *networking.LoadBalancerSettings_ConsistentHashLB {
	if dr == nil {
		return nil
	}
	tp := dr.spec.GetTrafficPolicy()
	hash := tp.GetLoadBalancer().GetConsistentHash()
	for _, s := range tp.GetPortLevelSettings() {
		if s.GetPort().GetNumber() == port {
			if h := s.GetLoadBalancer().GetConsistentHash(); h != nil {
				hash = h
			}
			break
		}
	}
	return hash
}

// hashPolicyOf is what a route hashes for a consistent hash (istiod's
// ConsistentHashToHashPolicy): a header, a cookie (with its attributes), the source IP or a
// query parameter. nil without a hash key.
func hashPolicyOf(ch *networking.LoadBalancerSettings_ConsistentHashLB) *routepb.RouteAction_HashPolicy {
	switch ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return &routepb.RouteAction_HashPolicy{PolicySpecifier: &routepb.RouteAction_HashPolicy_Header_{
			Header: &routepb.RouteAction_HashPolicy_Header{HeaderName: ch.GetHttpHeaderName()}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		ck := ch.GetHttpCookie()
		c := &routepb.RouteAction_HashPolicy_Cookie{Name: ck.GetName(), Ttl: ck.GetTtl(), Path: ck.GetPath()}
		for _, a := range ck.GetAttributes() {
			c.Attributes = append(c.Attributes, &routepb.RouteAction_HashPolicy_CookieAttribute{Name: a.GetName(), Value: a.GetValue()})
		}
		return &routepb.RouteAction_HashPolicy{PolicySpecifier: &routepb.RouteAction_HashPolicy_Cookie_{Cookie: c}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		return &routepb.RouteAction_HashPolicy{PolicySpecifier: &routepb.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routepb.RouteAction_HashPolicy_ConnectionProperties{SourceIp: ch.GetUseSourceIp()}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		return &routepb.RouteAction_HashPolicy{PolicySpecifier: &routepb.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &routepb.RouteAction_HashPolicy_QueryParameter{Name: ch.GetHttpQueryParameterName()}}}
	}
	return nil
}
