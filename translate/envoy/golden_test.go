package envoy

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/translate"
)

var update = flag.Bool("update", false, "rewrite the golden files from the current translation")

// goldenCases are the inputs under testdata (one per feature) and the examples mesh.
func goldenCases(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, ".golden.yaml") {
			continue
		}
		cases[strings.TrimSuffix(filepath.Base(f), ".yaml")] = []string{f}
	}
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	cases["examples"] = examples
	return cases
}

// TestGoldenOutputs translates each input file and compares every output, and the faults,
// with the reviewed golden file. Run with -update to rewrite the golden files, then review
// the diff.
func TestGoldenOutputs(t *testing.T) {
	for name, files := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			// The gateway proxies of the inputs: Istio's default ingress gateway.
			ingress := translate.GatewayClass{Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}}
			outs, faults := Build(loadInputs(t, files...), TranslatorOptions{GatewayClasses: []translate.GatewayClass{ingress}})
			for _, r := range outs {
				if err := validateDeep(r.Body()); err != nil {
					t.Errorf("%s %q fails validation: %v", typeName(r.TypeURL), r.Name, err)
				}
			}
			got := render(t, outs, faults)
			golden := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if d := firstDiff(string(want), string(got)); d != "" {
				t.Errorf("output differs from %s (run with -update and review the diff):\n%s", golden, d)
			}
		})
	}
}

// loadInputs decodes Istio YAML files into resources by collection, as the file source does,
// without istiod's validation: the inputs hold resources istiod refuses, on purpose, to show
// that the translation reports its own faults on them and goes on.
func loadInputs(t testing.TB, files ...string) map[string][]*mcpapi.Resource {
	t.Helper()
	out := map[string][]*mcpapi.Resource{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, errs := filesource.DecodeUnchecked(data, f)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", f, errs)
		}
		for _, o := range objs {
			out[o.Kind.Collection] = append(out[o.Kind.Collection], o.Resource)
		}
	}
	return out
}

// decodeYAML decodes Istio YAML text into resources by collection.
func decodeYAML(t testing.TB, text string) map[string][]*mcpapi.Resource {
	t.Helper()
	objs, errs := filesource.DecodeUnchecked([]byte(text), "test.yaml")
	if len(errs) > 0 {
		t.Fatalf("test input: %v", errs)
	}
	out := map[string][]*mcpapi.Resource{}
	for _, o := range objs {
		out[o.Kind.Collection] = append(out[o.Kind.Collection], o.Resource)
	}
	return out
}

// validateDeep runs ValidateAll on a message and on every message packed in an Any inside it
// (the HttpConnectionManager of a listener, a cluster's protocol options, a route's fault
// configuration), which the generated validation does not look into.
func validateDeep(a *anypb.Any) error {
	m, err := a.UnmarshalNew()
	if err != nil {
		return err
	}
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	} else {
		return fmt.Errorf("%s has no ValidateAll", a.GetTypeUrl())
	}
	return walkAnys(m.ProtoReflect(), func(inner *anypb.Any) error {
		if err := validateDeep(inner); err != nil {
			return fmt.Errorf("%s: %w", inner.GetTypeUrl(), err)
		}
		return nil
	})
}

func walkAnys(m protoreflect.Message, f func(*anypb.Any) error) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		visit := func(v protoreflect.Value) {
			if err != nil {
				return
			}
			msg := v.Message()
			if a, ok := msg.Interface().(*anypb.Any); ok {
				err = f(a)
				return
			}
			err = walkAnys(msg, f)
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				visit(v.List().Get(i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv)
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v)
		}
		return err == nil
	})
	return err
}

