package envoy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/parallel"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// Build translates a complete set of Istio resources, by collection (canonical or alias),
// into Envoy resources: the pure function under the Controller, for tools and tests.
func Build(inputs map[string][]*mcpapi.Resource, opts TranslatorOptions) ([]Resource, []Fault) {
	t := NewTranslator(opts)
	for _, coll := range sortedKeys(inputs) {
		in := make([]Input, len(inputs[coll]))
		for i, r := range inputs[coll] {
			in[i] = InputOf(r)
		}
		t.Update(coll, in, nil)
	}
	t.Translate()
	return t.Outputs(), t.Faults()
}

// Options configures a Controller.
type Options struct {
	Store  *store.Store
	Logger *slog.Logger
	// DomainSuffix completes short host names; empty means DefaultDomainSuffix.
	DomainSuffix string
	// GatewayClassGrace is how long a gateway class's outputs outlive its last proxy
	// (AcquireGatewayClass); zero means DefaultGatewayClassGrace.
	GatewayClassGrace time.Duration
	// OutboundTrafficPolicy is MeshConfig's outboundTrafficPolicy.mode for every sidecar
	// (AllowAny, istiod's default, when unset).
	OutboundTrafficPolicy OutboundTrafficPolicy
	// MaxScopes bounds the namespaces whose views are built at once (AcquireScope); zero
	// means DefaultMaxScopes.
	MaxScopes int
}

// DefaultMaxScopes is how many namespaces' views are built at once by default: each costs
// its overlays, and a client names its namespace itself.
const DefaultMaxScopes = 10000

// retryDelay is how long the controller waits before writing again after the store refused
// a write (which only a bug can cause: the derived collections are not validated by kind).
const retryDelay = time.Second

// Controller keeps the derived Envoy collections in step with the Istio config in the store.
// It watches its input collections, reads only what changed since the revisions it has
// processed, recomputes the hosts those changes touch, and writes the four Envoy collections
// in one store.Apply under Owner. The first run is a full build and a full write.
type Controller struct {
	st      *store.Store
	log     *slog.Logger
	t       *Translator
	ready   chan struct{}
	running atomic.Bool
	// translating is set while sync runs, syncsStarted counts the syncs begun
	// (TranslationProgress).
	translating  atomic.Bool
	syncsStarted atomic.Uint64
	classes      *classRegistry
	scopes       *holdRegistry[string] // namespaces whose proxies are connected
	// proxyless holds "grpc" while a client the xDS server cannot tell the hosts of holds the
	// outputs only proxyless gRPC clients read: they are built for every host meanwhile
	// (SetProxyless). proxylessHosts holds the hosts whose proxyless outputs connected
	// clients ask for (SetProxylessHost).
	proxyless      *holdRegistry[string]
	proxylessHosts *holdRegistry[string]
	// portRoutes holds "ports" while a client the xDS server cannot tell the ports of holds
	// the ports' outbound route configurations: every port's is built meanwhile
	// (SetPortRoutes). portRoutesFor holds the ports whose route configurations connected
	// clients ask for (SetPortRoute, portroutes.go).
	portRoutes    *holdRegistry[string]
	portRoutesFor *holdRegistry[uint32]
	// vhdsFor holds the ports whose VHDS outputs connected clients ask for
	// (SetPortVirtualHosts, vhds.go).
	vhdsFor *holdRegistry[uint32]

	// Run's own state.
	revs      map[string]uint64 // per input collection, the revision read
	wroteFull bool              // false until a full write succeeded (and after a failed write)
	unbuilt   []string          // scopes set since the last successful write
	// grpcUnbuilt: the proxyless outputs were set since the last successful write;
	// unbuiltHosts, the hosts whose proxyless outputs were.
	grpcUnbuilt  bool
	unbuiltHosts []string
	// portsUnbuilt, unbuiltPorts: the same of the ports' route configurations.
	portsUnbuilt bool
	unbuiltPorts []string
	// unbuiltVHDS: the ports whose VHDS outputs were set since the last successful write.
	unbuiltVHDS []string

	mu        sync.Mutex
	synced    bool
	processed uint64
	waiters   []waiter
	faults    []Fault
	classInfo []GatewayClassInfo
	stats     ControllerStats
}

