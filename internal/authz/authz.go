// Package authz decides what a peer of the bridge may do: which collections it may produce and
// consume, in which namespaces, and whether it is an administrator. Rules come from the
// configuration (authz.rules); a peer is named by the SPIFFE ID of its verified client
// certificate.
//
// With no rules everything is allowed (loopback development). With rules, a peer's rights are
// those of every rule whose identity matches it, each rule's collections going with its own
// namespaces; a peer no rule matches may do nothing, and a peer without a verified identity
// matches only the rule whose identity is "unauthenticated".
package authz

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Unauthenticated is the identity of a rule for peers without a verified identity.
const Unauthenticated = "unauthenticated"

// All, in a list of collections or namespaces, is every one.
const All = "*"

// Rule is one entry of authz.rules.
type Rule struct {
	// Identity is an exact SPIFFE ID, a prefix ending in "/*"
	// (spiffe://example.org/ns/mesh-config/*), or "unauthenticated".
	Identity string `mapstructure:"identity"`
	Produce  Scope  `mapstructure:"produce"`
	Consume  Scope  `mapstructure:"consume"`
	// Admin may read the debug views and the status page.
	Admin bool `mapstructure:"admin"`
}

// Scope is collections in namespaces. Collections are MCP collection names, xDS type URLs or
// AggregatedMeshConfigService type URLs (any name of a kind), or "*"; namespaces are names or
// "*". A resource of a cluster-scoped kind, whose name has no namespace, is in a scope only
// with "*" among its namespaces.
type Scope struct {
	Collections []string `mapstructure:"collections"`
	Namespaces  []string `mapstructure:"namespaces"`
	// Hosts, of a produce scope, are the hosts its resources may define or route (a
	// ServiceEntry's hosts, a VirtualService's, a DestinationRule's host, a Gateway's server
	// hosts): names ("api.payments.example.com"), patterns ("*.payments.example.com") or "*",
	// any host. Empty: the Kubernetes service domains of its namespaces
	// ("*.NS.svc.SUFFIX" and "*.NS.svc"), or any host when its namespaces are "*". As Istio
	// has it, a host belongs to a namespace; unlike Istio, the bridge refuses the push.
	Hosts []string `mapstructure:"hosts"`
}

// Policy is the compiled rules. The zero Policy, and a Policy of no rules, allows everything.
type Policy struct {
	rules []rule
}

type rule struct {
	identity string // exact, or a prefix (ending in "/") when prefix is set
	prefix   bool
	produce  scope
	consume  scope
	admin    bool
}

// scope is a compiled Scope: canonical collections and namespaces, each a set or all, and
// the host patterns (nil: the namespaces' service domains).
type scope struct {
	collections set
	namespaces  set
	hosts       []string
}

type set struct {
	all   bool
	names []string // sorted
}

func (s set) has(name string) bool {
	if s.all {
		return true
	}
	_, ok := slices.BinarySearch(s.names, name)
	return ok
}

// Canonical names a collection the one way rules and requests are compared: the bridge passes
// its naming table (any name of a kind to its canonical MCP collection), and a name it does
// not know stays as it is.
type Canonical func(name string) string

// Compile checks and compiles rules. Each error names the rule (by index) and the field.
func Compile(rules []Rule, canonical Canonical) (*Policy, error) {
	if canonical == nil {
		canonical = func(s string) string { return s }
	}
	p := &Policy{}
	for i, r := range rules {
		c, err := compileRule(r, canonical)
		if err != nil {
			return nil, fmt.Errorf("authz.rules[%d].%w", i, err)
		}
		p.rules = append(p.rules, c)
	}
	return p, nil
}

