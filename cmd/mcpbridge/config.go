package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/mcpbridge/mcpbridge/app"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/internal/tlsserver"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Config is the whole configuration, as read from file, environment and flags (the types live
// with the wiring, in app; only this command reads configuration).
type (
	Config     = app.Config
	LogConfig  = app.LogConfig
	GRPCConfig = app.GRPCConfig
)

// defaults are the values of every key when nothing else sets it: app.DefaultConfig(), the
// one place they are written, one key per leaf of Config (its mapstructure tags joined with
// "."; a map or a list is one leaf), as the value of that leaf.
func defaults() map[string]any {
	out := map[string]any{}
	configLeaves(reflect.ValueOf(app.DefaultConfig()).Elem(), "", func(key string, v reflect.Value) {
		out[key] = v.Interface()
	})
	return out
}

// configLeaves calls leaf with the dotted key and the value of every leaf of a config struct.
// A pointer to a struct (an optional section: sources.kubernetes) is one leaf, nil unless set.
func configLeaves(v reflect.Value, prefix string, leaf func(key string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key := prefix + f.Tag.Get("mapstructure")
		if f.Type.Kind() == reflect.Struct {
			configLeaves(v.Field(i), key+".", leaf)
			continue
		}
		leaf(key, v.Field(i))
	}
}

// flagKeys maps each configuration flag to its key.
var flagKeys = map[string]string{
	"grpc-addr": "grpc.address",
	"http-addr": "http.address",
	"files":     "sources.files",
	"log-level": "log.level",
}

// ConfigError is a bad command line or configuration: exit status 2, one line.
type ConfigError = app.ConfigError

func configErrorf(format string, args ...any) error { return app.ConfigErrorf(format, args...) }

// addConfigFlags declares the flags of CONTRACT.md section 2 on fs.
func addConfigFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "configuration file (YAML); keys as in config.yaml")
	fs.String("grpc-addr", "", "address of every gRPC service (grpc.address, default 127.0.0.1:15010)")
	fs.String("http-addr", "", "address of health, metrics and debug (http.address, default 127.0.0.1:15014)")
	fs.StringArray("files", nil, "file or directory of Istio YAML to watch and serve; repeatable (sources.files)")
	fs.String("log-level", "", "debug, info, warn or error (log.level, default info)")
	fs.StringArray("upstream", nil, "address of a ResourceSource to dial as a sink; repeatable (sources.upstreams[].address)")
}

