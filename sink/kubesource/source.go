// Package kubesource serves Istio config read from a Kubernetes API server, as istiod reads it:
// every Istio kind the bridge knows (kinds.Kinds) is listed and watched through client-go
// informers, in the version the cluster prefers among those Istio serves, and each object
// becomes the store resource istiod would read: name "namespace/name", its labels and
// annotations, create_time from creationTimestamp, the spec as the body. An object is decoded
// and validated as a file's document is (filesource.DecodeJSON); an invalid one is a fault
// naming its kind, namespace/name and field, and keeps its last valid version served (a new
// object that is invalid is not served), like a file with a faulty document.
//
// Namespaces: all by default; with Namespaces and/or NamespaceSelector, those listed and those
// whose labels match the selector (the union, as Istio's discoverySelectors), re-evaluated as
// namespaces are labelled, created and deleted: the objects of a namespace that leaves the
// selection are removed from the store, those of one that joins are added.
//
// With Services, Kubernetes Services and their EndpointSlices become ServiceEntries
// (services.go) so that the bridge's Envoy, gRPC and Linkerd clients reach Kubernetes
// services.
//
// The source follows events, never polls: the informers relist on their own after a watch is
// broken or answered 410 Gone, and whatever the relist changed reaches the store. While some
// Istio kind is not served, the CRDs are watched too, and a kind is read from the moment its
// CRD is (crds.go). Each burst of
// events is one store write of the names it touched (sink/ownerstate); the first write, once
// every informer has synced, is the whole state, which is when Ready closes.
package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpbridge/mcpbridge/sink/ownerstate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultOwner is the producer ID of the source's resources.
const DefaultOwner = "kubernetes"

// Options configures a Source.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file (its current context is used); empty uses
	// the in-cluster configuration of the pod's service account.
	Kubeconfig string
	// Namespaces and NamespaceSelector select the namespaces read (their union); both empty:
	// every namespace. NamespaceSelector is a Kubernetes label selector ("env=prod,team in (a,b)").
	Namespaces        []string
	NamespaceSelector string
	// Services turns Services and EndpointSlices into ServiceEntries.
	Services bool
	// DomainSuffix is the cluster's DNS suffix, for the hosts of Services ("cluster.local").
	DomainSuffix string
	// Owner is the producer ID; empty means DefaultOwner.
	Owner  string
	Store  ownerstate.Applier
	Logger *slog.Logger
	// RetryInterval is the wait before a store write that failed is tried again, and between
	// tries to discover what the cluster serves; zero means one second.
	RetryInterval time.Duration
}

// Source reads Istio config from a Kubernetes API server. Create it with New, call Run once.
type Source struct {
	opts     Options
	log      *slog.Logger
	selector labels.Selector // nil: no selector
	listed   map[string]bool
	ready    chan struct{}
	running  atomic.Bool

	mu          sync.Mutex
	pending     map[objectKey]struct{} // names whose objects changed since the last write
	nsPending   []string               // namespaces whose selection may have changed
	wake        chan struct{}          // has a value when pending or nsPending is not empty
	faults      map[objectKey][]error  // of objects, by name
	sourceFault error                  // of the source itself: discovery, a refused write
	stats       Stats
	started     map[string]bool // "list RESOURCE", "watch RESOURCE" done once
	crdsChanged bool            // a CRD changed since Run last discovered the served kinds
	// resourceFaults are the last list or watch failure of each resource, until one succeeds.
	resourceFaults map[string]error

	// watchTimeout, if set before Run, ends every watch after it (whole seconds), as an API
	// server does after 5 to 10 minutes: the informer then watches again from the last version
	// it saw. For tests.
	watchTimeout time.Duration
}

// Stats are the source's figures for metrics and the status page.
type Stats struct {
	// Objects counts the resources served, by collection.
	Objects map[string]int
	// WatchRestarts counts the watches started again after the first, by resource
	// ("serviceentries.networking.istio.io"): after a broken connection, an API server
	// restart, or the server's own timeout on long watches (every 30 to 60 minutes).
	WatchRestarts map[string]int
	// Relists counts the lists after the first, by resource: a watch that could not resume
	// (410 Gone: the version it resumed from was compacted away) lists everything again.
	Relists map[string]int
	// Gone counts the 410 Gone answers the informers reported, by resource.
	Gone map[string]int
	// LastSync is when the store last took the source's changes.
	LastSync time.Time
	// NotServed lists the Istio kinds the cluster does not serve (their CRDs not installed).
	NotServed []string
}

