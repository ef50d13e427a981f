package source

import (
	"time"

	"github.com/mcpbridge/mcpbridge/store"
)

// Tests that drive a machine directly (machine_test.go) send a request
// together with the type it names: the machine asks for a type only when a subscription
// starts, and gets the one the test last sent for that key.

// typedRequest is a request and the type it names.
type typedRequest struct {
	Request
	Type
	// splitAt is what the engine gives the machine for splittable types (0: never split).
	splitAt int
}

// directMachine is a machine driven by a test, with its stream's part played here: it
// watches whatever the machine asks, at once.
type directMachine struct {
	m     *machine
	types map[string]Type
}

func newDirectMachine(protocol string, a access) *directMachine {
	d := &directMachine{types: map[string]Type{}}
	d.m = newMachine(machineConfig{protocol: protocol, types: func(req *Request, _ *Node) Type { return d.types[req.Key] }}, a)
	return d
}

// handle gives the machine an event and, when it asks to watch a collection, the event saying
// it is watched (with the same view, as the stream would read one), and returns both effects'
// sends in order, and the first effects for what the request did.
func (d *directMachine) handle(ev event) (effects, []outgoing) {
	fx := d.m.handle(ev)
	sends := fx.sends
	if fx.watch != "" && fx.refuse == nil {
		more := d.m.handle(event{watched: fx.watch, view: ev.view, now: ev.now})
		sends = append(sends, more.sends...)
		fx.expiring = append(fx.expiring, more.expiring...)
		if more.refuse != nil {
			fx.refuse = more.refuse
		}
		fx.beatAt = more.beatAt
	}
	return fx, sends
}

// send hands the machine a typed request.
func (d *directMachine) send(tr *typedRequest, v *store.View, now time.Time) (effects, []outgoing) {
	if _, ok := d.m.subs[tr.Key]; !ok || tr.Restart {
		d.types[tr.Key] = tr.Type
		d.m.splitAt = tr.splitAt
	}
	req := tr.Request
	return d.handle(event{req: &req, view: v, now: now})
}

// flush is an event with nothing new: what is due on this view.
func (d *directMachine) flush(v *store.View, now time.Time) []outgoing {
	_, sends := d.handle(event{view: v, now: now})
	return sends
}
