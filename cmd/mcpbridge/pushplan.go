package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
	"sigs.k8s.io/yaml"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/store"
)

// How push plans what it sends: each collection's messages within --max-msg-size, split
// into incremental messages where the sink asks incremental, and --dry-run's report.

// raiseLimit is the remedy for a push over the limit.
const raiseLimit = "raise the sink's receive limit (grpc.max_recv_msg_size on mcpbridge) and --max-msg-size with it"

// nonceReserve stands for a nonce when a message is sized before its nonce is chosen: push's
// nonces are decimal counters, never longer.
const nonceReserve = "18446744073709551615"

// plan is how one collection is pushed.
type plan struct {
	name        string // as the sink named it
	canonical   string
	incremental bool // the sink asked for incremental updates
	revision    uint64
	filesEmpty  bool     // the files held no resource at all, in any collection, when planned
	names       []string // the files' resources, sorted
	// removed are what the sink listed as held from this producer (and push sent since) that
	// the files do not hold; known only when incremental.
	removed  []string
	fullSize int               // the size of the full state as one message
	parts    []*mcp.Resources  // the messages to send, in order (their nonces set as sent)
	sizes    []int             // each part's size, with the longest nonce
	refused  error             // why it cannot be sent; nil when it can
	counts   []planMessageSize // per part: resources and removals
}

type planMessageSize struct{ resources, removed int }

// planAsked plans every collection asked for, in the sink's order.
func (p *pusher) planAsked() ([]*plan, error) {
	plans := make([]*plan, 0, len(p.order))
	for _, name := range p.order {
		pl, err := p.plan(name)
		if err != nil {
			return nil, err
		}
		plans = append(plans, pl)
	}
	return plans, nil
}

// plan lays out the push of the files' full state of one collection.
func (p *pusher) plan(name string) (*plan, error) {
	pl := &plan{name: name, canonical: p.asked[name], incremental: p.incremental[name]}
	v := p.files.store.View() // one view: the emptiness is that of the state planned
	rev, entries := v.Snapshot(pl.canonical)
	pl.revision, pl.filesEmpty = rev, viewResources(v) == 0
	rs := make([]*mcpapi.Resource, len(entries))
	for i, e := range entries {
		r, err := e.Decode()
		if err != nil {
			return nil, fmt.Errorf("push: %s %s: %w", pl.canonical, e.Name, err) // not reached: the store's own encoding
		}
		rs[i] = r
		pl.names = append(pl.names, e.Name)
	}
	if pl.incremental {
		files := pl.nameSet()
		for n := range p.held[name] {
			if !files[n] {
				pl.removed = append(pl.removed, n)
			}
		}
		slices.Sort(pl.removed)
	}
	pl.layout(rs, p.maxMsg)
	return pl, nil
}

// viewResources counts the resources of a view of the files, in every collection.
func viewResources(v *store.View) int {
	n := 0
	for _, c := range v.Collections() {
		n += c.Count
	}
	return n
}

func (pl *plan) nameSet() map[string]bool {
	set := make(map[string]bool, len(pl.names))
	for _, n := range pl.names {
		set[n] = true
	}
	return set
}

// layout makes the messages: the full state as one when it fits, which replaces what the sink
// held in one step; else, where the sink asked for incremental updates, upserts then removals
// in as many messages as needed. A full state cannot be split: each full-state message
// replaces the one before ("This replaces any previously delivered resources", mcp.proto).
func (pl *plan) layout(rs []*mcpapi.Resource, limit int) {
	version := strconv.FormatUint(pl.revision, 10)
	header := func(incremental bool) *mcp.Resources {
		return &mcp.Resources{Collection: pl.name, SystemVersionInfo: version, Incremental: incremental}
	}
	sizes := make([]int, len(rs))
	pl.fullSize = headerSize(header(false))
	for i, r := range rs {
		sizes[i] = repeatedFieldSize(proto.Size(r))
		pl.fullSize += sizes[i]
	}
	if pl.fullSize <= limit || !pl.incremental {
		full := header(false)
		full.Resources = rs
		pl.parts, pl.sizes, pl.counts = []*mcp.Resources{full}, []int{pl.fullSize}, []planMessageSize{{resources: len(rs)}}
		if pl.fullSize > limit {
			pl.refused = fmt.Errorf("%s: its full state (%d resource%s) is one message of %d bytes, over --max-msg-size %d, and the sink asked for full state, which cannot be split (on mcpbridge, sink.incremental: true asks for incremental updates)",
				pl.name, len(rs), plural(len(rs)), pl.fullSize, limit)
		}
		return
	}
	pl.split(rs, sizes, limit, func() *mcp.Resources { return header(true) })
}

