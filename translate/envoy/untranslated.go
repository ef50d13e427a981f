package envoy

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1alpha3"
)

// Nothing silent: every field of an input resource is either one the translation honours (or
// reports a fault of its own for, with a reason of its own), or it is reported here, as a
// fault of its resource naming the field. The tables below list, per kind, the fields the
// translation reads, as JSON paths (Istio's YAML names); a path covers everything under it.
// A field that is set and not covered is reported, whatever its value, so that a field Istio
// adds later is reported too rather than ignored.
//
// The check reads the stored encoding and decodes nothing, so that it costs a pass over the
// bytes of each resource when it changes (ServiceEntries are never decoded whole).

// fieldTable is the fields of one kind the translation reads, as a tree of field numbers, so
// that the check builds no path unless it reports one.
type fieldTable struct {
	root *fieldNode
	// why: the reason given for a field the translation does not honour, where there is one
	// better than "not translated".
	why map[string]string
}

// fieldNode is a field the translation reads all of (covered), or inside which it reads
// some fields (children).
type fieldNode struct {
	path     string // JSON path, "" for the resource's spec
	md       protoreflect.MessageDescriptor
	covered  bool
	children map[protowire.Number]*fieldNode
	// allowed: the translation honours only some values of this covered field; it says
	// whether one value is honoured (exportTo "*" is; "." is not).
	allowed func(v []byte) bool
}

// newFieldTable builds a kind's table from the JSON paths the translation reads. A path that
// names no field panics: the tables are constants of this package (TestFieldTablesNameRealFields).
func newFieldTable(m proto.Message, covered []string, allowed map[string]func([]byte) bool, why map[string]string) *fieldTable {
	t := &fieldTable{root: &fieldNode{md: m.ProtoReflect().Descriptor()}, why: why}
	for _, p := range covered {
		n := t.root
		for part := range strings.SplitSeq(p, ".") {
			fd := fieldByJSONName(n.md, part)
			if fd == nil {
				panic("envoy: " + p + " is not a field of " + string(t.root.md.FullName()))
			}
			child := n.children[fd.Number()]
			if child == nil {
				if n.children == nil {
					n.children = map[protowire.Number]*fieldNode{}
				}
				child = &fieldNode{path: joinPath(n.path, part), md: fd.Message()}
				n.children[fd.Number()] = child
			}
			n = child
		}
		n.covered, n.allowed = true, allowed[p]
	}
	return t
}

func fieldByJSONName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	if md == nil {
		return nil
	}
	for i := range md.Fields().Len() {
		if fd := md.Fields().Get(i); fd.JSONName() == name {
			return fd
		}
	}
	return nil
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// untranslated returns the paths of the fields set in a resource's encoded spec that the
// translation does not honour, sorted, each once, with the reason where the table has one.
func (t *fieldTable) untranslated(b []byte) []string {
	var out []string
	t.walk(t.root, b, &out)
	slices.Sort(out)
	return slices.Compact(out)
}

func (t *fieldTable) walk(n *fieldNode, b []byte, out *[]string) {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return // the store validated the body: not reached
		}
		b = b[k:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return
		}
		raw := b[:m]
		b = b[m:]
		child := n.children[num]
		switch {
		case child == nil:
			*out = append(*out, t.explain(n, num))
		case child.covered:
			if child.allowed != nil && typ == protowire.BytesType {
				if v, k := protowire.ConsumeBytes(raw); k >= 0 && !child.allowed(v) {
					*out = append(*out, t.explain(n, num))
				}
			}
		case typ == protowire.BytesType && child.md != nil:
			if v, k := protowire.ConsumeBytes(raw); k >= 0 {
				t.walk(child, v, out)
			}
		default:
			*out = append(*out, t.explain(n, num))
		}
	}
}

// explain names field num of node n, with the reason the table gives for it.
func (t *fieldTable) explain(n *fieldNode, num protowire.Number) string {
	fd := n.md.Fields().ByNumber(num)
	if fd == nil {
		return joinPath(n.path, fmt.Sprintf("field %d (unknown to this bridge)", num))
	}
	path := joinPath(n.path, fd.JSONName())
	if why := t.why[path]; why != "" {
		return path + " (" + why + ")"
	}
	return path
}

