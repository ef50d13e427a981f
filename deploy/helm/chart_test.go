package helm

import (
	"fmt"
	"net"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// TestLint is `helm lint --strict` of the chart with each example's values: an error or a
// warning fails (informational messages, such as the missing icon, are logged).
func TestLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range examples(t) {
		t.Run(name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartDir, loadValues(t, name), namespace, kv)
			for _, m := range linter.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("%s", m)
				} else {
					t.Logf("%s", m)
				}
			}
		})
	}
}

// TestExamplesRender renders each example, decodes every object strictly (render does), and
// checks what a user relies on: the ports line up from the container to the Service, the
// probes and the bridge's listen addresses; the pod runs restricted; every file the bridge's
// config names is in a volume mounted as a directory; and what each example is for.
func TestExamplesRender(t *testing.T) {
	specific := map[string]func(*testing.T, map[string]any, *rendered){
		"default.yaml":           checkDefault,
		"files.yaml":             checkFiles,
		"mtls-cert-manager.yaml": checkCertManagerTLS,
		"monitoring.yaml":        checkMonitoring,
		"authz.yaml":             checkAuthz,
		"istiod-tls.yaml":        checkIstiodTLS,
		"replicas-etcd.yaml":     checkReplicasEtcd,
	}
	for _, name := range examples(t) {
		t.Run(name, func(t *testing.T) {
			vals := loadValues(t, name)
			r := mustRender(t, vals)
			checkCommon(t, r)
			check, ok := specific[name]
			if !ok {
				t.Fatalf("no checks for the example %s: add them to TestExamplesRender", name)
			}
			check(t, vals, r)
		})
	}
}

