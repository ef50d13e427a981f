//go:build e2e_istiod

package istiod

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

var (
	parityDump   = flag.String("parity.dump", "", "write what istiod and the bridge send each scenario's nodes, as JSON, under this directory (SCENARIO/NODE/{istiod,bridge}/TYPE.json)")
	parityReport = flag.String("parity.report", "", "write the match table and every mismatch's projections and diff to DIR/parity.md")
	parityMin    = flag.Float64("parity.min", parityFloor, "fail when the overall parity (percent of compared items that match) is below this")
	parityRun    = flag.String("parity.run", "", "only the scenarios whose file name matches this regular expression")
	paritySettle = flag.Duration("parity.settle", 1500*time.Millisecond, "how long to let istiod and the bridge settle after istiod has a scenario's config")
	parityLogs   = flag.Bool("parity.logs", false, "log the end of istiod's log after each scenario")
)

// parityFloor is the overall parity measured when the test was last brought up to date,
// rounded down: a change that lowers it fails the test. Raise it as the translation comes
// closer to istiod's (the goal is 100).
const parityFloor = 100

// Envoy type URLs.
const (
	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// xdsDump is everything one node is sent: each type's resources by name.
type xdsDump struct {
	Clusters  map[string]*cluster.Cluster
	Endpoints map[string]*endpoint.ClusterLoadAssignment
	Listeners map[string]*listener.Listener
	Routes    map[string]*route.RouteConfiguration
}

// parityNode is a proxy a scenario asks both servers about.
type parityNode struct {
	Name      string            // for the table: sidecar@bookinfo, gateway@istio-system, grpc@grpc
	ID        string            // the node ID: sidecar~IP~POD.NS~NS.svc.cluster.local, router~...
	Namespace string            // metadata NAMESPACE
	Labels    map[string]string // metadata LABELS
	Generator string            // metadata GENERATOR ("grpc": a proxyless gRPC client)
	// Listeners, for a proxyless gRPC client, are the API listeners it asks for by name
	// ("HOST:PORT", what grpc-go asks for xds:///HOST:PORT); it then asks for the route
	// configurations, clusters and load assignments they lead to, by name, as grpc-go does.
	Listeners []string
}

// parseNode reads a node of a scenario's "# nodes:" line:
//
//	sidecar@NS                  an Envoy sidecar of a pod of namespace NS (labels app=client)
//	gateway@NS                  an ingress gateway proxy (labels istio=ingressgateway) in NS
//	grpc@NS=HOST:PORT[,...]     a proxyless gRPC client in NS dialling xds:///HOST:PORT
func parseNode(s string) (parityNode, error) {
	kind, rest, ok := strings.Cut(s, "@")
	if !ok {
		return parityNode{}, fmt.Errorf("node %q: want KIND@NAMESPACE", s)
	}
	ns, names, _ := strings.Cut(rest, "=")
	n := parityNode{Name: kind + "@" + ns, Namespace: ns}
	switch kind {
	case "sidecar":
		n.ID = "sidecar~10.1.0.9~client-1." + ns + "~" + ns + ".svc.cluster.local"
		n.Labels = map[string]string{"app": "client"}
	case "gateway":
		n.ID = "router~10.1.0.20~istio-ingressgateway-1." + ns + "~" + ns + ".svc.cluster.local"
		n.Labels = map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}
	case "grpc":
		n.ID = "sidecar~10.1.0.30~grpc-client-1." + ns + "~" + ns + ".svc.cluster.local"
		n.Labels = map[string]string{"app": "grpc-client"}
		n.Generator = "grpc"
		n.Listeners = strings.Split(names, ",")
		if names == "" {
			return parityNode{}, fmt.Errorf("node %q: a gRPC client names the listeners it asks for: grpc@NS=HOST:PORT", s)
		}
	default:
		return parityNode{}, fmt.Errorf("node %q: kind %q is not sidecar, gateway or grpc", s, kind)
	}
	return n, nil
}

