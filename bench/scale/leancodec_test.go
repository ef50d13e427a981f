package scale

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// leanCodec is the benchmark clients' gRPC codec: it reads of a delta response only what the
// clients look at (type URL, nonce, removed names, and each resource's name and version), not
// the resources' bodies. The clients stand for proxies on other machines; on the benchmark's
// two cores, decoding every body (110 MB at 100,000 ServiceEntries, in every one of 10,000
// idle streams' first responses) would take the CPU the bridge is measured on.
type leanCodec struct{}

func (leanCodec) Name() string { return "proto" }

func (leanCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (leanCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*discovery.DeltaDiscoveryResponse)
	if !ok {
		return proto.Unmarshal(data.Materialize(), v.(proto.Message))
	}
	// Read from a pooled buffer, freed once read: readDelta copies what it keeps, and a
	// response's bytes (hundreds of megabytes at a million) were garbage for this process's
	// collector, which shares the machine with the bridge.
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return readDelta(buf.ReadOnlyData(), m)
}

var _ encoding.CodecV2 = leanCodec{}

// withLeanCodec makes a client connection read delta responses with leanCodec.
func withLeanCodec() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(leanCodec{}))
}

// Field numbers of DeltaDiscoveryResponse and of its Resource, from the descriptors.
var (
	deltaTypeURL   = fieldNumber(&discovery.DeltaDiscoveryResponse{}, "type_url")
	deltaNonce     = fieldNumber(&discovery.DeltaDiscoveryResponse{}, "nonce")
	deltaResources = fieldNumber(&discovery.DeltaDiscoveryResponse{}, "resources")
	deltaRemoved   = fieldNumber(&discovery.DeltaDiscoveryResponse{}, "removed_resources")
	resourceName   = fieldNumber(&discovery.Resource{}, "name")
	resourceVer    = fieldNumber(&discovery.Resource{}, "version")
)

func fieldNumber(m proto.Message, name string) protowire.Number {
	f := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("%T has no field %s", m, name))
	}
	return f.Number()
}

// readDelta reads the lean part of a delta response.
func readDelta(b []byte, m *discovery.DeltaDiscoveryResponse) error {
	return eachField(b, func(n protowire.Number, v []byte) error {
		switch n {
		case deltaTypeURL:
			m.TypeUrl = string(v)
		case deltaNonce:
			m.Nonce = string(v)
		case deltaRemoved:
			m.RemovedResources = append(m.RemovedResources, string(v))
		case deltaResources:
			r := &discovery.Resource{}
			if err := eachField(v, func(n protowire.Number, v []byte) error {
				switch n {
				case resourceName:
					r.Name = string(v)
				case resourceVer:
					r.Version = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			m.Resources = append(m.Resources, r)
		}
		return nil
	})
}

// eachField calls f with each length-delimited field of a message encoding.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if typ != protowire.BytesType {
			l = protowire.ConsumeFieldValue(n, typ, b)
			if l < 0 {
				return protowire.ParseError(l)
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		if err := f(n, v); err != nil {
			return err
		}
		b = b[l:]
	}
	return nil
}

// TestLeanCodecReadsWhatTheClientsLookAt: the lean reading of a delta response has the same
// type URL, nonce, removed names, and resource names and versions as a full decoding.
func TestLeanCodecReadsWhatTheClientsLookAt(t *testing.T) {
	full := &discovery.DeltaDiscoveryResponse{TypeUrl: seType, Nonce: "7", RemovedResources: []string{"ns/gone"},
		SystemVersionInfo: "3", Resources: []*discovery.Resource{
			{Name: "ns/a", Version: "v1", Resource: &anypb.Any{TypeUrl: "x", Value: []byte("body")}},
			{Name: "ns/b", Version: "v2"}}}
	b, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var lean discovery.DeltaDiscoveryResponse
	if err := (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &lean); err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(full).(*discovery.DeltaDiscoveryResponse)
	want.SystemVersionInfo = ""
	for _, r := range want.Resources {
		r.Resource = nil
	}
	if !proto.Equal(&lean, want) {
		t.Fatalf("lean %v, want %v", &lean, want)
	}
}