func compileRule(r Rule, canonical Canonical) (rule, error) {
	c := rule{identity: r.Identity, admin: r.Admin}
	switch id := r.Identity; {
	case id == Unauthenticated:
	case id == "":
		return c, errors.New(`identity: empty; give a SPIFFE ID, a prefix ending in "/*", or "unauthenticated"`)
	case !strings.HasPrefix(id, "spiffe://"):
		return c, fmt.Errorf(`identity: %q is not a SPIFFE ID (spiffe://trust-domain/path), a prefix ending in "/*", or "unauthenticated"`, id)
	case strings.HasSuffix(id, "/*"):
		c.identity, c.prefix = strings.TrimSuffix(id, "*"), true
	case strings.Contains(id, "*"):
		return c, fmt.Errorf(`identity: %q: "*" may only end a prefix, as in spiffe://example.org/ns/mesh-config/*`, id)
	}
	var err error
	if c.produce, err = compileScope(r.Produce, canonical); err != nil {
		return c, fmt.Errorf("produce.%w", err)
	}
	if c.consume, err = compileScope(r.Consume, canonical); err != nil {
		return c, fmt.Errorf("consume.%w", err)
	}
	if len(r.Consume.Hosts) > 0 {
		return c, errors.New("consume.hosts: hosts limit what a producer defines; a consumer reads by namespace")
	}
	return c, nil
}

func compileScope(s Scope, canonical Canonical) (scope, error) {
	var c scope
	var err error
	if c.collections, err = compileSet("collections", s.Collections, canonical); err != nil {
		return c, err
	}
	if c.namespaces, err = compileSet("namespaces", s.Namespaces, func(n string) string { return n }); err != nil {
		return c, err
	}
	if len(s.Collections) > 0 && len(s.Namespaces) == 0 {
		return c, errors.New(`namespaces: empty; the collections are of no namespace: name some, or "*"`)
	}
	for _, h := range s.Hosts {
		if !ValidHostPattern(h) {
			return c, fmt.Errorf(`hosts: %q is not a host name, a pattern "*.domain" or "*"`, h)
		}
		c.hosts = append(c.hosts, strings.ToLower(h))
	}
	return c, nil
}

func compileSet(field string, names []string, canonical Canonical) (set, error) {
	var s set
	for _, n := range names {
		switch {
		case n == All:
			s.all = true
		case n == "" || strings.ContainsAny(n, "* \t\n"):
			return s, fmt.Errorf("%s: %q is not a name or %q", field, n, All)
		default:
			s.names = append(s.names, canonical(n))
		}
	}
	slices.Sort(s.names)
	s.names = slices.Compact(s.names)
	return s, nil
}

// ScopeGrant is the grant of one produce scope, for a producer the bridge dials (an upstream)
// rather than one that presents an identity: who names it in refusals. An error names the
// field of the scope ("namespaces: ..."). Unlike a rule's, its hosts default to any host.
func ScopeGrant(who string, produce Scope, canonical Canonical) (*Grant, error) {
	if canonical == nil {
		canonical = func(s string) string { return s }
	}
	s, err := compileScope(produce, canonical)
	if err != nil {
		return nil, err
	}
	if len(produce.Collections) == 0 {
		return nil, errors.New(`collections: empty; name the collections the upstream may produce, or "*"`)
	}
	if s.hosts == nil {
		// The operator chose the upstream and its namespaces: any host, unless hosts says.
		s.hosts = []string{All}
	}
	return &Grant{Identity: who, rules: []rule{{identity: Unauthenticated, produce: s}}}, nil
}

// Enabled reports whether there are rules: without, everything is allowed.
func (p *Policy) Enabled() bool { return p != nil && len(p.rules) > 0 }

// ErrNoRule is the refusal of a peer that no rule matches.
var ErrNoRule = errors.New("no authorization rule matches this peer")