// split packs the resources, then the removals, into incremental messages of at most limit
// bytes each. Upserts go first so that nothing the files hold is ever missing at the sink; the
// removals come last, so that the end is the files' full state. A resource or a removal too
// large for a message of its own gets one anyway, over the limit, and refuses the plan.
func (pl *plan) split(rs []*mcpapi.Resource, sizes []int, limit int, header func() *mcp.Resources) {
	base := headerSize(header())
	cur, size := header(), base
	flush := func() {
		pl.parts, pl.sizes = append(pl.parts, cur), append(pl.sizes, size)
		pl.counts = append(pl.counts, planMessageSize{len(cur.Resources), len(cur.RemovedResources)})
		cur, size = header(), base
	}
	for i, r := range rs {
		if size+sizes[i] > limit && size > base {
			flush()
		}
		if base+sizes[i] > limit && pl.refused == nil {
			pl.refused = fmt.Errorf("%s: resource %s makes a message of %d bytes on its own, over --max-msg-size %d", pl.name, pl.names[i], base+sizes[i], limit)
		}
		cur.Resources = append(cur.Resources, r)
		size += sizes[i]
	}
	for _, n := range pl.removed {
		s := repeatedFieldSize(len(n))
		if size+s > limit && size > base {
			flush()
		}
		if base+s > limit && pl.refused == nil {
			pl.refused = fmt.Errorf("%s: the removal of %s makes a message of %d bytes on its own, over --max-msg-size %d", pl.name, n, base+s, limit)
		}
		cur.RemovedResources = append(cur.RemovedResources, n)
		size += s
	}
	if size > base {
		flush()
	}
}

// headerSize is the size of a message without its resources and removals, with the longest
// nonce push sends.
func headerSize(m *mcp.Resources) int {
	h := proto.CloneOf(m)
	h.Nonce = nonceReserve
	return proto.Size(h)
}

// repeatedFieldSize is what an element of n bytes adds to a repeated field of a message: its
// tag (fields 3 and 4 of Resources: one byte), its length, itself.
func repeatedFieldSize(n int) int { return protowire.SizeTag(4) + protowire.SizeBytes(n) }

func (pl *plan) ackNote() string {
	n := len(pl.names)
	if len(pl.parts) == 1 {
		return fmt.Sprintf("%d resource%s", n, plural(n))
	}
	return fmt.Sprintf("%d resource%s, %d removed, in %d incremental messages", n, plural(n), len(pl.removed), len(pl.parts))
}

// nackNote says, for a split push, where it stopped: what the sink holds is then neither the
// old state nor the new.
func (pl *plan) nackNote(part int) string {
	if len(pl.parts) == 1 {
		return ""
	}
	return pl.stopNote(part, "")
}

// stopNote says where a split push stopped, at its message part (from 0), in the words of
// nackNote; state is what became of that message (" unanswered, maybe applied", " not sent"; "" for
// a NACK).
func (pl *plan) stopNote(part int, state string) string {
	return fmt.Sprintf(" (incremental message %d of %d%s: the %d before it were applied, the rest not sent; push again)", part+1, len(pl.parts), state, part)
}

// --- --dry-run

// planReport is what --dry-run prints with -o json or yaml.
type planReport struct {
	Addr        string           `json:"addr"`
	MaxMsgSize  int              `json:"max_msg_size"`
	WouldPush   bool             `json:"would_push"`
	Collections []planCollection `json:"collections"`
	NotAsked    []planUnasked    `json:"not_asked,omitempty"`
}

