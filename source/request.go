package source

import (
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/internal/wire"
)

// Mode is the response style of a subscription.
type Mode int

const (
	// StateOfTheWorld responses carry every subscribed resource, every time.
	StateOfTheWorld Mode = iota
	// Incremental responses carry what changed and the names removed.
	Incremental
)

func (m Mode) String() string {
	if m == Incremental {
		return "incremental"
	}
	return "state-of-the-world"
}

// Wildcard is the resource name by which a client asks for every resource of a type.
const Wildcard = "*"

// Request is one wire request for one type, in the engine's terms: what the client said, and
// nothing of how the type is served (that is its Type, resolved once per stream). Adapters
// build it.
type Request struct {
	// Key is the client's name for the type (collection, alias or type URL); responses echo it.
	Key string
	// Names is the whole subscription of a state-of-the-world request.
	Names []string
	// Subscribe and Unsubscribe change an incremental subscription.
	Subscribe, Unsubscribe []string
	// InitialVersions are the versions a reconnecting incremental client holds.
	InitialVersions map[string]string
	// Nonce is the response_nonce: set, it ACKs (or with ErrorDetail NACKs) that response.
	Nonce       string
	ErrorDetail *rpcstatus.Status
	// Restart makes a request without a nonce start the subscription over (MCP: a new
	// RequestResources for a collection already subscribed).
	Restart bool
	// Incremental: the client asks for increments where its protocol says so per request
	// (MCP's RequestResources); the request that starts a subscription decides its Type.
	Incremental bool
	// Node is what the request says of its client; nil when it names none. A stream's node is
	// fixed by the first request that names one: a request naming another ends the stream.
	Node *Node
}

// Node is what a client says of itself.
type Node struct {
	// ID identifies the client (xDS node id, MCP sink node id), for debugging, the node
	// identity check and the views by node kind (Type.Scope).
	ID string
	// Labels are the client's workload labels (xDS: metadata LABELS).
	Labels map[string]string
	// Namespaces narrow the client's view to these namespaces (sorted), from its node
	// metadata (NodeNamespacesKey, ParseNodeNamespaces); nil: no narrowing.
	Namespaces []string
	// Metadata (xDS: node.metadata) or Annotations (MCP: sink_node.annotations) describe the
	// node to the status view (CSDS), whose node matchers read them; as sent (no copy).
	Metadata    *structpb.Struct
	Annotations map[string]string
	// Features are the client's announced features (xDS: client_features), which decide
	// whether it takes TTLs (Adapter.Type).
	Features []string
	// Generator is the configuration generator the client asks for (xDS: metadata GENERATOR,
	// "grpc" for a proxyless gRPC client as Istio's bootstrap writes it), which decides the
	// form of what it is served (Adapter.Type); kept for the stream, unlike Metadata.
	Generator string
	// VirtualHostsOnDemand: the client takes its route configurations' virtual hosts from
	// VHDS (xDS: metadata MCPBRIDGE_VHDS "true"), which decides the names its requests ask
	// for and its responses carry (the xDS adapter reads it from the request that first
	// names the node).
	VirtualHostsOnDemand bool
}

// Type is how one type is served on one stream. The adapter resolves it (Adapter.Type) when
// the client first subscribes to the type, from the client's name for it and the stream's
// node; it never changes for the subscription, whatever later requests say.
type Type struct {
	// Collection is the store collection behind the client's name for the type.
	Collection string
	// Known is false when neither the naming table nor the store knows the type: it is served
	// as an empty collection, and logged.
	Known bool
	Mode  Mode
	Form  wire.Form
	// Priority orders the responses due at once on one stream: lower first.
	Priority int
	// After lists the types (keys) on the same stream whose additions must reach the client
	// before a response of this type: a response made at store revision r waits until each of
	// them has been sent everything up to r. RemoveAfter lists those that must be caught up to
	// the revision of a deletion before the deletion is sent (they stop referring to it
	// first). The owner of the types declares them (translate.EnvoyOrder for Envoy's).
	After, RemoveAfter []string
	// AfterSameNames: each resource of this type refers only to the resource of the same name
	// of each type in After (a load assignment to its cluster). While one of those types is
	// sending a response in parts, a response of this type that carries only names its parts
	// have already sent may go (see machine.sentBelow).
	AfterSameNames bool
	// WildcardCapable types (LDS, CDS, MCP collections) enter wildcard mode when the first
	// request names nothing (a wildcard that stays, as xds-protocol.rst says) or a request
	// names "*" (which a later request can take back).
	WildcardCapable bool
	// FullOnLoss: the protocol can send a full state in place of an increment (MCP).
	FullOnLoss bool
	// PartialStateOfTheWorld lets a state-of-the-world response to explicit names carry only
	// what changed. xDS groups every type but listeners and clusters this way (endpoints,
	// routes); listeners, clusters and MCP collections are always sent whole.
	PartialStateOfTheWorld bool
	// Splittable: an incremental response larger than Options.MaxResponseSize may be split
	// into several, sent one after another as the client answers each (xds-protocol.rst,
	// "Grouping Resources into Responses": in the incremental variants a response carries any
	// subset of the resources, and the client keeps the others). A state-of-the-world
	// response is never split: it would replace the client's state with a part.
	Splittable bool
	// Scope, if set, narrows a wildcard subscription to the part of the type meant for this
	// client, from its node (xDS: a sidecar's listeners are not a gateway's, and a gateway's
	// are its class's). view names the part, so that clients of one kind share responses;
	// include nil means everything.
	Scope func(node Node) (view string, include func(name string) bool)
	// TTL, when positive, is set on every resource the subscription sends, and the stream
	// heartbeats what the client holds every TTL/2 while the resource's producer is
	// connected (heartbeat.go). The adapter sets it only for clients that announce TTL
	// support (xds-protocol.rst, "TTL").
	TTL time.Duration
	// Wrap writes a state-of-the-world response's resources in the Resource wrapper, which
	// carries the TTL ("SotW TTL": clients announcing they unwrap it).
	Wrap bool
	// Namespaced: each name asked for is also a namespace, which asks for every resource
	// named NAME/REST, REST without a '/', besides the resource named NAME (Envoy's VHDS: a
	// route configuration's virtual hosts, ROUTE/HOST, asked for by ROUTE; Envoy matches
	// resources to such names from the right, as its namespace matching does). A name that
	// has neither is missing, and a missing name is told with itself as its alias (VHDS: an
	// on-demand request ROUTE/HOST for a host nobody serves is answered by alias).
	Namespaced bool
}

// Adapter is one wire protocol on one stream.
type Adapter interface {
	// Recv blocks for the next request; nil, nil is a message that asks nothing. It must
	// return when the stream ends.
	Recv() (*Request, error)
	// Send sends one encoded response.
	Send(*wire.Frame) error
	// Layout is where this protocol's response message keeps each part.
	Layout() *wire.Layout
	// Type is how the type a request names (Request.Key) is served to the client, given the
	// stream's node (nil when no request named one yet). The engine asks once per
	// subscription, with the request that starts it.
	Type(req *Request, node *Node) Type
}