// New checks the options and returns a Source; nothing is read before Run.
func New(opts Options) (*Source, error) {
	if opts.Store == nil {
		return nil, errors.New("kubernetes source: no store to apply to")
	}
	if opts.Owner == "" {
		opts.Owner = DefaultOwner
	}
	if opts.DomainSuffix == "" {
		opts.DomainSuffix = "cluster.local"
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	s := &Source{
		opts:    opts,
		listed:  map[string]bool{},
		ready:   make(chan struct{}),
		pending: map[objectKey]struct{}{},
		wake:    make(chan struct{}, 1),
		faults:  map[objectKey][]error{},
		started: map[string]bool{},

		resourceFaults: map[string]error{},
		stats:          Stats{Objects: map[string]int{}, WatchRestarts: map[string]int{}, Relists: map[string]int{}, Gone: map[string]int{}},
	}
	for _, ns := range opts.Namespaces {
		s.listed[ns] = true
	}
	if opts.NamespaceSelector != "" {
		sel, err := labels.Parse(opts.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("namespace_selector %q: %w", opts.NamespaceSelector, err)
		}
		s.selector = sel
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.log = log.With("component", "kubesource", "owner", opts.Owner)
	return s, nil
}

// Ready is closed once every informer has listed its objects and the source's first full
// state has been offered to the store (see Faults for a refusal).
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Faults returns the current faults: invalid objects (each a *filesource.DecodeError naming
// kind, namespace/name and field), and the source's own (the API server unreachable, a write
// the store refused), sorted.
func (s *Source) Faults() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []error
	if s.sourceFault != nil {
		out = append(out, s.sourceFault)
	}
	for _, err := range s.resourceFaults {
		out = append(out, err)
	}
	for _, errs := range s.faults {
		out = append(out, errs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Error() < out[j].Error() })
	return out
}

// Stats returns a copy of the source's figures.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Objects = maps.Clone(s.stats.Objects)
	st.WatchRestarts = maps.Clone(s.stats.WatchRestarts)
	st.Gone = maps.Clone(s.stats.Gone)
	st.Relists = maps.Clone(s.stats.Relists)
	st.NotServed = slices.Clone(s.stats.NotServed)
	return st
}

// restConfig is the client configuration: the kubeconfig file, or in-cluster.
func (s *Source) restConfig() (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if s.opts.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", s.opts.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", s.opts.Kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("no kubeconfig set and not in a cluster: %w", err)
	}
	// The first lists of a large cluster are many requests at once; client-go's default of 5
	// per second would make them minutes.
	cfg.QPS, cfg.Burst = 100, 200
	cfg.UserAgent = "mcpbridge"
	return cfg, nil
}

// Run reads the cluster and follows it until ctx ends; then it returns nil with every
// informer stopped. It returns an error at once for a configuration it cannot use (a bad
// kubeconfig); an API server it cannot reach is a fault, tried again until it answers.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("kubernetes source: Run called twice")
	}
	cfg, err := s.restConfig()
	if err != nil {
		return fmt.Errorf("kubernetes source: %w", err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes source: %w", err)
	}
	resources, err := s.discoverUntilServed(ctx, cfg)
	if err != nil {
		return nil // ctx ended
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &informers{s: s, client: client}
	w := s.newWatch(f, resources)
	s.watchCRDs(ctx, f, w, cfg)
	f.start(ctx)
	defer f.wait()
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), w.synced()...) {
		return nil
	}
	// The first state is what the caches hold, not what the handlers have been told so far:
	// an informer's HasSynced says its cache is full, not that its events were handled, and
	// a first state missing objects would remove them from the store (from every replica's,
	// on etcd) until their events came.
	w.markCached()
	state := ownerstate.New(s.opts.Owner, s.opts.Store)
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	if !s.sync(w, state) {
		retry.Reset(s.opts.RetryInterval)
	}
	close(s.ready)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-retry.C:
		}
		if !s.sync(w, state) {
			retry.Reset(s.opts.RetryInterval)
		}
	}
}

