package metrics

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type peerKey struct {
	direction Direction
	address   string
}

// Peer is the connection state of one peer the bridge dials: the mcpbridge_peer_connected
// gauge, the reconnection counter, and what the status page shows. Its methods are safe on nil.
type Peer struct {
	direction   Direction
	address     string
	gauge       prometheus.Gauge
	reconnects  prometheus.Counter
	mu          sync.Mutex
	connected   bool
	everUp      bool
	since       time.Time // of the last change of state
	lastErr     string
	reconnectsN uint64
}

// PeerInfo is a peer's state as the status page and /debug/producers show it.
type PeerInfo struct {
	Direction     Direction `json:"direction"`
	Address       string    `json:"address"`
	Connected     bool      `json:"connected"`
	Since         time.Time `json:"since"`
	LastError     string    `json:"last_error,omitempty"`
	Reconnections uint64    `json:"reconnections"`
}

// Peer returns the state of a dialled peer, created (disconnected) on first use.
func (m *Metrics) Peer(d Direction, address string) *Peer {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := peerKey{d, address}
	if p := m.peers[k]; p != nil {
		return p
	}
	p := &Peer{
		direction: d, address: address, since: time.Now(),
		gauge:      m.peerConnected.WithLabelValues(string(d), address),
		reconnects: m.reconnections.WithLabelValues(string(d), address),
	}
	p.gauge.Set(0)
	m.peers[k] = p
	return p
}

// Up records that a stream to the peer is open; after an earlier one, it is a reconnection.
func (p *Peer) Up() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.everUp {
		p.reconnectsN++
		p.reconnects.Inc()
	}
	p.everUp, p.connected, p.since, p.lastErr = true, true, time.Now(), ""
	p.gauge.Set(1)
}

// Down records that the stream ended, or that an attempt to open one failed, with err.
func (p *Peer) Down(err error) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.connected {
		p.since = time.Now()
	}
	p.connected = false
	if err != nil {
		p.lastErr = err.Error()
	}
	p.gauge.Set(0)
}

func (p *Peer) info() PeerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PeerInfo{Direction: p.direction, Address: p.address, Connected: p.connected, Since: p.since,
		LastError: p.lastErr, Reconnections: p.reconnectsN}
}

// Peers returns every dialled peer, upstreams first, then by address.
func (m *Metrics) Peers() []PeerInfo {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	peers := make([]*Peer, 0, len(m.peers))
	for _, p := range m.peers {
		peers = append(peers, p)
	}
	m.mu.Unlock()
	out := make([]PeerInfo, 0, len(peers))
	for _, p := range peers {
		out = append(out, p.info())
	}
	slices.SortFunc(out, func(a, b PeerInfo) int {
		return cmp.Or(cmp.Compare(b.Direction, a.Direction), cmp.Compare(a.Address, b.Address))
	})
	return out
}
