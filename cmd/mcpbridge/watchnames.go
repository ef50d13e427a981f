package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
)

// The names watch may subscribe to on a bridge: a typo there would otherwise subscribe to a
// collection nobody serves and print it empty, exit 0. --unchecked subscribes to any name, for
// another server's types.

// istioVersions are the versions an Istio kind may be named in (kinds resolves each to its
// kind when Istio serves the kind in it).
var istioVersions = []string{"v1alpha1", "v1alpha3", "v1beta1", "v1"}

// servedCollections are the MCP collections the bridge serves: every Istio kind's, in each of
// its versions, and the Envoy types' (the translation's outputs).
func servedCollections() []string {
	var out []string
	for _, k := range kinds.Kinds() {
		prefix := k.Collection[:strings.LastIndexByte(k.Collection, '/')] // istio/networking/v1alpha3
		prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]            // istio/networking/
		plural := k.Collection[strings.LastIndexByte(k.Collection, '/')+1:]
		for _, v := range istioVersions {
			if c := prefix + v + "/" + plural; isCollectionOf(c, k) {
				out = append(out, c)
			}
		}
	}
	return append(out, envoy.OutputTypes()...)
}

func isCollectionOf(c string, k *kinds.Kind) bool {
	got, ok := kinds.ByCollection(c)
	return ok && got == k
}

// servedTypeURLs are the xDS type URLs the bridge serves: every Istio kind's (MCP over xDS, in
// each of its versions), MeshConfig's, and the Envoy types' in v3 and v2.
func servedTypeURLs() []string {
	out := []string{kinds.MeshConfigTypeURL}
	for _, k := range kinds.Kinds() {
		for _, v := range istioVersions {
			if got, ok := kinds.ByGroupVersionKind(k.Group+"/"+v, k.Kind); ok && got == k {
				out = append(out, k.Group+"/"+v+"/"+k.Kind)
			}
		}
	}
	out = append(out, envoy.ClusterType, envoy.EndpointType, envoy.ListenerType, envoy.RouteType)
	return append(out, xds.ClusterTypeV2, xds.EndpointTypeV2, xds.ListenerTypeV2, xds.RouteTypeV2)
}

// checkServed refuses a name the bridge does not serve, naming the closest it does.
func checkServed(flag, name string, served []string) error {
	if slices.Contains(served, name) {
		return nil
	}
	msg := fmt.Sprintf("--%s: %q is not served by mcpbridge", flag, name)
	if near := closest(name, served); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return usageError{fmt.Errorf("%s (--unchecked subscribes to it anyway, for another server's)", msg)}
}
