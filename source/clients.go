package source

import (
	"cmp"
	"slices"
	"time"
)

// ClientInfo is one connected stream as /debug/clients shows it.
type ClientInfo struct {
	ID            uint64             `json:"id"`
	Protocol      string             `json:"protocol"`
	Peer          string             `json:"peer"`
	Node          string             `json:"node"`
	Connected     time.Time          `json:"connected"`
	Subscriptions []SubscriptionInfo `json:"subscriptions"`
}

// SubscriptionInfo is one type subscribed on a stream.
type SubscriptionInfo struct {
	Type       string `json:"type"`
	Collection string `json:"collection"`
	Mode       string `json:"mode"`
	Wildcard   bool   `json:"wildcard"`
	// Names are the explicitly subscribed names (none for wildcard).
	Names []string `json:"names,omitempty"`
	// SentVersion is the version of the last response sent; Pending its nonce while unacknowledged.
	SentVersion string  `json:"sent_version"`
	Pending     string  `json:"pending_nonce,omitempty"`
	LastACK     *record `json:"last_ack,omitempty"`
	LastNACK    *record `json:"last_nack,omitempty"`
}

// Clients returns every connected stream, ordered by ID.
func (e *Engine) Clients() []ClientInfo {
	var out []ClientInfo
	e.streams.Range(func(_, v any) bool {
		out = append(out, v.(*stream).info())
		return true
	})
	slices.SortFunc(out, func(a, b ClientInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (s *stream) info() ClientInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	ci := ClientInfo{ID: s.id, Protocol: s.protocol, Peer: s.peer, Node: s.node, Connected: s.connected}
	for _, sub := range s.order {
		si := SubscriptionInfo{
			Type: sub.key, Collection: sub.collection, Mode: sub.mode.String(), Wildcard: sub.wildcard,
			Names: sortedNames(sub.names), Pending: sub.pendingNonce, LastACK: sub.lastAck, LastNACK: sub.lastNack,
		}
		if sub.started {
			si.SentVersion = sub.sentVer
		}
		ci.Subscriptions = append(ci.Subscriptions, si)
	}
	return ci
}
