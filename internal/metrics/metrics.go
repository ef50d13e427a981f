// Package metrics is the bridge's Prometheus metrics, named mcpbridge_* after Istio's
// istio_mcp_* set, on a registry of their own (no global state), with the Go and process
// collectors.
//
// Streams have a role, the bridge's role on them: "source" when the bridge sends config
// (ResourceSource, AggregatedMeshConfigService, xDS, downstream pushes) and "sink" when it
// receives config (ResourceSink, upstreams). Requests, ACKs and NACKs are the request-side
// messages of a stream in either role, as in Istio's metrics: on a source stream those the
// consumer sends, on a sink stream those the bridge sends to the producer.
//
// Every method is safe on a nil *Metrics and on the nil handles it then returns, so components
// run without metrics by leaving theirs nil. The handles (Stream, Collection) are resolved once,
// when a stream or subscription starts, so that the per-message path only adds to atomics: no
// label lookup, no lock, no allocation.
package metrics

import (
	"net/http"
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Role is the bridge's role on a stream.
type Role string

const (
	// RoleSource: the bridge sends config (ResourceSource, AMCS, xDS, downstream).
	RoleSource Role = "source"
	// RoleSink: the bridge receives config (ResourceSink, upstream).
	RoleSink Role = "sink"
	// RoleAdmin: the HTTP port's debug views (authorization refusals only).
	RoleAdmin Role = "admin"
)

// Direction is which way the bridge dialled a peer.
type Direction string

const (
	// Upstream is a ResourceSource the bridge dials as a sink.
	Upstream Direction = "upstream"
	// Downstream is a ResourceSink the bridge dials and pushes to.
	Downstream Direction = "downstream"
)

// Collection label values for what is not a collection of the store.
const (
	// UnknownCollection labels requests for a type neither the naming table nor the store
	// knows, so that a client asking for arbitrary names cannot grow the label set.
	UnknownCollection = "unknown"
	// UnaskedCollection labels a producer's Resources for a collection the bridge did not ask.
	UnaskedCollection = "unasked"
)

// Metrics holds every metric of one bridge.
type Metrics struct {
	reg *prometheus.Registry

	streams       *prometheus.GaugeVec
	requests      *prometheus.CounterVec
	acks          *prometheus.CounterVec
	nacks         *prometheus.CounterVec
	sendFailures  *prometheus.CounterVec
	recvFailures  *prometheus.CounterVec
	reconnections *prometheus.CounterVec
	peerConnected *prometheus.GaugeVec
	messageSize   *prometheus.HistogramVec
	pushLatency   *prometheus.HistogramVec
	authzRefusals *prometheus.CounterVec
	tlsReloads    *prometheus.CounterVec
	limitRefusals *prometheus.CounterVec
	heartbeats    *prometheus.CounterVec
	expiring      *prometheus.CounterVec
	exportWrites  *prometheus.CounterVec

	mu    sync.Mutex
	peers map[peerKey]*Peer
}

// New returns the metrics on a new registry that also holds the Go and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg:   prometheus.NewRegistry(),
		peers: map[peerKey]*Peer{},
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcpbridge_streams",
			Help: "Streams currently open, by protocol and the bridge's role on them (source: it sends config; sink: it receives config).",
		}, []string{"protocol", "role"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_requests_total",
			Help: "Requests by collection: received from consumers (role=source) or sent to producers (role=sink), ACKs and NACKs included.",
		}, []string{"role", "collection"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_request_acks_total",
			Help: "ACKs by collection: from consumers (role=source) or sent to producers (role=sink).",
		}, []string{"role", "collection"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_request_nacks_total",
			Help: "NACKs by collection and error_detail code: from consumers (role=source) or sent to producers (role=sink).",
		}, []string{"role", "collection", "code"}),
		sendFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_send_failures_total",
			Help: "Messages that could not be sent on a stream (the stream then ends), by gRPC code.",
		}, []string{"role", "protocol", "code"}),
		recvFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_recv_failures_total",
			Help: "Streams that ended with a receive error other than a clean close, by gRPC code.",
		}, []string{"role", "protocol", "code"}),
		reconnections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_reconnections_total",
			Help: "Streams to a dialled peer opened again after an earlier one ended.",
		}, []string{"direction", "address"}),
		peerConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcpbridge_peer_connected",
			Help: "1 while a stream to a dialled upstream or downstream is open, else 0.",
		}, []string{"direction", "address"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_ttl_heartbeats_total",
			Help: "TTL heartbeats sent to consumers (xds.ttl): responses that renew the TTL of the versions a client holds, without bodies.",
		}, []string{"collection"}),
		expiring: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_ttl_expiring_resources_total",
			Help: "Resources a stream stopped heartbeating because their producer (or, for derived resources, a producer of the translation's inputs) is disconnected: the client drops them when their TTL runs out.",
		}, []string{"collection"}),
		messageSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcpbridge_message_size_bytes",
			Help: "Size of config messages: responses sent (role=source) and Resources received (role=sink).",
			// 256 B to 64 MiB
			Buckets: prometheus.ExponentialBuckets(256, 4, 10),
		}, []string{"role", "collection"}),
		pushLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcpbridge_push_latency_seconds",
			Help: "Time from a change in the store to the send of the response that carries it, per stream.",
			// 100 µs to about 26 s
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 19),
		}, []string{"protocol"}),
		authzRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_authz_refusals_total",
			Help: "What authorization refused, by the bridge's role and reason: no_rule (a stream no rule grants), collection (a type outside the grant), resource (a write outside it), node_identity (a node id naming another namespace than the certificate), not_admin (a debug view asked by a peer that is no administrator).",
		}, []string{"role", "reason"}),
		tlsReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_tls_reloads_total",
			Help: "Reloads of a listener's TLS files after they changed on disk: result=success (new handshakes use them) or failure (the last good files still serve).",
		}, []string{"listener", "result"}),
		limitRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_limit_refusals_total",
			Help: "Refusals by a limit (ResourceExhausted): streams refused or ended, producers' pushes NACKed. limit is the configuration key's last part (limits.streams: streams).",
		}, []string{"limit"}),
		exportWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpbridge_export_writes_total",
			Help: "Writes of exported files (exports.files) by path: result=success (the file was replaced whole) or failure (the last good file stays; retried after exports.retry_interval).",
		}, []string{"path", "result"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcCPU)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.streams, m.requests, m.acks, m.nacks, m.sendFailures, m.recvFailures,
		m.reconnections, m.peerConnected, m.messageSize, m.pushLatency, m.authzRefusals, m.tlsReloads,
		m.limitRefusals, m.heartbeats, m.expiring, m.exportWrites,
	)
	return m
}

