package envoy

import (
	"math"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Istio's defaults for what a cluster sets without a rule: MeshConfig connectTimeout and
// dnsRefreshRate, and the pilot settings PILOT_DNS_JITTER_DURATION and
// PILOT_DNS_CARES_UDP_MAX_QUERIES.
const (
	defaultConnectTimeout = 10 * time.Second
	defaultDNSRefreshRate = 60 * time.Second
	defaultDNSJitter      = 100 * time.Millisecond
	defaultDNSUDPQueries  = 100
)

// policy is a DestinationRule's traffic policy as it applies to one cluster, merged as istiod
// merges it (util.GetPortLevelTrafficPolicy, MergeSubsetTrafficPolicy): the rule's top level,
// or, when a portLevelSettings entry names the cluster's port (the first that does), that
// entry alone, its unset fields falling back to the defaults and not to the top level. A
// subset's policy (again its port's entry alone when it has one) then replaces each of
// loadBalancer, connectionPool, outlierDetection and tls that it sets, and all four when it
// came from a port entry; proxyProtocol, retryBudget and tunnel when set.
type policy struct {
	lb            *networking.LoadBalancerSettings
	pool          *networking.ConnectionPoolSettings
	outlier       *networking.OutlierDetection
	tls           *networking.ClientTLSSettings
	retryBudget   *networking.TrafficPolicy_RetryBudget
	proxyProtocol *networking.TrafficPolicy_ProxyProtocol
	tunnel        *networking.TrafficPolicy_TunnelSettings
	// rule is the DestinationRule the settings come from, for faults; nil without one.
	rule *destinationRule
}

func effectivePolicy(dr *destinationRule, subset *networking.Subset, port uint32) policy {
	p := policy{rule: dr}
	if dr == nil {
		return p
	}
	base, _ := portPolicy(dr.spec.GetTrafficPolicy(), port)
	p.take(base)
	sub := subset.GetTrafficPolicy()
	if sub == nil {
		return p
	}
	sub, portLevel := portPolicy(sub, port)
	if base == nil {
		p.take(sub)
		return p
	}
	if sub.GetConnectionPool() != nil || portLevel {
		p.pool = sub.GetConnectionPool()
	}
	if sub.GetOutlierDetection() != nil || portLevel {
		p.outlier = sub.GetOutlierDetection()
	}
	if sub.GetLoadBalancer() != nil || portLevel {
		p.lb = sub.GetLoadBalancer()
	}
	if sub.GetTls() != nil || portLevel {
		p.tls = sub.GetTls()
	}
	if sub.GetTunnel() != nil {
		p.tunnel = sub.GetTunnel()
	}
	if sub.GetProxyProtocol() != nil {
		p.proxyProtocol = sub.GetProxyProtocol()
	}
	if sub.GetRetryBudget() != nil {
		p.retryBudget = sub.GetRetryBudget()
	}
	return p
}

// portPolicy is a traffic policy as it applies to a port: the first portLevelSettings entry
// for the port, alone (and true), else the policy itself.
func portPolicy(tp *networking.TrafficPolicy, port uint32) (*networking.TrafficPolicy, bool) {
	if tp == nil {
		return nil, false
	}
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort() != nil && pl.GetPort().GetNumber() == port {
			return &networking.TrafficPolicy{LoadBalancer: pl.GetLoadBalancer(), ConnectionPool: pl.GetConnectionPool(),
				OutlierDetection: pl.GetOutlierDetection(), Tls: pl.GetTls()}, true
		}
	}
	return tp, false
}

func (p *policy) take(tp *networking.TrafficPolicy) {
	p.lb, p.pool, p.outlier, p.tls = tp.GetLoadBalancer(), tp.GetConnectionPool(), tp.GetOutlierDetection(), tp.GetTls()
	p.retryBudget, p.proxyProtocol, p.tunnel = tp.GetRetryBudget(), tp.GetProxyProtocol(), tp.GetTunnel()
}

// fault reports a fault of the rule the policy comes from.
func (p *policy) fault(fs *faults, format string, args ...any) {
	if p.rule != nil {
		fs.add(kindDestinationRule, p.rule.Key, format, args...)
	}
}

