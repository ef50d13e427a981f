package envoy

import (
	"math"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// defaultConnectTimeout is Istio's default (MeshConfig connectTimeout).
const defaultConnectTimeout = 10 * time.Second

// policy is a DestinationRule's traffic policy as it applies to one cluster: the rule's
// top-level settings, overridden by its port-level settings for the cluster's port, then by
// the subset's settings and the subset's port-level settings (Istio's merge order). Each
// field is replaced whole, never merged field by field.
type policy struct {
	lb      *networking.LoadBalancerSettings
	pool    *networking.ConnectionPoolSettings
	outlier *networking.OutlierDetection
	tls     *networking.ClientTLSSettings
	// rule is the DestinationRule the settings come from, for faults; nil without one.
	rule *destinationRule
}

func effectivePolicy(dr *destinationRule, subset *networking.Subset, port uint32) policy {
	p := policy{rule: dr}
	if dr == nil {
		return p
	}
	p.overlay(dr.spec.GetTrafficPolicy(), port)
	p.overlay(subset.GetTrafficPolicy(), port)
	return p
}

func (p *policy) overlay(tp *networking.TrafficPolicy, port uint32) {
	if tp == nil {
		return
	}
	p.set(tp.GetLoadBalancer(), tp.GetConnectionPool(), tp.GetOutlierDetection(), tp.GetTls())
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port {
			p.set(pl.GetLoadBalancer(), pl.GetConnectionPool(), pl.GetOutlierDetection(), pl.GetTls())
		}
	}
}

func (p *policy) set(lb *networking.LoadBalancerSettings, pool *networking.ConnectionPoolSettings,
	outlier *networking.OutlierDetection, tls *networking.ClientTLSSettings) {
	if lb != nil {
		p.lb = lb
	}
	if pool != nil {
		p.pool = pool
	}
	if outlier != nil {
		p.outlier = outlier
	}
	if tls != nil {
		p.tls = tls
	}
}

// fault reports a fault of the rule the policy comes from.
func (p *policy) fault(fs *faults, format string, args ...any) {
	if p.rule != nil {
		fs.add(kindDestinationRule, p.rule.Key, format, args...)
	}
}

// applyLoadBalancer sets the cluster's load balancing. Istio's default is LEAST_REQUEST.
func (p *policy) applyLoadBalancer(c *clusterpb.Cluster, fs *faults) {
	c.LbPolicy = clusterpb.Cluster_LEAST_REQUEST
	lb := p.lb
	if ch := lb.GetConsistentHash(); ch != nil {
		applyConsistentHash(c, ch)
		return
	}
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterpb.Cluster_ROUND_ROBIN
	case networking.LoadBalancerSettings_RANDOM:
		c.LbPolicy = clusterpb.Cluster_RANDOM
	case networking.LoadBalancerSettings_PASSTHROUGH:
		p.fault(fs, "loadBalancer.simple: PASSTHROUGH is not translated (it needs an original-destination cluster); LEAST_REQUEST is used")
	}
	if lb.GetLocalityLbSetting() != nil || lb.GetWarmup() != nil || lb.GetWarmupDurationSecs() != nil {
		p.fault(fs, "loadBalancer: localityLbSetting and warmup are not translated")
	}
}

// applyConsistentHash makes the cluster a ring hash (or Maglev) cluster; the hash key itself
// is a route setting (hashPolicy).
func applyConsistentHash(c *clusterpb.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	if mg := ch.GetMaglev(); mg != nil {
		c.LbPolicy = clusterpb.Cluster_MAGLEV
		if mg.GetTableSize() > 0 {
			c.LbConfig = &clusterpb.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterpb.Cluster_MaglevLbConfig{
				TableSize: wrapperspb.UInt64(mg.GetTableSize())}}
		}
		return
	}
	c.LbPolicy = clusterpb.Cluster_RING_HASH
	size := ch.GetRingHash().GetMinimumRingSize()
	if size == 0 {
		size = ch.GetMinimumRingSize() // the deprecated field
	}
	cfg := &clusterpb.Cluster_RingHashLbConfig{}
	if size > 0 {
		cfg.MinimumRingSize = wrapperspb.UInt64(size)
	}
	c.LbConfig = &clusterpb.Cluster_RingHashLbConfig_{RingHashLbConfig: cfg}
}

