package kinds

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	security "istio.io/api/security/v1beta1"
)

// validateAuthorizationPolicy mirrors Istio's ValidateAuthorizationPolicy (and, for the
// istio.io/dry-run annotation, checkDryRunAnnotation). Istio prefixes its faults with
// "invalid policy NAME.NAMESPACE:"; here the fault names the resource already.
func validateAuthorizationPolicy(v *validator, ap *security.AuthorizationPolicy) {
	if val, ok := v.annotations[annotationDryRun]; ok {
		p := annotationPath(annotationDryRun)
		switch ap.Action {
		case security.AuthorizationPolicy_ALLOW, security.AuthorizationPolicy_DENY:
			if _, err := strconv.ParseBool(val); err != nil {
				v.errorf(&p, "%s/%s has annotation %s with invalid value (%s): %v", v.namespace, v.name, annotationDryRun, val, err)
			}
		default:
			v.errorf(&p, "the annotation %s currently only supports action ALLOW/DENY, found action %v in %s/%s",
				annotationDryRun, ap.Action, v.namespace, v.name)
		}
	}
	v.policySelectionAt(ap.GetSelector(), ap.GetTargetRef(), ap.GetTargetRefs())

	spec := &specRoot
	rules := spec.f("rules")
	pp := spec.f("provider")
	if ap.Action == security.AuthorizationPolicy_CUSTOM {
		if ap.Rules == nil {
			v.errorf(&rules, "CUSTOM action without `rules` is meaningless as it will never be triggered, "+
				"add an empty rule `{}` if you want it be triggered for every request")
		} else if ap.GetProvider().GetName() == "" {
			v.errorf(&pp, "`provider.name` must not be empty")
		}
		for i, r := range ap.GetRules() {
			rp := rules.i(i)
			v.customRuleAt(&rp, r)
		}
	}
	if ap.GetProvider() != nil && ap.Action != security.AuthorizationPolicy_CUSTOM {
		v.errorf(&pp, "`provider` must not be with non CUSTOM action, found %s", ap.Action)
	}
	if ap.Action == security.AuthorizationPolicy_DENY && ap.Rules == nil {
		v.errorf(&rules, "DENY action without `rules` is meaningless as it will never be triggered, "+
			"add an empty rule `{}` if you want it be triggered for every request")
	}
	for i, r := range ap.GetRules() {
		rp := rules.i(i)
		if r == nil {
			v.errorf(&rp, "`rule` must not be nil, found at rule %d", i)
			continue
		}
		v.ruleAt(&rp, r, i)
	}
}

// customRuleAt refuses what the CUSTOM action does not support yet, as
// ValidateAuthorizationPolicy does.
func (v *validator) customRuleAt(p *path, r *security.Rule) {
	fromp := p.f("from")
	for i, from := range r.GetFrom() {
		src := from.GetSource()
		if src == nil {
			continue
		}
		ip := fromp.i(i)
		sp := ip.f("source")
		for _, f := range [...]struct {
			name string
			set  bool
		}{
			{"Namespaces", len(src.Namespaces) != 0}, {"NotNamespaces", len(src.NotNamespaces) != 0},
			{"ServiceAccounts", len(src.ServiceAccounts) != 0}, {"NotServiceAccounts", len(src.NotServiceAccounts) != 0},
			{"TrustDomains", len(src.TrustDomains) != 0}, {"NotTrustDomains", len(src.NotTrustDomains) != 0},
			{"Principals", len(src.Principals) != 0}, {"NotPrincipals", len(src.NotPrincipals) != 0},
			{"RequestPrincipals", len(src.RequestPrincipals) != 0}, {"NotRequestPrincipals", len(src.NotRequestPrincipals) != 0},
		} {
			if f.set {
				v.errorf(&sp, "From.%s is currently not supported with CUSTOM action", f.name)
			}
		}
	}
	whenp := p.f("when")
	for i, when := range r.GetWhen() {
		ip := whenp.i(i)
		if when == nil {
			v.errorf(&ip, "when field cannot be nil")
			continue
		}
		switch k := when.Key; {
		case k == "source.namespace", k == "source.serviceAccount", k == "source.trustDomain", k == "source.principal",
			strings.HasPrefix(k, "request.auth."):
			kp := ip.f("key")
			v.errorf(&kp, "%s is currently not supported with CUSTOM action", k)
		}
	}
}