func (n parityNode) node() *core.Node {
	labels := map[string]any{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	ip := strings.Split(n.ID, "~")[1]
	meta := map[string]any{
		"NAMESPACE":         n.Namespace,
		"CLUSTER_ID":        "Kubernetes",
		"SERVICE_ACCOUNT":   "default",
		"LABELS":            labels,
		"INSTANCE_IPS":      ip,
		"INTERCEPTION_MODE": "REDIRECT",
		// What Istio's own test clients (pkg/adsc) send: newer than any release, every feature on.
		"ISTIO_VERSION": "65536.65536.65536",
	}
	if n.Generator != "" {
		meta["GENERATOR"] = n.Generator
	}
	m, err := structpb.NewStruct(meta)
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: n.ID, Metadata: m}
}

// fetch asks a server, over state-of-the-world ADS, for what a node is sent, as its client
// would ask. An Envoy asks for every listener and cluster, then the route configurations the
// listeners name and the load assignments the EDS clusters name. A proxyless gRPC client asks
// for its API listeners by name, then the route configurations they name, the clusters those
// routes send to, and their load assignments. fetch ACKs everything and returns once the
// server has been quiet for a second with every type it asked for answered; if a type is
// never answered it returns what it has with an error.
func fetch(addr string, n parityNode) (*xdsDump, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	d := &xdsDump{Clusters: map[string]*cluster.Cluster{}, Endpoints: map[string]*endpoint.ClusterLoadAssignment{},
		Listeners: map[string]*listener.Listener{}, Routes: map[string]*route.RouteConfiguration{}}
	var mu sync.Mutex
	first := true
	asked := map[string][]string{} // names asked per type; absent: not asked; wildcard: nil
	answered := map[string]bool{}
	send := func(req *discovery.DiscoveryRequest) error {
		mu.Lock()
		defer mu.Unlock()
		if first {
			req.Node = n.node()
			first = false
		}
		return stream.Send(req)
	}
	// ask subscribes to names of a type (nil with wildcard: every resource), unless it
	// already has exactly those.
	ask := func(typ string, names []string, wildcard bool) error {
		slices.Sort(names)
		names = slices.Compact(names)
		if prev, ok := asked[typ]; ok && slices.Equal(prev, names) {
			return nil
		}
		asked[typ] = names
		if !wildcard && len(names) == 0 {
			answered[typ] = true // nothing to ask for
			return nil
		}
		answered[typ] = false
		return send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: names})
	}
	grpcClient := len(n.Listeners) > 0
	if grpcClient {
		if err := ask(listenerType, slices.Clone(n.Listeners), false); err != nil {
			return nil, err
		}
	} else {
		if err := ask(clusterType, nil, true); err != nil {
			return nil, err
		}
		if err := ask(listenerType, nil, true); err != nil {
			return nil, err
		}
	}
	got := make(chan *discovery.DiscoveryResponse)
	failed := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case got <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	// follow asks for what the resources held now lead to.
	follow := func() error {
		var rds []string
		for _, l := range d.Listeners {
			rds = append(rds, routeNames(l)...)
		}
		if err := ask(routeType, rds, false); err != nil {
			return err
		}
		if grpcClient {
			var cds []string
			for _, r := range d.Routes {
				cds = append(cds, routeClusters(r)...)
			}
			if err := ask(clusterType, cds, false); err != nil {
				return err
			}
		}
		var eds []string
		for _, c := range d.Clusters {
			if c.GetType() == cluster.Cluster_EDS {
				name := c.GetEdsClusterConfig().GetServiceName()
				if name == "" {
					name = c.Name
				}
				eds = append(eds, name)
			}
		}
		return ask(endpointType, eds, false)
	}
	quiet := time.NewTimer(time.Second)
	for {
		select {
		case resp := <-got:
			if err := d.take(resp, asked[resp.TypeUrl]); err != nil {
				return nil, err
			}
			answered[resp.TypeUrl] = true
			if err := send(&discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo,
				ResponseNonce: resp.Nonce, ResourceNames: asked[resp.TypeUrl]}); err != nil {
				return nil, err
			}
			if err := follow(); err != nil {
				return nil, err
			}
			quiet.Reset(time.Second)
		case err := <-failed:
			return d, err
		case <-ctx.Done():
			var missing []string
			for typ, ok := range answered {
				if !ok {
					missing = append(missing, typ)
				}
			}
			return d, fmt.Errorf("no answer for %v", missing)
		case <-quiet.C:
			done := true
			for _, ok := range answered {
				done = done && ok
			}
			if done {
				return d, nil
			}
			quiet.Reset(time.Second)
		}
	}
}