// render writes outputs and faults as YAML: sections by type, resources sorted by name, each
// in protojson with Envoy's field names, and Anys expanded.
func render(t testing.TB, outs []Resource, faults []Fault) []byte {
	t.Helper()
	doc := map[string]any{}
	if len(faults) > 0 {
		doc["faults"] = faults
	}
	section := map[string]string{ClusterType: "clusters", EndpointType: "endpoints", ListenerType: "listeners", RouteType: "routes",
		GRPCClusterType: "grpc_clusters", translate.GatewayCollection(ClusterType): "gateway_clusters"}
	for _, r := range outs {
		if isPlumbing(r.Name) {
			continue // the same for every input: sidecar_test.go holds it, field by field
		}
		m, err := r.Body().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(js, &v); err != nil {
			t.Fatal(err)
		}
		list, _ := doc[section[r.TypeURL]].([]any)
		doc[section[r.TypeURL]] = append(list, v)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	header := "# Generated by TestGoldenOutputs -update from the input of the same name; reviewed by hand.\n" +
		"# protojson with Envoy's field names: fields at their zero value (lb_policy ROUND_ROBIN,\n" +
		"# append_action APPEND_IF_EXISTS_OR_ADD, a 0% panic threshold) are not shown.\n"
	return append([]byte(header), out...)
}

// firstDiff shows the first lines where two texts differ, with some context.
func firstDiff(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		if i < len(w) && i < len(g) && w[i] == g[i] {
			continue
		}
		var b strings.Builder
		for j := max(0, i-3); j < min(i+6, max(len(w), len(g))); j++ {
			if j < len(w) {
				fmt.Fprintf(&b, "want %4d: %s\n", j+1, w[j])
			}
			if j < len(g) {
				fmt.Fprintf(&b, "got  %4d: %s\n", j+1, g[j])
			}
		}
		return b.String()
	}
	return ""
}

// TestOutputsMeetGRPCRequirements checks, over every golden input, what the contract asks
// for proxyless gRPC: an EDS cluster's service_name is its own name, the name of a load
// assignment with that cluster_name, and its config source is ADS; every locality has a
// weight of at least 1; an API listener HOST:PORT has an HttpConnectionManager using RDS over
// ADS with the route configuration outbound|PORT||HOST, and ends its filters with the router.
func TestOutputsMeetGRPCRequirements(t *testing.T) {
	var files []string
	for _, fs := range goldenCases(t) {
		files = append(files, fs...)
	}
	outs, _ := Build(loadInputs(t, files...), TranslatorOptions{})
	byType := map[string]map[string]proto.Message{}
	for _, r := range outs {
		if isPlumbing(r.Name) {
			continue // the same for every input: sidecar_test.go holds it, field by field
		}
		m, err := r.Body().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if byType[r.TypeURL] == nil {
			byType[r.TypeURL] = map[string]proto.Message{}
		}
		byType[r.TypeURL][r.Name] = m
	}
	for name, m := range byType[ClusterType] {
		c := m.(*clusterpb.Cluster)
		if c.GetName() != name || c.GetType() != clusterpb.Cluster_EDS {
			continue
		}
		if c.GetEdsClusterConfig().GetServiceName() != name || c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			t.Errorf("cluster %s: eds_cluster_config %v; want service_name = its name, over ADS", name, c.GetEdsClusterConfig())
		}
		cla, ok := byType[EndpointType][name].(*endpointpb.ClusterLoadAssignment)
		if !ok || cla.GetClusterName() != name {
			t.Errorf("cluster %s has no load assignment of that cluster_name", name)
		}
	}
	for name, m := range byType[EndpointType] {
		for _, l := range m.(*endpointpb.ClusterLoadAssignment).GetEndpoints() {
			if l.GetLocality() == nil || l.GetLoadBalancingWeight().GetValue() < 1 {
				t.Errorf("load assignment %s: locality %v has weight %v; grpc-go ignores it", name, l.GetLocality(), l.GetLoadBalancingWeight())
			}
		}
	}
	apiListeners := 0
	for name, m := range byType[ListenerType] {
		api := m.(*listenerpb.Listener).GetApiListener().GetApiListener()
		if api == nil {
			continue
		}
		apiListeners++
		hcm := &hcmpb.HttpConnectionManager{}
		if err := api.UnmarshalTo(hcm); err != nil {
			t.Fatalf("listener %s: %v", name, err)
		}
		host, port, _ := strings.Cut(name, ":")
		wantRoute := "outbound|" + port + "||" + host
		if hcm.GetRds().GetRouteConfigName() != wantRoute || hcm.GetRds().GetConfigSource().GetAds() == nil {
			t.Errorf("listener %s: rds %v; want %s over ADS", name, hcm.GetRds(), wantRoute)
		}
		if _, ok := byType[RouteType][wantRoute]; !ok {
			t.Errorf("listener %s: route configuration %s is not served", name, wantRoute)
		}
		filters := hcm.GetHttpFilters()
		if len(filters) == 0 || filters[len(filters)-1].GetName() != routerFilterName {
			t.Errorf("listener %s: http filters %v; want the router last", name, filters)
		}
	}
	if apiListeners == 0 {
		t.Fatal("no API listener checked")
	}
}
