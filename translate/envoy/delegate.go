package envoy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// Delegate VirtualServices, merged into the root that delegates to them as istiod merges them
// (model.mergeVirtualServices, MergeHTTPRoutes): an http route of the root with a delegate is
// replaced by the delegate's http routes, each merged with it:
//
//   - every match of the delegate route must fall within a match of the root route (a root
//     uri prefix "/a" admits "/a/b", an exact uri only itself; a header, query parameter,
//     scheme, method or authority condition alike); a delegate route that conflicts with all
//     of the root's is left out (reported); the matches merged take the root's conditions
//     where the delegate's leave them unset, and their names join "ROOT-DELEGATE";
//   - the route's name, rewrite, directResponse, timeout, retries, fault, mirror(s),
//     corsPolicy and headers are the root's where the delegate leaves them unset;
//   - the delegate's short host names are completed in the delegate's namespace, as its
//     gateways are;
//   - a delegate is a VirtualService without hosts; one that does not exist, has hosts, or is
//     not exported to the root's namespace (exportTo: default "*", "." its own namespace) is
//     reported and the root's route is left out, as istiod leaves it out;
//   - a delegate's own delegates are not followed (istiod merges one level).

// mergedRoute is one http route of a VirtualService after delegates are merged in, with the
// field that faults name it by.
type mergedRoute struct {
	field string
	route *networking.HTTPRoute
}

func (vs *virtualService) name() string {
	_, n := splitKey(vs.Key)
	return n
}

// mergedRoutes are a VirtualService's http routes with its delegates' merged in. The build
// depends on each delegate it reads, so that a change to one rebuilds the root's hosts.
func (rc *routeContext) mergedRoutes(vs *virtualService) []mergedRoute {
	out := make([]mergedRoute, 0, len(vs.spec.GetHttp()))
	for i, hr := range vs.spec.GetHttp() {
		field := fmt.Sprintf("http[%d]", i)
		d := hr.GetDelegate()
		if d == nil {
			out = append(out, mergedRoute{field, hr})
			continue
		}
		ns := d.GetNamespace()
		if ns == "" {
			ns = vs.Namespace
		}
		key := ns + "/" + d.GetName()
		rc.dependOn(depVirtualService, key)
		dvs := rc.t.vss[key]
		switch {
		case d.GetName() == "":
			rc.fs.add(kindVirtualService, vs.Key, "%s.delegate.name is empty; the route is left out", field)
			continue
		case dvs == nil:
			rc.fs.add(kindVirtualService, vs.Key, "%s.delegate: VirtualService %s does not exist; the route is left out", field, key)
			continue
		case len(dvs.spec.GetHosts()) > 0:
			rc.fs.add(kindVirtualService, vs.Key, "%s.delegate: VirtualService %s has hosts, so it is no delegate; the route is left out", field, key)
			continue
		case !dvs.export().takes(vs.Namespace):
			rc.fs.add(kindVirtualService, vs.Key, "%s.delegate: VirtualService %s is not exported to namespace %s; the route is left out", field, key, vs.Namespace)
			continue
		}
		for j, dhr := range resolvedDelegate(dvs, rc.t.suffix).GetHttp() {
			dfield := fmt.Sprintf("%s.delegate(%s).http[%d]", field, key, j)
			if dhr.GetDelegate() != nil {
				rc.fs.add(kindVirtualService, vs.Key, "%s: a delegate's own delegate is not followed; the route is left out", dfield)
				continue
			}
			merged, ok := mergeHTTPRoute(hr, dhr)
			if !ok {
				rc.fs.add(kindVirtualService, vs.Key, "%s: its matches fall within none of the root route's; the route is left out", dfield)
				continue
			}
			out = append(out, mergedRoute{dfield, merged})
		}
	}
	return out
}

