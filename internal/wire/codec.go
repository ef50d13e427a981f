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
//
// Buf, when set, holds Body's bytes and one reference to them that belongs to this send: the
// Codec hands it to gRPC, which frees it once the message is written, and the bytes may then
// be reused. Whoever sends a Frame with a Buf through anything other than the Codec, or
// rewrites its Body, leaves the reference unfreed, which only keeps the bytes from reuse; one
// who keeps the Frame past the send must not read Body: a gRPC stats handler that keeps
// OutPayload.Payload, or gRPC's tracing (the source encodes into plain bytes while
// grpc.EnableTracing is on).
type Frame struct {
	Body []byte
	Buf  mem.Buffer
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
		// A Body without a Buf goes as a SliceBuffer, whose Free is a no-op, so gRPC releasing
		// it leaves Body intact for the other streams that share it. A Buf carries the send's
		// own reference, which gRPC frees after the write.
		body := mem.Buffer(mem.SliceBuffer(f.Body))
		if f.Buf != nil {
			body = f.Buf
		}
		if len(f.Tail) == 0 {
			return mem.BufferSlice{body}, nil
		}
		return mem.BufferSlice{body, mem.SliceBuffer(f.Tail)}, nil
	}
	return protoCodec.Marshal(v)
}

func (Codec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

func (Codec) Name() string { return proto.Name }
