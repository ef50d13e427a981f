package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	// The Envoy types a bridge serves, so that their bodies print as JSON, not bytes.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	apiv2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2"
	corev2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2/core"
	discoveryv2 "github.com/mcpbridge/mcpbridge/api/envoy/service/discovery/v2"
	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/source/linkerd"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

func newWatchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch [--addr HOST:PORT] (--collection COLLECTION | --xds TYPE_URL [--xds-version v2] | --linkerd HOST:PORT) [flags]",
		Short: "Subscribe to a config source and print every update",
		Long: `Subscribe to a config source and print every update it sends, ACKing each:

  --collection COLLECTION  as an MCP sink, on istio.mcp.v1alpha1.ResourceSource
                           (mcpbridge's, or any MCP source): the whole collection
  --xds TYPE_URL           as an xDS client, on the aggregated discovery service: state of the
                           world, or delta with --incremental; a wildcard subscription, or the
                           names given with --name. --xds-version v2 uses the v2 service
                           (envoy.service.discovery.v2), as Envoy before 1.17 and grpc-go
                           before 1.36 do; the type URL is asked as given (v2 Envoy types:
                           type.googleapis.com/envoy.api.v2.Cluster ...), and v2 bodies are
                           printed decoded as their v3 counterparts, whose field numbers they share
  --linkerd HOST:PORT      as a Linkerd proxy, on io.linkerd.proxy.destination.Destination/Get
                           (or the seed's conduit.proxy.destination with --conduit): the
                           addresses of a service, as add, remove and no_endpoints updates

Each update is printed with its version and its resources (name, version, and body decoded
from protobuf), as a YAML document (-o yaml, the default) or as one line of JSON
(-o json). watch runs until SIGINT, or until --count updates.

Exit status: 0 when stopped by SIGINT or after --count updates; 1 when the stream fails or the
source ends it; 2 for a bad command line.`,
		Example: `  mcpbridge watch --collection istio/networking/v1alpha3/serviceentries
  mcpbridge watch --xds networking.istio.io/v1alpha3/VirtualService --incremental
  mcpbridge watch --xds type.googleapis.com/envoy.config.cluster.v3.Cluster -o json --count 1
  mcpbridge watch --linkerd reviews.bookinfo.svc.cluster.local:9080
  mcpbridge watch --xds-version v2 --xds type.googleapis.com/envoy.api.v2.Cluster --count 1`,
		Args: cobra.NoArgs,
		RunE: runWatch,
	}
	fs := cmd.Flags()
	addAddrFlag(fs, "address of the config source: the bridge's gRPC port, or any MCP or xDS server", "from")
	fs.String("collection", "", "MCP collection to subscribe to, on ResourceSource")
	fs.String("xds", "", "xDS type URL to subscribe to, on the aggregated discovery service")
	fs.String("linkerd", "", "a service's HOST:PORT to resolve with Linkerd's Destination.Get")
	fs.Bool("conduit", false, "with --linkerd: the seed's conduit.proxy.destination package, not io.linkerd.proxy.destination")
	fs.String("xds-version", "v3", "with --xds: the xDS transport, v3 or v2")
	fs.StringArray("name", nil, "with --xds: a resource name to subscribe to (repeatable); none means every resource")
	fs.Bool("incremental", false, "ask for incremental updates (MCP incremental; xDS delta)")
	fs.Bool("unchecked", false, "subscribe to a collection or type URL mcpbridge does not serve (another server's)")
	addOutputFlag(fs, "yaml", "json")
	fs.Int("count", 0, "stop after this many updates (0: until SIGINT)")
	fs.String("node", "mcpbridge-watch", "node id this client sends (sink_node.id, node.id)")
	fs.Int("max-recv-msg-size", defaultWatchRecvSize, "largest response accepted, in bytes: a state-of-the-world answer for a large mesh is one message (100,000 ServiceEntries: about 34 MB)")
	addDialFlags(fs)
	return cmd
}

// watchOptions are watch's flags, checked.
type watchOptions struct {
	collection, xdsType, node, output string
	linkerd                           string
	xdsVersion                        string
	names                             []string
	incremental, conduit              bool
	count, maxRecv                    int
}