// sync brings the state up to date with what changed and writes it; false when something is
// to be tried again after RetryInterval: a write the store refused, a CRD not served yet.
func (s *Source) sync(w *watch, state *ownerstate.State) bool {
	crdsAgain := false
	if w.rediscover != nil && s.takeCRDs() && w.rediscover() {
		crdsAgain = true
		s.mu.Lock()
		s.crdsChanged = true // looked at again when the retry fires
		s.mu.Unlock()
	}
	keys, namespaces := s.takePending()
	for _, ns := range namespaces {
		keys = append(keys, w.namespaceChanged(ns)...)
	}
	for _, k := range keys {
		w.refresh(k, state)
	}
	if !state.Dirty() {
		return !crdsAgain
	}
	start := time.Now()
	res, err := state.Flush()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.setSourceFault(fmt.Errorf("store refused the cluster's state; the previous state is kept: %w", err))
		return false
	}
	s.setSourceFault(nil)
	s.stats.LastSync = time.Now()
	s.stats.Objects = state.Counts()
	if res.Changed > 0 {
		s.log.Info("applied kubernetes objects", "names", len(keys), "changed", res.Changed,
			"revision", res.Revision, "took", time.Since(start).Round(time.Millisecond))
	}
	return !crdsAgain
}

// takePending empties the names and namespaces marked since the last call.
func (s *Source) takePending() ([]objectKey, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]objectKey, 0, len(s.pending))
	for k := range s.pending {
		keys = append(keys, k)
	}
	clear(s.pending)
	ns := s.nsPending
	s.nsPending = nil
	return keys, ns
}

// mark records that a name changed and wakes Run's loop.
func (s *Source) mark(k objectKey) {
	s.mu.Lock()
	s.pending[k] = struct{}{}
	s.mu.Unlock()
	s.signal()
}

// markNamespace records that a namespace's selection may have changed.
func (s *Source) markNamespace(ns string) {
	s.mu.Lock()
	s.nsPending = append(s.nsPending, ns)
	s.mu.Unlock()
	s.signal()
}

func (s *Source) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// setSourceFault replaces the source's own fault, logging one that appears or clears; s.mu
// is held.
func (s *Source) setSourceFault(err error) {
	switch {
	case err != nil && (s.sourceFault == nil || s.sourceFault.Error() != err.Error()):
		s.log.Warn("kubernetes source fault", "fault", err.Error())
	case err == nil && s.sourceFault != nil:
		s.log.Info("kubernetes source fault cleared", "fault", s.sourceFault.Error())
	}
	s.sourceFault = err
}

// setObjectFaults replaces the faults of one object, logging new ones, and those it no longer
// has as cleared.
func (s *Source) setObjectFaults(k objectKey, errs []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(errs) == 0 {
		for _, e := range s.faults[k] {
			s.log.Info("config fault cleared", "fault", e.Error())
		}
		delete(s.faults, k)
		return
	}
	old := map[string]bool{}
	for _, e := range s.faults[k] {
		old[e.Error()] = true
	}
	for _, e := range errs {
		if !old[e.Error()] {
			s.log.Warn("config fault", "fault", e.Error())
		}
	}
	s.faults[k] = errs
}

// watchError logs the error an informer's reflector reports (it lists and watches again).
func (s *Source) watchError(resource string, err error) {
	s.log.Info("kubernetes list or watch failed; trying again", "resource", resource, "err", err.Error())
}

// watchFailed counts a watch answered 410 Gone (the informer then lists again).
func (s *Source) watchFailed(resource string, err error) {
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		return
	}
	s.mu.Lock()
	s.stats.Gone[resource]++
	s.mu.Unlock()
	s.log.Info("kubernetes watch answered 410 Gone; listing again", "resource", resource)
}

// resourceFailed records a failed list or watch of a resource as a fault of the source, until
// one succeeds: a resource the bridge may not read (RBAC), an API server gone. The informer
// tries again with backoff.
func (s *Source) resourceFailed(resource, op string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, had := s.resourceFaults[resource]; !had {
		s.log.Warn("kubernetes source fault", "resource", resource, "op", op, "err", err.Error())
	}
	s.resourceFaults[resource] = fmt.Errorf("%s %s: %w (tried again with backoff; the last state read stays served)", op, resource, err)
}

// resourceOK clears a resource's fault after a list or watch that succeeded.
func (s *Source) resourceOK(resource string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err, had := s.resourceFaults[resource]; had {
		delete(s.resourceFaults, resource)
		s.log.Info("kubernetes source fault cleared", "fault", err.Error())
	}
}

// listStarted counts a list of a resource: the first is the start, the others relists.
func (s *Source) listStarted(resource string) {
	s.count(resource, "list", s.stats.Relists)
}

// watchStarted counts a watch of a resource: the first is the start, the others restarts.
func (s *Source) watchStarted(resource string) {
	s.count(resource, "watch", s.stats.WatchRestarts)
}

func (s *Source) count(resource, what string, again map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := what + " " + resource
	if !s.started[k] {
		s.started[k] = true
		return
	}
	again[resource]++
	if what == "list" {
		s.log.Info("listing kubernetes objects again", "resource", resource)
	}
}
