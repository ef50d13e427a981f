package sink

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Protocol names of the sink side, as metrics and the status page show them.
const (
	ProtocolResourceSink = "mcp-resource-sink"
	ProtocolUpstream     = "mcp-upstream"
)

// ProducerInfo is one producer of the ResourceSink service, connected or not, as the status
// page and /debug/producers show it.
type ProducerInfo struct {
	Owner string `json:"owner"`
	// Peer is the address of its latest stream.
	Peer      string `json:"peer"`
	Streams   int    `json:"streams"`
	Connected bool   `json:"connected"`
	// Since is when it connected, or when its last stream ended.
	Since    time.Time `json:"since"`
	LastACK  *Answer   `json:"last_ack,omitempty"`
	LastNACK *Answer   `json:"last_nack,omitempty"`
}

// Answer is an ACK or NACK the bridge sent a producer.
type Answer struct {
	Collection string    `json:"collection"`
	Nonce      string    `json:"nonce"`
	Message    string    `json:"message,omitempty"`
	Time       time.Time `json:"time"`
}

// maxDisconnected bounds what is remembered of producers that went away: their resources may
// stay served, but a stream of short-lived producers must not grow memory without end.
const maxDisconnected = 256

// producers records who pushes to the sink, for operators. It is off every store path.
type producers struct {
	mu     sync.Mutex
	byName map[string]*ProducerInfo
}

func (p *producers) open(owner, peer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName == nil {
		p.byName = map[string]*ProducerInfo{}
	}
	pi := p.byName[owner]
	if pi == nil {
		pi = &ProducerInfo{Owner: owner}
		p.byName[owner] = pi
	}
	if pi.Streams == 0 {
		pi.Since = time.Now()
	}
	pi.Streams++
	pi.Connected, pi.Peer = true, peer
}

func (p *producers) close(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.byName[owner]
	if pi == nil {
		return
	}
	if pi.Streams--; pi.Streams > 0 {
		return
	}
	pi.Connected, pi.Since = false, time.Now()
	p.forgetOldest()
}

// forgetOldest drops the disconnected producers beyond maxDisconnected, oldest first.
func (p *producers) forgetOldest() {
	var gone []*ProducerInfo
	for _, pi := range p.byName {
		if !pi.Connected {
			gone = append(gone, pi)
		}
	}
	if len(gone) <= maxDisconnected {
		return
	}
	slices.SortFunc(gone, func(a, b *ProducerInfo) int { return a.Since.Compare(b.Since) })
	for _, pi := range gone[:len(gone)-maxDisconnected] {
		delete(p.byName, pi.Owner)
	}
}

func (p *producers) answered(owner string, o outcome, nonce string) {
	a := &Answer{Collection: o.reply.GetCollection(), Nonce: nonce, Time: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := p.byName[owner]
	if pi == nil {
		return
	}
	if o.acked() {
		pi.LastACK = a
		return
	}
	a.Message = o.reply.GetErrorDetail().GetMessage()
	pi.LastNACK = a
}

func (p *producers) list() []ProducerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ProducerInfo, 0, len(p.byName))
	for _, pi := range p.byName {
		out = append(out, *pi)
	}
	slices.SortFunc(out, func(a, b ProducerInfo) int { return cmp.Compare(a.Owner, b.Owner) })
	return out
}

// Producers returns every producer that has pushed to this sink since it started (those long
// gone excepted), connected ones and disconnected ones whose resources may still be served.
func (s *Server) Producers() []ProducerInfo { return s.producers.list() }