// ruleAt checks one rule as ValidateAuthorizationPolicy does. The warning about DENY rules
// with only HTTP attributes is not a fault.
func (v *validator) ruleAt(p *path, r *security.Rule, i int) {
	fromp := p.f("from")
	if r.From != nil && len(r.From) == 0 {
		v.errorf(&fromp, "`from` must not be empty, found at rule %d", i)
	}
	for j, from := range r.From {
		jp := fromp.i(j)
		if from == nil {
			v.errorf(&jp, "`from` must not be nil, found at rule %d", i)
			continue
		}
		sp := jp.f("source")
		if from.Source == nil {
			v.errorf(&sp, "`from.source` must not be nil, found at rule %d", i)
			continue
		}
		v.sourceAt(&sp, from.Source, i)
	}
	top := p.f("to")
	if r.To != nil && len(r.To) == 0 {
		v.errorf(&top, "`to` must not be empty, found at rule %d", i)
	}
	for j, to := range r.To {
		jp := top.i(j)
		if to == nil {
			v.errorf(&jp, "`to` must not be nil, found at rule %d", i)
			continue
		}
		op := jp.f("operation")
		if to.Operation == nil {
			v.errorf(&op, "`to.operation` must not be nil, found at rule %d", i)
			continue
		}
		v.operationAt(&op, to.Operation, i)
	}
	whenp := p.f("when")
	for j, c := range r.GetWhen() {
		jp := whenp.i(j)
		key := c.GetKey()
		if key == "" {
			kp := jp.f("key")
			v.errorf(&kp, "`key` must not be empty")
			continue
		}
		if len(c.GetValues()) == 0 && len(c.GetNotValues()) == 0 {
			v.errorf(&jp, "at least one of `values` or `notValues` must be set for key %s", key)
			continue
		}
		if err := validateAttribute(key, c.GetValues()); err != nil {
			vp := jp.f("values")
			v.errorf(&vp, "invalid `value` for `key` %s: %v", key, err)
		}
		if err := validateAttribute(key, c.GetNotValues()); err != nil {
			vp := jp.f("notValues")
			v.errorf(&vp, "invalid `notValue` for `key` %s: %v", key, err)
		}
	}
}

// sourceAt checks a rule's source as ValidateAuthorizationPolicy does.
func (v *validator) sourceAt(p *path, src *security.Source, rule int) {
	if len(src.Principals)+len(src.NotPrincipals)+len(src.Namespaces)+len(src.NotNamespaces) > 0 &&
		len(src.ServiceAccounts)+len(src.NotServiceAccounts) > 0 {
		v.errorf(p, "cannot set serviceAccounts with namespaces or principals, found at rule %d", rule)
	}
	if len(src.Principals)+len(src.RequestPrincipals)+len(src.Namespaces)+len(src.IpBlocks)+len(src.RemoteIpBlocks)+
		len(src.NotPrincipals)+len(src.NotRequestPrincipals)+len(src.NotNamespaces)+len(src.NotIpBlocks)+
		len(src.NotRemoteIpBlocks)+len(src.ServiceAccounts)+len(src.NotServiceAccounts)+len(src.TrustDomains)+
		len(src.NotTrustDomains) == 0 {
		v.errorf(p, "`from.source` must not be empty, found at rule %d", rule)
	}
	for _, f := range [...]struct {
		field, name string
		values      []string
		check       func(string, []string) error
	}{
		{"principals", "Principals", src.Principals, checkEmptyValues},
		{"requestPrincipals", "RequestPrincipals", src.RequestPrincipals, checkEmptyValues},
		{"namespaces", "Namespaces", src.Namespaces, checkEmptyValues},
		{"serviceAccounts", "ServiceAccounts", src.ServiceAccounts, checkServiceAccount},
		{"trustDomains", "TrustDomains", src.TrustDomains, checkTrustDomainValues},
		{"ipBlocks", "IpBlocks", src.IpBlocks, checkIPs},
		{"remoteIpBlocks", "RemoteIpBlocks", src.RemoteIpBlocks, checkIPs},
		{"notPrincipals", "NotPrincipals", src.NotPrincipals, checkEmptyValues},
		{"notRequestPrincipals", "NotRequestPrincipals", src.NotRequestPrincipals, checkEmptyValues},
		{"notNamespaces", "NotNamespaces", src.NotNamespaces, checkEmptyValues},
		{"notServiceAccounts", "NotServiceAccounts", src.NotServiceAccounts, checkServiceAccount},
		{"notTrustDomains", "NotTrustDomains", src.NotTrustDomains, checkTrustDomainValues},
		{"notIpBlocks", "NotIpBlocks", src.NotIpBlocks, checkIPs},
		{"notRemoteIpBlocks", "NotRemoteIpBlocks", src.NotRemoteIpBlocks, checkIPs},
	} {
		if err := f.check(f.name, f.values); err != nil {
			fp := p.f(f.field)
			v.add(&fp, err)
		}
	}
}