// Grant returns the rights of a peer: id is the SPIFFE ID of its verified certificate, or
// empty when it has none. It returns ErrNoRule when rules are set and none matches.
func (p *Policy) Grant(id string) (*Grant, error) {
	if !p.Enabled() {
		return &Grant{Identity: id, all: true, Admin: true}, nil
	}
	g := &Grant{Identity: id}
	if id == "" {
		g.Identity = Unauthenticated
	}
	for _, r := range p.rules {
		if r.matches(id) {
			g.rules = append(g.rules, r)
			g.Admin = g.Admin || r.admin
		}
	}
	if len(g.rules) == 0 {
		return nil, fmt.Errorf("%w (identity %s)", ErrNoRule, g.Identity)
	}
	return g, nil
}

func (r rule) matches(id string) bool {
	switch {
	case id == "":
		return r.identity == Unauthenticated
	case r.prefix:
		return strings.HasPrefix(id, r.identity)
	}
	return r.identity == id
}

// Grant is what one peer may do.
type Grant struct {
	// Identity is the peer's SPIFFE ID, or "unauthenticated".
	Identity string
	// Admin may read the debug views and the status page.
	Admin bool
	all   bool // no rules: everything
	rules []rule
}

// All reports whether the grant allows everything (no rules are configured).
func (g *Grant) All() bool { return g.all }

// MayProduce reports whether the peer may write a resource of this name in a collection
// (canonical) as a producer.
func (g *Grant) MayProduce(collection, name string) bool {
	return g.may(collection, name, func(r rule) scope { return r.produce })
}

// MayConsume reports whether the peer may read a resource of this name in a collection
// (canonical).
func (g *Grant) MayConsume(collection, name string) bool {
	return g.may(collection, name, func(r rule) scope { return r.consume })
}

// MayProduceIn and MayConsumeIn report whether the peer may write, or read, anything of a
// collection (canonical) at all.
func (g *Grant) MayProduceIn(collection string) bool {
	return g.in(collection, func(r rule) scope { return r.produce })
}

func (g *Grant) MayConsumeIn(collection string) bool {
	return g.in(collection, func(r rule) scope { return r.consume })
}

func (g *Grant) in(collection string, of func(rule) scope) bool {
	if g.all {
		return true
	}
	for _, r := range g.rules {
		if s := of(r); s.collections.has(collection) && (s.namespaces.all || len(s.namespaces.names) > 0) {
			return true
		}
	}
	return false
}

// MayProduceHost reports whether the peer may define or route a host (a ServiceEntry's, a
// VirtualService's, ...; short names completed already) by a resource of a collection
// (canonical) in a namespace: a rule that lets it produce there must allow the host (its
// produce.hosts, else the service domains "*.NS.svc.SUFFIX" and "*.NS.svc" of its
// namespaces, else, with namespaces "*", any host). suffix is the mesh's domain suffix.
func (g *Grant) MayProduceHost(collection, namespace string, namespaced bool, host, suffix string) bool {
	if g.all {
		return true
	}
	host = strings.ToLower(host)
	for _, r := range g.rules {
		s := r.produce
		if !s.collections.has(collection) || !(s.namespaces.all || namespaced && s.namespaces.has(namespace)) {
			continue
		}
		if s.allowsHost(host, suffix) {
			return true
		}
	}
	return false
}

// MayProduceAnyHost reports whether a rule that lets the peer produce a collection in a
// namespace allows every host there (hosts "*", or namespaces "*" without hosts): its
// resources' hosts need not be read at all.
func (g *Grant) MayProduceAnyHost(collection, namespace string, namespaced bool) bool {
	if g.all {
		return true
	}
	for _, r := range g.rules {
		s := r.produce
		if !s.collections.has(collection) || !(s.namespaces.all || namespaced && s.namespaces.has(namespace)) {
			continue
		}
		if s.hosts == nil && s.namespaces.all || slices.Contains(s.hosts, All) {
			return true
		}
	}
	return false
}