// defaultWatchRecvSize is watch's receive limit: gRPC's own 4 MiB refuses the whole-type
// answers of a mesh past about 10,000 services.
const defaultWatchRecvSize = 256 << 20

func watchFlags(cmd *cobra.Command) (watchOptions, error) {
	fs := cmd.Flags()
	var o watchOptions
	o.collection, _ = fs.GetString("collection")
	o.xdsType, _ = fs.GetString("xds")
	o.linkerd, _ = fs.GetString("linkerd")
	o.conduit, _ = fs.GetBool("conduit")
	o.names, _ = fs.GetStringArray("name")
	o.xdsVersion, _ = fs.GetString("xds-version")
	o.incremental, _ = fs.GetBool("incremental")
	if err := resolveAddr(fs); err != nil {
		return o, err
	}
	var err error
	if o.output, err = outputFormat(fs, "yaml", "json"); err != nil {
		return o, err
	}
	o.count, _ = fs.GetInt("count")
	o.node, _ = fs.GetString("node")
	o.maxRecv, _ = fs.GetInt("max-recv-msg-size")
	switch {
	case countSet(o.collection, o.xdsType, o.linkerd) != 1:
		return o, usageError{fmt.Errorf("give one of --collection (MCP), --xds (xDS) or --linkerd (Linkerd)")}
	case o.conduit && o.linkerd == "":
		return o, usageError{fmt.Errorf("--conduit goes with --linkerd")}
	case o.linkerd != "" && (o.incremental || len(o.names) > 0):
		return o, usageError{fmt.Errorf("--linkerd takes neither --incremental nor --name: Destination.Get streams changes of one service")}
	case o.count < 0:
		return o, usageError{fmt.Errorf("--count: must not be negative, got %d", o.count)}
	case o.maxRecv <= 0:
		return o, usageError{fmt.Errorf("--max-recv-msg-size: must be a positive number of bytes, got %d", o.maxRecv)}
	case o.xdsVersion != "v3" && o.xdsVersion != "v2":
		return o, usageError{fmt.Errorf("--xds-version: %q is neither v3 nor v2", o.xdsVersion)}
	case o.xdsVersion != "v3" && o.xdsType == "":
		return o, usageError{fmt.Errorf("--xds-version goes with --xds")}
	case len(o.names) > 0 && o.collection != "":
		return o, usageError{fmt.Errorf("--name goes with --xds: an MCP subscription is to a whole collection")}
	}
	if unchecked, _ := fs.GetBool("unchecked"); !unchecked {
		switch {
		case o.collection != "":
			return o, checkServed("collection", o.collection, servedCollections())
		case o.xdsType != "":
			return o, checkServed("xds", o.xdsType, servedTypeURLs())
		}
	}
	return o, nil
}

func runWatch(cmd *cobra.Command, _ []string) error {
	o, err := watchFlags(cmd)
	if err != nil {
		return err
	}
	conn, err := dialFlags(cmd.Flags(), "addr", grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.maxRecv)))
	if err != nil {
		return err
	}
	defer conn.Close()
	addr, _ := cmd.Flags().GetString("addr")
	p := &printer{out: cmd.OutOrStdout(), json: o.output == "json", left: o.count}
	ctx := cmd.Context()
	switch {
	case o.linkerd != "":
		err = watchLinkerd(ctx, conn, o, p)
	case o.collection != "":
		err = watchMCP(ctx, conn, o, p)
	case o.xdsVersion == "v2" && o.incremental:
		err = watchDeltaV2(ctx, conn, o, p)
	case o.xdsVersion == "v2":
		err = watchSotWV2(ctx, conn, o, p)
	case o.incremental:
		err = watchDelta(ctx, conn, o, p)
	default:
		err = watchSotW(ctx, conn, o, p)
	}
	if err == nil || ctx.Err() != nil {
		return nil // --count reached, or SIGINT
	}
	return rpcError("watch: stream from "+addr, err)
}

