package kubesource

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/sink/ownerstate"
	"github.com/mcpbridge/mcpbridge/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// A Kubernetes Service becomes a ServiceEntry as istiod's Kubernetes registry sees it:
//
//   - name "NAMESPACE/NAME.svc" (the ".svc" keeps it apart from a ServiceEntry named like the
//     Service; an Istio ServiceEntry actually named NAME.svc is served instead, and the Service
//     is a fault), labels and annotations of the Service;
//   - host NAME.NAMESPACE.svc.DOMAIN_SUFFIX, addresses the cluster IPs (none when headless);
//   - one port per Service port: its number, its name (or "port-NUMBER" when unnamed), and
//     the protocol istiod gives it: from appProtocol, else from the name's prefix (http-,
//     grpc-, tcp-...), else none (sniffed); UDP and SCTP ports are left out, as istiod does;
//   - location MESH_INTERNAL, resolution STATIC, and as endpoints the ready addresses of its
//     EndpointSlices (IPv4 and IPv6), each with the ports of its slice by name;
//   - an ExternalName Service: resolution DNS and its external name as the one endpoint.
//
// EndpointSlices carry no pod labels: the endpoints have none, so subsets that select pods by
// label match none of them (a known limit; docs/sources.md).

var (
	servicesGVR       = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	endpointSlicesGVR = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
)

// byServiceIndex indexes EndpointSlices by the "namespace/name" of their Service.
const byServiceIndex = "service"

// serviceWatch holds the informers of Services and EndpointSlices.
type serviceWatch struct {
	s              *Source
	services       cache.SharedIndexInformer
	endpointSlices cache.SharedIndexInformer
	kind           *kinds.Kind // ServiceEntry
}

func (s *Source) newServiceWatch(f *informers) *serviceWatch {
	se, _ := kinds.ByGroupVersionKind("networking.istio.io/v1alpha3", "ServiceEntry")
	sw := &serviceWatch{s: s, kind: se}
	sw.services = f.informer(servicesGVR, "services", nil)
	_, _ = sw.services.AddEventHandler(handlers(func(ns, name string) { s.mark(objectKey{servicesIndex, ns, name}) }))

	sw.endpointSlices = f.informer(endpointSlicesGVR, "endpointslices.discovery.k8s.io", cache.Indexers{byServiceIndex: sliceService})
	_, _ = sw.endpointSlices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { sw.sliceChanged(obj) },
		UpdateFunc: func(old, obj any) { sw.sliceChanged(old); sw.sliceChanged(obj) },
		DeleteFunc: func(obj any) { sw.sliceChanged(obj) },
	})
	return sw
}

// sliceService is the "namespace/name" of an EndpointSlice's Service.
func sliceService(obj any) ([]string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	svc := u.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{u.GetNamespace() + "/" + svc}, nil
}

func (sw *serviceWatch) sliceChanged(obj any) {
	keys, _ := sliceService(obj)
	for _, k := range keys {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		sw.s.mark(objectKey{servicesIndex, ns, name})
	}
}

func (sw *serviceWatch) synced() []cache.InformerSynced {
	return []cache.InformerSynced{sw.services.HasSynced, sw.endpointSlices.HasSynced}
}

// inNamespace are the keys of every Service of a namespace.
func (sw *serviceWatch) inNamespace(ns string) []objectKey {
	objs, _ := sw.services.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	keys := make([]objectKey, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			keys = append(keys, objectKey{servicesIndex, ns, u.GetName()})
		}
	}
	return keys
}

// refresh makes the ServiceEntry of one Service what the Service and its slices now say.
// istioHolds says whether an Istio ServiceEntry of the cluster holds the name: that one is
// served, and the Service is a fault until the name is free.
func (sw *serviceWatch) refresh(k objectKey, selected bool, istioHolds func(name string) bool, state *ownerstate.State) {
	name := k.namespace + "/" + k.name + ".svc"
	obj, exists, _ := sw.services.GetIndexer().GetByKey(k.namespace + "/" + k.name)
	u, ok := obj.(*unstructured.Unstructured)
	if istioHolds(name) {
		if exists && selected {
			sw.s.setObjectFaults(k, []error{&filesource.DecodeError{File: origin, Kind: "Service", Name: k.namespace + "/" + k.name,
				Err: fmt.Errorf("its ServiceEntry would be named %s, the name of an Istio ServiceEntry of the cluster, which is served instead", name)}})
		} else {
			sw.s.setObjectFaults(k, nil)
		}
		return
	}
	if !exists || !ok || !selected {
		state.Delete(sw.kind.Collection, name)
		sw.s.setObjectFaults(k, nil)
		return
	}
	enc, err := sw.encode(u, name)
	if err != nil {
		sw.s.setObjectFaults(k, []error{&filesource.DecodeError{File: origin, Kind: "Service", Name: k.namespace + "/" + k.name, Err: err}})
		return
	}
	sw.s.setObjectFaults(k, nil)
	state.Put(sw.kind.Collection, enc)
}

