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
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/app"
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

Message size: MCP does not announce the largest message a sink accepts; --max-msg-size says
it (mcpbridge's grpc.max_recv_msg_size: 4 MiB unless configured, gRPC's default). Every
message is sized before anything is sent:
  - a collection whose full state fits is sent as one full-state message: the sink replaces
    what this producer held in it, in one step;
  - one that does not fit, where the sink asked for incremental updates (mcpbridge does unless
    sink.incremental is false), is sent as incremental messages, each after the ACK of the one
    before: the files' resources first, then the removal of what the sink listed as held from
    this producer (its initial_resource_versions) and the files no longer hold. The end is the
    files' full state, but not in one step: until the last ACK the sink serves its previous
    state with part of the new one applied over it (nothing the files hold is removed on the
    way). A NACK stops that collection where it is: push again;
  - one that does not fit, where the sink asked for full state, cannot be split (each
    full-state message replaces the one before): push refuses, naming the collection, its size
    and the limit, and sends nothing of any collection.
A sink whose limit is below --max-msg-size ends the stream at the first message over it: push
names that message's collection and the sink's reason.

--dry-run connects, reads what the sink asks for, prints per collection what would be sent
(resources, bytes, messages after splitting, those over --max-msg-size, what the sink would
remove; the names too with -o json or yaml) and ends without sending anything: exit 0 when the
push would be sent, 1 when it would be refused. What the sink would remove is known only for a
collection asked incrementally, where the sink lists what it holds from this producer: MCP has
no other way to ask, so for one asked in full state it is "unknown".

With --watch it keeps the stream open and pushes again whenever the files change, until
SIGINT (exit 0); a faulty file, or a collection grown over --max-msg-size that cannot be
split, is reported and its last good state stays pushed. A sink that ends the stream ends push
--watch (exit 1): run it under a supervisor to retry.