// take holds a response's resources: a state-of-the-world response to listeners or clusters
// replaces what the type held; one to route configurations or load assignments adds to it,
// and only what is still asked for is kept.
func (d *xdsDump) take(resp *discovery.DiscoveryResponse, asked []string) error {
	keep := func(name string) bool { return slices.Contains(asked, name) }
	switch resp.TypeUrl {
	case clusterType:
		d.Clusters = map[string]*cluster.Cluster{}
		for _, a := range resp.Resources {
			c := &cluster.Cluster{}
			if err := a.UnmarshalTo(c); err != nil {
				return fmt.Errorf("cluster: %w", err)
			}
			d.Clusters[c.Name] = c
		}
	case listenerType:
		d.Listeners = map[string]*listener.Listener{}
		for _, a := range resp.Resources {
			l := &listener.Listener{}
			if err := a.UnmarshalTo(l); err != nil {
				return fmt.Errorf("listener: %w", err)
			}
			d.Listeners[l.Name] = l
		}
	case endpointType:
		for _, a := range resp.Resources {
			e := &endpoint.ClusterLoadAssignment{}
			if err := a.UnmarshalTo(e); err != nil {
				return fmt.Errorf("endpoints: %w", err)
			}
			d.Endpoints[e.ClusterName] = e
		}
		for name := range d.Endpoints {
			if !keep(name) {
				delete(d.Endpoints, name)
			}
		}
	case routeType:
		for _, a := range resp.Resources {
			r := &route.RouteConfiguration{}
			if err := a.UnmarshalTo(r); err != nil {
				return fmt.Errorf("route: %w", err)
			}
			d.Routes[r.Name] = r
		}
		for name := range d.Routes {
			if !keep(name) {
				delete(d.Routes, name)
			}
		}
	}
	return nil
}

// listenerHCMs are a listener's HTTP connection managers: those of its filter chains (the
// default chain's too) and its API listener's, keyed by the route configuration they fetch
// ("rds NAME"), else by where they are: the two sides may match the same connection manager
// by different filter chain matches (istiod's sniffing of HTTP), which the listeners family
// compares.
func listenerHCMs(l *listener.Listener) map[string]*hcm.HttpConnectionManager {
	out := map[string]*hcm.HttpConnectionManager{}
	chains := append([]*listener.FilterChain{l.DefaultFilterChain}, l.FilterChains...)
	for i, fc := range chains {
		if fc == nil || istioMTLSChain(fc) {
			continue // normalization 5
		}
		for _, f := range fc.GetFilters() {
			m := &hcm.HttpConnectionManager{}
			if f.GetTypedConfig().MessageIs(m) && f.GetTypedConfig().UnmarshalTo(m) == nil {
				key := chainKey(fc)
				if i == 0 {
					key = "default chain"
				}
				if name := m.GetRds().GetRouteConfigName(); name != "" {
					key = "rds " + classPrefix.ReplaceAllString(name, "")
				}
				out[key] = m
			}
		}
	}
	if api := l.GetApiListener().GetApiListener(); api != nil {
		m := &hcm.HttpConnectionManager{}
		if api.UnmarshalTo(m) == nil {
			out["api listener"] = m
		}
	}
	return out
}

// chainKey names a filter chain by its match (chainMatchKey).
func chainKey(fc *listener.FilterChain) string {
	if fc.GetFilterChainMatch() == nil {
		return "chain {}"
	}
	return chainMatchKey(protoJSON(fc.GetFilterChainMatch()))
}