// checkIPs is what ValidateAuthorizationPolicy asks of IP blocks: ValidateIPs, then
// CheckEmptyValues (an empty value fails both; Istio reports the first).
func checkIPs(key string, values []string) error {
	if err := validateIPs(values); err != nil {
		return err
	}
	return checkEmptyValues(key, values)
}

// operationAt checks a rule's operation as ValidateAuthorizationPolicy does.
func (v *validator) operationAt(p *path, op *security.Operation, rule int) {
	if len(op.Ports)+len(op.Methods)+len(op.Paths)+len(op.Hosts)+len(op.NotPorts)+len(op.NotMethods)+
		len(op.NotPaths)+len(op.NotHosts) == 0 {
		v.errorf(p, "`to.operation` must not be empty, found at rule %d", rule)
	}
	for _, f := range [...]struct {
		field, name string
		values      []string
		check       func(string, []string) error
	}{
		{"ports", "Ports", op.Ports, checkPorts},
		{"notPorts", "NotPorts", op.NotPorts, checkPorts},
		{"methods", "Methods", op.Methods, checkEmptyValues},
		{"paths", "Paths", op.Paths, checkPaths},
		{"hosts", "Hosts", op.Hosts, checkEmptyValues},
		{"notMethods", "NotMethods", op.NotMethods, checkEmptyValues},
		{"notPaths", "NotPaths", op.NotPaths, checkPaths},
		{"notHosts", "NotHosts", op.NotHosts, checkEmptyValues},
	} {
		if err := f.check(f.name, f.values); err != nil {
			fp := p.f(f.field)
			v.add(&fp, err)
		}
	}
}

// checkPorts is what ValidateAuthorizationPolicy asks of ports: ValidatePorts and
// CheckEmptyValues.
func checkPorts(key string, values []string) error {
	return errors.Join(validatePorts(values), checkEmptyValues(key, values))
}

// checkPaths is what ValidateAuthorizationPolicy asks of paths: CheckEmptyValues and
// CheckValidPathTemplate.
func checkPaths(key string, values []string) error {
	return errors.Join(checkEmptyValues(key, values), checkValidPathTemplate(key, values))
}

// checkEmptyValues mirrors security.CheckEmptyValues.
func checkEmptyValues(key string, values []string) error {
	for _, value := range values {
		if value == "" {
			return fmt.Errorf("empty value not allowed, found in %s", key)
		}
	}
	return nil
}

// checkWildcardValues mirrors security.CheckWildcardValues: one "*" at most, at an end.
func checkWildcardValues(key string, values []string) error {
	if err := checkEmptyValues(key, values); err != nil {
		return err
	}
	for _, value := range values {
		count := strings.Count(value, "*")
		if count > 1 {
			return fmt.Errorf("at most one wildcard is allowed, found in %s: %q", key, value)
		}
		if count == 1 && value != "*" && !strings.HasPrefix(value, "*") && !strings.HasSuffix(value, "*") {
			return fmt.Errorf("wildcard is only allowed at the start or end, found in %s: %q", key, value)
		}
	}
	return nil
}

// checkTrustDomainValues mirrors security.CheckTrustDomainValues.
func checkTrustDomainValues(key string, values []string) error {
	if err := checkWildcardValues(key, values); err != nil {
		return err
	}
	for _, value := range values {
		if strings.Contains(value, "/") {
			return fmt.Errorf("trust domain must not contain '/', found in %s: %q", key, value)
		}
	}
	return nil
}

