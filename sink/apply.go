package sink

import (
	"errors"
	"fmt"
	"strings"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// applier checks Resources messages against the collections the bridge asked for, writes
// them to the store and builds the answer. It holds no per-stream state, so the ResourceSink
// server shares one between all its streams and an Upstream has its own.
type applier struct {
	store  *store.Store       // read
	writer store.Writer       // written: the store, or a replicated backend in front of it
	fenced store.FencedWriter // the writer, when it fences writes (a replicated backend); else nil
	asked  asked
	node   SinkNode
	// maxOwned is the most resources one owner may hold in all collections
	// (limits.resources_per_producer); 0: no limit (upstreams, which the operator chose).
	maxOwned int
	// domainSuffix completes short hosts and names the service domains that authorization
	// gives a namespace (translate.domain_suffix).
	domainSuffix string

	metrics *metrics.Metrics
	// colls are the metrics of each asked collection (by canonical name), of the trigger and
	// of everything else, resolved once: a producer naming arbitrary collections cannot grow
	// the label set, and a message pays no label lookup.
	colls   map[string]*metrics.Collection
	unasked *metrics.Collection
}

// DefaultDomainSuffix is the mesh's domain suffix when none is given: Kubernetes' default.
const DefaultDomainSuffix = "cluster.local"

func newApplier(st *store.Store, w store.Writer, a asked, node SinkNode, m *metrics.Metrics, domainSuffix string) applier {
	if domainSuffix == "" {
		domainSuffix = DefaultDomainSuffix
	}
	ap := applier{store: st, writer: w, asked: a, node: node, metrics: m, domainSuffix: domainSuffix}
	ap.fenced, _ = w.(store.FencedWriter)
	if m == nil {
		return ap
	}
	ap.colls = make(map[string]*metrics.Collection, len(a.byCanonical)+1)
	for canonical := range a.byCanonical {
		ap.colls[canonical] = m.Collection(metrics.RoleSink, canonical)
	}
	ap.colls[mcp.TriggerCollection] = m.Collection(metrics.RoleSink, mcp.TriggerCollection)
	ap.unasked = m.Collection(metrics.RoleSink, metrics.UnaskedCollection)
	return ap
}

// writerOr is w, or st when w is nil.
func writerOr(w store.Writer, st *store.Store) store.Writer {
	if w == nil {
		return st
	}
	return w
}

// label is the metrics label and handles of a collection a producer named.
func (a *applier) label(name string) (string, *metrics.Collection) {
	if name == mcp.TriggerCollection {
		return name, a.colls[name]
	}
	if _, canonical, ok := a.asked.lookup(name); ok {
		return canonical, a.colls[canonical]
	}
	return metrics.UnaskedCollection, a.unasked
}

// outcome is what handling one Resources message did.
type outcome struct {
	// reply is the ACK or NACK to send.
	reply *mcp.RequestResources
	// canonical is the store collection written (empty when the collection was refused).
	canonical string
	// err is the NACK's fault; nil for an ACK.
	err    error
	result store.Result
	// limit names the limit that refused the message (limits.ResourcesPerProducer), if one did.
	limit string
}

func (o outcome) acked() bool { return o.err == nil }

// handle applies one Resources message for owner, within what the producer may produce, and
// returns the answer. It never panics on what a producer sends, and on any fault it writes
// nothing.
func (a *applier) handle(owner string, rights producerRights, m *mcp.Resources) outcome {
	o := a.apply(owner, rights, m)
	if a.metrics != nil {
		label, cm := a.label(m.GetCollection())
		cm.Size(proto.Size(m))
		if o.acked() {
			cm.ACK()
		} else {
			a.metrics.NACK(metrics.RoleSink, label, codes.Code(o.reply.GetErrorDetail().GetCode()))
		}
	}
	return o
}

func (a *applier) apply(owner string, rights producerRights, m *mcp.Resources) outcome {
	// A replicated store fences the write by the owner's state as the message arrives: if
	// another replica writes for the owner meanwhile (a newer message of the producer, sent
	// there while this replica was slow), this one is abandoned, never applied over it.
	var fence int64
	if a.fenced != nil {
		fence = a.fenced.OwnerFence(owner)
	}
	if m.GetCollection() == mcp.TriggerCollection {
		return a.nack(m, codes.Unimplemented, errors.New("this sink takes no trigger: it sends its requests as soon as the stream opens"))
	}
	if _, canonical, _ := a.asked.lookup(m.GetCollection()); !rights.in(canonical) {
		a.metrics.AuthzRefused(metrics.RoleSink, metrics.RefusedCollection)
		return a.nack(m, codes.PermissionDenied, fmt.Errorf("%s may not produce this collection", rights.who()))
	}
	update, err := a.check(m)
	if err != nil {
		return a.nack(m, codes.InvalidArgument, err)
	}
	if err := a.authorize(owner, rights, update); err != nil {
		a.metrics.AuthzRefused(metrics.RoleSink, metrics.RefusedResource)
		return a.nack(m, codes.PermissionDenied, err)
	}
	a.stampCreation(owner, update)
	var res store.Result
	if a.fenced != nil {
		res, err = a.fenced.ApplyFenced(owner, fence, a.maxOwned, update)
	} else {
		res, err = a.writer.ApplyWithin(owner, a.maxOwned, update)
	}
	var over *store.OwnerLimitError
	if errors.As(err, &over) {
		o := a.nack(m, codes.ResourceExhausted, fmt.Errorf("limits.resources_per_producer: %w; nothing of this message was applied", over))
		o.limit = limits.ResourcesPerProducer
		return o
	}
	var unavailable *store.UnavailableError
	if errors.As(err, &unavailable) {
		return a.nack(m, codes.Unavailable, fmt.Errorf("%w; nothing of this message was applied: send it again", unavailable))
	}
	if err != nil {
		return a.nack(m, codes.InvalidArgument, err)
	}
	return outcome{reply: a.ack(m), canonical: update.Collection, result: res}
}

// check refuses what the store cannot judge (what was asked for, and how) and turns the
// message into a store update.
func (a *applier) check(m *mcp.Resources) (store.Update, error) {
	c, canonical, ok := a.asked.lookup(m.GetCollection())
	switch {
	case !ok:
		return store.Update{}, errors.New("collection was not asked for by this sink")
	case m.GetIncremental() && !c.Incremental:
		return store.Update{}, errors.New("incremental update, but this sink asked for full state (incremental: false)")
	case m.GetNonce() == "":
		// Without a nonce an answer cannot name what it acknowledges.
		return store.Update{}, errors.New("nonce is empty: every Resources message needs one")
	}
	u := store.Update{Collection: canonical, Full: !m.GetIncremental(), Resources: m.GetResources()}
	if m.GetIncremental() {
		// In a full state, removed_resources is meaningless and the protocol says to ignore it.
		u.Removed = m.GetRemovedResources()
	}
	for _, r := range u.Resources {
		if err := checkNameLength(r.GetMetadata().GetName()); err != nil {
			return store.Update{}, err
		}
	}
	for _, name := range u.Removed {
		if err := checkNameLength(name); err != nil {
			return store.Update{}, err
		}
	}
	return u, nil
}

// Kubernetes' limits on a resource's name: a namespace is a DNS label, a name a DNS subdomain.
const (
	maxNamespaceLength = 63
	maxNameLength      = 253
)

// checkNameLength refuses a name, "namespace/name" or "name", longer than Kubernetes allows:
// no Istio resource has one, and every consumer of its namespace would be sent it.
func checkNameLength(full string) error {
	ns, name, namespaced := strings.Cut(full, "/")
	if !namespaced {
		ns, name = "", full
	}
	switch {
	case len(ns) > maxNamespaceLength:
		return &store.ValidationError{Resource: abbreviate(full), Err: fmt.Errorf("the namespace is %d characters long, over Kubernetes' limit of %d", len(ns), maxNamespaceLength)}
	case len(name) > maxNameLength:
		return &store.ValidationError{Resource: abbreviate(full), Err: fmt.Errorf("the name is %d characters long, over Kubernetes' limit of %d", len(name), maxNameLength)}
	}
	return nil
}

// abbreviate keeps a refused name's NACK short: its first 64 bytes, then how many more.
func abbreviate(name string) string {
	const keep = 64
	if len(name) <= keep {
		return name
	}
	return fmt.Sprintf("%s... (%d bytes more)", strings.ToValidUTF8(name[:keep], ""), len(name)-keep)
}

func (a *applier) ack(m *mcp.Resources) *mcp.RequestResources {
	return a.request(m.GetCollection(), m.GetNonce())
}

func (a *applier) nack(m *mcp.Resources, code codes.Code, err error) outcome {
	req := a.request(m.GetCollection(), m.GetNonce())
	err = faultError(m.GetCollection(), err)
	req.ErrorDetail = &rpcstatus.Status{Code: int32(code), Message: err.Error()}
	return outcome{reply: req, err: err}
}

// request is a RequestResources for a collection as the producer named it; with an empty
// nonce, it is the request that opens the collection on a stream.
//
// Every request built is sent, so it is counted here (mcpbridge_requests_total, role=sink).
func (a *applier) request(collection, nonce string) *mcp.RequestResources {
	if a.metrics != nil {
		_, cm := a.label(collection)
		cm.Request()
	}
	req := &mcp.RequestResources{SinkNode: a.node.proto(), Collection: collection, ResponseNonce: nonce}
	if c, _, ok := a.asked.lookup(collection); ok {
		req.Incremental = c.Incremental
	}
	return req
}

// openingRequests open every collection the producer may produce on a new stream of one owner
// (a producer dialling the ResourceSink, or an upstream the bridge dials). An incremental
// collection is resumed from the versions that owner's copies have in the store, served or
// shadowed by another owner's, so that the producer sends only the difference and the
// removals of what it deleted while away; an owner holding nothing there is asked for its
// full state.
func (a *applier) openingRequests(owner string, rights producerRights) []*mcp.RequestResources {
	v := a.store.View()
	out := make([]*mcp.RequestResources, 0, len(a.asked.list))
	for _, c := range a.asked.list {
		if _, canonical, _ := a.asked.lookup(c.Name); !rights.in(canonical) {
			continue
		}
		req := a.request(c.Name, "")
		if c.Incremental {
			_, canonical, _ := a.asked.lookup(c.Name)
			if held := v.OwnedVersions(canonical, owner); len(held) > 0 {
				req.InitialResourceVersions = held
			}
		}
		out = append(out, req)
	}
	return out
}

// faultError names the collection as the producer did (not the canonical name the store
// saw), then the resource and the fault.
func faultError(collection string, err error) error {
	var ve *store.ValidationError
	if errors.As(err, &ve) {
		if ve.Resource != "" {
			return fmt.Errorf("collection %q, resource %q: %w", collection, ve.Resource, ve.Err)
		}
		err = ve.Err
	}
	return fmt.Errorf("collection %q: %w", collection, err)
}

// producerRights are what a producer may write: a peer's grant (ResourceSink) or an upstream's
// configured scope. The zero value allows everything.
type producerRights struct {
	grant *authz.Grant
}

func (r producerRights) in(collection string) bool {
	return r.grant == nil || r.grant.MayProduceIn(collection)
}

func (r producerRights) may(collection, name string) bool {
	return r.grant == nil || r.grant.MayProduce(collection, name)
}

func (r producerRights) who() string {
	if r.grant == nil {
		return "this producer"
	}
	return "identity " + r.grant.Identity
}

// stampCreation sets each upserted resource's metadata.create_time to when the bridge first
// accepted its name from this owner, kept across the owner's updates of it, as the Kubernetes
// API server stamps creationTimestamp: whatever the producer sent is ignored. Istio's
// "oldest wins" (a host defined by two ServiceEntries, routed by two VirtualServices, the
// order of services) reads it, and a producer that could write 1970 there would win every
// such choice. It goes with the resource into the store, and so survives restarts and
// replicas (store.backend: etcd).
func (a *applier) stampCreation(owner string, u store.Update) {
	v := a.store.View()
	now := timestamppb.New(time.Now().UTC().Truncate(time.Second))
	for _, r := range u.Resources {
		md := r.GetMetadata()
		if md == nil {
			continue // the store refuses it
		}
		ct := now
		if e := v.OwnedCopy(u.Collection, owner, md.GetName()); e != nil && !e.Deleted {
			if t := e.CreateTime(); !t.IsZero() {
				ct = timestamppb.New(t)
			}
		}
		md.CreateTime = ct
	}
}

// authorizeHosts refuses a resource that defines or routes a host outside the producer's
// hosts (authz.Scope.Hosts: by default the service domains of its namespaces). A host
// belongs to a namespace: without this, a producer of one namespace could define another's
// service (a ServiceEntry for billing.bookinfo.svc.cluster.local), route it, set its traffic
// policy or bind it on a shared gateway. Short names are completed in the resource's
// namespace first, as the translation completes them. A body that does not decode names no
// host here; the store's validation refuses it.
func (a *applier) authorizeHosts(rights producerRights, collection, name string, r *mcpapi.Resource) error {
	ns, namespaced := authz.NamespaceOf(name)
	if rights.grant.MayProduceAnyHost(collection, ns, namespaced) {
		return nil // not decoded for nothing: an operator's producer, or hosts "*"
	}
	hosts, err := kinds.HostsOf(collection, r)
	if err != nil || len(hosts) == 0 {
		return nil
	}
	for _, h := range hosts {
		host := hostname.Complete(h.Host, ns, a.domainSuffix)
		if !rights.grant.MayProduceHost(collection, ns, namespaced, host, a.domainSuffix) {
			return fmt.Errorf("%s may not define host %q (resource %q, %s): a host belongs to a namespace, and its rules allow the hosts %s here (authz.rules produce.hosts)",
				rights.who(), host, name, h.Field, rights.grant.HostsAllowed(collection, ns, namespaced, a.domainSuffix))
		}
	}
	return nil
}

// authorize refuses an update that would change a resource outside the producer's rights,
// naming the first: what it upserts, the owner's copies it removes, and, for a full state, the
// owner's copies it would remove by leaving them out. Removing a name the owner holds no copy
// of changes nothing and is let through, as a producer resending its removals after a NACK
// does. An owner named by mcp-producer-id may hold copies another identity wrote: the name
// grants nothing.
func (a *applier) authorize(owner string, rights producerRights, u store.Update) error {
	if rights.grant == nil || rights.grant.All() {
		return nil
	}
	refuse := func(name string) error {
		return fmt.Errorf("%s may not produce resource %q", rights.who(), name)
	}
	for _, r := range u.Resources {
		name := r.GetMetadata().GetName()
		if !rights.may(u.Collection, name) {
			return refuse(name)
		}
		if err := a.authorizeHosts(rights, u.Collection, name, r); err != nil {
			return err
		}
	}
	var held map[string]string
	if len(u.Removed) > 0 || u.Full {
		held = a.store.View().OwnedVersions(u.Collection, owner)
	}
	for _, name := range u.Removed {
		if _, ok := held[name]; ok && !rights.may(u.Collection, name) {
			return refuse(name)
		}
	}
	if u.Full {
		kept := make(map[string]bool, len(u.Resources))
		for _, r := range u.Resources {
			kept[r.GetMetadata().GetName()] = true
		}
		for name := range held {
			if !kept[name] && !rights.may(u.Collection, name) {
				return refuse(name)
			}
		}
	}
	return nil
}
