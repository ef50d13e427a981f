package app

import (
	"context"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/mcpbridge/mcpbridge/internal/authz"
)

const appNode = "sidecar~10.0.0.1~app-1.payments~payments.svc.cluster.local"

// csdsNodes fetches client status as identity and returns the node ids, sorted.
func csdsNodes(t *testing.T, s *secured, identity string, matchers ...*matcher.NodeMatcher) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := csdspb.NewClientStatusDiscoveryServiceClient(s.conn(t, identity)).FetchClientStatus(ctx, &csdspb.ClientStatusRequest{NodeMatchers: matchers})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, cc := range resp.GetConfig() {
		out = append(out, cc.GetNode().GetId())
	}
	slices.Sort(out)
	return out, nil
}

// CSDS shows what other nodes hold: with authz rules, an administrator sees every node, a
// peer with another verified identity sees only the nodes connected with that identity, and
// anyone else is refused, counted as an authorization refusal.
func TestCSDSOnlyAdminsSeeEveryNodeAPeerSeesItsOwn(t *testing.T) {
	s := startSecured(t, func(c *Config) {
		// Unauthenticated peers may read ServiceEntries: they hold streams, yet no node of
		// theirs can be told from another's.
		c.Authz.Rules = append(c.Authz.Rules, authz.Rule{Identity: authz.Unauthenticated,
			Consume: authz.Scope{Collections: []string{seColl}, Namespaces: []string{"*"}}})
	})
	s.mesh(t, "payments/a")
	app := ads(t, s.conn(t, idApp))
	app.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: appNode}, TypeUrl: clusterType})
	app.Recv()
	istiod := ads(t, s.conn(t, idIstiod))
	istiod.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "istiod-1"}, TypeUrl: seXDSType})
	istiod.Recv()

	waitUntil(t, func() bool {
		got, err := csdsNodes(t, s, idOncall)
		return err == nil && slices.Equal(got, []string{"istiod-1", appNode})
	})
	if got, err := csdsNodes(t, s, idApp); err != nil || !slices.Equal(got, []string{appNode}) {
		t.Errorf("the app sees %v (%v), want only its own node", got, err)
	}
	other := &matcher.NodeMatcher{NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "istiod-1"}}}
	if got, err := csdsNodes(t, s, idApp, other); err != nil || len(got) != 0 {
		t.Errorf("the app asking for istiod's node sees %v (%v), want nothing", got, err)
	}
	_, err := csdsNodes(t, s, "")
	assertStatus(t, "an unauthenticated peer", err, codes.PermissionDenied, "admin: true", "unauthenticated")
	_, err = csdsNodes(t, s, idStranger)
	assertStatus(t, "a peer no rule matches", err, codes.PermissionDenied, "no authorization rule", idStranger)

	// The streaming RPC is refused alike.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stream grpc.BidiStreamingClient[csdspb.ClientStatusRequest, csdspb.ClientStatusResponse]
	stream, err = csdspb.NewClientStatusDiscoveryServiceClient(s.conn(t, idStranger)).StreamClientStatus(ctx)
	if err == nil {
		stream.Send(&csdspb.ClientStatusRequest{})
		_, err = stream.Recv()
	}
	assertStatus(t, "a stream of a peer no rule matches", err, codes.PermissionDenied, "no authorization rule")

	eventually(t, s.running, 1, "mcpbridge_authz_refusals_total", "role", "admin", "reason", "not_admin")
	eventually(t, s.running, 2, "mcpbridge_authz_refusals_total", "role", "admin", "reason", "no_rule")
}
