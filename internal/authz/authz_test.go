package authz

import (
	"errors"
	"strings"
	"testing"
)

const (
	seColl = "istio/networking/v1alpha3/serviceentries"
	vsColl = "istio/networking/v1alpha3/virtualservices"
)

// canonical stands for the bridge's naming table: the xDS type URL of ServiceEntry is the
// collection.
func canonical(s string) string {
	if s == "networking.istio.io/v1/ServiceEntry" {
		return seColl
	}
	return s
}

func mustCompile(t *testing.T, rules ...Rule) *Policy {
	t.Helper()
	p, err := Compile(rules, canonical)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNoRulesAllowEverything: without rules every peer, identified or not, may do anything.
func TestNoRulesAllowEverything(t *testing.T) {
	for _, p := range []*Policy{nil, mustCompile(t)} {
		g, err := p.Grant("")
		if err != nil || !g.All() || !g.Admin || !g.MayProduce(seColl, "ns/a") || !g.MayConsume(vsColl, "x") {
			t.Fatalf("no rules: %+v, %v", g, err)
		}
	}
}

// TestIdentityMatchesExactlyOrByPrefix: an exact SPIFFE ID, a prefix ending in "/*", and
// "unauthenticated" for peers without a verified identity; a peer no rule matches is refused.
func TestIdentityMatchesExactlyOrByPrefix(t *testing.T) {
	p := mustCompile(t,
		Rule{Identity: "spiffe://example.org/ns/mesh/sa/producer", Produce: Scope{Collections: []string{"*"}, Namespaces: []string{"*"}}},
		Rule{Identity: "spiffe://example.org/ns/apps/*", Consume: Scope{Collections: []string{seColl}, Namespaces: []string{"apps"}}},
		Rule{Identity: Unauthenticated, Consume: Scope{Collections: []string{vsColl}, Namespaces: []string{"public"}}},
	)
	cases := []struct {
		id        string
		ok        bool
		produceSE bool
		consumeSE bool
		consumeVS bool
	}{
		{"spiffe://example.org/ns/mesh/sa/producer", true, true, false, false},
		{"spiffe://example.org/ns/mesh/sa/producer2", false, false, false, false},
		{"spiffe://example.org/ns/apps/sa/web", true, false, true, false},
		{"spiffe://example.org/ns/apps", false, false, false, false}, // the prefix is ".../apps/"
		{"spiffe://other.org/ns/apps/sa/web", false, false, false, false},
		{"", true, false, false, true},
	}
	for _, c := range cases {
		g, err := p.Grant(c.id)
		if (err == nil) != c.ok {
			t.Errorf("%q: err %v, want ok %v", c.id, err, c.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrNoRule) {
				t.Errorf("%q: %v is not ErrNoRule", c.id, err)
			}
			continue
		}
		if got := g.MayProduce(seColl, "apps/a"); got != c.produceSE {
			t.Errorf("%q: produce SE apps/a = %v", c.id, got)
		}
		if got := g.MayConsume(seColl, "apps/a"); got != c.consumeSE {
			t.Errorf("%q: consume SE apps/a = %v", c.id, got)
		}
		if got := g.MayConsume(vsColl, "public/v"); got != c.consumeVS {
			t.Errorf("%q: consume VS public/v = %v", c.id, got)
		}
	}
}

// TestRulesKeepTheirCollectionsWithTheirNamespaces: two rules for one peer grant each its
// collections in its own namespaces, not every collection in every namespace; a
// cluster-scoped name is granted only with "*"; a kind may be named by its xDS type URL.
func TestRulesKeepTheirCollectionsWithTheirNamespaces(t *testing.T) {
	id := "spiffe://example.org/ns/mesh/sa/istiod"
	p := mustCompile(t,
		Rule{Identity: id, Consume: Scope{Collections: []string{"networking.istio.io/v1/ServiceEntry"}, Namespaces: []string{"a"}}},
		Rule{Identity: id, Consume: Scope{Collections: []string{vsColl}, Namespaces: []string{"b"}}},
	)
	g, err := p.Grant(id)
	if err != nil {
		t.Fatal(err)
	}
	if !g.MayConsume(seColl, "a/x") || !g.MayConsume(vsColl, "b/x") {
		t.Error("each rule's own collection in its own namespace is granted")
	}
	if g.MayConsume(seColl, "b/x") || g.MayConsume(vsColl, "a/x") {
		t.Error("a collection of one rule is granted in the namespaces of the other")
	}
	if g.MayConsume(seColl, "cluster-scoped") {
		t.Error("a cluster-scoped name is granted without *")
	}
	if all, ns := g.ConsumeNamespaces(seColl); all || strings.Join(ns, ",") != "a" {
		t.Errorf("namespaces of SE: all %v %v, want a", all, ns)
	}
	if !g.MayConsumeIn(seColl) || g.MayConsumeIn("istio/networking/v1alpha3/gateways") || g.MayProduceIn(seColl) {
		t.Error("MayConsumeIn / MayProduceIn")
	}
}

// TestRuleFaultsNameTheRuleAndField: a bad rule is a configuration error naming its index and
// field.
func TestRuleFaultsNameTheRuleAndField(t *testing.T) {
	for _, c := range []struct {
		rule Rule
		want string
	}{
		{Rule{}, "authz.rules[0].identity: empty"},
		{Rule{Identity: "producer"}, "authz.rules[0].identity: \"producer\" is not a SPIFFE ID"},
		{Rule{Identity: "spiffe://x/*/sa"}, "authz.rules[0].identity"},
		{Rule{Identity: "spiffe://x/a", Produce: Scope{Collections: []string{"*"}}}, "authz.rules[0].produce.namespaces: empty"},
		{Rule{Identity: "spiffe://x/a", Consume: Scope{Collections: []string{"a*"}, Namespaces: []string{"*"}}}, "authz.rules[0].consume.collections"},
		{Rule{Identity: "spiffe://x/a", Consume: Scope{Collections: []string{"*"}, Namespaces: []string{""}}}, "authz.rules[0].consume.namespaces"},
	} {
		_, err := Compile([]Rule{c.rule}, canonical)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want mention of %q", c.rule, err, c.want)
		}
	}
}

