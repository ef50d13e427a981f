package kinds

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensions "istio.io/api/extensions/v1alpha1"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// validationCase is a resource and what istiod's validation says of it: valid (field ""), or
// refused with a fault of field whose message mentions mentions.
type validationCase struct {
	name     string
	meta     *mcpapi.Metadata // nil: "ns/name", no labels or annotations
	spec     proto.Message
	field    string
	mentions string
}

// Helpers that build the common parts of the cases.
func httpRoute(host string) *networking.HTTPRoute {
	return &networking.HTTPRoute{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host}}}}
}

func seSpec(mod func(*networking.ServiceEntry)) *networking.ServiceEntry {
	se := &networking.ServiceEntry{
		Hosts:      []string{"api.example.com"},
		Ports:      []*networking.ServicePort{{Number: 443, Name: "https", Protocol: "TLS"}},
		Resolution: networking.ServiceEntry_DNS,
	}
	if mod != nil {
		mod(se)
	}
	return se
}

func vsSpec(mod func(*networking.VirtualService)) *networking.VirtualService {
	vs := &networking.VirtualService{Hosts: []string{"reviews"}, Http: []*networking.HTTPRoute{httpRoute("reviews")}}
	if mod != nil {
		mod(vs)
	}
	return vs
}

func gwSpec(mod func(*networking.Gateway)) *networking.Gateway {
	gw := &networking.Gateway{Servers: []*networking.Server{{
		Port:  &networking.Port{Number: 443, Name: "https", Protocol: "HTTPS"},
		Hosts: []string{"shop/*.example.com"},
		Tls:   &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: "shop-cert"},
	}}}
	if mod != nil {
		mod(gw)
	}
	return gw
}