// checkCommon holds for every set of values.
func checkCommon(t *testing.T, r *rendered) {
	t.Helper()
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	pod := dep.Spec.Template
	c := container(t, dep)
	_, config := r.bridgeConfig(t)

	// Every name and label is one the API server accepts.
	for _, o := range r.objects {
		if errs := validation.IsDNS1123Subdomain(o.name); len(errs) > 0 {
			t.Errorf("%s name %q: %v", o.kind, o.name, errs)
		}
	}
	for k, v := range pod.Labels {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			t.Errorf("pod label %s=%s: %v", k, v, errs)
		}
	}
	if pod.Labels["sidecar.istio.io/inject"] != "false" {
		t.Errorf("pod label sidecar.istio.io/inject = %q, want \"false\": istiod's config source must not wait for istiod", pod.Labels["sidecar.istio.io/inject"])
	}
	sel, err := metav1Selector(dep.Spec.Selector.MatchLabels)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, pod.Labels)
	}

	// The restricted Pod Security Standard, and the image at the chart's appVersion.
	psc := pod.Spec.SecurityContext
	if psc == nil || !isTrue(psc.RunAsNonRoot) || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %s, want runAsNonRoot, runAsUser 65532, seccomp RuntimeDefault", toYAML(psc))
	}
	sc := c.SecurityContext
	if sc == nil || !isTrue(sc.RunAsNonRoot) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		!isTrue(sc.ReadOnlyRootFilesystem) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext = %s, want runAsNonRoot, no privilege escalation, read-only root, drop ALL, seccomp RuntimeDefault", toYAML(sc))
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token; the bridge never calls the Kubernetes API")
	}
	if c.Image != "mcpbridge:"+appVersion(t) || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q, pull policy %s; want mcpbridge at the chart's appVersion %s, IfNotPresent (a loaded image is used)",
			c.Image, c.ImagePullPolicy, appVersion(t))
	}
	if pod.Annotations["checksum/config"] == "" {
		t.Error("no checksum/config annotation: a change of the bridge's config would not roll the pods")
	}

	// Ports: the bridge listens where the container port, the Service and the probes say.
	grpcPort := containerPort(t, c, "grpc-xds")
	httpPort := containerPort(t, c, "http-monitoring")
	for _, name := range []string{"grpc-xds", "http-monitoring"} {
		if errs := validation.IsValidPortName(name); len(errs) > 0 {
			t.Errorf("port name %s: %v", name, errs)
		}
	}
	for key, want := range map[string]int32{"grpc.address": grpcPort, "http.address": httpPort} {
		addr, _ := lookup(config, key)
		host, port, err := net.SplitHostPort(fmt.Sprint(addr))
		if err != nil || host != "0.0.0.0" || port != strconv.Itoa(int(want)) {
			t.Errorf("config %s = %v, want 0.0.0.0:%d (every interface, the container port)", key, addr, want)
		}
	}
	svc := one[corev1.Service](t, r, "Service", releaseName)
	if ssel := labels.SelectorFromSet(svc.Spec.Selector); len(svc.Spec.Selector) == 0 || !ssel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Service's selector %v does not select the pods %v", svc.Spec.Selector, pod.Labels)
	}
	wantSvc := map[string]struct {
		port     int32
		protocol string
	}{"grpc-xds": {grpcPort, "grpc"}, "http-monitoring": {httpPort, map[bool]string{false: "http", true: "https"}[listenerTLS(config, "http")]}}
	if len(svc.Spec.Ports) != len(wantSvc) {
		t.Errorf("Service ports %s, want grpc-xds and http-monitoring", toYAML(svc.Spec.Ports))
	}
	for _, p := range svc.Spec.Ports {
		w, ok := wantSvc[p.Name]
		if !ok || p.Port != w.port || p.TargetPort != intstr.FromString(p.Name) || p.AppProtocol == nil || *p.AppProtocol != w.protocol {
			t.Errorf("Service port %s, want %s port %d to the container port of that name, appProtocol %s", toYAML(p), p.Name, w.port, w.protocol)
		}
	}
	scheme := corev1.URISchemeHTTP
	if listenerTLS(config, "http") {
		scheme = corev1.URISchemeHTTPS // kubelet's HTTPS probes present no client certificate
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: none, want GET %s", p.name, p.path)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || resolvePort(t, c, g.Port) != httpPort || g.Scheme != scheme {
			t.Errorf("%s = %s, want %s %s on port %d", p.name, toYAML(g), scheme, p.path, httpPort)
		}
	}
	if auth, _ := lookup(config, "http.tls.client_auth"); auth == "require" {
		t.Error("http.tls.client_auth require: kubelet's probes would be refused")
	}
	for _, l := range []string{"grpc", "http"} {
		insecure, _ := lookup(config, l+".insecure")
		if insecure != !listenerTLS(config, l) {
			t.Errorf("config %s.insecure = %v with TLS %v: a non-loopback listener without TLS needs insecure: true, and one with TLS must not claim it", l, insecure, listenerTLS(config, l))
		}
	}

	// Volumes: directories, never subPath (kubelet never updates a subPath mount), and every
	// file the config names inside one.
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("volume %s is mounted by subPath %q: kubelet never updates a subPath mount", m.Name, m.SubPath+m.SubPathExpr)
		}
	}
	for _, p := range configPaths(config) {
		if mountFor(c, p.value) == nil {
			t.Errorf("config %s = %s: not in any volume the container mounts (%s)", p.key, p.value, toYAML(c.VolumeMounts))
		}
	}
	if len(c.Args) != 3 || c.Args[0] != "serve" || c.Args[1] != "--config" || mountFor(c, c.Args[2]) == nil {
		t.Errorf("args %q, want serve --config FILE of a mounted volume", c.Args)
	}

	if pdb := r.find("PodDisruptionBudget"); len(pdb) == 1 {
		p := pdb[0].typed.(*policyv1.PodDisruptionBudget)
		if s, err := metav1Selector(p.Spec.Selector.MatchLabels); err != nil || !s.Matches(labels.Set(pod.Labels)) {
			t.Errorf("the PodDisruptionBudget's selector %v does not select the pods", p.Spec.Selector)
		}
	}
	if nps := r.find("NetworkPolicy"); len(nps) == 1 {
		np := nps[0].typed.(*networkingv1.NetworkPolicy)
		if s, err := metav1Selector(np.Spec.PodSelector.MatchLabels); err != nil || !s.Matches(labels.Set(pod.Labels)) {
			t.Errorf("the NetworkPolicy's podSelector %v does not select the pods", np.Spec.PodSelector)
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil || resolvePort(t, c, *p.Port) == 0 {
					t.Errorf("NetworkPolicy port %s is not a port of the container", toYAML(p))
				}
			}
		}
	}

	xds := fmt.Sprintf("xds://%s.%s.svc:%d", releaseName, namespace, grpcPort)
	if !strings.Contains(r.notes, xds) || !strings.Contains(r.notes, "docs/istiod.md") {
		t.Errorf("NOTES.txt does not tell istiod's configSources address %s and docs/istiod.md:\n%s", xds, r.notes)
	}
	// istiod dials TLS config sources in mode SIMPLE, without a client certificate.
	grpcAuth, _ := lookup(config, "grpc.tls.client_auth")
	refusesIstiod := listenerTLS(config, "grpc") && grpcAuth == "require"
	if warned := strings.Contains(r.notes, "istiod cannot connect to this bridge"); warned != refusesIstiod {
		t.Errorf("NOTES.txt warns that istiod cannot connect: %v, with gRPC TLS %v and client_auth %v",
			warned, listenerTLS(config, "grpc"), grpcAuth)
	}
	if says := strings.Contains(r.notes, "mode: SIMPLE"); says != listenerTLS(config, "grpc") {
		t.Errorf("NOTES.txt tells istiod's tlsSettings: %v, with gRPC TLS %v", says, listenerTLS(config, "grpc"))
	}
}