// TestNodeMustNameItsIdentitysNamespace: an Istio node ID names a namespace that must be the
// one of the peer's Kubernetes SPIFFE ID; other node IDs and identities are not checked.
func TestNodeMustNameItsIdentitysNamespace(t *testing.T) {
	id := "spiffe://cluster.local/ns/shop/sa/web"
	for node, ok := range map[string]bool{
		"sidecar~10.0.0.1~web-1.shop~shop.svc.cluster.local": true,
		"sidecar~10.0.0.1~web-1.bank~bank.svc.cluster.local": false,
		"router~10.0.0.2~gw-1.shop~shop.svc.cluster.local":   true,
		"istiod-1": true,
		"sidecar~10.0.0.1~no-namespace~shop.svc.cluster.local": true,
	} {
		err := CheckNode(id, node)
		if (err == nil) != ok {
			t.Errorf("%s: %v, want ok %v", node, err, ok)
		}
		if err != nil && !errors.Is(err, ErrNodeIdentity) {
			t.Errorf("%s: %v is not ErrNodeIdentity", node, err)
		}
	}
	if err := CheckNode("", "sidecar~10.0.0.1~web-1.bank~bank.svc.cluster.local"); err != nil {
		t.Errorf("no identity to hold the node to: %v", err)
	}
	if err := CheckNode("spiffe://example.org/producer", "sidecar~10.0.0.1~web-1.bank~x"); err != nil {
		t.Errorf("an identity without a namespace: %v", err)
	}
}

// TestHostsBelongToNamespaces: a rule's produce hosts default to its namespaces' service
// domains (with and without the suffix), "*" namespaces allow any host, explicit hosts
// replace the default, and an upstream's scope allows any host unless it names some.
func TestHostsBelongToNamespaces(t *testing.T) {
	const id, suffix = "spiffe://t/ns/payments/sa/p", "cluster.local"
	p := mustCompile(t,
		Rule{Identity: id, Produce: Scope{Collections: []string{seColl}, Namespaces: []string{"payments", "billing"}}},
		Rule{Identity: id, Produce: Scope{Collections: []string{vsColl}, Namespaces: []string{"payments"}, Hosts: []string{"api.payments.example.com", "*.pay.example.com"}}},
		Rule{Identity: "spiffe://t/ops", Produce: Scope{Collections: []string{seColl}, Namespaces: []string{"*"}}},
	)
	g, _ := p.Grant(id)
	ops, _ := p.Grant("spiffe://t/ops")
	for _, c := range []struct {
		g        *Grant
		coll, ns string
		host     string
		want     bool
	}{
		{g, seColl, "payments", "ledger.payments.svc.cluster.local", true},
		{g, seColl, "payments", "ledger.payments.svc", true},
		{g, seColl, "payments", "*.payments.svc.cluster.local", true},
		{g, seColl, "payments", "ledger.billing.svc.cluster.local", true}, // the rule's other namespace
		{g, seColl, "payments", "billing.bookinfo.svc.cluster.local", false},
		{g, seColl, "payments", "payments.svc.cluster.local", false},
		{g, seColl, "payments", "*.svc.cluster.local", false},
		{g, seColl, "payments", "api.example.com", false},
		{g, seColl, "payments", "*", false},
		{g, seColl, "bookinfo", "ledger.payments.svc.cluster.local", false}, // not its namespace at all
		{g, vsColl, "payments", "api.payments.example.com", true},
		{g, vsColl, "payments", "a.b.pay.example.com", true},
		{g, vsColl, "payments", "ledger.payments.svc.cluster.local", false}, // explicit hosts replace the default
		{ops, seColl, "anything", "api.example.com", true},
		{ops, seColl, "anything", "*", true},
	} {
		if got := c.g.MayProduceHost(c.coll, c.ns, true, c.host, suffix); got != c.want {
			t.Errorf("%s in %s, host %s: %v, want %v", c.g.Identity, c.ns, c.host, got, c.want)
		}
	}
	if got := g.HostsAllowed(seColl, "payments", true, suffix); got != "*.billing.svc, *.billing.svc.cluster.local, *.payments.svc, *.payments.svc.cluster.local" {
		t.Errorf("HostsAllowed: %q", got)
	}
	up, err := ScopeGrant("upstream", Scope{Collections: []string{seColl}, Namespaces: []string{"payments"}}, canonical)
	if err != nil || !up.MayProduceHost(seColl, "payments", true, "api.example.com", suffix) {
		t.Errorf("an upstream's scope without hosts: %v", err)
	}
	for _, bad := range []Rule{
		{Identity: id, Produce: Scope{Collections: []string{seColl}, Namespaces: []string{"a"}, Hosts: []string{"a.*.com"}}},
		{Identity: id, Produce: Scope{Collections: []string{seColl}, Namespaces: []string{"a"}, Hosts: []string{""}}},
		{Identity: id, Consume: Scope{Collections: []string{seColl}, Namespaces: []string{"a"}, Hosts: []string{"*"}}},
	} {
		if _, err := Compile([]Rule{bad}, canonical); err == nil || !strings.Contains(err.Error(), "hosts") {
			t.Errorf("rule %+v: %v, want an error naming hosts", bad, err)
		}
	}
}