// checkServiceAccount mirrors security.CheckServiceAccount: serviceAccount or
// namespace/serviceAccount, no wildcard, 16 values at most.
func checkServiceAccount(key string, values []string) error {
	if len(values) > 16 {
		return errors.New("may not have more than 16 values")
	}
	for _, value := range values {
		if value == "" {
			return fmt.Errorf("empty value not allowed, found in %s", key)
		}
		if strings.Contains(value, "*") {
			return fmt.Errorf("wildcard not allowed, found in %s", key)
		}
		if n := strings.Count(value, "/"); n != 0 && n != 1 {
			return fmt.Errorf("expected format 'serviceAccount' or 'namespace/serviceAccount', found %q in %s", value, key)
		}
		if len(value) > 320 {
			return fmt.Errorf("value cannot exceed 320 characters, found %q in %s", value, key)
		}
		if ns, sa, ok := strings.Cut(value, "/"); ok {
			if ns == "" {
				return fmt.Errorf("expected format 'serviceAccount' or 'namespace/serviceAccount', found empty namespace %q in %s", value, key)
			}
			if sa == "" {
				return fmt.Errorf("expected format 'serviceAccount' or 'namespace/serviceAccount', found empty serviceAccount %q in %s", value, key)
			}
		}
	}
	return nil
}

// checkValidPathTemplate mirrors security.CheckValidPathTemplate: {*} and {**} segments, {**}
// last, and literal segments of RFC 3986 pchars around them.
func checkValidPathTemplate(key string, paths []string) error {
	for _, p := range paths {
		hasTemplate := strings.Contains(p, "{*}") || strings.Contains(p, "{**}")
		matchAnySeen := false
		p = strings.Trim(p, "/")
		for glob := range strings.SplitSeq(p, "/") {
			switch {
			case glob == "{*}" && !matchAnySeen:
				continue
			case glob == "{**}" && !matchAnySeen:
				matchAnySeen = true
				continue
			case (glob == "{**}" || glob == "{*}") && matchAnySeen:
				return fmt.Errorf("invalid or unsupported path %s, found in %s. {**} is not the last operator", p, key)
			}
			if strings.ContainsAny(glob, "{}") {
				return fmt.Errorf("invalid or unsupported path %s, found in %s. Contains '{' or '}' beyond a supported path template", p, key)
			}
			if hasTemplate && !isValidPathLiteral(glob) {
				return fmt.Errorf("invalid or unsupported path %s, found in %s. Contains segment %s with invalid string literal", p, key, glob)
			}
		}
	}
	return nil
}

// isValidPathLiteral mirrors security.IsValidLiteral: ^[a-zA-Z0-9-._~%!$&'()+,;:@=]+$.
func isValidPathLiteral(glob string) bool {
	if glob == "" {
		return false
	}
	for i := 0; i < len(glob); i++ {
		if c := glob[i]; !isAlnum(c) && !strings.ContainsRune("-._~%!$&'()+,;:@=", rune(c)) {
			return false
		}
	}
	return true
}

// validateIPs mirrors security.ValidateIPs (its first fault).
func validateIPs(ips []string) error {
	for _, ip := range ips {
		if strings.Contains(ip, "/") {
			if _, err := netip.ParsePrefix(ip); err != nil {
				return fmt.Errorf("bad CIDR range (%s): %v", ip, err)
			}
		} else if _, err := netip.ParseAddr(ip); err != nil {
			return fmt.Errorf("bad IP address (%s)", ip)
		}
	}
	return nil
}

// validatePorts mirrors security.ValidatePorts (its first fault).
func validatePorts(ports []string) error {
	for _, port := range ports {
		p, err := strconv.ParseUint(port, 10, 32)
		if err != nil || p > 65535 {
			return fmt.Errorf("bad port (%s): %v", port, err)
		}
	}
	return nil
}

// validateAttribute mirrors security.ValidateAttribute: the keys of a condition and the
// values each takes.
func validateAttribute(key string, values []string) error {
	if err := checkEmptyValues(key, values); err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(key, "request.headers"), strings.HasPrefix(key, "request.auth.claims"),
		strings.HasPrefix(key, "experimental.envoy.filters."):
		return validateMapKey(key)
	case key == "source.ip", key == "remote.ip", key == "destination.ip":
		return validateIPs(values)
	case key == "source.serviceAccount":
		return checkServiceAccount(key, values)
	case key == "source.trustDomain":
		return checkWildcardValues(key, values)
	case key == "destination.port":
		return validatePorts(values)
	case key == "source.namespace", key == "source.principal", key == "request.auth.principal",
		key == "request.auth.audiences", key == "request.auth.presenter", key == "connection.sni":
		return nil
	case key == "destination.namespace":
		return fmt.Errorf("attribute %s is replaced by the metadata.namespace", key)
	case strings.HasPrefix(key, "destination.labels"):
		return fmt.Errorf("attribute %s is replaced by the workload selector", key)
	case key == "destination.name", key == "destination.user":
		return fmt.Errorf("deprecated attribute %s: only supported in v1alpha1", key)
	}
	return fmt.Errorf("unknown attribute: %s", key)
}

