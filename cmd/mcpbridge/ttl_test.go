package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/mcpbridge/mcpbridge/app"
)

// xds.ttl is read from the file as config.yaml shows it: a default and a list of types, whose
// type URLs keep their dots.
func TestTTLsAreReadFromTheConfiguration(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ttl.yaml")
	os.WriteFile(file, []byte(`xds:
  ttl:
    default: 0s
    types:
      - type: type.googleapis.com/envoy.config.cluster.v3.Cluster
        ttl: 30s
      - type: networking.istio.io/v1/ServiceEntry
        ttl: 1m
`), 0o600)
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addConfigFlags(fs)
	fs.Parse([]string{"--config", file})
	cfg, err := loadConfig(fs)
	if err != nil {
		t.Fatal(err)
	}
	want := app.TTLConfig{Types: []app.TypeTTL{
		{Type: "type.googleapis.com/envoy.config.cluster.v3.Cluster", TTL: 30 * time.Second},
		{Type: "networking.istio.io/v1/ServiceEntry", TTL: time.Minute},
	}}
	if !reflect.DeepEqual(cfg.XDS.TTL, want) {
		t.Fatalf("xds.ttl %+v, want %+v", cfg.XDS.TTL, want)
	}
	ttls, err := app.ResolveTTLs(cfg.XDS.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if got := ttls.ByCollection["istio/networking/v1alpha3/serviceentries"]; got != time.Minute {
		t.Fatalf("the ServiceEntry alias resolved to %s, want 1m on the canonical collection", got)
	}
}

// A negative, too short, unknown or repeated TTL is exit 2, one line naming the key.
func TestBadTTLExits2NamingTheKey(t *testing.T) {
	for _, tc := range []struct{ name, yaml, key string }{
		{"negative default", "xds:\n  ttl:\n    default: -1s\n", "xds.ttl.default"},
		{"too short default", "xds:\n  ttl:\n    default: 100ms\n", "xds.ttl.default"},
		{"too short type", "xds:\n  ttl:\n    types:\n      - {type: type.googleapis.com/envoy.config.cluster.v3.Cluster, ttl: 10ms}\n", "xds.ttl.types[0].ttl"},
		{"negative type", "xds:\n  ttl:\n    types:\n      - {type: type.googleapis.com/envoy.config.cluster.v3.Cluster, ttl: -5s}\n", "xds.ttl.types[0].ttl"},
		{"unknown type", "xds:\n  ttl:\n    types:\n      - {type: type.googleapis.com/envoy.config.cluster.v3.Clusters, ttl: 5s}\n", "xds.ttl.types[0].type"},
		{"repeated type", "xds:\n  ttl:\n    types:\n      - {type: networking.istio.io/v1/ServiceEntry, ttl: 5s}\n      - {type: istio/networking/v1alpha3/serviceentries, ttl: 6s}\n", "xds.ttl.types[1].type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "ttl.yaml")
			os.WriteFile(file, []byte(tc.yaml), 0o600)
			code, _, stderr := runCLI(t, "serve", "--config", file, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
			if code != exitUsage {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, stderr)
			}
			assertOneLine(t, stderr, tc.key)
		})
	}
}