// routeNames are the route configurations a listener's connection managers fetch over RDS.
func routeNames(l *listener.Listener) []string {
	var out []string
	for _, m := range listenerHCMs(l) {
		if name := m.GetRds().GetRouteConfigName(); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// routeClusters are the clusters a route configuration's routes send to.
func routeClusters(r *route.RouteConfiguration) []string {
	var out []string
	for _, vh := range r.VirtualHosts {
		for _, rt := range vh.Routes {
			a := rt.GetRoute()
			if c := a.GetCluster(); c != "" {
				out = append(out, c)
			}
			for _, w := range a.GetWeightedClusters().GetClusters() {
				out = append(out, w.Name)
			}
		}
	}
	return out
}

// writeDump writes a dump as JSON files, one per type, under dir.
func writeDump(dir string, d *xdsDump) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m := protojson.MarshalOptions{Multiline: true, Indent: "  "}
	write := func(name string, msgs map[string]proto.Message) error {
		keys := make([]string, 0, len(msgs))
		for k := range msgs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			a, err := anypb.New(msgs[k])
			if err != nil {
				return err
			}
			j, err := m.Marshal(a)
			if err != nil {
				return err
			}
			b.Write(j)
			b.WriteString("\n")
		}
		return os.WriteFile(filepath.Join(dir, name+".json"), []byte(b.String()), 0o644)
	}
	for name, msgs := range map[string]map[string]proto.Message{
		"clusters": asMessages(d.Clusters), "endpoints": asMessages(d.Endpoints),
		"listeners": asMessages(d.Listeners), "routes": asMessages(d.Routes),
	} {
		if err := write(name, msgs); err != nil {
			return err
		}
	}
	return nil
}