var validationCases = map[string][]validationCase{
	"ServiceEntry": {
		{name: "valid DNS", spec: seSpec(nil)},
		{name: "valid STATIC with endpoints", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_STATIC
			se.Addresses = []string{"240.0.0.1"}
			se.Endpoints = []*networking.WorkloadEntry{{Address: "10.0.0.1", Ports: map[string]uint32{"https": 8443}, Labels: map[string]string{"app": "api"}}}
		})},
		{name: "valid wildcard host, NONE", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Hosts = []string{"*.example.com"}
			se.Resolution = networking.ServiceEntry_NONE
		})},
		{name: "no hosts", spec: seSpec(func(se *networking.ServiceEntry) { se.Hosts = nil }), field: "spec.hosts", mentions: "at least one host"},
		{name: "empty host", spec: seSpec(func(se *networking.ServiceEntry) { se.Hosts = []string{""} }), field: "spec.hosts[0]", mentions: "empty domain name not allowed"},
		{name: "full wildcard host", spec: seSpec(func(se *networking.ServiceEntry) { se.Hosts = []string{"*"} }), field: "spec.hosts[0]", mentions: "invalid host *"},
		{name: "host with underscore", spec: seSpec(func(se *networking.ServiceEntry) { se.Hosts = []string{"bad_host.example.com"} }), field: "spec.hosts[0]", mentions: `label "bad_host" invalid`},
		{name: "numeric top-level domain", spec: seSpec(func(se *networking.ServiceEntry) { se.Hosts = []string{"a.123"} }), field: "spec.hosts[0]", mentions: "cannot be all-numeric"},
		{name: "bad address", spec: seSpec(func(se *networking.ServiceEntry) { se.Addresses = []string{"10.0.0.300"} }), field: "spec.addresses[0]", mentions: "not a valid IP"},
		{name: "bad CIDR", spec: seSpec(func(se *networking.ServiceEntry) { se.Addresses = []string{"10.0.0.0/33"} }), field: "spec.addresses[0]", mentions: "not a valid CIDR block"},
		{name: "CIDR with DNS", spec: seSpec(func(se *networking.ServiceEntry) { se.Addresses = []string{"10.0.0.0/8"} }), field: "spec.addresses", mentions: "CIDR addresses are allowed only for NONE/STATIC"},
		{name: "port 0", spec: seSpec(func(se *networking.ServiceEntry) { se.Ports[0].Number = 0 }), field: "spec.ports[0].number", mentions: "port number 0 must be in the range 1..65535"},
		{name: "port over 65535", spec: seSpec(func(se *networking.ServiceEntry) { se.Ports[0].Number = 70000 }), field: "spec.ports[0].number", mentions: "1..65535"},
		{name: "port name not a DNS label", spec: seSpec(func(se *networking.ServiceEntry) { se.Ports[0].Name = "Web_Port" }), field: "spec.ports[0].name", mentions: "invalid port name: Web_Port"},
		{name: "unknown protocol", spec: seSpec(func(se *networking.ServiceEntry) { se.Ports[0].Protocol = "QUIC" }), field: "spec.ports[0].protocol", mentions: "unsupported protocol: QUIC"},
		{name: "duplicate port number", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Ports = append(se.Ports, &networking.ServicePort{Number: 443, Name: "tls2", Protocol: "TLS"})
		}), field: "spec.ports[1].number", mentions: "service entry port 443 already defined"},
		{name: "target port out of range", spec: seSpec(func(se *networking.ServiceEntry) { se.Ports[0].TargetPort = 70000 }), field: "spec.ports[0].targetPort", mentions: "1..65535"},
		{name: "STATIC endpoint with a host name", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_STATIC
			se.Endpoints = []*networking.WorkloadEntry{{Address: "api.internal"}}
		}), field: "spec.endpoints[0].address", mentions: "is not a valid IP address"},
		{name: "endpoint port not a service port", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_STATIC
			se.Endpoints = []*networking.WorkloadEntry{{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 9000}}}
		}), field: "spec.endpoints[0].ports.grpc", mentions: "is not defined by the service entry"},
		{name: "endpoint label value", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Endpoints = []*networking.WorkloadEntry{{Address: "api.internal", Labels: map[string]string{"app": "-bad"}}}
		}), field: "spec.endpoints[0].labels.app", mentions: `invalid tag value: "-bad"`},
		{name: "NONE with endpoints", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_NONE
			se.Endpoints = []*networking.WorkloadEntry{{Address: "10.0.0.1"}}
		}), field: "spec.endpoints", mentions: "no endpoints should be provided for resolution type none"},
		{name: "DNS_ROUND_ROBIN with two endpoints", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_DNS_ROUND_ROBIN
			se.Endpoints = []*networking.WorkloadEntry{{Address: "a.internal"}, {Address: "b.internal"}}
		}), field: "spec.endpoints", mentions: "there must only be 0 or 1 endpoint"},
		{name: "selector and endpoints", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_STATIC
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "api"}}
			se.Endpoints = []*networking.WorkloadEntry{{Address: "10.0.0.1"}}
		}), field: "spec.workloadSelector", mentions: "only one of WorkloadSelector or Endpoints"},
		{name: "wildcard in selector", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_STATIC
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "*"}}
		}), field: "spec.workloadSelector.labels.app", mentions: "wildcard is not supported in selector"},
		{name: "several hosts on a TCP port", spec: seSpec(func(se *networking.ServiceEntry) {
			se.Hosts = []string{"a.example.com", "b.example.com"}
			se.Ports[0].Protocol = "TCP"
		}), field: "spec.ports[0]", mentions: "multiple hosts provided with non-HTTP, non-TLS ports"},
		{name: "unknown resolution", spec: seSpec(func(se *networking.ServiceEntry) { se.Resolution = 42 }), field: "spec.resolution", mentions: "unsupported resolution type"},
		{name: "DYNAMIC_DNS without wildcard", spec: seSpec(func(se *networking.ServiceEntry) { se.Resolution = networking.ServiceEntry_DYNAMIC_DNS }), field: "spec.hosts[0]", mentions: "host must be wildcarded"},
		{name: "exportTo ~ and more", spec: seSpec(func(se *networking.ServiceEntry) { se.ExportTo = []string{"~", "other"} }), field: "spec.exportTo", mentions: "cannot export service entry to no one (~) and someone"},
		{name: "exportTo . and own namespace", spec: seSpec(func(se *networking.ServiceEntry) { se.ExportTo = []string{"ns", "."} }), field: "spec.exportTo[1]", mentions: "duplicate entries in exportTo: . and current namespace ns"},
		{name: "exportTo bad namespace", spec: seSpec(func(se *networking.ServiceEntry) { se.ExportTo = []string{"Not_A_Label"} }), field: "spec.exportTo[0]", mentions: "only .,*, or a valid DNS 1123 label"},
	},
	"VirtualService": {
		{name: "valid", spec: vsSpec(nil)},
		{name: "valid delegate", spec: &networking.VirtualService{Http: []*networking.HTTPRoute{httpRoute("reviews")}}},
		{name: "valid gateway with SNI", spec: &networking.VirtualService{
			Hosts: []string{"*.example.com"}, Gateways: []string{"shop/edge"},
			Tls: []*networking.TLSRoute{{
				Match: []*networking.TLSMatchAttributes{{SniHosts: []string{"api.example.com"}, Port: 443}},
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "api.shop.svc.cluster.local", Port: &networking.PortSelector{Number: 443}}}},
			}},
		}},
		{name: "no routes", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http = nil }), field: "spec", mentions: "http, tcp or tls must be provided"},
		{name: "wildcard host on the mesh", spec: vsSpec(func(vs *networking.VirtualService) { vs.Hosts = []string{"*"} }), field: "spec.hosts[0]", mentions: "wildcard host * is not allowed"},
		{name: "bad host", spec: vsSpec(func(vs *networking.VirtualService) { vs.Hosts = []string{"re_views"} }), field: "spec.hosts[0]", mentions: `label "re_views" invalid`},
		{name: "duplicate hosts", spec: vsSpec(func(vs *networking.VirtualService) { vs.Hosts = []string{"*.example.com", "a.example.com"} }), field: "spec.hosts[1]", mentions: "duplicate hosts in virtual service"},
		{name: "bad gateway name", spec: vsSpec(func(vs *networking.VirtualService) { vs.Gateways = []string{"shop/Edge_GW"} }), field: "spec.gateways[0]", mentions: `invalid value for gateway name: "Edge_GW"`},
		{name: "delegate with gateways", spec: &networking.VirtualService{Gateways: []string{"shop/edge"}, Http: []*networking.HTTPRoute{httpRoute("reviews")}},
			field: "spec.gateways", mentions: "delegate virtual service must have no gateways specified"},
		{name: "route without destination host", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http[0] = httpRoute("") }), field: "spec.http[0].route[0].destination.host", mentions: "empty domain name not allowed"},
		{name: "destination host *", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http[0] = httpRoute("*") }), field: "spec.http[0].route[0].destination.host", mentions: "invalid destination host *"},
		{name: "bad subset", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http[0].Route[0].Destination.Subset = "v_1" }), field: "spec.http[0].route[0].destination.subset", mentions: "subset name is invalid: v_1"},
		{name: "destination port 0", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Route[0].Destination.Port = &networking.PortSelector{}
		}), field: "spec.http[0].route[0].destination.port.number", mentions: "1..65535"},
		{name: "weights total 0", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Route = append(vs.Http[0].Route, &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: "ratings"}})
		}), field: "spec.http[0].route", mentions: "total destination weight = 0"},
		{name: "negative weight", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http[0].Route[0].Weight = -1 }), field: "spec.http[0].route[0].weight", mentions: "weight -1 < 0"},
		{name: "route and redirect", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Redirect = &networking.HTTPRedirect{Uri: "/new"}
		}), field: "spec.http[0].redirect", mentions: "HTTP route cannot contain both route and redirect"},
		{name: "no route, redirect or direct response", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http[0].Route = nil }), field: "spec.http[0].route", mentions: "HTTP route, redirect or direct_response is required"},
		{name: "bad regex", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Match = []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "(unclosed"}}}}
		}), field: "spec.http[0].match[0].uri", mentions: "error parsing regexp"},
		{name: "empty prefix on a header", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Match = []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{"x-user": {MatchType: &networking.StringMatch_Prefix{}}}}}
		}), field: "spec.http[0].match[0].headers.x-user", mentions: "prefix string match should not be empty"},
		{name: "bad header name", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Match = []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{"x user": {MatchType: &networking.StringMatch_Exact{Exact: "a"}}}}}
		}), field: `spec.http[0].match[0].headers["x user"]`, mentions: "is not a valid header name"},
		{name: "JWT claim routing on the mesh", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Match = []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{"@request.auth.claims.group": {MatchType: &networking.StringMatch_Exact{Exact: "a"}}}}}
		}), field: `spec.http[0].match[0].headers["@request.auth.claims.group"]`, mentions: "JWT claim based routing"},
		{name: "match port", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Match = []*networking.HTTPMatchRequest{{Port: 70000}}
		}), field: "spec.http[0].match[0].port", mentions: "1..65535"},
		{name: "set Host in response", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Headers = &networking.Headers{Response: &networking.Headers_HeaderOperations{Set: map[string]string{"Host": "x"}}}
		}), field: "spec.http[0].headers.response.set.Host", mentions: "cannot set Host header"},
		{name: "header value with bad variable", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Headers = &networking.Headers{Request: &networking.Headers_HeaderOperations{Add: map[string]string{"x-id": "%START_TIME"}}}
		}), field: "spec.http[0].headers.request.add.x-id", mentions: "Un-terminated variable expression"},
		{name: "bad timeout", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http[0].Timeout = durationpb.New(500_000) }), field: "spec.http[0].timeout", mentions: "duration must be greater than 1ms"},
		{name: "bad retryOn", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Retries = &networking.HTTPRetry{Attempts: 3, RetryOn: "5xx,sometimes"}
		}), field: "spec.http[0].retries.retryOn", mentions: `"sometimes" is not a valid retryOn policy`},
		{name: "fault without abort or delay", spec: vsSpec(func(vs *networking.VirtualService) { vs.Http[0].Fault = &networking.HTTPFaultInjection{} }),
			field: "spec.http[0].fault", mentions: "must have an abort and/or a delay"},
		{name: "abort with a bad status", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].Fault = &networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{ErrorType: &networking.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: 700}}}
		}), field: "spec.http[0].fault.abort.httpStatus", mentions: "HTTP status 700 is not in range 200-599"},
		{name: "CORS method", spec: vsSpec(func(vs *networking.VirtualService) {
			vs.Http[0].CorsPolicy = &networking.CorsPolicy{AllowMethods: []string{"FETCH"}}
		}), field: "spec.http[0].corsPolicy.allowMethods[0]", mentions: `"FETCH" is not a supported HTTP method`},
		{name: "TLS route without SNI hosts", spec: &networking.VirtualService{
			Hosts: []string{"api.example.com"}, Gateways: []string{"shop/edge"},
			Tls: []*networking.TLSRoute{{Match: []*networking.TLSMatchAttributes{{}}, Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "api"}}}}},
		}, field: "spec.tls[0].match[0].sniHosts", mentions: "TLS match must have at least one SNI host"},
		{name: "SNI host outside the hosts", spec: &networking.VirtualService{
			Hosts: []string{"api.example.com"}, Gateways: []string{"shop/edge"},
			Tls: []*networking.TLSRoute{{Match: []*networking.TLSMatchAttributes{{SniHosts: []string{"other.example.com"}}}, Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "api"}}}}},
		}, field: "spec.tls[0].match[0].sniHosts[0]", mentions: "is not a compatible subset"},
		{name: "TCP route without destinations", spec: &networking.VirtualService{Hosts: []string{"db"}, Tcp: []*networking.TCPRoute{{}}},
			field: "spec.tcp[0].route", mentions: "TCP route is required"},
		{name: "TCP match subnet", spec: &networking.VirtualService{Hosts: []string{"db"}, Tcp: []*networking.TCPRoute{{
			Match: []*networking.L4MatchAttributes{{DestinationSubnets: []string{"10.0.0.0/40"}}},
			Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "db"}}},
		}}}, field: "spec.tcp[0].match[0].destinationSubnets[0]", mentions: "not a valid CIDR block"},
	},
	"DestinationRule": {
		{name: "valid", spec: &networking.DestinationRule{
			Host: "reviews.shop.svc.cluster.local",
			TrafficPolicy: &networking.TrafficPolicy{
				ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 100, ConnectTimeout: durationpb.New(250_000_000)}},
				Tls:            &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
			},
			Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}},
		}},
		{name: "empty host", spec: &networking.DestinationRule{}, field: "spec.host", mentions: "empty domain name not allowed"},
		{name: "host too long", spec: &networking.DestinationRule{Host: strings.Repeat("a.", 130) + "com"}, field: "spec.host", mentions: "too long (max 255)"},
		{name: "label too long", spec: &networking.DestinationRule{Host: strings.Repeat("a", 64) + ".com"}, field: "spec.host", mentions: "invalid (label"},
		{name: "empty traffic policy", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{}}, field: "spec.trafficPolicy", mentions: "traffic policy must have at least one field"},
		{name: "subset without name", spec: &networking.DestinationRule{Host: "r", Subsets: []*networking.Subset{{}}}, field: "spec.subsets[0].name", mentions: "subset name cannot be empty"},
		{name: "duplicate subsets", spec: &networking.DestinationRule{Host: "r", Subsets: []*networking.Subset{{Name: "v1"}, {Name: "v1"}}}, field: "spec.subsets[1].name", mentions: "duplicate subset names: v1"},
		{name: "subset label key", spec: &networking.DestinationRule{Host: "r", Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"bad key": "v"}}}},
			field: `spec.subsets[0].labels["bad key"]`, mentions: "invalid tag key"},
		{name: "negative max connections", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: -1}},
		}}, field: "spec.trafficPolicy.connectionPool.tcp.maxConnections", mentions: "max connections must be non-negative"},
		{name: "outlier percent", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			OutlierDetection: &networking.OutlierDetection{MaxEjectionPercent: 150},
		}}, field: "spec.trafficPolicy.outlierDetection.maxEjectionPercent", mentions: "percentage 150 is not in range 0..100"},
		{name: "mutual TLS without certificate", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL, PrivateKey: "/k"},
		}}, field: "spec.trafficPolicy.tls.clientCertificate", mentions: "client certificate required for mutual tls"},
		{name: "maglev table not prime", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
				HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_Maglev{Maglev: &networking.LoadBalancerSettings_ConsistentHashLB_MagLev{TableSize: 1000}},
			}}},
		}}, field: "spec.trafficPolicy.loadBalancer.consistentHash.maglev.tableSize", mentions: "tableSize must be a prime number"},
		{name: "locality weights", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "us-west/*", To: map[string]uint32{"us-west/zone1/*": 60}}},
			}},
		}}, field: "spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to", mentions: "total locality weight 60 != 100"},
		{name: "failover to the same region", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
				Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "us-east", To: "us-east"}},
			}},
		}}, field: "spec.trafficPolicy.loadBalancer.localityLbSetting.failover[0]", mentions: "locality lb failover settings must specify different regions"},
		{name: "zone-aware failover to a zone", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{
				Failover: []*networking.ZoneAwareLoadBalancerSetting_Failover{{From: "us-east", To: "us-west/zone1"}},
			}},
		}}, field: "spec.trafficPolicy.loadBalancer.zoneAwareLbSetting.failover[0]", mentions: "zone aware lb failover only specifies region"},
		{name: "port level policy without port", spec: &networking.DestinationRule{Host: "r", TrafficPolicy: &networking.TrafficPolicy{
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}}},
		}}, field: "spec.trafficPolicy.portLevelSettings[0].port", mentions: "portTrafficPolicy must have valid port"},
		{name: "selector and exportTo elsewhere", spec: &networking.DestinationRule{Host: "r",
			WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "r"}}, ExportTo: []string{"other"},
		}, field: "spec.exportTo", mentions: "cannot have exportTo beyond current namespace"},
	},
	"Gateway": {
		{name: "valid", spec: gwSpec(nil)},
		{name: "valid HTTP redirect to HTTPS", spec: &networking.Gateway{Servers: []*networking.Server{{
			Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"},
			Tls: &networking.ServerTLSSettings{HttpsRedirect: true},
		}}}},
		{name: "SIMPLE TLS on HTTP", spec: &networking.Gateway{Servers: []*networking.Server{{
			Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"},
			Tls: &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: "c"},
		}}}, field: "spec.servers[0].tls", mentions: "server cannot have TLS settings for plain text HTTP ports"},
		{name: "no servers", spec: &networking.Gateway{}, field: "spec.servers", mentions: "gateway must have at least one server"},
		{name: "name not a DNS label", meta: &mcpapi.Metadata{Name: "shop/edge.gw"}, spec: gwSpec(nil), field: "metadata.name", mentions: `invalid gateway name: "edge.gw"`},
		{name: "server without hosts", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Hosts = nil }), field: "spec.servers[0].hosts", mentions: "at least one host"},
		{name: "short host name", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Hosts = []string{"shop/reviews"} }), field: "spec.servers[0].hosts[0]", mentions: "short names (non FQDN) are not allowed"},
		{name: "partial wildcard", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Hosts = []string{"*/a*.example.com"} }), field: "spec.servers[0].hosts[0]", mentions: "partial wildcard"},
		{name: "bad host namespace", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Hosts = []string{"Shop_NS/a.example.com"} }), field: "spec.servers[0].hosts[0]", mentions: `invalid namespace value "Shop_NS" in gateway`},
		{name: "no port", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Port = nil }), field: "spec.servers[0].port", mentions: "port is required"},
		{name: "port without name", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Port.Name = "" }), field: "spec.servers[0].port.name", mentions: "port name must be set"},
		{name: "port protocol", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Port.Protocol = "SMTP" }), field: "spec.servers[0].port.protocol", mentions: `invalid protocol "SMTP"`},
		{name: "port number", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Port.Number = 0 }), field: "spec.servers[0].port.number", mentions: "1..65535"},
		{name: "HTTPS without TLS", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Tls = nil }), field: "spec.servers[0].tls", mentions: "server must have TLS settings for HTTPS/TLS protocols"},
		{name: "SIMPLE without certificate", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Tls.CredentialName = "" }), field: "spec.servers[0].tls.serverCertificate", mentions: "SIMPLE TLS requires a server certificate"},
		{name: "ISTIO_MUTUAL with a certificate", spec: gwSpec(func(gw *networking.Gateway) {
			gw.Servers[0].Tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_ISTIO_MUTUAL, ServerCertificate: "/c"}
		}), field: "spec.servers[0].tls.serverCertificate", mentions: "ISTIO_MUTUAL TLS cannot have associated server certificate"},
		{name: "duplicate port names", spec: gwSpec(func(gw *networking.Gateway) {
			gw.Servers = append(gw.Servers, &networking.Server{Port: &networking.Port{Number: 8443, Name: "https", Protocol: "HTTPS"}, Hosts: []string{"*/b.example.com"},
				Tls: &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: "b"}})
		}), field: "spec.servers[1].port.name", mentions: "port names in servers must be unique"},
		{name: "bad bind", spec: gwSpec(func(gw *networking.Gateway) { gw.Servers[0].Bind = "localhost" }), field: "spec.servers[0].bind", mentions: "localhost is not a valid IP"},
	},
	"Sidecar": {
		{name: "valid", spec: &networking.Sidecar{
			Ingress: []*networking.IstioIngressListener{{Port: &networking.SidecarPort{Number: 9080, Protocol: "HTTP", Name: "http"}, DefaultEndpoint: "127.0.0.1:8080"}},
			Egress:  []*networking.IstioEgressListener{{Hosts: []string{"./*", "istio-system/*"}}},
		}},
		{name: "empty", spec: &networking.Sidecar{}, field: "spec", mentions: "sidecar: empty configuration provided"},
		{name: "egress without hosts", spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{}}}, field: "spec.egress[0].hosts", mentions: "egress listener must contain at least one host"},
		{name: "egress host without namespace", spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"reviews.shop.svc.cluster.local"}}}},
			field: "spec.egress[0].hosts[0]", mentions: "host must be of form namespace/dnsName"},
		{name: "catch-all egress not last", spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{
			{Hosts: []string{"*/*"}}, {Port: &networking.SidecarPort{Number: 80, Protocol: "HTTP"}, Hosts: []string{"*/*"}},
		}}, field: "spec.egress[0]", mentions: "the egress listener with empty port should be the last listener"},
		{name: "ingress without port", spec: &networking.Sidecar{Ingress: []*networking.IstioIngressListener{{DefaultEndpoint: "127.0.0.1:80"}}},
			field: "spec.ingress[0].port", mentions: "port is required for ingress listeners"},
		{name: "ingress default endpoint", spec: &networking.Sidecar{Ingress: []*networking.IstioIngressListener{{Port: &networking.SidecarPort{Number: 80, Protocol: "HTTP"}, DefaultEndpoint: "10.0.0.1:80"}}},
			field: "spec.ingress[0].defaultEndpoint", mentions: "defaultEndpoint must be of form"},
		{name: "ingress duplicate ports", spec: &networking.Sidecar{Ingress: []*networking.IstioIngressListener{
			{Port: &networking.SidecarPort{Number: 80, Protocol: "HTTP"}}, {Port: &networking.SidecarPort{Number: 80, Protocol: "HTTP"}},
		}}, field: "spec.ingress[1].port.number", mentions: "ports on IP bound listeners must be unique"},
		{name: "egress port 0 without unix bind", spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Port: &networking.SidecarPort{Protocol: "HTTP"}, Hosts: []string{"*/*"}}}},
			field: "spec.egress[0].bind", mentions: "ports with 0 value must have a unix domain socket bind address"},
		{name: "egress proxy without ALLOW_ANY", spec: &networking.Sidecar{OutboundTrafficPolicy: &networking.OutboundTrafficPolicy{
			EgressProxy: &networking.Destination{Host: "egress.example.com", Port: &networking.PortSelector{Number: 443}},
		}}, field: "spec.outboundTrafficPolicy.egressProxy", mentions: "egress_proxy must be set only with ALLOW_ANY"},
	},
	"EnvoyFilter": {
		{name: "valid", spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			ApplyTo: networking.EnvoyFilter_HTTP_FILTER,
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: &networking.EnvoyFilter_ListenerMatch{
				FilterChain: &networking.EnvoyFilter_ListenerMatch_FilterChainMatch{Filter: &networking.EnvoyFilter_ListenerMatch_FilterMatch{
					Name: "envoy.filters.network.http_connection_manager", SubFilter: &networking.EnvoyFilter_ListenerMatch_SubFilterMatch{Name: "envoy.filters.http.router"},
				}},
			}}},
			Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_INSERT_BEFORE, Value: mustStruct(map[string]any{"name": "example"})},
		}}}},
		{name: "missing applyTo", spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_REMOVE},
		}}}, field: "spec.configPatches[0].applyTo", mentions: "Envoy filter: missing applyTo"},
		{name: "missing patch", spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{ApplyTo: networking.EnvoyFilter_CLUSTER}}},
			field: "spec.configPatches[0].patch", mentions: "Envoy filter: missing patch"},
		{name: "missing value", spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			ApplyTo: networking.EnvoyFilter_CLUSTER, Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE},
		}}}, field: "spec.configPatches[0].patch.value", mentions: "missing patch value for non-remove operation"},
		{name: "bad proxy version", spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			ApplyTo: networking.EnvoyFilter_CLUSTER,
			Match:   &networking.EnvoyFilter_EnvoyConfigObjectMatch{Proxy: &networking.EnvoyFilter_ProxyMatch{ProxyVersion: "1.(2"}},
			Patch:   &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_REMOVE},
		}}}, field: "spec.configPatches[0].match.proxy.proxyVersion", mentions: "invalid regex for proxy version"},
		{name: "cluster patch with listener match", spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			ApplyTo: networking.EnvoyFilter_CLUSTER,
			Match:   &networking.EnvoyFilter_EnvoyConfigObjectMatch{ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: &networking.EnvoyFilter_ListenerMatch{}}},
			Patch:   &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_REMOVE},
		}}}, field: "spec.configPatches[0].match", mentions: "applyTo for cluster class objects cannot have non cluster match"},
		{name: "subfilter on a network filter", spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			ApplyTo: networking.EnvoyFilter_NETWORK_FILTER,
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: &networking.EnvoyFilter_ListenerMatch{
				FilterChain: &networking.EnvoyFilter_ListenerMatch_FilterChainMatch{Filter: &networking.EnvoyFilter_ListenerMatch_FilterMatch{
					Name: "envoy.filters.network.http_connection_manager", SubFilter: &networking.EnvoyFilter_ListenerMatch_SubFilterMatch{Name: "x"},
				}},
			}}},
			Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_REMOVE},
		}}}, field: "spec.configPatches[0].match.listener.filterChain.filter.subFilter", mentions: "subfilter match can be used with applyTo HTTP_FILTER only"},
	},
	"WorkloadEntry": {
		{name: "valid", spec: &networking.WorkloadEntry{Address: "10.0.0.1", Ports: map[string]uint32{"http": 8080}, Labels: map[string]string{"app": "vm"}}},
		{name: "valid host name", spec: &networking.WorkloadEntry{Address: "vm-1.example.com"}},
		{name: "valid network without address", spec: &networking.WorkloadEntry{Network: "vpc-1"}},
		{name: "no address", spec: &networking.WorkloadEntry{}, field: "spec.address", mentions: "address is required"},
		{name: "bad address", spec: &networking.WorkloadEntry{Address: "vm_1"}, field: "spec.address", mentions: "is not a valid FQDN or an IP address"},
		{name: "unix address with ports", spec: &networking.WorkloadEntry{Address: "unix:///var/run/a.sock", Ports: map[string]uint32{"http": 80}}, field: "spec.ports", mentions: "must not include ports"},
		{name: "port name", spec: &networking.WorkloadEntry{Address: "10.0.0.1", Ports: map[string]uint32{"HTTP_Port": 80}}, field: `spec.ports.HTTP_Port`, mentions: "invalid port name"},
		{name: "port number", spec: &networking.WorkloadEntry{Address: "10.0.0.1", Ports: map[string]uint32{"http": 0}}, field: "spec.ports.http", mentions: "1..65535"},
		{name: "label key", spec: &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"a/b/c": "x"}}, field: `spec.labels["a/b/c"]`, mentions: "invalid tag key"},
	},
	"WorkloadGroup": {
		{name: "valid", spec: &networking.WorkloadGroup{
			Metadata: &networking.WorkloadGroup_ObjectMeta{Labels: map[string]string{"app": "vm"}},
			Template: &networking.WorkloadEntry{ServiceAccount: "vm"},
			Probe:    &networking.ReadinessProbe{HealthCheckMethod: &networking.ReadinessProbe_HttpGet{HttpGet: &networking.HTTPHealthCheckConfig{Port: 8080, Path: "/ready"}}},
		}},
		{name: "no template", spec: &networking.WorkloadGroup{}, field: "spec.template", mentions: "template is required"},
		{name: "bad label", spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{}, Metadata: &networking.WorkloadGroup_ObjectMeta{Labels: map[string]string{"app": "a b"}}},
			field: "spec.metadata.labels.app", mentions: "invalid labels: invalid tag value"},
		{name: "probe without method", spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{}, Probe: &networking.ReadinessProbe{}},
			field: "spec.probe", mentions: "unknown health check method"},
		{name: "probe port", spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{}, Probe: &networking.ReadinessProbe{
			HealthCheckMethod: &networking.ReadinessProbe_TcpSocket{TcpSocket: &networking.TCPHealthCheckConfig{}},
		}}, field: "spec.probe.tcpSocket.port", mentions: "1..65535"},
		{name: "negative period", spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{}, Probe: &networking.ReadinessProbe{
			PeriodSeconds:     -1,
			HealthCheckMethod: &networking.ReadinessProbe_Exec{Exec: &networking.ExecHealthCheckConfig{Command: []string{"true"}}},
		}}, field: "spec.probe.periodSeconds", mentions: "periodSeconds must be non-negative"},
	},
	"AuthorizationPolicy": {
		{name: "valid", spec: &security.AuthorizationPolicy{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "reviews"}},
			Rules: []*security.Rule{{
				From: []*security.Rule_From{{Source: &security.Source{Principals: []string{"cluster.local/ns/shop/sa/web"}, IpBlocks: []string{"10.0.0.0/8"}}}},
				To:   []*security.Rule_To{{Operation: &security.Operation{Methods: []string{"GET"}, Ports: []string{"9080"}, Paths: []string{"/api/{*}/items"}}}},
				When: []*security.Condition{{Key: "request.headers[x-user]", Values: []string{"a"}}},
			}},
		}},
		{name: "valid allow nothing", spec: &security.AuthorizationPolicy{}},
		{name: "DENY without rules", spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY}, field: "spec.rules", mentions: "DENY action without `rules` is meaningless"},
		{name: "CUSTOM without provider", spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_CUSTOM, Rules: []*security.Rule{{}}},
			field: "spec.provider", mentions: "`provider.name` must not be empty"},
		{name: "provider without CUSTOM", spec: &security.AuthorizationPolicy{ActionDetail: &security.AuthorizationPolicy_Provider{Provider: &security.AuthorizationPolicy_ExtensionProvider{Name: "ext"}}},
			field: "spec.provider", mentions: "`provider` must not be with non CUSTOM action"},
		{name: "selector and targetRef", spec: &security.AuthorizationPolicy{
			Selector:  &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}},
			TargetRef: &typev1beta1.PolicyTargetReference{Kind: "Service", Name: "a"},
		}, field: "spec", mentions: "only one of targetRefs or workloadSelector can be set"},
		{name: "targetRef kind", spec: &security.AuthorizationPolicy{TargetRef: &typev1beta1.PolicyTargetReference{Kind: "Deployment", Group: "apps", Name: "a"}},
			field: "spec.targetRef.kind", mentions: "targetRef must be to one of"},
		{name: "empty source", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{From: []*security.Rule_From{{Source: &security.Source{}}}}}},
			field: "spec.rules[0].from[0].source", mentions: "`from.source` must not be empty, found at rule 0"},
		{name: "bad IP block", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{From: []*security.Rule_From{{Source: &security.Source{IpBlocks: []string{"10.0.0.0/99"}}}}}}},
			field: "spec.rules[0].from[0].source.ipBlocks", mentions: "bad CIDR range"},
		{name: "service accounts and namespaces", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{From: []*security.Rule_From{{Source: &security.Source{
			Namespaces: []string{"a"}, ServiceAccounts: []string{"a/b"},
		}}}}}}, field: "spec.rules[0].from[0].source", mentions: "cannot set serviceAccounts with namespaces or principals"},
		{name: "empty operation", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{To: []*security.Rule_To{{Operation: &security.Operation{}}}}}},
			field: "spec.rules[0].to[0].operation", mentions: "`to.operation` must not be empty"},
		{name: "bad port", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{To: []*security.Rule_To{{Operation: &security.Operation{Ports: []string{"http"}}}}}}},
			field: "spec.rules[0].to[0].operation.ports", mentions: "bad port (http)"},
		{name: "bad path template", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{To: []*security.Rule_To{{Operation: &security.Operation{Paths: []string{"/a/{**}/b/{*}"}}}}}}},
			field: "spec.rules[0].to[0].operation.paths", mentions: "{**} is not the last operator"},
		{name: "unknown condition", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{When: []*security.Condition{{Key: "request.colour", Values: []string{"a"}}}}}},
			field: "spec.rules[0].when[0].values", mentions: "unknown attribute: request.colour"},
		{name: "condition without values", spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{When: []*security.Condition{{Key: "source.ip"}}}}},
			field: "spec.rules[0].when[0]", mentions: "at least one of `values` or `notValues` must be set"},
		{name: "dry-run with CUSTOM", meta: &mcpapi.Metadata{Name: "ns/name", Annotations: map[string]string{"istio.io/dry-run": "true"}},
			spec:  &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_AUDIT, Rules: []*security.Rule{{}}},
			field: `metadata.annotations["istio.io/dry-run"]`, mentions: "only supports action ALLOW/DENY"},
	},
	"PeerAuthentication": {
		{name: "valid", spec: &security.PeerAuthentication{
			Selector:      &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "db"}},
			PortLevelMtls: map[uint32]*security.PeerAuthentication_MutualTLS{5432: {Mode: security.PeerAuthentication_MutualTLS_DISABLE}},
		}},
		{name: "port level without selector", spec: &security.PeerAuthentication{PortLevelMtls: map[uint32]*security.PeerAuthentication_MutualTLS{5432: {}}},
			field: "spec.portLevelMtls", mentions: "mesh/namespace peer authentication cannot have port level mTLS"},
		{name: "port 0", spec: &security.PeerAuthentication{
			Selector:      &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "db"}},
			PortLevelMtls: map[uint32]*security.PeerAuthentication_MutualTLS{0: {}},
		}, field: "spec.portLevelMtls.0", mentions: "port must be in range 1..65535"},
		{name: "empty selector key", spec: &security.PeerAuthentication{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"": "db"}}},
			field: `spec.selector.matchLabels[""]`, mentions: "empty key is not supported in selector"},
	},
	"RequestAuthentication": {
		{name: "valid", spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{{
			Issuer: "https://issuer.example.com", JwksUri: "https://issuer.example.com/jwks", Audiences: []string{"shop"},
			OutputClaimToHeaders: []*security.ClaimToHeader{{Header: "x-sub", Claim: "sub"}},
		}}}},
		{name: "no issuer nor jwksUri", spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Audiences: []string{"a"}}}},
			field: "spec.jwtRules[0].issuer", mentions: "issuer or jwksUri must be non-empty string"},
		{name: "jwksUri scheme", spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: "i", JwksUri: "ftp://x/jwks"}}},
			field: "spec.jwtRules[0].jwksUri", mentions: `URI scheme "ftp" is not supported`},
		{name: "jwks not JSON", spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: "i", Jwks: "{keys"}}},
			field: "spec.jwtRules[0].jwks", mentions: "jwks parse error"},
		{name: "empty audience", spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: "i", Audiences: []string{""}}}},
			field: "spec.jwtRules[0].audiences[0]", mentions: "audience must be non-empty string"},
		{name: "header name", spec: &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: "i",
			OutputClaimToHeaders: []*security.ClaimToHeader{{Header: "x sub", Claim: "sub"}}}}},
			field: "spec.jwtRules[0].outputClaimToHeaders[0].header", mentions: "is not a valid header name"},
	},
	"ProxyConfig": {
		{name: "valid", spec: &networkingv1beta1.ProxyConfig{Concurrency: wrapperspb.Int32(0), Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}}}},
		{name: "negative concurrency", spec: &networkingv1beta1.ProxyConfig{Concurrency: wrapperspb.Int32(-1)}, field: "spec.concurrency", mentions: "concurrency must be greater than or equal to 0"},
		{name: "wildcard selector", spec: &networkingv1beta1.ProxyConfig{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a*"}}},
			field: "spec.selector.matchLabels.app", mentions: "wildcard is not supported in selector"},
	},
	"Telemetry": {
		{name: "valid", spec: &telemetry.Telemetry{
			Tracing:       []*telemetry.Tracing{{Providers: []*telemetry.ProviderRef{{Name: "zipkin"}}, RandomSamplingPercentage: wrapperspb.Double(5)}},
			AccessLogging: []*telemetry.AccessLogging{{Providers: []*telemetry.ProviderRef{{Name: "envoy"}}}},
			Metrics: []*telemetry.Metrics{{Overrides: []*telemetry.MetricsOverrides{{TagOverrides: map[string]*telemetry.MetricsOverrides_TagOverride{
				"request_protocol": {Operation: telemetry.MetricsOverrides_TagOverride_REMOVE},
			}}}}},
		}},
		{name: "sampling over 100", spec: &telemetry.Telemetry{Tracing: []*telemetry.Tracing{{RandomSamplingPercentage: wrapperspb.Double(120)}}},
			field: "spec.tracing[0].randomSamplingPercentage", mentions: "randomSamplingPercentage must be in range [0.0, 100.0]"},
		{name: "provider without name", spec: &telemetry.Telemetry{AccessLogging: []*telemetry.AccessLogging{{Providers: []*telemetry.ProviderRef{{}}}}},
			field: "spec.accessLogging[0].providers[0].name", mentions: "providers.name may not be empty"},
		{name: "UPSERT without value", spec: &telemetry.Telemetry{Metrics: []*telemetry.Metrics{{Overrides: []*telemetry.MetricsOverrides{{TagOverrides: map[string]*telemetry.MetricsOverrides_TagOverride{
			"x": {Operation: telemetry.MetricsOverrides_TagOverride_UPSERT},
		}}}}}}, field: "spec.metrics[0].overrides[0].tagOverrides.x", mentions: "tagOverrides.value must be set when operation is UPSERT"},
		{name: "literal tag without value", spec: &telemetry.Telemetry{Tracing: []*telemetry.Tracing{{CustomTags: map[string]*telemetry.Tracing_CustomTag{
			"team": {Type: &telemetry.Tracing_CustomTag_Literal{Literal: &telemetry.Tracing_Literal{}}},
		}}}}, field: "spec.tracing[0].customTags.team", mentions: "literal tag value may not be empty"},
		{name: "targetRef namespace", spec: &telemetry.Telemetry{TargetRefs: []*typev1beta1.PolicyTargetReference{{Kind: "Service", Name: "a", Namespace: "other"}}},
			field: "spec.targetRefs[0].namespace", mentions: "cross namespace referencing is not supported"},
	},
	"WasmPlugin": {
		{name: "valid", spec: &extensions.WasmPlugin{Url: "oci://ghcr.io/example/filter:1.0", Sha256: strings.Repeat("ab", 32),
			Match: []*extensions.WasmPlugin_TrafficSelector{{Ports: []*typev1beta1.PortSelector{{Number: 8080}}}}}},
		{name: "valid URL without scheme", spec: &extensions.WasmPlugin{Url: "ghcr.io/example/filter:1.0"}},
		{name: "no URL", spec: &extensions.WasmPlugin{}, field: "spec.url", mentions: "url field needs to be set"},
		{name: "URL scheme", spec: &extensions.WasmPlugin{Url: "ftp://example.com/f.wasm"}, field: "spec.url", mentions: "url contains unsupported scheme: ftp"},
		{name: "short sha256", spec: &extensions.WasmPlugin{Url: "oci://a/b", Sha256: "abc"}, field: "spec.sha256", mentions: "sha256 field must be 64 characters long"},
		{name: "duplicate env", spec: &extensions.WasmPlugin{Url: "oci://a/b", VmConfig: &extensions.VmConfig{Env: []*extensions.EnvVar{{Name: "A"}, {Name: "A"}}}},
			field: "spec.vmConfig.env[1]", mentions: "duplicate env"},
		{name: "match port 0", spec: &extensions.WasmPlugin{Url: "oci://a/b", Match: []*extensions.WasmPlugin_TrafficSelector{{Ports: []*typev1beta1.PortSelector{{}}}}},
			field: "spec.match[0].ports[0].number", mentions: "spec.Match[0].Ports[0] is out of range: 0"},
	},
	"TrafficExtension": {
		{name: "valid Lua", spec: &extensions.TrafficExtension{FilterConfig: &extensions.TrafficExtension_Lua{Lua: &extensions.LuaConfig{InlineCode: "function envoy_on_request(h) end"}}}},
		{name: "valid Wasm", spec: &extensions.TrafficExtension{FilterConfig: &extensions.TrafficExtension_Wasm{Wasm: &extensions.WasmConfig{Url: "oci://ghcr.io/example/f:1"}}}},
		{name: "neither", spec: &extensions.TrafficExtension{}, field: "spec", mentions: "exactly one of wasm or lua must be set"},
		{name: "empty Lua", spec: &extensions.TrafficExtension{FilterConfig: &extensions.TrafficExtension_Lua{Lua: &extensions.LuaConfig{}}},
			field: "spec.lua.inlineCode", mentions: "lua.inlineCode cannot be empty"},
		{name: "match port out of range", spec: &extensions.TrafficExtension{
			FilterConfig: &extensions.TrafficExtension_Lua{Lua: &extensions.LuaConfig{InlineCode: "x"}},
			Match:        []*extensions.TrafficSelector{{Ports: []*typev1beta1.PortSelector{{Number: 70000}}}},
		}, field: "spec.match[0].ports[0].number", mentions: "spec.Match[0].Ports[0] is out of range: 70000"},
		{name: "Wasm without URL", spec: &extensions.TrafficExtension{FilterConfig: &extensions.TrafficExtension_Wasm{Wasm: &extensions.WasmConfig{}}},
			field: "spec.wasm.url", mentions: "url field needs to be set"},
	},
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// TestValidationAsIstiodValidates: per kind, what istiod accepts passes and each thing it
// refuses is a fault naming the field, with Istio's message.
func TestValidationAsIstiodValidates(t *testing.T) {
	for _, k := range Kinds() {
		cases := validationCases[k.Kind]
		if len(cases) < 2 {
			t.Errorf("%s: no validation cases", k.Kind)
		}
		for _, c := range cases {
			t.Run(k.Kind+"/"+c.name, func(t *testing.T) {
				md := c.meta
				if md == nil {
					md = &mcpapi.Metadata{Name: "ns/name"}
				}
				err := k.Validate(md, c.spec)
				if c.field == "" {
					if err != nil {
						t.Fatalf("valid %s refused: %v", k.Kind, err)
					}
					return
				}
				var invalid *InvalidError
				if !errors.As(err, &invalid) {
					t.Fatalf("got %v, want a fault of %s", err, c.field)
				}
				if !slices.ContainsFunc(invalid.Faults, func(f FieldError) bool {
					return f.Field == c.field && strings.Contains(f.Message, c.mentions)
				}) {
					t.Fatalf("faults %q: none of field %s mentions %q", err, c.field, c.mentions)
				}
				if !strings.Contains(err.Error(), "field "+c.field+": ") {
					t.Errorf("error text %q does not name the field %s", err, c.field)
				}
				// The resource travels: validating it as the bridge receives it gives the same fault.
				r := resourceOf(t, c.spec)
				r.Metadata = md
				if rerr := ValidateResource(k.Collection, r); rerr == nil || rerr.Error() != err.Error() {
					t.Errorf("ValidateResource = %v, want %v", rerr, err)
				}
			})
		}
	}
}

