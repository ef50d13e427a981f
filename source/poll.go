package source

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// Snapshot is the state of the world one request asks for, exactly as the first response of a
// state-of-the-world stream would carry it (the same machine decides it: names, wildcard, the
// node's view of the type, the peer's visibility), for the protocols that ask once rather
// than stream: REST polling and the file export. It is read lazily: Key and Revision cost
// nothing, so that of many pollers woken by one change only the one that encodes the answer
// reads the collection.
type Snapshot struct {
	key      string
	revision uint64
	form     wire.Form
	p        *pending
}

// Key identifies what the answer holds: every request with the same Key at the same Revision
// gets the same answer (type, form, names, node view and the peer's visibility, never who
// asked). Callers cache encodings under (Key, Revision).
func (s *Snapshot) Key() string { return s.key }

// Form is how the answer's resources are written (its type's Form).
func (s *Snapshot) Form() wire.Form { return s.form }

// Revision is the store revision of the collection the answer was read at.
func (s *Snapshot) Revision() uint64 { return s.revision }

// Message reads the answer. Its Version is ContentVersion of its content, not the revision:
// a poller woken by a change outside what it asked for sees the same version and goes on
// waiting.
func (s *Snapshot) Message() *wire.Message {
	s.p.materialize()
	s.p.msg.Version = ContentVersion(&s.p.msg)
	return &s.p.msg
}

// ContentVersion is a version that names a response's content: an xxHash of the names and
// versions of its resources and of its errors. Equal content, equal version, whatever the
// store revision.
func ContentVersion(m *wire.Message) string {
	h := xxhash.New()
	for _, e := range m.Resources {
		h.WriteString(e.Name)
		h.Write([]byte{0})
		h.WriteString(e.Version)
		h.Write([]byte{0})
	}
	for _, e := range m.Errors {
		h.WriteString(e.Name)
		h.Write([]byte{1})
		h.WriteString(strconv.Itoa(int(e.Code)))
		h.WriteString(e.Message)
		h.Write([]byte{0})
	}
	var b [8]byte
	return hex.EncodeToString(h.Sum(b[:0]))
}

// ErrRefused wraps every authorization refusal of Grant and Snapshot: the caller answers it
// as its protocol says (REST: 403) with the error's text, which names what was refused.
var ErrRefused = errors.New("refused")

// Grant is the rights of a peer known by the identity of its verified client certificate
// (authz.TLSIdentity), for protocols that are not gRPC streams: nil without rules (everything
// allowed); an error wrapping ErrRefused, counted and logged, when no rule matches it.
func (e *Engine) Grant(protocol, peer, identity string) (*authz.Grant, error) {
	if e.authz == nil {
		return nil, nil
	}
	g, err := e.authz.Grant(identity)
	if err != nil {
		e.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedNoRule)
		e.authzLog.Log(e.log, slog.LevelWarn, "consumer refused", "protocol", protocol, "peer", peer, "error", err)
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return g, nil
}

// Snapshot answers one state-of-the-world request from the view v, for a peer with grant
// (from Grant; nil sees everything), its type served as typ. The request is checked as a
// stream's first request would be: its node against the peer's identity, its type against
// the peer's rights; a type the peer may not read is refused whole (ErrRefused), where a
// stream would serve it empty with a resource error, because a poller has no stream to keep
// going. Endpoints and routes are answered whole too: a poll has no earlier response to add
// to. The same machine as a stream's decides it.
func (e *Engine) Snapshot(v *store.View, grant *authz.Grant, req *Request, typ Type, protocol string) (*Snapshot, error) {
	typ.Mode, typ.PartialStateOfTheWorld = StateOfTheWorld, false
	asked := *req
	asked.Nonce, asked.ErrorDetail, asked.Subscribe, asked.Unsubscribe, asked.InitialVersions = "", nil, nil, nil, nil
	m := e.machineFor(protocol, func(*Request, *Node) Type { return typ }, grant)
	fx := m.handle(event{req: &asked, view: v})
	if r := fx.refuse; r != nil {
		if r.kind == refusedNode {
			e.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedNodeIdentity)
			e.authzLog.Log(e.log, slog.LevelWarn, "consumer refused", "protocol", protocol, "error", r.msg)
			return nil, fmt.Errorf("%w: %s", ErrRefused, r.msg)
		}
		return nil, status.Error(r.code, r.msg)
	}
	sub := fx.sub
	if sub.vis != nil && sub.vis.denial != nil {
		e.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedCollection)
		e.authzLog.Log(e.log, slog.LevelWarn, "consumer refused", "protocol", protocol, "type", req.Key, "node", m.nodeID(), "error", sub.vis.denial.Message)
		return nil, fmt.Errorf("%w: %s", ErrRefused, sub.vis.denial.Message)
	}
	if !typ.Known {
		e.unknownTypes.Log(e.log, slog.LevelInfo, "request for an unknown type, answered as empty", "protocol", protocol, "type", req.Key, "node", m.nodeID())
	}
	fx = m.handle(event{watched: fx.watch, view: v})
	if len(fx.sends) != 1 {
		return nil, fmt.Errorf("internal: a first request made %d responses", len(fx.sends))
	}
	p := fx.sends[0].p
	return &Snapshot{key: snapshotKey(sub), revision: p.rev, form: typ.Form, p: p}, nil
}

// snapshotKey names what a first response of sub holds: of the type asked for, read from the
// collection it is served from (a proxyless client's clusters, a namespace's view).
func snapshotKey(sub *subscription) string {
	key := sub.key + "\x00" + sub.Collection + "\x00" + strconv.Itoa(int(sub.Form)) + "\x00" + sub.want.view + "\x00" + sub.accessID()
	if sub.want.wildcard {
		key += "\x00*"
	}
	if sub.want.count() > 0 {
		fp := sub.want.fingerprint()
		key += "\x00" + hex.EncodeToString(fp[:])
	}
	return key
}

// Polled counts a request asked once (a REST poll) in the request metrics, as a stream's
// request is, and records the NACK it carries, if any: a REST client that refused the last
// answer says so in error_detail. It is logged at most once a second; the answer it gets is
// the current state all the same (a poller keeps no earlier response to hold back).
func (e *Engine) Polled(req *Request, typ Type, protocol, peer string) {
	label := e.collectionLabel(typ)
	e.metrics.Collection(metrics.RoleSource, label).Request()
	if req.ErrorDetail != nil {
		var node string
		if req.Node != nil {
			node = req.Node.ID
		}
		e.metrics.NACK(metrics.RoleSource, label, codes.Code(req.ErrorDetail.GetCode()))
		e.nackLog.Log(e.log, slog.LevelWarn, "client rejected a response (NACK)", "protocol", protocol, "peer", peer,
			"type", req.Key, "node", node, "error", req.ErrorDetail.GetMessage())
	}
}
