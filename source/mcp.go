package source

import (
	"google.golang.org/grpc"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/rpcpeer"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
)

// Protocol names, as logs, metrics and the debug endpoint show them.
const (
	ProtocolResourceSource = "mcp-resource-source"
	ProtocolDownstream     = "mcp-downstream"
	ProtocolAMCS           = "mcp-amcs"
	ProtocolAMCSIncr       = "mcp-amcs-incremental"
)

// Layouts of the MCP response messages.
var (
	resourcesLayout = wire.NewLayout(&mcp.Resources{}, wire.Roles{
		Version: "system_version_info", Resources: "resources", Key: "collection",
		Removed: "removed_resources", Nonce: "nonce", Incremental: "incremental",
	})
	meshConfigLayout = wire.NewLayout(&mcp.MeshConfigResponse{}, wire.Roles{
		Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce",
	})
	incrementalMeshConfigLayout = wire.NewLayout(&mcp.IncrementalMeshConfigResponse{}, wire.Roles{
		Version: "system_version_info", Resources: "resources", Removed: "removed_resources", Nonce: "nonce",
	})
)

// resolveCollection maps an MCP collection (canonical, alias or opaque) to the store's.
func resolveCollection(name string) (collection string, known bool) {
	if k, ok := kinds.ByCollection(name); ok {
		return k.Collection, true
	}
	return name, false
}

// resolveAMCSType maps an AggregatedMeshConfigService type URL to the store's collection; an
// unknown type URL is an opaque collection of that name.
func resolveAMCSType(typeURL string) (collection string, known bool) {
	if k, ok := kinds.ByAMCSTypeURL(typeURL); ok {
		return k.Collection, true
	}
	return typeURL, false
}

// sinkNode is what an MCP request says of its sink: nil when it names none.
func sinkNode(n *mcp.SinkNode) *Node {
	if n.GetId() == "" {
		return nil
	}
	return &Node{ID: n.GetId(), Namespaces: ParseNodeNamespaces(n.GetAnnotations()[NodeNamespacesKey]), Annotations: n.GetAnnotations()}
}

// mcpType is how MCP serves a collection: whole (a wildcard that stays), in the store's MCP
// resources, incremental when the sink asks for it, a full state when changes were compacted
// away; nothing is ordered across collections.
func mcpType(collection string, known bool, mode Mode) Type {
	return Type{Collection: collection, Known: known, Mode: mode, Form: wire.FormMCPResource, WildcardCapable: true, FullOnLoss: true}
}

// requestResources turns an MCP RequestResources into an engine request. MCP subscribes to
// whole collections; a request without a nonce (re)starts the collection's subscription.
func requestResources(m *mcp.RequestResources) *Request {
	req := &Request{
		Key: m.GetCollection(), Nonce: m.GetResponseNonce(), ErrorDetail: m.GetErrorDetail(),
		Restart: m.GetResponseNonce() == "", Node: sinkNode(m.GetSinkNode()), Incremental: m.GetIncremental(),
	}
	if m.GetIncremental() && len(m.GetInitialResourceVersions()) > 0 {
		req.InitialVersions = m.GetInitialResourceVersions()
	}
	return req
}

// resourcesStream adapts either direction of an MCP resource stream: the ResourceSource
// service (a sink dialled us) and a downstream ResourceSink we dialled. Both carry
// RequestResources in and Resources out.
type resourcesStream struct {
	recv func() (*mcp.RequestResources, error)
	send func(any) error
}

func (a *resourcesStream) Recv() (*Request, error) {
	m, err := a.recv()
	if err != nil {
		return nil, err
	}
	if m.GetCollection() == mcp.TriggerCollection {
		return nil, nil // the sink's answer to our trigger, not a subscription
	}
	return requestResources(m), nil
}

func (a *resourcesStream) Send(f *wire.Frame) error { return a.send(f) }
func (a *resourcesStream) Layout() *wire.Layout     { return resourcesLayout }

// Type: the sink says in the request that starts a subscription whether it wants increments.
func (a *resourcesStream) Type(req *Request, _ *Node) Type {
	coll, known := resolveCollection(req.Key)
	mode := StateOfTheWorld
	if req.Incremental {
		mode = Incremental
	}
	return mcpType(coll, known, mode)
}

