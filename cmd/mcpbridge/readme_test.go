package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/streamtest"
)

// The pages whose ```sh blocks TestReadmeShellExamplesRun runs, from the repository root.
var readmeDocs = []string{"README.md", "docs/tutorial.md"}

// readmeNotRunnable are the commands of those blocks that a test cannot run, by their first
// words, each with the reason. Any other command that is not mcpbridge or `curl -s URL` fails
// the test: a new kind of command must be made runnable or listed here, with its reason.
var readmeNotRunnable = []struct{ prefix, why string }{
	{"make run", "builds and serves config.yaml on the fixed default ports; the test's bridge is that same `serve --config config.yaml` on free ports, and the lines after it run against it"},
	{"make test", "runs every test, this one included"},
	{"make image", "builds the container image; deploy/image's tests build and check it"},
	{"docker", "needs a container runtime; deploy/image's tests check the image's contents"},
	{"podman", "needs a container runtime; deploy/image's tests check the image's contents"},
	{"helm", "needs a Kubernetes cluster; deploy/helm's tests render, lint and serve the chart"},
	{"kubectl", "needs a Kubernetes cluster"},
	{"kind", "needs Docker and creates a Kubernetes cluster"},
	{"grpcurl", "not installed by make test; TestEveryServiceIsOnTheGRPCPort lists the services by reflection, as `grpcurl list` does"},
}

// TestReadmeShellExamplesRun runs every ```sh block of README.md and docs/tutorial.md, so that
// a command shown there cannot stop working unnoticed. Per page, it starts the built binary as
// `make run` does (serve --config config.yaml, on free ports) in a copy of config.yaml and
// examples/, then runs the blocks in order, in that copy:
//
//   - `mcpbridge` (or `bin/mcpbridge`) runs the built binary. The default addresses
//     127.0.0.1:15010 and 127.0.0.1:15014 (or localhost:15010, localhost:15014) are replaced by
//     the test bridge's gRPC and HTTP addresses, and push, watch and status without --addr are
//     given the bridge's. serve gets free ports (--grpc-addr and --http-addr 127.0.0.1:0).
//   - A block whose first line starts with "$ " is a transcript: each "$ " line is a command,
//     and the lines up to the next one its output, which must appear in order in what the
//     command prints (stdout, then stderr). Runs of spaces count as one, a line "..." stands
//     for lines left out and "..." within a line for characters left out. A command whose
//     output does not match yet is run again for up to 15s (a status that waits for a client's
//     ACK). Otherwise a block holds commands only; a "$ " line there fails the test.
//   - Every command must exit 0. serve, watch without --count and push --watch run until the
//     end of the page, as in a terminal of their own: the test waits until they are ready
//     (serve: /readyz; the others: the output shown, else any output), and at the end stops
//     them with SIGINT, after which they must exit 0.
//   - `curl -s URL` is a GET of URL (after the replacement), which must answer 2xx; the body
//     is its output.
//   - A ```yaml block whose first line is "# file: PATH" is written to PATH, for the blocks
//     after it.
//   - A command in readmeNotRunnable is logged with its reason and not run. Anything else
//     fails the test: another command, and shell the test does not interpret (pipes,
//     redirection, variables, globs, several commands on a line). Shell examples must be in
//     ```sh blocks: a bash, shell or console block fails the test.
func TestReadmeShellExamplesRun(t *testing.T) {
	bin := buildBinary(t)
	for _, doc := range readmeDocs {
		t.Run(doc, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("..", "..", doc))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := fencedBlocks(string(text))
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			r := &readmeRun{t: t, doc: doc, bin: bin, dir: readmeWorkdir(t)}
			r.startBridge()
			for _, b := range blocks {
				r.block(b)
			}
			r.stopAll()
			t.Logf("%s: %d mcpbridge commands run", doc, r.ran)
			if r.ran == 0 {
				t.Errorf("%s: no mcpbridge command ran: the page has no runnable ```sh block, or the test reads it wrong", doc)
			}
		})
	}
}

// readmeWorkdir is a copy of what the pages' commands read: config.yaml and examples/.
func readmeWorkdir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "examples"), os.DirFS(filepath.Join("..", "..", "examples"))); err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join("..", "..", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "config.yaml", string(config))
	return dir
}

// mdBlock is one fenced block of a page: its language and its lines, without the fence's
// indentation (a block inside a list item is indented).
type mdBlock struct {
	line  int // of the opening fence, 1-based
	lang  string
	lines []string
}

