package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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
did not ask for. Files with a fault are not pushed at all (a broken file would contribute
nothing, and the sink would remove what it held from it); neither are files that hold no
resource, without --allow-empty.

The sink's opening requests: MCP marks no end to them, so push waits until 200 ms pass without
another before it plans and sends anything. That wait is best effort: a request arriving later
(a slow sink, or one that asks later) is answered as it comes, without the guarantee that
push refuses before sending anything of any collection.

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
    way), and so briefly holds the old resources and the new together, which can exceed a
    per-producer limit the full state fits (limits.resources_per_producer on mcpbridge). A NACK
    stops that collection where it is; so do the timeout, SIGINT, and a stream that ends, and
    the error then names each collection left part applied: push again;
  - one that does not fit, where the sink asked for full state, cannot be split (each
    full-state message replaces the one before): push refuses, naming the collection, its size
    and the limit, and sends nothing of any collection.
A sink whose limit is below --max-msg-size ends the stream at the first message over it: push
names that message's collection and the sink's reason. Push itself accepts messages of up to
--max-recv-msg-size from the sink (256 MiB, not gRPC's 4 MiB: a sink's opening request lists
every name it holds from this producer).

--dry-run connects, reads what the sink asks for, prints per collection what would be sent
(resources, bytes, messages after splitting, those over --max-msg-size, what the sink would
remove; the names too with -o json or yaml) and ends without sending anything: exit 0 when the
push would be sent, 1 when it would be refused. What the sink would remove is known only for a
collection asked incrementally, where the sink lists what it holds from this producer: MCP has
no other way to ask, so for one asked in full state it is "unknown".

With --watch it keeps the stream open and pushes again whenever the files change, until
SIGINT (exit 0). It starts only from files without a fault (as without --watch); once
started, a faulty file, files emptied (without --allow-empty), or a collection grown over
--max-msg-size that cannot be split, is reported and its last good state stays pushed. A sink
that ends the stream ends push --watch (exit 1): run it under a supervisor to retry.

--timeout bounds each wait for the sink: for the stream, for its first request, and (without
--watch) for each answer, the timer starting again at every message from the sink; so a
collection split into many messages may take longer than --timeout in all.

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
	fs.Duration("timeout", 10*time.Second, "how long to wait for the sink, each time: for the stream, then (without --watch) for its requests and for every answer")
	fs.Bool("watch", false, "keep pushing on every change of the files, until SIGINT")
	fs.Bool("allow-empty", false, "push files that hold no resource: the sink then removes everything this producer holds")
	fs.Int("max-msg-size", app.DefaultConfig().GRPC.MaxRecvMsgSize, "the sink's receive limit, in bytes (grpc.max_recv_msg_size on mcpbridge): no message sent is larger")
	fs.Int("max-recv-msg-size", defaultWatchRecvSize, "largest message accepted from the sink, in bytes: its opening requests list every name it holds from this producer")
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
	maxRecv    int    // push's own receive limit
}

func pushFlags(fs *pflag.FlagSet) (pushOptions, error) {
	var o pushOptions
	o.timeout, _ = fs.GetDuration("timeout")
	o.watch, _ = fs.GetBool("watch")
	o.allowEmpty, _ = fs.GetBool("allow-empty")
	o.dryRun, _ = fs.GetBool("dry-run")
	o.maxMsg, _ = fs.GetInt("max-msg-size")
	o.maxRecv, _ = fs.GetInt("max-recv-msg-size")
	var err error
	if o.output, err = outputFormat(fs, "table", "json", "yaml"); err != nil {
		return o, err
	}
	switch {
	case o.timeout <= 0:
		return o, usageError{fmt.Errorf("--timeout: must be positive, got %s", o.timeout)}
	case o.maxMsg <= 0:
		return o, usageError{fmt.Errorf("--max-msg-size: must be a positive number of bytes, got %d", o.maxMsg)}
	case o.maxRecv <= 0:
		return o, usageError{fmt.Errorf("--max-recv-msg-size: must be a positive number of bytes, got %d", o.maxRecv)}
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
	// gRPC's default receive limit, 4 MiB, is too small for the opening request of a sink that
	// holds tens of thousands of names from this producer (its initial_resource_versions).
	conn, err := dialFlags(fs, "addr", grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.maxRecv)))
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
			return faultsRefused(len(faults))
		}
		if err := p.checkEmpty(); err != nil {
			return err
		}
		return p.once(ctx, mcp.NewResourceSinkClient(conn))
	}
	return p.follow(ctx, mcp.NewResourceSinkClient(conn))
}