func checkDefault(t *testing.T, _ map[string]any, r *rendered) {
	t.Helper()
	for _, kind := range []string{"ServiceMonitor", "Certificate"} {
		if got := r.find(kind); len(got) > 0 {
			t.Errorf("%s rendered by default", kind)
		}
	}
	one[corev1.ServiceAccount](t, r, "ServiceAccount", releaseName)
	pdb := one[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", releaseName)
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget %s, want maxUnavailable 1 (minAvailable 1 with one replica blocks every drain)", toYAML(pdb.Spec))
	}
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1", dep.Spec.Replicas)
	}
	// The image is the one make image writes, so that make image, kind load image-archive and
	// helm install work with no flag: ghcr.io/mcpbridge/mcpbridge is not published.
	if c := container(t, dep); c.Image != makeImageTag(t) {
		t.Errorf("image %q, want %q, the image make image writes (the Makefile's IMAGE_TAG)", c.Image, makeImageTag(t))
	}
	a := dep.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "15014" || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/scheme"] != "http" {
		t.Errorf("prometheus.io annotations %v, want scrape of http://:15014/metrics", a)
	}
	_, config := r.bridgeConfig(t)
	for _, key := range []string{"grpc.insecure", "http.insecure"} {
		if v, _ := lookup(config, key); v != true {
			t.Errorf("%s = %v, want true: without TLS a pod's listener beyond loopback needs it", key, v)
		}
	}
	// Only istiod may reach the gRPC port; istiod and the monitoring namespace the HTTP port.
	np := one[networkingv1.NetworkPolicy](t, r, "NetworkPolicy", releaseName)
	want := map[string][]string{
		"grpc-xds":        {"ns=istio-system pods=app=istiod"},
		"http-monitoring": {"ns=istio-system pods=app=istiod", "ns=monitoring pods=*"},
	}
	got := map[string][]string{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			for _, peer := range rule.From {
				ns := peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
				pods := "*"
				if peer.PodSelector != nil {
					pods = labels.Set(peer.PodSelector.MatchLabels).String()
				}
				got[p.Port.String()] = append(got[p.Port.String()], "ns="+ns+" pods="+pods)
			}
		}
	}
	if !reflect.DeepEqual(got, want) || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("NetworkPolicy lets in %v (policy types %v), want %v, ingress only", got, np.Spec.PolicyTypes, want)
	}
}

func checkFiles(t *testing.T, vals map[string]any, r *rendered) {
	t.Helper()
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	c := container(t, dep)
	cm := one[corev1.ConfigMap](t, r, "ConfigMap", releaseName+"-files")
	data, _ := lookup(vals, "files.data")
	if want := data.(map[string]any); !reflect.DeepEqual(anyMap(cm.Data), want) {
		t.Errorf("files ConfigMap data %v, want files.data %v", keys(cm.Data), keys(want))
	}
	v := volume(t, dep, "files")
	if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || len(v.ConfigMap.Items) != 0 {
		t.Errorf("volume files = %s, want the whole ConfigMap %s", toYAML(v), cm.Name)
	}
	m := mountOf(t, c, "files")
	_, config := r.bridgeConfig(t)
	files, _ := lookup(config, "sources.files")
	if !slices.Contains(files.([]any), any(m.MountPath+"/")) {
		t.Errorf("sources.files = %v, want the mounted directory %s/", files, m.MountPath)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want the example's 2", dep.Spec.Replicas)
	}
}