// loadConfig reads configuration with viper's precedence: explicit flag > environment > file >
// default. It uses its own viper instance (viper is not safe for concurrent use) and rejects
// unknown keys so a typo is an error, not a silently ignored setting.
func loadConfig(fs *pflag.FlagSet) (*Config, error) {
	v := viper.New()
	for k, val := range defaults() {
		v.SetDefault(k, val)
	}
	v.SetEnvPrefix("MCPBRIDGE")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if err := checkEnvironment(os.Environ()); err != nil {
		return nil, err
	}
	for flag, key := range flagKeys {
		// Bound flags win only when set explicitly; their zero defaults never override.
		if err := v.BindPFlag(key, fs.Lookup(flag)); err != nil {
			return nil, fmt.Errorf("bind --%s: %w", flag, err)
		}
	}
	if path, _ := fs.GetString("config"); path != "" {
		if err := readConfigFile(v, path); err != nil {
			return nil, err
		}
	}
	cfg := &Config{}
	decode := viper.DecodeHook(decodeHook())
	// Lists of objects (authz.rules, upstreams) escape the unknown-key check of the file:
	// a misspelt field inside one is an error here.
	exact := func(c *mapstructure.DecoderConfig) { c.ErrorUnused = true }
	if err := v.Unmarshal(cfg, decode, exact); err != nil {
		return nil, configErrorf("configuration: %s", decodeError(err))
	}
	if err := kubernetesFromEnv(cfg); err != nil {
		return nil, err
	}
	if fs.Changed("upstream") {
		// A list of objects has no flag form of its own: each --upstream is one plaintext
		// target, and the flags replace the file's list.
		addrs, _ := fs.GetStringArray("upstream")
		cfg.Sources.Upstreams = nil
		for _, a := range addrs {
			cfg.Sources.Upstreams = append(cfg.Sources.Upstreams, dial.Target{Address: a})
		}
	}
	if err := validateConfig(cfg, fs); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decodeHook turns what viper holds (strings from the environment and flags, YAML from the
// file) into Config's types: durations from "100ms", lists from "a,b".
func decodeHook() mapstructure.DecodeHookFunc {
	return mapstructure.ComposeDecodeHookFunc(
		stringToDuration,
		mapstructure.StringToSliceHookFunc(","),
		stringToInt,
	)
}

// stringToDuration decodes a duration, its error naming the value and what is expected (the
// library's says "time: unknown unit" and not the value).
func stringToDuration(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || from.Kind() != reflect.String || to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a duration: want a number and a unit, such as 500ms, 30s, 5m or 1h30m", s)
	}
	return d, nil
}

// stringToInt decodes an integer given as a string (the environment's, a quoted YAML value),
// its error naming the value.
func stringToInt(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || from.Kind() != reflect.String || to.Kind() != reflect.Int {
		return data, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 0, strconv.IntSize) // as mapstructure's own
	if err != nil {
		return nil, fmt.Errorf("%q is not a whole number", s)
	}
	return int(n), nil
}

// mapstructureKey finds the key mapstructure names in each of its errors: 'sink.expiry' ...
var mapstructureKey = regexp.MustCompile(`'([a-z0-9_.\[\]]+)' `)

// decodeError rewrites mapstructure's errors as KEY: WHAT, one line: "sink.expiry: "5x" is
// not a duration: ...", not "decoding failed due to the following error(s): 'sink.expiry'
// time: unknown unit".
func decodeError(err error) string {
	text := oneLine(err)
	text = strings.TrimPrefix(text, "decoding failed due to the following error(s): ")
	return mapstructureKey.ReplaceAllString(text, "$1: ")
}

func readConfigFile(v *viper.Viper, path string) error {
	if _, err := os.Stat(path); err != nil {
		return configErrorf("--config %s: %v", path, errors.Unwrap(err))
	}
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return configErrorf("--config %s: %s", path, oneLine(err))
	}
	known := knownKeys()
	for _, key := range v.AllKeys() {
		if !v.InConfig(key) {
			continue
		}
		if !isKnownKey(known, key) {
			return configErrorf("--config %s: unknown key %q", path, key)
		}
	}
	return nil
}

func isKnownKey(known []string, key string) bool {
	for _, k := range known {
		mapKey, isMap := strings.CutSuffix(k, ".*")
		if k == key || (isMap && (key == mapKey || strings.HasPrefix(key, mapKey+"."))) {
			return true
		}
	}
	return false
}

// notConfigEnv are MCPBRIDGE_ variables that are not configuration keys: the test tools'
// (the etcd, kube-apiserver and ZooKeeper the tests run), which a bridge started by a test
// inherits.
var notConfigEnv = map[string]bool{"MCPBRIDGE_ETCD": true, "MCPBRIDGE_KUBEAPI": true, "MCPBRIDGE_ZOOKEEPER_CLASSPATH": true}

