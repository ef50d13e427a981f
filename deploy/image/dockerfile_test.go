package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// instruction is one line of a Dockerfile, continuation lines joined.
type instruction struct {
	op   string // upper case: FROM, RUN, ...
	args string
}

// parseDockerfile reads the instructions of a Dockerfile: enough of its grammar for the file
// at the repository's root (comments, blank lines, backslash continuations).
func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont)
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{op: strings.ToUpper(op), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// The Dockerfile makes the image make image makes: it copies the tool's -rootfs onto scratch,
// and says what the tool's config says.
func TestDockerfileMatchesTool(t *testing.T) {
	src, err := findSource(".")
	if err != nil {
		t.Fatal(err)
	}
	all := parseDockerfile(t, filepath.Join(src, "Dockerfile"))
	last := -1
	for i, in := range all {
		if in.op == "FROM" {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	if all[last].args != "scratch" {
		t.Errorf("final stage FROM %s, want scratch (the image holds only the tool's files)", all[last].args)
	}
	var build, final []instruction = all[:last], all[last+1:]
	if !slices.ContainsFunc(build, func(in instruction) bool {
		return in.op == "RUN" && strings.Contains(in.args, "go -C deploy/image run .") && strings.Contains(in.args, "-rootfs /rootfs")
	}) {
		t.Error("Dockerfile: the build stage does not write the files with the tool (go -C deploy/image run . ... -rootfs /rootfs)")
	}

	want := containerConfig(spec{version: "dev", revision: "r", created: time.Unix(0, 0)})
	got := map[string][]string{}
	labels := map[string]bool{}
	for _, in := range final {
		switch in.op {
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(in.args), &v); err != nil {
				t.Errorf("%s %s: not the JSON (exec) form: %v", in.op, in.args, err)
			}
			got[in.op] = v
		case "LABEL":
			for _, kv := range strings.Fields(in.args) {
				if k, _, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "org.opencontainers.") {
					labels[k] = true
				}
			}
		case "COPY":
			if in.args != "--from=build /rootfs/ /" {
				t.Errorf("COPY %s: the final stage copies only the tool's rootfs", in.args)
			}
		case "RUN", "ADD":
			t.Errorf("%s in the final stage: it has nothing to run with and must hold only the tool's files", in.op)
		default:
			got[in.op] = append(got[in.op], strings.Fields(in.args)...)
		}
	}
	check := func(op string, want []string) {
		t.Helper()
		if !slices.Equal(got[op], want) {
			t.Errorf("Dockerfile %s %q, the tool's %q", op, got[op], want)
		}
	}
	check("USER", []string{want.User})
	check("ENV", want.Env)
	check("WORKDIR", []string{want.WorkingDir})
	var ports []string
	for p := range want.ExposedPorts {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	check("EXPOSE", ports)
	check("ENTRYPOINT", want.Entrypoint)
	check("CMD", want.Cmd)
	for k := range want.Labels {
		if !labels[k] {
			t.Errorf("Dockerfile has no LABEL %s", k)
		}
	}
	if len(labels) != len(want.Labels) {
		t.Errorf("Dockerfile labels %v, the tool's %v", labels, want.Labels)
	}
}