// sendError is why a send failed: a send on a stream the server ended returns io.EOF, and
// the server's status (PermissionDenied, ResourceExhausted...) is what a receive returns.
func sendError[Req, Resp any](s grpc.BidiStreamingClient[Req, Resp], err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, rerr := s.Recv(); rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return err
			}
			return rerr
		}
	}
}

// errDone ends a watch after --count updates.
var errDone = fmt.Errorf("done")

// stream runs one subscription: send the first request, then print and ACK each response.
func stream[Req, Resp any](ctx context.Context, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Resp], error),
	first *Req, answer func(*Resp) (*update, *Req)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := open(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(first); err != nil {
		return sendError(s, err)
	}
	for {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		u, ack := answer(m)
		if err := s.Send(ack); err != nil {
			return sendError(s, err)
		}
		if err := u.print(); err != nil {
			if err == errDone {
				return nil
			}
			return err
		}
	}
}

func watchMCP(ctx context.Context, conn *grpc.ClientConn, o watchOptions, p *printer) error {
	client := mcp.NewResourceSourceClient(conn)
	node := &mcp.SinkNode{Id: o.node}
	first := &mcp.RequestResources{SinkNode: node, Collection: o.collection, Incremental: o.incremental}
	return stream(ctx, client.EstablishResourceStream, first, func(m *mcp.Resources) (*update, *mcp.RequestResources) {
		u := &update{p: p, Collection: m.GetCollection(), Version: m.GetSystemVersionInfo(), Incremental: m.GetIncremental(), Removed: m.GetRemovedResources()}
		for _, r := range m.GetResources() {
			u.Resources = append(u.Resources, mcpResource(r))
		}
		return u, &mcp.RequestResources{SinkNode: node, Collection: m.GetCollection(), ResponseNonce: m.GetNonce()}
	})
}

func watchSotW(ctx context.Context, conn *grpc.ClientConn, o watchOptions, p *printer) error {
	client := discovery.NewAggregatedDiscoveryServiceClient(conn)
	node := &core.Node{Id: o.node}
	first := &discovery.DiscoveryRequest{Node: node, TypeUrl: o.xdsType, ResourceNames: o.names}
	return stream(ctx, client.StreamAggregatedResources, first, func(m *discovery.DiscoveryResponse) (*update, *discovery.DiscoveryRequest) {
		u := &update{p: p, TypeURL: m.GetTypeUrl(), Version: m.GetVersionInfo()}
		for _, a := range m.GetResources() {
			u.Resources = append(u.Resources, anyResource("", "", a))
		}
		return u, &discovery.DiscoveryRequest{Node: node, TypeUrl: m.GetTypeUrl(), VersionInfo: m.GetVersionInfo(),
			ResponseNonce: m.GetNonce(), ResourceNames: o.names}
	})
}

func watchDelta(ctx context.Context, conn *grpc.ClientConn, o watchOptions, p *printer) error {
	client := discovery.NewAggregatedDiscoveryServiceClient(conn)
	node := &core.Node{Id: o.node}
	first := &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: o.xdsType, ResourceNamesSubscribe: o.names}
	return stream(ctx, client.DeltaAggregatedResources, first, func(m *discovery.DeltaDiscoveryResponse) (*update, *discovery.DeltaDiscoveryRequest) {
		u := &update{p: p, TypeURL: m.GetTypeUrl(), Version: m.GetSystemVersionInfo(), Incremental: true, Removed: m.GetRemovedResources()}
		for _, r := range m.GetResources() {
			u.Resources = append(u.Resources, anyResource(r.GetName(), r.GetVersion(), r.GetResource()))
		}
		return u, &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}
	})
}

// countSet counts the non-empty values.
func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// watchLinkerd prints a Destination.Get stream's updates. The protocol has no ACK: the
// server sends each change, and an empty add when nothing changed for an interval.
func watchLinkerd(ctx context.Context, conn *grpc.ClientConn, o watchOptions, p *printer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recv, err := linkerd.Get(ctx, conn, o.conduit, o.linkerd)
	if err != nil {
		return err
	}
	for {
		u, err := recv()
		if err != nil {
			return err
		}
		if err := p.printLinkerd(linkerdUpdate{Path: o.linkerd, Update: u}); err != nil {
			if err == errDone {
				return nil
			}
			return err
		}
	}
}

