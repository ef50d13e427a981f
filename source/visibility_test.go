package source

import (
	"slices"
	"strings"
	"testing"

	"github.com/mcpbridge/mcpbridge/internal/authz"
)

// plainSees is what a consumer may see, said plainly: the rules' collections and namespaces
// (comma-separated; "*" for all), the node's narrowing (empty: none), and "namespace/name"
// names, a name without "/" being cluster-scoped.
func plainSees(ruleColls, ruleNS, node, collection, name string) bool {
	colls, nss := strings.Split(ruleColls, ","), strings.Split(ruleNS, ",")
	if !slices.Contains(colls, "*") && !slices.Contains(colls, collection) {
		return false
	}
	ns, _, namespaced := strings.Cut(name, "/")
	if !namespaced {
		return slices.Contains(nss, "*")
	}
	if !slices.Contains(nss, "*") && !slices.Contains(nss, ns) {
		return false
	}
	narrow := ParseNodeNamespaces(node)
	return narrow == nil || slices.Contains(narrow, ns)
}

// FuzzVisibilityAgainstModel holds the view a stream computes from a grant and its node's
// narrowing to plainSees, for any rule, node metadata and resource name.
func FuzzVisibilityAgainstModel(f *testing.F) {
	f.Add("c1", "a", "", "c1", "a/x")
	f.Add("*", "a,b", "b", "c2", "a/x")
	f.Add("c1,c2", "*", "a, c", "c2", "c/y")
	f.Add("*", "*", "", "c1", "cluster-scoped")
	f.Add("c1", "a", "*", "c1", "a/x")
	f.Fuzz(func(t *testing.T, ruleColls, ruleNS, node, collection, name string) {
		p, err := authz.Compile([]authz.Rule{{Identity: authz.Unauthenticated,
			Consume: authz.Scope{Collections: strings.Split(ruleColls, ","), Namespaces: strings.Split(ruleNS, ",")}}}, nil)
		if err != nil {
			return // a rule the configuration refuses
		}
		g, err := p.Grant("")
		if err != nil {
			t.Fatal(err)
		}
		a := access{grant: g, namespaceOf: namespaceByName}
		if err := a.checkNode(&Node{ID: "n", Namespaces: ParseNodeNamespaces(node)}); err != nil {
			t.Fatal(err)
		}
		vis := a.visibility(collection)
		want := plainSees(ruleColls, ruleNS, node, collection, name)
		if got := vis.sees(name); got != want {
			t.Fatalf("rule %q in %q, node %q: sees %s %q = %v, want %v", ruleColls, ruleNS, node, collection, name, got, want)
		}
		if denied := vis != nil && vis.denial != nil; denied == plainSees(ruleColls, "*", "", collection, "ns/any") {
			t.Fatalf("rule %q: %s denied = %v", ruleColls, collection, denied)
		}
	})
}

// Streams with the same rights share a view name, whoever they are; different rights never do.
func TestViewNamesAreTheRightsNotTheIdentity(t *testing.T) {
	p, err := authz.Compile([]authz.Rule{
		{Identity: "spiffe://e.org/a", Consume: authz.Scope{Collections: []string{"c"}, Namespaces: []string{"x", "y"}}},
		{Identity: "spiffe://e.org/b", Consume: authz.Scope{Collections: []string{"c"}, Namespaces: []string{"y", "x"}}},
		{Identity: "spiffe://e.org/c", Consume: authz.Scope{Collections: []string{"c"}, Namespaces: []string{"x"}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	view := func(id string, node []string) *visibility {
		g, err := p.Grant(id)
		if err != nil {
			t.Fatal(err)
		}
		a := access{grant: g, namespaceOf: namespaceByName}
		if err := a.checkNode(&Node{ID: "n", Namespaces: node}); err != nil {
			t.Fatal(err)
		}
		return a.visibility("c")
	}
	a, b, c := view("spiffe://e.org/a", nil), view("spiffe://e.org/b", nil), view("spiffe://e.org/c", nil)
	if a.id != b.id || a.id == c.id {
		t.Fatalf("view names: a %q, b %q, c %q; want a = b != c", a.id, b.id, c.id)
	}
	if narrowed := view("spiffe://e.org/a", []string{"x"}); narrowed.id != c.id {
		t.Fatalf("a narrowed to x: %q, want c's %q", narrowed.id, c.id)
	}
}
