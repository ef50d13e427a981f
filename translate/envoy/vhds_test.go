package envoy

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
)

// TestVHDSVirtualHostsAreTheWholeRouteConfigurations: for every namespace's proxies (each
// reading through its overlays: namespaces some hosts are hidden from, the golden inputs'
// own, and the mesh-wide view), the virtual hosts VHDS serves of each port are those of the
// port's whole route configuration as that namespace reads it, each named PORT/VHOST and
// otherwise the same message; and the port's VHDS route configuration is the whole one's
// settings without virtual hosts, with vhds over ADS. Built without the whole route
// configurations (LazyPortRoutes), as the controller builds them for VHDS clients alone, and
// with them.
func TestVHDSVirtualHostsAreTheWholeRouteConfigurations(t *testing.T) {
	in := allTestdata(t).inputs()
	for coll, rs := range decodeYAML(t, exportYAML) {
		in[coll] = append(in[coll], rs...)
	}
	scopes := []string{"foo", "bar", "baz", "bookinfo", "default"}
	whole, _ := Build(in, TranslatorOptions{Scopes: scopes})
	var ports []uint32
	for _, r := range whole {
		if p, err := strconv.ParseUint(r.Name, 10, 16); err == nil && r.TypeURL == RouteType {
			ports = append(ports, uint32(p))
		}
	}
	if len(ports) < 3 {
		t.Fatalf("the test mesh has %d ports with route configurations", len(ports))
	}
	withWhole, _ := Build(in, TranslatorOptions{Scopes: scopes, VirtualHostPorts: ports})
	alone := NewTranslator(TranslatorOptions{Scopes: scopes, LazyPortRoutes: true})
	for _, coll := range sortedKeys(in) {
		feed(alone, coll, in[coll], nil)
	}
	alone.Translate()
	for _, p := range ports {
		alone.SetPortVirtualHosts(p, true)
	}
	alone.Translate()
	checked := 0
	for _, ns := range append([]string{""}, scopes...) {
		want := servedIn(t, whole, ns)
		for name, outs := range map[string][]Resource{"with the whole": withWhole, "alone": alone.Outputs()} {
			got := servedIn(t, outs, ns)
			for _, p := range ports {
				checked += checkVHDSPort(t, name+", namespace "+ns, p, want, got)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d virtual hosts checked", checked)
	}
}

// checkVHDSPort compares a port's VHDS outputs in got with its whole route configuration in
// want (servedIn's maps), and returns how many virtual hosts it compared.
func checkVHDSPort(t *testing.T, what string, p uint32, want, got map[string]string) int {
	t.Helper()
	route := OutboundRouteName(p)
	wholeBytes, ok := want[RouteType+" "+route]
	if !ok {
		for k := range got {
			if strings.HasPrefix(k, VirtualHostType+" "+route+"/") || k == RouteType+" "+VHDSRouteName(p) {
				t.Fatalf("%s: %s served where the namespace has no route configuration %s", what, k, route)
			}
		}
		return 0
	}
	var rc routepb.RouteConfiguration
	if err := proto.Unmarshal([]byte(wholeBytes), &rc); err != nil {
		t.Fatal(err)
	}
	wantVH := map[string]*routepb.VirtualHost{}
	for _, vh := range rc.GetVirtualHosts() {
		vh = proto.Clone(vh).(*routepb.VirtualHost)
		vh.Name = VirtualHostName(route, vh.GetName())
		wantVH[vh.Name] = vh
	}
	gotVH := map[string]*routepb.VirtualHost{}
	for k, body := range got {
		name, ok := strings.CutPrefix(k, VirtualHostType+" "+route+"/")
		if !ok || strings.Contains(name, "/") {
			continue
		}
		var vh routepb.VirtualHost
		if err := proto.Unmarshal([]byte(body), &vh); err != nil {
			t.Fatal(err)
		}
		gotVH[route+"/"+name] = &vh
	}
	if !slices.Equal(slices.Sorted(maps.Keys(gotVH)), slices.Sorted(maps.Keys(wantVH))) {
		t.Fatalf("%s: port %d's virtual hosts %v, the whole route configuration's %v", what, p, slices.Sorted(maps.Keys(gotVH)), slices.Sorted(maps.Keys(wantVH)))
	}
	for name, vh := range gotVH {
		if !proto.Equal(vh, wantVH[name]) {
			t.Fatalf("%s: virtual host %s:\n%v\nthe whole route configuration's:\n%v", what, name, vh, wantVH[name])
		}
	}
	var vrc routepb.RouteConfiguration
	if err := proto.Unmarshal([]byte(got[RouteType+" "+VHDSRouteName(p)]), &vrc); err != nil {
		t.Fatal(err)
	}
	if vrc.GetVhds().GetConfigSource().GetAds() == nil {
		t.Fatalf("%s: %s has no vhds over ADS: %v", what, VHDSRouteName(p), &vrc)
	}
	rc.VirtualHosts, vrc.Vhds = nil, nil
	if !proto.Equal(&rc, &vrc) {
		t.Fatalf("%s: %s is\n%v\nthe whole one's settings are\n%v", what, VHDSRouteName(p), &vrc, &rc)
	}
	return len(gotVH)
}
