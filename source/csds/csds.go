// Package csds is the bridge's Client Status Discovery Service
// (envoy.service.status.v3.ClientStatusDiscoveryService): for every client the source engine
// serves (Envoy and gRPC over xDS, istiod, MCP sinks, and the sinks the bridge pushes to), each
// type and each resource it asked for, with where it stands: SYNCED, STALE, NOT_SENT or ERROR
// (source/status.go says how each is decided). It is a view over the engine, computed when
// asked; mcpbridge status and the status page print it as a table (Table).
//
// The response has one ClientConfig per node id (the streams of one node, such as Envoy's
// per-type streams, together; a stream that named no node is a ClientConfig of its own, with
// an empty id), holding GenericXdsConfigs: for each type, one with an empty name that carries
// the type's state (what istioctl proxy-status reads), then one per resource, sorted by name,
// then one per name asked for that does not exist (client_status DOES_NOT_EXIST). Resource
// bodies are never included: the bridge serves them to whom may read them, over xDS and MCP.
//
// Authorization: the view shows what other nodes hold, so with authz rules only a peer that a
// rule with admin: true matches sees every node; a peer with another verified identity sees
// the nodes connected with that same identity (its own); any other peer is refused
// (PermissionDenied, counted in mcpbridge_authz_refusals_total). Without rules everything is
// allowed, as for every other service of the bridge.
package csds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/rpcpeer"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/translate"
)

// Server is the ClientStatusDiscoveryService over one engine.
type Server struct {
	status.UnimplementedClientStatusDiscoveryServiceServer
	Engine *source.Engine
	// Authz decides who may see which nodes (see the package comment); nil or no rules:
	// everyone sees everything.
	Authz *authz.Policy
	// Metrics counts refusals; nil: none.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	status.RegisterClientStatusDiscoveryServiceServer(g, s)
}

// FetchClientStatus answers one request.
func (s *Server) FetchClientStatus(ctx context.Context, req *status.ClientStatusRequest) (*status.ClientStatusResponse, error) {
	may, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	return s.answer(req, may)
}

