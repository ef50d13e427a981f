// Package streamtest is the client side of a bidirectional gRPC stream in tests: it receives
// in the background so that a test can wait for the next response with a deadline, or assert
// that none comes. Buffer holds what a server or command writes while the test reads it.
package streamtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// Wait is how long Recv waits for a response before failing the test.
const Wait = 5 * time.Second

// Client wraps one client stream. Create it with Open.
type Client[Req, Resp any] struct {
	t      testing.TB
	stream grpc.BidiStreamingClient[Req, Resp]
	cancel context.CancelFunc
	got    chan *Resp
	err    error // what ended the stream; read once got is closed
}

// Open starts a stream with open (for example a generated client's method) and receives on it
// until the stream or the test ends.
func Open[Req, Resp any](t testing.TB, open func(context.Context) (grpc.BidiStreamingClient[Req, Resp], error)) *Client[Req, Resp] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := open(ctx)
	if err != nil {
		cancel()
		t.Fatalf("open stream: %v", err)
	}
	c := &Client[Req, Resp]{t: t, stream: stream, cancel: cancel, got: make(chan *Resp, 100)}
	go func() {
		defer close(c.got)
		for {
			m, err := stream.Recv()
			if err != nil {
				c.err = err
				return
			}
			c.got <- m
		}
	}()
	t.Cleanup(c.Close)
	return c
}

// Close ends the stream and waits for its receiver to stop.
func (c *Client[Req, Resp]) Close() {
	c.cancel()
	for range c.got {
	}
}

// CloseSend ends the client's side of the stream: it sends nothing more, and still receives.
func (c *Client[Req, Resp]) CloseSend() {
	c.t.Helper()
	if err := c.stream.CloseSend(); err != nil {
		c.t.Fatalf("close send: %v", err)
	}
}

// Cancel ends the stream without waiting, as a client that goes away does.
func (c *Client[Req, Resp]) Cancel() { c.cancel() }

// Send sends a request or fails the test. io.EOF is not a failure: grpc-go's SendMsg returns
// it when the server has already ended the stream (a refused stream, ended before the
// client's first message is written), and the stream's status is what Recv or Ended report.
func (c *Client[Req, Resp]) Send(r *Req) {
	c.t.Helper()
	if err := c.stream.Send(r); err != nil && !errors.Is(err, io.EOF) {
		c.t.Fatalf("send: %v", err)
	}
}

// Recv returns the next response, failing the test if none comes within Wait.
func (c *Client[Req, Resp]) Recv() *Resp {
	c.t.Helper()
	select {
	case m, ok := <-c.got:
		if !ok {
			c.t.Fatal("stream ended")
		}
		return m
	case <-time.After(Wait):
		c.t.Fatalf("no response within %s", Wait)
	}
	return nil
}

// Quiet asserts that no response arrives for d.
func (c *Client[Req, Resp]) Quiet(d time.Duration) {
	c.t.Helper()
	select {
	case m, ok := <-c.got:
		if ok {
			c.t.Fatalf("unexpected response: %s", describe(m))
		}
		c.t.Fatal("stream ended")
	case <-time.After(d):
	}
}

// Ended waits for the server to end the stream, dropping responses that arrive meanwhile,
// and returns the error it ended with (io.EOF for a clean end); it fails the test if the
// stream is still open after Wait.
func (c *Client[Req, Resp]) Ended() error {
	c.t.Helper()
	timeout := time.After(Wait)
	for {
		select {
		case _, ok := <-c.got:
			if !ok {
				return c.err
			}
		case <-timeout:
			c.t.Fatalf("the stream is still open after %s", Wait)
			return nil
		}
	}
}

// Responses is the channel of responses, for tests that count them.
func (c *Client[Req, Resp]) Responses() <-chan *Resp { return c.got }

func describe(m any) string {
	if s, ok := m.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%+v", m)
}
