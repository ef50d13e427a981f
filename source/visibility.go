package source

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// NamespaceFunc is the namespace of a resource of a collection: the namespace a consumer must
// be allowed to read to see it, or namespaced false for a cluster-scoped one.
type NamespaceFunc func(collection, name string) (namespace string, namespaced bool)

// namespaceByName is the default NamespaceFunc: Istio's "namespace/name".
func namespaceByName(_, name string) (string, bool) { return authz.NamespaceOf(name) }

// visibility is what of one type a consumer may see: the resources of some namespaces (or of
// all) and, or not, the cluster-scoped ones; or nothing, when the type is refused. It is
// decided when the subscription starts, from the peer's grant and its node's own narrowing,
// and never changes. A nil *visibility sees everything: without rules the engine pays
// nothing for it.
//
// A resource's namespace is a function of its collection and name alone, so a name never
// moves into or out of a view: a view filters what changed, and a client is never left
// holding a resource it may no longer see.
type visibility struct {
	// id names the view: streams whose subscriptions have the same id, type and names share
	// encoded responses. Empty only for the nil visibility.
	id            string
	allNamespaces bool
	namespaces    []string // sorted, when not allNamespaces
	clusterScoped bool
	namespaceOf   func(name string) (string, bool)
	// denial, when set, refuses the type: nothing is visible, and xDS responses carry it as
	// a resource error.
	denial *wire.ResourceError
}

// sees tells whether the consumer may see a resource of this name.
func (v *visibility) sees(name string) bool {
	if v == nil {
		return true
	}
	if v.denial != nil {
		return false
	}
	ns, namespaced := v.namespaceOf(name)
	if !namespaced {
		return v.clusterScoped
	}
	if v.allNamespaces {
		return true
	}
	_, ok := slices.BinarySearch(v.namespaces, ns)
	return ok
}

// errors are the resource errors a response of a refused type carries: one for the whole
// type ("*"), and one for each name asked, so that a client that reads errors by name finds
// its own.
func (v *visibility) errors(names []string) []wire.ResourceError {
	if v == nil || v.denial == nil {
		return nil
	}
	out := make([]wire.ResourceError, 0, len(names)+1)
	out = append(out, *v.denial)
	for _, n := range names {
		e := *v.denial
		e.Name = n
		out = append(out, e)
	}
	return out
}

// access is what one stream's peer may read: its grant and its node's narrowing. It is pure
// state, its machine its only user.
type access struct {
	grant       *authz.Grant // nil: no rules
	namespaceOf NamespaceFunc
	// node narrows namespaced resources to these namespaces (sorted), when set: the node
	// asked for less than it may read (NodeNamespacesKey).
	node []string
	// byCollection interns each collection's visibility for the stream.
	byCollection map[string]*visibility
}

// checkNode checks the stream's node, once, when a request first names it: against the
// peer's identity (an error wrapping authz.ErrNodeIdentity), and reads its narrowing.
func (a *access) checkNode(n *Node) error {
	if a.grant != nil {
		if err := authz.CheckNode(a.grant.Identity, n.ID); err != nil {
			return err
		}
		// Istio's node metadata NAMESPACE names the proxy's namespace too (istiod reads it
		// first, and so does the bridge's choice of a sidecar's namespace view).
		if ns := n.Metadata.GetFields()["NAMESPACE"].GetStringValue(); ns != "" {
			if err := authz.CheckNodeNamespace(a.grant.Identity, n.ID, ns); err != nil {
				return err
			}
		}
	}
	a.node = n.Namespaces
	return nil
}

// visibility returns the view of a collection for this stream, nil when it sees everything.
// A layered collection's rights are its base's (store.Layered).
func (a *access) visibility(collection string) *visibility {
	if a.grant == nil && a.node == nil {
		return nil
	}
	collection = store.BaseCollection(collection)
	if v, ok := a.byCollection[collection]; ok {
		return v
	}
	v := a.decide(collection)
	if a.byCollection == nil {
		a.byCollection = map[string]*visibility{}
	}
	a.byCollection[collection] = v
	return v
}

func (a *access) decide(collection string) *visibility {
	nsOf := func(name string) (string, bool) { return a.namespaceOf(collection, name) }
	if a.grant != nil && !a.grant.MayConsumeIn(collection) {
		msg := fmt.Sprintf("identity %s may not consume %s", a.grant.Identity, collection)
		return &visibility{id: "denied\x00" + a.grant.Identity, namespaceOf: nsOf,
			denial: &wire.ResourceError{Name: Wildcard, Code: int32(codes.PermissionDenied), Message: msg}}
	}
	v := &visibility{allNamespaces: true, clusterScoped: true, namespaceOf: nsOf}
	if a.grant != nil {
		all, namespaces := a.grant.ConsumeNamespaces(collection)
		if !all {
			v.allNamespaces, v.clusterScoped, v.namespaces = false, false, namespaces
		}
	}
	if a.node != nil {
		if v.allNamespaces {
			v.allNamespaces, v.namespaces = false, a.node
		} else {
			v.namespaces = intersect(v.namespaces, a.node)
		}
	}
	if v.allNamespaces && v.clusterScoped {
		return nil
	}
	v.id = viewID(v)
	return v
}

// viewID names a view by what it shows, so that consumers of different identities with the
// same rights share responses.
func viewID(v *visibility) string {
	var b strings.Builder
	if v.clusterScoped {
		b.WriteString("cluster;")
	}
	if v.allNamespaces {
		b.WriteString("*")
	} else {
		b.WriteString("ns=")
		b.WriteString(strings.Join(v.namespaces, ","))
	}
	return b.String()
}

// intersect returns the names in both sorted lists.
func intersect(a, b []string) []string {
	out := []string{}
	for _, n := range a {
		if _, ok := slices.BinarySearch(b, n); ok {
			out = append(out, n)
		}
	}
	return out
}

// NodeNamespacesKey is the node metadata key (xDS node.metadata, MCP sink_node.annotations)
// by which a client narrows its own view to some namespaces: a comma-separated list. It
// narrows namespaced resources only, and only within what the client may read.
const NodeNamespacesKey = "MCPBRIDGE_NAMESPACES"

// ParseNodeNamespaces reads NodeNamespacesKey's value: the namespaces, sorted, or nil when
// the value is empty (no narrowing).
func ParseNodeNamespaces(value string) []string {
	var out []string
	for _, n := range strings.Split(value, ",") {
		switch n = strings.TrimSpace(n); n {
		case "":
		case authz.All:
			return nil // every namespace: no narrowing
		default:
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}
