package envoy

import (
	"strings"

	"github.com/mcpbridge/mcpbridge/translate"
)

// Scopes: what a namespace's proxies see differently from the rest of the mesh (istiod
// computes it per proxy, from its namespace's SidecarScope). The translation builds it only
// for the namespaces whose proxies are connected (SetScope), as outputs in the namespace's
// overlay collections (translate.ScopeCollection), named as the mesh-wide outputs they
// replace: the xDS server reads each derived collection through the overlay of a proxy's
// namespace, so that everything a namespace sees alike is stored, encoded and sent from one
// copy. What a scope holds today:
//   - the short names of its own namespace's hosts: a host NAME.NS.svc.SUFFIX answers to
//     "NAME" for the proxies of NS (domains.go); the host's own route configurations for
//     proxyless gRPC clients, and each port's outbound route configuration that gathers one
//     of them, are given again with those domains.

// SetScope builds, from the next Translate, the view of a namespace's proxies.
func (t *Translator) SetScope(namespace string) {
	if _, ok := t.scopes[namespace]; ok {
		return
	}
	t.scopes[namespace] = struct{}{}
	t.scopeChanged(namespace)
}

// RemoveScope stops building a namespace's view; the next Translate removes its outputs.
func (t *Translator) RemoveScope(namespace string) {
	if _, ok := t.scopes[namespace]; !ok {
		return
	}
	delete(t.scopes, namespace)
	t.scopeChanged(namespace)
}

// scopeChanged marks what a namespace's scope changes: its own hosts (their local domains)
// and every port's route configuration as the namespace sees it.
func (t *Translator) scopeChanged(namespace string) {
	for key := range t.units {
		if key.kind == unitHost && hostNamespace(key.name, t.suffix) == namespace {
			t.dirty[key] = struct{}{}
		}
	}
	for p := range t.ports {
		t.dirty[unitKey{unitScopedPort, scopedPortKey(namespace, p)}] = struct{}{}
	}
}

// hostNamespace is the namespace of a Kubernetes-style host, NAME.NAMESPACE.svc.SUFFIX; ""
// for any other host.
func hostNamespace(host, suffix string) string {
	rest, ok := strings.CutSuffix(host, ".svc."+suffix)
	if !ok {
		return ""
	}
	_, ns, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(ns, ".") {
		return ""
	}
	return ns
}

// localScope is the scope of the host's own namespace, if it is built.
func (b *hostBuild) localScope() (string, bool) {
	ns := hostNamespace(b.host, b.t.suffix)
	if ns == "" {
		return "", false
	}
	_, ok := b.t.scopes[ns]
	return ns, ok
}

func scopedPortKey(namespace string, p uint32) string { return namespace + "/" + portKey(p) }

// buildScopedPort builds a port's outbound route configuration as a namespace's proxies see
// it: the mesh-wide one, with the namespace's own hosts' heads (local domains). It is built
// only where it differs: a port with none of the namespace's hosts has no output here, and
// the namespace's proxies read the mesh-wide one.
func (t *Translator) buildScopedPort(key string) *unitState {
	ns, port, _ := strings.Cut(key, "/")
	p := parsePort(port)
	b := newBuild(t, "Mesh", "port "+port+" as namespace "+ns+" sees it")
	if _, ok := t.scopes[ns]; !ok {
		return b.u
	}
	ps := t.gathered(p)
	if ps == nil || ps.locals == 0 || sidecarRouteSettings.err != nil {
		return b.u
	}
	vhosts := make([]vhostParts, len(ps.vhosts))
	mine := false
	for i, vh := range ps.vhosts {
		if ps.local[i] != nil && hostNamespace(ps.order[i], t.suffix) == ns {
			vh.head, mine = ps.local[i], true
		}
		vhosts[i] = vh
	}
	if mine {
		b.putRouteConfigurationIn(translate.ScopeCollection(ns, RouteType), OutboundRouteName(p), vhosts, sidecarRouteSettings.enc)
	}
	return b.u
}