// allowsHost reports whether a produce scope allows a host (lower case).
func (s scope) allowsHost(host, suffix string) bool {
	if s.hosts != nil {
		for _, p := range s.hosts {
			if HostCovers(p, host) {
				return true
			}
		}
		return false
	}
	if s.namespaces.all {
		return true
	}
	ns, ok := ServiceNamespace(host, suffix)
	return ok && s.namespaces.has(ns)
}

// HostsAllowed describes the hosts a peer may define in a namespace, for refusals.
func (g *Grant) HostsAllowed(collection, namespace string, namespaced bool, suffix string) string {
	var out []string
	for _, r := range g.rules {
		s := r.produce
		if !s.collections.has(collection) || !(s.namespaces.all || namespaced && s.namespaces.has(namespace)) {
			continue
		}
		switch {
		case s.hosts != nil:
			out = append(out, s.hosts...)
		case s.namespaces.all:
			out = append(out, "*")
		default:
			for _, ns := range s.namespaces.names {
				out = append(out, "*."+ns+".svc."+suffix, "*."+ns+".svc")
			}
		}
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ", ")
}

// ServiceNamespace is the namespace of a Kubernetes service's host, NAME.NS.svc.SUFFIX or
// NAME.NS.svc (NAME one label or more, or "*"); false for any other host.
func ServiceNamespace(host, suffix string) (string, bool) {
	rest, ok := strings.CutSuffix(host, ".svc."+suffix)
	if !ok || suffix == "" {
		if rest, ok = strings.CutSuffix(host, ".svc"); !ok {
			return "", false
		}
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 || i == len(rest)-1 {
		return "", false
	}
	return rest[i+1:], true
}

// ValidHostPattern reports whether s is "*", a host name, or "*." and a host name, each label
// of letters, digits, '-' and '_' (Istio's hosts), at most 253 characters.
func ValidHostPattern(s string) bool {
	if s == "*" {
		return true
	}
	name := strings.TrimPrefix(s, "*.")
	if name == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// HostCovers reports whether a host pattern covers a host (itself a name or a pattern): the
// translation's matching (kinds.HostMatches, Istio's host.Name.SubsetOf), case ignored.
func HostCovers(pattern, host string) bool {
	return hostname.Matches(strings.ToLower(pattern), strings.ToLower(host))
}

func (g *Grant) may(collection, name string, of func(rule) scope) bool {
	ns, namespaced := NamespaceOf(name)
	return g.mayIn(collection, ns, namespaced, of)
}

// MayConsumeNamespace reports whether the peer may read a collection's (canonical) resources
// of a namespace, or, namespaced false, its cluster-scoped resources; for names whose
// namespace is not their prefix (the Envoy resources derived from a ServiceEntry).
func (g *Grant) MayConsumeNamespace(collection, namespace string, namespaced bool) bool {
	return g.mayIn(collection, namespace, namespaced, func(r rule) scope { return r.consume })
}

func (g *Grant) mayIn(collection, ns string, namespaced bool, of func(rule) scope) bool {
	if g.all {
		return true
	}
	for _, r := range g.rules {
		s := of(r)
		if !s.collections.has(collection) {
			continue
		}
		if s.namespaces.all || namespaced && s.namespaces.has(ns) {
			return true
		}
	}
	return false
}

// ConsumeNamespaces returns, for a collection (canonical), whether the peer may read all of
// it, else the namespaces it may read (sorted; empty: none).
func (g *Grant) ConsumeNamespaces(collection string) (all bool, namespaces []string) {
	if g.all {
		return true, nil
	}
	for _, r := range g.rules {
		if !r.consume.collections.has(collection) {
			continue
		}
		if r.consume.namespaces.all {
			return true, nil
		}
		namespaces = append(namespaces, r.consume.namespaces.names...)
	}
	slices.Sort(namespaces)
	return false, slices.Compact(namespaces)
}

// NamespaceOf is the namespace of a resource name: "namespace/name", or no namespace for a
// cluster-scoped name.
func NamespaceOf(name string) (namespace string, namespaced bool) {
	ns, _, ok := strings.Cut(name, "/")
	return ns, ok
}

// PeerIdentity is the SPIFFE ID (the first spiffe URI SAN) of the peer's client certificate,
// when the TLS stack verified it; empty otherwise, also for a certificate offered but not
// verified (client_auth: request with a certificate of an unknown CA).
func PeerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	return TLSIdentity(&info.State)
}

// TLSIdentity is PeerIdentity of a TLS connection's state (an HTTPS request's r.TLS); empty
// for nil, and for a connection without a verified client certificate.
func TLSIdentity(state *tls.ConnectionState) string {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return ""
	}
	for _, u := range state.VerifiedChains[0][0].URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			return u.String()
		}
	}
	return ""
}

