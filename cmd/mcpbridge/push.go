package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink"
)

func newPushCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "push [--addr HOST:PORT] [flags] PATH...",
		Short: "Push files of Istio YAML to a ResourceSink, as an MCP source",
		Long: `Push files and directories of Istio YAML (read as serve's file source reads them) to an
istio.mcp.v1alpha1.ResourceSink: mcpbridge's own, or any other. push dials ADDR, waits for
the sink's requests, and answers each collection the sink asks for with the files' full state
of it (empty when the files hold none: the files are this producer's whole state). It prints
the sink's ACK or NACK per collection, and names the collections the files hold that the sink
did not ask for.

With --watch it keeps the stream open and pushes again whenever the files change, until
SIGINT (exit 0); a faulty file is reported and its last good state stays pushed. A sink that
ends the stream ends push --watch (exit 1): run it under a supervisor to retry.

Exit status: 0 when every collection was ACKed; 1 for any NACK, a fault in the files, or a
failure (no connection, no answer within --timeout); 2 for a bad command line.`,
		Example: `  mcpbridge push examples/
  mcpbridge push --addr bridge.mesh:15010 --producer-id team-a --watch mesh/`,
		Args: cobra.MinimumNArgs(1),
		RunE: runPush,
	}
	fs := cmd.Flags()
	addAddrFlag(fs, "address of the ResourceSink to push to: the bridge's gRPC port, or any MCP sink", "to")
	fs.String("producer-id", "", "sent as the mcp-producer-id metadata: the sink stores what is pushed under this producer")
	fs.Duration("timeout", 10*time.Second, "how long to wait for the sink: the stream, then (without --watch) its requests and every answer")
	fs.Bool("watch", false, "keep pushing on every change of the files, until SIGINT")
	fs.Bool("allow-empty", false, "push files that hold no resource: the sink then removes everything this producer holds")
	addDialFlags(fs)
	return cmd
}

func runPush(cmd *cobra.Command, paths []string) error {
	fs := cmd.Flags()
	timeout, _ := fs.GetDuration("timeout")
	watch, _ := fs.GetBool("watch")
	producerID, _ := fs.GetString("producer-id")
	allowEmpty, _ := fs.GetBool("allow-empty")
	if timeout <= 0 {
		return usageError{fmt.Errorf("--timeout: must be positive, got %s", timeout)}
	}
	if err := checkPaths(paths); err != nil {
		return err
	}
	if err := resolveAddr(fs); err != nil {
		return err
	}
	conn, err := dialFlags(fs, "addr")
	if err != nil {
		return err
	}
	defer conn.Close()
	addr, _ := fs.GetString("addr")
	// File faults go to stderr as they are found (with --watch, as files change).
	f := newFiles(paths, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	p := &pusher{out: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(), addr: addr, files: f, timeout: timeout, watch: watch, allowEmpty: allowEmpty}
	ctx := cmd.Context()
	if producerID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, sink.ProducerIDKey, producerID)
	}
	if !watch {
		faults, err := f.loadOnce()
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		if len(faults) > 0 {
			return fmt.Errorf("push: %d fault%s in the files (see above); nothing was pushed", len(faults), plural(len(faults)))
		}
		if err := p.checkEmpty(); err != nil {
			return err
		}
		return p.once(ctx, mcp.NewResourceSinkClient(conn))
	}
	return p.follow(ctx, mcp.NewResourceSinkClient(conn))
}

// pusher is one push stream: it answers the sink's requests with the files' state.
type pusher struct {
	out, stderr io.Writer
	addr        string
	files       *files
	timeout     time.Duration
	watch       bool
	allowEmpty  bool // push files that hold nothing (the sink removes all the producer holds)

	stream   grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources]
	asked    map[string]string // the sink's name of each collection asked → canonical
	pushed   map[string]uint64 // canonical → the files' revision last pushed
	inflight map[string]pushed // by nonce
	nonce    int
	nacks    int
	acks     int
}

// pushed is a push awaiting its answer.
type pushed struct {
	collection string // as the sink named it
	resources  int
}

type recvd struct {
	req *mcp.RequestResources
	err error
}

