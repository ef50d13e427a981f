package app

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
)

// A real istiod reading the bridge as its xds:// config source was disconnected every ~2
// minutes: its client pings more often than gRPC's default server enforcement allows (one
// ping per 5 minutes, none without streams), so the server ended the connection with GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings". The bridge accepts pings at the configured interval,
// also on connections without streams. The test pings at a scaled-down rate: a min interval
// of 50ms and a ping every 250ms (room for a late tick), on an idle connection, for 2 seconds.
func TestKeepaliveAcceptsIstiodPingRate(t *testing.T) {
	b := start(t, func(c *Config) { c.GRPC.Keepalive.MinPingInterval = 50 * time.Millisecond })
	if goaway := pingEvery(t, b.grpcAddr, 250*time.Millisecond, 2*time.Second); goaway != nil {
		t.Fatalf("the bridge ended an idle connection pinging every 250ms: GOAWAY %v %q", goaway.ErrCode, goaway.DebugData())
	}
}

// The same pings against a gRPC server with gRPC's default enforcement are refused: the
// test above would see it.
func TestKeepalivePingRateIsRefusedByGRPCDefaults(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go srv.Serve(lis)
	defer srv.Stop()
	goaway := pingEvery(t, lis.Addr().String(), 250*time.Millisecond, 2*time.Second)
	if goaway == nil || goaway.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("want GOAWAY ENHANCE_YOUR_CALM from gRPC's defaults, got %v", goaway)
	}
}

// The defaults accept what real clients send: grpc-go's shortest keepalive (10s), without
// streams; and they ping idle connections.
func TestKeepaliveDefaultsAcceptGRPCClients(t *testing.T) {
	k := DefaultConfig().GRPC.Keepalive
	if k.MinPingInterval > 10*time.Second || k.Time <= 0 || k.Timeout <= 0 {
		t.Fatalf("keepalive defaults %+v refuse a grpc-go client pinging every 10s, or never ping", k)
	}
}

// pingEvery opens a raw HTTP/2 connection with no stream and sends a PING every interval
// for the given time, answering the server's SETTINGS and PINGs. It returns the GOAWAY the
// server sent, or nil.
func pingEvery(t *testing.T, addr string, interval, total time.Duration) *http2.GoAwayFrame {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	framer := http2.NewFramer(conn, bufio.NewReader(conn))
	var writeMu sync.Mutex // the framer's writes are not safe for concurrent use
	if err := framer.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	goaway := make(chan *http2.GoAwayFrame, 1)
	go func() { // the reader: answers SETTINGS, reports a GOAWAY
		defer close(goaway)
		for {
			f, err := framer.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					writeMu.Lock()
					framer.WriteSettingsAck()
					writeMu.Unlock()
				}
			case *http2.GoAwayFrame:
				goaway <- f
				return
			}
		}
	}()
	deadline := time.After(total)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var data [8]byte
	for {
		select {
		case f := <-goaway:
			return f
		case <-deadline:
			conn.Close()
			if f, ok := <-goaway; ok {
				return f
			}
			return nil
		case <-tick.C:
			data[0]++
			writeMu.Lock()
			err := framer.WritePing(false, data)
			writeMu.Unlock()
			if err != nil && !errors.Is(err, net.ErrClosed) {
				t.Logf("ping: %v", err)
			}
		}
	}
}