// untranslatedFault is the fault of a resource with fields the translation does not honour,
// or nil.
func untranslatedFault(kind, name string, b []byte) *Fault {
	t := fieldTables[kind]
	if t == nil {
		return nil
	}
	fields := t.untranslated(b)
	if len(fields) == 0 {
		return nil
	}
	return &Fault{Kind: kind, Name: name, Message: "not translated, served without them: " + strings.Join(fields, ", ")}
}

// exportedEverywhere: exportTo "*" is what the bridge does with every resource.
func exportedEverywhere(v []byte) bool { return string(v) == "*" }

// perProxyWhy is why a field that narrows what some proxies see is not honoured.
const perProxyWhy = "every proxy is served the resource: the bridge's views are by namespace, narrowed by ServiceEntries' and VirtualServices' exportTo and Sidecars"

// trafficPolicyFields are the fields of a DestinationRule TrafficPolicy the translation reads,
// under the path of the policy.
func trafficPolicyFields(at string) []string {
	fields := []string{
		"loadBalancer.simple", "loadBalancer.localityLbSetting", "loadBalancer.warmupDurationSecs", "loadBalancer.warmup",
		"loadBalancer.consistentHash.httpHeaderName", "loadBalancer.consistentHash.httpCookie.name",
		"loadBalancer.consistentHash.httpCookie.path", "loadBalancer.consistentHash.httpCookie.ttl", "loadBalancer.consistentHash.httpCookie.attributes",
		"loadBalancer.consistentHash.useSourceIp", "loadBalancer.consistentHash.httpQueryParameterName",
		"loadBalancer.consistentHash.ringHash", "loadBalancer.consistentHash.maglev",
		"loadBalancer.consistentHash.minimumRingSize",
		"connectionPool.tcp.maxConnections", "connectionPool.tcp.connectTimeout", "connectionPool.tcp.tcpKeepalive",
		"connectionPool.tcp.maxConnectionDuration", "connectionPool.tcp.idleTimeout",
		"connectionPool.http.http1MaxPendingRequests", "connectionPool.http.http2MaxRequests",
		"connectionPool.http.maxRequestsPerConnection", "connectionPool.http.maxRetries", "connectionPool.http.idleTimeout",
		"connectionPool.http.h2UpgradePolicy", "connectionPool.http.useClientProtocol", "connectionPool.http.maxConcurrentStreams",
		"connectionPool.http.http2KeepAlive",
		"outlierDetection.consecutiveErrors", "outlierDetection.splitExternalLocalOriginErrors",
		"outlierDetection.consecutiveLocalOriginFailures", "outlierDetection.consecutiveGatewayErrors",
		"outlierDetection.consecutive5xxErrors", "outlierDetection.interval", "outlierDetection.baseEjectionTime",
		"outlierDetection.maxEjectionPercent", "outlierDetection.minHealthPercent",
		"tls", // reported by the translation where a mode or field is not translated (clustertls.go)
	}
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = at + "." + f
	}
	return out
}

