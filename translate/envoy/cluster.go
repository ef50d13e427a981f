package envoy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	caresdns "github.com/envoyproxy/go-control-plane/envoy/extensions/network/dns_resolver/cares/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/mcpbridge/mcpbridge/translate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// buildClusters adds a host's clusters for one port: the service as a whole, then one per
// subset of its DestinationRule. eps are the port's endpoints for DNS clusters, which hold
// them; EDS clusters' are their load assignments (buildEndpoints).
func (b *hostBuild) buildClusters(p port, eps []endpoint) {
	b.addCluster(ClusterName(p.number, "", b.host), p, "", effectivePolicy(b.dr, nil, p.number), eps)
	for i, ss := range b.dr.subsets() {
		if ss == nil {
			continue
		}
		subsetEps := subsetEndpoints(eps, ss.GetLabels())
		if len(subsetEps) == 0 && len(eps) > 0 {
			b.fs.add(kindDestinationRule, b.dr.Key, "subsets[%d] (%s): labels %s select no endpoint of %s; its clusters are empty",
				i, ss.GetName(), formatLabels(ss.GetLabels()), b.host)
		}
		b.addCluster(ClusterName(p.number, ss.GetName(), b.host), p, ss.GetName(), effectivePolicy(b.dr, ss, p.number), subsetEps)
	}
}

// subsets returns the rule's subsets, with nil in place of each that is left out (a faulty
// or repeated name), so that indexes still name the field. Faults are reported by checkSubsets.
func (dr *destinationRule) subsets() []*networking.Subset {
	if dr == nil {
		return nil
	}
	out := slices.Clone(dr.spec.GetSubsets())
	seen := map[string]bool{}
	for i, ss := range out {
		if !subsetPattern.MatchString(ss.GetName()) || seen[ss.GetName()] {
			out[i] = nil
			continue
		}
		seen[ss.GetName()] = true
	}
	return out
}

// subset returns the rule's subset of that name, or nil.
func (dr *destinationRule) subset(name string) *networking.Subset {
	for _, ss := range dr.subsets() {
		if ss != nil && ss.GetName() == name {
			return ss
		}
	}
	return nil
}

// checkSubsets reports the subsets that subsets() leaves out.
func (dr *destinationRule) checkSubsets(fs *faults) {
	seen := map[string]bool{}
	for i, ss := range dr.spec.GetSubsets() {
		switch {
		case !subsetPattern.MatchString(ss.GetName()):
			fs.add(kindDestinationRule, dr.Key, "subsets[%d].name: %q is not a valid subset name; the subset is left out", i, ss.GetName())
		case seen[ss.GetName()]:
			fs.add(kindDestinationRule, dr.Key, "subsets[%d].name: subset %q is defined twice; the first is used", i, ss.GetName())
		}
		seen[ss.GetName()] = true
	}
}

// addCluster adds one cluster as istiod builds it (buildCluster, applyTrafficPolicy), and its
// form for proxyless gRPC clients (addGRPCCluster): the common one from parts
// (cluster_wire.go), any other through its message.
func (b *hostBuild) addCluster(name string, p port, subset string, pol policy, eps []endpoint) {
	if b.plainCluster(p) {
		b.putPlainCluster(name, p.protocol)
		return
	}
	b.addClusterMessage(name, p, subset, pol, eps)
}