func (sw *serviceWatch) encode(u *unstructured.Unstructured, name string) (store.Encoded, error) {
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &svc); err != nil {
		return store.Encoded{}, err
	}
	se := serviceEntryOf(&svc, sw.s.opts.DomainSuffix, sw.slicesOf(&svc))
	md := &mcpapi.Metadata{
		Name: name, Labels: svc.Labels, Annotations: svc.Annotations,
		CreateTime: timestamppb.New(svc.CreationTimestamp.Time),
	}
	if err := sw.kind.Validate(md, se); err != nil {
		return store.Encoded{}, fmt.Errorf("as a ServiceEntry: %w", err)
	}
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, se, proto.MarshalOptions{Deterministic: true}); err != nil {
		return store.Encoded{}, err
	}
	enc, err := store.Encode(&mcpapi.Resource{Metadata: md, Body: body})
	return enc.Checked(), err // marshalled from the typed message
}

// slicesOf are the EndpointSlices of a Service, in name order.
func (sw *serviceWatch) slicesOf(svc *corev1.Service) []*discoveryv1.EndpointSlice {
	objs, _ := sw.endpointSlices.GetIndexer().ByIndex(byServiceIndex, svc.Namespace+"/"+svc.Name)
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var es discoveryv1.EndpointSlice
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &es) == nil {
			out = append(out, &es)
		}
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// serviceEntryOf is a Service as a ServiceEntry (see the mapping above).
func serviceEntryOf(svc *corev1.Service, domainSuffix string, eps []*discoveryv1.EndpointSlice) *networking.ServiceEntry {
	se := &networking.ServiceEntry{
		Hosts:      []string{svc.Name + "." + svc.Namespace + ".svc." + domainSuffix},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			se.Addresses = append(se.Addresses, ip)
		}
	}
	for _, p := range svc.Spec.Ports {
		if !servedPort(p) {
			continue
		}
		se.Ports = append(se.Ports, &networking.ServicePort{
			Number: uint32(p.Port), Name: portName(p), Protocol: portProtocol(p),
		})
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		se.Resolution = networking.ServiceEntry_DNS
		se.Addresses = nil
		se.Endpoints = []*networking.WorkloadEntry{{Address: svc.Spec.ExternalName}}
		return se
	}
	se.Endpoints = endpointsOf(svc, eps)
	return se
}

// servedPort says whether a Service port is one of the ServiceEntry's: istiod leaves UDP and
// SCTP ports out.
func servedPort(p corev1.ServicePort) bool {
	return p.Protocol != corev1.ProtocolUDP && p.Protocol != corev1.ProtocolSCTP
}

func portName(p corev1.ServicePort) string {
	if p.Name != "" {
		return p.Name
	}
	return "port-" + strconv.Itoa(int(p.Port))
}

// portProtocol is the protocol istiod gives a Service port: appProtocol first, then the name's
// prefix before "-" (or the whole name), else none (istiod sniffs it).
func portProtocol(p corev1.ServicePort) string {
	if p.AppProtocol != nil {
		if proto := protocolOf(*p.AppProtocol); proto != "" {
			return proto
		}
	}
	name := strings.ToLower(p.Name)
	if i := strings.IndexByte(name, '-'); i >= 0 {
		name = name[:i]
	}
	return protocolOf(name)
}

// protocolOf maps an appProtocol or a port name's prefix to an Istio protocol.
func protocolOf(s string) string {
	switch strings.ToLower(s) {
	case "http", "http-web", "kubernetes.io/ws", "kubernetes.io/wss":
		return "HTTP"
	case "http2", "kubernetes.io/h2c":
		return "HTTP2"
	case "grpc", "grpc-web":
		return "GRPC"
	case "https":
		return "HTTPS"
	case "tls":
		return "TLS"
	case "tcp":
		return "TCP"
	case "mongo":
		return "MONGO"
	case "redis":
		return "REDIS"
	case "mysql":
		return "MYSQL"
	}
	return ""
}

// endpointsOf are the ready addresses of a Service's slices, each address once, with the
// ports of its slice that the Service names.
func endpointsOf(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) []*networking.WorkloadEntry {
	// Only the ports the ServiceEntry has: an endpoint port the ServiceEntry does not define
	// (a UDP port left out) would make it invalid.
	named := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		if servedPort(p) {
			named[portName(p)] = true
		}
	}
	var out []*networking.WorkloadEntry
	seen := map[string]bool{}
	for _, es := range eps {
		if es.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		ports := map[string]uint32{}
		for _, p := range es.Ports {
			if p.Port == nil {
				continue
			}
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if name == "" && len(svc.Spec.Ports) == 1 {
				name = portName(svc.Spec.Ports[0])
			}
			if named[name] {
				ports[name] = uint32(*p.Port)
			}
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, addr := range ep.Addresses {
				if seen[addr] {
					continue
				}
				seen[addr] = true
				out = append(out, &networking.WorkloadEntry{Address: addr, Ports: ports})
			}
		}
	}
	slices.SortFunc(out, func(a, b *networking.WorkloadEntry) int { return strings.Compare(a.Address, b.Address) })
	return out
}
