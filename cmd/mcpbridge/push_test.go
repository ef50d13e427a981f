package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/bridgetest"
)

// The bridge's default grpc.max_recv_msg_size, and push's default --max-msg-size.
const fourMiB = 4 << 20

// bigCount ServiceEntries of bigPad bytes of annotation are about 4.35 MB: just over 4 MiB,
// and read in a few seconds with -race.
const bigCount, bigPad = 480, 9000

// writeServiceEntries writes ServiceEntries shop/se-FROM ... shop/se-(TO-1) to one file of dir,
// each with an annotation of pad bytes: a few hundred of them make a collection over 4 MiB,
// quicker to read than 30,000 small ones, and the annotation costs the bridge no translation.
func writeServiceEntries(t *testing.T, dir string, from, to, pad int) {
	t.Helper()
	var b strings.Builder
	fill := strings.Repeat("x", pad)
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se-%04d, namespace: shop, annotations: {pad: %s}}\nspec: {hosts: [se-%04d.shop.example]}\n---\n", i, fill, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "se.yaml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func seNames(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("shop/se-%04d", i))
	}
	return out
}

// heldNames is what the bridge holds from a producer in a collection, sorted.
func heldNames(b *bridgetest.Bridge, collection, owner string) []string {
	var out []string
	for n := range b.Store().View().OwnedVersions(collection, owner) {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

const vsYAML = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: shop}\nspec: {hosts: [reviews.shop.example], http: [{route: [{destination: {host: reviews.shop.example}}]}]}\n"

// A collection over the sink's limit, where the sink asks for incremental updates (mcpbridge's
// default), is pushed in incremental messages: everything is stored, and what the producer
// held that the files no longer hold (the names the bridge listed as held) is removed.
func TestPushSplitsACollectionOverTheLimitWhenTheSinkAsksIncremental(t *testing.T) {
	b := bridgetest.Start(t)
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 3, 10)
	if code, _, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", dir); code != 0 {
		t.Fatalf("first push: exit %d (stderr %q)", code, stderr)
	}
	writeServiceEntries(t, dir, 2, bigCount+2, bigPad) // se-0000 and se-0001 gone
	code, stdout, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", dir)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	mustHave(t, "stdout", stdout, fmt.Sprintf("ACK  istio/networking/v1alpha3/serviceentries (%d resources, 2 removed, in 2 incremental messages)", bigCount),
		"ACK  istio/networking/v1alpha3/virtualservices (0 resources)")
	if got := heldNames(b, seCollection, "producer:team-a"); !slices.Equal(got, seNames(2, bigCount+2)) {
		t.Fatalf("the bridge holds %d ServiceEntries of team-a (first %v), want exactly the %d of the files", len(got), got[:1], bigCount)
	}
}