// hashPolicy is the route's side of consistent hashing: what to hash. nil without one.
func (p *policy) hashPolicy() []*routepb.RouteAction_HashPolicy {
	ch := p.lb.GetConsistentHash()
	if ch == nil {
		return nil
	}
	var hp routepb.RouteAction_HashPolicy
	switch {
	case ch.GetHttpHeaderName() != "":
		hp.PolicySpecifier = &routepb.RouteAction_HashPolicy_Header_{Header: &routepb.RouteAction_HashPolicy_Header{
			HeaderName: ch.GetHttpHeaderName()}}
	case ch.GetHttpCookie() != nil:
		ck := ch.GetHttpCookie()
		hp.PolicySpecifier = &routepb.RouteAction_HashPolicy_Cookie_{Cookie: &routepb.RouteAction_HashPolicy_Cookie{
			Name: ck.GetName(), Path: ck.GetPath(), Ttl: ck.GetTtl()}}
	case ch.GetUseSourceIp():
		hp.PolicySpecifier = &routepb.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &routepb.RouteAction_HashPolicy_ConnectionProperties{
			SourceIp: true}}
	case ch.GetHttpQueryParameterName() != "":
		hp.PolicySpecifier = &routepb.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &routepb.RouteAction_HashPolicy_QueryParameter{
			Name: ch.GetHttpQueryParameterName()}}
	default:
		return nil
	}
	return []*routepb.RouteAction_HashPolicy{&hp}
}

// applyConnectionPool sets limits and timeouts. Thresholds the rule leaves unset are
// unlimited, as Istio sets them: Envoy's own defaults (1024 connections, 3 retries) would
// reject requests a user never asked to limit.
func (p *policy) applyConnectionPool(c *clusterpb.Cluster) {
	tcp, http := p.pool.GetTcp(), p.pool.GetHttp()
	c.ConnectTimeout = durationpb.New(defaultConnectTimeout)
	if d := tcp.GetConnectTimeout(); d != nil && d.AsDuration() > 0 {
		c.ConnectTimeout = d
	}
	th := &clusterpb.CircuitBreakers_Thresholds{
		MaxConnections:     limit(tcp.GetMaxConnections()),
		MaxPendingRequests: limit(http.GetHttp1MaxPendingRequests()),
		MaxRequests:        limit(http.GetHttp2MaxRequests()),
		MaxRetries:         limit(http.GetMaxRetries()),
		TrackRemaining:     true,
	}
	c.CircuitBreakers = &clusterpb.CircuitBreakers{Thresholds: []*clusterpb.CircuitBreakers_Thresholds{th}}
	if ka := tcp.GetTcpKeepalive(); ka != nil {
		keep := &corepb.TcpKeepalive{}
		if ka.GetProbes() > 0 {
			keep.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
		}
		if t := ka.GetTime(); t != nil {
			keep.KeepaliveTime = wrapperspb.UInt32(uint32(t.AsDuration() / time.Second))
		}
		if t := ka.GetInterval(); t != nil {
			keep.KeepaliveInterval = wrapperspb.UInt32(uint32(t.AsDuration() / time.Second))
		}
		c.UpstreamConnectionOptions = &clusterpb.UpstreamConnectionOptions{TcpKeepalive: keep}
	}
}

// limit is a threshold: the rule's value if positive, else unlimited.
func limit(v int32) *wrapperspb.UInt32Value {
	if v > 0 {
		return wrapperspb.UInt32(uint32(v))
	}
	return wrapperspb.UInt32(math.MaxUint32)
}