// open starts the stream and its receiver. The receiver ends with the stream.
func (p *pusher) open(ctx context.Context, client mcp.ResourceSinkClient) (<-chan recvd, error) {
	stream, err := client.EstablishResourceStream(ctx)
	if err != nil {
		return nil, rpcError("push: open a stream to "+p.addr, err)
	}
	p.stream = stream
	p.asked, p.pushed, p.inflight = map[string]string{}, map[string]uint64{}, map[string]pushed{}
	ch := make(chan recvd)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case ch <- recvd{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch, nil
}

// once pushes every asked collection and waits for every answer. The sink sends its requests
// as the stream opens, before it answers anything, so once every push is answered every
// request has been seen: the stream is in order.
//
// The timeout is a timer of push's, not a deadline on the stream: a deadline would travel to
// the sink (grpc-timeout), which may end the stream first, and the reason would be lost.
func (p *pusher) once(ctx context.Context, client mcp.ResourceSinkClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var expired atomic.Bool
	timer := time.AfterFunc(p.timeout, func() { expired.Store(true); cancel() })
	defer timer.Stop()
	reqs, err := p.open(ctx, client)
	if err != nil {
		return p.failed(err, &expired)
	}
	for len(p.asked) == 0 || len(p.inflight) > 0 {
		select {
		case r := <-reqs:
			if r.err != nil {
				return p.failed(rpcError("push: stream to "+p.addr, r.err), &expired)
			}
			if err := p.handle(r.req); err != nil {
				return err
			}
		case <-ctx.Done():
			return p.failed(errors.New("push: interrupted before every collection was answered"), &expired)
		}
	}
	p.reportUnasked()
	if p.nacks > 0 {
		return fmt.Errorf("push: %d of %d collections NACKed by %s", p.nacks, p.nacks+p.acks, p.addr)
	}
	return nil
}

// failed names the timeout when it is why the stream ended.
func (p *pusher) failed(err error, expired *atomic.Bool) error {
	if expired.Load() {
		return p.timedOut()
	}
	return err
}

func (p *pusher) timedOut() error {
	if p.stream == nil {
		return fmt.Errorf("push: no stream to %s within --timeout %s", p.addr, p.timeout)
	}
	if len(p.asked) == 0 {
		return fmt.Errorf("push: %s asked for no collection within --timeout %s", p.addr, p.timeout)
	}
	var waiting []string
	for _, c := range p.inflight {
		waiting = append(waiting, c.collection)
	}
	slices.Sort(waiting)
	return fmt.Errorf("push: no answer from %s within --timeout %s for %v", p.addr, p.timeout, waiting)
}

// follow runs the file source and pushes every change until ctx ends (SIGINT): exit 0.
func (p *pusher) follow(ctx context.Context, client mcp.ResourceSinkClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcErr := make(chan error, 1)
	go func() { srcErr <- p.files.source.Run(ctx) }()
	select {
	case <-p.files.source.Ready():
	case err := <-srcErr:
		return fmt.Errorf("push: %w", err)
	}
	if err := p.checkEmpty(); err != nil {
		return err
	}
	changed := p.files.store.Watch()
	defer changed.Close()
	// --timeout bounds the connection; after that, the stream lives until SIGINT.
	var expired atomic.Bool
	timer := time.AfterFunc(p.timeout, func() { expired.Store(true); cancel() })
	reqs, err := p.open(ctx, client)
	if !timer.Stop() || err != nil {
		return p.failed(err, &expired)
	}
	for {
		select {
		case r := <-reqs:
			if r.err != nil {
				return rpcError("push: stream to "+p.addr, r.err)
			}
			if err := p.handle(r.req); err != nil {
				return err
			}
		case <-changed.C():
			if err := p.pushChanged(); err != nil {
				return err
			}
		case err := <-srcErr:
			if err != nil {
				return fmt.Errorf("push: %w", err)
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// handle is one request of the sink: a new subscription is answered with a push; an answer
// to a push is printed.
func (p *pusher) handle(req *mcp.RequestResources) error {
	name := req.GetCollection()
	if nonce := req.GetResponseNonce(); nonce != "" {
		sent, ok := p.inflight[nonce]
		if !ok {
			return nil // an answer to something this stream did not send
		}
		delete(p.inflight, nonce)
		if d := req.GetErrorDetail(); d != nil {
			p.nacks++
			fmt.Fprintf(p.out, "NACK %s: %s\n", sent.collection, d.GetMessage())
			return nil
		}
		p.acks++
		fmt.Fprintf(p.out, "ACK  %s (%d resource%s)\n", sent.collection, sent.resources, plural(sent.resources))
		return nil
	}
	if name == "" {
		return nil
	}
	p.asked[name] = kinds.CanonicalCollection(name)
	return p.push(name)
}

// push sends the files' full state of one collection, under the sink's name for it.
func (p *pusher) push(name string) error {
	canonical := p.asked[name]
	rev, entries := p.files.store.View().Snapshot(canonical)
	rs := make([]*mcpapi.Resource, len(entries))
	for i, e := range entries {
		r, err := e.Decode()
		if err != nil {
			return fmt.Errorf("push: %s %s: %w", canonical, e.Name, err) // not reached: the store's own encoding
		}
		rs[i] = r
	}
	p.nonce++
	nonce := strconv.Itoa(p.nonce)
	msg := &mcp.Resources{Collection: name, Nonce: nonce, Resources: rs, SystemVersionInfo: strconv.FormatUint(rev, 10)}
	if err := p.stream.Send(msg); err != nil {
		return rpcError("push: send "+name+" to "+p.addr, err)
	}
	p.inflight[nonce] = pushed{collection: name, resources: len(rs)}
	p.pushed[canonical] = rev
	return nil
}

// pushChanged pushes every asked collection whose files changed since its last push.
func (p *pusher) pushChanged() error {
	if n, _ := p.files.resources(); n == 0 && !p.allowEmpty {
		// Files emptied while followed (a directory cleared, a checkout in progress): the
		// producer's state stays as last pushed.
		fmt.Fprintln(p.stderr, "push: the files hold no resource now; not pushed (--allow-empty pushes it, removing everything this producer holds)")
		return nil
	}
	v := p.files.store.View()
	names := make([]string, 0, len(p.asked))
	for name := range p.asked {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if v.Collection(p.asked[name]).Revision != p.pushed[p.asked[name]] {
			if err := p.push(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkEmpty refuses files that hold no resource unless --allow-empty: their full state would
// make the sink remove everything the producer holds.
func (p *pusher) checkEmpty() error {
	if n, _ := p.files.resources(); n == 0 && !p.allowEmpty {
		return errors.New("push: the files hold no resource: pushing them would remove everything this producer holds in every collection the sink asks for; nothing was pushed (--allow-empty to push them)")
	}
	return nil
}

// reportUnasked names the collections the files hold that the sink did not ask for: their
// resources went nowhere.
func (p *pusher) reportUnasked() {
	asked := map[string]bool{}
	for _, canonical := range p.asked {
		asked[canonical] = true
	}
	for _, c := range p.files.store.View().Collections() {
		if c.Count > 0 && !asked[c.Name] {
			fmt.Fprintf(p.stderr, "warning: %s did not ask for %s: %d resource%s not pushed\n", p.addr, c.Name, c.Count, plural(c.Count))
		}
	}
}
