package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// How push reports a push that did not complete: the sink's status from Recv, a timeout, an
// interrupt, and what a split under way had applied.

// failed is the error of a push that ended at err, or at the end of its context: the timeout
// or SIGINT, which it names.
func (p *pusher) failed(ctx context.Context, err error) error {
	switch {
	case p.deadline.hasExpired():
		return p.timedOut()
	case ctx.Err() != nil || errors.Is(err, errCtxEnded):
		return p.interrupted()
	}
	return err
}

func (p *pusher) interrupted() error {
	switch {
	case p.stream == nil:
		return fmt.Errorf("push: interrupted before the stream to %s opened; nothing was pushed", p.addr)
	case p.nonce == 0:
		return fmt.Errorf("push: interrupted before %s asked for every collection; nothing was pushed", p.addr)
	}
	return fmt.Errorf("push: interrupted before every collection was answered%s", p.partial())
}

func (p *pusher) timedOut() error {
	if p.stream == nil {
		return fmt.Errorf("push: no stream to %s within --timeout %s", p.addr, p.timeout)
	}
	if len(p.asked) == 0 {
		return fmt.Errorf("push: %s asked for no collection within --timeout %s", p.addr, p.timeout)
	}
	if p.nonce == 0 {
		return fmt.Errorf("push: %s was still asking for collections when --timeout %s ended; nothing was pushed", p.addr, p.timeout)
	}
	var waiting []string
	for _, s := range p.inflight {
		waiting = append(waiting, s.describe())
	}
	slices.Sort(waiting)
	return fmt.Errorf("push: no answer from %s within --timeout %s of its last message, for %v%s", p.addr, p.timeout, waiting, p.partial())
}

// partial names the collections whose split push stopped part way, and how far each went:
// the sink serves its previous state of them with part of the new one applied over it.
func (p *pusher) partial() string {
	var out []string
	for _, name := range p.order {
		d := p.busy[name]
		if d == nil || len(d.plan.parts) == 1 {
			continue
		}
		if note := d.partial(); note != "" {
			out = append(out, name+note)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; left part applied by a split push: " + strings.Join(out, "; ")
}

// abort ends a push at err, which it cannot go on from: nothing more is sent, the answers to
// what was sent are awaited (each within --timeout) and printed, and the error names the
// collections whose split push stopped part way.
func (p *pusher) abort(ctx context.Context, reqs <-chan recvd, err error) error {
	p.stopped = true
	if reqs != nil && !p.ended && len(p.inflight) > 0 && ctx.Err() == nil {
		timer := time.NewTimer(p.timeout)
		defer timer.Stop()
	drain:
		for len(p.inflight) > 0 {
			select {
			case r := <-reqs:
				if r.err != nil {
					break drain
				}
				p.deadline.heard()
				timer.Reset(p.timeout)
				if nonce := r.req.GetResponseNonce(); nonce != "" {
					_ = p.answered(nonce, r.req) // sends nothing: stopped
				}
			case <-timer.C:
				break drain
			case <-ctx.Done():
				break drain
			}
		}
	}
	return fmt.Errorf("%w%s", err, p.partial())
}

// overLimitRE is gRPC's error for a message over a receive limit: "grpc: received message
// larger than max (SIZE vs. LIMIT)", from either end of the stream.
var overLimitRE = regexp.MustCompile(`larger than max \((\d+) vs\. (\d+)\)`)

// streamEnded is the error of a stream that ended. It names the oldest message the sink had
// not answered: the sink answers in order, so that is the one it was reading when it ended the
// stream (gRPC ends it with ResourceExhausted at a message over the sink's receive limit), not
// the one push was sending when it noticed (whose Send says only io.EOF). A ResourceExhausted
// reads the same whichever end's receive limit was exceeded: the sizes it gives tell which.
func (p *pusher) streamEnded(err error) error {
	why, overLimit := "it gave no reason (EOF)", false
	var size, limit int
	if !errors.Is(err, io.EOF) {
		s := status.Convert(err)
		why = fmt.Sprintf("%s (%s)", s.Message(), s.Code())
		overLimit = s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "larger than max")
		if m := overLimitRE.FindStringSubmatch(s.Message()); overLimit && m != nil {
			size, _ = strconv.Atoi(m[1])
			limit, _ = strconv.Atoi(m[2])
		}
	}
	if size > 0 {
		if refused, ok := p.oldestOfSize(size); ok { // the sink's limit: the size is of a message push sent
			return fmt.Errorf("push: %s ended the stream before answering %s: %s: the sink's receive limit, %d bytes, is below --max-msg-size %d: lower --max-msg-size to it, or raise the sink's (grpc.max_recv_msg_size on mcpbridge)%s",
				p.addr, refused.describe(), why, limit, p.maxMsg, p.partial())
		}
		if limit == p.maxRecv { // push's own limit: a message of the sink's
			return fmt.Errorf("push: a message from %s of %d bytes is over push's receive limit, --max-recv-msg-size %d: %s: raise --max-recv-msg-size%s",
				p.addr, size, p.maxRecv, why, p.partial())
		}
	}
	var msg string
	oldest, ok := p.oldest()
	switch {
	case overLimit: // a receive limit, but whose is not known: say both
		msg = fmt.Sprintf("push: the stream to %s ended: %s; if the sink's receive limit, it is below --max-msg-size %d: lower --max-msg-size to the sink's, or raise the sink's (grpc.max_recv_msg_size on mcpbridge); if push's, raise --max-recv-msg-size %d", p.addr, why, p.maxMsg, p.maxRecv)
		if ok {
			msg = fmt.Sprintf("push: the stream to %s ended before %s was answered: %s; if the sink's receive limit, it is below --max-msg-size %d: lower --max-msg-size to the sink's, or raise the sink's (grpc.max_recv_msg_size on mcpbridge); if push's, raise --max-recv-msg-size %d", p.addr, oldest.describe(), why, p.maxMsg, p.maxRecv)
		}
	case ok:
		msg = fmt.Sprintf("push: %s ended the stream before answering %s: %s", p.addr, oldest.describe(), why)
	default:
		msg = fmt.Sprintf("push: %s ended the stream: %s", p.addr, why)
	}
	return errors.New(msg + p.partial())
}

// oldestOfSize is the first message sent, of those not answered, of size bytes.
func (p *pusher) oldestOfSize(size int) (sent, bool) {
	var first sent
	for _, s := range p.inflight {
		if s.size == size && (first.d == nil || s.seq < first.seq) {
			first = s
		}
	}
	return first, first.d != nil
}

// oldest is the first message sent of those not answered.
func (p *pusher) oldest() (sent, bool) {
	var first sent
	for _, s := range p.inflight {
		if first.d == nil || s.seq < first.seq {
			first = s
		}
	}
	return first, first.d != nil
}