type waiter struct {
	rev uint64
	ch  chan struct{}
}

// ControllerStats tell what the controller did, for metrics, logs and tests.
type ControllerStats struct {
	Syncs    uint64 // translations run
	Revision uint64 // the store revision whose inputs are translated
	// Last is what the last translation rebuilt and changed.
	Last Stats
	// LastWritten is how many served entries the last write changed (store.Result.Changed).
	LastWritten int
}

// New returns a Controller; nothing is read before Run.
func New(opts Options) *Controller {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	classes := newClassRegistry(opts.GatewayClassGrace)
	// What only some clients read is built while they are connected.
	lazy := TranslatorOptions{DomainSuffix: opts.DomainSuffix, OutboundTrafficPolicy: opts.OutboundTrafficPolicy,
		LazyProxyless: true, LazyPortRoutes: true}
	return &Controller{
		st:             opts.Store,
		log:            log.With("component", "translate"),
		t:              NewTranslator(lazy),
		ready:          make(chan struct{}),
		revs:           map[string]uint64{},
		classes:        classes,
		scopes:         newHoldRegistry[string](opts.GatewayClassGrace, classes.wake, cmp.Or(opts.MaxScopes, DefaultMaxScopes)),
		proxyless:      newHoldRegistry[string](opts.GatewayClassGrace, classes.wake, 0),
		proxylessHosts: newHoldRegistry[string](opts.GatewayClassGrace, classes.wake, 0),
		portRoutes:     newHoldRegistry[string](opts.GatewayClassGrace, classes.wake, 0),
		portRoutesFor:  newHoldRegistry[uint32](opts.GatewayClassGrace, classes.wake, 0),
		vhdsFor:        newHoldRegistry[uint32](opts.GatewayClassGrace, classes.wake, 0),
	}
}

// AcquireGatewayClass says that a gateway proxy of a class is connected: the class's
// listeners and routes are built (from the next translation) and kept until its last proxy
// has been gone for the grace period. Call release when the proxy goes. Safe for concurrent
// use; the xDS server calls it for each gateway proxy's stream.
func (c *Controller) AcquireGatewayClass(class translate.GatewayClass) (release func()) {
	release, _, _ = c.classes.acquire(class.ID(), class)
	return release
}

// AcquireScope says that a proxy of a namespace is connected: what the namespace sees
// differently from the mesh (scope.go) is built into its overlays (translate.ScopeCollection)
// from the next translation, and kept until its last proxy has been gone for the grace
// period. built is closed once the scope's outputs are written, so that a proxy is not
// served the mesh-wide view first. Over MaxScopes namespaces, nothing is acquired, built is
// nil, ok is false, and the namespace's proxies see the mesh-wide view until one is dropped.
// Safe for concurrent use; the xDS server calls it for each sidecar's stream.
func (c *Controller) AcquireScope(namespace string) (release func(), built <-chan struct{}, ok bool) {
	return c.scopes.acquire(namespace, namespace)
}

// AcquireProxyless says that a client holds the outputs only proxyless gRPC clients read
// (their clusters, GRPCClusterType; the API listeners; the per-host route configurations) for
// every host: they are built from the next translation, and kept until the last such client
// has been gone for the grace period. built is closed once they are written. Safe for
// concurrent use; the REST polls and file exports that ask for them call it (source/xds
// HoldView), and tools and tests that read them all. At a million services it rebuilds every
// host: streams hold the hosts they ask for instead (AcquireProxylessHost).
func (c *Controller) AcquireProxyless() (release func(), built <-chan struct{}) {
	release, built, _ = c.proxyless.acquire(proxylessID, proxylessID)
	return release, built
}