func fencedBlocks(text string) ([]mdBlock, error) {
	var blocks []mdBlock
	var cur *mdBlock
	indent := 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == nil {
			if strings.HasPrefix(trimmed, "```") {
				indent = len(line) - len(strings.TrimLeft(line, " "))
				cur = &mdBlock{line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			}
			continue
		}
		if trimmed == "```" {
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		cut := min(indent, len(line)-len(strings.TrimLeft(line, " ")))
		cur.lines = append(cur.lines, line[cut:])
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: a fenced block is not closed", cur.line)
	}
	return blocks, nil
}

// readmeStep is one command of a block, and for a transcript the output shown after it.
type readmeStep struct {
	line    int
	command string
	want    []string
}

// blockSteps reads a ```sh block's commands. A line ending in "\" goes on on the next.
func blockSteps(b mdBlock) ([]readmeStep, error) {
	transcript := false
	for _, l := range b.lines {
		if strings.TrimSpace(l) != "" {
			transcript = strings.HasPrefix(l, "$ ")
			break
		}
	}
	var steps []readmeStep
	for i := 0; i < len(b.lines); i++ {
		l := b.lines[i]
		lineNo := b.line + 1 + i
		if strings.TrimSpace(l) == "" || (!transcript && strings.HasPrefix(strings.TrimSpace(l), "#")) {
			continue
		}
		command, isCommand := strings.CutPrefix(l, "$ ")
		switch {
		case !transcript && isCommand:
			return nil, fmt.Errorf("line %d: a block of commands has a transcript line %q: make the whole block a transcript", lineNo, l)
		case transcript && !isCommand:
			if len(steps) == 0 {
				return nil, fmt.Errorf("line %d: output before any command", lineNo)
			}
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
			continue
		case !transcript:
			command = l
		}
		for strings.HasSuffix(command, `\`) && i+1 < len(b.lines) {
			i++
			command = strings.TrimSuffix(command, `\`) + " " + strings.TrimSpace(b.lines[i])
		}
		steps = append(steps, readmeStep{line: lineNo, command: strings.TrimSpace(command)})
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("line %d: a ```sh block without a command", b.line)
	}
	return steps, nil
}

// shellWords splits a command line as sh does, for the subset the pages may use: words,
// quotes without expansions, backslash escapes and comments. Anything that needs a shell to
// mean what it says is an error, never passed on as a word.
func shellWords(s string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, word.String())
		}
		word.Reset()
		inWord = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			flush()
			return words, nil
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("an unclosed '")
			}
			word.WriteString(s[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == '"':
			end := strings.IndexByte(s[i+1:], '"')
			if end < 0 {
				return nil, errors.New(`an unclosed "`)
			}
			quoted := s[i+1 : i+1+end]
			if strings.ContainsAny(quoted, "$`\\") {
				return nil, fmt.Errorf("an expansion in double quotes: %q", quoted)
			}
			word.WriteString(quoted)
			inWord = true
			i += end + 1
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("a trailing backslash")
			}
			i++
			word.WriteByte(s[i])
			inWord = true
		case strings.IndexByte("|&;<>()$`*?[]{}", c) >= 0:
			return nil, fmt.Errorf("%q needs a shell", c)
		case c == '~' && !inWord:
			return nil, errors.New("~ needs a shell")
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	flush()
	if len(words) > 0 && strings.Contains(words[0], "=") {
		return nil, fmt.Errorf("a variable assignment needs a shell: %q", words[0])
	}
	return words, nil
}

// readmeOutputHas reports whether output holds the wanted lines in order, and else the first
// wanted line it lacks.
func readmeOutputHas(output string, want []string) (bool, string) {
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	lines := strings.Split(output, "\n")
	pos := 0
	for _, w := range want {
		w = norm(w)
		if w == "..." || w == "" {
			continue
		}
		parts := strings.Split(w, "...")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		found := false
		for pos < len(lines) {
			l := norm(lines[pos])
			pos++
			if re.MatchString(l) {
				found = true
				break
			}
		}
		if !found {
			return false, w
		}
	}
	return true, ""
}

// readmeProc is a process of the built binary, stdout and stderr kept apart.
type readmeProc struct {
	cmd            *exec.Cmd
	what           string
	stdout, stderr streamtest.Buffer
	done           chan struct{}
	err            error // cmd.Wait's, once done is closed
}