// TestValidationIsDeterministic: maps are walked in random order; the faults of a resource
// come out the same every time, in the order of their fields.
func TestValidationIsDeterministic(t *testing.T) {
	k, _ := ByAMCSTypeURL("type.googleapis.com/istio.networking.v1alpha3.WorkloadEntry")
	labels := map[string]string{}
	for i := range 12 {
		labels[fmt.Sprintf("bad key %d", i)] = "-"
	}
	spec := &networking.WorkloadEntry{Address: "10.0.0.1", Labels: labels}
	first := k.Validate(&mcpapi.Metadata{Name: "ns/w"}, spec)
	if first == nil {
		t.Fatal("no faults")
	}
	for range 50 {
		if again := k.Validate(&mcpapi.Metadata{Name: "ns/w"}, spec); again.Error() != first.Error() {
			t.Fatalf("faults in another order:\n%v\n%v", first, again)
		}
	}
	var invalid *InvalidError
	errors.As(first, &invalid)
	if invalid.Faults[0].Field != `spec.labels["bad key 0"]` || invalid.Faults[len(invalid.Faults)-1].Field != `spec.labels["bad key 9"]` && invalid.More == 0 {
		t.Errorf("faults not in field order: %v", first)
	}
}

func TestFaultsAreBounded(t *testing.T) {
	k, _ := ByAMCSTypeURL("type.googleapis.com/istio.networking.v1alpha3.ServiceEntry")
	hosts := make([]string, 100)
	for i := range hosts {
		hosts[i] = "bad_host"
	}
	err := k.Validate(&mcpapi.Metadata{Name: "ns/se"}, &networking.ServiceEntry{Hosts: hosts})
	var invalid *InvalidError
	if !errors.As(err, &invalid) || len(invalid.Faults) != maxFaults || invalid.More == 0 {
		t.Fatalf("got %d faults and %d more, want %d and the rest counted", len(invalid.Faults), invalid.More, maxFaults)
	}
	if !strings.HasSuffix(err.Error(), fmt.Sprintf("; and %d more", invalid.More)) {
		t.Errorf("error %q does not say how many more", err)
	}
}