// A full state cannot be split: where the sink asks for full state, a collection over the
// limit is refused before anything of any collection is sent, and --dry-run says so.
func TestPushRefusesAFullStateOverTheLimitBeforeSendingAnything(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.WithFullStateFromProducers())
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, bigCount, bigPad)
	writeFile(t, dir, "vs.yaml", vsYAML)
	code, stdout, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", dir)
	if code != exitRuntime || stdout != "" {
		t.Fatalf("exit %d, want 1; stdout %q, stderr %q", code, stdout, stderr)
	}
	assertOneLine(t, stderr, "istio/networking/v1alpha3/serviceentries", fmt.Sprintf("%d resources", bigCount), "is one message of",
		"bytes, over --max-msg-size 4194304", "asked for full state", "nothing was pushed", "grpc.max_recv_msg_size")
	if n := b.Store().View().OwnedCount("producer:team-a"); n != 0 {
		t.Fatalf("the refused push stored %d resources (the VirtualService?)", n)
	}

	// The dry run of the same, with a limit the small files exceed: it is push's own figure.
	small := t.TempDir()
	writeServiceEntries(t, small, 0, 3, 100)
	code, stdout, stderr = runCLI(t, "push", "--addr", b.GRPCAddr(), "--max-msg-size", "300", "--dry-run", "-o", "json", small)
	if code != exitRuntime {
		t.Fatalf("--dry-run: exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "dry run", "istio/networking/v1alpha3/serviceentries", "over --max-msg-size 300", "the push would be refused")
	rep := parsePlan(t, []byte(stdout), json.Unmarshal)
	se := rep.collection(t, seCollection)
	if rep.WouldPush || se.SentAs != "refused" || len(se.Messages) != 1 || !se.Messages[0].OverLimit || se.Messages[0].Bytes <= 300 || se.RemovesKnown || se.Removes != nil {
		t.Fatalf("dry run plan: %+v, serviceentries %+v", rep, se)
	}
	if rep.collection(t, vsCollection).SentAs != "full state" {
		t.Fatalf("dry run plan: %+v", rep)
	}
}

// A sink whose limit is below --max-msg-size ends the stream at the message over it: the
// error names that message's collection and the sink's status, not the collection push was
// sending when it noticed (grpc-go's Send says only EOF then).
func TestPushErrorNamesTheCollectionTheSinkRefused(t *testing.T) {
	b := bridgetest.Start(t)
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, bigCount, bigPad)
	writeFile(t, dir, "vs.yaml", vsYAML)
	code, _, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--max-msg-size", "8388608", dir)
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "ended the stream before answering istio/networking/v1alpha3/serviceentries (", "bytes)",
		"larger than max", "(ResourceExhausted)", "--max-msg-size 8388608", "grpc.max_recv_msg_size")
	if strings.Contains(stderr, "virtualservices") || strings.Contains(stderr, "EOF") {
		t.Fatalf("the error names another collection, or EOF: %q", stderr)
	}
}

// --dry-run sends nothing: what the producer holds stays as it was; it prints what would be
// sent and what the sink would remove (known where it asks incrementally).
func TestPushDryRunSendsNothingAndPrintsThePlan(t *testing.T) {
	b := bridgetest.Start(t)
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 3, 10)
	if code, _, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", dir); code != 0 {
		t.Fatalf("first push: exit %d (stderr %q)", code, stderr)
	}
	version := b.Version(seCollection)
	writeServiceEntries(t, dir, 1, 4, 10)

	code, stdout, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", "--dry-run", "-o", "json", dir)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	rep := parsePlan(t, []byte(stdout), json.Unmarshal)
	se := rep.collection(t, seCollection)
	if !rep.WouldPush || rep.MaxMsgSize != fourMiB || se.SentAs != "full state" || !se.Incremental || se.Resources != 3 ||
		!slices.Equal(se.Names, seNames(1, 4)) || len(se.Messages) != 1 || se.Messages[0].OverLimit ||
		!se.RemovesKnown || !slices.Equal(se.Removes, []string{"shop/se-0000"}) {
		t.Fatalf("plan %+v, serviceentries %+v", rep, se)
	}
	if v := b.Version(seCollection); v != version {
		t.Fatalf("the dry run changed the ServiceEntries: version %s, was %s", v, version)
	}
	if got := heldNames(b, seCollection, "producer:team-a"); !slices.Equal(got, seNames(0, 3)) {
		t.Fatalf("after the dry run team-a holds %v, want what it held", got)
	}

	// The table; -o yaml parses as the JSON does.
	code, stdout, _ = runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", "--dry-run", dir)
	if code != 0 {
		t.Fatalf("table: exit %d", code)
	}
	mustHave(t, "table", stdout, "COLLECTION", "REMOVES", "dry run: nothing was sent to "+b.GRPCAddr()+"; every collection would be sent")
	if line := lineOf(stdout, seCollection); len(strings.Fields(line)) != 9 || !strings.HasSuffix(line, " 1") {
		t.Fatalf("the ServiceEntries' row: %q", line)
	}
	code, stdout, _ = runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", "--dry-run", "-o", "yaml", dir)
	if code != 0 || parsePlan(t, []byte(stdout), func(b []byte, v any) error { return yaml.Unmarshal(b, v) }).collection(t, seCollection).Resources != 3 {
		t.Fatalf("yaml: exit %d, %s", code, stdout)
	}

	// What --allow-empty would remove, before it does.
	empty := t.TempDir()
	code, stdout, stderr = runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", "--allow-empty", "--dry-run", "-o", "json", empty)
	if code != 0 {
		t.Fatalf("--allow-empty --dry-run: exit %d (stderr %q)", code, stderr)
	}
	if se := parsePlan(t, []byte(stdout), json.Unmarshal).collection(t, seCollection); !slices.Equal(se.Removes, seNames(0, 3)) {
		t.Fatalf("--allow-empty --dry-run would remove %v, want all of team-a's", se.Removes)
	}
	if n := b.Store().View().OwnedCount("producer:team-a"); n != 3 {
		t.Fatalf("after the dry runs team-a holds %d resources, want 3", n)
	}
}