// envName is the variable that sets a key: MCPBRIDGE_ and the key upper-cased, "." as "_".
func envName(key string) string {
	return "MCPBRIDGE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// kubernetesSection is the optional section whose keys the environment may set although
// viper, holding no default for them, does not read them itself.
const kubernetesSection = "sources.kubernetes"

// kubernetesFromEnv sets sources.kubernetes's fields from MCPBRIDGE_SOURCES_KUBERNETES_*
// (over the file's, as for every key), turning the source on when one is set.
func kubernetesFromEnv(cfg *Config) error {
	t := reflect.TypeOf(app.KubernetesSourceConfig{})
	for i := range t.NumField() {
		f := t.Field(i)
		name := envName(kubernetesSection + "." + f.Tag.Get("mapstructure"))
		val, ok := os.LookupEnv(name)
		if !ok {
			continue
		}
		if cfg.Sources.Kubernetes == nil {
			cfg.Sources.Kubernetes = &app.KubernetesSourceConfig{}
		}
		field := reflect.ValueOf(cfg.Sources.Kubernetes).Elem().Field(i)
		switch field.Kind() {
		case reflect.String:
			field.SetString(val)
		case reflect.Bool:
			b, err := strconv.ParseBool(val)
			if err != nil {
				return configErrorf("%s: %q is neither true nor false", name, val)
			}
			field.SetBool(b)
		case reflect.Slice:
			field.Set(reflect.ValueOf(strings.Split(val, ",")))
		}
	}
	return nil
}

// kubernetesEnvNames are the variables of kubernetesFromEnv.
func kubernetesEnvNames() []string {
	var out []string
	t := reflect.TypeOf(app.KubernetesSourceConfig{})
	for i := range t.NumField() {
		out = append(out, envName(kubernetesSection+"."+t.Field(i).Tag.Get("mapstructure")))
	}
	return out
}

// checkEnvironment refuses an MCPBRIDGE_ variable that sets no key, as an unknown key of the
// file is refused: a misspelt variable would otherwise be ignored without a word. The error
// names the variable and the closest variable that does set a key.
func checkEnvironment(environ []string) error {
	known := map[string]bool{}
	var names []string
	for _, key := range knownKeys() {
		if key, isMap := strings.CutSuffix(key, ".*"); isMap {
			known[envName(key)] = true // the map or section as a whole; its entries are not variables
			names = append(names, envName(key))
			continue
		}
		known[envName(key)] = true
		names = append(names, envName(key))
	}
	for _, name := range kubernetesEnvNames() {
		known[name] = true
		names = append(names, name)
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "MCPBRIDGE_") || known[name] || notConfigEnv[name] {
			continue
		}
		if near := closest(name, names); near != "" {
			return configErrorf("environment: %s sets no configuration key; did you mean %s?", name, near)
		}
		return configErrorf("environment: %s sets no configuration key (variables are MCPBRIDGE_ and a key of config.yaml upper-cased, \".\" as \"_\")", name)
	}
	return nil
}

