// Package kubetest runs a real Kubernetes API server for tests: kube-apiserver built from the
// Kubernetes modules (the kubeapi command, e2e/istiod/kubeapi, a module of its own, with its
// etcd embedded), as a child process on a loopback port with its state in the test's
// temporary directory, and installs Istio's CustomResourceDefinitions from the istio.io/api
// module the bridge is built with.
//
// Its etcd is the one embedded in kubeapi (go.etcd.io/etcd/server v3.7), not Debian's
// etcd-server: Debian 12's etcd 3.4.23 is too old for kube-apiserver 1.37 (its lease updates
// fail with "StorageError: invalid object" and /readyz never passes).
//
// The binary is MCPBRIDGE_KUBEAPI, else bin/e2e/kubeapi of the module (make builds it there),
// else it is built there first (minutes, once; the Go build cache keeps it). A test that needs
// it and cannot have it fails, naming why: it is never skipped.
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Server is one running API server.
type Server struct {
	bin, dir   string
	port       int
	args       []string // added to kube-apiserver's flags
	Kubeconfig string   // the path of a kubeconfig for the server's one user

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

var buildOnce struct {
	sync.Once
	path string
	err  error
}

// Binary is the kubeapi command, built first if it is not there.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MCPBRIDGE_KUBEAPI"); p != "" {
		return p
	}
	buildOnce.Do(func() { buildOnce.path, buildOnce.err = build() })
	if buildOnce.err != nil {
		t.Fatalf("kubeapi: %v", buildOnce.err)
	}
	return buildOnce.path
}

// build builds the kubeapi command into bin/e2e of the module unless it is there, newer than
// its sources.
func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "e2e", "istiod", "kubeapi")
	bin := filepath.Join(root, "bin", "e2e", "kubeapi")
	if fresh(bin, filepath.Join(src, "main.go"), filepath.Join(src, "go.mod"), filepath.Join(src, "go.sum")) {
		return bin, nil
	}
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s (make bin/e2e/kubeapi does it too): %v\n%s", src, err, out)
	}
	return bin, nil
}

func fresh(bin string, sources ...string) bool {
	b, err := os.Stat(bin)
	if err != nil {
		return false
	}
	for _, s := range sources {
		if st, err := os.Stat(s); err != nil || st.ModTime().After(b.ModTime()) {
			return false
		}
	}
	return true
}

// moduleRoot is the directory of the bridge's go.mod, above the test's working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/mcpbridge/mcpbridge\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the mcpbridge module")
		}
		dir = parent
	}
}

// Start runs an API server with the given namespaces created, waits until it answers, and
// stops it when the test ends.
func Start(t testing.TB, namespaces ...string) *Server {
	t.Helper()
	return StartWith(t, nil, namespaces...)
}

// StartWith is Start with flags added to kube-apiserver's: "--watch-cache=false" makes every
// watch an etcd watch, and "--etcd-compaction-interval=1s" compacts etcd every second, so that
// a watch resumed from a version a few seconds old is answered 410 Gone.
func StartWith(t testing.TB, apiserverArgs []string, namespaces ...string) *Server {
	t.Helper()
	s := &Server{bin: Binary(t), dir: t.TempDir(), port: freePort(t), args: apiserverArgs}
	s.Kubeconfig = filepath.Join(s.dir, "kubeconfig")
	s.start(t, namespaces)
	t.Cleanup(s.Stop)
	return s
}

// StartShared runs an API server with its state in dir, for the tests of a package to share:
// the caller stops it (TestMain, after the tests).
func StartShared(t testing.TB, dir string, namespaces ...string) *Server {
	t.Helper()
	s := &Server{bin: Binary(t), dir: dir, port: freePort(t)}
	s.Kubeconfig = filepath.Join(s.dir, "kubeconfig")
	s.start(t, namespaces)
	return s
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) start(t testing.TB, namespaces []string) {
	t.Helper()
	_ = os.Remove(s.Kubeconfig)
	log, err := os.OpenFile(filepath.Join(s.dir, "kubeapi.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "-dir", s.dir, "-port", strconv.Itoa(s.port), "-namespaces", strings.Join(namespaces, ","),
		"-apiserver-args", strings.Join(s.args, ","))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("kubeapi: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.After(2 * time.Minute)
	for {
		if _, err := os.Stat(s.Kubeconfig); err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("kubeapi exited before it was ready; its log:\n%s", s.logTail())
		case <-deadline:
			t.Fatalf("kubeapi not ready after 2m; its log:\n%s", s.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "kubeapi.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Address is the server's host:port.
func (s *Server) Address() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Stop ends the server and waits for it; its state stays for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart stops the server and starts it again on the same port over the same etcd data:
// every watch is broken, and the new server's watch cache starts at etcd's current revision,
// so that a client resuming from an older one is answered 410 Gone.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t, nil)
}

// Config is a client configuration for the server.
func (s *Server) Config(t testing.TB) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg
}

// Dynamic is a dynamic client of the server.
func (s *Server) Dynamic(t testing.TB) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(s.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallIstioCRDs creates the CustomResourceDefinitions of the istio.io/api module the bridge
// is built with, and waits until the server serves every one of them.
func (s *Server) InstallIstioCRDs(t testing.TB) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api").Output()
	if err != nil {
		t.Fatalf("finding the istio.io/api module: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "kubernetes", "customresourcedefinitions.gen.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	client := s.Dynamic(t)
	var want []string // group/version/plural
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if _, err := client.Resource(crdGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating CRD %s: %v", u.GetName(), err)
		}
		group, _, _ := unstructured.NestedString(obj, "spec", "group")
		plural, _, _ := unstructured.NestedString(obj, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(obj, "spec", "versions")
		for _, v := range versions {
			if m, ok := v.(map[string]any); ok && m["served"] == true {
				want = append(want, group+"/"+fmt.Sprint(m["name"])+"/"+plural)
			}
		}
	}
	s.waitServed(t, want)
}

// waitServed waits until discovery lists every group/version/plural.
func (s *Server) waitServed(t testing.TB, want []string) {
	t.Helper()
	disco, err := discovery.NewDiscoveryClientForConfig(s.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		missing := ""
		for _, w := range want {
			i := strings.LastIndexByte(w, '/')
			list, err := disco.ServerResourcesForGroupVersion(w[:i])
			found := false
			if err == nil {
				for _, r := range list.APIResources {
					found = found || r.Name == w[i+1:]
				}
			}
			if !found {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRDs installed but %s not served after 1m", missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Apply creates, or replaces, the object a YAML document describes, of resource gvr (cluster
// scoped when the document names no namespace and gvr is namespaces).
func (s *Server) Apply(t testing.TB, gvr schema.GroupVersionResource, doc string) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	var ri dynamic.ResourceInterface = s.Dynamic(t).Resource(gvr)
	if gvr.Resource != "namespaces" {
		ri = s.Dynamic(t).Resource(gvr).Namespace(u.GetNamespace())
	}
	ctx := context.Background()
	old, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err == nil {
		u.SetResourceVersion(old.GetResourceVersion())
		_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
	} else {
		_, err = ri.Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("applying %s %s/%s: %v", gvr.Resource, u.GetNamespace(), u.GetName(), err)
	}
}