func lineOf(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix+" ") {
			return l
		}
	}
	return ""
}

func parsePlan(t *testing.T, out []byte, unmarshal func([]byte, any) error) planReport {
	t.Helper()
	var rep planReport
	if err := unmarshal(out, &rep); err != nil {
		t.Fatalf("not a plan: %v\n%s", err, out)
	}
	return rep
}

func (r planReport) collection(t *testing.T, name string) planCollection {
	t.Helper()
	for _, c := range r.Collections {
		if c.Collection == name {
			return c
		}
	}
	t.Fatalf("the plan has no %s: %+v", name, r)
	return planCollection{}
}

// splitSink is someone else's ResourceSink with a receive limit of its own: it asks for
// ServiceEntries incrementally, saying it holds held from this producer (by default shop/gone
// and shop/se-0001), records every message, and NACKs the one numbered nack (from 1; 0: none).
// It waits delay before each answer, answers none from the message numbered silentFrom on,
// and sends late as a new request before it answers the message numbered lateBefore.
type splitSink struct {
	mcp.UnimplementedResourceSinkServer
	nack       int
	held       map[string]string
	delay      time.Duration
	silentFrom int
	late       *mcp.RequestResources
	lateBefore int

	mu   sync.Mutex
	msgs []*mcp.Resources
}

func startSplitSink(t *testing.T, limit, nack int) (*splitSink, string) {
	t.Helper()
	return serveSplitSink(t, limit, &splitSink{nack: nack})
}

func serveSplitSink(t *testing.T, limit int, s *splitSink) (*splitSink, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if s.held == nil {
		s.held = map[string]string{"shop/gone": "1", "shop/se-0001": "1"}
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(limit))
	mcp.RegisterResourceSinkServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s, lis.Addr().String()
}

func (s *splitSink) EstablishResourceStream(st grpc.BidiStreamingServer[mcp.Resources, mcp.RequestResources]) error {
	req := &mcp.RequestResources{Collection: seCollection, Incremental: true, InitialResourceVersions: s.held}
	if err := st.Send(req); err != nil {
		return err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		n := len(s.msgs)
		s.mu.Unlock()
		if s.silentFrom > 0 && n >= s.silentFrom {
			continue
		}
		if s.late != nil && n == s.lateBefore {
			if err := st.Send(s.late); err != nil {
				return err
			}
		}
		time.Sleep(s.delay)
		ans := &mcp.RequestResources{Collection: m.Collection, ResponseNonce: m.Nonce}
		if n == s.nack {
			ans.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "not today"}
		}
		if err := st.Send(ans); err != nil {
			return err
		}
	}
}

