package helm

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestPlainHelmTemplateRenders: `helm template mcpbridge deploy/helm/mcpbridge`, with no
// --kube-version and no values, renders: helm's action in client-only mode, as the helm
// command runs it, with helm's default capabilities (its default Kubernetes version is older
// than the clusters the chart targets, so Chart.yaml must not refuse it).
func TestPlainHelmTemplateRenders(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "mcpbridge", "default"
	rel, err := install.Run(chrt, map[string]any{})
	if err != nil {
		t.Fatalf("helm template with defaults: %v", err)
	}
	if !strings.Contains(rel.Manifest, "kind: Deployment") {
		t.Fatalf("no Deployment rendered:\n%s", rel.Manifest)
	}
}