// faultsRefused is the refusal of files with faults: a broken file contributes nothing, so
// their full state would make the sink remove what it holds from that file.
func faultsRefused(n int) error {
	return fmt.Errorf("push: %d fault%s in the files (see above); nothing was pushed", n, plural(n))
}

// requestSettle is how long push waits after the sink's latest request for another before it
// plans: MCP marks no end to the requests that open a stream, and a sink sends them as one
// burst (mcpbridge sends them all before it reads anything). Planning every collection first
// lets push refuse before it sends anything, and --dry-run see what the sink asks for. It is
// best effort: a request later than that is answered as it comes (start).
const requestSettle = 200 * time.Millisecond

// pusher is one push stream: it answers the sink's requests with the files' state.
type pusher struct {
	out, stderr io.Writer
	addr        string
	files       *files
	pushOptions

	stream grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources]
	// deadline is --timeout while it runs: through once, and through connect of --watch.
	deadline *deadline
	asked    map[string]string // the sink's name of each collection asked → canonical
	order    []string          // the sink's names, as it asked
	// incremental: the sink's names it asked incremental updates of. held: what the sink listed
	// as held from this producer in those (initial_resource_versions), then what push sent
	// there: the names a split push removes when the files no longer hold them. MCP lets a sink
	// ignore the removal of a name it does not hold, so more names than it holds do no harm.
	incremental map[string]bool
	held        map[string]map[string]bool
	// Every map below is keyed by the sink's name of a collection, as asked and held are.
	pushed   map[string]uint64    // the files' revision last planned
	busy     map[string]*delivery // its push under way
	emptied  map[string]bool      // not pushed because the files held nothing: pushed once they do
	inflight map[string]sent      // by nonce
	nonce    int
	nacks    int
	acks     int
	// emptyNoted: the files' emptiness was reported, and not pushed, since they last held anything.
	emptyNoted bool
	// ended: a Send found the stream ended. grpc-go's Send then says only io.EOF; the sink's
	// status comes from Recv, and the error is reported from there.
	ended bool
	// stopped: the push met an error it cannot go on from: nothing more is sent.
	stopped bool
}

// delivery is one collection's push under way: its messages, each sent after the ACK of the
// one before.
type delivery struct {
	plan    *plan
	next    int  // the index of the next message to send
	waiting bool // the message before next is sent and not answered
	again   bool // asked for again while under way: push it again once answered
}

// partial says, for a split push stopped before its end, how far it went; "" when none of it
// was sent.
func (d *delivery) partial() string {
	switch {
	case d.waiting:
		return d.plan.stopNote(d.next-1, " unanswered, maybe applied")
	case d.next > 0:
		return d.plan.stopNote(d.next, " not sent")
	}
	return ""
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

// deadline is --timeout: a timer of push's, not a deadline on the stream (a deadline would
// travel to the sink as grpc-timeout, and the sink may end the stream first, the reason lost).
// It cancels the push's context when the sink has been silent for the timeout.
type deadline struct {
	timer   *time.Timer
	d       time.Duration
	expired atomic.Bool // set before the context is cancelled
}

func startDeadline(d time.Duration, cancel context.CancelFunc) *deadline {
	dl := &deadline{d: d}
	dl.timer = time.AfterFunc(d, func() { dl.expired.Store(true); cancel() })
	return dl
}

// heard starts the timer again: the sink sent something. Once expired it stays expired.
func (dl *deadline) heard() {
	if dl != nil && !dl.expired.Load() {
		dl.timer.Reset(dl.d)
	}
}

// stop stops the timer and says whether it expired: a timer whose func is already running has
// expired, even before the func records it.
func (dl *deadline) stop() (expired bool) {
	return !dl.timer.Stop() || dl.expired.Load()
}

func (dl *deadline) hasExpired() bool { return dl != nil && dl.expired.Load() }

// open starts the stream and its receiver. The receiver ends with the stream.
func (p *pusher) open(ctx context.Context, client mcp.ResourceSinkClient) (<-chan recvd, error) {
	stream, err := client.EstablishResourceStream(ctx)
	if err != nil {
		return nil, rpcError("push: open a stream to "+p.addr, err)
	}
	p.stream = stream
	p.asked, p.pushed, p.inflight = map[string]string{}, map[string]uint64{}, map[string]sent{}
	p.incremental, p.held, p.busy = map[string]bool{}, map[string]map[string]bool{}, map[string]*delivery{}
	p.emptied = map[string]bool{}
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

// errCtxEnded is what gather returns when its context ended (the timeout, or SIGINT): the
// caller, which knows which, says so.
var errCtxEnded = errors.New("push: context ended")

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
				if ctx.Err() != nil { // the receiver's Canceled: not the sink's doing
					return errCtxEnded
				}
				return p.streamEnded(r.err)
			}
			p.deadline.heard()
			if r.req.GetResponseNonce() == "" && r.req.GetCollection() != "" { // nothing was sent: no answer
				p.subscribe(r.req)
				settle.Reset(requestSettle)
			}
		case <-settle.C:
			return nil
		case <-ctx.Done():
			return errCtxEnded
		}
	}
}