// httpOptions are the cluster's upstream HTTP settings: the protocol (HTTP/2 for HTTP2 and
// gRPC ports or when the rule upgrades, the client's own for undeclared ports) and the
// connection pool's per-connection limits. nil for a port without HTTP.
func (p *policy) httpOptions(proto protocol) *upstreamhttp.HttpProtocolOptions {
	if !proto.routed() {
		return nil
	}
	tcp, http := p.pool.GetTcp(), p.pool.GetHttp()
	opts := &upstreamhttp.HttpProtocolOptions{}
	common := &corepb.HttpProtocolOptions{
		IdleTimeout:           http.GetIdleTimeout(),
		MaxConnectionDuration: tcp.GetMaxConnectionDuration(),
	}
	if n := http.GetMaxRequestsPerConnection(); n > 0 {
		common.MaxRequestsPerConnection = wrapperspb.UInt32(uint32(n))
	}
	if common.IdleTimeout != nil || common.MaxConnectionDuration != nil || common.MaxRequestsPerConnection != nil {
		opts.CommonHttpProtocolOptions = common
	}
	h2 := &corepb.Http2ProtocolOptions{}
	if n := http.GetMaxConcurrentStreams(); n > 0 {
		h2.MaxConcurrentStreams = wrapperspb.UInt32(uint32(n))
	}
	upgrade := http.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE
	switch {
	case proto == protoHTTP2 || upgrade:
		opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2}}}
	case proto == protoAuto || http.GetUseClientProtocol():
		opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_UseDownstreamProtocolConfig{UseDownstreamProtocolConfig: &upstreamhttp.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions: &corepb.Http1ProtocolOptions{}, Http2ProtocolOptions: h2}}
	default:
		opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corepb.Http1ProtocolOptions{}}}}
	}
	return opts
}

// applyOutlierDetection follows Istio: consecutive 5xx and gateway errors eject, success-rate
// ejection (Envoy's default) is off, and the panic threshold is the rule's minHealthPercent
// (0, off, by default, as few endpoints per service make Envoy's 50% a trap).
func (p *policy) applyOutlierDetection(c *clusterpb.Cluster, fs *faults) {
	od := p.outlier
	if od == nil {
		return
	}
	out := &clusterpb.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	if n := od.GetConsecutiveErrors(); n > 0 {
		// The deprecated field counts gateway errors (502, 503, 504) only.
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(uint32(n))
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(100)
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(0)
	}
	if v := od.GetConsecutive_5XxErrors(); v != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(v.GetValue())
		out.EnforcingConsecutive_5Xx = enforcing(v.GetValue())
	}
	if v := od.GetConsecutiveGatewayErrors(); v != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(v.GetValue())
		out.EnforcingConsecutiveGatewayFailure = enforcing(v.GetValue())
	}
	out.Interval = od.GetInterval()
	out.BaseEjectionTime = od.GetBaseEjectionTime()
	switch n := od.GetMaxEjectionPercent(); {
	case n > 100 || n < 0:
		p.fault(fs, "outlierDetection.maxEjectionPercent: %d is not a percentage; Envoy's default (10) is used", n)
	case n > 0:
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(n))
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if v := od.GetConsecutiveLocalOriginFailures(); v.GetValue() > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(v.GetValue())
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	c.OutlierDetection = out
	minHealth := max(od.GetMinHealthPercent(), 0)
	c.CommonLbConfig = &clusterpb.Cluster_CommonLbConfig{HealthyPanicThreshold: &typepb.Percent{Value: float64(min(minHealth, 100))}}
}

// enforcing is 100% when a threshold is set, 0% when it is 0 (which turns the check off).
func enforcing(threshold uint32) *wrapperspb.UInt32Value {
	if threshold == 0 {
		return wrapperspb.UInt32(0)
	}
	return wrapperspb.UInt32(100)
}

// checkTLS reports client TLS settings, which are not translated: origination needs
// certificates the bridge does not serve (SDS), so the cluster connects in plaintext.
func (p *policy) checkTLS(fs *faults) {
	if mode := p.tls.GetMode(); mode != networking.ClientTLSSettings_DISABLE {
		p.fault(fs, "tls: mode %s is not translated (it needs certificates the bridge does not serve); clusters connect in plaintext", mode)
	}
}