func checkCertManagerTLS(t *testing.T, _ map[string]any, r *rendered) {
	t.Helper()
	cert := one[cmv1.Certificate](t, r, "Certificate", releaseName)
	if cert.Spec.SecretName != releaseName+"-tls" || cert.Spec.IssuerRef.Name != "mesh-ca" || cert.Spec.IssuerRef.Kind != "Issuer" {
		t.Errorf("Certificate spec %s, want secret mcpbridge-tls from the Issuer mesh-ca", toYAML(cert.Spec))
	}
	svcName := fmt.Sprintf("%s.%s.svc", releaseName, namespace)
	if !slices.Contains(cert.Spec.DNSNames, svcName) || !slices.Contains(cert.Spec.DNSNames, svcName+".cluster.local") {
		t.Errorf("Certificate dnsNames %v, want the Service's names (%s, ...)", cert.Spec.DNSNames, svcName)
	}
	if cert.Spec.PrivateKey == nil || cert.Spec.PrivateKey.RotationPolicy != cmv1.RotationPolicyAlways {
		t.Errorf("Certificate privateKey %s, want a new key at each renewal", toYAML(cert.Spec.PrivateKey))
	}
	checkTLSWiring(t, r, cert.Spec.SecretName, "/etc/mcpbridge/tls/ca.crt")
}

// checkReplicasEtcd: several pods share one state through etcd; a drain moves one at a time.
func checkReplicasEtcd(t *testing.T, vals map[string]any, r *rendered) {
	t.Helper()
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("Deployment replicas %v, want 3", dep.Spec.Replicas)
	}
	if len(dep.Spec.Template.Spec.TopologySpreadConstraints) != 1 {
		t.Errorf("topologySpreadConstraints %s, want the example's", toYAML(dep.Spec.Template.Spec.TopologySpreadConstraints))
	}
	_, config := r.bridgeConfig(t)
	backend, _ := lookup(config, "store.backend")
	got, _ := lookup(config, "store.etcd.endpoints")
	want, _ := lookup(vals, "config.store.etcd.endpoints")
	if backend != "etcd" || !reflect.DeepEqual(got, want) {
		t.Errorf("rendered store.backend %v, endpoints %v; want etcd and the values' %v", backend, got, want)
	}
	pdb := one[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", releaseName)
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
		t.Errorf("PodDisruptionBudget %s, want maxUnavailable 1", toYAML(pdb.Spec))
	}
}

// checkIstiodTLS: istiod presents no client certificate, so the gRPC port must ask for one
// without requiring it, and the identity "unauthenticated" may read and nothing more.
func checkIstiodTLS(t *testing.T, vals map[string]any, r *rendered) {
	t.Helper()
	_, config := r.bridgeConfig(t)
	if got, _ := lookup(config, "grpc.tls.client_auth"); got != "request" {
		t.Errorf("grpc.tls.client_auth %v, want request (istiod presents no certificate)", got)
	}
	rules, _ := lookup(config, "authz.rules")
	list, _ := rules.([]any)
	var istiod map[string]any
	for _, rule := range list {
		if m, ok := rule.(map[string]any); ok && m["identity"] == "unauthenticated" {
			istiod = m
		}
	}
	if istiod == nil || istiod["consume"] == nil || istiod["produce"] != nil || istiod["admin"] != nil {
		t.Errorf("authz rule for unauthenticated (istiod) %v, want consume only; rules:\n%s", istiod, toYAML(rules))
	}
	if !strings.Contains(r.notes, "mode: SIMPLE") || strings.Contains(r.notes, "istiod cannot connect") {
		t.Errorf("NOTES.txt should give istiod's SIMPLE tlsSettings and no warning:\n%s", r.notes)
	}
}

func checkAuthz(t *testing.T, vals map[string]any, r *rendered) {
	t.Helper()
	if got := r.find("Certificate"); len(got) > 0 {
		t.Error("a Certificate rendered though the example brings its own Secret")
	}
	checkTLSWiring(t, r, "mcpbridge-tls", "/etc/mcpbridge/client-ca/ca.crt")
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	if v := volume(t, dep, "client-ca"); v.ConfigMap == nil || v.ConfigMap.Name != "mcpbridge-client-ca" {
		t.Errorf("volume client-ca = %s, want the ConfigMap mcpbridge-client-ca", toYAML(v))
	}
	_, config := r.bridgeConfig(t)
	got, _ := lookup(config, "authz.rules")
	want, _ := lookup(vals, "config.authz.rules")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("authz.rules rendered as\n%s\nwant the values'\n%s", toYAML(got), toYAML(want))
	}
}