// addClusterMessage is addCluster through the cluster's message.
func (b *hostBuild) addClusterMessage(name string, p port, subset string, pol policy, eps []endpoint) {
	c := &clusterpb.Cluster{Name: name, AltStatName: name + statPrefixDelimiter, CommonLbConfig: &clusterpb.Cluster_CommonLbConfig{}}
	switch b.se.resolution {
	case networking.ServiceEntry_DNS:
		c.ClusterDiscoveryType = &clusterpb.Cluster_Type{Type: clusterpb.Cluster_STRICT_DNS}
		setDNSDefaults(c)
		c.LoadAssignment = b.dnsAssignment(name, p, eps, false)
	case networking.ServiceEntry_DNS_ROUND_ROBIN:
		c.ClusterDiscoveryType = &clusterpb.Cluster_Type{Type: clusterpb.Cluster_LOGICAL_DNS}
		setDNSDefaults(c)
		c.LoadAssignment = b.dnsAssignment(name, p, eps, true)
	default: // STATIC and NONE
		c.ClusterDiscoveryType = &clusterpb.Cluster_Type{Type: clusterpb.Cluster_EDS}
		c.EdsClusterConfig = &clusterpb.Cluster_EdsClusterConfig{EdsConfig: edsSource, ServiceName: name}
	}
	opts := portProtocolOptions(p.protocol)
	opts = pol.applyConnectionPool(c, opts)
	pol.applyOutlierDetection(c, &b.fs)
	pol.applyLoadBalancer(c, &b.fs)
	// A rule's TLS from a credentialName is for gateways: sidecars get the cluster without it
	// (see credentialForGatewaysOnly), gateways from their overlay of the clusters. A NONE
	// host's sidecars get an original-destination cluster, its gateways the EDS one; a rule's
	// PASSTHROUGH makes both original-destination ones (originalDestination). Proxyless gRPC
	// clients get neither change (addGRPCCluster).
	var sidecar *clusterpb.Cluster
	var sidecarOpts *upstreamhttp.HttpProtocolOptions
	credentialOnly := credentialForGatewaysOnly(pol.tls)
	if credentialOnly {
		sidecar = proto.Clone(c).(*clusterpb.Cluster)
		if opts != nil {
			sidecarOpts = proto.Clone(opts).(*upstreamhttp.HttpProtocolOptions)
		}
	}
	opts = pol.applyTLS(c, tlsTarget{host: b.host, subset: subset, port: p.number, sans: b.se.sans()}, opts, &b.fs)
	pol.checkUnsupported(&b.fs)
	if !b.setProtocolOptions(c, name, opts) {
		return
	}
	if sidecar != nil && !b.setProtocolOptions(sidecar, name, sidecarOpts) {
		return
	}
	gateway := c
	if pol.passthrough() {
		gateway = proto.Clone(c).(*clusterpb.Cluster)
		originalDestination(gateway)
	}
	headless := b.se.resolution == networking.ServiceEntry_NONE
	if sidecar == nil && headless && !pol.passthrough() {
		sidecar = proto.Clone(c).(*clusterpb.Cluster)
	}
	if sidecar != nil && (headless || pol.passthrough()) {
		originalDestination(sidecar)
	}
	if sidecar == nil {
		b.put(ClusterType, name, gateway)
	} else {
		b.put(ClusterType, name, sidecar)
		b.putIn(translate.GatewayCollection(ClusterType), ClusterType, name, gateway)
	}
	if b.t.proxylessFor(b.host) {
		b.addGRPCCluster(c, pol)
	}
}

// originalDestination makes a cluster istiod's original-destination one (convertResolution,
// applyLoadBalancer): Envoy connects to the address the client dialled, with no endpoints of
// its own and no load balancing (CLUSTER_PROVIDED). istiod builds one for a NONE host's sidecars
// (gateways, which cannot use it, keep EDS) and for any host whose rule asks loadBalancer
// PASSTHROUGH.
func originalDestination(c *clusterpb.Cluster) {
	c.ClusterDiscoveryType = &clusterpb.Cluster_Type{Type: clusterpb.Cluster_ORIGINAL_DST}
	c.EdsClusterConfig, c.LoadAssignment = nil, nil
	c.LbPolicy, c.LbConfig = clusterpb.Cluster_CLUSTER_PROVIDED, nil
	// A DNS host's DNS settings stay, unused, as istiod leaves them.
}

// setProtocolOptions sets a cluster's upstream HTTP options (none: nil); false when they
// cannot be encoded (reported).
func (b *hostBuild) setProtocolOptions(c *clusterpb.Cluster, name string, opts *upstreamhttp.HttpProtocolOptions) bool {
	if opts = finishProtocolOptions(opts); opts != nil {
		body, err := pack(opts)
		if err != nil {
			b.invalid("Cluster", name, err)
			return false
		}
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: body}
	}
	return true
}

// credentialForGatewaysOnly tells TLS settings istiod applies to gateways only: SIMPLE or
// MUTUAL from a credentialName (a Kubernetes secret; a configmap:// one is for everyone),
// which a sidecar does not get from a DestinationRule without a workloadSelector
// (buildUpstreamClusterTLSContext: the secret would hold every sidecar's startup). The
// bridge reads no workloadSelector of DestinationRules (reported), so always.
func credentialForGatewaysOnly(tls *networking.ClientTLSSettings) bool {
	name := tls.GetCredentialName()
	mode := tls.GetMode()
	return name != "" && !strings.HasPrefix(name, "configmap://") &&
		(mode == networking.ClientTLSSettings_SIMPLE || mode == networking.ClientTLSSettings_MUTUAL)
}

// statPrefixDelimiter ends istiod's alt_stat_name of a cluster (util.DelimitedStatsPrefix).
const statPrefixDelimiter = ";"

// edsSource is an EDS cluster's config source as istiod writes it: ADS, v3, waiting for the
// load assignment without a timeout. Shared and only read.
var edsSource = &corepb.ConfigSource{
	ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
	InitialFetchTimeout:   durationpb.New(0),
	ResourceApiVersion:    corepb.ApiVersion_V3,
}