type planCollection struct {
	Collection  string   `json:"collection"` // as the sink named it
	Incremental bool     `json:"incremental"`
	Resources   int      `json:"resources"`
	Names       []string `json:"names"`
	Bytes       int      `json:"bytes"` // of the full state as one message
	// SentAs is "full state", "incremental" (split) or "refused".
	SentAs   string        `json:"sent_as"`
	Messages []planMessage `json:"messages"`
	// Removes is what the sink would remove; null (and RemovesKnown false) where the sink
	// asked for full state, and so did not say what it holds.
	Removes      []string `json:"removes"`
	RemovesKnown bool     `json:"removes_known"`
	Refused      string   `json:"refused,omitempty"`
}

type planMessage struct {
	Resources int  `json:"resources"`
	Removed   int  `json:"removed"`
	Bytes     int  `json:"bytes"`
	OverLimit bool `json:"over_limit"`
}

type planUnasked struct {
	Collection string `json:"collection"`
	Resources  int    `json:"resources"`
}

// printPlans prints what the push would send, and returns the refusal the push would meet.
func (p *pusher) printPlans(plans []*plan) error {
	rep := planReport{Addr: p.addr, MaxMsgSize: p.maxMsg, WouldPush: true, Collections: []planCollection{}, NotAsked: p.unasked()}
	var refused []error
	for _, pl := range plans {
		rep.Collections = append(rep.Collections, pl.report(p.maxMsg))
		if pl.refused != nil {
			refused = append(refused, pl.refused)
		}
	}
	rep.WouldPush = len(refused) == 0
	if err := p.writeReport(rep); err != nil {
		return err
	}
	switch len(refused) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("push: dry run: %w; the push would be refused: %s", refused[0], raiseLimit)
	default:
		return fmt.Errorf("push: dry run: %w (and %d more collections); the push would be refused: %s", refused[0], len(refused)-1, raiseLimit)
	}
}

func (pl *plan) report(limit int) planCollection {
	c := planCollection{
		Collection: pl.name, Incremental: pl.incremental, Resources: len(pl.names), Names: pl.names,
		Bytes: pl.fullSize, SentAs: "full state", RemovesKnown: pl.incremental,
	}
	if c.Names == nil {
		c.Names = []string{}
	}
	if pl.incremental {
		c.Removes = append([]string{}, pl.removed...)
	}
	if len(pl.parts) > 1 || (len(pl.parts) == 1 && pl.parts[0].Incremental) {
		c.SentAs = "incremental"
	}
	if pl.refused != nil {
		c.SentAs, c.Refused = "refused", pl.refused.Error()
	}
	for i, n := range pl.counts {
		c.Messages = append(c.Messages, planMessage{Resources: n.resources, Removed: n.removed, Bytes: pl.sizes[i], OverLimit: pl.sizes[i] > limit})
	}
	return c
}

func (p *pusher) writeReport(rep planReport) error {
	switch p.output {
	case "json", "yaml":
		js, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if p.output == "yaml" {
			if js, err = yaml.JSONToYAML(js); err != nil {
				return err
			}
			_, err = p.out.Write(js)
			return err
		}
		_, err = fmt.Fprintln(p.out, string(js))
		return err
	}
	return writePlanTable(p.out, rep)
}

// writePlanTable is --dry-run's table: a row per collection asked for.
func writePlanTable(w io.Writer, rep planReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "COLLECTION\tASKED\tRESOURCES\tBYTES\tMESSAGES\tOVER LIMIT\tREMOVES")
	for _, c := range rep.Collections {
		asked, removes := "full state", "unknown"
		if c.Incremental {
			asked, removes = "incremental", strconv.Itoa(len(c.Removes))
		}
		over := 0
		for _, m := range c.Messages {
			if m.OverLimit {
				over++
			}
		}
		messages := fmt.Sprintf("%d %s", len(c.Messages), c.SentAs)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\n", c.Collection, asked, c.Resources, c.Bytes, messages, over, removes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "every collection would be sent"
	if !rep.WouldPush {
		verdict = "the push would be refused"
	}
	_, err := fmt.Fprintf(w, "dry run: nothing was sent to %s; %s (--max-msg-size %d)\n", rep.Addr, verdict, rep.MaxMsgSize)
	return err
}