// checkTLSWiring checks mutual TLS on both ports from the Secret mounted as a directory.
func checkTLSWiring(t *testing.T, r *rendered, secret, clientCA string) {
	t.Helper()
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	v := volume(t, dep, "tls")
	if v.Secret == nil || v.Secret.SecretName != secret || len(v.Secret.Items) != 0 {
		t.Errorf("volume tls = %s, want the whole Secret %s", toYAML(v), secret)
	}
	m := mountOf(t, container(t, dep), "tls")
	_, config := r.bridgeConfig(t)
	want := map[string]any{
		"grpc.tls.cert_file": m.MountPath + "/tls.crt", "grpc.tls.key_file": m.MountPath + "/tls.key",
		"grpc.tls.client_ca_file": clientCA, "grpc.tls.client_auth": "require",
		"http.tls.cert_file": m.MountPath + "/tls.crt", "http.tls.key_file": m.MountPath + "/tls.key",
		"http.tls.client_ca_file": clientCA, "http.tls.client_auth": "request",
		"grpc.insecure": false, "http.insecure": false,
	}
	for key, w := range want {
		if got, _ := lookup(config, key); got != w {
			t.Errorf("config %s = %v, want %v", key, got, w)
		}
	}
}

func checkMonitoring(t *testing.T, _ map[string]any, r *rendered) {
	t.Helper()
	sm := one[monv1.ServiceMonitor](t, r, "ServiceMonitor", releaseName)
	svc := one[corev1.Service](t, r, "Service", releaseName)
	if s, err := metav1Selector(sm.Spec.Selector.MatchLabels); err != nil || !s.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the Service's labels %v", sm.Spec.Selector, svc.Labels)
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaceSelector %v, want the release's namespace", sm.Spec.NamespaceSelector)
	}
	if sm.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v, want the example's release: kube-prometheus-stack", sm.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %s, want one", toYAML(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != "http-monitoring" || ep.Path != "/metrics" || ep.Scheme.String() != "http" || ep.Interval != "15s" {
		t.Errorf("ServiceMonitor endpoint %s, want http /metrics on the Service port http-monitoring every 15s", toYAML(ep))
	}
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	for k := range dep.Spec.Template.Annotations {
		if strings.HasPrefix(k, "prometheus.io/") {
			t.Errorf("pod annotation %s with a ServiceMonitor: the bridge would be scraped twice", k)
		}
	}
}

// TestOptionalObjects: the ServiceMonitor and the Certificate, whose kinds exist only where
// their operators are installed, render only when asked for; the rest can be turned off.
func TestOptionalObjects(t *testing.T) {
	tlsCM := with(with(with(nil, "tls.enabled", true), "tls.certManager.enabled", true), "tls.certManager.issuerRef.name", "ca")
	for _, c := range []struct {
		name string
		vals map[string]any
		want map[string]int
	}{
		{"defaults", nil, map[string]int{"ServiceMonitor": 0, "Certificate": 0, "NetworkPolicy": 1, "PodDisruptionBudget": 1, "ServiceAccount": 1}},
		{"serviceMonitor", with(nil, "serviceMonitor.enabled", true), map[string]int{"ServiceMonitor": 1, "Certificate": 0}},
		{"certManager", tlsCM, map[string]int{"ServiceMonitor": 0, "Certificate": 1}},
		{"tls from a Secret", with(with(nil, "tls.enabled", true), "tls.secretName", "s"), map[string]int{"Certificate": 0}},
		{"all off", with(with(with(nil, "networkPolicy.enabled", false), "podDisruptionBudget.enabled", false), "serviceAccount.create", false),
			map[string]int{"NetworkPolicy": 0, "PodDisruptionBudget": 0, "ServiceAccount": 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := mustRender(t, c.vals)
			for kind, n := range c.want {
				if got := len(r.find(kind)); got != n {
					t.Errorf("%d %s rendered, want %d (rendered: %s)", got, kind, n, r.kinds())
				}
			}
		})
	}
	// With HTTPS, the ServiceMonitor scrapes over TLS and checks the bridge's certificate.
	r := mustRender(t, with(tlsCM, "serviceMonitor.enabled", true))
	ep := one[monv1.ServiceMonitor](t, r, "ServiceMonitor", releaseName).Spec.Endpoints[0]
	tc := ep.TLSConfig
	if ep.Scheme.String() != "https" || tc == nil || tc.CA.Secret == nil || tc.CA.Secret.Name != releaseName+"-tls" || tc.CA.Secret.Key != "ca.crt" ||
		tc.ServerName == nil || *tc.ServerName != releaseName+"."+namespace+".svc" {
		t.Errorf("ServiceMonitor endpoint with TLS: %s, want https verified by the Secret's ca.crt as the Service's name", toYAML(ep))
	}
	// The scrape annotations follow the scheme too.
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	if s := dep.Spec.Template.Annotations["prometheus.io/scheme"]; s != "https" {
		t.Errorf("prometheus.io/scheme = %q with HTTPS, want https", s)
	}
}