// dnsResolver is istiod's typed DNS resolver of DNS clusters: c-ares with at most 100 UDP
// queries per resolver (PILOT_DNS_CARES_UDP_MAX_QUERIES). Encoded once, only read.
var dnsResolver = func() *corepb.TypedExtensionConfig {
	typed, err := pack(&caresdns.CaresDnsResolverConfig{UdpMaxQueries: wrapperspb.UInt32(defaultDNSUDPQueries)})
	if err != nil {
		panic(err) // a constant message: only a bug fails it
	}
	return &corepb.TypedExtensionConfig{Name: "envoy.network.dns_resolver.cares", TypedConfig: typed}
}()

// setDNSDefaults sets what istiod sets on STRICT_DNS and LOGICAL_DNS clusters: IPv4 lookups
// (util.SelectDNSLookupFamily for a proxy of unknown or IPv4 addresses: the configuration is
// shared, so the proxy's own addresses are unknown), the c-ares resolver, 100ms jitter, a
// 60s refresh (MeshConfig dnsRefreshRate) and the records' TTLs respected.
func setDNSDefaults(c *clusterpb.Cluster) {
	c.DnsLookupFamily = clusterpb.Cluster_V4_ONLY
	c.TypedDnsResolverConfig = dnsResolver
	c.DnsJitter = durationpb.New(defaultDNSJitter)
	c.DnsRefreshRate = durationpb.New(defaultDNSRefreshRate) //nolint:staticcheck // istiod sets it
	c.RespectDnsTtl = true                                   //nolint:staticcheck // istiod sets it
}

// buildEndpoints builds a host's load assignments, for EDS clusters (STATIC and NONE
// resolution): per port, the service's and one per subset of its DestinationRule, each named
// as its cluster. A unit of its own, so that a change of endpoints (a ServiceEntry's, or a
// WorkloadEntry's) rebuilds only these. What is wrong with the ServiceEntry, its ports or the
// subsets' names is reported by the host's build, not twice; what is wrong with an endpoint,
// here.
func (t *Translator) buildEndpoints(host string) *unitState {
	se, _ := t.serviceEntryFor(host)
	if se == nil || !validHost(host) || !eds(se.resolution) {
		return &unitState{}
	}
	b := newBuild(t, kindServiceEntry, se.Key)
	dr, _ := t.destinationRuleFor(host)
	var room [2]port   // most ServiceEntries have one or two ports
	var ignored faults // the host's build reports them
	ports := appendServicePorts(room[:0], se, &ignored)
	subsets := dr.subsets()
	b.u.reserveOutputs(len(ports) * (1 + len(subsets)))
	pooled := getWorkloads()
	ws := t.appendWorkloads(*pooled, se)
	var epRoom [4]endpoint // a port's endpoints, read only while its load assignments are encoded
	for _, p := range ports {
		eps := appendPortEndpoints(epRoom[:0], ws, p, true, &b.fs)
		b.putLoadAssignment(ClusterName(p.number, "", host), eps)
		for i, ss := range subsets {
			if ss == nil {
				continue
			}
			subsetEps := subsetEndpoints(eps, ss.GetLabels())
			if len(subsetEps) == 0 && len(eps) > 0 {
				b.fs.add(kindDestinationRule, dr.Key, "subsets[%d] (%s): labels %s select no endpoint of %s; its clusters are empty",
					i, ss.GetName(), formatLabels(ss.GetLabels()), host)
			}
			b.putLoadAssignment(ClusterName(p.number, ss.GetName(), host), subsetEps)
		}
	}
	putWorkloads(pooled, ws)
	b.hideFromScopes(host, se)
	return b.done()
}

// workloadsPool holds the workload slices of the builds of load assignments: a build reads
// its workloads only while it encodes them, and a full load builds one a host (at a million
// hosts, 1.8 CPU-s of allocating and first touching 400 MB that lived a few microseconds).
var workloadsPool sync.Pool // of *[]workload

// getWorkloads returns an empty slice from the pool, or room for one.
func getWorkloads() *[]workload {
	if p, ok := workloadsPool.Get().(*[]workload); ok {
		return p
	}
	return new([]workload)
}

// putWorkloads returns a build's workloads to the pool in p, cleared: their strings are
// views into ServiceEntries' encodings, which a pooled slice would otherwise keep alive. Each
// keeps its label list, emptied and cleared, as room for the labels of the workload the next
// build writes there (appendEndpoints). A slice grown for a host of many endpoints is left to
// the collector.
func putWorkloads(p *[]workload, ws []workload) {
	if cap(ws) > maxPooledWorkloads {
		return
	}
	*p = emptied(ws)
	workloadsPool.Put(p)
}