// closest is the name nearest to s by edit distance, when it is near enough to be a typo.
func closest(s string, names []string) string {
	best, bestDist := "", len(s)/3+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// knownKeys lists the dotted keys of Config; a map's is KEY.* (any key below it).
func knownKeys() []string {
	var out []string
	configLeaves(reflect.ValueOf(Config{}), "", func(key string, v reflect.Value) {
		if v.Kind() == reflect.Map || v.Kind() == reflect.Pointer {
			key += ".*" // the fields of an optional section are checked when decoded (exact)
		}
		out = append(out, key)
	})
	return out
}

// origin names where a key's value came from, for error messages: the flag if one was set.
func origin(fs *pflag.FlagSet, key string) string {
	for flag, k := range flagKeys {
		if k == key && fs.Changed(flag) {
			return "--" + flag
		}
	}
	return key
}

func validateConfig(c *Config, fs *pflag.FlagSet) error {
	for key, addr := range map[string]string{"grpc.address": c.GRPC.Address, "http.address": c.HTTP.Address} {
		if err := validateAddress(addr); err != nil {
			return configErrorf("%s: %q is not a listen address: %v", origin(fs, key), addr, err)
		}
	}
	for _, l := range []listener{
		{"grpc", c.GRPC.Address, c.GRPC.TLS, c.GRPC.Insecure},
		{"http", c.HTTP.Address, c.HTTP.TLS, c.HTTP.Insecure},
	} {
		if err := l.validate(fs); err != nil {
			return err
		}
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		return configErrorf("%s: %v", origin(fs, "log.level"), err)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		return configErrorf("log.format: %q is neither text nor json", c.Log.Format)
	}
	for key, n := range map[string]int{"grpc.max_recv_msg_size": c.GRPC.MaxRecvMsgSize, "xds.max_response_size": c.XDS.MaxResponseSize} {
		if n <= 0 {
			return configErrorf("%s: must be a positive number of bytes, got %d", key, n)
		}
	}
	for key, d := range map[string]time.Duration{
		"grpc.shutdown_grace": c.GRPC.ShutdownGrace, "sources.file_debounce": c.Sources.FileDebounce,
		"sources.startup_timeout": c.Sources.StartupTimeout,
	} {
		if d < 0 {
			return configErrorf("%s: must not be negative, got %s", key, d)
		}
	}
	for _, f := range c.Sources.Files {
		if f == "" {
			return configErrorf("%s: empty path", origin(fs, "sources.files"))
		}
	}
	for key, targets := range map[string][]dial.Target{"sources.upstreams": c.Sources.Upstreams, "downstreams": c.Downstreams} {
		for i, t := range targets {
			name := fmt.Sprintf("%s[%d].address", key, i)
			if key == "sources.upstreams" && fs.Changed("upstream") {
				name = "--upstream"
			}
			if err := validateAddress(t.Address); err != nil {
				return configErrorf("%s: %q is not host:port: %v", name, t.Address, err)
			}
		}
	}
	if err := validateSources(c.Sources); err != nil {
		return err
	}
	// Checked with the translation off too: Linkerd's answers and the consumers' namespace
	// views of the Envoy resources use it.
	if c.Translate.DomainSuffix == "" || strings.HasPrefix(c.Translate.DomainSuffix, ".") {
		return configErrorf("translate.domain_suffix: %q is not a DNS suffix such as cluster.local", c.Translate.DomainSuffix)
	}
	if _, err := envoy.ParseOutboundTrafficPolicy(c.Translate.OutboundTrafficPolicy); err != nil {
		return configErrorf("translate.outbound_traffic_policy: %v", err)
	}
	if _, err := parseMemoryLimit(c.Memory.Limit); err != nil {
		return configErrorf("memory.limit: %v", err)
	}
	if c.Memory.GCPercent < 10 || c.Memory.GCPercent > 1000 {
		return configErrorf("memory.gc_percent: %d is not between 10 and 1000", c.Memory.GCPercent)
	}
	if c.Sink.NodeID == "" {
		return configErrorf("sink.node_id: must not be empty")
	}
	if err := validateAuthz(c); err != nil {
		return err
	}
	for key, d := range map[string]time.Duration{"sink.expiry": c.Sink.Expiry, "sink.anonymous_expiry": c.Sink.AnonymousExpiry, "xds.push_interval": c.XDS.PushInterval} {
		if d < 0 {
			return configErrorf("%s: must not be negative, got %s", key, d)
		}
	}
	if err := validateLimits(c.Limits); err != nil {
		return err
	}
	for key, d := range map[string]time.Duration{"http.idle_timeout": c.HTTP.IdleTimeout, "http.read_timeout": c.HTTP.ReadTimeout} {
		if d <= 0 {
			return configErrorf("%s: must be a positive duration, got %s", key, d)
		}
	}
	if err := validateStore(c.Store); err != nil {
		return err
	}
	if _, err := app.ResolveTTLs(c.XDS.TTL); err != nil {
		return err
	}
	for key, d := range map[string]time.Duration{
		"store.tombstone_retention": c.Store.TombstoneRetention, "xds.send_timeout": c.XDS.SendTimeout,
		"linkerd.keepalive_interval":       c.Linkerd.KeepaliveInterval,
		"grpc.keepalive.min_ping_interval": c.GRPC.Keepalive.MinPingInterval,
		"grpc.keepalive.time":              c.GRPC.Keepalive.Time, "grpc.keepalive.timeout": c.GRPC.Keepalive.Timeout,
	} {
		if d <= 0 {
			return configErrorf("%s: must be a positive duration, got %s", key, d)
		}
	}
	return nil
}

// listener is what the configuration says of one of the two listeners.
type listener struct {
	name     string // grpc or http: the key of its settings
	address  string
	tls      tlsserver.Config
	insecure bool
}

// validate checks the listener's TLS keys (its files are loaded when the bridge is built),
// and refuses plaintext beyond loopback unless asked for: mesh config and the identities of
// its producers must not cross a network in the clear by oversight.
func (l listener) validate(fs *pflag.FlagSet) error {
	if err := l.tls.Validate(l.name + ".tls"); err != nil {
		return configErrorf("%v", err)
	}
	if l.tls.Enabled() || l.insecure || app.IsLoopback(l.address) {
		return nil
	}
	return configErrorf("%s: %q is not a loopback address and %s.tls is not set: set %s.tls.cert_file and %s.tls.key_file to serve TLS, or %s.insecure: true to serve plaintext to the network",
		origin(fs, l.name+".address"), l.address, l.name, l.name, l.name, l.name)
}

// validateLimits refuses a limit that is not positive: none has a value meaning "no limit"
// (to lift one, set it far above what any client needs), and 0 would refuse every client.
func validateLimits(l app.LimitsConfig) error {
	for key, n := range map[string]int{
		"limits.streams": l.Streams, "limits.streams_per_peer": l.StreamsPerPeer,
		"limits.subscriptions_per_stream": l.SubscriptionsPerStream, "limits.request_burst": l.RequestBurst,
		"limits.resources_per_producer": l.ResourcesPerProducer, "limits.connections": l.Connections,
		"limits.connections_per_peer": l.ConnectionsPerPeer,
	} {
		if n <= 0 {
			return configErrorf("%s: must be a positive number, got %d", key, n)
		}
	}
	if r := l.RequestsPerSecond; !(r > 0) || math.IsInf(r, 0) {
		return configErrorf("limits.requests_per_second: must be a positive number of messages a second, got %v", r)
	}
	if l.FirstRequestTimeout <= 0 {
		return configErrorf("limits.first_request_timeout: must be a positive duration, got %s", l.FirstRequestTimeout)
	}
	return nil
}

func validateAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var aerr *net.AddrError
		if errors.As(err, &aerr) {
			return errors.New(aerr.Err)
		}
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not one of debug, info, warn, error", s)
}