// ErrNotAdmin is the refusal of a debug view to a peer that is no administrator.
var ErrNotAdmin = errors.New("the debug views need an administrator's identity")

// CheckAdmin decides whether an HTTPS peer may read the debug views and the status page:
// without rules, any peer whose client certificate was verified; with rules, a peer that a
// rule with admin: true matches.
func (p *Policy) CheckAdmin(state *tls.ConnectionState) error {
	id := TLSIdentity(state)
	verified := state != nil && len(state.VerifiedChains) > 0
	if !p.Enabled() {
		if !verified {
			return fmt.Errorf("%w: present a client certificate of the HTTP port's client CA", ErrNotAdmin)
		}
		return nil
	}
	g, err := p.Grant(id)
	if err != nil || !g.Admin {
		who := id
		if who == "" {
			who = Unauthenticated
		}
		return fmt.Errorf("%w: no rule with admin: true matches identity %s", ErrNotAdmin, who)
	}
	return nil
}

// ErrNodeIdentity is the refusal of an xDS node that names another namespace than its peer's
// identity.
var ErrNodeIdentity = errors.New("the node's namespace is not its identity's")

// CheckNode holds an xDS node ID of Istio's form, TYPE~IP~POD.NAMESPACE~DOMAIN, to the
// namespace of the peer's SPIFFE ID (spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/ACCOUNT), as
// istiod's identity check does: a proxy may not pass for one of another namespace. A node ID
// of another form, or an identity that names no namespace (not a Kubernetes workload's, or
// none), is not checked: there is nothing to hold it to.
func CheckNode(identity, node string) error {
	parts := strings.Split(node, "~")
	if len(parts) != 4 {
		return nil
	}
	_, nodeNS, ok := strings.Cut(parts[2], ".")
	if !ok {
		return nil
	}
	idNS, ok := spiffeNamespace(identity)
	if !ok || idNS == nodeNS {
		return nil
	}
	return fmt.Errorf("%w: node %q names namespace %q, identity %s is of %q", ErrNodeIdentity, node, nodeNS, identity, idNS)
}

// CheckNodeNamespace holds a namespace a node claims in its metadata (Istio's NAMESPACE, which
// istiod reads before the node ID, and which chooses a sidecar's namespace view) to the
// namespace of the peer's SPIFFE ID, as CheckNode holds the node ID's. An identity that names
// no namespace is not checked.
func CheckNodeNamespace(identity, node, namespace string) error {
	idNS, ok := spiffeNamespace(identity)
	if !ok || idNS == namespace {
		return nil
	}
	return fmt.Errorf("%w: node %q names namespace %q in its metadata (NAMESPACE), identity %s is of %q", ErrNodeIdentity, node, namespace, identity, idNS)
}

// spiffeNamespace reads the namespace of a Kubernetes workload's SPIFFE ID.
func spiffeNamespace(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "spiffe://")
	if !ok {
		return "", false
	}
	_, path, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	segs := strings.Split(path, "/")
	for i := 0; i+1 < len(segs); i++ {
		if segs[i] == "ns" {
			return segs[i+1], segs[i+1] != ""
		}
	}
	return "", false
}
