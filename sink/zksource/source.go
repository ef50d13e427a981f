package zksource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/mcpbridge/mcpbridge/sink/ownerstate"
)

// Defaults of Options.
const (
	DefaultSessionTimeout = 10 * time.Second
	DefaultDubboRoot      = "/dubbo"
	DefaultSpringRoot     = "/services"
)

// debounce is how long the source lets watch events gather before it reads what they
// touched: a deployment that starts a hundred providers is a hundred events, and one read
// and one write to the store for all of them. It bounds the delay, it is not renewed by
// further events.
const debounce = 50 * time.Millisecond

// retryWrite is how soon a write the store refused is tried again when no event comes first.
const retryWrite = time.Second

// Options configures a Source.
type Options struct {
	// Name is the source's name: its resources are owned by "zookeeper:"+Name and live in the
	// namespace Name, which must be a DNS-1123 label.
	Name string
	// Servers are the ZooKeeper servers, HOST:PORT each. Names are resolved at every
	// connection attempt, so a server whose address changes is found again.
	Servers []string
	// SessionTimeout is the ZooKeeper session timeout the source asks for (the server bounds
	// it by its minSessionTimeout and maxSessionTimeout); 0 means DefaultSessionTimeout.
	SessionTimeout time.Duration
	// DubboRoot is the znode under which Dubbo registers interfaces ("" means DefaultDubboRoot,
	// Dubbo's default registry group); SpringRoot the one under which Spring Cloud ZooKeeper
	// registers services ("" means DefaultSpringRoot). Both are always read; a root that does
	// not exist is empty, and watched until it appears. Neither may be inside the other.
	DubboRoot  string
	SpringRoot string
	// Store is where the ServiceEntries are written.
	Store  ownerstate.Applier
	Logger *slog.Logger
}

// Stats are the source's counters, for metrics.
type Stats struct {
	Services  int  // ServiceEntries served
	Instances int  // their endpoints
	Connected bool // a session is established now
	// Session is the state of the connection, as go-zookeeper names it ("StateHasSession",
	// "StateDisconnected", ...).
	Session string
	// Connects counts the times a session was established or resumed on a new connection
	// (1, then 1 more per reconnection); Expiries the sessions the server expired.
	Connects, Expiries uint64
	// LastSync is when the registry was last read into the store without a fault of the
	// connection; zero before.
	LastSync time.Time
	Faults   int
}

// Source follows a ZooKeeper registry and writes its services to the store as ServiceEntries.
// Create it with New and call Run once.
type Source struct {
	opts  Options
	owner string
	log   *slog.Logger
	ready chan struct{}
	in    inbox

	running atomic.Bool

	// dial, if set before Run, dials the servers. For tests (internal/zktest's Dialer).
	dial zk.Dialer
	// synced, if set before Run, is called after each burst of events is handled. For tests.
	synced func()

	mu     sync.Mutex
	faults []error
	stats  Stats
}

// New checks the options and returns a Source; nothing is read before Run.
func New(opts Options) (*Source, error) {
	if err := checkOptions(&opts); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	owner := "zookeeper:" + opts.Name
	s := &Source{
		opts:  opts,
		owner: owner,
		log:   log.With("component", "zksource", "owner", owner),
		ready: make(chan struct{}),
	}
	s.in.wake = make(chan struct{}, 1)
	s.stats.Session = zk.StateDisconnected.String()
	return s, nil
}

