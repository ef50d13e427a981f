package source

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// The test world of the machine's own tests (machine_test.go): clusters C, endpoints E,
// listeners L, routes R (as translate.EnvoyOrder orders them) and an independent M; a
// resource's body names the clusters it refers to. (The model of the engine, which shares no
// code with it, is model_*_test.go.)

// worldType is one type of the test world.
type worldType struct {
	key             string
	wildcardCapable bool
	partial         bool // state of the world sends only what changed (endpoints, routes)
	after, remove   []string
	priority        int
	universe        []string
}

var worldTypes = []worldType{
	{key: "C", wildcardCapable: true, remove: []string{"L", "R"}, priority: 0, universe: []string{"c0", "c1", "c2", "c3"}},
	{key: "E", partial: true, after: []string{"C"}, priority: 1, universe: []string{"c0", "c1", "c2", "c3"}},
	{key: "L", wildcardCapable: true, after: []string{"C", "E"}, priority: 2, universe: []string{"l0", "l1"}},
	{key: "R", partial: true, after: []string{"C", "E", "L"}, priority: 3, universe: []string{"r0", "r1", "r2"}},
	{key: "M", wildcardCapable: true, priority: 5, universe: []string{"m0", "m1", "m2"}},
}

func worldTypeOf(key string) worldType {
	for _, t := range worldTypes {
		if t.key == key {
			return t
		}
	}
	panic(key)
}

// refsOf reads the names a test resource refers to (clusters, for routes, listeners and
// endpoints).
func refsOf(e *store.Entry) []string {
	_, body := e.Body()
	v := string(body)
	_, refs, _ := strings.Cut(v, "|")
	if refs == "" {
		return nil
	}
	return strings.Split(refs, ",")
}

func worldResource(name string, gen int, refs []string) *mcpapi.Resource {
	return &mcpapi.Resource{
		Metadata: &mcpapi.Metadata{Name: name},
		Body:     &anypb.Any{TypeUrl: "type.test/ref", Value: fmt.Appendf(nil, "%d|%s", gen, strings.Join(refs, ","))},
	}
}

func entriesOf(v *store.View, coll string) []*store.Entry {
	_, es := v.Snapshot(coll)
	return es
}

func names(es []*store.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// clientResponse is one response as the client reads it.
type clientResponse struct {
	key, nonce, version string
	resources           []receivedResource
	removed, missing    []string
	errors              []wire.ResourceError
	full                bool // MCP: a full state (incremental false), which replaces
	share               *frameKey
	heartbeat           bool // a TTL heartbeat: renews what the client holds, changes nothing
}

type receivedResource struct {
	name, version string
	refs          []string
}

func (r clientResponse) names() []string {
	out := make([]string, len(r.resources))
	for i, e := range r.resources {
		out[i] = e.name
	}
	return out
}

func (r clientResponse) String() string {
	return fmt.Sprintf("type %s nonce %s resources %v removed %v missing %v", r.key, r.nonce, r.names(), r.removed, r.missing)
}

func fromOutgoing(r outgoing) clientResponse {
	r.p.materialize()
	got := clientResponse{key: r.sub.key, nonce: r.nonce, version: r.p.msg.Version, removed: r.p.msg.Removed, share: r.p.share,
		full: !r.p.msg.Incremental, errors: r.p.msg.Errors, heartbeat: r.p.heartbeat}
	if r.sub.Mode == Incremental { // only delta tells of missing names
		got.missing = r.p.msg.Missing
	}
	for _, e := range r.p.msg.Resources {
		got.resources = append(got.resources, receivedResource{e.Name, e.Version, refsOf(e)})
	}
	return got
}

func describe(r outgoing) string { return fromOutgoing(r).String() }
