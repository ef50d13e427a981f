// Package rest serves xDS over REST-JSON on the HTTP port, as Envoy's REST config source
// (api_config_source api_type REST) polls it: a POST of a JSON DiscoveryRequest to
// /v3/discovery:clusters, :endpoints, :listeners or :routes (any other type, the MCP
// collections over xDS among them, at /v3/discovery:resources by the request's type_url),
// answered with a JSON DiscoveryResponse.
//
// A poll is a long poll: the answer comes at once when the version the client holds
// (version_info) is not the current one, else when what it asked for changes, else after the
// poll timeout as 304 Not Modified, which Envoy's RestApiFetcher takes as "nothing new" (any
// status but 200 and 304 it counts as a failed fetch and keeps its config). Versions name
// content (source.ContentVersion), so a change outside what a poller asked for wakes it
// without answering it. The answer is what the first response of a gRPC state-of-the-world
// stream of the same node would carry (source.Engine.Snapshot): the same views by node and
// the same authorization, by the identity of the client certificate.
package rest

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
)

// Options configures a Server.
type Options struct {
	Engine *source.Engine
	Store  *store.Store
	// Views, if set, builds a poller's view while it polls (and for PollTimeout after its
	// last poll, to cover the time between polls): a router node's gateway class, a
	// sidecar's namespace, the proxyless outputs and the ports' route configurations it asks
	// for (xds.HoldView).
	Views xds.Views
	// PollTimeout is the longest a poll waits for a change before 304; positive. The bridge
	// passes http.rest.poll_timeout.
	PollTimeout time.Duration
	// MaxPolls bounds the polls waiting at once; one more is answered 503 with Retry-After
	// and counted in mcpbridge_limit_refusals_total{limit="max_concurrent_polls"}; positive.
	// The bridge passes http.rest.max_concurrent_polls.
	MaxPolls int
	// MaxRequestBytes bounds a request's body; a larger one is answered 413; positive. The
	// bridge passes http.rest.max_request_bytes.
	MaxRequestBytes int64
	// MaxPollsPerPeer bounds the polls of one peer (its verified SPIFFE ID, else its IP)
	// waiting at once, so that one peer cannot take every poll of MaxPolls; one more is
	// answered 503 with Retry-After and counted (limit "max_polls_per_peer"). 0: no bound.
	// The bridge passes http.rest.max_polls_per_peer.
	MaxPollsPerPeer int
	// Peers, if set, are the per-peer request buckets of the gRPC port (limits.Guard): each
	// poll takes a token of its peer's, and is answered 429 with Retry-After without one.
	Peers   *limits.Peers
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Server answers REST-JSON polls. Register its handlers on the HTTP port's mux.
type Server struct {
	opts     Options
	log      *slog.Logger
	polls    atomic.Int64
	refusals *limits.Refuser
	peerMu   sync.Mutex
	byPeer   map[string]int // polls waiting per peer
	cache    answers
	holds    classHolds
	stop     chan struct{}
	stopOnce sync.Once
}

// New returns a server; Stop ends its waiting polls.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: opts.Logger, refusals: limits.NewRefuser(opts.Metrics), stop: make(chan struct{}), byPeer: map[string]int{}}
	s.cache.init(256, 64<<20)
	s.holds.classes, s.holds.linger = opts.Views, opts.PollTimeout
	return s
}

// Register adds the REST endpoints to mux.
func (s *Server) Register(mux *http.ServeMux) {
	for path, typeURL := range xds.RESTPaths {
		mux.HandleFunc("POST "+path, s.handler(typeURL))
	}
	mux.HandleFunc("POST "+xds.RESTResourcesPath, s.handler(""))
}

// Stop answers every waiting poll 503 (the bridge is stopping; Envoy keeps its config and
// polls again) and releases the gateway classes held, so that an HTTP server's graceful
// shutdown does not wait out the poll timeout.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		close(s.stop)
		s.holds.releaseAll()
	})
}

// Stats are the server's counters, for tests and benchmarks.
type Stats struct {
	// Encodes counts answers encoded; every other 200 shared one.
	Encodes uint64
	// Waiting is the polls waiting now.
	Waiting int64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{Encodes: s.cache.encodes.Load(), Waiting: s.polls.Load()}
}

