// Package helm tests the chart in mcpbridge/ as its users meet it: linted and rendered by the
// Helm library pinned in deploy/go.mod (what `helm lint` and `helm template` run), every
// rendered object decoded strictly into its Kubernetes API type, and the rendered
// configuration served by the real mcpbridge binary on a file system laid out as kubelet
// mounts the pod's volumes.
package helm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "mcpbridge"
	examplesDir = "mcpbridge/examples"
	// The release as docs/deploy.md installs it: istiod's namespace, and a release name that
	// makes the Service "mcpbridge", the address NOTES.txt and docs/istiod.md give istiod.
	releaseName = "mcpbridge"
	namespace   = "istio-system"
	// The Kubernetes the chart is rendered for. The Helm library alone assumes v1.20 (the
	// helm binary sets its own at build time); Chart.yaml's kubeVersion must admit this one.
	kubeVersion = "v1.31.0"
)

// rendered is one `helm template` of the chart.
type rendered struct {
	objects []object
	notes   string
}

// object is one rendered Kubernetes object, decoded strictly into its API type.
type object struct {
	source     string // the template it came from
	apiVersion string
	kind       string
	name       string
	yaml       string
	typed      any // *appsv1.Deployment, *corev1.Service, ...
}

// apiTypes are the kinds the chart may render, with their API version and Go type. A kind
// outside this table is a test failure: the test must learn to check it.
var apiTypes = map[string]struct {
	apiVersion string
	new        func() any
}{
	"Deployment":          {"apps/v1", func() any { return &appsv1.Deployment{} }},
	"Service":             {"v1", func() any { return &corev1.Service{} }},
	"ConfigMap":           {"v1", func() any { return &corev1.ConfigMap{} }},
	"ServiceAccount":      {"v1", func() any { return &corev1.ServiceAccount{} }},
	"PodDisruptionBudget": {"policy/v1", func() any { return &policyv1.PodDisruptionBudget{} }},
	"NetworkPolicy":       {"networking.k8s.io/v1", func() any { return &networkingv1.NetworkPolicy{} }},
	"ServiceMonitor":      {"monitoring.coreos.com/v1", func() any { return &monv1.ServiceMonitor{} }},
	"Certificate":         {"cert-manager.io/v1", func() any { return &cmv1.Certificate{} }},
	"ClusterRole":         {"rbac.authorization.k8s.io/v1", func() any { return &rbacv1.ClusterRole{} }},
	"ClusterRoleBinding":  {"rbac.authorization.k8s.io/v1", func() any { return &rbacv1.ClusterRoleBinding{} }},
}

// loadValues reads a values file of examples/.
func loadValues(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return vals
}

// examples lists the values files of examples/.
func examples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if len(names) < 5 {
		t.Fatalf("examples: %v, want at least default, files, mTLS, monitoring and authz", names)
	}
	return names
}

// render does what `helm template mcpbridge mcpbridge/ -n istio-system -f VALUES` does: load
// the chart, coalesce the values with its defaults (and its schema, if any), render every
// template and split and order the manifests as an install would. The engine runs strict:
// a template that reads a value the chart does not define is an error, not an empty string.
func render(vals map[string]any) (*rendered, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	if ok, err := compatible(chrt.Metadata.KubeVersion); !ok {
		return nil, fmt.Errorf("Chart.yaml kubeVersion %q does not admit %s: %v", chrt.Metadata.KubeVersion, kubeVersion, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	caps.KubeVersion = *kv
	top, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(chrt, top)
	if err != nil {
		return nil, err
	}
	r := &rendered{}
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = content
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("%d hooks rendered; the chart has none", len(hooks))
	}
	for _, m := range manifests {
		o, err := decode(m.Name, m.Content)
		if err != nil {
			return nil, err
		}
		r.objects = append(r.objects, o)
	}
	return r, nil
}

func compatible(constraint string) (bool, error) {
	if constraint == "" {
		return true, nil
	}
	if !chartutil.IsCompatibleRange(constraint, kubeVersion) {
		return false, errors.New("incompatible")
	}
	return true, nil
}

// decode decodes one manifest into its API type as the API server's strict field validation
// does (kubectl apply --validate=strict): an unknown field, a field whose name differs only
// in case, or a field given twice is an error, so a misspelt field fails here instead of
// being dropped by the cluster.
func decode(source, manifest string) (object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(manifest), &head); err != nil {
		return object{}, fmt.Errorf("%s: %v", source, err)
	}
	typ, ok := apiTypes[head.Kind]
	if !ok {
		return object{}, fmt.Errorf("%s: kind %q: not one this test knows; add it to apiTypes", source, head.Kind)
	}
	if head.APIVersion != typ.apiVersion {
		return object{}, fmt.Errorf("%s: %s has apiVersion %q, want %q", source, head.Kind, head.APIVersion, typ.apiVersion)
	}
	obj := typ.new()
	if err := strictUnmarshal([]byte(manifest), obj); err != nil {
		return object{}, fmt.Errorf("%s: %s %s: %v", source, head.Kind, head.Metadata.Name, err)
	}
	return object{source: source, apiVersion: head.APIVersion, kind: head.Kind, name: head.Metadata.Name, yaml: manifest, typed: obj}, nil
}

// strictUnmarshal decodes YAML into v as Kubernetes' strict decoding does.
func strictUnmarshal(data []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(data) // a key given twice is an error
	if err != nil {
		return err
	}
	strict, err := k8sjson.UnmarshalStrict(js, v, k8sjson.DisallowDuplicateFields, k8sjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// mustRender renders values that must render.
func mustRender(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	r, err := render(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// find returns the objects of a kind.
func (r *rendered) find(kind string) []object {
	var out []object
	for _, o := range r.objects {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the one object of a kind and name ("" for any name), failing otherwise.
func one[T any](t *testing.T, r *rendered, kind, name string) *T {
	t.Helper()
	var found []object
	for _, o := range r.find(kind) {
		if name == "" || o.name == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s objects named %q rendered, want 1 (rendered: %s)", len(found), kind, name, r.kinds())
	}
	v, ok := found[0].typed.(*T)
	if !ok {
		t.Fatalf("%s %s decoded as %T", kind, found[0].name, found[0].typed)
	}
	return v
}

func (r *rendered) kinds() string {
	var s []string
	for _, o := range r.objects {
		s = append(s, o.kind+"/"+o.name)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// bridgeConfig returns the bridge's config.yaml as rendered into its ConfigMap.
func (r *rendered) bridgeConfig(t *testing.T) (raw string, tree map[string]any) {
	t.Helper()
	cm := one[corev1.ConfigMap](t, r, "ConfigMap", releaseName)
	raw, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no config.yaml: keys %v", cm.Name, keys(cm.Data))
	}
	if err := yaml.Unmarshal([]byte(raw), &tree); err != nil {
		t.Fatalf("config.yaml does not parse: %v\n%s", err, raw)
	}
	return raw, tree
}

// lookup returns the value at a dotted key of a tree of maps, and whether it is there.
func lookup(tree map[string]any, key string) (any, bool) {
	var cur any = tree
	for part := range strings.SplitSeq(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// with returns values with one dotted key set, creating the maps on its way.
func with(vals map[string]any, key string, value any) map[string]any {
	out, _ := deepCopy(vals).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	cur := out
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	cur[parts[len(parts)-1]] = value
	return out
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = deepCopy(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = deepCopy(x)
		}
		return out
	case nil:
		return nil
	}
	return v
}

// toYAML is for failure messages.
func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(bytes.TrimSpace(b))
}
