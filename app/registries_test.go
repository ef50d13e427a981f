package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/go-zookeeper/zk"
	"github.com/mcpbridge/mcpbridge/internal/etcdtest"
	"github.com/mcpbridge/mcpbridge/internal/kubetest"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/internal/zktest"
	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The sources that read config where it lives are served like any producer: an MCP sink and an
// Envoy-like ADS client (CDS wildcard, EDS by name, one stream) of the bridge see what the
// Kubernetes API server or the ZooKeeper registry holds, and follow its changes.

var kubeSEGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"}

func paymentsEntry(ip string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: payments, namespace: shop}
spec:
  hosts: [payments.example.com]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: ` + ip + `}]
`
}

func TestKubernetesObjectsReachMCPAndEnvoyClients(t *testing.T) {
	srv := kubetest.Start(t, "shop")
	srv.InstallIstioCRDs(t)
	srv.Apply(t, kubeSEGVR, paymentsEntry("10.0.0.1"))
	b := start(t, func(c *Config) {
		c.Sources.Kubernetes = &KubernetesSourceConfig{Kubeconfig: srv.Kubeconfig}
	})
	waitReadyz(t, b)

	mcpClient := subscribe(t, b.grpcAddr, "istiod", seColl)
	envoy := newEnvoyClient(t, b)
	const cluster = "outbound|8080||payments.example.com"
	wantMCPEndpoints(t, mcpClient, "shop/payments", "10.0.0.1")
	envoy.wantEndpoints(t, cluster, "10.0.0.1")

	srv.Apply(t, kubeSEGVR, paymentsEntry("10.0.0.2"))
	wantMCPEndpoints(t, mcpClient, "shop/payments", "10.0.0.2")
	envoy.wantEndpoints(t, cluster, "10.0.0.2")

	if err := srv.Dynamic(t).Resource(kubeSEGVR).Namespace("shop").Delete(context.Background(), "payments", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantMCPEndpoints(t, mcpClient, "shop/payments")
	envoy.wantClusterGone(t, cluster)

	// The status page's data, /debug/producers, and the metrics name the source.
	report := producersSource(t, b, "sources.kubernetes")
	if report.Owner != "kubernetes" || !report.Ready || report.LastSync.IsZero() {
		t.Fatalf("/debug/producers: %+v, want the ready kubernetes source with its last sync", report)
	}
	if v := value(t, b, "mcpbridge_source_faults", "source", "sources.kubernetes"); v != 0 {
		t.Fatalf("mcpbridge_source_faults = %v, want 0", v)
	}
}

func TestZookeeperProvidersReachMCPAndEnvoyClients(t *testing.T) {
	zs := zktest.Start(t)
	client := zs.Client(t, 10*time.Second)
	b := start(t, func(c *Config) {
		c.Sources.Zookeeper = []ZookeeperSourceConfig{{Name: "registry", Servers: []string{zs.Addr()}}}
	})
	waitReadyz(t, b)
	mcpClient := subscribe(t, b.grpcAddr, "istiod", seColl)
	envoy := newEnvoyClient(t, b)

	const iface = "com.example.DemoService"
	dir := "/dubbo/" + iface + "/providers"
	for _, p := range []string{"/dubbo", "/dubbo/" + iface, dir} {
		if _, err := client.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	provider := func(ip string) string {
		u := fmt.Sprintf("dubbo://%s:20880/%s?application=demo&interface=%s&side=provider", ip, iface, iface)
		return dir + "/" + url.QueryEscape(u)
	}
	for _, ip := range []string{"10.1.0.1", "10.1.0.2"} {
		if _, err := client.Create(provider(ip), []byte(ip), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	const name = "registry/com.example.demoservice.dubbo"
	const cluster = "outbound|20880||com.example.demoservice.dubbo"
	wantMCPEndpoints(t, mcpClient, name, "10.1.0.1", "10.1.0.2")
	envoy.wantEndpoints(t, cluster, "10.1.0.1", "10.1.0.2")

	if err := client.Delete(provider("10.1.0.1"), -1); err != nil {
		t.Fatal(err)
	}
	wantMCPEndpoints(t, mcpClient, name, "10.1.0.2")
	envoy.wantEndpoints(t, cluster, "10.1.0.2")

	report := producersSource(t, b, "sources.zookeeper[registry]")
	if report.Owner != "zookeeper:registry" || !report.Ready || report.State != "connected" {
		t.Fatalf("/debug/producers: %+v, want the connected, ready zookeeper:registry source", report)
	}
}

// waitReadyz waits for /readyz: the source's first state is loaded and translated.
func waitReadyz(t *testing.T, b *running) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := httpGet(t, b.httpURL+"/readyz")
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after 30s: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantMCPEndpoints reads the MCP stream until the ServiceEntry name has exactly the endpoint
// addresses given (none: the ServiceEntry is not served).
func wantMCPEndpoints(t *testing.T, c *sinkClient, name string, addrs ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Recv()
		c.ack(m)
		var got []string
		found := false
		for _, r := range m.Resources {
			if r.GetMetadata().GetName() != name {
				continue
			}
			found = true
			var se networking.ServiceEntry
			if err := r.GetBody().UnmarshalTo(&se); err != nil {
				t.Fatal(err)
			}
			for _, ep := range se.Endpoints {
				got = append(got, ep.Address)
			}
		}
		slices.Sort(got)
		if (len(addrs) == 0 && !found) || (found && slices.Equal(got, addrs)) {
			return
		}
	}
	t.Fatalf("MCP: %s never had endpoints %v", name, addrs)
}

// envoyClient is an Envoy-like ADS client: CDS wildcard and EDS by name on one stream.
type envoyClient struct {
	st        *streamtest.Client[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	clusters  []string
	endpoints map[string][]string // by cluster
	eds       []string            // the names asked for
}

func newEnvoyClient(t *testing.T, b *running) *envoyClient {
	t.Helper()
	e := &envoyClient{st: ads(t, dialConn(t, b.grpcAddr)), endpoints: map[string][]string{}}
	e.st.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType, Node: envoyNode()})
	return e
}

// recv reads one response, records it, ACKs it, and asks for the endpoints of every cluster.
func (e *envoyClient) recv(t *testing.T) {
	t.Helper()
	m := e.st.Recv()
	switch m.TypeUrl {
	case clusterType:
		e.clusters = anyNames(t, m.Resources)
	case endpointType:
		for _, a := range m.Resources {
			var cla endpoint.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, l := range cla.Endpoints {
				for _, ep := range l.LbEndpoints {
					addrs = append(addrs, ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				}
			}
			slices.Sort(addrs)
			e.endpoints[cla.ClusterName] = addrs
		}
	}
	e.st.Send(&discovery.DiscoveryRequest{TypeUrl: m.TypeUrl, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce, ResourceNames: e.namesOf(m.TypeUrl)})
	if m.TypeUrl == clusterType && !slices.Equal(e.eds, e.clusters) {
		e.eds = slices.Clone(e.clusters)
		e.st.Send(&discovery.DiscoveryRequest{TypeUrl: endpointType, ResourceNames: e.eds})
	}
}

func (e *envoyClient) namesOf(typeURL string) []string {
	if typeURL == endpointType {
		return e.eds
	}
	return nil
}

func (e *envoyClient) wantEndpoints(t *testing.T, cluster string, addrs ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !(slices.Contains(e.clusters, cluster) && slices.Equal(e.endpoints[cluster], addrs)) {
		if time.Now().After(deadline) {
			t.Fatalf("Envoy: cluster %s with endpoints %v never served (clusters %v, endpoints %v)", cluster, addrs, e.clusters, e.endpoints[cluster])
		}
		e.recv(t)
	}
}

func (e *envoyClient) wantClusterGone(t *testing.T, cluster string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for slices.Contains(e.clusters, cluster) {
		if time.Now().After(deadline) {
			t.Fatalf("Envoy: cluster %s still served", cluster)
		}
		e.recv(t)
	}
}

// producersSource is a source's report in /debug/producers.
func producersSource(t *testing.T, b *running, source string) sourceReportJSON {
	t.Helper()
	code, body := httpGet(t, b.httpURL+"/debug/producers")
	if code != 200 {
		t.Fatalf("/debug/producers: %d %s", code, body)
	}
	var resp struct {
		Sources []sourceReportJSON `json:"sources"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.Sources {
		if s.Source == source {
			return s
		}
	}
	t.Fatalf("/debug/producers has no source %s: %s", source, strings.TrimSpace(body))
	return sourceReportJSON{}
}