func (r *readmeRun) start(what string, args ...string) *readmeProc {
	r.t.Helper()
	p := &readmeProc{what: what, done: make(chan struct{})}
	p.cmd = exec.Command(r.bin, args...)
	p.cmd.Dir = r.dir
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	r.t.Cleanup(func() { // the test failed before stopping it
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// exit waits up to timeout for the process to end and returns its exit status, -1 for a
// process killed by a signal; ok is false when it is still running.
func (p *readmeProc) exit(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
	default: // not ended yet: wait (a zero timeout and an ended process are both ready below)
		select {
		case <-p.done:
		case <-time.After(timeout):
			return 0, false
		}
	}
	var exitErr *exec.ExitError
	switch {
	case p.err == nil:
		return 0, true
	case errors.As(p.err, &exitErr):
		return exitErr.ExitCode(), true
	}
	return -1, true
}

func (p *readmeProc) output() string { return p.stdout.String() + p.stderr.String() }

// readmeRun runs the blocks of one page.
type readmeRun struct {
	t          *testing.T
	doc        string
	bin, dir   string
	grpc, http string        // the test bridge's addresses
	bridge     *readmeProc   // the test bridge, as make run serves
	background []*readmeProc // long-running commands, stopped at the end of the page
	client     *http.Client  // no keep-alives: nothing outlives the test
	ran        int           // mcpbridge commands run
}

func (r *readmeRun) where(line int) string { return fmt.Sprintf("%s:%d", r.doc, line) }

func (r *readmeRun) startBridge() {
	r.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r.bridge = r.start("the test bridge", "serve", "--config", "config.yaml", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	r.grpc, r.http = r.servingAddrs(r.bridge)
	r.waitReady(r.bridge, r.http)
}

// servingAddrs reads a serve's addresses from its log line "mcpbridge serving".
func (r *readmeRun) servingAddrs(p *readmeProc) (grpcAddr, httpAddr string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				return m[1], m[2]
			}
		}
		if _, ended := p.exit(0); ended || time.Now().After(deadline) {
			r.t.Fatalf("%s did not log its addresses (ended: %v):\n%s", p.what, ended, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *readmeRun) waitReady(p *readmeProc, httpAddr string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, err := r.get("http://" + httpAddr + "/readyz")
		if err == nil && code == http.StatusOK {
			return
		}
		if _, ended := p.exit(0); ended || time.Now().After(deadline) {
			r.t.Fatalf("%s not ready (%d %q %v):\n%s", p.what, code, body, err, p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *readmeRun) get(url string) (int, string, error) {
	resp, err := r.client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (r *readmeRun) block(b mdBlock) {
	t := r.t
	switch b.lang {
	case "sh":
	case "yaml":
		if path, ok := strings.CutPrefix(strings.TrimSpace(firstLine(b.lines)), "# file: "); ok {
			if !filepath.IsLocal(path) {
				t.Fatalf("%s: # file: %s is not a path inside the repository", r.where(b.line), path)
			}
			full := filepath.Join(r.dir, path)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Dir(full), filepath.Base(full), strings.Join(b.lines, "\n")+"\n")
		}
		return
	case "bash", "shell", "console", "zsh", "shell-session":
		t.Errorf("%s: a ```%s block: write shell examples in ```sh blocks, which this test runs", r.where(b.line), b.lang)
		return
	default:
		return
	}
	steps, err := blockSteps(b)
	if err != nil {
		t.Errorf("%s: %v", r.doc, err)
		return
	}
	for _, s := range steps {
		r.step(s)
	}
}

func firstLine(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[0]
}

func (r *readmeRun) step(s readmeStep) {
	t := r.t
	words, err := shellWords(s.command)
	if err != nil {
		t.Errorf("%s: `%s` is not runnable here: %v", r.where(s.line), s.command, err)
		return
	}
	if len(words) == 0 {
		return
	}
	for _, n := range readmeNotRunnable {
		if p := strings.Fields(n.prefix); len(words) >= len(p) && slices.Equal(words[:len(p)], p) {
			t.Logf("%s: not run: `%s`: %s", r.where(s.line), s.command, n.why)
			return
		}
	}
	for i, w := range words {
		words[i] = strings.NewReplacer(
			"127.0.0.1:15010", r.grpc, "localhost:15010", r.grpc,
			"127.0.0.1:15014", r.http, "localhost:15014", r.http,
		).Replace(w)
	}
	switch words[0] {
	case "mcpbridge", "bin/mcpbridge", "./bin/mcpbridge":
		r.ran++
		r.mcpbridge(s, words[1:])
	case "curl":
		r.curl(s, words[1:])
	default:
		t.Errorf("%s: `%s` is neither mcpbridge, `curl -s URL`, nor a command readmeNotRunnable lists with its reason", r.where(s.line), s.command)
	}
}

func readmeHasFlag(args []string, flags ...string) bool {
	for _, a := range args {
		for _, f := range flags {
			if a == f || strings.HasPrefix(a, f+"=") {
				return true
			}
		}
	}
	return false
}

func (r *readmeRun) mcpbridge(s readmeStep, args []string) {
	t := r.t
	if len(args) == 0 {
		t.Errorf("%s: `%s`: no command", r.where(s.line), s.command)
		return
	}
	long := false
	switch args[0] {
	case "serve":
		args = append(slices.Clip(args), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
		long = true
	case "push", "watch", "status":
		if !readmeHasFlag(args, "--addr", "--from", "--to") {
			args = append([]string{args[0], "--addr", r.grpc}, args[1:]...)
		}
		long = (args[0] == "watch" && !readmeHasFlag(args, "--count")) || (args[0] == "push" && readmeHasFlag(args, "--watch"))
	}
	what := fmt.Sprintf("%s: `%s`", r.where(s.line), s.command)
	if long {
		r.startLong(what, s, args)
		return
	}
	r.retry(what, s.want, func() (int, string, bool) {
		p := r.start(what, args...)
		code, ok := p.exit(30 * time.Second)
		if !ok {
			p.cmd.Process.Kill()
			<-p.done
			return 0, "still running after 30s:\n" + p.output(), false
		}
		return code, p.output(), true
	})
}

// retry runs a command until it exits 0 with the output shown, for at most 15s.
func (r *readmeRun) retry(what string, want []string, run func() (code int, output string, ended bool)) {
	t := r.t
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, out, ended := run()
		switch {
		case !ended:
			t.Errorf("%s: %s", what, out)
			return
		case code != 0:
			t.Errorf("%s: exit %d, want 0; output:\n%s", what, code, out)
			return
		}
		ok, missing := readmeOutputHas(out, want)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the output lacks %q (in the order shown); output:\n%s", what, missing, out)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startLong starts a command that runs until stopped, and waits until it is ready.
func (r *readmeRun) startLong(what string, s readmeStep, args []string) {
	t := r.t
	p := r.start(what, args...)
	if args[0] == "serve" {
		r.background = append(r.background, p)
		_, httpAddr := r.servingAddrs(p)
		r.waitReady(p, httpAddr)
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := p.stdout.String()
		ready := out != ""
		if len(s.want) > 0 {
			ready, _ = readmeOutputHas(out, s.want)
		}
		if ready {
			r.background = append(r.background, p)
			return
		}
		if code, ended := p.exit(0); ended {
			t.Errorf("%s: ended (exit %d) instead of running until stopped; output:\n%s", what, code, p.output())
			return
		}
		if time.Now().After(deadline) {
			r.background = append(r.background, p)
			_, missing := readmeOutputHas(out, s.want)
			t.Errorf("%s: no output as shown within 30s (lacks %q); output:\n%s", what, missing, p.output())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *readmeRun) curl(s readmeStep, args []string) {
	what := fmt.Sprintf("%s: `%s`", r.where(s.line), s.command)
	if len(args) != 2 || args[0] != "-s" {
		r.t.Errorf("%s: only `curl -s URL` is run here", what)
		return
	}
	url := args[1]
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	r.retry(what, s.want, func() (int, string, bool) {
		code, body, err := r.get(url)
		if err != nil {
			return 1, err.Error(), true
		}
		if code/100 != 2 {
			return 1, fmt.Sprintf("HTTP %d: %s", code, body), true
		}
		return 0, body, true
	})
}

// stopAll stops the long-running commands, latest first, then the test bridge: SIGINT, as
// Ctrl-C in their terminals, after which each must exit 0.
func (r *readmeRun) stopAll() {
	procs := append(slices.Clone(r.background), r.bridge)
	slices.Reverse(procs[:len(procs)-1])
	for _, p := range procs {
		if code, ended := p.exit(0); ended {
			r.t.Errorf("%s: ended (exit %d) before the end of the page; output:\n%s", p.what, code, p.output())
			continue
		}
		p.cmd.Process.Signal(syscall.SIGINT)
		code, ok := p.exit(30 * time.Second)
		switch {
		case !ok:
			r.t.Errorf("%s: still running 30s after SIGINT", p.what)
		case code != 0:
			r.t.Errorf("%s: exit %d after SIGINT, want 0; output:\n%s", p.what, code, p.output())
		}
	}
}