// applyLoadBalancer sets the cluster's load balancing as istiod does (applyLoadBalancer):
// the panic threshold off unless outlier detection set it, LEAST_REQUEST by default and for
// LEAST_CONN, warmup as a slow start of ROUND_ROBIN and LEAST_REQUEST, and a consistent hash
// over whatever simple policy is set.
func (p *policy) applyLoadBalancer(c *clusterpb.Cluster, fs *faults) {
	panicThresholdOff(c)
	lb := p.lb
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterpb.Cluster_ROUND_ROBIN
		if ss := slowStart(lb); ss != nil {
			c.LbConfig = &clusterpb.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &clusterpb.Cluster_RoundRobinLbConfig{SlowStartConfig: ss}}
		}
	case networking.LoadBalancerSettings_RANDOM:
		c.LbPolicy = clusterpb.Cluster_RANDOM
	case networking.LoadBalancerSettings_PASSTHROUGH:
		// An original-destination cluster (originalDestination, applied by addCluster).
		c.LbPolicy = clusterpb.Cluster_CLUSTER_PROVIDED
	default: // UNSPECIFIED, LEAST_CONN, LEAST_REQUEST
		c.LbPolicy = clusterpb.Cluster_LEAST_REQUEST
		if ss := slowStart(lb); ss != nil {
			c.LbConfig = &clusterpb.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &clusterpb.Cluster_LeastRequestLbConfig{SlowStartConfig: ss}}
		}
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		applyConsistentHash(c, ch)
	}
	if lb.GetLocalityLbSetting() != nil {
		p.fault(fs, "loadBalancer.localityLbSetting is not translated (it depends on each proxy's own locality)")
	}
}

// passthrough tells a rule asking loadBalancer PASSTHROUGH: an original-destination cluster.
func (p *policy) passthrough() bool {
	return p.lb.GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH
}

// slowStart is warmup (or the deprecated warmupDurationSecs) as istiod sets it (setWarmup):
// aggression 1 and a minimum weight of 10% unless set; nil without warmup.
func slowStart(lb *networking.LoadBalancerSettings) *clusterpb.Cluster_SlowStartConfig {
	if w := lb.GetWarmup(); w != nil {
		aggression, minWeight := 1.0, 10.0
		if a := w.GetAggression(); a != nil {
			aggression = a.GetValue()
		}
		if m := w.GetMinimumPercent(); m != nil {
			minWeight = m.GetValue()
		}
		return &clusterpb.Cluster_SlowStartConfig{
			SlowStartWindow:  w.GetDuration(),
			Aggression:       &corepb.RuntimeDouble{DefaultValue: aggression, RuntimeKey: "("}, // istiod's key, exposing none
			MinWeightPercent: &typepb.Percent{Value: minWeight},
		}
	}
	if d := lb.GetWarmupDurationSecs(); d != nil {
		return &clusterpb.Cluster_SlowStartConfig{SlowStartWindow: d}
	}
	return nil
}

// applyConsistentHash makes the cluster a ring hash (or Maglev) cluster as istiod does
// (ApplyRingHashLoadBalancer); the hash key itself is a route setting (hashPolicyOf, routehash.go). The
// deprecated form (neither ringHash nor maglev) gets Envoy's default ring of 1024 written out.
func applyConsistentHash(c *clusterpb.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	c.LbConfig = nil
	switch {
	case ch.GetMaglev() != nil:
		c.LbPolicy = clusterpb.Cluster_MAGLEV
		if n := ch.GetMaglev().GetTableSize(); n != 0 {
			c.LbConfig = &clusterpb.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterpb.Cluster_MaglevLbConfig{
				TableSize: wrapperspb.UInt64(n)}}
		}
	case ch.GetRingHash() != nil:
		c.LbPolicy = clusterpb.Cluster_RING_HASH
		if n := ch.GetRingHash().GetMinimumRingSize(); n != 0 {
			c.LbConfig = &clusterpb.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterpb.Cluster_RingHashLbConfig{
				MinimumRingSize: wrapperspb.UInt64(n)}}
		}
	default:
		size := ch.GetMinimumRingSize() // the deprecated field
		if size == 0 {
			size = 1024
		}
		c.LbPolicy = clusterpb.Cluster_RING_HASH
		c.LbConfig = &clusterpb.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterpb.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(size)}}
	}
}

