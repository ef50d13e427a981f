package bridge

import (
	"context"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// A bridge serving the examples derives Envoy clusters from them and serves them over ADS;
// with translate.enabled off it serves none.
func TestServedExamplesAreTranslatedIntoEnvoyClusters(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		b := start(t, func(c *Config) {
			c.Sources.Files = []string{"../../examples"}
			c.Translate.Enabled = enabled
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(dialConn(t, b.grpcAddr)).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stream.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"})
		var names []string
		for { // the first response may come before the translation's first write
			m, err := stream.Recv()
			if err != nil {
				t.Fatalf("translate.enabled=%v: %v", enabled, err)
			}
			names = names[:0]
			for _, a := range m.Resources {
				var c cluster.Cluster
				if err := a.UnmarshalTo(&c); err != nil {
					t.Fatal(err)
				}
				names = append(names, c.Name)
			}
			if !enabled || len(names) > 0 {
				break
			}
			stream.Send(&discovery.DiscoveryRequest{TypeUrl: m.TypeUrl, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce})
		}
		cancel()
		const want = "outbound|9080|v2|reviews.bookinfo.svc.cluster.local"
		if enabled != slices.Contains(names, want) {
			t.Fatalf("translate.enabled=%v: clusters %v, %s expected: %v", enabled, names, want, enabled)
		}
	}
}