func (s *splitSink) received() []*mcp.Resources {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// Every message fits the limit the sink enforces (a message over it would end the stream); the
// resources come first, then the removal of what the sink listed and the files do not hold.
func TestPushSplitMessagesFitTheLimitAndRemoveLast(t *testing.T) {
	const limit = 2048
	s, addr := startSplitSink(t, limit, 0)
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 20, 300)
	code, stdout, stderr := runCLI(t, "push", "--addr", addr, "--max-msg-size", fmt.Sprint(limit), dir)
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	msgs := s.received()
	var names []string
	for i, m := range msgs {
		if size := proto.Size(m); !m.Incremental || size > limit {
			t.Fatalf("message %d: incremental %t, %d bytes (limit %d)", i+1, m.Incremental, size, limit)
		}
		if len(m.RemovedResources) > 0 && i != len(msgs)-1 {
			t.Fatalf("message %d of %d removes %v: removals come last", i+1, len(msgs), m.RemovedResources)
		}
		for _, r := range m.Resources {
			names = append(names, r.GetMetadata().GetName())
		}
	}
	last := msgs[len(msgs)-1]
	if len(msgs) < 3 || !slices.Equal(names, seNames(0, 20)) || !slices.Equal(last.RemovedResources, []string{"shop/gone"}) {
		t.Fatalf("%d messages, resources %v, last removes %v", len(msgs), names, last.RemovedResources)
	}
	mustHave(t, "stdout", stdout, fmt.Sprintf("ACK  %s (20 resources, 1 removed, in %d incremental messages)", seCollection, len(msgs)))
}

// A NACK stops a split push where it is: nothing more of the collection is sent, and the
// NACK says which message and what that leaves at the sink.
func TestPushSplitStopsAtANACK(t *testing.T) {
	const limit = 2048
	s, addr := startSplitSink(t, limit, 2)
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 20, 300)
	code, stdout, stderr := runCLI(t, "push", "--addr", addr, "--max-msg-size", fmt.Sprint(limit), dir)
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1; stdout %q, stderr %q", code, stdout, stderr)
	}
	if n := len(s.received()); n != 2 {
		t.Fatalf("the sink got %d messages, want 2: none after the NACK", n)
	}
	mustHave(t, "stdout", stdout, "NACK "+seCollection+" (incremental message 2 of ", "the 1 before it were applied, the rest not sent; push again): not today")
	assertOneLine(t, stderr, "1 of 1 collections NACKed")
}

func TestPushSizeFlagsBadCommandLinesExit2(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "--max-msg-size", "0", "../../examples"}, "--max-msg-size"},
		{[]string{"push", "--max-recv-msg-size", "-1", "../../examples"}, "--max-recv-msg-size"},
		{[]string{"push", "--dry-run", "--watch", "../../examples"}, "--dry-run and --watch"},
		{[]string{"push", "-o", "json", "../../examples"}, "--output goes with --dry-run"},
		{[]string{"push", "--dry-run", "-o", "table2", "../../examples"}, "--output"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d, want 2 (stderr %q)", c.args, code, stderr)
		}
		assertOneLine(t, stderr, c.want)
	}
}

// A resource too large for a message of its own cannot be sent at all: refused, nothing sent.
func TestPushRefusesAResourceOverTheLimitOnItsOwn(t *testing.T) {
	s, addr := startSplitSink(t, 2048, 0)
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 3, 300)
	code, stdout, stderr := runCLI(t, "push", "--addr", addr, "--max-msg-size", "200", dir)
	if code != exitRuntime || stdout != "" {
		t.Fatalf("exit %d, want 1; stdout %q, stderr %q", code, stdout, stderr)
	}
	assertOneLine(t, stderr, seCollection+": resource shop/se-0000 makes a message of", "over --max-msg-size 200", "nothing was pushed", "grpc.max_recv_msg_size")
	if n := len(s.received()); n != 0 {
		t.Fatalf("the sink got %d messages, want none", n)
	}
}

// gateSink is someone else's ResourceSink that answers when the test says: it asks for
// ServiceEntries in full state, passes on every message it receives, and sends what the test
// gives it (answers, new requests) in order.
type gateSink struct {
	mcp.UnimplementedResourceSinkServer
	msgs chan *mcp.Resources
	send chan *mcp.RequestResources
}

