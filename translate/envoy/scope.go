package envoy

import (
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/store"
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
//     of them, are given again with those domains;
//   - the hosts it does not see, hidden (store.Hidden): those of ServiceEntries whose
//     exportTo leaves the namespace out, and those its Sidecar's egress hosts do not import
//     (the namespace's own Sidecar without a workloadSelector, else the root namespace's; a
//     Sidecar without egress imports everything, as istiod's default);
//     their clusters, load assignments, API listeners and route configurations are hidden,
//     and the listeners and route configurations that gather them are given again without
//     them (a port none of whose hosts it sees has none).
//
//   - the HTTP routes of its hosts when the VirtualService that routes one mesh-wide is not
//     exported to it (exportTo): the next VirtualService that is, or the default route.
//
// What istiod also scopes and the bridge does not (reported as faults where set):
// DestinationRule exportTo, a VirtualService's exportTo for its tcp and tls routes and for
// gateways, Sidecars for some workloads, egress listeners with a port, the Sidecar's ingress
// and outbound traffic policy, and the VirtualServices and DestinationRules a Sidecar imports
// by namespace.

// rootNamespace is Istio's default root namespace (MeshConfig rootNamespace): a Sidecar there
// applies to every namespace that has none of its own.
const rootNamespace = "istio-system"

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

// scopeChanged marks what a namespace's scope changes: its own hosts (their local domains),
// the hosts it may not see or may route otherwise (those of ServiceEntries and
// VirtualServices whose exportTo is limited; every host when a Sidecar narrows it), and
// every port's outputs as the namespace sees them.
func (t *Translator) scopeChanged(namespace string) {
	all := t.sidecarFor(namespace) != nil
	for h := range t.units.hostNames() {
		if all || hostNamespace(h, t.suffix) == namespace {
			t.mark(unitKey{unitHost, h})
			if all {
				t.mark(unitKey{unitEndpoints, h})
			}
		}
	}
	if !all {
		for key := range t.limitedSEs {
			for _, h := range t.ses[key].hosts {
				t.markHost(h, false)
			}
		}
		for key := range t.limitedVSs {
			for _, h := range t.vss[key].hosts {
				t.markHosts(h, false)
			}
		}
	}
	for p := range t.ports {
		t.mark(unitKey{unitScopedPort, scopedPortKey(namespace, p)})
	}
	for name, bs := range t.tcpBinds {
		if bs.bind == wildcardBind {
			t.mark(unitKey{unitScopedPort, scopedPortKey(namespace, bs.port)})
		} else {
			t.mark(unitKey{unitTCPListener, name})
		}
	}
}

// setSidecar replaces (or, with nil, removes) a Sidecar. What a namespace imports may change
// what it sees of every host: when it changes the Sidecar of a scope, every host is built
// again, as istiod pushes every proxy; a Sidecar no scope takes changes nothing.
func (t *Translator) setSidecar(key string, sc *sidecar) {
	before := make(map[string]*sidecar, len(t.scopes))
	for ns := range t.scopes {
		before[ns] = t.sidecarFor(ns)
	}
	if sc == nil {
		delete(t.sidecars, key)
	} else {
		t.sidecars[key] = sc
	}
	changed := false
	for ns := range t.scopes {
		if t.sidecarFor(ns) != before[ns] {
			changed = true
			t.scopeChanged(ns)
		}
	}
	if !changed {
		return
	}
	for h := range t.units.hostNames() {
		t.mark(unitKey{unitHost, h})
		t.mark(unitKey{unitEndpoints, h})
	}
}

// sidecarFor is the Sidecar that narrows a namespace's view: its own without a
// workloadSelector, else the root namespace's; the oldest (then first by name) of several.
func (t *Translator) sidecarFor(namespace string) *sidecar {
	var own, root *sidecar
	for _, sc := range t.sidecars {
		if sc.selects {
			continue
		}
		switch sc.Namespace {
		case namespace:
			own = olderSidecar(own, sc)
		case rootNamespace:
			root = olderSidecar(root, sc)
		}
	}
	if own != nil {
		return own
	}
	return root
}

func olderSidecar(a, b *sidecar) *sidecar {
	if a == nil || b.Created.Before(a.Created) || b.Created.Equal(a.Created) && b.Key < a.Key {
		return b
	}
	return a
}

// narrowScopes finds, as a Translate starts, the Sidecar of each scope (t.narrowing) and
// the scopes one narrows, sorted (t.narrowed): what the builds read, on every CPU.
func (t *Translator) narrowScopes() {
	t.narrowed, t.narrowing = nil, nil
	if len(t.sidecars) == 0 {
		return
	}
	t.narrowing = map[string]*sidecar{}
	for ns := range t.scopes {
		if sc := t.sidecarFor(ns); sc != nil {
			t.narrowed = append(t.narrowed, ns)
			t.narrowing[ns] = sc
		}
	}
	slices.Sort(t.narrowed)
}

// exportTo is a resource's exportTo as written (empty: every namespace, Istio's default)
// and the namespace the resource is in.
type exportTo struct {
	list      []string
	namespace string
}

func (se *serviceEntry) export() exportTo   { return exportTo{se.exportTo(), se.Namespace} }
func (vs *virtualService) export() exportTo { return exportTo{vs.spec.GetExportTo(), vs.Namespace} }

// limited tells an exportTo that leaves some namespace out.
func (e exportTo) limited() bool { return len(e.list) > 0 && !slices.Contains(e.list, "*") }

// takes tells whether an exportTo takes a namespace: "*" every one (and so does an empty
// exportTo), "." the resource's own, "~" none, else the names listed.
func (e exportTo) takes(namespace string) bool {
	if len(e.list) == 0 {
		return true
	}
	for _, x := range e.list {
		if x == "*" || x == namespace || x == "." && e.namespace == namespace {
			return true
		}
	}
	return false
}

// imports tells whether a Sidecar applied to a namespace's proxies imports a host of a
// ServiceEntry of another namespace: an egress host "NS/DNSNAME" whose NS is "*", the
// service's namespace, or "." for the proxies' own, and whose DNSNAME is "*", the host, or a
// "*.SUFFIX" the host ends with.
func (sc *sidecar) imports(proxyNamespace, serviceNamespace, host string) bool {
	for _, h := range sc.egress {
		switch h.namespace {
		case "*", serviceNamespace:
		case ".":
			if serviceNamespace != proxyNamespace {
				continue
			}
		default:
			continue
		}
		if h.dnsName == "*" || h.dnsName == host || strings.HasPrefix(h.dnsName, "*.") && strings.HasSuffix(host, h.dnsName[1:]) {
			return true
		}
	}
	return false
}

// visibleIn tells whether a namespace's proxies see a host of a ServiceEntry.
func (t *Translator) visibleIn(namespace, host string, se *serviceEntry) bool {
	if se == nil || !se.export().takes(namespace) {
		return se == nil
	}
	sc := t.narrowing[namespace]
	return sc == nil || sc.imports(namespace, se.Namespace, host)
}

// hidingScopes are the scopes that do not see a host: among the narrowed ones, or every one
// when its ServiceEntry limits its exportTo.
func (t *Translator) hidingScopes(host string, se *serviceEntry) []string {
	candidates := t.narrowed
	if se.export().limited() {
		candidates = sortedKeys(t.scopes)
	}
	var out []string
	for _, ns := range candidates {
		if !t.visibleIn(ns, host, se) {
			out = append(out, ns)
		}
	}
	return out
}

// hideFromScopes hides the unit's outputs from the scopes that do not see its host, and
// drops what it built for those scopes (the host's local or VirtualService routes). The
// markers are appended, not set: their keys are new to the unit.
func (b *build) hideFromScopes(host string, se *serviceEntry) {
	if se == nil {
		return
	}
	hiding := b.t.hidingScopes(host, se)
	if len(hiding) == 0 {
		return
	}
	var shown []output
	for _, o := range b.u.outputs {
		if slices.Contains(outputTypes[:], o.typeURL) {
			shown = append(shown, o)
		}
	}
	hidden := make(map[string]bool, len(hiding))
	for _, ns := range hiding {
		hidden[ns] = true
	}
	b.u.outputs = slices.DeleteFunc(b.u.outputs, func(o output) bool {
		ns, ok := translate.ScopeNamespace(o.typeURL)
		return ok && hidden[ns]
	})
	for i := range b.u.vhosts {
		sp := b.u.vhosts[i].scoped // this build's own (buildRoutes made it)
		if sp == nil {
			continue
		}
		if hidden[hostNamespace(host, b.t.suffix)] {
			sp.local = nil
		}
		sp.variants = slices.DeleteFunc(sp.variants, func(v scopedRest) bool { return hidden[v.namespace] })
	}
	b.u.outputs = slices.Grow(b.u.outputs, len(hiding)*len(shown))
	for _, ns := range hiding {
		for _, o := range shown {
			b.u.outputs = append(b.u.outputs, output{translate.ScopeCollection(ns, o.typeURL), store.Hidden(o.enc.Name())})
		}
	}
}

// hostVisibleIn is visibleIn for a host by name.
func (t *Translator) hostVisibleIn(namespace, host string) bool {
	se, _ := t.serviceEntryFor(host)
	return t.visibleIn(namespace, host, se)
}

// scopeMayHide tells whether a namespace may not see some host: a Sidecar narrows it, or some
// ServiceEntry limits its exportTo.
func (t *Translator) scopeMayHide(namespace string) bool {
	return t.limitedExports > 0 || slices.Contains(t.narrowed, namespace)
}

// scopedTCPListeners adds to a listener's build (bound to an address of its own) the
// listener as each scope that does not see all its hosts sees it: without their chains, or
// hidden when it sees none.
func (t *Translator) scopedTCPListeners(b *build, name string, bs *tcpBindState, tcp []*tcpContribution) {
	for _, ns := range sortedKeys(t.scopes) {
		if !t.scopeMayHide(ns) {
			continue
		}
		visible := slices.DeleteFunc(slices.Clone(tcp), func(c *tcpContribution) bool { return !t.hostVisibleIn(ns, c.host) })
		if len(visible) == len(tcp) {
			continue
		}
		b.scope = ns
		if len(visible) == 0 {
			b.u.set(output{b.collection(ListenerType), store.Hidden(name)})
		} else {
			t.putTCPListener(b, name, bs.bind, bs.port, nil, visible)
		}
		b.scope = ""
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

// buildScopedPort builds a port's outbound listener and route configuration as a namespace's
// proxies see them: the mesh-wide ones without the hosts the namespace does not see, and with
// the namespace's own hosts' heads (local domains). It builds them only where they differ: a
// port with none of the namespace's hosts and none hidden from it has no output here, and the
// namespace's proxies read the mesh-wide ones.
func (t *Translator) buildScopedPort(key string) *unitState {
	ns, port, _ := strings.Cut(key, "/")
	p := parsePort(port)
	b := newBuild(t, "Mesh", "port "+port+" as namespace "+ns+" sees it")
	if _, ok := t.scopes[ns]; !ok || sidecarRouteSettings.err != nil {
		return b.done()
	}
	if !t.portRouteBuilt(p) {
		return t.buildScopedPortListener(b, ns, p)
	}
	ps := t.gathered(p)
	mayHide := t.scopeMayHide(ns)
	if !mayHide && (ps == nil || ps.locals == 0 && ps.variants == 0) {
		return b.done()
	}
	changed := false
	var vhosts []vhostParts
	shares := 0
	if ps != nil {
		vhosts = make([]vhostParts, 0, len(ps.vhosts))
		for i, vh := range ps.vhosts {
			host := ps.order[i]
			if mayHide && !t.hostVisibleIn(ns, host) {
				changed = true
				continue
			}
			if ps.shared[i] {
				shares++
			}
			if ps.local[i] != nil && hostNamespace(host, t.suffix) == ns {
				vh.head, changed = ps.local[i], true
			}
			if ps.variant[i] {
				if _, pv, _ := t.units.get(unitKey{unitHost, host}).vhost(host, p); pv != nil {
					if rest := pv.variantFor(ns); rest != nil {
						vh.tail, vh.dflt, changed = rest, defaultTail{}, true
					}
				}
			}
			vhosts = append(vhosts, vh)
		}
	}
	tcp := t.gatheredTCP(OutboundListenerName(p))
	if mayHide {
		n := len(tcp)
		tcp = slices.DeleteFunc(slices.Clone(tcp), func(c *tcpContribution) bool { return !t.hostVisibleIn(ns, c.host) })
		changed = changed || len(tcp) != n
	}
	if !changed {
		return b.done()
	}
	b.scope = ns
	switch {
	case shares == 0 && len(tcp) == 0:
		b.u.set(output{b.collection(ListenerType), store.Hidden(OutboundListenerName(p))})
		b.u.set(output{b.collection(RouteType), store.Hidden(OutboundRouteName(p))})
	default:
		if shares == 0 {
			vhosts = nil
			b.u.set(output{b.collection(RouteType), store.Hidden(OutboundRouteName(p))})
		}
		t.buildSharedPort(b, p, shares > 0, vhosts, tcp)
	}
	return b.done()
}

// buildScopedPortListener builds a port's outbound listener alone as a namespace's proxies see
// it, while the port's route configuration is not built (portroutes.go): it differs from the
// mesh-wide one only where the namespace does not see some of the port's hosts, and is told
// from the hosts the port keeps, without gathering their virtual hosts.
func (t *Translator) buildScopedPortListener(b *build, ns string, p uint32) *unitState {
	if !t.scopeMayHide(ns) {
		return b.done()
	}
	changed := false
	shares := 0
	if ps := t.ports[p]; ps != nil {
		for host, shared := range ps.hosts {
			switch {
			case !t.hostVisibleIn(ns, host):
				changed = true
			case shared:
				shares++
			}
		}
	}
	tcp := t.gatheredTCP(OutboundListenerName(p))
	n := len(tcp)
	tcp = slices.DeleteFunc(slices.Clone(tcp), func(c *tcpContribution) bool { return !t.hostVisibleIn(ns, c.host) })
	if !changed && len(tcp) == n {
		return b.done()
	}
	b.scope = ns
	if shares == 0 && len(tcp) == 0 {
		b.u.set(output{b.collection(ListenerType), store.Hidden(OutboundListenerName(p))})
		return b.done()
	}
	t.buildSharedPort(b, p, shares > 0, nil, tcp)
	return b.done()
}

// scopedVS is the VirtualService that routes a host in a scope (nil: none, the default route).
type scopedVS struct {
	namespace string
	vs        *virtualService
}

// scopedVirtualServices are the scopes that do not see vs, the VirtualService that routes the
// host mesh-wide, each with the one that routes it there instead, as istiod chooses among the
// VirtualServices exported to a proxy's namespace.
func (b *hostBuild) scopedVirtualServices(vs *virtualService) []scopedVS {
	if vs == nil || !vs.export().limited() {
		return nil
	}
	var out []scopedVS
	for _, ns := range sortedKeys(b.t.scopes) {
		if vs.export().takes(ns) {
			continue
		}
		other, _ := b.t.meshVirtualServiceWhere(b.host, func(v *virtualService) bool { return v.export().takes(ns) })
		out = append(out, scopedVS{ns, other})
	}
	return out
}
