package envoy

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
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

// TestVHDSStartedAndStoppedEqualsFromScratch edits a mesh at random (every kind of input,
// five namespaces' scopes) while ports' VHDS outputs are started and stopped, and checks after
// each step that what the translator's deltas wrote, applied one after another, and what it
// holds are a fresh build's with the same ports' VHDS outputs: the virtual hosts a port's
// start gives its hosts from what they hold, a stop takes, and a host's rebuild makes, are
// the same as a build from scratch.
func TestVHDSStartedAndStoppedEqualsFromScratch(t *testing.T) {
	t.Parallel()
	full := allTestdata(t)
	for coll, rs := range decodeYAML(t, exportYAML) {
		for _, r := range rs {
			if full[coll] == nil {
				full[coll] = map[string]*mcpapi.Resource{}
			}
			full[coll][r.GetMetadata().GetName()] = r
		}
	}
	type item struct{ coll, name string }
	var items []item
	for coll, byName := range full {
		for name := range byName {
			items = append(items, item{coll, name})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.coll+a.name, b.coll+b.name) })
	scopes := []string{"foo", "bar", "baz", "bookinfo", "default"}
	ports := []uint32{80, 8000, 8080, 9080, 9090}
	held := map[uint32]bool{}
	opts := func() TranslatorOptions {
		var on []uint32
		for p := range held {
			on = append(on, p)
		}
		return TranslatorOptions{Scopes: scopes, LazyPortRoutes: true, VirtualHostPorts: on}
	}
	cur := newMesh(full.inputs())
	tr := NewTranslator(opts())
	for coll, rs := range cur.inputs() {
		feed(tr, coll, rs, nil)
	}
	written := map[string]map[string][]byte{} // what the deltas wrote, by collection and name
	apply := func(d Delta) {
		for coll, encs := range d.Upserts {
			if written[coll] == nil {
				written[coll] = map[string][]byte{}
			}
			for _, e := range encs {
				written[coll][e.Name()] = e.Bytes()
			}
		}
		for coll, names := range d.Removed {
			for _, n := range names {
				delete(written[coll], n)
			}
		}
	}
	check := func(step string) {
		t.Helper()
		want, _ := Build(cur.inputs(), opts())
		if d := diffOutputs(want, tr.Outputs()); d != "" {
			t.Fatalf("%s: the translator holds otherwise than a fresh build:\n%s", step, d)
		}
		got := map[string]map[string][]byte{}
		for _, r := range want {
			if got[r.TypeURL] == nil {
				got[r.TypeURL] = map[string][]byte{}
			}
			got[r.TypeURL][r.Name] = r.Encoded.Bytes()
		}
		for coll, byName := range written {
			if len(byName) == 0 {
				delete(written, coll)
			}
		}
		if !maps.EqualFunc(written, got, func(a, b map[string][]byte) bool { return maps.EqualFunc(a, b, bytes.Equal) }) {
			for coll := range got {
				for n := range got[coll] {
					if !bytes.Equal(written[coll][n], got[coll][n]) {
						t.Errorf("%s: %s %s written otherwise than built (written %v)", step, coll, n, written[coll][n] != nil)
					}
				}
			}
			for coll := range written {
				for n := range written[coll] {
					if _, ok := got[coll][n]; !ok {
						t.Errorf("%s: %s %s written, not built", step, coll, n)
					}
				}
			}
			t.FailNow()
		}
	}
	d, _ := tr.Translate()
	apply(d)
	check("initial build")
	rng := rand.New(rand.NewPCG(5, 6))
	for step := range 300 {
		var what string
		if rng.IntN(3) == 0 {
			p := ports[rng.IntN(len(ports))]
			held[p] = !held[p]
			if !held[p] {
				delete(held, p)
			}
			tr.SetPortVirtualHosts(p, held[p])
			what = fmt.Sprintf("port %d's virtual hosts %v", p, held[p])
		} else {
			it := items[rng.IntN(len(items))]
			version := fmt.Sprintf("v%d", step)
			switch r, present := cur[it.coll][it.name]; {
			case !present:
				r := withVersion(full[it.coll][it.name], version)
				cur.put(it.coll, r)
				feed(tr, it.coll, []*mcpapi.Resource{r}, nil)
				what = "restore " + it.name
			case rng.IntN(3) == 0:
				delete(cur[it.coll], it.name)
				feed(tr, it.coll, nil, []string{it.name})
				what = "remove " + it.name
			default:
				r := mutate(t, it.coll, r, version, rng)
				cur.put(it.coll, r)
				feed(tr, it.coll, []*mcpapi.Resource{r}, nil)
				what = "change " + it.name
			}
		}
		d, _ := tr.Translate()
		apply(d)
		check(fmt.Sprintf("step %d: %s", step, what))
	}
}