// resolvedDelegate is a copy of a delegate's spec with its short names completed in its own
// namespace (istiod's ResolveVirtualServiceShortnames): destination and mirror hosts, and
// match gateways. The copy is the build's own: merging changes it.
func resolvedDelegate(dvs *virtualService, suffix string) *networking.VirtualService {
	spec := proto.Clone(dvs.spec).(*networking.VirtualService)
	for _, hr := range spec.GetHttp() {
		for _, m := range hr.GetMatch() {
			for i, g := range m.GetGateways() {
				if g != meshGateway {
					m.Gateways[i] = gatewayKey(g, dvs.Namespace)
				}
			}
		}
		for _, rd := range hr.GetRoute() {
			if d := rd.GetDestination(); d != nil {
				d.Host = hostname.Complete(d.GetHost(), dvs.Namespace, suffix)
			}
		}
		if m := hr.GetMirror(); m != nil {
			m.Host = hostname.Complete(m.GetHost(), dvs.Namespace, suffix)
		}
		for _, m := range hr.GetMirrors() {
			if d := m.GetDestination(); d != nil {
				d.Host = hostname.Complete(d.GetHost(), dvs.Namespace, suffix)
			}
		}
	}
	return spec
}

// mergeHTTPRoute merges a delegate's route (a copy, which it changes and returns) with the
// root's route that delegates to it; false when their matches conflict.
func mergeHTTPRoute(root, d *networking.HTTPRoute) (*networking.HTTPRoute, bool) {
	matches, ok := mergeMatches(root.GetMatch(), d.GetMatch())
	if !ok {
		return nil, false
	}
	d.Match = matches
	switch {
	case d.Name == "":
		d.Name = root.GetName()
	case root.GetName() != "":
		d.Name = root.GetName() + "-" + d.Name
	}
	if d.Rewrite == nil {
		d.Rewrite = root.GetRewrite()
	}
	if d.DirectResponse == nil {
		d.DirectResponse = root.GetDirectResponse()
	}
	if d.Timeout == nil {
		d.Timeout = root.GetTimeout()
	}
	if d.Retries == nil {
		d.Retries = root.GetRetries()
	}
	if d.Fault == nil {
		d.Fault = root.GetFault()
	}
	if d.Mirror == nil {
		d.Mirror = root.GetMirror()
	}
	if d.MirrorPercent == nil { //nolint:staticcheck // merged as istiod merges it
		d.MirrorPercent = root.GetMirrorPercent() //nolint:staticcheck // as above
	}
	if d.MirrorPercentage == nil {
		d.MirrorPercentage = root.GetMirrorPercentage()
	}
	if d.CorsPolicy == nil {
		d.CorsPolicy = root.GetCorsPolicy()
	}
	if d.Mirrors == nil {
		d.Mirrors = root.GetMirrors()
	}
	if d.Headers == nil {
		d.Headers = root.GetHeaders()
	}
	return d, true
}

// mergeMatches merges the matches: each of the delegate's with every root match it does not
// conflict with; a delegate match that fits none is a conflict.
func mergeMatches(root, d []*networking.HTTPMatchRequest) ([]*networking.HTTPMatchRequest, bool) {
	if len(root) == 0 {
		return d, true
	}
	if len(d) == 0 {
		return root, true
	}
	var out []*networking.HTTPMatchRequest
	for _, dm := range d {
		found := false
		for _, rm := range root {
			if matchConflict(rm, dm) {
				continue
			}
			out = append(out, mergeMatch(rm, dm))
			found = true
		}
		if !found {
			return nil, false
		}
	}
	return out, len(out) > 0
}

func mergeMatch(root, d *networking.HTTPMatchRequest) *networking.HTTPMatchRequest {
	out := proto.Clone(d).(*networking.HTTPMatchRequest)
	switch {
	case out.Name == "":
		out.Name = root.GetName()
	case root.GetName() != "":
		out.Name = root.GetName() + "-" + out.Name
	}
	if out.Uri == nil {
		out.Uri = root.GetUri()
	}
	if out.Scheme == nil {
		out.Scheme = root.GetScheme()
	}
	if out.Method == nil {
		out.Method = root.GetMethod()
	}
	if out.Authority == nil {
		out.Authority = root.GetAuthority()
	}
	out.Headers = mergeMaps(root.GetHeaders(), d.GetHeaders())
	out.WithoutHeaders = mergeMaps(root.GetWithoutHeaders(), d.GetWithoutHeaders())
	out.QueryParams = mergeMaps(root.GetQueryParams(), d.GetQueryParams())
	if out.Port == 0 {
		out.Port = root.GetPort()
	}
	out.SourceLabels = mergeMaps(root.GetSourceLabels(), d.GetSourceLabels())
	if out.SourceNamespace == "" {
		out.SourceNamespace = root.GetSourceNamespace()
	}
	if len(out.Gateways) == 0 {
		out.Gateways = root.GetGateways()
	}
	if out.StatPrefix == "" {
		out.StatPrefix = root.GetStatPrefix()
	}
	return out
}