// checkOptions refuses options that cannot work, naming the value, and fills in defaults.
func checkOptions(o *Options) error {
	if !isDNSLabel(o.Name) {
		return fmt.Errorf("zookeeper source: name %q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63): it is the namespace of the source's ServiceEntries", o.Name)
	}
	if len(o.Servers) == 0 {
		return fmt.Errorf("zookeeper source %q: no servers", o.Name)
	}
	for _, srv := range o.Servers {
		if err := checkServer(srv); err != nil {
			return fmt.Errorf("zookeeper source %q: server %q: %w", o.Name, srv, err)
		}
	}
	if o.SessionTimeout < 0 {
		return fmt.Errorf("zookeeper source %q: session_timeout %v is negative", o.Name, o.SessionTimeout)
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.DubboRoot == "" {
		o.DubboRoot = DefaultDubboRoot
	}
	if o.SpringRoot == "" {
		o.SpringRoot = DefaultSpringRoot
	}
	for _, r := range []struct{ field, value string }{{"dubbo_root", o.DubboRoot}, {"spring_root", o.SpringRoot}} {
		if err := checkRoot(r.value); err != nil {
			return fmt.Errorf("zookeeper source %q: %s %q: %w", o.Name, r.field, r.value, err)
		}
	}
	if within(o.DubboRoot, o.SpringRoot) || within(o.SpringRoot, o.DubboRoot) {
		return fmt.Errorf("zookeeper source %q: dubbo_root %q and spring_root %q overlap: neither may be inside the other", o.Name, o.DubboRoot, o.SpringRoot)
	}
	if o.Store == nil {
		return fmt.Errorf("zookeeper source %q: no store to write to", o.Name)
	}
	return nil
}

func checkServer(srv string) error {
	host, port, err := net.SplitHostPort(srv)
	if err != nil {
		return errors.New("not HOST:PORT")
	}
	if host == "" {
		return errors.New("no host")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	return nil
}

// checkRoot accepts an absolute znode path below "/" without a trailing slash or empty, "."
// or ".." parts, which ZooKeeper refuses.
func checkRoot(p string) error {
	if !strings.HasPrefix(p, "/") || p == "/" {
		return errors.New("not an absolute znode path below /")
	}
	for part := range strings.SplitSeq(p[1:], "/") {
		if part == "" || part == "." || part == ".." {
			return errors.New("has an empty, \".\" or \"..\" part")
		}
	}
	if path.Clean(p) != p {
		return errors.New("is not a clean path")
	}
	return nil
}

// within is whether znode p is q or below it.
func within(p, q string) bool { return p == q || strings.HasPrefix(p, q+"/") }

// Owner is the producer ID the source's resources are stored under.
func (s *Source) Owner() string { return s.owner }

// Ready is closed once a first full reading of the registry has been offered to the store
// (even if some entries were faulty, or the store refused it: see Faults). While ZooKeeper
// cannot be reached it stays open, and the store keeps what this owner held before, if
// anything: a bridge restarted while ZooKeeper is down serves its last state.
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Faults returns the current faults, sorted: each malformed provider or instance (naming
// its znode and what is wrong), each service whose ServiceEntry is invalid or whose host is
// another's, a write the store refused, and the connection's state while it is not a session
// that has been read (lost connection, expired session: the last good state is served).
// Empty when all is well.
func (s *Source) Faults() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.faults)
}

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Faults = len(s.faults)
	return st
}

// Run connects to ZooKeeper, reads the registry, writes it to the store and follows its
// changes until ctx ends; then it returns nil, its connection closed and its goroutines
// done. It returns an error at once if called twice.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("zookeeper source %q: Run called twice", s.opts.Name)
	}
	dial := s.dial
	if dial == nil {
		dial = net.DialTimeout // go-zookeeper's default
	}
	guard := &handshakeGuard{next: dial, timeout: s.opts.SessionTimeout}
	defer guard.stop()
	conn, events, err := zk.Connect(s.opts.Servers, s.opts.SessionTimeout,
		zk.WithHostProvider(&hostList{}),
		zk.WithDialer(guard.dial),
		zk.WithLogger(zkLogger{s.log}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				guard.answered()
			}
			s.in.push(ev)
		}))
	if err != nil {
		return fmt.Errorf("zookeeper source %q: %w", s.opts.Name, err)
	}
	// Closed as soon as ctx ends, so that reads in flight give up at once rather than wait
	// for a server that may not answer.
	stop := context.AfterFunc(ctx, conn.Close)
	defer func() {
		stop()
		conn.Close()
		// The event channel is closed when the client's goroutines are done; the callback
		// has been called for the last time then too.
		for range events {
		}
	}()
	newSyncer(s, conn).run(ctx)
	return nil
}

