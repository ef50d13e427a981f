package kinds

import (
	"regexp"

	networking "istio.io/api/networking/v1alpha3"
)

// validateEnvoyFilter mirrors the structural checks of Istio's ValidateEnvoyFilter
// (pkg/config/validation/envoyfilter): each patch has an applyTo, an operation and, unless it
// removes, a value; its match fits what it applies to; a proxy version is a regular
// expression. Istio also builds each patch value into the Envoy message it patches, resolving
// every typed_config against all the Envoy extensions istiod links; the bridge links few of
// them and would refuse valid filters, so that check is left to istiod.
func validateEnvoyFilter(v *validator, ef *networking.EnvoyFilter) {
	if ef.WorkloadSelector != nil {
		sp := specRoot.f("workloadSelector")
		lp := sp.f("labels")
		before := len(v.faults)
		v.alphaWorkloadSelectorAt(&lp, ef.WorkloadSelector.GetLabels())
		if len(v.faults) > before {
			return // Istio stops at a bad selector
		}
	}
	patches := specRoot.f("configPatches")
	for i, cp := range ef.ConfigPatches {
		ip := patches.i(i)
		if cp == nil {
			v.errorf(&ip, "Envoy filter: null config patch")
			continue
		}
		mp := ip.f("match")
		if cp.Match != nil && cp.Match.Context == networking.EnvoyFilter_WAYPOINT {
			continue // Istio does not validate waypoint patches yet
		}
		if cp.ApplyTo == networking.EnvoyFilter_INVALID {
			ap := ip.f("applyTo")
			v.errorf(&ap, "Envoy filter: missing applyTo")
			continue
		}
		pp := ip.f("patch")
		if cp.Patch == nil {
			v.errorf(&pp, "Envoy filter: missing patch")
			continue
		}
		if cp.Patch.Operation == networking.EnvoyFilter_Patch_INVALID {
			op := pp.f("operation")
			v.errorf(&op, "Envoy filter: missing patch operation")
			continue
		}
		if cp.Patch.Operation != networking.EnvoyFilter_Patch_REMOVE && cp.Patch.Value == nil {
			vp := pp.f("value")
			v.errorf(&vp, "Envoy filter: missing patch value for non-remove operation")
			continue
		}
		// Istio warns about, and ignores, a proxy version of more than 1024 characters.
		if pv := cp.Match.GetProxy().GetProxyVersion(); pv != "" && len(pv) <= 1024 {
			if _, err := regexp.Compile(pv); err != nil {
				proxyp := mp.f("proxy")
				vp := proxyp.f("proxyVersion")
				v.errorf(&vp, "Envoy filter: invalid regex for proxy version, [%v]", err)
				continue
			}
		}
		// Istio builds the value into the Envoy message of applyTo, and knows none for a
		// number that is no applyTo.
		if _, known := networking.EnvoyFilter_ApplyTo_name[int32(cp.ApplyTo)]; !known && cp.Patch.Value != nil {
			ap := ip.f("applyTo")
			v.errorf(&ap, "Envoy filter: unknown object type for applyTo %s", cp.ApplyTo)
			continue
		}
		if cp.Match == nil || cp.Match.ObjectTypes == nil {
			continue
		}
		switch cp.ApplyTo {
		case networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_FILTER_CHAIN,
			networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER:
			l := cp.Match.GetListener()
			if l == nil {
				v.errorf(&mp, "Envoy filter: applyTo for listener class objects cannot have non listener match")
				continue
			}
			f := l.GetFilterChain().GetFilter()
			if f == nil {
				continue
			}
			lp := mp.f("listener")
			fcp := lp.f("filterChain")
			fp := fcp.f("filter")
			if f.Name == "" {
				v.errorf(&fp, "Envoy filter: filter match has no name to match on")
				continue
			}
			if f.SubFilter == nil {
				continue
			}
			sp := fp.f("subFilter")
			switch {
			case cp.ApplyTo != networking.EnvoyFilter_HTTP_FILTER:
				v.errorf(&sp, "Envoy filter: subfilter match can be used with applyTo HTTP_FILTER only")
			case f.Name != "envoy.filters.network.http_connection_manager" && f.Name != "envoy.http_connection_manager":
				v.errorf(&sp, "Envoy filter: subfilter match requires filter match with %s", "envoy.filters.network.http_connection_manager")
			case f.SubFilter.Name == "":
				v.errorf(&sp, "Envoy filter: subfilter match has no name to match on")
			}
		case networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE:
			if cp.Match.GetRouteConfiguration() == nil {
				v.errorf(&mp, "Envoy filter: applyTo for http route class objects cannot have non route configuration match")
			}
		case networking.EnvoyFilter_CLUSTER:
			if cp.Match.GetCluster() == nil {
				v.errorf(&mp, "Envoy filter: applyTo for cluster class objects cannot have non cluster match")
			}
		}
	}
}
