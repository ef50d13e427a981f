package envoy

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/mcpbridge/mcpbridge/translate"
	"github.com/mcpbridge/mcpbridge/translate/envoyv2"
)

// The xDS v2 transport (source/xds, docs/xds-v2.md) serves the translation's v3 bodies as they
// are, under the v2 type URLs. That is right only if every field the translation sets means
// the same in the v2 message: same number, same kind, same name (or a rename listed below).
// testdata/envoy-1.16-api.binpb.gz holds Envoy 1.16's API (the v2 resources, and every v2 and
// v3 config and extension type) as go-control-plane v0.9.7 compiled it (regenerate with
// `go run . -o ../../../translate/envoy/testdata/envoy-1.16-api.binpb.gz` in
// e2e/xdsv2/v2descriptors). The types inside the resources' Anys (filters, TLS contexts,
// protocol options) are checked against it too: a v2 client is an Envoy of 1.16 or before.

// v2Message is the v2 message of each v3 resource type.
var v2Message = map[string]protoreflect.FullName{
	translate.EnvoyClusterType: "envoy.api.v2.Cluster",
	// The proxyless gRPC clients' clusters, served under the cluster type URL.
	translate.EnvoyGRPCClusterCollection: "envoy.api.v2.Cluster",
	translate.EnvoyEndpointType:          "envoy.api.v2.ClusterLoadAssignment",
	translate.EnvoyListenerType:          "envoy.api.v2.Listener",
	translate.EnvoyRouteType:             "envoy.api.v2.RouteConfiguration",
}

// v2Renames are the fields the translation sets whose v2 name differs from v3's, with the
// same number, kind and meaning (v3 renamed them when v2's deprecated spelling went away).
// docs/xds-v2.md lists them; a new one fails the test until it is reviewed and listed.
var v2Renames = []string{
	// The literal host a route rewrites to: "host_rewrite" in v2, at the same number.
	"envoy.api.v2.route.RouteAction.host_rewrite = host_rewrite_literal",
}

func loadV2Descriptors(t *testing.T) *protoregistry.Files {
	t.Helper()
	f, err := os.Open("testdata/envoy-1.16-api.binpb.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestV3BodiesReadAsV2 reads every resource the translation makes of every golden input (each
// feature's, and the examples) as its v2 message, and checks that nothing is unknown to v2
// and that every field set carries over: same number, kind and value, under the same name or
// a reviewed rename.
func TestV3BodiesReadAsV2(t *testing.T) {
	files := loadV2Descriptors(t)
	renames := map[string]bool{}
	perType := map[string]int{}
	ingress := translate.GatewayClass{Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}}
	for name, inputs := range goldenCases(t) {
		outs, _ := Build(loadInputs(t, inputs...), TranslatorOptions{GatewayClasses: []translate.GatewayClass{ingress}})
		for _, r := range outs {
			coll := r.TypeURL
			if coll == translate.GatewayCollection(ClusterType) {
				coll = ClusterType // the gateways' overlay of the clusters holds clusters
			}
			d, err := files.FindDescriptorByName(v2Message[coll])
			if err != nil {
				t.Fatalf("%s: no v2 message for %s: %v", name, r.TypeURL, err)
			}
			if r.TypeURL == GRPCClusterType && hasTransportSocket(t, r) {
				// ISTIO_MUTUAL for proxyless clients names certificate providers in fields
				// newer than Envoy 1.16's API: a v2 gRPC client (grpc-go 1.34) cannot take it.
				// A known gap (doc.go, "Left out"); the rest of the gRPC form is proved.
				continue
			}
			typeURL := r.Body().GetTypeUrl()                    // the gRPC clusters' collection holds Clusters
			body := envoyv2.Value(typeURL, r.Body().GetValue()) // what the v2 transport serves
			v2 := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
			if err := proto.Unmarshal(body, v2); err != nil {
				t.Fatalf("%s: %s %q does not parse as %s: %v", name, typeName(r.TypeURL), r.Name, d.FullName(), err)
			}
			v3, err := (&anypb.Any{TypeUrl: typeURL, Value: body}).UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			for _, problem := range carryOver(files, v3.ProtoReflect(), v2, string(d.FullName()), renames) {
				t.Errorf("%s: %s %q: %s", name, typeName(r.TypeURL), r.Name, problem)
			}
			perType[r.TypeURL]++
		}
	}
	for typeURL := range v2Message {
		if perType[typeURL] == 0 {
			t.Errorf("no %s among the outputs: the proof does not cover it", typeName(typeURL))
		}
	}
	got := make([]string, 0, len(renames))
	for r := range renames {
		got = append(got, r)
	}
	slices.Sort(got)
	if !slices.Equal(got, v2Renames) {
		t.Errorf("fields renamed between v2 and v3 = %q, want the reviewed %q", got, v2Renames)
	}
	t.Logf("resources read as v2: %v", perType)
}

// carryOver compares a v3 message with the same bytes read as v2, at path; renames collects
// "v2.Message.v2_name = v3_name" for fields whose names differ.
func carryOver(files *protoregistry.Files, v3, v2 protoreflect.Message, path string, renames map[string]bool) []string {
	var problems []string
	if u := v2.GetUnknown(); len(u) > 0 {
		problems = append(problems, fmt.Sprintf("%s: fields unknown to v2 (%d bytes)", path, len(u)))
	}
	v3.Range(func(f3 protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		f2 := v2.Descriptor().Fields().ByNumber(f3.Number())
		at := path + "." + string(f3.Name())
		switch {
		case f2 == nil:
			problems = append(problems, at+": no such field number in v2")
			return true
		case f2.Kind() != f3.Kind() || f2.Cardinality() != f3.Cardinality() || f2.IsMap() != f3.IsMap():
			problems = append(problems, fmt.Sprintf("%s: v2 field %s is %v %v, v3 %v %v", at, f2.Name(), f2.Cardinality(), f2.Kind(), f3.Cardinality(), f3.Kind()))
			return true
		case f2.Name() != f3.Name():
			renames[fmt.Sprintf("%s.%s = %s", v2.Descriptor().FullName(), f2.Name(), f3.Name())] = true
		}
		problems = append(problems, sameValue(files, f3, f2, val, v2.Get(f2), at, renames)...)
		return true
	})
	return problems
}

func sameValue(files *protoregistry.Files, f3, f2 protoreflect.FieldDescriptor, v3, v2 protoreflect.Value, at string, renames map[string]bool) []string {
	switch {
	case f3.IsMap():
		var problems []string
		v3.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			problems = append(problems, sameSingle(files, f3.MapValue(), f2.MapValue(), v, v2.Map().Get(k), fmt.Sprintf("%s[%v]", at, k.Interface()), renames)...)
			return true
		})
		return problems
	case f3.IsList():
		l3, l2 := v3.List(), v2.List()
		if l3.Len() != l2.Len() {
			return []string{fmt.Sprintf("%s: %d elements in v3, %d in v2", at, l3.Len(), l2.Len())}
		}
		var problems []string
		for i := range l3.Len() {
			problems = append(problems, sameSingle(files, f3, f2, l3.Get(i), l2.Get(i), fmt.Sprintf("%s[%d]", at, i), renames)...)
		}
		return problems
	}
	return sameSingle(files, f3, f2, v3, v2, at, renames)
}

