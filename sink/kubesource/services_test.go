package kubesource

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	svcGVR   = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	sliceGVR = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
)

const reviewsService = `apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: svc, labels: {app: reviews}}
spec:
  clusterIP: 10.96.0.50
  selector: {app: reviews}
  ports:
  - {name: http-api, port: 80, targetPort: 9080}
  - {name: metrics, port: 9090, targetPort: 9090, appProtocol: grpc}
  - {name: dns, port: 53, protocol: UDP}
`

// reviewsSlice is what Kubernetes' EndpointSlice controller writes for reviewsService: here
// no controller runs, so the test writes it.
func reviewsSlice(readyB string) string {
	return `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-abc, namespace: svc, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
ports:
- {name: http-api, port: 9080, protocol: TCP}
- {name: metrics, port: 9090, protocol: TCP}
- {name: dns, port: 53, protocol: UDP}
endpoints:
- addresses: [10.1.0.1]
  conditions: {ready: true}
- addresses: [10.1.0.2]
  conditions: {ready: ` + readyB + `}
`
}

// serviceEntryOfStore is the ServiceEntry the store serves under name, or nil.
func serviceEntryOfStore(t *testing.T, r *running, name string) *networking.ServiceEntry {
	t.Helper()
	e := r.st.View().Get(seColl, name)
	if e == nil {
		return nil
	}
	if !e.BodyChecked() {
		t.Errorf("%s: the body of a ServiceEntry marshalled here is not vouched for", name)
	}
	return decodeServiceEntry(t, e)
}

func endpointAddresses(se *networking.ServiceEntry) []string {
	var out []string
	for _, ep := range se.GetEndpoints() {
		out = append(out, ep.Address)
	}
	return out
}

func TestServicesAndEndpointSlicesBecomeServiceEntries(t *testing.T) {
	srv := sharedCluster(t)
	c := srv.Dynamic(t)
	srv.Apply(t, nsGVR, namespace("svc", ""))
	srv.Apply(t, svcGVR, reviewsService)
	srv.Apply(t, sliceGVR, reviewsSlice("false"))
	r := startSource(t, Options{Kubeconfig: srv.Kubeconfig, Services: true, DomainSuffix: "cluster.local"})

	se := serviceEntryOfStore(t, r, "svc/reviews.svc")
	if se == nil {
		t.Fatal("no ServiceEntry svc/reviews.svc for the Service")
	}
	want := &networking.ServiceEntry{
		Hosts:      []string{"reviews.svc.svc.cluster.local"},
		Addresses:  []string{"10.96.0.50"},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{
			{Number: 80, Name: "http-api", Protocol: "HTTP"},
			{Number: 9090, Name: "metrics", Protocol: "GRPC"},
		},
		Endpoints: []*networking.WorkloadEntry{
			{Address: "10.1.0.1", Ports: map[string]uint32{"http-api": 9080, "metrics": 9090}},
		},
	}
	if got, w := protojson.Format(se), protojson.Format(want); got != w {
		t.Fatalf("ServiceEntry of the Service:\n%s\nwant:\n%s", got, w)
	}

	// The second endpoint becomes ready; then the slice goes; then the Service.
	srv.Apply(t, sliceGVR, reviewsSlice("true"))
	eventually(t, "both endpoints served", func() bool {
		return slices.Equal(endpointAddresses(serviceEntryOfStore(t, r, "svc/reviews.svc")), []string{"10.1.0.1", "10.1.0.2"})
	})
	remove(t, c, sliceGVR, "svc", "reviews-abc")
	eventually(t, "no endpoints once the slice is deleted", func() bool {
		se := serviceEntryOfStore(t, r, "svc/reviews.svc")
		return se != nil && len(se.Endpoints) == 0
	})
	remove(t, c, svcGVR, "svc", "reviews")
	eventually(t, "the ServiceEntry removed with the Service", func() bool {
		return serviceEntryOfStore(t, r, "svc/reviews.svc") == nil
	})
}

func TestServicesAreNotReadUnlessAskedFor(t *testing.T) {
	srv := sharedCluster(t)
	srv.Apply(t, nsGVR, namespace("nosvc", ""))
	srv.Apply(t, svcGVR, `apiVersion: v1
kind: Service
metadata: {name: plain, namespace: nosvc}
spec: {ports: [{name: http, port: 80}]}
`)
	srv.Apply(t, seGVR, serviceEntry("nosvc", "marker", "marker.example.com"))
	r := startSource(t, Options{Kubeconfig: srv.Kubeconfig})
	if got := r.hosts(t, "nosvc"); len(got) != 1 || got["nosvc/marker"] == "" {
		t.Fatalf("without services: %v, want the Istio ServiceEntry only", got)
	}
}

// An Istio ServiceEntry named like a Service's ServiceEntry (NAME.svc) is served, and the
// Service is a fault naming the clash, until the name is free.
func TestServiceEntryNamedLikeAServiceWins(t *testing.T) {
	srv := sharedCluster(t)
	c := srv.Dynamic(t)
	srv.Apply(t, nsGVR, namespace("clash", ""))
	srv.Apply(t, svcGVR, "apiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: clash}\nspec: {clusterIP: 10.96.0.60, ports: [{name: http, port: 80}]}\n")
	srv.Apply(t, seGVR, serviceEntry("clash", "api.svc", "istio-api.example.com"))
	r := startSource(t, Options{Kubeconfig: srv.Kubeconfig, Services: true})
	if got := r.hosts(t, "clash"); got["clash/api.svc"] != "istio-api.example.com" {
		t.Fatalf("served %v, want the Istio ServiceEntry clash/api.svc", got)
	}
	faults := r.src.Faults()
	if len(faults) != 1 || !strings.Contains(faults[0].Error(), "Service clash/api") {
		t.Fatalf("faults %v, want one naming the Service", faults)
	}
	remove(t, c, seGVR, "clash", "api.svc")
	wantHosts(t, r, "clash", map[string]string{"clash/api.svc": "api.clash.svc.cluster.local"})
	eventually(t, "the clash's fault cleared", func() bool { return len(r.src.Faults()) == 0 })
}