// once plans every collection the sink asks for, refuses before sending anything if one cannot
// be sent, then pushes them and waits for every answer. A sink that asks for more once pushing
// started is answered as it asks. --timeout bounds each wait for the sink.
func (p *pusher) once(parent context.Context, client mcp.ResourceSinkClient) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	p.deadline = startDeadline(p.timeout, cancel)
	defer p.deadline.stop()
	reqs, err := p.open(ctx, client)
	if err != nil {
		return p.failed(ctx, err)
	}
	if err := p.gather(ctx, reqs); err != nil {
		return p.failed(ctx, err)
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
		return p.abort(ctx, reqs, err)
	}
	for len(p.inflight) > 0 {
		select {
		case r := <-reqs:
			if r.err != nil {
				if ctx.Err() != nil { // the receiver's Canceled: the timeout or SIGINT
					return p.failed(ctx, nil)
				}
				return p.streamEnded(r.err)
			}
			p.deadline.heard()
			if err := p.handle(r.req); err != nil {
				return p.abort(ctx, reqs, err)
			}
		case <-ctx.Done():
			return p.failed(ctx, nil)
		}
	}
	p.reportUnasked()
	if p.nacks > 0 {
		return fmt.Errorf("push: %d of %d collections NACKed by %s", p.nacks, p.nacks+p.acks, p.addr)
	}
	return nil
}

// connect opens the stream and makes the first push of --watch. --timeout bounds it: its
// timer ends follow (cancel); after that, the stream lives until SIGINT.
func (p *pusher) connect(ctx context.Context, cancel context.CancelFunc, client mcp.ResourceSinkClient) (<-chan recvd, error) {
	p.deadline = startDeadline(p.timeout, cancel)
	reqs, err := p.open(ctx, client)
	if err == nil {
		err = p.gather(ctx, reqs)
	}
	expired := p.deadline.stop()
	p.deadline = nil
	switch {
	case expired:
		return nil, p.timedOut()
	case err != nil:
		return nil, err
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
	d.waiting = false
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
	if d.again || p.files.store.View().Collection(p.asked[name]).Revision != p.pushed[name] {
		return p.repush(name)
	}
	return nil
}

// planNext plans the next push of a collection, or returns nil while a push of it is under
// way: it is then pushed again once that one is answered (one push of a collection at a
// time, in order).
func (p *pusher) planNext(name string) (*plan, error) {
	if d := p.busy[name]; d != nil {
		d.again = true
		return nil, nil
	}
	return p.plan(name)
}

// start pushes the files' state of one collection the sink asked for once pushing started
// (planNext).
func (p *pusher) start(name string) error {
	pl, err := p.planNext(name)
	if err != nil || pl == nil {
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

// deliver starts a collection's push: every push goes through here. Files that hold no
// resource are never pushed without --allow-empty: their full state would make the sink
// remove everything this producer holds there. Such a collection is pushed once they hold
// something again (pushChanged).
func (p *pusher) deliver(pl *plan) error {
	if p.stopped || p.ended {
		return nil
	}
	if pl.filesEmpty && !p.allowEmpty {
		p.emptied[pl.name] = true
		p.noteEmpty()
		return nil
	}
	delete(p.emptied, pl.name)
	p.emptyNoted = false
	d := &delivery{plan: pl}
	p.busy[pl.name] = d
	p.pushed[pl.name] = pl.revision
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
	if p.ended || p.stopped {
		return nil // the stream is over (Recv reports why), or the push is
	}
	msg := d.plan.parts[d.next]
	p.nonce++
	msg.Nonce = strconv.Itoa(p.nonce)
	p.inflight[msg.Nonce] = sent{d: d, part: d.next, seq: p.nonce, size: proto.Size(msg)}
	d.next++
	d.waiting = true
	if err := p.stream.Send(msg); err != nil {
		if errors.Is(err, io.EOF) {
			p.ended = true // the sink ended the stream, maybe at an earlier message: Recv says why
			return nil
		}
		delete(p.inflight, msg.Nonce) // not sent
		d.next--
		d.waiting = false
		return rpcError("push: send "+d.plan.name+" to "+p.addr, err)
	}
	return nil
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
