package csds

import (
	"slices"
	"testing"

	"github.com/mcpbridge/mcpbridge/source"
)

// A VHDS client's route configuration PORT, which the store keeps as PORT@vhds, is reported
// as PORT, the name the client asked for and holds; other names, and other types' names that
// end so, as they are.
func TestCSDSNamesAVHDSClientsRouteConfigurationAsItAsked(t *testing.T) {
	const routeType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ts := &source.TypeStatus{Type: routeType, State: source.StateSynced, Resources: []source.ResourceStatus{
		{Name: "8080@vhds", State: source.StateSynced, Version: "1"},
		{Name: "outbound|80||a.example", State: source.StateSynced, Version: "1"},
	}}
	other := &source.TypeStatus{Type: "networking.istio.io/v1alpha3/ServiceEntry", State: source.StateSynced, Resources: []source.ResourceStatus{
		{Name: "ns/x@vhds", State: source.StateSynced, Version: "1"},
	}}
	var names []string
	for _, g := range appendType(appendType(nil, ts), other)[1:] {
		if g.GetName() != "" {
			names = append(names, g.GetName())
		}
	}
	if want := []string{"8080", "outbound|80||a.example", "ns/x@vhds"}; !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
}
