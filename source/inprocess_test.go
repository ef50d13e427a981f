package source_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/source"
)

// The in-process transport of the engine's tests: the real gRPC handlers (source/xds, the MCP
// services) over streams that are not sockets, each driven synchronously by the test through
// source.SyncStream (export_test.go). A request is the client's own protobuf message, marshalled
// and unmarshalled into the handler's as gRPC would; a response is the bytes the engine gave
// gRPC, unmarshalled into the response message. When Send returns, every response the request
// made has been read.

// inProcess serves the services registered with it over in-process streams.
type inProcess struct {
	eng     *source.Engine
	methods map[string]inProcessMethod // by full method name, "/service/method"
	opened  chan *source.SyncStream
}

type inProcessMethod struct {
	impl    any
	handler grpc.StreamHandler
}

// newInProcess drives every stream eng serves from now on; register registers the services
// (as on a grpc.Server: xds.Server.Register, mcp.RegisterResourceSourceServer...).
func newInProcess(eng *source.Engine, register func(grpc.ServiceRegistrar)) *inProcess {
	p := &inProcess{eng: eng, methods: map[string]inProcessMethod{}, opened: make(chan *source.SyncStream, 1)}
	register(p)
	source.DriveStreams(eng, func(ss *source.SyncStream) { p.opened <- ss })
	return p
}

// RegisterService is grpc.ServiceRegistrar's: it keeps each streaming method's handler.
func (p *inProcess) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, st := range desc.Streams {
		p.methods["/"+desc.ServiceName+"/"+st.StreamName] = inProcessMethod{impl: impl, handler: st.Handler}
	}
}

// open starts a stream of method, whose responses are messages of respType (a full name such
// as envoy.service.discovery.v3.DeltaDiscoveryResponse). md is the client's metadata.
func (p *inProcess) open(method, respType string, md metadata.MD) (*inProcessStream, error) {
	m, ok := p.methods[method]
	if !ok {
		return nil, fmt.Errorf("no method %s", method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(respType))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(peer.NewContext(metadata.NewIncomingContext(context.Background(), md),
		&peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}}))
	s := &inProcessStream{ctx: ctx, cancel: cancel, respType: mt, done: make(chan error, 1)}
	go func() { s.done <- m.handler(m.impl, s) }()
	select {
	case s.ss = <-p.opened:
		return s, nil
	case err := <-s.done:
		cancel()
		return nil, fmt.Errorf("stream refused: %w", err)
	case <-time.After(5 * time.Second):
		cancel()
		return nil, fmt.Errorf("stream of %s never opened", method)
	}
}

// inProcessStream is both ends of one stream: the client's (Send, Close) and the server's
// (grpc.ServerStream, which the handler uses).
type inProcessStream struct {
	ctx      context.Context
	cancel   context.CancelFunc
	ss       *source.SyncStream
	respType protoreflect.MessageType
	done     chan error // the handler's return

	mu     sync.Mutex
	queued [][]byte        // requests not yet read by the handler
	got    []proto.Message // responses not yet taken by the client
	ended  error           // the stream ended with this (nil while it goes on)
}

// Send delivers one request at now and returns the responses it made. err is what ended the
// stream, if it did (the responses before the end are returned too).
func (s *inProcessStream) Send(req proto.Message, now time.Time) ([]proto.Message, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.queued = append(s.queued, b)
	s.mu.Unlock()
	return s.after(s.ss.Receive(now))
}

// Changed delivers the store's changes at now (the test wrote to the store).
func (s *inProcessStream) Changed(now time.Time) ([]proto.Message, error) {
	return s.after(s.ss.Changed(now))
}

// Tick is the stream's timer at now (heartbeats, paced changes).
func (s *inProcessStream) Tick(now time.Time) ([]proto.Message, error) {
	return s.after(s.ss.Tick(now))
}

// NextHeartbeat is when the stream's timer would fire next for heartbeats (zero: never).
func (s *inProcessStream) NextHeartbeat() time.Time { return s.ss.NextHeartbeat() }

func (s *inProcessStream) after(err error) ([]proto.Message, error) {
	if err != nil {
		s.ss.Close(err)
		err = <-s.done
		s.cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	if err != nil {
		s.ended = err
	}
	return got, err
}

// Close ends the stream as a client closing it does.
func (s *inProcessStream) Close() {
	s.ss.Close(nil)
	<-s.done
	s.cancel()
}

// The server's end.

func (s *inProcessStream) Context() context.Context     { return s.ctx }
func (s *inProcessStream) SetHeader(metadata.MD) error  { return nil }
func (s *inProcessStream) SendHeader(metadata.MD) error { return nil }
func (s *inProcessStream) SetTrailer(metadata.MD)       {}

func (s *inProcessStream) RecvMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queued) == 0 {
		return fmt.Errorf("in-process stream: the handler read with no request queued")
	}
	b := s.queued[0]
	s.queued = s.queued[1:]
	return proto.Unmarshal(b, m.(proto.Message))
}

func (s *inProcessStream) SendMsg(m any) error {
	data, err := wire.Codec{}.Marshal(m)
	if err != nil {
		return err
	}
	resp := s.respType.New().Interface()
	if err := proto.Unmarshal(data.Materialize(), resp); err != nil {
		return fmt.Errorf("in-process stream: the response does not parse as %s: %w", s.respType.Descriptor().FullName(), err)
	}
	s.mu.Lock()
	s.got = append(s.got, resp)
	s.mu.Unlock()
	return nil
}
