package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// badPortYAML is a ServiceEntry whose port number, in a list, is not a number: line 8,
// column 5 of the document.
const badPortYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: b
  namespace: shop
spec:
  ports:
  - number: http
    name: web
  hosts: [b.example]
`

// TestValidatePrintsPathsAsGiven: a relative path stays relative, an absolute one absolute,
// and a directory's file is the directory as given joined with the file's name, in the faults
// and in what they say of other files.
func TestValidatePrintsPathsAsGiven(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "conf"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "conf"), "bad.yaml", badPortYAML)
	writeFile(t, filepath.Join(dir, "conf"), "first.yaml", serviceEntryYAML("a", "a.example"))
	writeFile(t, dir, "again.yaml", serviceEntryYAML("a", "other.example"))
	t.Chdir(dir)
	for _, tt := range []struct {
		args  []string
		wants []string // the start of each line, in order
	}{
		{[]string{"conf/"}, []string{"conf/bad.yaml:8:5: "}},
		{[]string{"./conf"}, []string{"conf/bad.yaml:8:5: "}},
		{[]string{"./conf/bad.yaml"}, []string{"./conf/bad.yaml:8:5: "}},
		{[]string{filepath.Join(dir, "conf")}, []string{filepath.Join(dir, "conf", "bad.yaml") + ":8:5: "}},
		// The first definition is that of the first file in the order of their absolute paths.
		{[]string{"conf/first.yaml", "again.yaml"}, []string{"conf/first.yaml:1: document 1: ServiceEntry shop/a: already defined in again.yaml, document 1"}},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"validate"}, tt.args...)...)
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if code != exitRuntime || len(lines) != len(tt.wants) {
			t.Fatalf("validate %v: exit %d, stdout %q, stderr %q; want 1 and %d lines", tt.args, code, stdout, stderr, len(tt.wants))
		}
		for i, want := range tt.wants {
			if !strings.HasPrefix(lines[i], want) {
				t.Errorf("validate %v: line %q, want it to start %q", tt.args, lines[i], want)
			}
		}
	}
}

// TestValidatePrintsLineAndColumnOfTheField: FILE:LINE:COLUMN of the field at fault, in the
// file: a misspelt key, a bad value in a list, a field of a second document; a YAML syntax
// error at the parser's line.
func TestValidatePrintsLineAndColumnOfTheField(t *testing.T) {
	dir := t.TempDir()
	typo := writeFile(t, dir, "a-typo.yaml", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n"+
		"metadata: {name: r, namespace: shop}\nspec:\n  host: r.shop.svc.cluster.local\n  trafficPolicy:\n    loadBalancer: {simpel: ROUND_ROBIN}\n")
	list := writeFile(t, dir, "b-list.yaml", badPortYAML)
	second := writeFile(t, dir, "c-second.yaml", serviceEntryYAML("x", "x.example")+"---\n# the second\n"+badPortYAML)
	syntax := writeFile(t, dir, "d-syntax.yaml", serviceEntryYAML("s", "s.example")+"---\n"+
		"apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n   bad: indent\n")
	code, stdout, stderr := runCLI(t, "validate", dir)
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1; stdout %q", code, stdout)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	wants := []string{
		typo + `:7:20: document 1: DestinationRule shop/r: field spec.trafficPolicy.loadBalancer.simpel: unknown field "simpel"`,
		list + `:8:5: document 1: ServiceEntry shop/b: field spec.ports[0].number: invalid value for uint32 field number: "http"`,
		second + `:14:5: document 2: ServiceEntry shop/b: field spec.ports[0].number: `,
		syntax + `:10: document 2: yaml: line 10: mapping values are not allowed in this context`,
	}
	if len(lines) != len(wants) {
		t.Fatalf("want one line per fault, got %q", stdout)
	}
	for i, want := range wants {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %q, want it to start %q", lines[i], want)
		}
	}
	assertOneLine(t, stderr, "validate: 4 faults")
}

func TestValidateJSONHoldsTheFaultsWithTheirPositions(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "good.yaml", serviceEntryYAML("a", "a.example"))
	bad := writeFile(t, dir, "mesh.yaml", serviceEntryYAML("x", "x.example")+"---\n"+badPortYAML)
	code, stdout, stderr := runCLI(t, "validate", "-o", "json", dir)
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1; stdout %q", code, stdout)
	}
	assertOneLine(t, stderr, "validate: 1 fault")
	var got validateReport
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	want := validateFault{
		File: bad, Line: 13, Column: 5, Document: 2, Kind: "ServiceEntry", Name: "shop/b",
		Field: "spec.ports[0].number", Message: `invalid value for uint32 field number: "http"`,
	}
	if got.OK || got.Resources != 1 || got.Collections != 1 || len(got.Faults) != 1 || got.Faults[0] != want {
		t.Fatalf("report %+v\nwant not ok, good.yaml's 1 resource in 1 collection, and the fault %+v", got, want)
	}
	// The names of the JSON, as documented in the help.
	for _, name := range []string{`"ok"`, `"resources"`, `"collections"`, `"faults"`, `"file"`, `"line"`, `"column"`, `"document"`, `"kind"`, `"name"`, `"field"`, `"message"`} {
		if !strings.Contains(stdout, name+":") {
			t.Errorf("JSON has no %s:\n%s", name, stdout)
		}
	}
}

func TestValidateJSONAndYAMLOfCleanFiles(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		code, stdout, stderr := runCLI(t, "validate", "--output", format, "../../examples/")
		if code != exitOK || stderr != "" {
			t.Fatalf("-o %s: exit %d, stderr %q", format, code, stderr)
		}
		js := []byte(stdout)
		if format == "yaml" {
			var err error
			if js, err = yaml.YAMLToJSON(js); err != nil {
				t.Fatalf("-o yaml is not YAML: %v\n%s", err, stdout)
			}
		}
		var got map[string]any
		if err := json.Unmarshal(js, &got); err != nil {
			t.Fatalf("-o %s: %v\n%s", format, err, stdout)
		}
		faults, isList := got["faults"].([]any)
		if got["ok"] != true || got["resources"] != float64(16) || got["collections"] != float64(5) || !isList || len(faults) != 0 {
			t.Errorf("-o %s: %v, want ok, 16 resources in 5 collections, and faults []", format, got)
		}
	}
}

func TestValidateBadOutputExits2(t *testing.T) {
	for _, args := range [][]string{
		{"validate", "-o", "xml", "../../examples/"},
		{"validate", "-o", "json", filepath.Join(t.TempDir(), "missing.yaml")},
	} {
		code, stdout, stderr := runCLI(t, args...)
		if code != exitUsage || stdout != "" {
			t.Fatalf("%v: exit %d, stdout %q; want 2 and nothing printed", args, code, stdout)
		}
		assertOneLine(t, stderr)
	}
	_, _, stderr := runCLI(t, "validate", "-o", "xml", "../../examples/")
	assertOneLine(t, stderr, "--output", `"xml"`, "table, json, yaml")
}
