// Package limits bounds what one client may take of a bridge: streams in total and per peer,
// the messages a stream may send per second, and how long a stream may stay silent before its
// first message (Guard, a gRPC stream interceptor); the engine bounds subscriptions per stream
// and the ResourceSink the resources per producer with the same Refuser. Every refusal is the
// gRPC status ResourceExhausted, counted in mcpbridge_limit_refusals_total{limit} and logged
// at most once a second per limit, and it ends or refuses one stream (or NACKs one message),
// never another.
package limits

import (
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
)

// The limits, as the metric's label and the logs name them: each its configuration key's
// last part (limits.streams, ..., grpc.max_recv_msg_size).
const (
	Streams                = "streams"
	StreamsPerPeer         = "streams_per_peer"
	SubscriptionsPerStream = "subscriptions_per_stream"
	RequestsPerSecond      = "requests_per_second"
	ResourcesPerProducer   = "resources_per_producer"
	FirstRequestTimeout    = "first_request_timeout"
	MaxRecvMsgSize         = "max_recv_msg_size"
	// MaxConcurrentPolls is http.rest.max_concurrent_polls: REST-JSON long polls waiting at
	// once (package source/rest), refused with HTTP 503; MaxPollsPerPeer those of one peer.
	MaxConcurrentPolls = "max_concurrent_polls"
	MaxPollsPerPeer    = "max_polls_per_peer"
	// Connections and ConnectionsPerPeer bound the connections of both ports (Conns).
	Connections        = "connections"
	ConnectionsPerPeer = "connections_per_peer"
)

// Names lists every limit, for the metric's series at zero.
var Names = []string{Streams, StreamsPerPeer, SubscriptionsPerStream, RequestsPerSecond,
	ResourcesPerProducer, FirstRequestTimeout, MaxRecvMsgSize, MaxConcurrentPolls, MaxPollsPerPeer,
	Connections, ConnectionsPerPeer}

// Refuser counts and logs refusals and makes the status a client is refused with. It is safe
// for concurrent use; the zero value neither counts nor logs less: it has a log per limit.
type Refuser struct {
	metrics *metrics.Metrics
	// logs holds one RareLog per limit, so that a flood of one kind of refusal does not hide
	// another kind.
	logs map[string]*RareLog
	// other is for a limit not in Names (none today).
	other RareLog
}

// NewRefuser returns a Refuser counting in m (nil: not counted).
func NewRefuser(m *metrics.Metrics) *Refuser {
	r := &Refuser{metrics: m, logs: make(map[string]*RareLog, len(Names))}
	for _, n := range Names {
		r.logs[n] = &RareLog{}
	}
	return r
}

// Refuse counts a refusal by limit, logs it on log (a line a second at most per limit, with
// attrs), and returns the error to end the stream with: ResourceExhausted with msg, which
// names the configuration key so that the client's operator knows what to ask for.
func (r *Refuser) Refuse(log *slog.Logger, limit, msg string, attrs ...any) error {
	r.metrics.LimitRefused(limit)
	rl := r.logs[limit]
	if rl == nil {
		rl = &r.other
	}
	rl.Log(log, slog.LevelWarn, "refused by a limit", append([]any{"limit", limit, "error", msg}, attrs...)...)
	return status.Error(codes.ResourceExhausted, msg)
}
