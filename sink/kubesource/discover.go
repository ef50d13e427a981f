package kubesource

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcpbridge/mcpbridge/kinds"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// discoveryTimeout bounds each discovery request.
const discoveryTimeout = 30 * time.Second

// served is an Istio kind the cluster serves, and the version the source reads it in.
type served struct {
	kind *kinds.Kind
	gvr  schema.GroupVersionResource
}

// resourceName is how Kubernetes names a kind's resource: "serviceentries.networking.istio.io".
func (r served) resourceName() string { return r.gvr.Resource + "." + r.gvr.Group }

// plural is the lower-case plural of a kind: the last segment of its collection.
func plural(k *kinds.Kind) string { return k.Collection[strings.LastIndexByte(k.Collection, '/')+1:] }

// discoverUntilServed asks the API server which Istio kinds it serves, again after each
// failure (a fault meanwhile) until it answers or ctx ends.
func (s *Source) discoverUntilServed(ctx context.Context, cfg *rest.Config) ([]served, error) {
	wait := s.opts.RetryInterval
	for {
		resources, notServed, err := discover(cfg)
		if err == nil {
			s.mu.Lock()
			s.setSourceFault(nil)
			s.stats.NotServed = notServed
			s.mu.Unlock()
			if len(notServed) > 0 {
				s.log.Info("the cluster does not serve these Istio kinds (CRDs not installed); they are not read", "kinds", notServed)
			}
			return resources, nil
		}
		s.mu.Lock()
		s.setSourceFault(fmt.Errorf("kubernetes API server %s: %w", cfg.Host, err))
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// discover returns, for each Istio kind, the version of it the cluster prefers among the
// versions Istio serves it in, and the kinds it does not serve at all.
func discover(cfg *rest.Config) ([]served, []string, error) {
	// Bounded: it runs on Run's goroutine, and an API server that accepts a connection and
	// never answers must not hold it (nor the bridge's shutdown).
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = discoveryTimeout
	client, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	groups, err := client.ServerGroups()
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]metav1.APIGroup{}
	for _, g := range groups.Groups {
		byName[g.Name] = g
	}
	listed := map[string]map[string]bool{} // group/version → resources it lists
	var out []served
	var notServed []string
	for _, k := range kinds.Kinds() {
		gv, err := servedVersion(client, byName[k.Group], k, listed)
		if err != nil {
			return nil, nil, err
		}
		if gv.Empty() {
			notServed = append(notServed, k.Group+"/"+k.Kind)
			continue
		}
		out = append(out, served{kind: k, gvr: gv.WithResource(plural(k))})
	}
	return out, notServed, nil
}

// servedVersion is the first of a group's versions, in the server's order of preference, that
// is a version of k and lists k's resource; empty when none does.
func servedVersion(client discovery.DiscoveryInterface, g metav1.APIGroup, k *kinds.Kind, listed map[string]map[string]bool) (schema.GroupVersion, error) {
	versions := g.Versions
	if g.PreferredVersion.Version != "" {
		versions = append([]metav1.GroupVersionForDiscovery{g.PreferredVersion}, versions...)
	}
	for _, v := range versions {
		if same, ok := kinds.ByGroupVersionKind(v.GroupVersion, k.Kind); !ok || same != k {
			continue
		}
		resources, ok := listed[v.GroupVersion]
		if !ok {
			list, err := client.ServerResourcesForGroupVersion(v.GroupVersion)
			if err != nil {
				return schema.GroupVersion{}, fmt.Errorf("listing %s: %w", v.GroupVersion, err)
			}
			resources = map[string]bool{}
			for _, r := range list.APIResources {
				resources[r.Name] = true
			}
			listed[v.GroupVersion] = resources
		}
		if resources[plural(k)] {
			return schema.ParseGroupVersion(v.GroupVersion)
		}
	}
	return schema.GroupVersion{}, nil
}