// linkerdUpdate is one Destination.Get message as watch prints it.
type linkerdUpdate struct {
	Path string `json:"path"`
	*linkerd.Update
}

func (p *printer) printLinkerd(u linkerdUpdate) error {
	js, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("encoding an update: %w", err)
	}
	if p.json {
		fmt.Fprintf(p.out, "%s\n", js)
	} else {
		var doc yaml.Node
		if err := yaml.Unmarshal(js, &doc); err != nil || len(doc.Content) != 1 {
			return fmt.Errorf("encoding an update as YAML: %v", err)
		}
		var b strings.Builder
		b.WriteString("---\n")
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(blockStyle(doc.Content[0])); err != nil {
			return fmt.Errorf("encoding an update: %w", err)
		}
		enc.Close()
		if _, err := io.WriteString(p.out, b.String()); err != nil {
			return err
		}
	}
	if p.left > 0 {
		if p.left--; p.left == 0 {
			return errDone
		}
	}
	return nil
}

// watchSotWV2 is watchSotW on the xDS v2 transport.
func watchSotWV2(ctx context.Context, conn *grpc.ClientConn, o watchOptions, p *printer) error {
	client := discoveryv2.NewAggregatedDiscoveryServiceClient(conn)
	node := &corev2.Node{Id: o.node}
	first := &apiv2.DiscoveryRequest{Node: node, TypeUrl: o.xdsType, ResourceNames: o.names}
	return stream(ctx, client.StreamAggregatedResources, first, func(m *apiv2.DiscoveryResponse) (*update, *apiv2.DiscoveryRequest) {
		u := &update{p: p, TypeURL: m.GetTypeUrl(), Version: m.GetVersionInfo()}
		for _, a := range m.GetResources() {
			u.Resources = append(u.Resources, anyResource("", "", a))
		}
		return u, &apiv2.DiscoveryRequest{Node: node, TypeUrl: m.GetTypeUrl(), VersionInfo: m.GetVersionInfo(),
			ResponseNonce: m.GetNonce(), ResourceNames: o.names}
	})
}

// watchDeltaV2 is watchDelta on the xDS v2 transport.
func watchDeltaV2(ctx context.Context, conn *grpc.ClientConn, o watchOptions, p *printer) error {
	client := discoveryv2.NewAggregatedDiscoveryServiceClient(conn)
	node := &corev2.Node{Id: o.node}
	first := &apiv2.DeltaDiscoveryRequest{Node: node, TypeUrl: o.xdsType, ResourceNamesSubscribe: o.names}
	return stream(ctx, client.DeltaAggregatedResources, first, func(m *apiv2.DeltaDiscoveryResponse) (*update, *apiv2.DeltaDiscoveryRequest) {
		u := &update{p: p, TypeURL: m.GetTypeUrl(), Version: m.GetSystemVersionInfo(), Incremental: true, Removed: m.GetRemovedResources()}
		for _, r := range m.GetResources() {
			u.Resources = append(u.Resources, anyResource(r.GetName(), r.GetVersion(), r.GetResource()))
		}
		return u, &apiv2.DeltaDiscoveryRequest{Node: node, TypeUrl: m.GetTypeUrl(), ResponseNonce: m.GetNonce()}
	})
}

// update is one response as watch prints it.
type update struct {
	p           *printer
	Collection  string     `json:"collection,omitempty" yaml:"collection,omitempty"`
	TypeURL     string     `json:"type_url,omitempty" yaml:"type_url,omitempty"`
	Version     string     `json:"version" yaml:"version"`
	Incremental bool       `json:"incremental" yaml:"incremental"`
	Resources   []resource `json:"resources" yaml:"resources"`
	Removed     []string   `json:"removed,omitempty" yaml:"removed,omitempty"`
}

