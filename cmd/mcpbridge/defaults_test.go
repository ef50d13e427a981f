package main

import (
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcpbridge/mcpbridge/app"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// defaultsBefore is the map of viper defaults this command kept before app.DefaultConfig()
// became the one place of the defaults, as it was: its keys and their values are a promise
// to users (CONTRACT.md section 2, config.yaml), which the derived defaults must keep.
var defaultsBefore = map[string]any{
	"grpc.address":                     "127.0.0.1:15010",
	"grpc.max_recv_msg_size":           4 << 20,
	"grpc.shutdown_grace":              "5s",
	"grpc.keepalive.min_ping_interval": "5s",
	"grpc.keepalive.time":              "30s",
	"grpc.keepalive.timeout":           "10s",
	"grpc.insecure":                    false,
	"grpc.tls.cert_file":               "",
	"grpc.tls.key_file":                "",
	"grpc.tls.client_ca_file":          "",
	"grpc.tls.client_auth":             "", // require with a client_ca_file, else none
	"http.address":                     "127.0.0.1:15014",
	"http.insecure":                    false,
	"http.debug_without_client_auth":   false,
	"http.idle_timeout":                "2m",
	"http.read_timeout":                "30s",
	"http.rest.max_polls_per_peer":     100,
	"limits.connections":               100000,
	"limits.connections_per_peer":      10000,
	"http.tls.cert_file":               "",
	"http.tls.key_file":                "",
	"http.tls.client_ca_file":          "",
	"http.tls.client_auth":             "",
	"http.rest.enabled":                true,
	"http.rest.poll_timeout":           "30s",
	"http.rest.max_concurrent_polls":   10_000,
	"http.rest.max_request_bytes":      1 << 20,
	"exports.files":                    []any{},
	"exports.directory":                "",
	"exports.debounce":                 "100ms",
	"exports.retry_interval":           "5s",
	"log.level":                        "info",
	"log.format":                       "text",
	"sources.files":                    []string{},
	"sources.file_debounce":            "100ms",
	"sources.startup_timeout":          "30s",
	"store.tombstone_retention":        "5m",
	"store.backend":                    "memory",
	"store.etcd.endpoints":             []string{},
	"store.etcd.prefix":                "/mcpbridge/",
	"store.etcd.replica":               "",
	"store.etcd.dial_timeout":          "5s",
	"store.etcd.request_timeout":       "5s",
	"store.etcd.session_ttl":           "10s",
	"store.etcd.max_txn_ops":           100,
	"store.etcd.max_txn_bytes":         1 << 20,
	"store.etcd.tls.ca_file":           "",
	"store.etcd.tls.cert_file":         "",
	"store.etcd.tls.key_file":          "",
	"collections":                      []string{},
	"memory.limit":                     "auto",
	"memory.gc_percent":                75, // app.DefaultGCPercent, then
	"sources.upstreams":                []any{},
	"sources.kubernetes":               (*app.KubernetesSourceConfig)(nil),
	"sources.zookeeper":                []any{},
	"downstreams":                      []any{},
	"sink.node_id":                     "mcpbridge",
	"sink.node_annotations":            map[string]string{},
	"sink.incremental":                 true,
	"sink.expiry":                      "0s",
	"sink.anonymous_expiry":            "1h",
	"xds.mesh_config_file":             "",
	"xds.send_timeout":                 "10s",
	"xds.push_interval":                "100ms",
	"xds.max_response_size":            4 << 20,
	"xds.ttl.default":                  "0s",
	"xds.ttl.types":                    []any{},
	"xds.serve_v2":                     true,
	"translate.enabled":                true,
	"translate.domain_suffix":          "cluster.local",
	"linkerd.keepalive_interval":       "30s",
	"authz.rules":                      []any{},
	"limits.streams":                   100_000,
	"limits.streams_per_peer":          1_000,
	"limits.subscriptions_per_stream":  200_000,
	"limits.requests_per_second":       100.0,
	"limits.request_burst":             1_000,
	"limits.resources_per_producer":    1_000_000,
	"limits.first_request_timeout":     "10s",

	"translate.outbound_traffic_policy": "ALLOW_ANY",
}

// decodeAs decodes a value as viper's Unmarshal would (durations from strings, lists of
// objects from []any) into the type of like, and returns it.
func decodeAs(t *testing.T, value any, like reflect.Type) any {
	t.Helper()
	out := reflect.New(like)
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{DecodeHook: decodeHook(), Result: out.Interface()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(value); err != nil {
		t.Fatalf("decoding %#v as %s: %v", value, like, err)
	}
	return out.Elem().Interface()
}

// Every key of the old map is still a key, with the same default, and there is no other.
func TestDefaultsAreTheOldDefaults(t *testing.T) {
	got := defaults()
	for key, old := range defaultsBefore {
		v, ok := got[key]
		if !ok {
			t.Errorf("%s: no default any more (it was %v)", key, old)
			continue
		}
		if want := decodeAs(t, old, reflect.TypeOf(v)); !reflect.DeepEqual(v, want) {
			t.Errorf("%s: default %v, was %v", key, v, want)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(got)) {
		if _, ok := defaultsBefore[key]; !ok {
			t.Errorf("%s: a key the defaults did not have", key)
		}
	}
}

// notDefaultInConfigYAML are the keys that config.yaml sets to something else than their
// default, on purpose, and what it sets them to.
var notDefaultInConfigYAML = map[string]any{
	"sources.files": []string{"examples/"}, // make run serves the examples
}

// config.yaml at the repository root, the commented reference of the configuration, sets
// every key, to its default but where notDefaultInConfigYAML says.
func TestConfigYAMLDocumentsEveryDefault(t *testing.T) {
	v := viper.New()
	v.SetConfigFile("../../config.yaml")
	if err := v.ReadInConfig(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defs := defaults()
	for _, key := range slices.Sorted(maps.Keys(defs)) {
		def := defs[key]
		if rv := reflect.ValueOf(def); rv.Kind() == reflect.Pointer && rv.IsNil() {
			// An optional section, off by default: viper does not hold a null, so the file
			// must show it as "KEY: null" with its fields commented below.
			last := key[strings.LastIndexByte(key, '.')+1:]
			if !strings.Contains(string(raw), "\n  "+last+": null\n") {
				t.Errorf("config.yaml does not show %s; add \"%s: null\" with its fields commented", key, last)
			}
			continue
		}
		if !v.InConfig(key) {
			t.Errorf("config.yaml does not set %s; add it, with its default %v and a comment", key, def)
			continue
		}
		want := def
		if other, ok := notDefaultInConfigYAML[key]; ok {
			want = other
		}
		if got := decodeAs(t, v.Get(key), reflect.TypeOf(def)); !reflect.DeepEqual(got, want) {
			t.Errorf("config.yaml sets %s to %v, want %v", key, got, want)
		}
	}
}

// A zero the bridge's components would once have replaced by a default of their own is
// refused, naming the key: the value the bridge runs with is the configured one.
func TestZeroThatMeantTheDefaultIsRefused(t *testing.T) {
	for _, c := range []struct{ env, value, key string }{
		{"MCPBRIDGE_XDS_SEND_TIMEOUT", "0s", "xds.send_timeout"},
		{"MCPBRIDGE_XDS_MAX_RESPONSE_SIZE", "0", "xds.max_response_size"},
		{"MCPBRIDGE_STORE_TOMBSTONE_RETENTION", "0s", "store.tombstone_retention"},
		{"MCPBRIDGE_EXPORTS_RETRY_INTERVAL", "0s", "exports.retry_interval"},
		// Linkerd's answers use the suffix with the translation off too.
		{"MCPBRIDGE_TRANSLATE_DOMAIN_SUFFIX", ".cluster.local", "translate.domain_suffix"},
	} {
		t.Run(c.key, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			t.Setenv("MCPBRIDGE_TRANSLATE_ENABLED", "false")
			code, _, stderr := runCLI(t, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
			if code != exitUsage {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, stderr)
			}
			assertOneLine(t, stderr, c.key)
		})
	}
}

// translate.outbound_traffic_policy takes MeshConfig's outboundTrafficPolicy modes the bridge
// builds (ALLOW_ANY, REGISTRY_ONLY); anything else is refused, naming the key.
func TestOutboundTrafficPolicyOtherThanIstiodsModesIsRefused(t *testing.T) {
	for _, value := range []string{"allow_any", "ALLOW_ANY_DYNAMIC_DNS", "NONE"} {
		t.Run(value, func(t *testing.T) {
			t.Setenv("MCPBRIDGE_TRANSLATE_OUTBOUND_TRAFFIC_POLICY", value)
			code, _, stderr := runCLI(t, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
			if code != exitUsage {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, stderr)
			}
			assertOneLine(t, stderr, "translate.outbound_traffic_policy")
		})
	}
}
