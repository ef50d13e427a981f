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
	Identity      string             `json:"identity,omitempty"` // SPIFFE ID, with authz rules
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
	// View is the part of a wildcard type this client is served ("sidecar", "router"); empty
	// for the whole type.
	View string `json:"view,omitempty"`
	// Access is the namespaces this client may see of the type, when not all of them
	// (authz rules, or its node's narrowing); Denied says why it may see none.
	Access string `json:"access,omitempty"`
	Denied string `json:"denied,omitempty"`
	// Names are the explicitly subscribed names (none for wildcard).
	Names []string `json:"names,omitempty"`
	// SentVersion is the version of the last response sent; Pending its nonce while unacknowledged.
	SentVersion string `json:"sent_version"`
	// SentRevision is the store revision of the collection the client has been sent, or
	// brought up to when nothing it asked for changed. Once the latest response is ACKed,
	// Acked is set and AckedRevision is SentRevision: the revision the client holds. While a
	// response is in flight, after a NACK, or while a deletion is held back (make before
	// break), Acked is false and AckedRevision 0. Test kits (bridgetest) wait on them.
	SentRevision  uint64  `json:"sent_revision"`
	AckedRevision uint64  `json:"acked_revision"`
	Acked         bool    `json:"acked"`
	Pending       string  `json:"pending_nonce,omitempty"`
	LastACK       *record `json:"last_ack,omitempty"`
	LastNACK      *record `json:"last_nack,omitempty"`
	// TTL is the TTL the client is sent with each resource and renewed by heartbeats (empty:
	// none); Unrenewed are the owners (disconnected producers, or the translation while
	// one of its inputs' producers is) whose resources its last heartbeat left to expire.
	TTL       string   `json:"ttl,omitempty"`
	Unrenewed []string `json:"unrenewed_owners,omitempty"`
}

// Client returns one connected stream, by ID.
func (e *Engine) Client(id uint64) (ClientInfo, bool) {
	v, ok := e.streams.Load(id)
	if !ok {
		return ClientInfo{}, false
	}
	return v.(*stream).info(), true
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
	ci := ClientInfo{ID: s.id, Protocol: s.protocol, Peer: s.peer, Node: s.m.nodeID(), Connected: s.connected, Identity: s.identity}
	for _, sub := range s.m.ordered() {
		si := SubscriptionInfo{
			Type: sub.key, Collection: sub.Collection, Mode: sub.Mode.String(), Wildcard: sub.want.wildcard, View: sub.want.view,
			Names: sub.want.names.sorted(), Pending: sub.ex.pending, LastACK: sub.ex.lastAck, LastNACK: sub.ex.lastNack,
		}
		if sub.ttl() > 0 {
			si.TTL, si.Unrenewed = sub.ttl().String(), slices.Clone(sub.beat.dead)
		}
		if sub.vis != nil {
			si.Access = sub.vis.id
			if sub.vis.denial != nil {
				si.Access, si.Denied = "", sub.vis.denial.Message
			}
		}
		if sub.ex.phase != phaseUnsent {
			si.SentVersion, si.SentRevision = sub.ex.version, sub.ex.rev
			// Held-back deletions are owed: the client does not hold the revision until they
			// go. So is the rest of a response sent in parts.
			if sub.ex.phase == phaseIdle && !sub.ex.nacked && len(sub.owed.held) == 0 && len(sub.owed.parts) == 0 {
				si.AckedRevision, si.Acked = sub.ex.rev, true
			}
		}
		ci.Subscriptions = append(ci.Subscriptions, si)
	}
	return ci
}