func sameSingle(files *protoregistry.Files, f3, f2 protoreflect.FieldDescriptor, v3, v2 protoreflect.Value, at string, renames map[string]bool) []string {
	switch f3.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if f3.Message().FullName() != f2.Message().FullName() && strings.HasPrefix(string(f3.Message().FullName()), "google.") {
			return []string{fmt.Sprintf("%s: v2 holds %s, v3 %s", at, f2.Message().FullName(), f3.Message().FullName())}
		}
		if f3.Message().FullName() == "google.protobuf.Any" {
			return sameAny(files, v3.Message(), v2.Message(), at, renames)
		}
		return carryOver(files, v3.Message(), v2.Message(), at, renames)
	case protoreflect.EnumKind:
		e3 := f3.Enum().Values().ByNumber(v3.Enum())
		e2 := f2.Enum().Values().ByNumber(v2.Enum())
		switch {
		case e2 == nil:
			return []string{fmt.Sprintf("%s: enum value %d unknown to v2 %s", at, v3.Enum(), f2.Enum().FullName())}
		case e3 != nil && e2.Name() != e3.Name():
			renames[fmt.Sprintf("%s.%s = %s", f2.Enum().FullName(), e2.Name(), e3.Name())] = true
		}
		return nil
	}
	if !v3.Equal(v2) {
		return []string{fmt.Sprintf("%s: %v in v3, %v in v2", at, v3, v2)}
	}
	return nil
}

// sameAny checks the message inside an Any: its type must be one Envoy 1.16 knew, and its
// fields must carry over to that type as the resource's do.
func sameAny(files *protoregistry.Files, v3, v2 protoreflect.Message, at string, renames map[string]bool) []string {
	// v3 is an Any, or (inside a message only v2 names, read as itself) a dynamic one.
	f3, f2 := v3.Descriptor().Fields(), v2.Descriptor().Fields()
	typeURL, value := v3.Get(f3.ByName("type_url")).String(), v3.Get(f3.ByName("value")).Bytes()
	if v2.Get(f2.ByName("type_url")).String() != typeURL || !slices.Equal(v2.Get(f2.ByName("value")).Bytes(), value) {
		return []string{at + ": the Any differs"}
	}
	name := protoreflect.FullName(typeURL[strings.LastIndexByte(typeURL, '/')+1:])
	d, err := files.FindDescriptorByName(name)
	if err != nil {
		return []string{fmt.Sprintf("%s: %s is not a type of Envoy 1.16's API", at, name)}
	}
	inner2 := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
	if err := proto.Unmarshal(value, inner2); err != nil {
		return []string{fmt.Sprintf("%s: does not parse as Envoy 1.16's %s: %v", at, name, err)}
	}
	var inner3 protoreflect.Message = inner2 // a type only the old API has (a v2 rename): itself
	if v3name, ok := v3OfV2Type[name]; ok {
		name = v3name // read as the v3 message the translation wrote
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(name); err == nil {
		m := mt.New()
		if err := proto.Unmarshal(value, m.Interface()); err == nil {
			inner3 = m
		}
	}
	return carryOver(files, inner3, inner2, fmt.Sprintf("%s<%s>", at, name), renames)
}

// v3OfV2Type: the Any types translate/envoyv2 renames to their v2 names, back to the v3 ones
// the translation wrote, so that their fields are compared.
var v3OfV2Type = map[protoreflect.FullName]protoreflect.FullName{
	"envoy.config.filter.network.http_connection_manager.v2.HttpConnectionManager": "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
}

func hasTransportSocket(t *testing.T, r Resource) bool {
	c := &clusterpb.Cluster{}
	mustUnmarshal(t, r, c)
	return c.GetTransportSocket() != nil
}