func startGateSink(t *testing.T) (*gateSink, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &gateSink{msgs: make(chan *mcp.Resources, 100), send: make(chan *mcp.RequestResources, 100)}
	srv := grpc.NewServer()
	mcp.RegisterResourceSinkServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s, lis.Addr().String()
}

func (s *gateSink) EstablishResourceStream(st grpc.BidiStreamingServer[mcp.Resources, mcp.RequestResources]) error {
	if err := st.Send(&mcp.RequestResources{Collection: seCollection}); err != nil {
		return err
	}
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			s.msgs <- m
		}
	}()
	for {
		select {
		case req := <-s.send:
			if err := st.Send(req); err != nil {
				return err
			}
		case <-st.Context().Done():
			return nil
		}
	}
}

// next is the next message the sink receives, within 5 s.
func (s *gateSink) next(t *testing.T) *mcp.Resources {
	t.Helper()
	select {
	case m := <-s.msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("the sink received nothing within 5s")
	}
	return nil
}

// quiet checks that the sink receives nothing for d.
func (s *gateSink) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case m := <-s.msgs:
		t.Fatalf("the sink received %s with %d resources, want nothing", m.Collection, len(m.Resources))
	case <-time.After(d):
	}
}

func resourceNames(m *mcp.Resources) []string {
	names := []string{}
	for _, r := range m.Resources {
		names = append(names, r.GetMetadata().GetName())
	}
	return names
}

// Files emptied while push --watch follows them are never pushed without --allow-empty: not
// when the answer to a push under way comes after they were emptied (the collection changed
// meanwhile), nor when the sink asks for a new collection then. Once they hold something
// again, both are pushed.
func TestPushWatchNeverPushesEmptiedFiles(t *testing.T) {
	s, addr := startGateSink(t)
	dir := t.TempDir()
	se := writeFile(t, dir, "se.yaml", serviceEntryYAML("a", "one.example"))
	c := startCLI(t, "push", "--addr", addr, "--watch", dir)
	first := s.next(t)
	if got := resourceNames(first); !slices.Equal(got, []string{"shop/a"}) {
		t.Fatalf("first push: %v", got)
	}
	if err := os.Remove(se); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &c.stderr, func(out string) bool { return strings.Contains(out, "the files hold no resource now") })
	// A new request, then the answer to the push under way, both while the files are empty.
	s.send <- &mcp.RequestResources{Collection: vsCollection}
	s.send <- &mcp.RequestResources{Collection: seCollection, ResponseNonce: first.Nonce}
	waitOutput(t, &c.stdout, func(out string) bool { return strings.Contains(out, "ACK  "+seCollection+" (1 resource)") })
	s.quiet(t, 300*time.Millisecond)

	writeFile(t, dir, "se.yaml", serviceEntryYAML("b", "two.example"))
	got := map[string][]string{}
	for range 2 {
		m := s.next(t)
		got[m.Collection] = resourceNames(m)
	}
	if !slices.Equal(got[seCollection], []string{"shop/b"}) || got[vsCollection] == nil || len(got[vsCollection]) != 0 {
		t.Fatalf("once the files hold something again, the sink got %v; want the ServiceEntry shop/b and no VirtualService", got)
	}
	if code := c.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0 (stderr %q)", code, c.stderr.String())
	}
	if n := strings.Count(c.stderr.String(), "the files hold no resource now"); n != 1 {
		t.Fatalf("the emptiness reported %d times, want once: %q", n, c.stderr.String())
	}
}