// TestKubernetesSourceGetsReadOnlyRBAC: with config.sources.kubernetes set (even to {}), the
// pod mounts its service account's token and a ClusterRole lets it read what the source
// reads, and nothing else; without it, no token and no role.
func TestKubernetesSourceGetsReadOnlyRBAC(t *testing.T) {
	r := mustRender(t, nil)
	if n := len(r.find("ClusterRole")) + len(r.find("ClusterRoleBinding")); n != 0 {
		t.Fatalf("defaults render %d RBAC objects, want none", n)
	}
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	if m := dep.Spec.Template.Spec.AutomountServiceAccountToken; m == nil || *m {
		t.Fatalf("defaults mount the service account token: %v", m)
	}
	r = mustRender(t, with(nil, "config.sources.kubernetes", map[string]any{}))
	dep = one[appsv1.Deployment](t, r, "Deployment", releaseName)
	if m := dep.Spec.Template.Spec.AutomountServiceAccountToken; m == nil || !*m {
		t.Fatalf("with sources.kubernetes the token is not mounted: %v", m)
	}
	role := one[rbacv1.ClusterRole](t, r, "ClusterRole", releaseName)
	for _, rule := range role.Rules {
		if !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("rule %v: verbs %v, want get, list, watch only", rule.APIGroups, rule.Verbs)
		}
	}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.APIGroups, "networking.istio.io") }) {
		t.Errorf("ClusterRole %v does not let the bridge read networking.istio.io", role.Rules)
	}
	binding := one[rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", releaseName)
	if binding.RoleRef.Name != releaseName || len(binding.Subjects) != 1 || binding.Subjects[0].Namespace != namespace {
		t.Errorf("ClusterRoleBinding %v", toYAML(binding))
	}
}

// TestSchemaRefusesMisspeltKeys: values.schema.json refuses a key the chart does not know, at
// the top and inside its sections, naming it; Kubernetes objects passed through and config
// (which the bridge checks itself) take any keys.
func TestSchemaRefusesMisspeltKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"top level", map[string]any{"replicaCont": 3}, "replicaCont"},
		{"in a section", with(nil, "image.tagg", "1.0"), "tagg"},
		{"deeper", with(nil, "tls.certManager.dnsName", []any{"a"}), "dnsName"},
		{"a wrong type", with(nil, "replicaCount", "three"), "replicaCount"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := render(c.vals)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render: %v, want a schema error naming %q", err, c.want)
			}
		})
	}
	for _, vals := range []map[string]any{
		with(nil, "resources.limits.cpu", "2"),
		with(nil, "affinity.nodeAffinity", map[string]any{}),
		with(nil, "config.log.level", "debug"),
	} {
		if _, err := render(vals); err != nil {
			t.Errorf("render %v: %v, want passed-through objects and config to take any key", vals, err)
		}
	}
}