// oneLine folds a multi-line error (mapstructure's, viper's) into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// dnsLabel says whether s is a Kubernetes namespace name (an RFC 1123 label).
func dnsLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// validateSources checks sources.kubernetes and sources.zookeeper, naming the key and value.
func validateSources(s app.SourcesConfig) error {
	if k := s.Kubernetes; k != nil {
		if k.Kubeconfig != "" {
			if _, err := os.Stat(k.Kubeconfig); err != nil {
				return configErrorf("sources.kubernetes.kubeconfig: %v", err)
			}
		}
		for i, ns := range k.Namespaces {
			if !dnsLabel(ns) {
				return configErrorf("sources.kubernetes.namespaces[%d]: %q is not a namespace name", i, ns)
			}
		}
		if _, err := labels.Parse(k.NamespaceSelector); err != nil {
			return configErrorf("sources.kubernetes.namespace_selector: %q is not a label selector: %v", k.NamespaceSelector, err)
		}
	}
	seen := map[string]bool{}
	for i, z := range s.Zookeeper {
		key := fmt.Sprintf("sources.zookeeper[%d]", i)
		if !dnsLabel(z.Name) {
			return configErrorf("%s.name: %q must be a DNS label (lower-case letters, digits, '-'; at most 63): it is the namespace of the registry's ServiceEntries", key, z.Name)
		}
		if seen[z.Name] {
			return configErrorf("%s.name: %q is the name of another sources.zookeeper entry", key, z.Name)
		}
		seen[z.Name] = true
		if len(z.Servers) == 0 {
			return configErrorf("%s.servers: at least one host:port is needed", key)
		}
		for j, addr := range z.Servers {
			if err := validateAddress(addr); err != nil {
				return configErrorf("%s.servers[%d]: %q is not host:port: %v", key, j, addr, err)
			}
		}
		if z.SessionTimeout < 0 {
			return configErrorf("%s.session_timeout: must not be negative, got %s", key, z.SessionTimeout)
		}
		for field, root := range map[string]string{"dubbo_root": z.DubboRoot, "spring_root": z.SpringRoot} {
			if root != "" && !strings.HasPrefix(root, "/") {
				return configErrorf("%s.%s: %q is not an absolute ZooKeeper path (it starts with /)", key, field, root)
			}
		}
	}
	return nil
}