// applyConnectionPool sets limits and timeouts as istiod does (applyConnectionPool, which
// runs for every cluster, with or without a rule): the connect timeout (the rule's, else
// 10s), circuit-breaker thresholds (those the rule leaves unset unlimited: Envoy's own
// defaults, 1024 connections and 3 retries, would reject requests a user never asked to
// limit; remaining-capacity stats off, istiod's default), the retry budget, TCP keepalive,
// and the upstream HTTP options it returns: the h2 upgrade, idle timeout (HTTP's, else
// TCP's), max requests per connection and max connection duration (set on any cluster, TCP
// ones included), HTTP/2 stream limit and keepalive (on an explicit HTTP/2 cluster only),
// and useClientProtocol. opts are the port's own upstream protocol options (nil for none).
func (p *policy) applyConnectionPool(c *clusterpb.Cluster, opts *upstreamhttp.HttpProtocolOptions) *upstreamhttp.HttpProtocolOptions {
	tcp, http := p.pool.GetTcp(), p.pool.GetHttp()
	// istiod's shouldH2Upgrade under the mesh default (h2UpgradePolicy DO_NOT_UPGRADE): only a
	// rule's UPGRADE, never with useClientProtocol, and never over a protocol already chosen.
	if !http.GetUseClientProtocol() && http.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE &&
		opts.GetUpstreamProtocolOptions() == nil {
		opts = withH2(opts)
	}
	c.ConnectTimeout = durationpb.New(defaultConnectTimeout)
	if d := tcp.GetConnectTimeout(); d != nil {
		c.ConnectTimeout = d
	}
	th := &clusterpb.CircuitBreakers_Thresholds{
		MaxConnections:     limit(tcp.GetMaxConnections()),
		MaxPendingRequests: limit(http.GetHttp1MaxPendingRequests()),
		MaxRequests:        limit(http.GetHttp2MaxRequests()),
		MaxRetries:         limit(http.GetMaxRetries()),
	}
	if rb := p.retryBudget; rb != nil {
		budget := &clusterpb.CircuitBreakers_Thresholds_RetryBudget{
			BudgetPercent: &typepb.Percent{Value: 20}, MinRetryConcurrency: wrapperspb.UInt32(3), BudgetInterval: rb.GetBudgetInterval()}
		if v := rb.GetPercent(); v != nil {
			budget.BudgetPercent = &typepb.Percent{Value: v.GetValue()}
		}
		if n := rb.GetMinRetryConcurrency(); n > 0 {
			budget.MinRetryConcurrency = wrapperspb.UInt32(n)
		}
		th.RetryBudget = budget
	}
	c.CircuitBreakers = &clusterpb.CircuitBreakers{Thresholds: []*clusterpb.CircuitBreakers_Thresholds{th}}
	if ka := tcp.GetTcpKeepalive(); ka != nil {
		keep := &corepb.TcpKeepalive{}
		if ka.GetProbes() > 0 {
			keep.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
		}
		if t := ka.GetTime(); t != nil {
			keep.KeepaliveTime = wrapperspb.UInt32(uint32(t.GetSeconds()))
		}
		if t := ka.GetInterval(); t != nil {
			keep.KeepaliveInterval = wrapperspb.UInt32(uint32(t.GetSeconds()))
		}
		c.UpstreamConnectionOptions = &clusterpb.UpstreamConnectionOptions{TcpKeepalive: keep}
	}
	idle := http.GetIdleTimeout()
	if idle == nil {
		idle = tcp.GetIdleTimeout()
	}
	keepalive := http.GetHttp2KeepAlive()
	if idle != nil || tcp.GetMaxConnectionDuration() != nil || http.GetMaxRequestsPerConnection() > 0 ||
		http.GetMaxConcurrentStreams() > 0 || keepalive != nil {
		if opts == nil {
			opts = &upstreamhttp.HttpProtocolOptions{}
		}
		if opts.CommonHttpProtocolOptions == nil {
			opts.CommonHttpProtocolOptions = &corepb.HttpProtocolOptions{}
		}
		common := opts.CommonHttpProtocolOptions
		if idle != nil {
			common.IdleTimeout = idle
		}
		if n := http.GetMaxRequestsPerConnection(); n > 0 {
			common.MaxRequestsPerConnection = wrapperspb.UInt32(uint32(n))
		}
		if d := tcp.GetMaxConnectionDuration(); d != nil {
			common.MaxConnectionDuration = d
		}
		if h2 := opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions(); h2 != nil {
			if n := http.GetMaxConcurrentStreams(); n > 0 {
				h2.MaxConcurrentStreams = wrapperspb.UInt32(uint32(n))
			}
			if keepalive != nil {
				h2.ConnectionKeepalive = &corepb.KeepaliveSettings{Interval: keepalive.GetInterval(), Timeout: keepalive.GetTimeout()}
			}
		}
	}
	if http.GetUseClientProtocol() {
		opts = withDownstreamProtocol(opts)
	}
	return opts
}