// httpError is an answer other than 200 or 304: its status and a message naming what was
// wrong, sent as {"error": "..."}.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func fail(code int, format string, args ...any) *httpError {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) handler(typeURL string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.poll(w, r, typeURL); err != nil {
			var he *httpError
			if !errors.As(err, &he) {
				he = fail(http.StatusInternalServerError, "%v", err)
			}
			if he.code == http.StatusServiceUnavailable || he.code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			writeJSON(w, he.code, []byte(strconv.Quote(he.msg)), true)
		}
	}
}

// poll answers one request: 200 with the answer, 304 after the timeout, or an error.
func (s *Server) poll(w http.ResponseWriter, r *http.Request, typeURL string) error {
	dr, err := DecodeRequest(http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBytes), typeURL)
	if err != nil {
		return err
	}
	peer := peerOf(r)
	if !s.opts.Peers.Take(peer) {
		msg := fmt.Sprintf("limits.requests_per_second: %q polls faster than its share (all its requests, gRPC ones included); poll again later", peer)
		s.refusals.Refuse(s.log, limits.RequestsPerSecond, msg, "peer", r.RemoteAddr)
		return fail(http.StatusTooManyRequests, "%s", msg)
	}
	if !s.acquirePoll(peer) {
		msg := fmt.Sprintf("%q has http.rest.max_polls_per_peer (%d) polls waiting already; poll again", peer, s.opts.MaxPollsPerPeer)
		s.refusals.Refuse(s.log, limits.MaxPollsPerPeer, msg, "peer", r.RemoteAddr)
		return fail(http.StatusServiceUnavailable, "%s", msg)
	}
	defer s.releasePoll(peer)
	if n := s.polls.Add(1); n > int64(s.opts.MaxPolls) {
		s.polls.Add(-1)
		msg := fmt.Sprintf("more than http.rest.max_concurrent_polls (%d) polls are waiting; poll again", s.opts.MaxPolls)
		s.refusals.Refuse(s.log, limits.MaxConcurrentPolls, msg, "peer", r.RemoteAddr)
		return fail(http.StatusServiceUnavailable, "%s", msg)
	}
	defer s.polls.Add(-1)
	grant, err := s.opts.Engine.Grant(xds.ProtocolREST, r.RemoteAddr, authz.TLSIdentity(r.TLS))
	if err != nil {
		return fail(http.StatusForbidden, "%v", err)
	}
	first, typ := xds.PollRequest(dr)
	s.opts.Engine.Polled(first, typ, xds.ProtocolREST, r.RemoteAddr)
	collection := typ.Collection
	watch := s.opts.Store.Watch(collection) // before the first read: no change is missed
	defer watch.Close()
	// A poller may come from another replica: answer from what etcd had committed, not from a
	// replica still catching up (a version older than the poller's would go back in time).
	s.opts.Engine.CatchUp(r.Context())
	defer s.holds.hold(r.Context(), first)()
	timer := time.NewTimer(s.opts.PollTimeout)
	defer timer.Stop()
	for {
		a, err := s.answer(s.opts.Store.View(), grant, dr)
		if err != nil {
			return err
		}
		if a.version != dr.GetVersionInfo() {
			writeJSON(w, http.StatusOK, a.body, false)
			return nil
		}
		select {
		case <-watch.C():
		case <-timer.C:
			w.WriteHeader(http.StatusNotModified)
			return nil
		case <-r.Context().Done():
			return nil // the client went away
		case <-s.stop:
			return fail(http.StatusServiceUnavailable, "mcpbridge is shutting down")
		}
	}
}

