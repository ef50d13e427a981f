package helm

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// startEtcd runs a one-member etcd (Debian's etcd-server, or MCPBRIDGE_ETCD) on loopback for
// the test and returns its client URL. No etcd is a failure: .ci/run installs it.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("MCPBRIDGE_ETCD")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("etcd"); err != nil {
			t.Fatalf("no etcd binary: install Debian's etcd-server (.ci/run does) or set MCPBRIDGE_ETCD: %v", err)
		}
	}
	client, peer := "http://"+freeLoopback(t), "http://"+freeLoopback(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--name", "m0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m0="+peer, "--initial-cluster-state", "new")
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client
			}
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			t.Fatalf("etcd not healthy in 30s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
