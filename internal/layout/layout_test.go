// Package layout holds the test that docs/architecture.md's picture of the packages is the
// code's: the edges of its "imports" block are exactly the project's imports, and internal/
// holds only leaves. It imports nothing of the project; it reads the import graph from
// `go list`.
package layout

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mcpbridge/mcpbridge/"

// root is the module's root, two folders up from this one.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// imports is the project's import graph, package by package (tests left out).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root(t)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				graph[strings.TrimPrefix(p.ImportPath, module)] = append(graph[strings.TrimPrefix(p.ImportPath, module)], strings.TrimPrefix(imp, module))
			}
		}
	}
	return graph
}

// folder is what the picture calls a package: itself, or "api" and "internal" for theirs.
func folder(pkg string) string {
	for _, group := range []string{"api", "internal"} {
		if strings.HasPrefix(pkg, group+"/") {
			return group
		}
	}
	return pkg
}

// documented reads the "imports" block of docs/architecture.md: "a → b c".
func documented(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	edges := map[string][]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "```imports":
			in = true
		case in && line == "```":
			return edges
		case in:
			from, to, ok := strings.Cut(line, " → ")
			if !ok {
				t.Fatalf("docs/architecture.md: %q is not \"a → b c\"", line)
			}
			edges[strings.TrimSpace(from)] = strings.Fields(to)
		}
	}
	t.Fatal("docs/architecture.md has no ```imports block")
	return nil
}

func TestArchitecturePictureIsTheImportGraph(t *testing.T) {
	actual := map[string][]string{}
	for pkg, deps := range imports(t) {
		from := folder(pkg)
		for _, d := range deps {
			if to := folder(d); to != from && !slices.Contains(actual[from], to) {
				actual[from] = append(actual[from], to)
			}
		}
	}
	doc := documented(t)
	var wrong []string
	for from, to := range actual {
		slices.Sort(to)
		if want := doc[from]; !slices.Equal(to, want) {
			wrong = append(wrong, fmt.Sprintf("%s → %s (the page says %s)", from, strings.Join(to, " "), strings.Join(want, " ")))
		}
	}
	for from := range doc {
		if _, ok := actual[from]; !ok {
			wrong = append(wrong, fmt.Sprintf("%s imports nothing of the project (the page says %s)", from, strings.Join(doc[from], " ")))
		}
	}
	slices.Sort(wrong)
	for _, w := range wrong {
		t.Errorf("docs/architecture.md's imports block is not the code's: %s", w)
	}
}

// internal/ holds leaves: no package under it imports the sink, the source, the translation,
// the kinds or the composition root (the store, the foundation, it may).
func TestInternalHoldsOnlyLeaves(t *testing.T) {
	above := []string{"app", "bridgetest", "cmd", "kinds", "sink", "source", "translate", "bench", "e2e"}
	for pkg, deps := range imports(t) {
		if !strings.HasPrefix(pkg, "internal/") {
			continue
		}
		for _, d := range deps {
			if slices.Contains(above, strings.Split(d, "/")[0]) {
				t.Errorf("%s imports %s: internal/ holds leaves only", pkg, d)
			}
		}
	}
}