// peerOf names a poll's peer as the gRPC port names its streams' (sink.PeerIdentity): the
// SPIFFE ID of its verified client certificate, else its IP address.
func peerOf(r *http.Request) string {
	if id := authz.TLSIdentity(r.TLS); id != "" {
		return id
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// acquirePoll counts a waiting poll of a peer, or refuses it over MaxPollsPerPeer.
func (s *Server) acquirePoll(peer string) bool {
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	if s.opts.MaxPollsPerPeer > 0 && s.byPeer[peer] >= s.opts.MaxPollsPerPeer {
		return false
	}
	s.byPeer[peer]++
	return true
}

func (s *Server) releasePoll(peer string) {
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	if s.byPeer[peer]--; s.byPeer[peer] <= 0 {
		delete(s.byPeer, peer)
	}
}

// answer is the encoded answer to dr from view v, shared by every poll of the same key and
// revision.
func (s *Server) answer(v *store.View, grant *authz.Grant, dr *discovery.DiscoveryRequest) (*answer, error) {
	req, typ := xds.PollRequest(dr)
	snap, err := s.opts.Engine.Snapshot(v, grant, req, typ, xds.ProtocolREST)
	if errors.Is(err, source.ErrRefused) {
		return nil, fail(http.StatusForbidden, "%v", err)
	}
	if err != nil {
		return nil, err
	}
	a := s.cache.get(snap, req)
	return a, a.err
}

// DecodeRequest reads a JSON DiscoveryRequest (protojson: canonical names or the proto
// field names, unknown fields ignored, as Envoy's own JSON reader does) for the endpoint of
// typeURL; for the endpoint that serves any type (typeURL ""), the request's type_url says
// which and is required. A type_url that disagrees with the endpoint is an error.
func DecodeRequest(body io.Reader, typeURL string) (*discovery.DiscoveryRequest, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, fail(http.StatusRequestEntityTooLarge, "the request is larger than http.rest.max_request_bytes (%d bytes)", tooLarge.Limit)
		}
		return nil, fail(http.StatusBadRequest, "reading the request: %v", err)
	}
	var dr discovery.DiscoveryRequest
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &dr); err != nil {
		return nil, fail(http.StatusBadRequest, "the body is not a JSON envoy.service.discovery.v3.DiscoveryRequest: %v", err)
	}
	switch {
	case typeURL == "" && dr.GetTypeUrl() == "":
		return nil, fail(http.StatusBadRequest, "%s needs the request's type_url", xds.RESTResourcesPath)
	case typeURL != "" && dr.GetTypeUrl() != "" && dr.GetTypeUrl() != typeURL:
		return nil, fail(http.StatusBadRequest, "type_url %q does not match this endpoint, which serves %s", dr.GetTypeUrl(), typeURL)
	case typeURL != "":
		dr.TypeUrl = typeURL
	}
	return &dr, nil
}

// writeJSON writes a JSON body; an error's is {"error": QUOTED}.
func writeJSON(w http.ResponseWriter, code int, body []byte, isError bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if isError {
		io.WriteString(w, `{"error": `)
		w.Write(body)
		io.WriteString(w, "}\n")
		return
	}
	w.Write(body)
}

// answer is one encoded answer: its content version and JSON body, encoded once.
type answer struct {
	once    sync.Once
	version string
	body    []byte
	err     error
}

type answerKey struct {
	key string
	rev uint64
}

// answers keeps the most recent encoded answers, bounded in count and bytes: pollers woken by
// one change share one encoding, and an unchanged collection's answer is not encoded again.
type answers struct {
	mu       sync.Mutex
	entries  map[answerKey]*list.Element // of *cached
	fifo     list.List
	maxCount int
	maxBytes int
	bytes    int
	encodes  atomic.Uint64
}

type cached struct {
	key  answerKey
	a    answer
	size int // counted in answers.bytes once encoded, while cached; under answers.mu
}

func (c *answers) init(maxCount, maxBytes int) {
	c.entries = map[answerKey]*list.Element{}
	c.maxCount, c.maxBytes = maxCount, maxBytes
}

func (c *answers) get(snap *source.Snapshot, req *source.Request) *answer {
	k := answerKey{snap.Key(), snap.Revision()}
	c.mu.Lock()
	el, ok := c.entries[k]
	if !ok {
		el = c.fifo.PushBack(&cached{key: k})
		c.entries[k] = el
		c.trim()
	}
	e := el.Value.(*cached)
	c.mu.Unlock()
	e.a.once.Do(func() {
		c.encodes.Add(1)
		msg := snap.Message()
		e.a.version = msg.Version
		e.a.body, e.a.err = xds.EncodeJSON(msg, snap.Form())
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.entries[k] == el { // not evicted while it was being encoded
			e.size = len(e.a.body)
			c.bytes += e.size
			c.trim()
		}
	})
	return &e.a
}

func (c *answers) trim() {
	for c.fifo.Len() > 1 && (c.fifo.Len() > c.maxCount || c.bytes > c.maxBytes) {
		oldest := c.fifo.Front()
		e := oldest.Value.(*cached)
		c.fifo.Remove(oldest)
		delete(c.entries, e.key)
		c.bytes -= e.size
	}
}