// AcquireProxylessHost says that a connected client asks for a host's proxyless outputs (its
// API listeners, route configurations and the gRPC form of its clusters): they are built from
// the next translation, the host alone, and kept until the last such client has been gone for
// the grace period. built is closed once they are written. Safe for concurrent use; the xDS
// server calls it for each host a stream asks for (source/xds ProxylessHostsOf).
func (c *Controller) AcquireProxylessHost(host string) (release func(), built <-chan struct{}) {
	release, built, _ = c.proxylessHosts.acquire(host, host)
	return release, built
}

// proxylessID is the one view the proxyless registry holds.
const proxylessID = "grpc"

// AcquirePortRoute says that a connected client asks for a port's outbound route
// configuration (PORT, OutboundRouteName), which gathers the virtual host of every HTTP host
// on the port: it is built from the next translation, mesh-wide and as each held scope sees
// it, and kept until the last such client has been gone for the grace period. built is
// closed once it is written. Safe for concurrent use; the xDS server calls it for each port
// a stream asks for (source/xds PortRoutesOf).
func (c *Controller) AcquirePortRoute(port uint32) (release func(), built <-chan struct{}) {
	release, built, _ = c.portRoutesFor.acquire(portKey(port), port)
	return release, built
}

// AcquirePortRoutes holds every port's outbound route configuration, as AcquirePortRoute
// holds one's: for the REST polls and file exports that ask for route configurations
// (source/xds HoldView), and tools and tests that read them all.
func (c *Controller) AcquirePortRoutes() (release func(), built <-chan struct{}) {
	release, built, _ = c.portRoutes.acquire(portRoutesID, portRoutesID)
	return release, built
}

// AcquirePortVirtualHosts says that a connected VHDS client asks for a port's virtual hosts
// (vhds.go): the port's route configuration for VHDS clients and its virtual hosts, one
// resource each, are built from the next translation, mesh-wide and as each held scope sees
// them, and kept until the last such client has been gone for the grace period. built is
// closed once they are written. Safe for concurrent use; the xDS server calls it for each
// port a VHDS client asks the route configuration or the virtual hosts of.
func (c *Controller) AcquirePortVirtualHosts(port uint32) (release func(), built <-chan struct{}) {
	release, built, _ = c.vhdsFor.acquire(portKey(port), port)
	return release, built
}

// TranslationProgress tells whether a translation runs now (reading the store's changes,
// translating them or writing the result) and how many have started: what a client newly
// holds is built by the one running or, acquired during it, by the next, which starts as it
// ends (the count tells a waiter that one ran between two looks).
func (c *Controller) TranslationProgress() (running bool, started uint64) {
	// The count first: a sync that starts between the two loads is seen by the next look.
	started = c.syncsStarted.Load()
	return c.translating.Load(), started
}

// portRoutesID is the one view the portRoutes registry holds.
const portRoutesID = "ports"

// Scopes is how many namespaces' scopes are held (built, or within their grace period).
func (c *Controller) Scopes() int {
	c.scopes.mu.Lock()
	defer c.scopes.mu.Unlock()
	return len(c.scopes.refs)
}

// HeldViews are what connected clients hold of the outputs built only for them, for metrics:
// the hosts whose proxyless outputs are built one by one, whether every host's are, the
// ports whose route configurations are built one by one, whether every port's is. A view
// within its grace period after its last client left counts as held: it is still built.
type HeldViews struct {
	ProxylessHosts int
	ProxylessAll   bool
	PortRoutes     int
	PortRoutesAll  bool
	// PortVirtualHosts counts the ports whose VHDS outputs are built.
	PortVirtualHosts int
}

// Held reports the views held now.
func (c *Controller) Held() HeldViews {
	return HeldViews{
		ProxylessHosts: c.proxylessHosts.held(), ProxylessAll: c.proxyless.held() > 0,
		PortRoutes: c.portRoutesFor.held(), PortRoutesAll: c.portRoutes.held() > 0,
		PortVirtualHosts: c.vhdsFor.held(),
	}
}

