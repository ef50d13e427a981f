package envoy

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

// Istio kinds the translation reads.
const (
	kindServiceEntry    = "ServiceEntry"
	kindVirtualService  = "VirtualService"
	kindDestinationRule = "DestinationRule"
	kindGateway         = "Gateway"
	kindWorkloadEntry   = "WorkloadEntry"
	kindSidecar         = "Sidecar"
)

// inputKinds are the kinds the translation reads, in the order their changes are applied.
var inputKinds = []string{kindServiceEntry, kindWorkloadEntry, kindDestinationRule, kindVirtualService, kindGateway, kindSidecar}

// reportedKinds change what istiod sends its proxies but the translation does not apply them:
// each resource of theirs is a fault (nothing silent), with the reason.
var reportedKinds = map[string]string{
	"EnvoyFilter": "not applied: the bridge does not patch the Envoy configuration it builds",
}

// watchedCollections are the collections the translation reads: its inputs, and the kinds it
// only reports.
func watchedCollections() []string {
	out := InputCollections()
	for _, k := range slices.Sorted(maps.Keys(reportedKinds)) {
		out = append(out, collectionOf(k))
	}
	return out
}

// InputCollections returns the canonical store collections the translation reads.
func InputCollections() []string {
	out := make([]string, 0, len(inputKinds))
	for _, k := range inputKinds {
		out = append(out, collectionOf(k))
	}
	return out
}

// collectionOf is the canonical collection of a kind of the naming table.
func collectionOf(kind string) string { return kindOf(kind).Collection }

// kindOf is a kind of the naming table by its name.
func kindOf(kind string) *kinds.Kind {
	k, ok := kindsByName[kind]
	if !ok {
		panic("envoy: kind " + kind + " is not in the naming table") // a constant of this package
	}
	return k
}

// kindsByName indexes the naming table once: every input's body is checked against its
// kind's, and copying the table to find it was 114 MB of garbage at a million inputs.
var kindsByName = func() map[string]*kinds.Kind {
	m := map[string]*kinds.Kind{}
	for _, k := range kinds.Kinds() {
		if _, dup := m[k.Kind]; !dup { // the first in the table's order, as the search found
			m[k.Kind] = k
		}
	}
	return m
}()

// Input is one Istio resource as the translation reads it: its name ("namespace/name"), its
// version and creation time, and its body, still encoded.
type Input struct {
	Name, Version string
	Created       time.Time
	TypeURL       string
	Value         []byte // the body's encoding; kept, never modified
	// Checked: Value is known to be a valid encoding of TypeURL's message (the store's
	// Entry.BodyChecked), and is not checked again (checkBody).
	Checked bool
}

// InputOf is a resource as the translation reads it.
func InputOf(r *mcpapi.Resource) Input {
	md := r.GetMetadata()
	in := Input{Name: md.GetName(), Version: md.GetVersion(), TypeURL: r.GetBody().GetTypeUrl(), Value: r.GetBody().GetValue()}
	if t := md.GetCreateTime(); t != nil {
		in.Created = t.AsTime()
	}
	return in
}