// TestChartRefusesValuesThatCannotWork: values that would deploy a pod that cannot start or
// cannot be probed, or a setting the chart would silently override, fail the render with a
// message that says what to change.
func TestChartRefusesValuesThatCannotWork(t *testing.T) {
	tls := with(with(nil, "tls.enabled", true), "tls.secretName", "s")
	for _, c := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"listen address in config", with(nil, "config.grpc.address", "127.0.0.1:15010"), "config.grpc.address is set by the chart"},
		{"insecure in config", with(nil, "config.http.insecure", false), "config.http.insecure is set by the chart"},
		{"TLS without a certificate", with(nil, "tls.enabled", true), "set tls.secretName (a kubernetes.io/tls Secret) or tls.certManager.enabled"},
		{"cert-manager without TLS", with(nil, "tls.certManager.enabled", true), "without tls.enabled"},
		{"cert-manager without an issuer", with(with(nil, "tls.enabled", true), "tls.certManager.enabled", true), "issuerRef.name"},
		{"HTTPS requiring client certificates", with(tls, "tls.http.clientAuth", "require"), "kubelet's HTTPS probes"},
		{"config HTTPS requiring client certificates", with(with(nil, "config.http.tls.cert_file", "/x"), "config.http.tls.client_auth", "require"), "kubelet's HTTPS probes"},
		{"TLS files in config and from the chart", with(tls, "config.grpc.tls.cert_file", "/mine/tls.crt"), "config.grpc.tls.cert_file is set by the chart"},
		{"files mode without files", with(nil, "files.enabled", true), "files.enabled needs Istio YAML"},
		{"files data and an existing ConfigMap", with(with(with(nil, "files.enabled", true), "files.existingConfigMap", "m"), "files.data", map[string]any{"a.yaml": "x"}), "not both"},
		{"a file the bridge would skip", with(with(nil, "files.enabled", true), "files.data", map[string]any{"mesh.json": "{}"}), "only *.yaml and *.yml"},
		{"a file that is not text", with(with(nil, "files.enabled", true), "files.data", map[string]any{"mesh.yaml": map[string]any{"kind": "ServiceEntry"}}), "block scalar"},
		{"both disruption bounds", with(nil, "podDisruptionBudget.minAvailable", 1), "not both"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := render(c.vals)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("render: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestConfigMirrorsConfigYAML: values' config has every key of the repository's config.yaml
// (the commented reference of the bridge's configuration) with its default, but those the
// chart sets from the pod's wiring, so that every setting of the bridge is reachable and
// documented in values.yaml. A key added to config.yaml must be added to values.yaml too.
func TestConfigMirrorsConfigYAML(t *testing.T) {
	data, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var reference map[string]any
	if err := yaml.Unmarshal(data, &reference); err != nil {
		t.Fatal(err)
	}
	values, err := chartutil.ReadValuesFile(path.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	chartOwned := map[string]bool{"grpc.address": true, "http.address": true, "grpc.insecure": true, "http.insecure": true}
	// The chart serves no files unless files mode or the user says so; config.yaml serves the
	// repository's examples/ for `make run`.
	differs := map[string]bool{"sources.files": true}
	ref, vals := leaves(reference, ""), leaves(values["config"].(map[string]any), "")
	for key, want := range ref {
		got, ok := vals[key]
		switch {
		case chartOwned[key]:
			if ok {
				t.Errorf("values.yaml sets config.%s, which the chart sets from the pod's wiring", key)
			}
		case !ok:
			t.Errorf("config.yaml has %s; add it under config: in deploy/helm/mcpbridge/values.yaml, with its comment", key)
		case !differs[key] && !reflect.DeepEqual(got, want):
			t.Errorf("values.yaml config.%s = %v, config.yaml has %v", key, got, want)
		}
	}
	for key := range vals {
		if _, ok := ref[key]; !ok {
			t.Errorf("values.yaml has config.%s, which config.yaml does not", key)
		}
	}
}

// leaves flattens a tree of maps to its dotted keys; lists and empty maps are leaves.
func leaves(m map[string]any, prefix string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			for kk, vv := range leaves(sub, prefix+k+".") {
				out[kk] = vv
			}
			continue
		}
		out[prefix+k] = v
	}
	return out
}

// TestFilesChangeDoesNotRollPods: the pods' checksum covers the bridge's config, so that a
// change of it restarts them, and not the files of files mode, which the bridge follows live.
func TestFilesChangeDoesNotRollPods(t *testing.T) {
	checksum := func(vals map[string]any) string {
		dep := one[appsv1.Deployment](t, mustRender(t, vals), "Deployment", releaseName)
		return dep.Spec.Template.Annotations["checksum/config"]
	}
	files := loadValues(t, "files.yaml")
	base := checksum(files)
	if got := checksum(with(files, "files.data", map[string]any{"other.yaml": "# nothing yet\n"})); got != base {
		t.Error("a change of files.data changes checksum/config: it would restart the pods the bridge needs no restart for")
	}
	if got := checksum(with(files, "config.log.level", "debug")); got == base {
		t.Error("a change of config leaves checksum/config as it was: the pods would keep the old config")
	}
	if got := checksum(with(files, "meshConfig", map[string]any{"rootNamespace": "istio-system"})); got == base {
		t.Error("a change of meshConfig leaves checksum/config as it was")
	}
}

// TestFilesFromAnExistingConfigMap: files mode over a ConfigMap managed outside the chart
// mounts it by name and renders none of its own.
func TestFilesFromAnExistingConfigMap(t *testing.T) {
	r := mustRender(t, with(with(nil, "files.enabled", true), "files.existingConfigMap", "mesh"))
	if got := r.find("ConfigMap"); len(got) != 1 {
		t.Errorf("ConfigMaps rendered: %s, want the bridge's config only", r.kinds())
	}
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	if v := volume(t, dep, "files"); v.ConfigMap == nil || v.ConfigMap.Name != "mesh" {
		t.Errorf("volume files = %s, want the ConfigMap mesh", toYAML(v))
	}
	if !strings.Contains(r.notes, "ConfigMap mesh") {
		t.Errorf("NOTES.txt does not name the ConfigMap to edit:\n%s", r.notes)
	}
}

// TestMeshConfig: a meshConfig value is served from the bridge's ConfigMap.
func TestMeshConfig(t *testing.T) {
	r := mustRender(t, with(nil, "meshConfig", map[string]any{"rootNamespace": "istio-system"}))
	cm := one[corev1.ConfigMap](t, r, "ConfigMap", releaseName)
	var mc map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["meshconfig.yaml"]), &mc); err != nil || mc["rootNamespace"] != "istio-system" {
		t.Errorf("meshconfig.yaml = %q (%v), want the meshConfig value", cm.Data["meshconfig.yaml"], err)
	}
	_, config := r.bridgeConfig(t)
	dep := one[appsv1.Deployment](t, r, "Deployment", releaseName)
	file, _ := lookup(config, "xds.mesh_config_file")
	if m := mountFor(container(t, dep), fmt.Sprint(file)); m == nil || m.Name != "config" {
		t.Errorf("xds.mesh_config_file = %v, want a file of the config volume", file)
	}
}