// emptied is ws cleared to length zero, each workload's label list kept, emptied and
// cleared, as room for the next build's (see putWorkloads).
func emptied(ws []workload) []workload {
	for i := range ws {
		room := ws[i].labels
		clear(room[:cap(room)])
		ws[i] = workload{labels: room[:0]}
	}
	return ws[:0]
}

const maxPooledWorkloads = 64

// putLoadAssignment adds the load assignment of an EDS cluster, encoded directly (see
// encodeLoadAssignment), or built and validated when the direct encoding does not vouch for
// its endpoints.
func (b *build) putLoadAssignment(name string, eps []endpoint) {
	if enc, ok := encodeLoadAssignment(name, eps); ok {
		b.u.set(output{EndpointType, enc})
		return
	}
	b.put(EndpointType, name, loadAssignment(name, eps))
}

// dnsAssignment is the inline load assignment of a DNS cluster: the endpoints' addresses
// (host names, resolved by the proxy), or the host itself when the ServiceEntry lists none.
// LOGICAL_DNS takes exactly one endpoint: the first.
func (b *hostBuild) dnsAssignment(name string, p port, eps []endpoint, single bool) *endpointpb.ClusterLoadAssignment {
	if b.se.inline == 0 && len(b.se.selector()) == 0 {
		target := p.number
		if p.target != 0 {
			target = p.target
		}
		eps = []endpoint{{workload: &workload{address: b.host}, port: target}}
	}
	if single && len(eps) > 1 {
		b.fs.add(kindServiceEntry, b.se.Key, "resolution DNS_ROUND_ROBIN takes one endpoint, %d are listed for port %d; the first is used", len(eps), p.number)
		eps = eps[:1]
	}
	return loadAssignment(name, eps)
}

// loadAssignment groups endpoints by locality. A locality's weight is the sum of its
// endpoints' weights, so that it is at least 1: grpc-go ignores a locality without a weight.
func loadAssignment(name string, eps []endpoint) *endpointpb.ClusterLoadAssignment {
	cla := &endpointpb.ClusterLoadAssignment{ClusterName: name}
	byLocality := map[string]*endpointpb.LocalityLbEndpoints{}
	var order []string
	for _, ep := range eps {
		lle := byLocality[ep.locality]
		if lle == nil {
			lle = &endpointpb.LocalityLbEndpoints{Locality: parseLocality(ep.locality)}
			byLocality[ep.locality] = lle
			order = append(order, ep.locality)
		}
		w := max(ep.weight, 1)
		lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(ep, w))
		lle.LoadBalancingWeight = wrapperspb.UInt32(lle.LoadBalancingWeight.GetValue() + w)
	}
	slices.Sort(order)
	for _, l := range order {
		cla.Endpoints = append(cla.Endpoints, byLocality[l])
	}
	return cla
}

// lbEndpoint is an endpoint as istiod's EDS builds it (buildEnvoyLbEndpoint): its address and
// weight, without metadata. istiod's endpoint metadata is its telemetry label (istio
// "workload") and, for endpoints with Istio's mutual TLS (security.istio.io/tlsMode=istio),
// the envoy.transport_socket_match its auto mTLS selects by: the bridge has neither telemetry
// nor auto mTLS (doc.go, "Left out"). An endpoint's labels are not sent: subsets are clusters
// of their own, and nothing selects endpoints by metadata.
func lbEndpoint(ep endpoint, weight uint32) *endpointpb.LbEndpoint {
	return &endpointpb.LbEndpoint{
		HostIdentifier: &endpointpb.LbEndpoint_Endpoint{Endpoint: &endpointpb.Endpoint{
			Address: socketAddress(ep.address, ep.port),
		}},
		LoadBalancingWeight: wrapperspb.UInt32(weight),
	}
}

func socketAddress(addr string, port uint32) *corepb.Address {
	return &corepb.Address{Address: &corepb.Address_SocketAddress{SocketAddress: &corepb.SocketAddress{
		Address: addr, PortSpecifier: &corepb.SocketAddress_PortValue{PortValue: port},
	}}}
}

// parseLocality reads Istio's "region/zone/subzone". An empty locality is still a locality:
// grpc-go rejects endpoints without one.
func parseLocality(s string) *corepb.Locality {
	parts := strings.SplitN(s, "/", 3)
	l := &corepb.Locality{Region: parts[0]}
	if len(parts) > 1 {
		l.Zone = parts[1]
	}
	if len(parts) > 2 {
		l.SubZone = parts[2]
	}
	return l
}

func formatLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%s", k, labels[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}