// InputOfEntry is a stored resource as the translation reads it: views into its encoding,
// nothing decoded.
func InputOfEntry(e *store.Entry) Input {
	typeURL, value := e.Body()
	return Input{Name: e.Name, Version: e.Version, Created: e.CreateTime(), TypeURL: typeURL, Value: value, Checked: e.BodyChecked()}
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

// same reports whether in is the resource this metadata was read from: same version, same
// creation time (which orders competing resources) and same spec. The version alone is not
// enough: when two producers hold a name, the store may switch from one's copy to the other's,
// and both may well call theirs version "1".
func (m *meta) same(in Input) bool {
	return m.Version == in.Version && m.Created.Equal(in.Created) && bytes.Equal(m.body, in.Value)
}

// before orders resources that compete for the same host: the older first, as Istio does,
// then by namespace/name so that the order never depends on arrival.
func (m *meta) before(o *meta) bool {
	if !m.Created.Equal(o.Created) {
		return m.Created.Before(o.Created)
	}
	return m.Key < o.Key
}

// serviceEntry keeps what the translation indexes of a ServiceEntry (see scan.go); the
// endpoints, most of its size, are decoded from the stored body by the build that needs them
// (endpoints), so that the translator holds no second decoded copy of the mesh.
type serviceEntry struct {
	meta
	hosts      []string // as written: a ServiceEntry's hosts are not completed (Istio takes them as FQDNs)
	ports      []servicePort
	resolution networking.ServiceEntry_Resolution
	inline     int32 // how many endpoints it lists
	// rare holds the fields few ServiceEntries set, so that the many (a million at scale) are
	// 224 bytes, not 320; nil when it sets none of them.
	rare *serviceEntryRare
	// firstHost and firstPort hold the first host and port, and alone a list of just this
	// ServiceEntry: hosts, ports and a host's seList point into them when there is one of each,
	// as for most ServiceEntries, so that the record is one object for the collector to reach
	// and not four (a million each at scale, where marking costs per object reached): 224
	// bytes in one size class, where 160, 16, 48 and 8 were 232 in four. A record is never
	// copied (its slices would point into the original).
	firstHost [1]string
	firstPort [1]servicePort
	alone     [1]*serviceEntry
}

// serviceEntryRare is what few ServiceEntries set.
type serviceEntryRare struct {
	addresses []string          // as written: the VIPs (or CIDRs) of its TCP listeners
	vip       string            // the address its hosts answer to (serviceVIP), "" for none
	selector  map[string]string // workloadSelector.labels
	sans      []string          // subjectAltNames
	exportTo  []string          // as written; empty: every namespace (scope.go)
}

func (se *serviceEntry) addresses() []string {
	if se.rare == nil {
		return nil
	}
	return se.rare.addresses
}

// vip is the address its hosts answer to (serviceVIP), "" for none.
func (se *serviceEntry) vip() string {
	if se.rare == nil {
		return ""
	}
	return se.rare.vip
}

// selector is its workloadSelector's labels.
func (se *serviceEntry) selector() map[string]string {
	if se.rare == nil {
		return nil
	}
	return se.rare.selector
}

// sans are its subjectAltNames.
func (se *serviceEntry) sans() []string {
	if se.rare == nil {
		return nil
	}
	return se.rare.sans
}

// exportTo is its exportTo as written; empty: every namespace (scope.go).
func (se *serviceEntry) exportTo() []string {
	if se.rare == nil {
		return nil
	}
	return se.rare.exportTo
}

// sameShape reports whether o differs from se at most in its endpoints: what else the
// translation reads of it (hosts, ports, resolution, workload selector, and the creation time
// that orders competing ServiceEntries) is the same.
func (se *serviceEntry) sameShape(o *serviceEntry) bool {
	return se.Namespace == o.Namespace && se.Created.Equal(o.Created) && se.resolution == o.resolution && se.vip() == o.vip() &&
		slices.Equal(se.hosts, o.hosts) && slices.Equal(se.addresses(), o.addresses()) && slices.Equal(se.ports, o.ports) &&
		maps.Equal(se.selector(), o.selector()) && slices.Equal(se.sans(), o.sans()) && slices.Equal(se.exportTo(), o.exportTo())
}

// eds reports whether a resolution gives EDS clusters, whose endpoints are load assignments
// of their own; DNS clusters hold theirs.
func eds(r networking.ServiceEntry_Resolution) bool {
	return r == networking.ServiceEntry_STATIC || r == networking.ServiceEntry_NONE
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
	spec   *networking.WorkloadEntry
	labels labels // spec's, sorted: what workload selectors look up
}

// checkBody checks that a resource's body is of the kind and valid, without decoding it; the
// body's encoding is taken as valid when its producer vouched for it (Input.Checked).
func checkBody(kind string, in Input) error {
	k := kindOf(kind)
	if in.TypeURL == "" && len(in.Value) == 0 {
		return fmt.Errorf("body is missing")
	}
	if in.TypeURL != k.AMCSTypeURL {
		return fmt.Errorf("body type %q is not %q", in.TypeURL, k.AMCSTypeURL)
	}
	if in.Checked {
		return nil
	}
	return k.CheckBody(in.Value)
}

// decodeBody unmarshals a stored resource's body into the kind's message.
func decodeBody(kind string, in Input, into proto.Message) error {
	k := kindOf(kind)
	if in.TypeURL == "" && len(in.Value) == 0 {
		return fmt.Errorf("body is missing")
	}
	if in.TypeURL != k.AMCSTypeURL {
		return fmt.Errorf("body type %q is not %q", in.TypeURL, k.AMCSTypeURL)
	}
	if err := proto.Unmarshal(in.Value, into); err != nil {
		return fmt.Errorf("body does not decode as %s: %w", k.Message, err)
	}
	return nil
}

func metaOf(in Input) meta {
	ns, _ := splitKey(in.Name)
	if ns == "" {
		ns = "default" // a namespaced kind without a namespace: Kubernetes' default
	}
	return meta{Key: in.Name, Namespace: ns, Version: in.Version, Created: in.Created, body: in.Value}
}

func newServiceEntry(in Input) (*serviceEntry, error) {
	if err := checkBody(kindServiceEntry, in); err != nil {
		return nil, err
	}
	se := &serviceEntry{meta: metaOf(in)}
	// The first host and port are appended into the record itself (see firstHost).
	sc := scanned{hosts: se.firstHost[:0], ports: se.firstPort[:0]}
	scanServiceEntryInto(in.Value, &sc)
	se.hosts, se.ports, se.resolution, se.inline = sc.hosts, sc.ports, sc.resolution, int32(sc.endpoints)
	if len(sc.addresses) > 0 || len(sc.selector) > 0 || len(sc.sans) > 0 || len(sc.exportTo) > 0 {
		se.rare = &serviceEntryRare{addresses: sc.addresses, vip: serviceVIP(sc.addresses), selector: sc.selector,
			sans: sc.sans, exportTo: sc.exportTo}
	}
	return se, nil
}

func newVirtualService(in Input, suffix string) (*virtualService, error) {
	spec := &networking.VirtualService{}
	if err := decodeBody(kindVirtualService, in, spec); err != nil {
		return nil, err
	}
	vs := &virtualService{meta: metaOf(in), spec: spec}
	for _, h := range spec.GetHosts() {
		vs.hosts = append(vs.hosts, hostname.Complete(h, vs.Namespace, suffix))
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

func newDestinationRule(in Input, suffix string) (*destinationRule, error) {
	spec := &networking.DestinationRule{}
	if err := decodeBody(kindDestinationRule, in, spec); err != nil {
		return nil, err
	}
	dr := &destinationRule{meta: metaOf(in), spec: spec}
	dr.host = hostname.Complete(spec.GetHost(), dr.Namespace, suffix)
	return dr, nil
}

func newGateway(in Input) (*gateway, error) {
	spec := &networking.Gateway{}
	if err := decodeBody(kindGateway, in, spec); err != nil {
		return nil, err
	}
	return &gateway{meta: metaOf(in), spec: spec}, nil
}

func newWorkloadEntry(in Input) (*workloadEntry, error) {
	spec := &networking.WorkloadEntry{}
	if err := decodeBody(kindWorkloadEntry, in, spec); err != nil {
		return nil, err
	}
	return &workloadEntry{meta: metaOf(in), spec: spec, labels: labelsOf(spec.GetLabels())}, nil
}

// sidecar is a Sidecar: what its namespace's proxies import (scope.go).
type sidecar struct {
	meta
	selects bool // it has a workloadSelector: it is for some workloads, and not applied
	// egress are the hosts its egress listeners import, "NAMESPACE/DNSNAME" (every host when
	// it has none, as istiod's default).
	egress []egressHost
}

type egressHost struct{ namespace, dnsName string }

func newSidecar(in Input) (*sidecar, error) {
	spec := &networking.Sidecar{}
	if err := decodeBody(kindSidecar, in, spec); err != nil {
		return nil, err
	}
	sc := &sidecar{meta: metaOf(in), selects: spec.GetWorkloadSelector() != nil}
	if len(spec.GetEgress()) == 0 {
		// istiod's default egress listener: every host of every namespace.
		sc.egress = []egressHost{{"*", "*"}}
	}
	for _, l := range spec.GetEgress() {
		// An egress listener with a port imports its hosts as one without does; the listener
		// of that port alone is not built (reported: untranslated.go).
		for _, h := range l.GetHosts() {
			ns, dns, ok := strings.Cut(h, "/")
			if !ok {
				ns, dns = "*", h // validation requires the namespace; a bare name means any
			}
			sc.egress = append(sc.egress, egressHost{ns, dns})
		}
	}
	return sc, nil
}