// gcCPU adds to the Go collector's defaults the runtime's estimates of the garbage collector's
// CPU time (runtime/metrics /cpu/classes/gc/..., as go_cpu_classes_gc_*_cpu_seconds_total),
// and of all the CPU time the process could have used (go_cpu_classes_total_cpu_seconds_total):
// at a million services the collector is a fifth of a full load's CPU, and it is what
// memory.gc_percent trades against memory. Estimates: compare them with each other, not with
// the process's CPU time. And the heap the last collection found live (/gc/heap/live:bytes,
// go_gc_heap_live_bytes): what the bridge keeps, from which the heap grows by
// memory.gc_percent before the next (docs/operations.md, Memory).
var gcCPU = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/(gc/|total:)|^/gc/heap/live:bytes$`)}

// Registry is where the metrics are registered; components may register more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Declare exports the streams gauge (at 0) and the push latency of each protocol a role serves,
// so that dashboards and alerts see every series before the first stream opens.
func (m *Metrics) Declare(role Role, protocols ...string) {
	if m == nil {
		return
	}
	for _, p := range protocols {
		m.streams.WithLabelValues(p, string(role))
		if role == RoleSource {
			m.pushLatency.WithLabelValues(p)
		}
	}
}

// DeclareLimits exports the refusals of each limit at 0, so that alerts see every series
// before the first refusal.
func (m *Metrics) DeclareLimits(limits ...string) {
	if m == nil {
		return
	}
	for _, l := range limits {
		m.limitRefusals.WithLabelValues(l)
	}
}

// LimitRefused counts one refusal by a limit. Refusals are rare: the label lookup is paid here.
func (m *Metrics) LimitRefused(limit string) {
	if m != nil {
		m.limitRefusals.WithLabelValues(limit).Inc()
	}
}

// Stream is one open stream's metrics.
type Stream struct {
	m        *Metrics
	role     Role
	protocol string
	open     prometheus.Gauge
	latency  prometheus.Observer
}

// Stream counts a stream as open until Close.
func (m *Metrics) Stream(role Role, protocol string) *Stream {
	if m == nil {
		return nil
	}
	s := &Stream{m: m, role: role, protocol: protocol, open: m.streams.WithLabelValues(protocol, string(role))}
	if role == RoleSource {
		s.latency = m.pushLatency.WithLabelValues(protocol)
	}
	s.open.Inc()
	return s
}

// Close counts the stream as closed.
func (s *Stream) Close() {
	if s != nil {
		s.open.Dec()
	}
}

// SendFailed counts a message that could not be sent.
func (s *Stream) SendFailed(err error) {
	if s != nil {
		s.m.sendFailures.WithLabelValues(string(s.role), s.protocol, code(err)).Inc()
	}
}

// RecvFailed counts a stream that ended with a receive error. A clean close is not a failure.
func (s *Stream) RecvFailed(err error) {
	if s != nil {
		s.m.recvFailures.WithLabelValues(string(s.role), s.protocol, code(err)).Inc()
	}
}

// Pushed observes the latency of a response sent because of a change made seconds ago.
func (s *Stream) Pushed(seconds float64) {
	if s != nil && s.latency != nil {
		s.latency.Observe(seconds)
	}
}

// NACK counts a NACK with its error_detail code. NACKs are rare: the label lookup is paid here.
func (m *Metrics) NACK(role Role, collection string, c codes.Code) {
	if m != nil {
		m.nacks.WithLabelValues(string(role), collection, c.String()).Inc()
	}
}

// Authorization refusal reasons, the values of mcpbridge_authz_refusals_total's reason label.
const (
	RefusedNoRule       = "no_rule"
	RefusedCollection   = "collection"
	RefusedResource     = "resource"
	RefusedNodeIdentity = "node_identity"
	RefusedNotAdmin     = "not_admin"
	// RefusedNoClientCA: a debug view asked for on a non-loopback HTTP port that cannot
	// authenticate its clients (no http.tls.client_ca_file).
	RefusedNoClientCA = "no_client_ca"
)

// DeclareAuthz exports the authorization refusals at zero, so that an alert on them sees the
// series before the first refusal.
func (m *Metrics) DeclareAuthz() {
	if m == nil {
		return
	}
	for _, r := range []Role{RoleSource, RoleSink} {
		for _, reason := range []string{RefusedNoRule, RefusedCollection} {
			m.authzRefusals.WithLabelValues(string(r), reason)
		}
	}
	m.authzRefusals.WithLabelValues(string(RoleSink), RefusedResource)
	m.authzRefusals.WithLabelValues(string(RoleSource), RefusedNodeIdentity)
	m.authzRefusals.WithLabelValues(string(RoleAdmin), RefusedNotAdmin)
	m.authzRefusals.WithLabelValues(string(RoleAdmin), RefusedNoClientCA)
}

// AuthzRefused counts one authorization refusal. Refusals are rare: the label lookup is paid
// here.
func (m *Metrics) AuthzRefused(role Role, reason string) {
	if m != nil {
		m.authzRefusals.WithLabelValues(string(role), reason).Inc()
	}
}

// Collection is the metrics of one collection in one role.
type Collection struct {
	requests, acks       prometheus.Counter
	size                 prometheus.Observer
	heartbeats, expiring prometheus.Counter
}

// Collection resolves the per-collection handles once, for a subscription or a configured
// collection.
func (m *Metrics) Collection(role Role, collection string) *Collection {
	if m == nil {
		return nil
	}
	r := string(role)
	c := &Collection{
		requests: m.requests.WithLabelValues(r, collection),
		acks:     m.acks.WithLabelValues(r, collection),
		size:     m.messageSize.WithLabelValues(r, collection),
	}
	if role == RoleSource { // TTLs are a source-side matter: counted under the collection alone
		c.heartbeats, c.expiring = m.heartbeats.WithLabelValues(collection), m.expiring.WithLabelValues(collection)
	}
	return c
}

// Heartbeat counts one TTL heartbeat sent.
func (c *Collection) Heartbeat() {
	if c != nil && c.heartbeats != nil {
		c.heartbeats.Inc()
	}
}

// Expiring counts resources a stream stopped heartbeating.
func (c *Collection) Expiring(n int) {
	if c != nil && c.expiring != nil && n > 0 {
		c.expiring.Add(float64(n))
	}
}

// Request counts one request.
func (c *Collection) Request() {
	if c != nil {
		c.requests.Inc()
	}
}

// ACK counts one ACK.
func (c *Collection) ACK() {
	if c != nil {
		c.acks.Inc()
	}
}

// Size observes the size of one config message, in bytes.
func (c *Collection) Size(bytes int) {
	if c != nil {
		c.size.Observe(float64(bytes))
	}
}

// code is the gRPC code of an error as a label value.
func code(err error) string { return status.Code(err).String() }

// DeclareTLS exports a TLS listener's reload counts at zero, so that an alert on failures
// sees the series before the first rotation.
func (m *Metrics) DeclareTLS(listener string) {
	if m != nil {
		m.tlsReloads.WithLabelValues(listener, "success")
		m.tlsReloads.WithLabelValues(listener, "failure")
	}
}

// TLSReloaded counts a reload of a listener's TLS files: err nil when the new files serve.
func (m *Metrics) TLSReloaded(listener string, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "failure"
	}
	m.tlsReloads.WithLabelValues(listener, result).Inc()
}

// DeclareExport exports an exported file's write counts at zero.
func (m *Metrics) DeclareExport(path string) {
	if m != nil {
		m.exportWrites.WithLabelValues(path, "success")
		m.exportWrites.WithLabelValues(path, "failure")
	}
}

// ExportWritten counts a write of an exported file: err nil when the new file is in place.
func (m *Metrics) ExportWritten(path string, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "failure"
	}
	m.exportWrites.WithLabelValues(path, result).Inc()
}