// ScopesRefused counts the namespaces' proxies refused a scope of their own (MaxScopes).
func (c *Controller) ScopesRefused() uint64 {
	c.scopes.mu.Lock()
	defer c.scopes.mu.Unlock()
	return c.scopes.refused
}

// Ready is closed once the first full build is written.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Run translates until ctx ends, then returns nil. It returns an error at once if it is
// called twice or has no store.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("translate: Run called twice")
	}
	if c.st == nil {
		return errors.New("translate: no store")
	}
	// Watch before the first read, so that a change made during it is not missed.
	w := c.st.Watch(watchedCollections()...)
	defer w.Close()
	defer c.classes.stop()
	defer c.scopes.stop()
	defer c.proxyless.stop()
	defer c.proxylessHosts.stop()
	defer c.portRoutes.stop()
	defer c.portRoutesFor.stop()
	defer c.vhdsFor.stop()
	retry := time.NewTimer(retryDelay)
	retry.Stop()
	defer retry.Stop()
	for {
		if err := c.sync(); err != nil {
			c.log.Error("writing the Envoy resources failed; retrying with a full write", "err", err, "retry_in", retryDelay)
			retry.Reset(retryDelay)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.C():
		case <-c.classes.wake:
		case <-retry.C:
		}
	}
}

// sync reads the changes since the last sync, translates what they touch and writes the
// result.
func (c *Controller) sync() error {
	c.syncsStarted.Add(1)
	c.translating.Store(true)
	defer c.translating.Store(false)
	readStart := time.Now()
	v := c.st.View()
	rev := v.Revision()
	for _, coll := range watchedCollections() {
		c.read(v, coll)
	}
	read := time.Since(readStart)
	c.classes.apply(c.t.SetGatewayClass, c.t.RemoveGatewayClass)
	c.unbuilt = append(c.unbuilt, c.scopes.apply(c.t.SetScope, c.t.RemoveScope)...)
	grpcSet := c.proxyless.apply(func(string) { c.t.SetProxyless(true) }, func(string) { c.t.SetProxyless(false) })
	c.grpcUnbuilt = c.grpcUnbuilt || len(grpcSet) > 0
	c.unbuiltHosts = append(c.unbuiltHosts, c.proxylessHosts.apply(
		func(h string) { c.t.SetProxylessHost(h, true) }, func(h string) { c.t.SetProxylessHost(h, false) })...)
	portsSet := c.portRoutes.apply(func(string) { c.t.SetPortRoutes(true) }, func(string) { c.t.SetPortRoutes(false) })
	c.portsUnbuilt = c.portsUnbuilt || len(portsSet) > 0
	c.unbuiltPorts = append(c.unbuiltPorts, c.portRoutesFor.apply(
		func(p uint32) { c.t.SetPortRoute(p, true) }, func(p string) { c.t.SetPortRoute(parsePort(p), false) })...)
	c.unbuiltVHDS = append(c.unbuiltVHDS, c.vhdsFor.apply(
		func(p uint32) { c.t.SetPortVirtualHosts(p, true) }, func(p string) { c.t.SetPortVirtualHosts(parsePort(p), false) })...)
	start := time.Now()
	delta, stats := c.t.Translate()
	res, err := c.write(delta)
	if err != nil {
		return err
	}
	c.scopes.markBuilt(c.unbuilt)
	c.unbuilt = c.unbuilt[:0]
	if c.grpcUnbuilt {
		c.proxyless.markBuilt([]string{proxylessID})
		c.grpcUnbuilt = false
	}
	c.proxylessHosts.markBuilt(c.unbuiltHosts)
	c.unbuiltHosts = c.unbuiltHosts[:0]
	if c.portsUnbuilt {
		c.portRoutes.markBuilt([]string{portRoutesID})
		c.portsUnbuilt = false
	}
	c.portRoutesFor.markBuilt(c.unbuiltPorts)
	c.unbuiltPorts = c.unbuiltPorts[:0]
	c.vhdsFor.markBuilt(c.unbuiltVHDS)
	c.unbuiltVHDS = c.unbuiltVHDS[:0]
	level := slog.LevelDebug
	if c.Stats().Syncs == 0 {
		level = slog.LevelInfo // the first full build, once
	}
	if res.Changed > 0 || stats.Hosts+stats.Endpoints+stats.Gateways > 0 || level == slog.LevelInfo {
		c.log.Log(context.Background(), level, "translated", "revision", rev, "hosts", stats.Hosts, "endpoints", stats.Endpoints, "ports", stats.Ports,
			"gateways", stats.Gateways, "upserts", stats.Upserts, "removals", stats.Removals, "written", res.Changed,
			"faults", len(c.t.Faults()), "read", read, "took", time.Since(start))
	}
	c.finish(rev, stats, res.Changed)
	return nil
}