// resource is one resource of an update: its name and version, and its body as protojson
// (with its "@type"), or why the body could not be decoded.
type resource struct {
	Name      string          `json:"name" yaml:"name"`
	Version   string          `json:"version,omitempty" yaml:"version,omitempty"`
	Body      json.RawMessage `json:"body,omitempty" yaml:"-"`
	BodyError string          `json:"body_error,omitempty" yaml:"body_error,omitempty"`
	// YAMLBody is Body as a YAML node: decoding JSON into a node keeps the order of its
	// fields (protobuf's), where a map would sort them.
	YAMLBody *yaml.Node `json:"-" yaml:"body,omitempty"`
}

var bodyJSON = protojson.MarshalOptions{Resolver: protoregistry.GlobalTypes}

func mcpResource(r *mcpapi.Resource) resource {
	out := resource{Name: r.GetMetadata().GetName(), Version: r.GetMetadata().GetVersion()}
	if r.GetBody() == nil {
		return out
	}
	js, err := bodyJSON.Marshal(r.GetBody())
	if err != nil {
		out.BodyError = err.Error()
		return out
	}
	out.Body = js
	return out
}

// anyResource decodes an xDS resource: an MCP resource (MCP over xDS) or an Envoy resource,
// whose name, when the response does not give it (state of the world), is its name field.
func anyResource(name, version string, a *anypb.Any) resource {
	if a == nil {
		return resource{Name: name, Version: version}
	}
	if a.GetTypeUrl() == wire.MCPResourceTypeURL {
		r := &mcpapi.Resource{}
		if err := a.UnmarshalTo(r); err == nil {
			return mcpResource(r)
		}
	}
	out := resource{Name: name, Version: version}
	if v3, ok := xds.V3TypeOf(a.GetTypeUrl()); ok {
		// A v2 Envoy resource: the v3 message reads it (the same field numbers); the v2
		// messages are not compiled in.
		a = &anypb.Any{TypeUrl: v3, Value: a.GetValue()}
	}
	msg, err := a.UnmarshalNew()
	if err != nil {
		out.BodyError = err.Error()
		return out
	}
	if out.Name == "" {
		out.Name = nameField(msg)
	}
	if out.Body, err = bodyJSON.Marshal(a); err != nil {
		out.Body, out.BodyError = nil, err.Error()
	}
	return out
}

// nameField is an Envoy resource's name: its name field, or cluster_name for an endpoint
// assignment.
func nameField(msg proto.Message) string {
	fields := msg.ProtoReflect().Descriptor().Fields()
	for _, n := range []protoreflect.Name{"name", "cluster_name"} {
		if f := fields.ByName(n); f != nil && f.Kind() == protoreflect.StringKind {
			return msg.ProtoReflect().Get(f).String()
		}
	}
	return ""
}

func (u *update) printYAML() error {
	for i := range u.Resources {
		r := &u.Resources[i]
		if len(r.Body) > 0 {
			var doc yaml.Node
			if err := yaml.Unmarshal(r.Body, &doc); err != nil || len(doc.Content) != 1 {
				return fmt.Errorf("encoding %s as YAML: %v", r.Name, err)
			}
			r.YAMLBody = blockStyle(doc.Content[0])
		}
	}
	var b strings.Builder
	b.WriteString("---\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(u); err != nil {
		return fmt.Errorf("encoding an update: %w", err)
	}
	enc.Close()
	_, err := io.WriteString(u.p.out, b.String())
	return err
}

// blockStyle writes a node parsed from JSON as block YAML, not as the JSON's flow style.
func blockStyle(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = 0
	}
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0 // quoted again by the encoder only where YAML needs it
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
	return n
}

// printer writes updates and counts them down to --count.
type printer struct {
	out  io.Writer
	json bool
	left int // updates still to print; 0: no limit
}

func (u *update) print() error {
	if u.Resources == nil {
		u.Resources = []resource{}
	}
	js, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("encoding an update: %w", err)
	}
	p := u.p
	if p.json {
		fmt.Fprintf(p.out, "%s\n", js)
	} else if err := u.printYAML(); err != nil {
		return err
	}
	if p.left > 0 {
		if p.left--; p.left == 0 {
			return errDone
		}
	}
	return nil
}
