// Package hostname holds Istio's two rules for host names that more than one layer must
// apply alike: completing a short name (the translation, and the producers' authorization,
// which must authorize a host as it will be served) and matching a host against a pattern.
package hostname

import "strings"

// Complete completes a short host as Istio does (ResolveShortnameToFQDN): a name without
// a dot is a Kubernetes service of the resource's namespace, NAME.NAMESPACE.svc.SUFFIX;
// anything with a dot, a wildcard, or a resource of no namespace is taken as written. The
// translation and the producers' authorization complete hosts by this one rule, so that a
// host is authorized as it is served.
func Complete(host, namespace, suffix string) string {
	if host == "" || namespace == "" || strings.Contains(host, ".") || strings.Contains(host, "*") {
		return host
	}
	return host + "." + namespace + ".svc." + suffix
}

// Matches reports whether a host (a name, or itself a pattern) falls under pattern, as
// Istio's host.Name.SubsetOf: "*" matches everything; "*.example.com" matches
// "a.example.com", "a.b.example.com" and the narrower pattern "*.b.example.com", but not
// "example.com"; a name matches only itself. Case counts (Istio's hosts are lower case).
func Matches(pattern, host string) bool {
	if pattern == host || pattern == "*" {
		return true
	}
	suffix, wild := strings.CutPrefix(pattern, "*") // ".example.com"
	if !wild {
		return false
	}
	if h, hostWild := strings.CutPrefix(host, "*"); hostWild {
		return strings.HasSuffix(h, suffix)
	}
	return strings.HasSuffix(host, suffix)
}