Exit status: 0 when every collection was ACKed; 1 for any NACK, a collection over
--max-msg-size that cannot be split, a fault in the files, or a failure (no connection, no
answer within --timeout); 2 for a bad command line.`,
		Example: `  mcpbridge push examples/
  mcpbridge push --addr bridge.mesh:15010 --producer-id team-a --watch mesh/
  mcpbridge push --producer-id team-a --allow-empty --dry-run -o yaml empty-dir/`,
		Args: cobra.MinimumNArgs(1),
		RunE: runPush,
	}
	fs := cmd.Flags()
	addAddrFlag(fs, "address of the ResourceSink to push to: the bridge's gRPC port, or any MCP sink", "to")
	fs.String("producer-id", "", "sent as the mcp-producer-id metadata: the sink stores what is pushed under this producer")
	fs.Duration("timeout", 10*time.Second, "how long to wait for the sink: the stream, then (without --watch) its requests and every answer")
	fs.Bool("watch", false, "keep pushing on every change of the files, until SIGINT")
	fs.Bool("allow-empty", false, "push files that hold no resource: the sink then removes everything this producer holds")
	fs.Int("max-msg-size", app.DefaultConfig().GRPC.MaxRecvMsgSize, "the sink's receive limit, in bytes (grpc.max_recv_msg_size on mcpbridge): no message sent is larger")
	fs.Bool("dry-run", false, "print what would be sent, and send nothing")
	addOutputFlag(fs, "table", "json", "yaml")
	addDialFlags(fs)
	return cmd
}

// pushOptions are push's flags, checked.
type pushOptions struct {
	timeout    time.Duration
	watch      bool
	allowEmpty bool // push files that hold nothing (the sink removes all the producer holds)
	dryRun     bool
	output     string // of --dry-run
	maxMsg     int    // the sink's receive limit
}

func pushFlags(fs *pflag.FlagSet) (pushOptions, error) {
	var o pushOptions
	o.timeout, _ = fs.GetDuration("timeout")
	o.watch, _ = fs.GetBool("watch")
	o.allowEmpty, _ = fs.GetBool("allow-empty")
	o.dryRun, _ = fs.GetBool("dry-run")
	o.maxMsg, _ = fs.GetInt("max-msg-size")
	var err error
	if o.output, err = outputFormat(fs, "table", "json", "yaml"); err != nil {
		return o, err
	}
	switch {
	case o.timeout <= 0:
		return o, usageError{fmt.Errorf("--timeout: must be positive, got %s", o.timeout)}
	case o.maxMsg <= 0:
		return o, usageError{fmt.Errorf("--max-msg-size: must be a positive number of bytes, got %d", o.maxMsg)}
	case o.dryRun && o.watch:
		return o, usageError{errors.New("--dry-run and --watch: give one")}
	case fs.Changed("output") && !o.dryRun:
		return o, usageError{errors.New("--output goes with --dry-run")}
	}
	return o, nil
}

func runPush(cmd *cobra.Command, paths []string) error {
	fs := cmd.Flags()
	opts, err := pushFlags(fs)
	if err != nil {
		return err
	}
	producerID, _ := fs.GetString("producer-id")
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
	p := &pusher{out: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(), addr: addr, files: f, pushOptions: opts}
	ctx := cmd.Context()
	if producerID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, sink.ProducerIDKey, producerID)
	}
	if !opts.watch {
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

// requestSettle is how long push waits after the sink's latest request for another before it
// plans: MCP marks no end to the requests that open a stream, and a sink sends them as one
// burst (mcpbridge sends them all before it reads anything). Planning every collection first
// lets push refuse before it sends anything, and --dry-run see what the sink asks for.
const requestSettle = 200 * time.Millisecond

// pusher is one push stream: it answers the sink's requests with the files' state.
type pusher struct {
	out, stderr io.Writer
	addr        string
	files       *files
	pushOptions

	stream grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources]
	asked  map[string]string // the sink's name of each collection asked → canonical
	order  []string          // the sink's names, as it asked
	// incremental: the sink's names it asked incremental updates of. held: what the sink listed
	// as held from this producer in those (initial_resource_versions), then what push sent
	// there: the names a split push removes when the files no longer hold them. MCP lets a sink
	// ignore the removal of a name it does not hold, so more names than it holds do no harm.
	incremental map[string]bool
	held        map[string]map[string]bool
	pushed      map[string]uint64    // canonical → the files' revision last planned
	busy        map[string]*delivery // the sink's name → its push under way
	inflight    map[string]sent      // by nonce
	nonce       int
	nacks       int
	acks        int
	// ended: a Send found the stream ended. grpc-go's Send then says only io.EOF; the sink's
	// status comes from Recv, and the error is reported from there.
	ended bool
}

// delivery is one collection's push under way: its messages, each sent after the ACK of the
// one before.
type delivery struct {
	plan  *plan
	next  int  // the index of the next message to send
	again bool // asked for again while under way: push it again once answered
}

// sent is a message awaiting its answer.
type sent struct {
	d    *delivery
	part int // its index in d.plan.parts
	seq  int // the order sent: the sink answers in order
	size int // its size, as the sink's limit counts it
}

func (s sent) describe() string {
	pl := s.d.plan
	if len(pl.parts) == 1 {
		return fmt.Sprintf("%s (%d bytes)", pl.name, s.size)
	}
	return fmt.Sprintf("%s (incremental message %d of %d, %d bytes)", pl.name, s.part+1, len(pl.parts), s.size)
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
	p.asked, p.pushed, p.inflight = map[string]string{}, map[string]uint64{}, map[string]sent{}
	p.incremental, p.held, p.busy = map[string]bool{}, map[string]map[string]bool{}, map[string]*delivery{}
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

// gather reads the requests that open the stream: the first within ctx, then every other that
// follows within requestSettle of the one before.
func (p *pusher) gather(ctx context.Context, reqs <-chan recvd) error {
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case r := <-reqs:
			if r.err != nil {
				return p.streamEnded(r.err)
			}
			if r.req.GetResponseNonce() == "" && r.req.GetCollection() != "" { // nothing was sent: no answer
				p.subscribe(r.req)
				settle.Reset(requestSettle)
			}
		case <-settle.C:
			return nil
		case <-ctx.Done():
			return errors.New("push: interrupted before the sink asked for every collection")
		}
	}
}

// once plans every collection the sink asks for, refuses before sending anything if one cannot
// be sent, then pushes them and waits for every answer. A sink that asks for more once pushing
// started is answered as it asks.
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
	if err := p.gather(ctx, reqs); err != nil {
		return p.failed(err, &expired)
	}
	plans, err := p.planAsked()
	if err != nil {
		return err
	}
	if p.dryRun {
		p.reportUnasked()
		return p.printPlans(plans)
	}
	if err := p.deliverAll(plans); err != nil {
		return err
	}
	for len(p.inflight) > 0 {
		select {
		case r := <-reqs:
			if r.err != nil {
				return p.failed(p.streamEnded(r.err), &expired)
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
	if len(p.inflight) == 0 {
		return fmt.Errorf("push: %s was still asking for collections when --timeout %s ended; nothing was pushed", p.addr, p.timeout)
	}
	var waiting []string
	for _, s := range p.inflight {
		waiting = append(waiting, s.describe())
	}
	slices.Sort(waiting)
	return fmt.Errorf("push: no answer from %s within --timeout %s for %v", p.addr, p.timeout, waiting)
}

// streamEnded is the error of a stream the sink ended. It names the oldest message the sink
// had not answered: the sink answers in order, so that is the one it was reading when it
// ended the stream (gRPC ends it with ResourceExhausted at a message over the sink's receive
// limit), not the one push was sending when it noticed (whose Send says only io.EOF).
func (p *pusher) streamEnded(err error) error {
	why, code := "it gave no reason (EOF)", codes.OK
	if !errors.Is(err, io.EOF) {
		s := status.Convert(err)
		why, code = fmt.Sprintf("%s (%s)", s.Message(), s.Code()), s.Code()
	}
	oldest, ok := p.oldest()
	if !ok {
		return fmt.Errorf("push: %s ended the stream: %s", p.addr, why)
	}
	msg := fmt.Sprintf("push: %s ended the stream before answering %s: %s", p.addr, oldest.describe(), why)
	if code == codes.ResourceExhausted {
		msg += fmt.Sprintf("; if that is the sink's receive limit, it is below --max-msg-size %d: lower --max-msg-size to the sink's, or raise the sink's (grpc.max_recv_msg_size on mcpbridge)", p.maxMsg)
	}
	return errors.New(msg)
}

// oldest is the first message sent of those not answered.
func (p *pusher) oldest() (sent, bool) {
	var first sent
	for _, s := range p.inflight {
		if first.d == nil || s.seq < first.seq {
			first = s
		}
	}
	return first, first.d != nil
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
	reqs, err := p.connect(ctx, cancel, client)
	if err != nil {
		return err
	}
	for {
		select {
		case r := <-reqs:
			if r.err != nil {
				return p.streamEnded(r.err)
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

// connect opens the stream and makes the first push of --watch. --timeout bounds it: its
// timer ends follow (cancel); after that, the stream lives until SIGINT.
func (p *pusher) connect(ctx context.Context, cancel context.CancelFunc, client mcp.ResourceSinkClient) (<-chan recvd, error) {
	var expired atomic.Bool
	timer := time.AfterFunc(p.timeout, func() { expired.Store(true); cancel() })
	reqs, err := p.open(ctx, client)
	if err == nil {
		err = p.gather(ctx, reqs)
	}
	if !timer.Stop() || err != nil {
		return nil, p.failed(err, &expired)
	}
	plans, err := p.planAsked()
	if err == nil {
		err = p.deliverAll(plans)
	}
	return reqs, err
}

// handle is one request of the sink: an answer to a push is printed (and the collection's
// next message sent); a new request is answered with a push.
func (p *pusher) handle(req *mcp.RequestResources) error {
	if nonce := req.GetResponseNonce(); nonce != "" {
		return p.answered(nonce, req)
	}
	if req.GetCollection() == "" {
		return nil
	}
	p.subscribe(req)
	return p.start(req.GetCollection())
}

// subscribe records a request of the sink: the collection, whether incremental, and what the
// sink holds from this producer there.
func (p *pusher) subscribe(req *mcp.RequestResources) {
	name := req.GetCollection()
	if _, ok := p.asked[name]; !ok {
		p.order = append(p.order, name)
	}
	p.asked[name] = kinds.CanonicalCollection(name)
	p.incremental[name] = req.GetIncremental()
	if !req.GetIncremental() {
		return
	}
	held := p.held[name]
	if held == nil {
		held = map[string]bool{}
		p.held[name] = held
	}
	for n := range req.GetInitialResourceVersions() {
		held[n] = true
	}
}

// answered is the sink's ACK or NACK of a message push sent.
func (p *pusher) answered(nonce string, req *mcp.RequestResources) error {
	s, ok := p.inflight[nonce]
	if !ok {
		return nil // an answer to something this stream did not send
	}
	delete(p.inflight, nonce)
	d := s.d
	if detail := req.GetErrorDetail(); detail != nil {
		p.nacks++
		fmt.Fprintf(p.out, "NACK %s%s: %s\n", d.plan.name, d.plan.nackNote(s.part), detail.GetMessage())
		return p.finish(d, false)
	}
	if d.next < len(d.plan.parts) {
		return p.sendNext(d)
	}
	p.acks++
	fmt.Fprintf(p.out, "ACK  %s (%s)\n", d.plan.name, d.plan.ackNote())
	return p.finish(d, true)
}

// finish ends a collection's push: once ACKed, the sink holds exactly the files' state there.
// If the collection changed or was asked for again meanwhile, it is pushed again.
func (p *pusher) finish(d *delivery, acked bool) error {
	name := d.plan.name
	delete(p.busy, name)
	if acked && p.incremental[name] {
		p.held[name] = d.plan.nameSet()
	}
	if d.again || p.files.store.View().Collection(p.asked[name]).Revision != p.pushed[p.asked[name]] {
		return p.repush(name)
	}
	return nil
}

// start pushes the files' state of one collection, unless a push of it is under way: then it
// is pushed again once that one is answered (one push of a collection at a time, in order).
func (p *pusher) start(name string) error {
	if d := p.busy[name]; d != nil {
		d.again = true
		return nil
	}
	pl, err := p.plan(name)
	if err != nil {
		return err
	}
	if pl.refused != nil {
		return fmt.Errorf("push: %w; it was not pushed: %s", pl.refused, raiseLimit)
	}
	return p.deliver(pl)
}

// deliverAll pushes every plan, or, if one is refused, nothing.
func (p *pusher) deliverAll(plans []*plan) error {
	var refused []error
	for _, pl := range plans {
		if pl.refused != nil {
			refused = append(refused, pl.refused)
		}
	}
	switch len(refused) {
	case 0:
	case 1:
		return fmt.Errorf("push: %w; nothing was pushed: %s", refused[0], raiseLimit)
	default:
		return fmt.Errorf("push: %w (and %d more collections: see --dry-run); nothing was pushed: %s", refused[0], len(refused)-1, raiseLimit)
	}
	for _, pl := range plans {
		if err := p.deliver(pl); err != nil {
			return err
		}
	}
	return nil
}

func (p *pusher) deliver(pl *plan) error {
	d := &delivery{plan: pl}
	p.busy[pl.name] = d
	p.pushed[pl.canonical] = pl.revision
	if p.incremental[pl.name] && len(pl.parts) > 1 {
		// Until the last ACK the sink may hold any of these: a later push removes them too
		// if the files drop them.
		for _, n := range pl.names {
			p.held[pl.name][n] = true
		}
	}
	return p.sendNext(d)
}

// sendNext sends a collection's next message.
func (p *pusher) sendNext(d *delivery) error {
	if p.ended {
		return nil // the stream is over: Recv reports why
	}
	msg := d.plan.parts[d.next]
	p.nonce++
	msg.Nonce = strconv.Itoa(p.nonce)
	p.inflight[msg.Nonce] = sent{d: d, part: d.next, seq: p.nonce, size: proto.Size(msg)}
	d.next++
	if err := p.stream.Send(msg); err != nil {
		if errors.Is(err, io.EOF) {
			p.ended = true // the sink ended the stream, maybe at an earlier message: Recv says why
			return nil
		}
		return rpcError("push: send "+d.plan.name+" to "+p.addr, err)
	}
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
	for _, name := range p.order {
		if v.Collection(p.asked[name]).Revision != p.pushed[p.asked[name]] {
			if err := p.repush(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// repush pushes a collection again: it changed while followed, or the sink asked for it again
// while it was being pushed. One grown over the limit is reported and not pushed: its last
// pushed state stays, as a faulty file's does.
func (p *pusher) repush(name string) error {
	if d := p.busy[name]; d != nil {
		d.again = true
		return nil
	}
	pl, err := p.plan(name)
	if err != nil {
		return err
	}
	if pl.refused != nil {
		p.pushed[pl.canonical] = pl.revision // reported once per change
		fmt.Fprintf(p.stderr, "push: %v; not pushed, its last pushed state stays: %s\n", pl.refused, raiseLimit)
		return nil
	}
	return p.deliver(pl)
}

// checkEmpty refuses files that hold no resource unless --allow-empty: their full state would
// make the sink remove everything the producer holds.
func (p *pusher) checkEmpty() error {
	if n, _ := p.files.resources(); n == 0 && !p.allowEmpty {
		return errors.New("push: the files hold no resource: pushing them would remove everything this producer holds in every collection the sink asks for; nothing was pushed (--allow-empty to push them; with --dry-run too, to see what that would remove)")
	}
	return nil
}

// reportUnasked names the collections the files hold that the sink did not ask for: their
// resources went nowhere.
func (p *pusher) reportUnasked() {
	for _, c := range p.unasked() {
		fmt.Fprintf(p.stderr, "warning: %s did not ask for %s: %d resource%s not pushed\n", p.addr, c.Collection, c.Resources, plural(c.Resources))
	}
}

func (p *pusher) unasked() []planUnasked {
	asked := map[string]bool{}
	for _, canonical := range p.asked {
		asked[canonical] = true
	}
	var out []planUnasked
	for _, c := range p.files.store.View().Collections() {
		if c.Count > 0 && !asked[c.Name] {
			out = append(out, planUnasked{Collection: c.Name, Resources: c.Count})
		}
	}
	return out
}

// --- planning: the messages of a collection's push, sized against --max-msg-size
