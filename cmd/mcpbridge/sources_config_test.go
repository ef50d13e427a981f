package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func loadFile(t *testing.T, content string) (*Config, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	if err := fs.Parse([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	return loadConfig(fs)
}

func TestSourcesKubernetesAndZookeeperAreRead(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadFile(t, `
sources:
  kubernetes:
    kubeconfig: `+kubeconfig+`
    namespaces: [shop]
    namespace_selector: "mesh in (a,b)"
    services: true
  zookeeper:
    - name: registry
      servers: [127.0.0.1:2181, zk.example:2181]
      session_timeout: 5s
      dubbo_root: /dubbo-prod
`)
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Sources.Kubernetes
	if k == nil || k.Kubeconfig != kubeconfig || len(k.Namespaces) != 1 || k.NamespaceSelector != "mesh in (a,b)" || !k.Services {
		t.Fatalf("sources.kubernetes = %+v", k)
	}
	z := cfg.Sources.Zookeeper
	if len(z) != 1 || z[0].Name != "registry" || len(z[0].Servers) != 2 || z[0].SessionTimeout != 5*time.Second || z[0].DubboRoot != "/dubbo-prod" {
		t.Fatalf("sources.zookeeper = %+v", z)
	}
}

// "kubernetes: {}" turns the source on with everything defaulted (in-cluster, every
// namespace); leaving the key out, or null, leaves it off.
func TestEmptyKubernetesSectionTurnsTheSourceOn(t *testing.T) {
	cfg, err := loadFile(t, "sources:\n  kubernetes: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sources.Kubernetes == nil {
		t.Fatal("kubernetes: {} left the source off")
	}
	for _, content := range []string{"sources:\n  kubernetes: null\n", "log:\n  level: info\n"} {
		cfg, err := loadFile(t, content)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Sources.Kubernetes != nil {
			t.Fatalf("%q turned the kubernetes source on", content)
		}
	}
}

func TestBadSourcesExit2NamingTheKey(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, yaml string
		wants      []string
	}{
		{"misspelt kubernetes field", "sources:\n  kubernetes: {kubeconfg: x}\n", []string{"kubeconfg"}},
		{"missing kubeconfig", "sources:\n  kubernetes: {kubeconfig: " + filepath.Join(dir, "none") + "}\n", []string{"sources.kubernetes.kubeconfig", "none"}},
		{"bad selector", "sources:\n  kubernetes: {namespace_selector: 'mesh in (a'}\n", []string{"sources.kubernetes.namespace_selector", "mesh in (a"}},
		{"bad namespace", "sources:\n  kubernetes: {namespaces: [Shop_1]}\n", []string{"sources.kubernetes.namespaces[0]", "Shop_1"}},
		{"zookeeper name", "sources:\n  zookeeper: [{name: My.Registry, servers: [127.0.0.1:2181]}]\n", []string{"sources.zookeeper[0].name", "My.Registry"}},
		{"zookeeper twice", "sources:\n  zookeeper: [{name: r, servers: [127.0.0.1:2181]}, {name: r, servers: [127.0.0.1:2182]}]\n", []string{"sources.zookeeper[1].name", `"r"`}},
		{"zookeeper no servers", "sources:\n  zookeeper: [{name: r}]\n", []string{"sources.zookeeper[0].servers"}},
		{"zookeeper bad server", "sources:\n  zookeeper: [{name: r, servers: [zk]}]\n", []string{"sources.zookeeper[0].servers[0]", "zk"}},
		{"zookeeper relative root", "sources:\n  zookeeper: [{name: r, servers: [127.0.0.1:2181], dubbo_root: dubbo}]\n", []string{"sources.zookeeper[0].dubbo_root", "dubbo"}},
		{"zookeeper misspelt field", "sources:\n  zookeeper: [{name: r, servers: [127.0.0.1:2181], sesion_timeout: 1s}]\n", []string{"sesion_timeout"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "c"+string(rune('a'+i))+".yaml")
			if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runCLI(t, "serve", "--config", file)
			if code != exitUsage {
				t.Fatalf("exit = %d, want 2 (stderr %q)", code, stderr)
			}
			assertOneLine(t, stderr, tc.wants...)
		})
	}
}

// sources.kubernetes's keys are variables too (MCPBRIDGE_SOURCES_KUBERNETES_*), over the
// file's, as every key is; one of them turns the source on.
func TestKubernetesSourceFromTheEnvironment(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MCPBRIDGE_SOURCES_KUBERNETES_KUBECONFIG", kubeconfig)
	t.Setenv("MCPBRIDGE_SOURCES_KUBERNETES_NAMESPACES", "shop,payments")
	t.Setenv("MCPBRIDGE_SOURCES_KUBERNETES_SERVICES", "true")
	cfg, err := loadFile(t, "sources:\n  kubernetes: {namespace_selector: mesh=on, services: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Sources.Kubernetes
	if k == nil || k.Kubeconfig != kubeconfig || len(k.Namespaces) != 2 || k.Namespaces[1] != "payments" || !k.Services || k.NamespaceSelector != "mesh=on" {
		t.Fatalf("sources.kubernetes = %+v, want the environment's over the file's", k)
	}
	t.Setenv("MCPBRIDGE_SOURCES_KUBERNETES_SERVICES", "yes please")
	if _, err := loadFile(t, ""); err == nil || !strings.Contains(err.Error(), "MCPBRIDGE_SOURCES_KUBERNETES_SERVICES") {
		t.Fatalf("a bad boolean: %v, want an error naming the variable", err)
	}
}
