package envoy

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/translate"
)

// Istio kinds the translation reads.
const (
	kindServiceEntry    = "ServiceEntry"
	kindVirtualService  = "VirtualService"
	kindDestinationRule = "DestinationRule"
	kindGateway         = "Gateway"
	kindWorkloadEntry   = "WorkloadEntry"
)

// inputKinds are the kinds the translation reads, in the order their changes are applied.
var inputKinds = []string{kindServiceEntry, kindWorkloadEntry, kindDestinationRule, kindVirtualService, kindGateway}

// InputCollections returns the canonical store collections the translation reads.
func InputCollections() []string {
	out := make([]string, 0, len(inputKinds))
	for _, k := range inputKinds {
		out = append(out, collectionOf(k))
	}
	return out
}

// collectionOf is the canonical collection of a kind of the naming table.
func collectionOf(kind string) string {
	for _, k := range translate.Kinds() {
		if k.Kind == kind {
			return k.Collection
		}
	}
	panic("envoy: kind " + kind + " is not in the naming table") // a constant of this package
}

// meta is what the translation uses of a resource's metadata, and what tells that a
// resource read again is the one already held.
type meta struct {
	Key       string // "namespace/name"
	Namespace string
	Version   string
	Created   time.Time
	body      []byte // the encoded spec, as stored (immutable)
}

// same reports whether r is the resource this metadata was read from: same version, same
// creation time (which orders competing resources) and same spec. The version alone is not
// enough: when two producers hold a name, the store may switch from one's copy to the other's,
// and both may well call theirs version "1".
func (m *meta) same(r *mcpapi.Resource) bool {
	md := r.GetMetadata()
	created := time.Time{}
	if t := md.GetCreateTime(); t != nil {
		created = t.AsTime()
	}
	return m.Version == md.GetVersion() && m.Created.Equal(created) && bytes.Equal(m.body, r.GetBody().GetValue())
}

// before orders resources that compete for the same host: the older first, as Istio does,
// then by namespace/name so that the order never depends on arrival.
func (m *meta) before(o *meta) bool {
	if !m.Created.Equal(o.Created) {
		return m.Created.Before(o.Created)
	}
	return m.Key < o.Key
}

// serviceEntry keeps what the translation reads of a ServiceEntry between builds; the
// endpoints, most of its size, are decoded again from the stored body by the build that needs
// them (endpoints), so that the translator holds no second decoded copy of the mesh (at
// 100,000 ServiceEntries that copy was 190 MB).
type serviceEntry struct {
	meta
	hosts      []string // as written: a ServiceEntry's hosts are not completed (Istio takes them as FQDNs)
	ports      []*networking.ServicePort
	resolution networking.ServiceEntry_Resolution
	selector   map[string]string // workloadSelector.labels
	inline     int               // how many endpoints it lists
	// read is the spec as decoded when the ServiceEntry was read, until the first build
	// takes it: a full load then decodes each ServiceEntry once, not twice.
	read atomic.Pointer[networking.ServiceEntry]
}

// endpoints decodes the ServiceEntry's inline endpoints from its stored body, which decoded
// without fault when the ServiceEntry was read.
func (se *serviceEntry) endpoints() []*networking.WorkloadEntry {
	if se.inline == 0 {
		return nil
	}
	if spec := se.read.Swap(nil); spec != nil {
		return spec.GetEndpoints()
	}
	spec := &networking.ServiceEntry{}
	if err := proto.Unmarshal(se.body, spec); err != nil {
		return nil // not reached: the same bytes decoded when read
	}
	return spec.GetEndpoints()
}

type virtualService struct {
	meta
	spec  *networking.VirtualService
	hosts []string // completed with fqdn
	// gateways are the gateways the VirtualService is bound to, as "namespace/name" keys, and
	// mesh tells whether it applies to the mesh (sidecars and proxyless clients): it does when
	// gateways is empty in the spec or lists "mesh".
	gateways []string
	mesh     bool
}

type destinationRule struct {
	meta
	spec *networking.DestinationRule
	host string // completed with fqdn
}

type gateway struct {
	meta
	spec *networking.Gateway
}

type workloadEntry struct {
	meta
	spec *networking.WorkloadEntry
}