// limit is a threshold: the rule's value if positive, else unlimited.
func limit(v int32) *wrapperspb.UInt32Value {
	if v > 0 {
		return wrapperspb.UInt32(uint32(v))
	}
	return wrapperspb.UInt32(math.MaxUint32)
}

// portProtocolOptions are a port's upstream HTTP options before any rule, as istiod sets them
// (setUpstreamProtocol): HTTP/2 for HTTP2, GRPC and GRPC-Web ports; the downstream protocol
// for a sniffed port (a sidecar's choice; istiod leaves a gateway's unset, see doc.go);
// none for HTTP and non-HTTP ports.
func portProtocolOptions(proto protocol) *upstreamhttp.HttpProtocolOptions {
	switch proto {
	case protoHTTP2:
		return withH2(nil)
	case protoAuto:
		return withDownstreamProtocol(nil)
	}
	return nil
}

func withH2(opts *upstreamhttp.HttpProtocolOptions) *upstreamhttp.HttpProtocolOptions {
	if opts == nil {
		opts = &upstreamhttp.HttpProtocolOptions{}
	}
	opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corepb.Http2ProtocolOptions{}}}}
	return opts
}

// withDownstreamProtocol uses the client's protocol upstream, keeping HTTP/1 options that
// were set explicitly (setUseDownstreamProtocol).
func withDownstreamProtocol(opts *upstreamhttp.HttpProtocolOptions) *upstreamhttp.HttpProtocolOptions {
	if opts == nil {
		opts = &upstreamhttp.HttpProtocolOptions{}
	}
	h1 := opts.GetExplicitHttpConfig().GetHttpProtocolOptions()
	if h1 == nil {
		h1 = &corepb.Http1ProtocolOptions{}
	}
	opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_UseDownstreamProtocolConfig{UseDownstreamProtocolConfig: &upstreamhttp.HttpProtocolOptions_UseDownstreamHttpConfig{
		HttpProtocolOptions: h1, Http2ProtocolOptions: &corepb.Http2ProtocolOptions{}}}
	return opts
}

// finishProtocolOptions completes options that were set: Envoy requires an upstream
// protocol, and istiod writes explicit HTTP/1 where nothing chose one (clusterWrapper.build).
func finishProtocolOptions(opts *upstreamhttp.HttpProtocolOptions) *upstreamhttp.HttpProtocolOptions {
	if opts != nil && opts.UpstreamProtocolOptions == nil {
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
	if od.GetConsecutiveErrors() > 0 { //nolint:staticcheck // reported: istiod ignores it
		p.fault(fs, "outlierDetection.consecutiveErrors is deprecated and ignored, as istiod ignores it; use consecutive5xxErrors or consecutiveGatewayErrors")
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
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterpb.Cluster_CommonLbConfig{}
	}
	if n := od.GetMinHealthPercent(); n >= 0 {
		c.CommonLbConfig.HealthyPanicThreshold = &typepb.Percent{Value: float64(min(n, 100))}
	}
}

// panicThresholdOff sets a healthy_panic_threshold of 0% (Envoy's panic mode off) where
// outlier detection has set none, as istiod does for every service that may send unhealthy
// endpoints (Service.SupportsUnhealthyEndpoints: PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS, on by
// default): Envoy's default of 50% would send traffic to unready endpoints when few are
// healthy.
func panicThresholdOff(c *clusterpb.Cluster) {
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterpb.Cluster_CommonLbConfig{}
	}
	if c.CommonLbConfig.HealthyPanicThreshold == nil {
		c.CommonLbConfig.HealthyPanicThreshold = &typepb.Percent{}
	}
}

// enforcing is 100% when a threshold is set, 0% when it is 0 (which turns the check off).
func enforcing(threshold uint32) *wrapperspb.UInt32Value {
	if threshold == 0 {
		return wrapperspb.UInt32(0)
	}
	return wrapperspb.UInt32(100)
}

// checkUnsupported reports the settings the translation leaves out.
func (p *policy) checkUnsupported(fs *faults) {
	if p.proxyProtocol != nil {
		p.fault(fs, "proxyProtocol is not translated; clusters send no PROXY header")
	}
	if p.tunnel != nil {
		p.fault(fs, "tunnel is not translated; clusters connect directly")
	}
}