func container(t *testing.T, dep *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == "mcpbridge" {
			return &dep.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("no container mcpbridge in %s", dep.Name)
	return nil
}

func containerPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			if p.Protocol != corev1.ProtocolTCP {
				t.Errorf("container port %s: protocol %s", name, p.Protocol)
			}
			return p.ContainerPort
		}
	}
	t.Fatalf("no container port %s: %s", name, toYAML(c.Ports))
	return 0
}

// resolvePort is the container port a probe or policy names, by name or number; 0 if none.
func resolvePort(t *testing.T, c *corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	return 0
}

func volume(t *testing.T, dep *appsv1.Deployment, name string) *corev1.Volume {
	t.Helper()
	for i, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &dep.Spec.Template.Spec.Volumes[i]
		}
	}
	t.Fatalf("no volume %s in %s", name, toYAML(dep.Spec.Template.Spec.Volumes))
	return nil
}

func mountOf(t *testing.T, c *corev1.Container, name string) *corev1.VolumeMount {
	t.Helper()
	for i, m := range c.VolumeMounts {
		if m.Name == name {
			return &c.VolumeMounts[i]
		}
	}
	t.Fatalf("volume %s is not mounted: %s", name, toYAML(c.VolumeMounts))
	return nil
}

// mountFor is the volume mount a path of the container's file system is in, or nil.
func mountFor(c *corev1.Container, p string) *corev1.VolumeMount {
	p = path.Clean(p)
	for i, m := range c.VolumeMounts {
		if p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

type configPath struct{ key, value string }

// configPaths lists the file paths the bridge's config names (the TLS files, the MeshConfig,
// the served files and directories); they must exist in the container.
func configPaths(config map[string]any) []configPath {
	var out []configPath
	for _, key := range []string{"grpc.tls.cert_file", "grpc.tls.key_file", "grpc.tls.client_ca_file",
		"http.tls.cert_file", "http.tls.key_file", "http.tls.client_ca_file", "xds.mesh_config_file"} {
		if v, _ := lookup(config, key); v != nil && v != "" {
			out = append(out, configPath{key, fmt.Sprint(v)})
		}
	}
	files, _ := lookup(config, "sources.files")
	list, _ := files.([]any)
	for i, f := range list {
		out = append(out, configPath{fmt.Sprintf("sources.files[%d]", i), fmt.Sprint(f)})
	}
	return out
}

// listenerTLS reports whether the rendered config serves TLS on a listener.
func listenerTLS(config map[string]any, listener string) bool {
	v, _ := lookup(config, listener+".tls.cert_file")
	return v != nil && v != ""
}

func appVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(path.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q, %v", chart.AppVersion, err)
	}
	return chart.AppVersion
}

// makeImageTag is the name make image gives the image it writes: the default of the top-level
// Makefile's IMAGE_TAG, which the image tool (deploy/image) records in the tarball as given.
func makeImageTag(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(path.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE_TAG\s*\?=\s*(\S+)\s*$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("the Makefile has no IMAGE_TAG ?= line: what does make image name the image?")
	}
	return string(m[1])
}

func metav1Selector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}

func isTrue(b *bool) bool { return b != nil && *b }

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