// read brings the translator up to date with one collection: the changes since the revision
// read last, or, the first time and when those changes were compacted away, the whole
// collection reconciled against what the translator holds.
func (c *Controller) read(v *store.View, coll string) {
	if from, ok := c.revs[coll]; ok {
		ch, err := v.ChangesSince(coll, from)
		if err == nil {
			c.t.Update(coll, inputsOf(ch.Upserts), namesOf(ch.Deleted))
			c.revs[coll] = ch.Revision
			return
		}
		c.log.Warn("changes were compacted away; reading the whole collection", "collection", coll, "from", from)
	}
	rev, entries := v.Snapshot(coll)
	gone := c.t.Names(coll)
	if len(gone) > 0 { // the first read holds nothing to reconcile: no set of a million names
		live := make(map[string]bool, len(entries))
		for _, e := range entries {
			live[e.Name] = true
		}
		gone = slices.DeleteFunc(gone, func(n string) bool { return live[n] })
	}
	c.t.Update(coll, inputsOf(entries), gone)
	c.revs[coll] = rev
}

// inputsOf reads entries as inputs, on every CPU for many (each reads its entry's metadata:
// a cache miss apiece at a million).
func inputsOf(es []*store.Entry) []Input {
	out := make([]Input, len(es))
	parallel.For(len(es), reserveMin, func(i int) { out[i] = InputOfEntry(es[i]) })
	return out
}

