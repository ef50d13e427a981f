package envoy

import (
	"bytes"
	"fmt"
	"testing"
	"unicode/utf8"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/mcpbridge/mcpbridge/store"
)

// TestLoadAssignmentEncodingIsTheMarshalledMessage: for random endpoints (localities, labels,
// networks, weights, ports, odd strings), the direct encoding of a load assignment is byte for
// byte the deterministic marshalling of the message loadAssignment builds, and that message
// passes Envoy's validation; the direct encoding refuses exactly the endpoints it cannot
// vouch for (and the caller then builds the message, whose validation names the fault).
func TestLoadAssignmentEncodingIsTheMarshalledMessage(t *testing.T) {
	text := rapid.OneOf(rapid.StringMatching(`[a-z0-9./-]{0,12}`), rapid.SampledFrom([]string{"", "\xff", "é/ü/ß", "a/b/c/d"}))
	rapid.Check(t, func(rt *rapid.T) {
		name := rapid.OneOf(rapid.Just("outbound|80||a.example"), text).Draw(rt, "name")
		n := rapid.IntRange(0, 6).Draw(rt, "endpoints")
		ws := make([]workload, n)
		eps := make([]endpoint, n)
		for i := range ws {
			ws[i] = workload{
				address:  rapid.OneOf(rapid.SampledFrom([]string{"10.0.0.1", "10.0.0.2", "::1"}), text).Draw(rt, "address"),
				labels:   labelsOf(rapid.MapOfN(text, text, 0, 4).Draw(rt, "labels")),
				network:  text.Draw(rt, "network"),
				locality: text.Draw(rt, "locality"),
				weight:   rapid.SampledFrom([]uint32{0, 1, 7, 1 << 20}).Draw(rt, "weight"),
			}
			eps[i] = endpoint{workload: &ws[i], port: rapid.SampledFrom([]uint32{0, 80, 65535, 65536}).Draw(rt, "port")}
		}
		got, ok := encodeLoadAssignment(name, eps)
		msg := loadAssignment(name, eps)
		if vouched := name != "" && utf8.ValidString(name) && allEncodable(eps); ok != vouched {
			rt.Fatalf("direct encoding ok=%v, want %v", ok, vouched)
		}
		if !ok {
			return
		}
		if err := msg.ValidateAll(); err != nil {
			rt.Fatalf("the encoding vouched for a message that does not validate: %v", err)
		}
		want, err := store.EncodeMessage(name, EndpointType, msg)
		if err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			rt.Fatalf("direct encoding\n%x\nmarshalled\n%x", got.Bytes(), want.Bytes())
		}
	})
}

// allEncodable is what encodeLoadAssignment vouches for, said the plain way.
func allEncodable(eps []endpoint) bool {
	for _, ep := range eps {
		// An endpoint's labels and network are not sent (lbEndpoint): whatever they hold, the
		// encoding is not refused for them.
		for _, s := range []string{ep.address, ep.locality} {
			if !utf8.ValidString(s) {
				return false
			}
		}
		if ep.address == "" || ep.port > 65535 {
			return false
		}
	}
	return true
}

// TestLoadAssignmentFieldNumbers: the field numbers encodeLoadAssignment writes are those of
// the messages' descriptors.
func TestLoadAssignmentFieldNumbers(t *testing.T) {
	checks := []struct {
		msg   proto.Message
		field string
		num   int
	}{
		{&endpointpb.ClusterLoadAssignment{}, "cluster_name", claClusterName},
		{&endpointpb.ClusterLoadAssignment{}, "endpoints", claEndpoints},
		{&endpointpb.LocalityLbEndpoints{}, "locality", lleLocality},
		{&endpointpb.LocalityLbEndpoints{}, "lb_endpoints", lleLbEndpoints},
		{&endpointpb.LocalityLbEndpoints{}, "load_balancing_weight", lleWeight},
		{&corepb.Locality{}, "region", localityRegion},
		{&corepb.Locality{}, "zone", localityZone},
		{&corepb.Locality{}, "sub_zone", localitySub},
		{&endpointpb.LbEndpoint{}, "endpoint", lbeEndpoint},
		{&endpointpb.LbEndpoint{}, "load_balancing_weight", lbeWeight},
		{&endpointpb.Endpoint{}, "address", endpointAddr},
		{&corepb.Address{}, "socket_address", addressSocket},
		{&corepb.SocketAddress{}, "address", socketAddr},
		{&corepb.SocketAddress{}, "port_value", socketPort},
		{&wrapperspb.UInt32Value{}, "value", wrapperValue},
	}
	for _, c := range checks {
		d := c.msg.ProtoReflect().Descriptor()
		f := d.Fields().ByName(protoreflect.Name(c.field))
		if f == nil || int(f.Number()) != c.num {
			t.Errorf("%s.%s is field %v, the encoder writes %d", d.FullName(), c.field, f.Number(), c.num)
		}
	}
}

// BenchmarkLoadAssignment: a load assignment of 10 endpoints with three labels each, encoded
// directly and built, validated and marshalled.
func BenchmarkLoadAssignment(b *testing.B) {
	ws := make([]workload, 10)
	eps := make([]endpoint, 10)
	for i := range ws {
		ws[i] = workload{address: fmt.Sprintf("10.0.0.%d", i+1), locality: fmt.Sprintf("region/zone-%d", i%3),
			labels: labelsOf(map[string]string{"app": "svc", "version": "v1", "topology.kubernetes.io/zone": fmt.Sprint("zone-", i%3)})}
		eps[i] = endpoint{workload: &ws[i], port: 8080}
	}
	const name = "outbound|8080||svc.ns.example"
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := encodeLoadAssignment(name, eps); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("built", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := loadAssignment(name, eps)
			if err := m.ValidateAll(); err != nil {
				b.Fatal(err)
			}
			if _, err := store.EncodeMessage(name, EndpointType, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