// push --watch starts from faulty files no more than push does: a broken file would contribute
// nothing, and the sink would remove what the producer held from it.
func TestPushWatchRefusesFilesWithAFaultAsPushDoes(t *testing.T) {
	b := bridgetest.Start(t)
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", serviceEntryYAML("a", "one.example"))
	writeFile(t, dir, "b.yaml", serviceEntryYAML("b", "two.example"))
	if code, _, stderr := runCLI(t, "push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", dir); code != 0 {
		t.Fatalf("first push: exit %d (stderr %q)", code, stderr)
	}
	writeFile(t, dir, "b.yaml", "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: b, namespace: shop}\nspec: {hostz: [x]}\n")
	var last []string
	for _, args := range [][]string{
		{"push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", dir},
		{"push", "--addr", b.GRPCAddr(), "--producer-id", "team-a", "--watch", dir},
	} {
		c := startCLI(t, args...)
		if code := c.wait(t); code != exitRuntime {
			t.Fatalf("%v: exit %d, want 1 (stderr %q)", args, code, c.stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(c.stderr.String()), "\n")
		assertOneLine(t, lines[len(lines)-1]+"\n", "push: 1 fault in the files (see above); nothing was pushed")
		last = append(last, lines[len(lines)-1])
		if c.stdout.String() != "" {
			t.Fatalf("%v: stdout %q", args, c.stdout.String())
		}
	}
	if last[0] != last[1] {
		t.Fatalf("push and push --watch refuse differently: %q, %q", last[0], last[1])
	}
	if got := heldNames(b, seCollection, "producer:team-a"); !slices.Equal(got, []string{"shop/a", "shop/b"}) {
		t.Fatalf("after the refusals team-a holds %v, want what it held", got)
	}
}

// SIGINT ends push --watch with exit 0 and nothing on stderr at any point, the first push
// included (here the sink never asks for anything); push without --watch says what it
// interrupted, and exits 1.
func TestPushWatchSIGINTExits0EvenBeforeTheFirstPush(t *testing.T) {
	addr := nackingSink(t, true)
	dir := t.TempDir()
	writeFile(t, dir, "se.yaml", serviceEntryYAML("a", "one.example"))
	c := startCLI(t, "push", "--addr", addr, "--watch", dir)
	time.Sleep(300 * time.Millisecond) // the stream open, push waiting for the sink's requests
	if code := c.stop(t); code != 0 || c.stderr.String() != "" || c.stdout.String() != "" {
		t.Fatalf("--watch: exit %d after SIGINT, want 0; stdout %q, stderr %q", code, c.stdout.String(), c.stderr.String())
	}
	c = startCLI(t, "push", "--addr", addr, dir)
	time.Sleep(300 * time.Millisecond)
	if code := c.stop(t); code != exitRuntime {
		t.Fatalf("without --watch: exit %d after SIGINT, want 1 (stderr %q)", code, c.stderr.String())
	}
	assertOneLine(t, c.stderr.String(), "push: interrupted before ", "; nothing was pushed") // before the sink asked for anything
}

// --timeout is each wait for an answer, not the whole push: a split whose answers together take
// longer goes through. A split the sink stops answering names what was applied.
func TestPushTimeoutIsPerAnswerAndNamesWhatASplitApplied(t *testing.T) {
	const limit = 2048
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 20, 300)
	s, addr := serveSplitSink(t, limit, &splitSink{delay: 250 * time.Millisecond})
	start := time.Now()
	code, stdout, stderr := runCLI(t, "push", "--addr", addr, "--max-msg-size", fmt.Sprint(limit), "--timeout", "800ms", dir)
	if code != 0 {
		t.Fatalf("slow sink: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	parts := len(s.received())
	if parts < 5 || time.Since(start) < time.Second {
		t.Fatalf("%d messages in %s: not a test of a timeout per answer", parts, time.Since(start))
	}

	s, addr = serveSplitSink(t, limit, &splitSink{silentFrom: 3})
	code, stdout, stderr = runCLI(t, "push", "--addr", addr, "--max-msg-size", fmt.Sprint(limit), "--timeout", "300ms", dir)
	if code != exitRuntime || stdout != "" {
		t.Fatalf("silent sink: exit %d, want 1; stdout %q, stderr %q", code, stdout, stderr)
	}
	if n := len(s.received()); n != 3 {
		t.Fatalf("the silent sink got %d messages, want 3", n)
	}
	assertOneLine(t, stderr, "no answer from "+addr+" within --timeout 300ms of its last message", seCollection+" (incremental message 3 of ",
		fmt.Sprintf("left part applied by a split push: %s (incremental message 3 of %d unanswered, maybe applied: the 2 before it were applied, the rest not sent; push again)", seCollection, parts))
}

// A request push must refuse, coming while a split is under way, stops the push: nothing more
// is sent, the answers due are read, and the error names the collection left part applied.
func TestPushLateRefusalNamesTheSplitLeftPartApplied(t *testing.T) {
	const limit = 2048
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 20, 300)
	// The same ServiceEntries under an alias, in full state: over the limit, and not splittable.
	late := &mcp.RequestResources{Collection: "istio/networking/v1beta1/serviceentries"}
	s, addr := serveSplitSink(t, limit, &splitSink{late: late, lateBefore: 1})
	code, stdout, stderr := runCLI(t, "push", "--addr", addr, "--max-msg-size", fmt.Sprint(limit), dir)
	if code != exitRuntime || stdout != "" {
		t.Fatalf("exit %d, want 1; stdout %q, stderr %q", code, stdout, stderr)
	}
	if n := len(s.received()); n != 1 {
		t.Fatalf("the sink got %d messages, want 1: none after the refusal", n)
	}
	assertOneLine(t, stderr, "istio/networking/v1beta1/serviceentries: its full state (20 resources)", "it was not pushed",
		"left part applied by a split push: "+seCollection+" (incremental message 2 of ", " not sent: the 1 before it were applied, the rest not sent; push again)")
}

// A removal is sized as a resource is: one longer than a message may be refuses the push.
func TestPushRefusesARemovalOverTheLimitOnItsOwn(t *testing.T) {
	long := "shop/" + strings.Repeat("x", 600)
	s, addr := serveSplitSink(t, 4096, &splitSink{held: map[string]string{long: "1"}})
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 3, 10)
	code, stdout, stderr := runCLI(t, "push", "--addr", addr, "--max-msg-size", "400", dir)
	if code != exitRuntime || stdout != "" {
		t.Fatalf("exit %d, want 1; stdout %q, stderr %q", code, stdout, stderr)
	}
	assertOneLine(t, stderr, seCollection+": the removal of "+long+" makes a message of", "over --max-msg-size 400", "nothing was pushed")
	if n := len(s.received()); n != 0 {
		t.Fatalf("the sink got %d messages, want none", n)
	}
}