func namesOf(es []*store.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// write applies a delta in one store.Apply: the derived collections change together, so a
// client never sees a route to a cluster that is not there yet. Until a full write has
// succeeded, the whole output replaces what the owner held in every collection (the
// namespaces' overlays come and go).
func (c *Controller) write(delta Delta) (store.Result, error) {
	var res store.Result
	var err error
	if !c.wroteFull {
		res, err = c.st.ReplaceOwnerEncoded(Owner, c.t.EncodedOutputs())
	} else {
		updates := deltaUpdates(delta)
		if len(updates) == 0 {
			return store.Result{}, nil
		}
		res, err = c.st.Apply(Owner, updates...)
	}
	if err != nil {
		c.wroteFull = false
		return res, fmt.Errorf("store refused the Envoy resources: %w", err)
	}
	c.wroteFull = true
	return res, nil
}

// deltaUpdates are a delta's changes by collection: the derived collections in their order,
// then the overlays by name.
func deltaUpdates(delta Delta) []store.Update {
	colls := OutputTypes()
	for _, coll := range sortedKeys(delta.Upserts) {
		if !slices.Contains(colls, coll) {
			colls = append(colls, coll)
		}
	}
	for _, coll := range sortedKeys(delta.Removed) {
		if !slices.Contains(colls, coll) {
			colls = append(colls, coll)
		}
	}
	var updates []store.Update
	for _, coll := range colls {
		u := store.Update{Collection: coll, Encoded: delta.Upserts[coll], Removed: delta.Removed[coll]}
		if len(u.Encoded)+len(u.Removed) > 0 {
			updates = append(updates, u)
		}
	}
	return updates
}

// finish publishes a sync: faults (logging those that appeared or went), stats, and the
// revision, waking whoever waits for it.
func (c *Controller) finish(rev uint64, stats Stats, written int) {
	var newFaults []Fault
	if stats.FaultsChanged {
		newFaults = c.t.Faults()
	}
	covered := c.coveredRevision(rev)
	var classInfo []GatewayClassInfo
	if stats.Gateways > 0 {
		classInfo = c.t.GatewayClassInfo()
	}
	c.mu.Lock()
	if stats.Gateways > 0 {
		c.classInfo = classInfo
	}
	old := c.faults
	if stats.FaultsChanged {
		c.faults = newFaults
	}
	c.processed = rev
	c.synced = true
	c.stats.Syncs++
	c.stats.Revision = rev
	c.stats.Last = stats
	c.stats.LastWritten = written
	select { // before the waiters: whoever a sync wakes finds the controller ready
	case <-c.ready:
	default:
		close(c.ready)
	}
	waiters := c.waiters[:0]
	for _, w := range c.waiters {
		if w.rev <= covered {
			close(w.ch)
		} else {
			waiters = append(waiters, w)
		}
	}
	c.waiters = waiters
	c.mu.Unlock()
	if stats.FaultsChanged {
		c.logFaults(old, newFaults)
	}
}

// coveredRevision is the highest store revision whose inputs are all translated, given that
// those of revision processed are: the store's current revision when no input collection
// changed since, so that a waiter for a write to some other collection is not left waiting
// for an input change that never comes.
func (c *Controller) coveredRevision(processed uint64) uint64 {
	v := c.st.View()
	for _, coll := range watchedCollections() {
		if v.Collection(coll).Revision > processed {
			return processed
		}
	}
	return max(v.Revision(), processed)
}

// logFaults logs a fault when it appears and when it is gone, not at every sync that still
// finds it.
func (c *Controller) logFaults(old, cur []Fault) {
	was := map[Fault]bool{}
	for _, f := range old {
		was[f] = true
	}
	for _, f := range cur {
		if !was[f] {
			c.log.Warn("translation fault", "kind", f.Kind, "name", f.Name, "fault", f.Message)
		}
		delete(was, f)
	}
	for f := range was {
		c.log.Info("translation fault resolved", "kind", f.Kind, "name", f.Name, "fault", f.Message)
	}
}

// Faults returns the current translation faults, sorted by kind, name and message: what the
// debug endpoint shows.
func (c *Controller) Faults() []Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.faults)
}

// GatewayClasses describes the gateway classes built, with their connected proxies.
func (c *Controller) GatewayClasses() []GatewayClassInfo {
	c.mu.Lock()
	out := slices.Clone(c.classInfo)
	c.mu.Unlock()
	counts := c.classes.counts()
	for i := range out {
		out[i].Proxies = counts[out[i].ID]
	}
	return out
}

// Stats returns what the controller has done so far.
func (c *Controller) Stats() ControllerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Synced returns a channel that is closed once every input as of store revision rev is
// translated and written: after a write whose store.Result.Revision is rev, a test waits on
// Synced(rev) instead of sleeping.
func (c *Controller) Synced(rev uint64) <-chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced && c.coveredRevision(c.processed) >= rev {
		close(ch)
		return ch
	}
	c.waiters = append(c.waiters, waiter{rev: rev, ch: ch})
	return ch
}

// WaitFor waits until revision rev is translated, or ctx ends.
func (c *Controller) WaitFor(ctx context.Context, rev uint64) error {
	select {
	case <-c.Synced(rev):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("translate: revision %d not translated: %w", rev, ctx.Err())
	}
}