func TestInternalAnnotationsAreRefused(t *testing.T) {
	k, _ := ByAMCSTypeURL("type.googleapis.com/istio.networking.v1alpha3.DestinationRule")
	for _, a := range []string{"internal.istio.io/webhook-always-reject", "internal.istio.io/parents", "internal.istio.io/parent-namespace"} {
		err := k.Validate(&mcpapi.Metadata{Name: "ns/dr", Annotations: map[string]string{a: "x"}}, &networking.DestinationRule{Host: "r"})
		wantErr(t, err, a, fmt.Sprintf("field metadata.annotations[%q]", a), "annotation found")
	}
	k, _ = ByAMCSTypeURL("type.googleapis.com/istio.networking.v1alpha3.VirtualService")
	if err := k.Validate(&mcpapi.Metadata{Name: "ns/vs", Annotations: map[string]string{"owner": "me"}}, vsSpec(nil)); err != nil {
		t.Errorf("an ordinary annotation: %v", err)
	}
}

// Istio's regular expressions for names (pkg/config/labels), which the hand-written matchers
// of validate_common.go stand for.
var (
	istioDNS1123Label   = regexp.MustCompile("^[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?$")
	istioWildcardPrefix = regexp.MustCompile(`^(\*|(\*|\*-)?[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)$`)
	istioTagKey         = regexp.MustCompile(`^([a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)*/)?((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)
	istioLabelValue     = regexp.MustCompile(`^((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
)

// istioTagKeyValid is labels.validateTagKey with Istio's expression.
func istioTagKeyValid(k string) bool {
	m := istioTagKey.FindStringSubmatch(k)
	return m != nil && (len(m[1]) == 0 || len(m[1])-1 <= 253) && len(m[2]) <= 63
}

func namesAgree(t *testing.T, s string) {
	t.Helper()
	if got, want := isDNS1123Label(s), len(s) <= 63 && istioDNS1123Label.MatchString(s); got != want {
		t.Errorf("isDNS1123Label(%q) = %v, Istio's %v", s, got, want)
	}
	if got, want := isWildcardDNS1123Label(s), len(s) <= 63 && istioWildcardPrefix.MatchString(s); got != want {
		t.Errorf("isWildcardDNS1123Label(%q) = %v, Istio's %v", s, got, want)
	}
	if got, want := validateTagKey(s) == nil, istioTagKeyValid(s); got != want {
		t.Errorf("validateTagKey(%q) valid = %v, Istio's %v", s, got, want)
	}
	if got, want := s == "" || isQualifiedName(s), istioLabelValue.MatchString(s); got != want {
		t.Errorf("label value %q valid = %v, Istio's %v", s, got, want)
	}
}

func TestNamesAgreeWithIstioRegexps(t *testing.T) {
	for _, s := range nameSeeds {
		namesAgree(t, s)
	}
}

var nameSeeds = []string{
	"", "a", "A", "0", "-", "a-", "-a", "a-b", "a_b", "a.b", "*", "*a", "*-a", "**", "*.", "a*",
	strings.Repeat("a", 63), strings.Repeat("a", 64), "*" + strings.Repeat("a", 62), "*" + strings.Repeat("a", 63),
	"example.com/app", "example.com/", "/app", "a/b/c", "ex_ample.com/app", "example.com/" + strings.Repeat("a", 64),
	strings.Repeat("a.", 127) + "a/x", "app.kubernetes.io/name", "a..b/c", ".a/b", "a./b", "é", "a\x00",
}

func FuzzNamesAgreeWithIstioRegexps(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { namesAgree(t, s) })
}

// TestDomainsAsIstio pins validateWildcardDomain and validateFQDN to Istio's verdicts on the
// cases of its own tests.
func TestDomainsAsIstio(t *testing.T) {
	for _, c := range []struct {
		domain         string
		wildcard, fqdn bool
	}{
		{"istio.io", true, true},
		{"istio.io.", true, true},
		{"*.istio.io", true, false},
		{"*", true, false},
		{"*-foo.istio.io", true, false},
		{"*foo.istio.io", true, false},
		{"foo*.istio.io", false, false},
		{"istio.*.io", false, false},
		{"", false, false},
		{"a..b", false, false},
		{"a.123", false, false},
		{"123", true, false}, // a single label is not a top-level domain to Istio's wildcard check
		{"a.b1", true, true},
		{strings.Repeat("a", 64) + ".io", false, false},
		{strings.Repeat("a.", 128), false, false},
		{"reviews", true, true},
		{"under_score.io", false, false},
	} {
		if got := validateWildcardDomain(c.domain) == nil; got != c.wildcard {
			t.Errorf("validateWildcardDomain(%q) valid = %v, want %v", c.domain, got, c.wildcard)
		}
		if got := validateFQDN(c.domain) == nil; got != c.fqdn {
			t.Errorf("validateFQDN(%q) valid = %v, want %v", c.domain, got, c.fqdn)
		}
	}
}

// FuzzValidateSpec: the validation never panics on any message of any kind that unmarshals,
// however odd: nil entries in lists and maps, missing oneofs, unknown enum numbers.
func FuzzValidateSpec(f *testing.F) {
	kinds := Kinds()
	for i, k := range kinds {
		for _, c := range validationCases[k.Kind] {
			b, err := proto.Marshal(c.spec)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), b, c.meta != nil)
		}
	}
	f.Fuzz(func(t *testing.T, kindIndex uint8, value []byte, annotated bool) {
		k := kinds[int(kindIndex)%len(kinds)]
		m := k.New()
		if proto.Unmarshal(value, m) != nil {
			return
		}
		md := &mcpapi.Metadata{Name: "ns/fuzz"}
		if annotated {
			md.Annotations = map[string]string{"istio.io/dry-run": "maybe", "internal.istio.io/route-semantics": "gateway"}
			md.Labels = map[string]string{"istio.io/use-waypoint": "w"}
		}
		err := k.Validate(md, m)
		var invalid *InvalidError
		if err != nil && !errors.As(err, &invalid) {
			t.Fatalf("Validate = %v, want nil or an *InvalidError", err)
		}
		if invalid != nil {
			for _, f := range invalid.Faults {
				if f.Field == "" || f.Message == "" {
					t.Fatalf("a fault without field or message: %+v", f)
				}
			}
		}
	})
}

// TestNameIsNamespaceSlashName: istiod reads a resource of a config source only under a
// namespace/name (pkg/adsc, mcpToPilot) and drops any other as "invalid name".
func TestNameIsNamespaceSlashName(t *testing.T) {
	k, _ := ByAMCSTypeURL("type.googleapis.com/istio.networking.v1alpha3.DestinationRule")
	for _, name := range []string{"reviews", "a/b/c", ""} {
		err := k.Validate(&mcpapi.Metadata{Name: name}, &networking.DestinationRule{Host: "r"})
		wantErr(t, err, "name "+name, "field metadata.name", "istiod reads namespace/name")
	}
	if err := k.Validate(&mcpapi.Metadata{Name: "shop/reviews"}, &networking.DestinationRule{Host: "r"}); err != nil {
		t.Errorf("shop/reviews: %v", err)
	}
}