// validateAuthz compiles authz.rules and the upstreams' scopes, so that a bad rule is a
// configuration error naming it before anything starts.
func validateAuthz(c *Config) error {
	if _, err := authz.Compile(c.Authz.Rules, xds.CollectionOf); err != nil {
		return configErrorf("%v", err)
	}
	for i, t := range c.Sources.Upstreams {
		if t.Authz == nil {
			continue
		}
		if _, err := authz.ScopeGrant("", *t.Authz, kinds.CollectionOf); err != nil {
			return configErrorf("sources.upstreams[%d].authz.%v", i, err)
		}
	}
	for i, t := range c.Downstreams {
		if t.Authz != nil {
			return configErrorf("downstreams[%d].authz: only upstreams have one (what they may produce); a downstream is sent what the bridge serves", i)
		}
	}
	return nil
}

// validateStore checks store.backend and, for etcd, store.etcd.
func validateStore(s app.StoreConfig) error {
	switch s.Backend {
	case "memory":
		return nil
	case "etcd":
	default:
		return configErrorf("store.backend: %q is neither memory nor etcd", s.Backend)
	}
	e := s.Etcd
	if len(e.Endpoints) == 0 {
		return configErrorf("store.etcd.endpoints: store.backend etcd needs at least one endpoint (http://HOST:2379, or https:// with store.etcd.tls)")
	}
	for i, ep := range e.Endpoints {
		if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
			return configErrorf("store.etcd.endpoints[%d]: %q is not an http:// or https:// URL", i, ep)
		}
	}
	if e.Prefix == "" || !strings.HasPrefix(e.Prefix, "/") {
		return configErrorf("store.etcd.prefix: %q must start with /", e.Prefix)
	}
	for key, d := range map[string]time.Duration{"store.etcd.dial_timeout": e.DialTimeout, "store.etcd.request_timeout": e.RequestTimeout} {
		if d <= 0 {
			return configErrorf("%s: must be a positive duration, got %s", key, d)
		}
	}
	if e.SessionTTL < 2*time.Second {
		return configErrorf("store.etcd.session_ttl: %s is under etcd's shortest lease of 2s", e.SessionTTL)
	}
	if e.MaxTxnOps < 2 {
		return configErrorf("store.etcd.max_txn_ops: %d; at least 2 (etcd's --max-txn-ops is 128 by default)", e.MaxTxnOps)
	}
	if e.MaxTxnBytes < 4096 {
		return configErrorf("store.etcd.max_txn_bytes: %d; at least 4096 (etcd's --max-request-bytes is 1.5 MiB by default)", e.MaxTxnBytes)
	}
	if (e.TLS.CertFile == "") != (e.TLS.KeyFile == "") {
		return configErrorf("store.etcd.tls: cert_file and key_file go together")
	}
	return nil
}
