package authz

import (
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FuzzRulesAgainstModel: rules, identities and names drawn from the input; every decision of
// the compiled policy is the one of a plain reading of the rules: a rule applies when its
// identity is the peer's, a prefix of it ending in "/", or "unauthenticated" for a peer
// without one; it grants its collections (or all with "*") in its namespaces (or all with
// "*"), a cluster-scoped name only with "*".
func FuzzRulesAgainstModel(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "a/x", uint8(1))
	f.Add([]byte{9, 9, 9, 1, 0, 0, 2, 2}, "x", uint8(0))
	f.Add([]byte("rules and more rules"), "b/y", uint8(3))
	ids := []string{"", "spiffe://t/ns/a/sa/x", "spiffe://t/ns/a/sa/y", "spiffe://t/ns/b/sa/x"}
	patterns := []string{Unauthenticated, "spiffe://t/ns/a/sa/x", "spiffe://t/ns/a/*", "spiffe://t/*", "spiffe://t/ns/b/sa/x"}
	colls := []string{"*", seColl, vsColl}
	nss := []string{"*", "a", "b"}
	f.Fuzz(func(t *testing.T, plan []byte, name string, who uint8) {
		next := func() int {
			if len(plan) == 0 {
				return 0
			}
			b := int(plan[0])
			plan = plan[1:]
			return b
		}
		pick := func(from []string) []string {
			var out []string
			for i, s := range from {
				if next()>>i&1 == 1 {
					out = append(out, s)
				}
			}
			return out
		}
		var rules []Rule
		for range next() % 4 {
			r := Rule{Identity: patterns[next()%len(patterns)], Admin: next()%2 == 1}
			r.Produce.Collections, r.Produce.Namespaces = pick(colls), pick(nss)
			r.Consume.Collections, r.Consume.Namespaces = pick(colls), pick(nss)
			if len(r.Produce.Collections) > 0 && len(r.Produce.Namespaces) == 0 {
				r.Produce.Namespaces = []string{"a"}
			}
			if len(r.Consume.Collections) > 0 && len(r.Consume.Namespaces) == 0 {
				r.Consume.Namespaces = []string{"b"}
			}
			rules = append(rules, r)
		}
		p, err := Compile(rules, nil)
		if err != nil {
			t.Fatalf("valid rules refused: %v", err)
		}
		id := ids[int(who)%len(ids)]
		g, err := p.Grant(id)
		var applying []Rule
		for _, r := range rules {
			if modelMatches(r.Identity, id) {
				applying = append(applying, r)
			}
		}
		if len(rules) > 0 && len(applying) == 0 {
			if err == nil {
				t.Fatalf("%q: granted, no rule matches", id)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: refused: %v", id, err)
		}
		for _, coll := range []string{seColl, vsColl} {
			want := len(rules) == 0
			wantAdmin := len(rules) == 0
			for _, r := range applying {
				want = want || modelAllows(r.Consume, coll, name)
				wantAdmin = wantAdmin || r.Admin
			}
			if got := g.MayConsume(coll, name); got != want {
				t.Fatalf("%q consume %s %q: %v, model %v (rules %+v)", id, coll, name, got, want, rules)
			}
			if g.Admin != wantAdmin {
				t.Fatalf("%q admin %v, model %v", id, g.Admin, wantAdmin)
			}
			all, ns := g.ConsumeNamespaces(coll)
			ns0, namespaced := NamespaceOf(name)
			fromList := all || namespaced && slices.Contains(ns, ns0)
			if fromList != g.MayConsume(coll, name) {
				t.Fatalf("%q %s %q: ConsumeNamespaces (%v %v) disagrees with MayConsume", id, coll, name, all, ns)
			}
		}
	})
}

func modelMatches(pattern, id string) bool {
	switch {
	case id == "":
		return pattern == Unauthenticated
	case strings.HasSuffix(pattern, "/*"):
		return strings.HasPrefix(id, strings.TrimSuffix(pattern, "*"))
	}
	return pattern == id
}

func modelAllows(s Scope, coll, name string) bool {
	if !slices.Contains(s.Collections, "*") && !slices.Contains(s.Collections, coll) {
		return false
	}
	if slices.Contains(s.Namespaces, "*") {
		return true
	}
	ns, _, namespaced := strings.Cut(name, "/")
	return namespaced && slices.Contains(s.Namespaces, ns)
}

// FuzzHostCovers: for valid host patterns and hosts (ValidHostPattern), HostCovers agrees with
// a reference reading of Istio's host matching by labels: "*" covers everything; "*.REST"
// covers a host whose last labels are REST's, with at least one label before them (a "*"
// among them included); a name covers only itself; case is ignored.
func FuzzHostCovers(f *testing.F) {
	for _, s := range [][2]string{
		{"*", "a.b"}, {"*.example.com", "a.example.com"}, {"*.example.com", "example.com"},
		{"*.example.com", "*.b.example.com"}, {"*.b.example.com", "*.example.com"},
		{"*.example.com", "evil-example.com"}, {"A.Example.com", "a.example.COM"}, {"*.svc", "*"},
		{"*.payments.svc.cluster.local", "billing.bookinfo.svc.cluster.local"},
	} {
		f.Add(s[0], s[1])
	}
	ref := func(p, h string) bool {
		p, h = strings.ToLower(p), strings.ToLower(h)
		if p == "*" {
			return true
		}
		pl, hl := strings.Split(p, "."), strings.Split(h, ".")
		if pl[0] != "*" {
			return slices.Equal(pl, hl)
		}
		rest := pl[1:]
		if len(hl) < len(rest)+1 {
			return false
		}
		return slices.Equal(hl[len(hl)-len(rest):], rest)
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		if !ValidHostPattern(pattern) || !ValidHostPattern(host) {
			return
		}
		if got, want := HostCovers(pattern, host), ref(pattern, host); got != want {
			t.Fatalf("HostCovers(%q, %q) = %v, the reference says %v", pattern, host, got, want)
		}
	})
}