func asMessages[M proto.Message](in map[string]M) map[string]proto.Message {
	out := make(map[string]proto.Message, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// scenario is one file of testdata/parity: Istio config, and the nodes that ask for theirs.
type scenario struct {
	Name  string // the file name without .yaml
	Title string // the first comment line
	YAML  string // the file, with the bases it names in front
	Nodes []parityNode
	Multi multiAddress // its hosts with several addresses (normalization 6)
}

// loadScenarios reads testdata/parity. A scenario file starts with comment lines: a title,
// "# base: NAME..." (files _NAME.yaml put in front of it), and "# nodes: NODE..." (see
// parseNode). Files starting with "_" are bases only.
func loadScenarios(t *testing.T, dir string, only *regexp.Regexp) []scenario {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []scenario
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		if strings.HasPrefix(name, "_") || (only != nil && !only.MatchString(name)) {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := scenario{Name: name}
		var docs []string
		for _, line := range strings.Split(string(b), "\n") {
			c, ok := strings.CutPrefix(line, "# ")
			if !ok {
				break
			}
			switch {
			case strings.HasPrefix(c, "base:"):
				for _, base := range strings.Fields(strings.TrimPrefix(c, "base:")) {
					bb, err := os.ReadFile(filepath.Join(dir, "_"+base+".yaml"))
					if err != nil {
						t.Fatalf("%s: %v", p, err)
					}
					docs = append(docs, string(bb))
				}
			case strings.HasPrefix(c, "nodes:"):
				for _, f := range strings.Fields(strings.TrimPrefix(c, "nodes:")) {
					n, err := parseNode(f)
					if err != nil {
						t.Fatalf("%s: %v", p, err)
					}
					sc.Nodes = append(sc.Nodes, n)
				}
			case sc.Title == "":
				sc.Title = c
			}
		}
		if len(sc.Nodes) == 0 {
			t.Fatalf("%s: no \"# nodes:\" line", p)
		}
		docs = append(docs, string(b))
		var kept []string
		for _, d := range docs {
			if strings.Contains(d, "\nkind: ") || strings.HasPrefix(d, "kind: ") || strings.Contains(d, "apiVersion:") {
				kept = append(kept, strings.TrimRight(d, "\n")+"\n")
			}
		}
		sc.YAML = strings.Join(kept, "---\n")
		if sc.Multi, err = multiAddressHosts(sc.YAML); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, sc)
	}
	return out
}

// multiAddressHosts reads the ServiceEntries of a scenario's YAML whose hosts have several
// addresses: each address (a CIDR's address part too) mapped to the host (normalization 6).
func multiAddressHosts(text string) (multiAddress, error) {
	out := multiAddress{}
	for _, doc := range strings.Split(text, "---\n") {
		var se struct {
			Kind string
			Spec struct{ Hosts, Addresses []string }
		}
		if err := yaml.Unmarshal([]byte(doc), &se); err != nil {
			return nil, err
		}
		if se.Kind != "ServiceEntry" || len(se.Spec.Addresses) < 2 {
			continue
		}
		for _, h := range se.Spec.Hosts {
			for _, a := range se.Spec.Addresses {
				addr, _, _ := strings.Cut(a, "/")
				out[addr] = h
			}
		}
	}
	return out, nil
}

// TestIstiodParity serves each scenario of testdata/parity to a real istiod (through the
// bridge, its only config source) and to the bridge itself, asks both for what each of the
// scenario's nodes is sent, and compares the two family by family (parity_compare_test.go).
// It logs the match table and the overall parity, writes every mismatch to -parity.report, and
// fails when the parity is below -parity.min. One istiod serves every scenario in turn.
func TestIstiodParity(t *testing.T) {
	if *istiodBin == "" || *kubeapiBin == "" {
		t.Fatal("-istiod and -kubeapi are required: run make e2e-istiod-parity")
	}
	var only *regexp.Regexp
	if *parityRun != "" {
		only = regexp.MustCompile(*parityRun)
	}
	scenarios := loadScenarios(t, filepath.Join("testdata", "parity"), only)
	if len(scenarios) == 0 {
		t.Fatal("no scenario")
	}
	e := setup(t, false)
	e.remove(t, "api.yaml")
	e.remove(t, "policies.yaml")

	var results []*scenarioResult
	for _, sc := range scenarios {
		start := time.Now()
		// Empty first: waitConfigzMatchesBridge compares names, and two scenarios may name
		// the same resources.
		e.write(t, "scenario.yaml", "")
		e.waitConfigzMatchesBridge(t)
		e.write(t, "scenario.yaml", sc.YAML)
		e.waitConfigzMatchesBridge(t)
		// istiod pushes a debounce (100ms) after its store changes, and the bridge translates
		// after its own: let both settle before asking.
		time.Sleep(*paritySettle)
		res := &scenarioResult{Name: sc.Name, Title: sc.Title}
		for _, n := range sc.Nodes {
			dumps := map[string]*xdsDump{}
			for _, side := range []string{"istiod", "bridge"} {
				addr := e.istiodGRPC
				if side == "bridge" {
					addr = e.bridgeGRPC
				}
				d, err := fetch(addr, n)
				if err != nil {
					res.Errors = append(res.Errors, fmt.Sprintf("%s %s: %v", n.Name, side, err))
					t.Logf("%s: %s from %s: %v", sc.Name, n.Name, side, err)
				}
				if d == nil {
					d = &xdsDump{}
				}
				dumps[side] = d
				if *parityDump != "" {
					if err := writeDump(filepath.Join(*parityDump, sc.Name, n.Name, side), d); err != nil {
						t.Fatal(err)
					}
				}
			}
			compareNode(res, n, dumps["istiod"], dumps["bridge"], sc.Multi)
		}
		results = append(results, res)
		if *parityLogs {
			t.Logf("---- istiod's log after %s\n%s", sc.Name, tail(e.istiod.logText(), 40))
		}
		m, tot := res.totals()
		t.Logf("%s: %d/%d in %s", sc.Name, m, tot, time.Since(start).Round(time.Millisecond))
	}

	table, pct := matchTable(results)
	t.Logf("parity by scenario and family (matched/compared):\n%s", table)
	t.Logf("overall parity: %.2f%% (floor -parity.min %.2f)", pct, *parityMin)
	if *parityReport != "" {
		path, err := writeReport(*parityReport, results, table, pct)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("mismatches written to %s", path)
	}
	if pct < *parityMin {
		t.Errorf("overall parity %.2f%% is below -parity.min %.2f%%", pct, *parityMin)
	}
}

// istioMTLSChain: a virtualInbound chain that terminates Istio mTLS (normalization 5).
func istioMTLSChain(fc *listener.FilterChain) bool {
	m := fc.GetFilterChainMatch()
	if m.GetTransportProtocol() != "tls" {
		return false
	}
	for _, a := range m.GetApplicationProtocols() {
		if strings.HasPrefix(a, "istio") {
			return true
		}
	}
	return false
}