type sourceReportJSON struct {
	Source   string    `json:"source"`
	Owner    string    `json:"owner"`
	Ready    bool      `json:"ready"`
	State    string    `json:"state"`
	LastSync time.Time `json:"last_sync"`
	Faults   []string  `json:"faults"`
}

func envoyNode() *core.Node {
	return &core.Node{Id: "sidecar~10.0.0.9~app-1.shop~shop.svc.cluster.local"}
}

// With store.backend etcd, only the elected ingester watches the API server (its
// /debug/producers shows the source; the other's shows none), both replicas serve what it
// read, and another replica takes over the watch when the ingester stops.
func TestKubernetesIsWatchedByTheElectedIngesterOnly(t *testing.T) {
	srv := kubetest.Start(t, "shop")
	srv.InstallIstioCRDs(t)
	srv.Apply(t, kubeSEGVR, paymentsEntry("10.0.0.1"))
	cluster := etcdtest.Start(t, 1)
	kube := func(c *Config) { c.Sources.Kubernetes = &KubernetesSourceConfig{Kubeconfig: srv.Kubeconfig} }
	a, b := startReplica(t, cluster, "a", kube), startReplica(t, cluster, "b", kube)
	served := func(r *replicaOf, ip string) bool {
		e := r.Store().View().Get(seColl, "shop/payments")
		if e == nil {
			return false
		}
		_, v := e.Body()
		return strings.Contains(string(v), ip)
	}
	if !waitUntil(t, func() bool { return served(a, "10.0.0.1") && served(b, "10.0.0.1") }) {
		t.Fatal("the cluster's ServiceEntry is not served on both replicas")
	}
	watching := func() []*replicaOf {
		var out []*replicaOf
		for _, r := range []*replicaOf{a, b} {
			if len(r.sourceReports()) > 0 {
				out = append(out, r)
			}
		}
		return out
	}
	if got := watching(); len(got) != 1 || !got[0].etcd.Ingesting() {
		t.Fatalf("%d replicas watch the API server, want exactly one, the ingester", len(got))
	}
	leader, other := a, b
	if b.etcd.Ingesting() {
		leader, other = b, a
	}
	leader.stop()
	if !waitUntil(t, func() bool { return other.etcd.Ingesting() && len(other.sourceReports()) == 1 }) {
		t.Fatal("no replica took over the watch when the ingester stopped")
	}
	srv.Apply(t, kubeSEGVR, paymentsEntry("10.0.0.2"))
	if !waitUntil(t, func() bool { return served(other, "10.0.0.2") }) {
		t.Fatal("a change after the take-over is not served")
	}
}

// /readyz waits for the source's first full read: an API server that does not answer keeps
// the bridge not ready, naming the source, and the source's fault names the server.
func TestReadyzWaitsForTheKubernetesLists(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	b := start(t, func(c *Config) { c.Sources.Kubernetes = &KubernetesSourceConfig{Kubeconfig: kubeconfig} })
	var report sourceReportJSON
	if !waitUntil(t, func() bool {
		report = producersSource(t, b, "sources.kubernetes")
		return len(report.Faults) == 1
	}) {
		t.Fatalf("/debug/producers: %+v, want a fault naming the API server", report)
	}
	if report.Ready || !strings.Contains(report.Faults[0], "https://127.0.0.1:1") {
		t.Fatalf("/debug/producers: %+v, want not ready with a fault naming the API server", report)
	}
	code, body := httpGet(t, b.httpURL+"/readyz")
	if code == 200 || !strings.Contains(body, "sources.kubernetes") {
		t.Fatalf("/readyz: %d %q, want not ready, waiting for sources.kubernetes", code, body)
	}
}