// ResourceSource is the istio.mcp.v1alpha1.ResourceSource service: sinks dial in and subscribe.
type ResourceSource struct {
	mcp.UnimplementedResourceSourceServer
	Engine *Engine
}

func (s *ResourceSource) EstablishResourceStream(stream grpc.BidiStreamingServer[mcp.RequestResources, mcp.Resources]) error {
	a := &resourcesStream{recv: stream.Recv, send: stream.SendMsg}
	return s.Engine.Serve(stream.Context(), a, ProtocolResourceSource, rpcpeer.Addr(stream.Context()))
}

// AggregatedMeshConfig is the istio.mcp.v1alpha1.AggregatedMeshConfigService: the older MCP
// generation, multiplexed by type URL, state of the world and incremental.
type AggregatedMeshConfig struct {
	mcp.UnimplementedAggregatedMeshConfigServiceServer
	Engine *Engine
}

func (s *AggregatedMeshConfig) StreamAggregatedResources(stream grpc.BidiStreamingServer[mcp.MeshConfigRequest, mcp.MeshConfigResponse]) error {
	a := &meshConfigStream{stream: stream}
	return s.Engine.Serve(stream.Context(), a, ProtocolAMCS, rpcpeer.Addr(stream.Context()))
}

func (s *AggregatedMeshConfig) IncrementalAggregatedResources(stream grpc.BidiStreamingServer[mcp.IncrementalMeshConfigRequest, mcp.IncrementalMeshConfigResponse]) error {
	a := &incrementalMeshConfigStream{stream: stream}
	return s.Engine.Serve(stream.Context(), a, ProtocolAMCSIncr, rpcpeer.Addr(stream.Context()))
}

type meshConfigStream struct {
	stream grpc.BidiStreamingServer[mcp.MeshConfigRequest, mcp.MeshConfigResponse]
}

func (a *meshConfigStream) Recv() (*Request, error) {
	m, err := a.stream.Recv()
	if err != nil {
		return nil, err
	}
	return &Request{
		Key: m.GetTypeUrl(), Nonce: m.GetResponseNonce(), ErrorDetail: m.GetErrorDetail(),
		Node: sinkNode(m.GetSinkNode()),
	}, nil
}

func (a *meshConfigStream) Send(f *wire.Frame) error { return a.stream.SendMsg(f) }
func (a *meshConfigStream) Layout() *wire.Layout     { return meshConfigLayout }

// Type: a collection by its type URL, whole, as the wildcard-capable MCP-over-xDS types are.
func (a *meshConfigStream) Type(req *Request, _ *Node) Type {
	coll, known := resolveAMCSType(req.Key)
	return Type{Collection: coll, Known: known, Mode: StateOfTheWorld, Form: wire.FormMCPResource, WildcardCapable: true}
}

type incrementalMeshConfigStream struct {
	stream grpc.BidiStreamingServer[mcp.IncrementalMeshConfigRequest, mcp.IncrementalMeshConfigResponse]
}

func (a *incrementalMeshConfigStream) Recv() (*Request, error) {
	m, err := a.stream.Recv()
	if err != nil {
		return nil, err
	}
	req := &Request{
		Key: m.GetTypeUrl(), Nonce: m.GetResponseNonce(), ErrorDetail: m.GetErrorDetail(), Node: sinkNode(m.GetSinkNode()),
	}
	if len(m.GetInitialResourceVersions()) > 0 {
		req.InitialVersions = m.GetInitialResourceVersions()
	}
	return req, nil
}

func (a *incrementalMeshConfigStream) Send(f *wire.Frame) error { return a.stream.SendMsg(f) }
func (a *incrementalMeshConfigStream) Layout() *wire.Layout     { return incrementalMeshConfigLayout }

// Type: a collection by its type URL, incremental.
func (a *incrementalMeshConfigStream) Type(req *Request, _ *Node) Type {
	coll, known := resolveAMCSType(req.Key)
	return Type{Collection: coll, Known: known, Mode: Incremental, Form: wire.FormMCPResource, WildcardCapable: true}
}
