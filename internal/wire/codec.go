// Package wire encodes responses from pre-marshalled resources and sends them through gRPC
// without marshalling them again.
//
// The store marshals each resource once per version (store.Entry.Bytes). A response to a
// subscriber is then a sequence of length-delimited copies of those bytes plus a few scalar
// fields, which protowire appends directly; the result is one shared Frame body per
// (response, revision range), whatever the number of subscribers, and a per-stream tail that
// holds the nonce (protobuf allows fields in any order, and a parser takes the last value of a
// scalar field). The Codec hands both slices to gRPC as they are.
package wire

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Frame is an already encoded protobuf message: Body is shared between streams and never
// modified; Tail is this stream's own suffix (the nonce).
type Frame struct {
	Body []byte
	Tail []byte
}

// Size is the encoded size of the message.
func (f *Frame) Size() int { return len(f.Body) + len(f.Tail) }

// Codec is gRPC's proto codec, except that a *Frame is sent as its bytes. Install it with
// grpc.ForceServerCodecV2 (servers) or grpc.ForceCodecV2 (clients); it keeps the name "proto"
// so peers see the ordinary content type.
type Codec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*Frame); ok {
		// SliceBuffer's Free is a no-op, so gRPC releasing the slice leaves Body intact for
		// the other streams that share it.
		if len(f.Tail) == 0 {
			return mem.BufferSlice{mem.SliceBuffer(f.Body)}, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(f.Body), mem.SliceBuffer(f.Tail)}, nil
	}
	return protoCodec.Marshal(v)
}

func (Codec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

func (Codec) Name() string { return proto.Name }