// TestVHDSStartedOnManyHostsEqualsFromScratch: a port of thousands of hosts, whose virtual
// hosts are made on every CPU when VHDS starts (applyVHDSChanges), some hidden from a
// namespace, is what a fresh build with the port's VHDS gives; and stopping takes them all.
func TestVHDSStartedOnManyHostsEqualsFromScratch(t *testing.T) {
	t.Parallel()
	const n = 5000 // more than parallel.ForThen hands out whole: the thens overlap the work
	var sb strings.Builder
	for i := range n {
		export := ""
		if i%7 == 0 {
			export = "\n  exportTo: [\".\"]"
		}
		fmt.Fprintf(&sb, `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: s%d, namespace: ns%d}
spec:
  hosts: [s%d.ns%d.svc.cluster.local]%s
  ports:
  - {number: 8080, name: http, protocol: HTTP}
  resolution: STATIC
  endpoints:
  - address: 10.2.%d.%d
`, i, i%5, i, i%5, export, i/250, i%250+1)
	}
	in := decodeYAML(t, sb.String())
	opts := TranslatorOptions{Scopes: []string{"ns0", "other"}, LazyPortRoutes: true}
	tr := NewTranslator(opts)
	for coll, rs := range in {
		feed(tr, coll, rs, nil)
	}
	tr.Translate()
	tr.SetPortVirtualHosts(8080, true)
	d, _ := tr.Translate()
	opts.VirtualHostPorts = []uint32{8080}
	want, _ := Build(in, opts)
	if diff := diffOutputs(want, tr.Outputs()); diff != "" {
		t.Fatalf("started on %d hosts, the translator holds otherwise than a fresh build:\n%s", n, diff)
	}
	// The start wrote each VHDS output of the fresh build, once: no more, no fewer.
	vhdsKeys := func(outs []Resource) []string {
		var keys []string
		for _, r := range outs {
			if r.TypeURL == VirtualHostType || strings.HasSuffix(r.TypeURL, "/"+VirtualHostType) {
				keys = append(keys, r.TypeURL+" "+r.Name)
			}
		}
		slices.Sort(keys)
		return keys
	}
	wantKeys := vhdsKeys(want)
	if len(wantKeys) < n {
		t.Fatalf("a fresh build has %d VHDS outputs for %d hosts", len(wantKeys), n)
	}
	var written []string
	for coll, encs := range d.Upserts {
		if coll == VirtualHostType || strings.HasSuffix(coll, "/"+VirtualHostType) {
			for _, e := range encs {
				written = append(written, coll+" "+e.Name())
			}
		}
	}
	slices.Sort(written)
	if !slices.Equal(written, wantKeys) {
		t.Fatalf("the start wrote %d VHDS outputs, a fresh build has %d", len(written), len(wantKeys))
	}
	tr.SetPortVirtualHosts(8080, false)
	d, _ = tr.Translate()
	opts.VirtualHostPorts = nil
	want, _ = Build(in, opts)
	if diff := diffOutputs(want, tr.Outputs()); diff != "" {
		t.Fatalf("stopped, the translator holds otherwise than a fresh build:\n%s", diff)
	}
	var removed []string
	for coll, names := range d.Removed {
		if coll == VirtualHostType || strings.HasSuffix(coll, "/"+VirtualHostType) {
			for _, name := range names {
				removed = append(removed, coll+" "+name)
			}
		}
	}
	slices.Sort(removed)
	if !slices.Equal(removed, wantKeys) {
		t.Fatalf("the stop removed %d VHDS outputs, the start wrote %d", len(removed), len(wantKeys))
	}
}
