package kinds

import (
	"errors"
	"fmt"
	"math"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// validateDestinationRule mirrors Istio's ValidateDestinationRule: the host istiod dropped with
// "empty domain name not allowed" is refused here.
func validateDestinationRule(v *validator, dr *networking.DestinationRule) {
	spec := &specRoot
	hp := spec.f("host")
	v.add(&hp, validateWildcardDomain(dr.Host))
	tp := spec.f("trafficPolicy")
	v.trafficPolicyAt(&tp, dr.TrafficPolicy)
	subsets := spec.f("subsets")
	names := make(map[string]bool, len(dr.Subsets))
	for i, s := range dr.Subsets {
		sp := subsets.i(i)
		if s == nil {
			v.errorf(&sp, "subset may not be null")
			continue
		}
		np := sp.f("name")
		if names[s.Name] {
			v.errorf(&np, "duplicate subset names: %s", s.Name)
		}
		names[s.Name] = true
		v.add(&np, validateSubsetName(s.Name))
		lp := sp.f("labels")
		v.labelsAt(&lp, s.Labels)
		stp := sp.f("trafficPolicy")
		v.trafficPolicyAt(&stp, s.TrafficPolicy)
	}
	ep := spec.f("exportTo")
	v.exportToAt(&ep, dr.ExportTo, false, dr.GetWorkloadSelector() != nil)
	wp := spec.f("workloadSelector")
	v.workloadSelectorAt(&wp, dr.GetWorkloadSelector())
}

// trafficPolicyAt mirrors validateTrafficPolicy.
func (v *validator) trafficPolicyAt(p *path, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	if tp.OutlierDetection == nil && tp.ConnectionPool == nil && tp.LoadBalancer == nil && tp.Tls == nil &&
		tp.PortLevelSettings == nil && tp.Tunnel == nil && tp.ProxyProtocol == nil && tp.RetryBudget == nil {
		v.errorf(p, "traffic policy must have at least one field")
		return
	}
	if tp.Tunnel != nil && tp.ProxyProtocol != nil {
		v.errorf(p, "tunnel and proxyProtocol must not be set together")
		return
	}
	v.policyPartsAt(p, tp.OutlierDetection, tp.ConnectionPool, tp.LoadBalancer, tp.Tls)
	pp := p.f("portLevelSettings")
	for i, pl := range tp.PortLevelSettings {
		ip := pp.i(i)
		if pl == nil {
			v.errorf(&ip, "traffic policy may not be null")
			continue
		}
		if pl.Port == nil {
			portp := ip.f("port")
			v.errorf(&portp, "portTrafficPolicy must have valid port")
		}
		if pl.OutlierDetection == nil && pl.ConnectionPool == nil && pl.LoadBalancer == nil && pl.Tls == nil {
			v.errorf(&ip, "port traffic policy must have at least one field")
			continue
		}
		v.policyPartsAt(&ip, pl.OutlierDetection, pl.ConnectionPool, pl.LoadBalancer, pl.Tls)
	}
	if t := tp.Tunnel; t != nil {
		tunp := p.f("tunnel")
		if t.Protocol != "" && t.Protocol != "CONNECT" && t.Protocol != "POST" {
			prp := tunp.f("protocol")
			v.errorf(&prp, "tunnel protocol must be \"CONNECT\" or \"POST\"")
		}
		if fqdnErr, ipErr := validateFQDN(t.TargetHost), validateIPAddress(t.TargetHost); fqdnErr != nil && ipErr != nil {
			hp := tunp.f("targetHost")
			v.errorf(&hp, "tunnel target host must be valid FQDN or IP address: %s; %s", fqdnErr, ipErr)
		}
		if err := validatePort(int(t.TargetPort)); err != nil {
			portp := tunp.f("targetPort")
			v.errorf(&portp, "tunnel target port is invalid: %s", err)
		}
	}
	if pr := tp.ProxyProtocol; pr != nil && pr.Version != 0 && pr.Version != 1 {
		vp := p.f("proxyProtocol")
		verp := vp.f("version")
		v.errorf(&verp, "proxy protocol version is invalid: %d", pr.Version)
	}
}

// policyPartsAt checks what a traffic policy and a port's share, as validateTrafficPolicy and
// validatePortTrafficPolicies do.
func (v *validator) policyPartsAt(p *path, o *networking.OutlierDetection, pool *networking.ConnectionPoolSettings,
	lb *networking.LoadBalancerSettings, tls *networking.ClientTLSSettings,
) {
	op := p.f("outlierDetection")
	v.outlierDetectionAt(&op, o)
	cp := p.f("connectionPool")
	v.connectionPoolAt(&cp, pool)
	lp := p.f("loadBalancer")
	v.loadBalancerAt(&lp, lb)
	tlsp := p.f("tls")
	v.clientTLSAt(&tlsp, tls)
}

// outlierDetectionAt mirrors validateOutlierDetection.
func (v *validator) outlierDetectionAt(p *path, o *networking.OutlierDetection) {
	if o == nil {
		return
	}
	bp := p.f("baseEjectionTime")
	v.durationAt(&bp, o.BaseEjectionTime)
	if !o.SplitExternalLocalOriginErrors && o.ConsecutiveLocalOriginFailures.GetValue() > 0 {
		cp := p.f("consecutiveLocalOriginFailures")
		v.errorf(&cp, "outlier detection consecutive local origin failures is specified, but split external local origin errors is set to false")
	}
	ip := p.f("interval")
	v.durationAt(&ip, o.Interval)
	mp := p.f("maxEjectionPercent")
	v.add(&mp, validatePercent(o.MaxEjectionPercent))
	hp := p.f("minHealthPercent")
	v.add(&hp, validatePercent(o.MinHealthPercent))
}

// connectionPoolAt mirrors validateConnectionPool.
func (v *validator) connectionPoolAt(p *path, s *networking.ConnectionPoolSettings) {
	if s == nil {
		return
	}
	if s.Http == nil && s.Tcp == nil {
		v.errorf(p, "connection pool must have at least one field")
		return
	}
	if h := s.Http; h != nil {
		hp := p.f("http")
		for _, f := range [...]struct {
			field, msg string
			bad        bool
		}{
			{"http1MaxPendingRequests", "http1 max pending requests must be non-negative", h.Http1MaxPendingRequests < 0},
			{"http2MaxRequests", "http2 max requests must be non-negative", h.Http2MaxRequests < 0},
			{"maxRequestsPerConnection", "max requests per connection must be non-negative", h.MaxRequestsPerConnection < 0},
			{"maxRetries", "max retries must be non-negative", h.MaxRetries < 0},
			{"maxConcurrentStreams", "max concurrent streams must be non-negative", h.MaxConcurrentStreams < 0},
			{"useClientProtocol", "use client protocol must not be true when H2UpgradePolicy is UPGRADE",
				h.H2UpgradePolicy == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE && h.UseClientProtocol},
		} {
			if f.bad {
				fp := hp.f(f.field)
				v.add(&fp, errors.New(f.msg))
			}
		}
		ip := hp.f("idleTimeout")
		v.durationAt(&ip, h.IdleTimeout)
		if ka := h.GetHttp2KeepAlive(); ka != nil {
			kp := hp.f("http2KeepAlive")
			ip, tp := kp.f("interval"), kp.f("timeout")
			if ka.Interval == nil {
				v.errorf(&ip, "http2 keepalive interval is required")
			} else {
				v.add(&ip, validateDuration(ka.Interval))
			}
			if ka.Timeout == nil {
				v.errorf(&tp, "http2 keepalive timeout is required")
			} else {
				v.add(&tp, validateDuration(ka.Timeout))
			}
		}
	}
	if t := s.Tcp; t != nil {
		tp := p.f("tcp")
		if t.MaxConnections < 0 {
			mp := tp.f("maxConnections")
			v.errorf(&mp, "max connections must be non-negative")
		}
		cp := tp.f("connectTimeout")
		v.durationAt(&cp, t.ConnectTimeout)
		mp := tp.f("maxConnectionDuration")
		v.durationAt(&mp, t.MaxConnectionDuration)
		if t.IdleTimeout != nil && t.IdleTimeout.AsDuration().Milliseconds() != 0 { // 0s disables it
			ip := tp.f("idleTimeout")
			v.add(&ip, validateDuration(t.IdleTimeout))
		}
		if ka := t.TcpKeepalive; ka != nil {
			kp := tp.f("tcpKeepalive")
			timep, ip := kp.f("time"), kp.f("interval")
			v.durationAt(&timep, ka.Time)
			v.durationAt(&ip, ka.Interval)
		}
	}
}

// loadBalancerAt mirrors validateLoadBalancer.
// The failover rules that need an outlier policy only warn without one: istiod's warnings
// are not reported, so the outlier policy is not read here.
func (v *validator) loadBalancerAt(p *path, lb *networking.LoadBalancerSettings) {
	if lb == nil {
		return
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		cp := p.f("consistentHash")
		if c := ch.GetHttpCookie(); c != nil {
			hp := cp.f("httpCookie")
			if c.GetName() == "" {
				np := hp.f("name")
				v.errorf(&np, "name required for HttpCookie")
			}
			ap := hp.f("attributes")
			seen := map[string]bool{}
			for i, a := range c.GetAttributes() {
				ip := ap.i(i)
				switch {
				case a.GetName() == "":
					v.errorf(&ip, "cookie attribute name cannot be empty")
				case seen[a.GetName()]:
					v.errorf(&ip, "duplicate cookie attribute name: %s", a.GetName())
				default:
					seen[a.GetName()] = true
				}
			}
		}
		if ch.MinimumRingSize != 0 && ch.GetHashAlgorithm() != nil { //nolint:staticcheck // deprecated, still validated by Istio
			v.errorf(&cp, "only one of MinimumRingSize or Maglev/Ringhash can be specified")
		}
		if ml := ch.GetMaglev(); ml != nil {
			mp := cp.f("maglev")
			tp := mp.f("tableSize")
			if ml.TableSize == 0 {
				v.errorf(&tp, "tableSize must be set for maglev")
			}
			if ml.TableSize >= 5000011 {
				v.errorf(&tp, "tableSize must be less than 5000011 for maglev")
			}
			if !isPrime(ml.TableSize) {
				v.errorf(&tp, "tableSize must be a prime number for maglev")
			}
		}
	}
	if lb.LocalityLbSetting != nil && lb.ZoneAwareLbSetting != nil {
		v.errorf(p, "only one of localityLbSetting and zoneAwareLbSetting can be set")
	}
	llp := p.f("localityLbSetting")
	v.localityLbSettingAt(&llp, lb.LocalityLbSetting)
	zp := p.f("zoneAwareLbSetting")
	v.zoneAwareLbSettingAt(&zp, lb.ZoneAwareLbSetting)
	if w := lb.Warmup; w != nil {
		wp := p.f("warmup")
		dp := wp.f("duration")
		if w.Duration == nil {
			v.errorf(&dp, "duration is required")
		} else {
			v.add(&dp, validateDuration(w.Duration))
		}
		if w.MinimumPercent.GetValue() > 100 {
			mp := wp.f("minimumPercent")
			v.errorf(&mp, "minimumPercent value should be less than or equal to 100")
		}
		if w.Aggression != nil && w.Aggression.GetValue() <= 0 {
			ap := wp.f("aggression")
			v.errorf(&ap, "aggression should be greater than 0")
		}
	}
}

// isPrime is Envoy's primality test (source/common/common/utility.cc), as Istio copied it: a
// Maglev table size Envoy refuses, Istio refuses.
func isPrime(x uint64) bool {
	if x != 0 && x < 4 {
		return true
	} else if x&1 == 0 {
		return false
	}
	limit := uint64(math.Sqrt(float64(x)))
	for factor := uint64(3); factor <= limit; factor += 2 {
		if x%factor == 0 {
			return false
		}
	}
	return true
}

// Topology labels that a failover priority may not name (Istio's pilot label package).
var topologyLabels = []string{"topology.kubernetes.io/region", "topology.kubernetes.io/zone", "topology.istio.io/subzone"}

// localityLbSettingAt mirrors agent.ValidateLocalityLbSetting.
func (v *validator) localityLbSettingAt(p *path, lb *networking.LocalityLoadBalancerSetting) {
	if lb == nil {
		return
	}
	if len(lb.GetDistribute()) > 0 && len(lb.GetFailover()) > 0 {
		v.errorf(p, "can not simultaneously specify 'distribute' and 'failover'")
		return
	}
	if len(lb.GetFailover()) > 0 {
		for _, l := range lb.GetFailoverPriority() {
			for _, t := range topologyLabels {
				if l == t {
					fp := p.f("failoverPriority")
					v.errorf(&fp, "can not simultaneously set 'failover' and topology label '%s' in 'failover_priority'", l)
					return
				}
			}
		}
	}
	dp := p.f("distribute")
	from := make([]string, 0, len(lb.GetDistribute()))
	for i, d := range lb.GetDistribute() {
		ip := dp.i(i)
		from = append(from, d.GetFrom())
		var total uint32
		to := make([]string, 0, len(d.GetTo()))
		for loc, w := range d.GetTo() {
			to = append(to, loc)
			if w == 0 || w > 100 {
				tp := ip.f("to")
				v.errorf(&tp, "locality weight must be in range [1, 100]")
				return
			}
			total += w
		}
		if total != 100 {
			tp := ip.f("to")
			v.errorf(&tp, "total locality weight %v != 100", total)
			return
		}
		tp := ip.f("to")
		v.add(&tp, validateLocalities(to))
	}
	v.add(&dp, validateLocalities(from))
	failoverAt(v, p, lb.GetFailover(), "locality lb", "locality lb failover only specify region")
}

// zoneAwareLbSettingAt mirrors agent.ValidateZoneAwareLbSetting.
func (v *validator) zoneAwareLbSettingAt(p *path, lb *networking.ZoneAwareLoadBalancerSetting) {
	if lb == nil {
		return
	}
	pp := p.f("failoverPriority")
	for i, l := range lb.GetFailoverPriority() {
		for _, t := range topologyLabels {
			if l == t {
				ip := pp.i(i)
				v.errorf(&ip, "'failover_priority' for zone aware lb must not use topology label '%s'; region- and zone-level routing are handled automatically", l)
			}
		}
	}
	failoverAt(v, p, lb.GetFailover(), "zone aware lb",
		"zone aware lb failover only specifies region; zone and subzone failover are handled automatically")
}

// failoverAt checks failover regions as ValidateLocalityLbSetting and
// ValidateZoneAwareLbSetting do: two different regions, no zone, no wildcard. lb and
// regionOnly are their words.
func failoverAt[F interface {
	GetFrom() string
	GetTo() string
}](v *validator, p *path, failovers []F, lb, regionOnly string) {
	fp := p.f("failover")
	for i, f := range failovers {
		ip := fp.i(i)
		from, to := f.GetFrom(), f.GetTo()
		if from == to {
			v.errorf(&ip, "%s failover settings must specify different regions", lb)
		}
		if strings.Contains(from, "/") || strings.Contains(to, "/") {
			v.errorf(&ip, "%s", regionOnly)
		}
		if strings.Contains(to, "*") || strings.Contains(from, "*") {
			v.errorf(&ip, "%s failover region should not contain '*' wildcard", lb)
		}
	}
}

// validateLocalities mirrors agent.validateLocalities: region/zone/subzone, one trailing "*"
// at most, none overlapping another.
func validateLocalities(localities []string) error {
	type zones map[string]map[string]bool
	regions := map[string]zones{}
	for _, loc := range localities {
		if n := strings.Count(loc, "*"); n > 0 && (n > 1 || !strings.HasSuffix(loc, "*")) {
			return fmt.Errorf("locality %s wildcard '*' number can not exceed 1 and must be in the end", loc)
		}
		if _, ok := regions["*"]; ok {
			return fmt.Errorf("locality %s overlap with previous specified ones", loc)
		}
		items := strings.SplitN(loc, "/", 3)
		for _, it := range items {
			if it == "" {
				return fmt.Errorf("locality %s must not contain empty region/zone/subzone info", loc)
			}
		}
		overlap := fmt.Errorf("locality %s overlap with previous specified ones", loc)
		region := items[0]
		switch len(items) {
		case 1:
			if _, ok := regions[region]; ok {
				return overlap
			}
			regions[region] = zones{"*": {"*": true}}
		case 2:
			zone := items[1]
			if zs, ok := regions[region]; ok {
				if _, ok := zs["*"]; ok {
					return overlap
				}
				if _, ok := zs[zone]; ok {
					return overlap
				}
				zs[zone] = map[string]bool{"*": true}
			} else {
				regions[region] = zones{zone: {"*": true}}
			}
		case 3:
			zone, sub := items[1], items[2]
			if zs, ok := regions[region]; ok {
				if _, ok := zs["*"]; ok {
					return overlap
				}
				if subs, ok := zs[zone]; ok {
					if subs["*"] || subs[sub] {
						return overlap
					}
					subs[sub] = true
				} else {
					zs[zone] = map[string]bool{sub: true}
				}
			} else {
				regions[region] = zones{zone: {sub: true}}
			}
		}
	}
	return nil
}

// clientTLSAt mirrors agent.ValidateTLS.
func (v *validator) clientTLSAt(p *path, s *networking.ClientTLSSettings) {
	if s == nil {
		return
	}
	if rest, ok := strings.CutPrefix(s.CredentialName, "configmap://"); ok {
		cp := p.f("credentialName")
		ns, name, found := strings.Cut(rest, "/")
		if i := strings.IndexByte(name, '/'); i >= 0 {
			name = name[:i] // ParseResourceName reads the first two segments
		}
		switch {
		case !found:
			v.errorf(&cp, "invalid configmap:// credentialName: invalid resource name %q. Expected namespace and name", s.CredentialName)
		case ns == "":
			v.errorf(&cp, "invalid configmap:// credentialName: invalid resource name %q. Expected namespace", s.CredentialName)
		case name == "":
			v.errorf(&cp, "invalid configmap:// credentialName: invalid resource name %q. Expected name", s.CredentialName)
		case ns != v.namespace || v.namespace == "":
			v.errorf(&cp, "invalid configmap:// credentialName: namespace must match the configuration namespace %q", v.namespace)
		}
	}
	if s.GetInsecureSkipVerify().GetValue() {
		ip := p.f("insecureSkipVerify")
		if s.Mode == networking.ClientTLSSettings_SIMPLE && (s.CaCertificates != "" || s.CredentialName != "" || s.SubjectAltNames != nil) {
			v.errorf(&ip, "cannot specify CaCertificates or CredentialName or SubjectAltNames when InsecureSkipVerify is set true")
		}
		if s.Mode == networking.ClientTLSSettings_MUTUAL && (s.CaCertificates != "" || s.SubjectAltNames != nil) {
			v.errorf(&ip, "cannot specify CaCertificates or SubjectAltNames when InsecureSkipVerify is set true")
		}
	}
	if (s.Mode == networking.ClientTLSSettings_SIMPLE || s.Mode == networking.ClientTLSSettings_MUTUAL) && s.CredentialName != "" {
		if s.ClientCertificate != "" || s.CaCertificates != "" || s.PrivateKey != "" || s.CaCrl != "" {
			cp := p.f("credentialName")
			v.errorf(&cp, "cannot specify client certificates or CA certificate or CA CRL If credentialName is set")
		}
		return // the credentials are fetched by name
	}
	if s.Mode == networking.ClientTLSSettings_MUTUAL {
		if s.ClientCertificate == "" {
			cp := p.f("clientCertificate")
			v.errorf(&cp, "client certificate required for mutual tls")
		}
		if s.PrivateKey == "" {
			kp := p.f("privateKey")
			v.errorf(&kp, "private key required for mutual tls")
		}
	}
}