// StreamClientStatus answers each request of a stream, until the client ends it.
func (s *Server) StreamClientStatus(stream grpc.BidiStreamingServer[status.ClientStatusRequest, status.ClientStatusResponse]) error {
	may, err := s.access(stream.Context())
	if err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.answer(req, may)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *Server) answer(req *status.ClientStatusRequest, may func(*source.StatusClient) bool) (*status.ClientStatusResponse, error) {
	match, err := compileMatchers(req.GetNodeMatchers())
	if err != nil {
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	include := func(c *source.StatusClient) bool {
		return (may == nil || may(c)) && (match == nil || match(c.Node, c.Metadata))
	}
	return Response(s.Engine.Status(source.StatusOptions{Include: include, Resources: true})), nil
}

// errNotAdmin is the refusal of a peer that may see no node.
var errNotAdmin = errors.New("client status shows what other nodes hold: it needs an identity that a rule with admin: true matches, or a verified identity (which sees the nodes connected with it)")

// access decides which streams the peer may see: nil for all.
func (s *Server) access(ctx context.Context) (func(*source.StatusClient) bool, error) {
	if !s.Authz.Enabled() {
		return nil, nil
	}
	id := authz.PeerIdentity(ctx)
	g, err := s.Authz.Grant(id)
	switch {
	case err != nil:
		s.Metrics.AuthzRefused(metrics.RoleAdmin, metrics.RefusedNoRule)
		s.log().Warn("client status refused", "peer", rpcpeer.Addr(ctx), "error", err)
		return nil, grpcstatus.Error(codes.PermissionDenied, err.Error())
	case g.Admin:
		return nil, nil
	case id == "":
		s.Metrics.AuthzRefused(metrics.RoleAdmin, metrics.RefusedNotAdmin)
		s.log().Warn("client status refused", "peer", rpcpeer.Addr(ctx), "identity", g.Identity)
		return nil, grpcstatus.Error(codes.PermissionDenied, fmt.Sprintf("%v (identity %s)", errNotAdmin, g.Identity))
	}
	return func(c *source.StatusClient) bool { return c.Identity == id }, nil
}

func (s *Server) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Response is the CSDS answer for the engine's status of some streams (with resources, for
// the per-resource entries): one ClientConfig per node id, in the order of the streams.
func Response(clients []source.ClientStatus) *status.ClientStatusResponse {
	resp := &status.ClientStatusResponse{}
	byNode := map[string]*status.ClientConfig{}
	for i := range clients {
		c := &clients[i]
		cc := byNode[c.Node]
		if cc == nil || c.Node == "" {
			cc = &status.ClientConfig{Node: &core.Node{Id: c.Node, Metadata: c.Metadata}}
			resp.Config = append(resp.Config, cc)
			if c.Node != "" {
				byNode[c.Node] = cc
			}
		}
		for j := range c.Types {
			cc.GenericXdsConfigs = appendType(cc.GenericXdsConfigs, &c.Types[j])
		}
	}
	return resp
}

// appendType appends a type's entry and its resources' entries. The entries of a type are
// allocated together, and share their timestamps: a fetch of a large mesh is a million
// entries, and this is most of its cost.
func appendType(out []*status.ClientConfig_GenericXdsConfig, t *source.TypeStatus) []*status.ClientConfig_GenericXdsConfig {
	slab := make([]status.ClientConfig_GenericXdsConfig, 1+len(t.Resources))
	summary := &slab[0]
	summary.TypeUrl, summary.ConfigStatus, summary.ClientStatus = t.Type, configStatus(t.State), clientStatus(t.State, false)
	summary.VersionInfo, summary.LastUpdated = ackedVersion(t), lastAnswer(t)
	switch t.State {
	case source.StateStale:
		summary.VersionInfo = t.SentVersion
	case source.StateError:
		summary.ErrorState = failure(t.LastNACK)
	}
	out = append(out, summary)
	acked := stamp(t.LastACK)
	var rejected map[*source.Answer]*admin.UpdateFailureState
	for i := range t.Resources {
		r := &t.Resources[i]
		g := &slab[1+i]
		g.TypeUrl, g.Name, g.VersionInfo = t.Type, clientName(t.Type, r.Name), r.Version
		g.ConfigStatus, g.ClientStatus = configStatus(r.State), clientStatus(r.State, r.Missing)
		switch r.State {
		case source.StateError:
			if rejected == nil {
				rejected = map[*source.Answer]*admin.UpdateFailureState{}
			}
			if rejected[r.Rejected] == nil {
				rejected[r.Rejected] = failure(r.Rejected)
			}
			g.ErrorState = rejected[r.Rejected]
			g.LastUpdated = g.ErrorState.GetLastUpdateAttempt()
		case source.StateSynced:
			g.LastUpdated = acked
		}
		out = append(out, g)
	}
	return out
}

// clientName is a resource's name as its client knows it: a VHDS client's route
// configuration PORT is kept as PORT@vhds (translate.VHDSRouteName) and sent as PORT.
func clientName(typeURL, name string) string {
	if typeURL == translate.EnvoyRouteType {
		if route, ok := translate.VHDSRouteOf(name); ok {
			return route
		}
	}
	return name
}

func ackedVersion(t *source.TypeStatus) string {
	if t.LastACK == nil {
		return ""
	}
	return t.LastACK.Version
}

// lastAnswer is when the client last answered on the type (ACK or NACK); nil if never.
func lastAnswer(t *source.TypeStatus) *timestamppb.Timestamp {
	a := t.LastACK
	if n := t.LastNACK; n != nil && (a == nil || n.Time.After(a.Time)) {
		a = n
	}
	return stamp(a)
}

func stamp(a *source.Answer) *timestamppb.Timestamp {
	if a == nil || a.Time.IsZero() {
		return nil
	}
	return timestamppb.New(a.Time)
}

// failure is a NACK as CSDS's error_state: the refused version, the client's message, when.
func failure(a *source.Answer) *admin.UpdateFailureState {
	if a == nil {
		return nil
	}
	return &admin.UpdateFailureState{VersionInfo: a.Version, Details: a.Message, LastUpdateAttempt: stamp(a)}
}

func configStatus(s source.ConfigState) status.ConfigStatus {
	switch s {
	case source.StateSynced:
		return status.ConfigStatus_SYNCED
	case source.StateNotSent:
		return status.ConfigStatus_NOT_SENT
	case source.StateStale:
		return status.ConfigStatus_STALE
	case source.StateError:
		return status.ConfigStatus_ERROR
	}
	return status.ConfigStatus_UNKNOWN
}

// clientStatus is the state as the client would say it (ClientResourceStatus): the bridge
// knows it from the client's answers.
func clientStatus(s source.ConfigState, missing bool) admin.ClientResourceStatus {
	switch {
	case missing:
		return admin.ClientResourceStatus_DOES_NOT_EXIST
	case s == source.StateSynced:
		return admin.ClientResourceStatus_ACKED
	case s == source.StateError:
		return admin.ClientResourceStatus_NACKED
	case s == source.StateStale, s == source.StateNotSent:
		return admin.ClientResourceStatus_REQUESTED
	}
	return admin.ClientResourceStatus_UNKNOWN
}