// mergeMaps is a copy of root with d's entries over it; nil when both are empty.
func mergeMaps[V any](root, d map[string]V) map[string]V {
	if len(root) == 0 && len(d) == 0 {
		return nil
	}
	out := maps.Clone(root)
	if out == nil {
		out = map[string]V{}
	}
	maps.Copy(out, d)
	return out
}

// matchConflict is istiod's hasConflict: the delegate's match asks for something the root's
// does not admit.
func matchConflict(root, leaf *networking.HTTPMatchRequest) bool {
	roots := []*networking.StringMatch{root.GetUri(), root.GetScheme(), root.GetMethod(), root.GetAuthority()}
	leaves := []*networking.StringMatch{leaf.GetUri(), leaf.GetScheme(), leaf.GetMethod(), leaf.GetAuthority()}
	for i := range roots {
		if stringMatchConflict(roots[i], leaves[i]) {
			return true
		}
	}
	for k, v := range leaf.GetHeaders() {
		if stringMatchConflict(root.GetHeaders()[k], v) {
			return true
		}
	}
	for k, v := range leaf.GetWithoutHeaders() {
		if stringMatchConflict(root.GetWithoutHeaders()[k], v) {
			return true
		}
	}
	for k, v := range leaf.GetQueryParams() {
		if stringMatchConflict(root.GetQueryParams()[k], v) {
			return true
		}
	}
	if root.GetIgnoreUriCase() != leaf.GetIgnoreUriCase() {
		return true
	}
	if root.GetPort() > 0 && leaf.GetPort() > 0 && root.GetPort() != leaf.GetPort() {
		return true
	}
	if root.GetSourceNamespace() != "" && leaf.GetSourceNamespace() != root.GetSourceNamespace() {
		return true
	}
	for k, v := range leaf.GetSourceLabels() {
		if rv, ok := root.GetSourceLabels()[k]; ok && rv != v {
			return true
		}
	}
	if len(root.GetGateways()) > 0 && len(leaf.GetGateways()) > 0 {
		if len(root.GetGateways()) < len(leaf.GetGateways()) {
			return true
		}
		for _, g := range leaf.GetGateways() {
			if !slices.Contains(root.GetGateways(), g) {
				return true
			}
		}
	}
	return false
}

// stringMatchConflict is istiod's: a leaf condition conflicts unless either is unset, or it
// is within the root's (the same exact value, or an exact or prefix under the root's prefix).
func stringMatchConflict(root, leaf *networking.StringMatch) bool {
	if root == nil || leaf == nil {
		return false
	}
	if root.GetRegex() != "" && (leaf.GetRegex() != "" || leaf.GetPrefix() != "" || leaf.GetExact() != "") {
		return true
	}
	if leaf.GetRegex() != "" && (root.GetRegex() != "" || root.GetPrefix() != "" || root.GetExact() != "") {
		return true
	}
	if exact := root.GetExact(); exact != "" {
		return leaf.GetPrefix() != "" || leaf.GetExact() != exact
	}
	if prefix := root.GetPrefix(); prefix != "" {
		if leaf.GetPrefix() != "" {
			return !strings.HasPrefix(leaf.GetPrefix(), prefix)
		}
		if leaf.GetExact() != "" {
			return !strings.HasPrefix(leaf.GetExact(), prefix)
		}
	}
	return true
}
