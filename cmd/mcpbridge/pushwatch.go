package main

import (
	"context"
	"fmt"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
)

// push --watch: one stream kept open, each collection pushed again when its files change.

// follow runs the file source and pushes every change until SIGINT (exit 0). It starts only
// from files without a fault, as push without --watch does.
func (p *pusher) follow(parent context.Context, client mcp.ResourceSinkClient) error {
	ctx, cancel := context.WithCancel(parent)
	srcErr, srcDone := make(chan error, 1), make(chan struct{})
	go func() { srcErr <- p.files.source.Run(ctx); close(srcDone) }()
	defer func() { cancel(); <-srcDone }()
	select {
	case <-p.files.source.Ready():
	case err := <-srcErr:
		if err == nil { // the source ends without error only with ctx: SIGINT
			return nil
		}
		return fmt.Errorf("push: %w", err)
	}
	if faults := p.files.source.Faults(); len(faults) > 0 {
		return faultsRefused(len(faults))
	}
	if err := p.checkEmpty(); err != nil {
		return err
	}
	changed := p.files.store.Watch()
	defer changed.Close()
	reqs, err := p.connect(ctx, cancel, client)
	if err != nil {
		if parent.Err() != nil {
			return p.interruptedWatch()
		}
		return p.abort(ctx, reqs, err)
	}
	for {
		select {
		case r := <-reqs:
			if r.err != nil {
				if ctx.Err() != nil { // the receiver's Canceled, not the sink's doing: SIGINT
					return p.interruptedWatch()
				}
				return p.streamEnded(r.err)
			}
			if err := p.handle(r.req); err != nil {
				return p.abort(ctx, reqs, err)
			}
		case <-changed.C():
			if err := p.pushChanged(); err != nil {
				return p.abort(ctx, reqs, err)
			}
		case err := <-srcErr:
			if err != nil {
				return fmt.Errorf("push: %w%s", err, p.partial())
			}
			return p.interruptedWatch() // nil: the source ended with ctx
		case <-ctx.Done():
			return p.interruptedWatch()
		}
	}
}

// interruptedWatch is push --watch's end at SIGINT: exit 0, saying on stderr which collections
// a split push left part applied.
func (p *pusher) interruptedWatch() error {
	if note := p.partial(); note != "" {
		fmt.Fprintf(p.stderr, "push: interrupted%s\n", note)
	}
	return nil
}

// pushChanged pushes every asked collection whose files changed since its last push, and those
// not pushed while the files held nothing.
func (p *pusher) pushChanged() error {
	v := p.files.store.View()
	if viewResources(v) == 0 && !p.allowEmpty {
		// Files emptied while followed (a directory cleared, a checkout in progress): the
		// producer's state stays as last pushed.
		p.noteEmpty()
		return nil
	}
	p.emptyNoted = false
	for _, name := range p.order {
		if p.emptied[name] || v.Collection(p.asked[name]).Revision != p.pushed[name] {
			if err := p.repush(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// noteEmpty says, once until the files hold something again, that they are not pushed.
func (p *pusher) noteEmpty() {
	if !p.emptyNoted {
		p.emptyNoted = true
		fmt.Fprintln(p.stderr, "push: the files hold no resource now; not pushed, the last pushed state stays (--allow-empty pushes it, removing everything this producer holds)")
	}
}

// repush pushes a collection again: it changed while followed, or the sink asked for it again
// while it was being pushed. One grown over the limit is reported and not pushed: its last
// pushed state stays, as a faulty file's does.
func (p *pusher) repush(name string) error {
	pl, err := p.planNext(name)
	if err != nil || pl == nil {
		return err
	}
	if pl.refused != nil {
		p.pushed[pl.name] = pl.revision // reported once per change
		fmt.Fprintf(p.stderr, "push: %v; not pushed, its last pushed state stays: %s\n", pl.refused, raiseLimit)
		return nil
	}
	return p.deliver(pl)
}
