package xds

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

// MeshConfigOwner is the store owner of the configured MeshConfig.
const MeshConfigOwner = "meshconfig"

// meshConfigName is the store name of the one MeshConfig resource. istiod reads the body only.
const meshConfigName = "mesh"

// StoreMeshConfig writes the MeshConfig that istiod is served under core/v1alpha1/MeshConfig
// (nil: an empty one). It is one resource, sent as a bare Any of istio.mesh.v1alpha1.MeshConfig.
func StoreMeshConfig(st *store.Store, mc *meshv1alpha1.MeshConfig) error {
	if mc == nil {
		mc = &meshv1alpha1.MeshConfig{}
	}
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, mc, proto.MarshalOptions{Deterministic: true}); err != nil {
		return fmt.Errorf("mesh config: %w", err)
	}
	r := &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: meshConfigName}, Body: body}
	_, err := st.Apply(MeshConfigOwner, store.Update{Collection: MeshConfigCollection, Full: true, Resources: []*mcpapi.Resource{r}})
	return err
}
