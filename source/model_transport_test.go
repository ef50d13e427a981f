package source_test

// How the model's clients reach the engine. The model (model_test.go) knows nothing of
// sockets: it builds the store and the engine, and a transport wires them to its clients and
// producers. Two transports are meant to run the same schedules:
//
//   - sockets (model_socket_test.go): a real grpc.Server on loopback, the generated clients;
//     after each action the transport waits until the server has been quiet for a while;
//   - in process (to come, through an export_test.go hook of the engine): each request
//     delivered synchronously, every response the engine sends in reply returned at once,
//     store changes delivered on a synchronous call, heartbeats stepped by a fake clock.
//
// What a transport must do is below; everything else (what to send, what to expect) is the
// model's.

import (
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
)

// The stream methods the model's clients call: every protocol the engine serves.
const (
	methodADSSotW       = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	methodADSDelta      = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
	methodCDSSotW       = "/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters"
	methodCDSDelta      = "/envoy.service.cluster.v3.ClusterDiscoveryService/DeltaClusters"
	methodEDSSotW       = "/envoy.service.endpoint.v3.EndpointDiscoveryService/StreamEndpoints"
	methodEDSDelta      = "/envoy.service.endpoint.v3.EndpointDiscoveryService/DeltaEndpoints"
	methodLDSSotW       = "/envoy.service.listener.v3.ListenerDiscoveryService/StreamListeners"
	methodLDSDelta      = "/envoy.service.listener.v3.ListenerDiscoveryService/DeltaListeners"
	methodRDSSotW       = "/envoy.service.route.v3.RouteDiscoveryService/StreamRoutes"
	methodRDSDelta      = "/envoy.service.route.v3.RouteDiscoveryService/DeltaRoutes"
	methodMCPSource     = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"
	methodAMCSSotW      = "/istio.mcp.v1alpha1.AggregatedMeshConfigService/StreamAggregatedResources"
	methodAMCSIncrement = "/istio.mcp.v1alpha1.AggregatedMeshConfigService/IncrementalAggregatedResources"
	methodResourceSink  = "/istio.mcp.v1alpha1.ResourceSink/EstablishResourceStream"
)

// modelResponse is an empty response message of a method, for a transport that decodes what
// the server sends (an in-process driver gets encoded messages).
func modelResponse(method string) proto.Message {
	switch method {
	case methodADSSotW, methodCDSSotW, methodEDSSotW, methodLDSSotW, methodRDSSotW:
		return &discovery.DiscoveryResponse{}
	case methodADSDelta, methodCDSDelta, methodEDSDelta, methodLDSDelta, methodRDSDelta:
		return &discovery.DeltaDiscoveryResponse{}
	case methodMCPSource:
		return &mcp.Resources{}
	case methodAMCSSotW:
		return &mcp.MeshConfigResponse{}
	case methodAMCSIncrement:
		return &mcp.IncrementalMeshConfigResponse{}
	}
	panic("unknown method " + method)
}

// modelServer is what a transport serves: the model's store and engine (built by the model,
// so that it can read the engine's status), the xDS TTLs, and the ResourceSink's options.
type modelServer struct {
	Store  *store.Store
	Engine *source.Engine
	TTL    *xds.TTLs
	Sink   sink.Options
	Clock  *modelClock // the transport stamps each arrival with its Now
}

// modelTransport carries the model's messages. Implementations: socketTransport; an
// in-process driver later.
type modelTransport interface {
	// Open opens a client stream of one of the methods above. md is the stream's gRPC
	// metadata (none for consumers).
	Open(method string, md map[string]string) (modelStream, error)
	// Producer is a producer pushing over the ResourceSink service under an mcp-producer-id.
	Producer(id string) modelProducer
	// Settle returns once the server has answered everything it will answer now: over
	// sockets, once no message has come for a quiet period; in process, at once (each Send
	// returned its responses, each Written delivered the changes).
	Settle()
	// Written is called after each store write the model makes (in process: deliver the
	// changes to every stream now; sockets: nothing, streams wake on their own).
	Written()
	// Advance moves the clock heartbeats run on by d (sockets: sleeps d, the engine runs on
	// the wall clock; in process: steps the fake clock, then delivers what falls due).
	Advance(d time.Duration)
	// Close ends every stream and stops the server.
	Close()
}

// modelStream is one client stream.
type modelStream interface {
	// Send sends requests in order, back to back, as a client does that sends several before
	// it reads (a reconnecting Envoy resumes every type at once): the model expects the
	// server to treat them as having arrived together. An in-process driver delivers all of
	// them before it lets the engine answer, where its hook allows, else one by one.
	Send(reqs ...proto.Message) error
	// Take returns the responses received since the last Take, in order of arrival.
	Take() []arrival
	// Close ends the stream from the client's side, as a client that goes away.
	Close()
	// Err is how the server ended the stream, nil while it is open.
	Err() error
}

// arrival is one response as a client received it.
type arrival struct {
	Msg proto.Message // *discovery.DiscoveryResponse, *discovery.DeltaDiscoveryResponse, *mcp.Resources, ...
	// Sent is how many requests the client had sent on this stream when the response arrived:
	// the server cannot have read more of them when it made it.
	Sent int
	// At is modelServer.Clock's Now when the response arrived.
	At int64
}

// modelProducer is one producer (an mcp-producer-id) pushing ServiceEntries over the
// ResourceSink service. Every call returns once the bridge answered: an error for a NACK.
type modelProducer interface {
	// Connect opens a stream and answers the bridge's request for the ServiceEntries with
	// this full state; it returns once the bridge ACKed it.
	Connect(state []*mcpapi.Resource) error
	// Push sends a full state (incremental false) or an increment, and waits for the answer.
	Push(incremental bool, resources []*mcpapi.Resource, removed []string) error
	// Disconnect ends the stream and returns once the bridge counts the producer as gone
	// (sink.Server.Producers: not connected; the store then has the owner absent).
	Disconnect() error
}
