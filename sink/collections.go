package sink

import (
	"fmt"
	"maps"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/kinds"
)

// Collection is one collection the bridge asks a producer for.
type Collection struct {
	// Name is the collection as the bridge names it in its requests: canonical, alias or
	// opaque (a name the naming table does not know, stored as it is).
	Name string
	// Incremental asks the producer for incremental updates. The producer may still send a
	// full state; but without it, an incremental Resources is refused, because the bridge
	// could not tell what the producer no longer holds.
	Incremental bool
}

// DefaultCollections is what the bridge asks for when it is not configured otherwise: the
// canonical collection of every known kind, incremental.
func DefaultCollections() []Collection {
	names := kinds.DefaultCollections()
	out := make([]Collection, len(names))
	for i, n := range names {
		out[i] = Collection{Name: n, Incremental: true}
	}
	return out
}

// SinkNode is how the bridge introduces itself in its requests (the sink_node field).
type SinkNode struct {
	ID          string
	Annotations map[string]string
}

func (n SinkNode) proto() *mcp.SinkNode {
	if n.ID == "" && len(n.Annotations) == 0 {
		return nil
	}
	return &mcp.SinkNode{Id: n.ID, Annotations: maps.Clone(n.Annotations)}
}

// asked is the set of collections the bridge asks for, keyed by canonical collection so that
// a producer may answer under any name of the kind.
type asked struct {
	list        []Collection // as configured, for the requests
	byCanonical map[string]Collection
}

// newAsked checks a configured list. Empty means DefaultCollections. Two names of one kind
// are refused: the bridge would ask twice for the same resources, with perhaps different modes.
func newAsked(colls []Collection) (asked, error) {
	if len(colls) == 0 {
		colls = DefaultCollections()
	}
	a := asked{list: make([]Collection, 0, len(colls)), byCanonical: make(map[string]Collection, len(colls))}
	firstIndex := map[string]int{}
	for i, c := range colls {
		switch {
		case c.Name == "":
			return asked{}, fmt.Errorf("collections[%d]: name is empty", i)
		case c.Name == mcp.TriggerCollection:
			return asked{}, fmt.Errorf("collections[%d]: %q is reserved for opening ResourceSink streams", i, c.Name)
		}
		canonical := kinds.CanonicalCollection(c.Name)
		if j, dup := firstIndex[canonical]; dup {
			return asked{}, fmt.Errorf("collections[%d]: %q is the same collection as collections[%d] %q (%s)",
				i, c.Name, j, colls[j].Name, canonical)
		}
		firstIndex[canonical] = i
		a.list = append(a.list, c)
		a.byCanonical[canonical] = c
	}
	return a, nil
}

// lookup returns the configured collection behind a name the producer used, and its
// canonical name.
func (a asked) lookup(name string) (Collection, string, bool) {
	canonical := kinds.CanonicalCollection(name)
	c, ok := a.byCanonical[canonical]
	return c, canonical, ok
}
