package source_test

// The model in process: the same schedules as over sockets, every client stream served by the
// real handlers and engine through the synchronous driver (inprocess_test.go), on a fake clock.
// Each request is answered before Send returns, each store write reaches every stream when the
// model says it wrote, and heartbeats fall due when the model moves the clock: no waiting, so
// thousands of schedules run in the time sockets take for a few dozen. The producers push over
// the ResourceSink on loopback, as over sockets (the sink is not the engine under test).

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

// TestEngineAgainstModel runs random schedules against the engine in process, every protocol
// at once. 100 schedules unless -rapid.checks says otherwise (make fuzz-model runs 20,000).
func TestEngineAgainstModel(t *testing.T) {
	defer defaultRapidChecks(100)()
	rapid.Check(t, func(rt *rapid.T) {
		runModel(rt, modelOptions{TTL: 30 * time.Second, New: newInProcessTransport})
	})
}

// inProcessTransport is modelTransport through the engine's synchronous driver.
type inProcessTransport struct {
	t       failer
	p       *inProcess
	sink    *socketTransport // the ResourceSink over loopback, for the producers
	clock   *modelClock
	now     time.Time
	streams []*inProcessModelStream
}

func newInProcessTransport(t failer, s modelServer) modelTransport {
	t.Helper()
	tr := &inProcessTransport{t: t, clock: s.Clock, now: time.Unix(1_000_000_000, 0)}
	tr.p = newInProcess(s.Engine, func(r grpc.ServiceRegistrar) {
		(&xds.Server{Engine: s.Engine, TTL: s.TTL}).Register(r)
		mcp.RegisterResourceSourceServer(r, &source.ResourceSource{Engine: s.Engine})
		mcp.RegisterAggregatedMeshConfigServiceServer(r, &source.AggregatedMeshConfig{Engine: s.Engine})
	})
	tr.sink = newSocketTransport(t, s).(*socketTransport)
	return tr
}

func (tr *inProcessTransport) Open(method string, md map[string]string) (modelStream, error) {
	s, err := tr.p.open(method, string(proto.MessageName(modelResponse(method))), metadata.New(md))
	if err != nil {
		return nil, err
	}
	ms := &inProcessModelStream{tr: tr, in: s}
	tr.streams = append(tr.streams, ms)
	return ms, nil
}

func (tr *inProcessTransport) Producer(id string) modelProducer { return tr.sink.Producer(id) }

// Settle has nothing to wait for: every call answered synchronously.
func (tr *inProcessTransport) Settle() {}

// Written delivers the store's changes to every open stream, at the fake clock's time.
func (tr *inProcessTransport) Written() {
	for _, s := range tr.streams {
		s.deliver(s.in.Changed(tr.now))
	}
}

// Advance moves the fake clock and wakes every stream, as its timer would.
func (tr *inProcessTransport) Advance(d time.Duration) {
	tr.now = tr.now.Add(d)
	for _, s := range tr.streams {
		s.deliver(s.in.Tick(tr.now))
	}
}

func (tr *inProcessTransport) Close() {
	for _, s := range tr.streams {
		s.Close()
	}
	tr.sink.Close() // stops the engine too
}

// inProcessModelStream is one client stream of the model over the driver.
type inProcessModelStream struct {
	tr     *inProcessTransport
	in     *inProcessStream
	sent   int
	got    []arrival
	err    error
	closed bool
}

func (s *inProcessModelStream) deliver(msgs []proto.Message, err error) {
	if s.closed || s.err != nil {
		return
	}
	for _, m := range msgs {
		s.got = append(s.got, arrival{Msg: m, Sent: s.sent, At: s.tr.clock.Now()})
	}
	s.err = err
}

// Send delivers the requests one by one, each answered before the next is read: the driver
// hands the engine one request per event, as its loop does.
func (s *inProcessModelStream) Send(reqs ...proto.Message) error {
	for _, r := range reqs {
		if s.closed || s.err != nil {
			return nil // the server ended the stream: Err says how
		}
		s.sent++
		s.deliver(s.in.Send(r, s.tr.now))
	}
	return nil
}

func (s *inProcessModelStream) Take() []arrival {
	out := s.got
	s.got = nil
	return out
}

func (s *inProcessModelStream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.err == nil {
		s.in.Close()
	}
}

func (s *inProcessModelStream) Err() error {
	if s.closed {
		return nil
	}
	return s.err
}