// decodeBody unmarshals a stored resource's body into the kind's message.
func decodeBody(kind string, r *mcpapi.Resource, into proto.Message) error {
	k, _ := translate.ByCollection(collectionOf(kind))
	body := r.GetBody()
	if body == nil {
		return fmt.Errorf("body is missing")
	}
	if body.GetTypeUrl() != k.AMCSTypeURL {
		return fmt.Errorf("body type %q is not %q", body.GetTypeUrl(), k.AMCSTypeURL)
	}
	if err := proto.Unmarshal(body.GetValue(), into); err != nil {
		return fmt.Errorf("body does not decode as %s: %w", k.Message, err)
	}
	return nil
}

func metaOf(r *mcpapi.Resource) meta {
	md := r.GetMetadata()
	ns, _ := splitKey(md.GetName())
	if ns == "" {
		ns = "default" // a namespaced kind without a namespace: Kubernetes' default
	}
	m := meta{Key: md.GetName(), Namespace: ns, Version: md.GetVersion(), body: r.GetBody().GetValue()}
	if t := md.GetCreateTime(); t != nil {
		m.Created = t.AsTime()
	}
	return m
}

func newServiceEntry(r *mcpapi.Resource) (*serviceEntry, error) {
	spec := &networking.ServiceEntry{}
	if err := decodeBody(kindServiceEntry, r, spec); err != nil {
		return nil, err
	}
	se := &serviceEntry{meta: metaOf(r), hosts: spec.GetHosts(), ports: spec.GetPorts(), resolution: spec.GetResolution(),
		selector: spec.GetWorkloadSelector().GetLabels(), inline: len(spec.GetEndpoints())}
	if se.inline > 0 {
		se.read.Store(spec) // a ServiceEntry that loses its hosts to an older one keeps it
	}
	return se, nil
}

func newVirtualService(r *mcpapi.Resource, suffix string) (*virtualService, error) {
	spec := &networking.VirtualService{}
	if err := decodeBody(kindVirtualService, r, spec); err != nil {
		return nil, err
	}
	vs := &virtualService{meta: metaOf(r), spec: spec}
	for _, h := range spec.GetHosts() {
		vs.hosts = append(vs.hosts, fqdn(h, vs.Namespace, suffix))
	}
	vs.gateways, vs.mesh = bindings(spec.GetGateways(), vs.Namespace)
	return vs, nil
}

// meshGateway is the reserved gateway name that binds a VirtualService to the sidecars.
const meshGateway = "mesh"

// bindings resolves a gateways list: "name" is in the given namespace, "namespace/name" as
// written, "mesh" the mesh. An empty list means the mesh only.
func bindings(names []string, namespace string) (gateways []string, mesh bool) {
	if len(names) == 0 {
		return nil, true
	}
	for _, g := range names {
		switch {
		case g == meshGateway:
			mesh = true
		case g == "":
		default:
			gateways = append(gateways, gatewayKey(g, namespace))
		}
	}
	return gateways, mesh
}

func gatewayKey(name, namespace string) string {
	if ns, n := splitKey(name); ns != "" {
		return ns + "/" + n
	}
	return namespace + "/" + name
}

func newDestinationRule(r *mcpapi.Resource, suffix string) (*destinationRule, error) {
	spec := &networking.DestinationRule{}
	if err := decodeBody(kindDestinationRule, r, spec); err != nil {
		return nil, err
	}
	dr := &destinationRule{meta: metaOf(r), spec: spec}
	dr.host = fqdn(spec.GetHost(), dr.Namespace, suffix)
	return dr, nil
}

func newGateway(r *mcpapi.Resource) (*gateway, error) {
	spec := &networking.Gateway{}
	if err := decodeBody(kindGateway, r, spec); err != nil {
		return nil, err
	}
	return &gateway{meta: metaOf(r), spec: spec}, nil
}

func newWorkloadEntry(r *mcpapi.Resource) (*workloadEntry, error) {
	spec := &networking.WorkloadEntry{}
	if err := decodeBody(kindWorkloadEntry, r, spec); err != nil {
		return nil, err
	}
	return &workloadEntry{meta: metaOf(r), spec: spec}, nil
}

// selects reports whether every label of the selector is on the workload. An empty selector
// selects nothing: Istio's ServiceEntry without a workloadSelector has no selected workloads.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