// validateMapKey mirrors security.validateMapKey: a[b].
func validateMapKey(key string) error {
	open := strings.Index(key, "[")
	if strings.HasSuffix(key, "]") && open > 0 && open < len(key)-2 {
		return nil
	}
	return fmt.Errorf("bad key (%s): should have format a[b]", key)
}

// validateRequestAuthentication mirrors Istio's ValidateRequestAuthentication and
// validateJwtRule. Istio parses an inline JWKS with its JWK library; the bridge checks only
// that it is JSON, which that library requires, and leaves the keys to istiod.
func validateRequestAuthentication(v *validator, ra *security.RequestAuthentication) {
	v.policySelectionAt(ra.GetSelector(), ra.GetTargetRef(), ra.GetTargetRefs())
	rules := specRoot.f("jwtRules")
	for i, r := range ra.JwtRules {
		if r == nil {
			continue
		}
		rp := rules.i(i)
		ap := rp.f("audiences")
		for j, a := range r.Audiences {
			if a == "" {
				jp := ap.i(j)
				v.errorf(&jp, "audience must be non-empty string")
			}
		}
		if r.Issuer == "" && r.JwksUri == "" {
			ip := rp.f("issuer")
			v.errorf(&ip, "issuer or jwksUri must be non-empty string")
		}
		if r.JwksUri != "" {
			up := rp.f("jwksUri")
			v.add(&up, parseJwksURI(r.JwksUri))
		}
		if r.Jwks != "" && !json.Valid([]byte(r.Jwks)) {
			jp := rp.f("jwks")
			v.errorf(&jp, "jwks parse error: not a JSON document")
		}
		hp := rp.f("fromHeaders")
		for j, h := range r.FromHeaders {
			jp := hp.i(j)
			if h == nil {
				v.errorf(&jp, "location header name must be non-null")
				continue
			}
			if h.Name == "" {
				np := jp.f("name")
				v.errorf(&np, "location header name must be non-empty string")
			}
		}
		pp := rp.f("fromParams")
		for j, q := range r.FromParams {
			if q == "" {
				jp := pp.i(j)
				v.errorf(&jp, "location query must be non-empty string")
			}
		}
		cp := rp.f("fromCookies")
		for j, c := range r.FromCookies {
			if c == "" {
				jp := cp.i(j)
				v.errorf(&jp, "cookie name must be non-empty string")
			}
		}
		op := rp.f("outputClaimToHeaders")
		for j, ch := range r.OutputClaimToHeaders {
			jp := op.i(j)
			switch {
			case ch == nil:
				v.errorf(&jp, "outputClaimToHeaders must not be null")
			case ch.Claim == "" || ch.Header == "":
				v.errorf(&jp, "outputClaimToHeaders header and claim value must be non-empty string")
			default:
				hp := jp.f("header")
				v.add(&hp, validateStrictHTTPHeaderName(ch.Header))
			}
		}
		tp := rp.f("timeout")
		v.durationAt(&tp, r.Timeout)
	}
}

// parseJwksURI mirrors the checks of security.ParseJwksURI: an http or https URL, its port a
// number.
func parseJwksURI(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URI scheme %q is not supported", u.Scheme)
	}
	if port := u.Port(); port != "" {
		if _, err := strconv.Atoi(port); err != nil {
			return err
		}
	}
	return nil
}

// validatePeerAuthentication mirrors Istio's ValidatePeerAuthentication.
func validatePeerAuthentication(v *validator, pa *security.PeerAuthentication) {
	pp := specRoot.f("portLevelMtls")
	emptySelector := pa.Selector == nil || len(pa.Selector.MatchLabels) == 0
	if emptySelector && len(pa.PortLevelMtls) != 0 {
		v.errorf(&pp, "mesh/namespace peer authentication cannot have port level mTLS")
	}
	if pa.PortLevelMtls != nil && len(pa.PortLevelMtls) == 0 {
		v.errorf(&pp, "port level mTLS, if defined, must have at least one element")
	}
	for port := range pa.PortLevelMtls {
		if port == 0 || port > 65535 {
			kp := pp.k(strconv.FormatUint(uint64(port), 10))
			v.errorf(&kp, "port must be in range 1..65535")
		}
	}
	sp := specRoot.f("selector")
	v.workloadSelectorAt(&sp, pa.Selector)
}