// A sink's opening request lists every name it holds from the producer: tens of thousands
// make it larger than gRPC's default 4 MiB, which push accepts (--max-recv-msg-size); over
// that, the error says it is push's own limit.
func TestPushAcceptsALargeOpeningRequest(t *testing.T) {
	held := map[string]string{}
	for i := range 45000 {
		held[fmt.Sprintf("shop/held-%06d-%s", i, strings.Repeat("n", 80))] = "1"
	}
	s, addr := serveSplitSink(t, fourMiB, &splitSink{held: held})
	dir := t.TempDir()
	writeServiceEntries(t, dir, 0, 3, 10)
	code, stdout, stderr := runCLI(t, "push", "--addr", addr, dir)
	if code != 0 || len(s.received()) != 1 {
		t.Fatalf("exit %d, %d messages; stdout %q, stderr %q", code, len(s.received()), stdout, stderr)
	}
	mustHave(t, "stdout", stdout, "ACK  "+seCollection+" (3 resources)")

	code, _, stderr = runCLI(t, "push", "--addr", addr, "--max-recv-msg-size", "1048576", dir)
	if code != exitRuntime {
		t.Fatalf("--max-recv-msg-size 1048576: exit %d, want 1 (stderr %q)", code, stderr)
	}
	assertOneLine(t, stderr, "a message from "+addr, "over push's receive limit, --max-recv-msg-size 1048576", "larger than max", "raise --max-recv-msg-size")
	if strings.Contains(stderr, "--max-msg-size") {
		t.Fatalf("the error blames the sink's limit: %q", stderr)
	}
}