// handshakeGuard drops a connection whose server has not answered the session handshake
// within a session timeout, so that the client connects again, to the next server. A server
// that accepts connections but does not answer (a process stopping or stuck, a proxy whose
// backend is gone) otherwise holds go-zookeeper in its handshake for ten receive timeouts,
// about seven session timeouts (70 s by default), before it tries another.
type handshakeGuard struct {
	next    zk.Dialer
	timeout time.Duration

	mu      sync.Mutex
	pending *time.Timer // closes the connection whose handshake is awaited
}

func (g *handshakeGuard) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := g.next(network, address, timeout)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending != nil {
		g.pending.Stop()
	}
	g.pending = time.AfterFunc(g.timeout, func() { c.Close() })
	return c, nil
}

// answered records that the connection dialled last has its session.
func (g *handshakeGuard) answered() { g.stop() }

func (g *handshakeGuard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending != nil {
		g.pending.Stop()
		g.pending = nil
	}
}

// zkLogger sends go-zookeeper's lines to the source's log at debug level: they are each
// reconnection attempt, and the source reports the connection's state itself, as faults.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
	}
}

// hostList hands go-zookeeper the servers as written, for its dialer to resolve at each
// attempt. go-zookeeper's default provider resolves every name once, at Connect, and fails
// Connect if one does not resolve then: a registry behind a name that a restart moves would
// be lost, and a name not resolvable yet would stop the source for good.
type hostList struct {
	mu      sync.Mutex
	servers []string
	next    int // index of the server Next returns
	tried   int // servers tried since the last connection
}

func (h *hostList) Init(servers []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = slices.Clone(servers)
	return nil
}

func (h *hostList) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the next server, and whether every one has been tried since the last
// connection (go-zookeeper then waits a second before it goes on).
func (h *hostList) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	srv := h.servers[h.next]
	h.next = (h.next + 1) % len(h.servers)
	h.tried++
	retry := h.tried > len(h.servers)
	if retry {
		h.tried = 1
	}
	return srv, retry
}

func (h *hostList) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tried = 0
}

// inbox is where go-zookeeper's callback leaves events for the source's goroutine. The
// callback must not block (it runs on the client's receiving goroutine), and the client's
// own event channel drops events when full: so the callback only records, under a mutex,
// the paths touched and the session states seen, and wakes the goroutine.
type inbox struct {
	mu     sync.Mutex
	paths  map[string]struct{}
	states []zk.State
	wake   chan struct{} // room for one signal
}

func (in *inbox) push(ev zk.Event) {
	in.mu.Lock()
	switch {
	case ev.Type == zk.EventSession:
		in.states = append(in.states, ev.State)
	case ev.Type == zk.EventNotWatching:
		// Watches dropped with an expired session or a closed client: the next session
		// reads everything again anyway.
		in.mu.Unlock()
		return
	default:
		if in.paths == nil {
			in.paths = map[string]struct{}{}
		}
		in.paths[ev.Path] = struct{}{}
	}
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// take returns what was pushed since the last take.
func (in *inbox) take() (map[string]struct{}, []zk.State) {
	in.mu.Lock()
	defer in.mu.Unlock()
	paths, states := in.paths, in.states
	in.paths, in.states = nil, nil
	return paths, states
}

// connFault is the connection's state, as a fault.
type connFault struct{ msg string }

func (f *connFault) Error() string { return f.msg }

// publish replaces the faults, the connection's (nil: none) and the registry's, and the
// counters, at once. New faults are logged, the connection's only when logConn: before the
// registry was ever read it says "nothing read yet" at every start, until the first session.
func (s *Source) publish(conn error, others []error, logConn bool, stats Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = stats
	faults := make([]error, 0, len(others)+1)
	if conn != nil {
		faults = append(faults, conn)
	}
	faults = append(faults, others...)
	old := make(map[string]bool, len(s.faults))
	for _, f := range s.faults {
		old[f.Error()] = true
	}
	now := make(map[string]bool, len(faults))
	for i, f := range faults {
		now[f.Error()] = true
		// A fault is logged when it appears, not again at every burst that still finds it.
		if !old[f.Error()] && (i > 0 || conn == nil || logConn) {
			s.log.Warn("zookeeper registry fault", "fault", f.Error())
		}
	}
	for _, f := range s.faults {
		if !now[f.Error()] {
			s.log.Info("zookeeper registry fault cleared", "fault", f.Error())
		}
	}
	s.faults = faults
}