// fieldTables: per input kind, what the translation reads (see the package doc for how).
var fieldTables = map[string]*fieldTable{
	kindSidecar: newFieldTable(&networking.Sidecar{}, []string{"egress.hosts"}, nil, map[string]string{
		"workloadSelector": "a Sidecar for some workloads is not applied at all: the bridge builds one view per namespace",
		"egress.port":      "its hosts are imported, but no listener of that port alone is built: they are served on their own ports",
	}),
	kindServiceEntry: newFieldTable(&networking.ServiceEntry{}, []string{
		"hosts", "addresses", "ports.number", "ports.protocol", "ports.name", "ports.targetPort", "resolution",
		"endpoints.address", "endpoints.ports", "endpoints.labels", "endpoints.network", "endpoints.locality",
		"endpoints.weight", "workloadSelector.labels", "exportTo", "subjectAltNames",
		// location: what istiod makes of it is automatic mutual TLS and telemetry, neither of
		// which the bridge does; the Envoy configuration is otherwise the same.
		"location",
	}, nil, map[string]string{
		"endpoints.serviceAccount": "as subjectAltNames, workloads' service accounts need the mesh's trust domain",
	}),
	kindWorkloadEntry: newFieldTable(&networking.WorkloadEntry{}, []string{
		"address", "ports", "labels", "network", "locality", "weight",
	}, nil, map[string]string{
		"serviceAccount": "as subjectAltNames, workloads' service accounts need the mesh's trust domain",
	}),
	kindVirtualService: newFieldTable(&networking.VirtualService{}, []string{
		"hosts", "gateways", "exportTo",
		"http.name", "http.match.name", "http.match.uri", "http.match.scheme", "http.match.method", "http.match.authority",
		"http.match.headers", "http.match.port", "http.match.sourceLabels", "http.match.gateways", "http.match.queryParams",
		"http.match.ignoreUriCase", "http.match.withoutHeaders", "http.match.sourceNamespace",
		"http.route.destination", "http.route.weight", "http.route.headers",
		"http.redirect.uri", "http.redirect.authority", "http.redirect.port", "http.redirect.scheme", "http.redirect.redirectCode",
		"http.directResponse", "http.delegate", "http.rewrite", "http.timeout",
		"http.retries.attempts", "http.retries.perTryTimeout", "http.retries.retryOn", "http.retries.retryRemoteLocalities",
		"http.retries.retryIgnorePreviousHosts", "http.retries.backoff",
		"http.fault.delay.percent", "http.fault.delay.fixedDelay", "http.fault.delay.percentage",
		"http.fault.abort.httpStatus", "http.fault.abort.grpcStatus", "http.fault.abort.percentage",
		"http.mirror", "http.mirrors", "http.mirrorPercent", "http.mirrorPercentage", "http.corsPolicy", "http.headers",
		"tls", "tcp", // reported by the translation where not translated (doc.go)
	}, nil, map[string]string{
		"http.match.statPrefix":       "routes have no per-match statistics",
		"http.redirect.derivePort":    "the redirect keeps the request's port only when port is unset",
		"http.redirect.prefixRewrite": "the redirect's path is uri as written",
	}),
	kindDestinationRule: newFieldTable(&networking.DestinationRule{}, slices.Concat([]string{
		"host", "exportTo", "subsets.name", "subsets.labels", "trafficPolicy.portLevelSettings.port",
		"subsets.trafficPolicy.portLevelSettings.port",
	},
		// A whole policy's own fields, beside those a port's may set too (tunnel and
		// proxyProtocol are reported by the translation where it does not apply them).
		[]string{"trafficPolicy.tunnel", "trafficPolicy.proxyProtocol", "trafficPolicy.retryBudget",
			"subsets.trafficPolicy.tunnel", "subsets.trafficPolicy.proxyProtocol", "subsets.trafficPolicy.retryBudget"},
		trafficPolicyFields("trafficPolicy"), trafficPolicyFields("trafficPolicy.portLevelSettings"),
		trafficPolicyFields("subsets.trafficPolicy"), trafficPolicyFields("subsets.trafficPolicy.portLevelSettings"),
	), map[string]func([]byte) bool{"exportTo": exportedEverywhere}, map[string]string{
		"exportTo":         perProxyWhy,
		"workloadSelector": perProxyWhy,
	}),
	kindGateway: newFieldTable(&networking.Gateway{}, []string{
		"selector", "servers.port.number", "servers.port.protocol", "servers.port.name", "servers.hosts", "servers.name",
		"servers.tls.httpsRedirect", "servers.tls.mode", "servers.tls.serverCertificate", "servers.tls.privateKey",
		"servers.tls.caCertificates", "servers.tls.credentialName", "servers.tls.minProtocolVersion",
		"servers.tls.maxProtocolVersion", "servers.tls.cipherSuites", "servers.tls.subjectAltNames",
		"servers.tls.verifyCertificateSpki", "servers.tls.verifyCertificateHash", "servers.tls.caCrl",
		"servers.tls.insecureSkipVerify", "servers.tls.caCertCredentialName", "servers.tls.credentialNames",
		"servers.tls.tlsCertificates",
	}, nil, map[string]string{
		"servers.bind": "listeners bind 0.0.0.0",
	}),
}
