package filesource

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const positionDoc = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: a
  annotations:
    example.com/x: "1"
spec:
  hosts: [a.example, b.example]
  ports:
  - number: 80
    target_port: 8080
  - {number: 81, name: b}
  base: &base {location: MESH_EXTERNAL}
  other:
    <<: *base
    resolution: DNS
  alias: *base
`

func TestFieldPosition(t *testing.T) {
	root := parseNodes([]byte(positionDoc))
	tests := []struct {
		field     string
		line, col int // 0: not found
	}{
		{"kind", 2, 1},
		{"metadata.name", 4, 3},
		{`metadata.annotations["example.com/x"]`, 6, 5},
		{"spec.hosts[1]", 8, 22},
		{"spec.ports[0].number", 10, 5},
		{"spec.ports[1]", 12, 5},
		{"spec.ports[1].name", 12, 18},
		{"spec.ports[0].targetPort", 11, 5}, // the JSON name of a key spelt as the proto name
		{"spec.other.resolution", 16, 5},
		{"spec.other.location", 13, 16}, // merged: where the value is written
		{"spec.alias.location", 13, 16}, // through an alias
		// Not in the document: the caller keeps the document's line.
		{"spec.url", 0, 0},
		{"spec.ports[2]", 0, 0},
		{"spec.ports.number", 0, 0},
		{"spec.hosts[0].name", 0, 0},
		{"kind.x", 0, 0},
		{"metadata.annotations.example", 0, 0},
		// Not a path.
		{"", 0, 0},
		{".spec", 0, 0},
		{"spec..hosts", 0, 0},
		{"spec.", 0, 0},
		{"spec.hosts[", 0, 0},
		{"spec.hosts[x]", 0, 0},
		{"spec.hosts[-1]", 0, 0},
		{"spec.hosts[99999999999999999999999]", 0, 0},
		{`metadata.annotations["example.com/x"`, 0, 0},
		{`metadata.annotations["example.com/x`, 0, 0},
		{"spec]", 0, 0},
	}
	for _, tt := range tests {
		line, col, ok := fieldPosition(root, tt.field)
		if ok != (tt.line > 0) || line != tt.line || col != tt.col {
			t.Errorf("fieldPosition(%q) = %d:%d %v, want %d:%d", tt.field, line, col, ok, tt.line, tt.col)
		}
	}
}

func TestFieldPositionOfNoTree(t *testing.T) {
	for _, text := range []string{"", "# only a comment\n", "[unclosed\n", "a: [1\n", "- a\n"} {
		if line, col, ok := fieldPosition(parseNodes([]byte(text)), "a"); ok {
			t.Errorf("%q: found a at %d:%d", text, line, col)
		}
	}
}

func TestParseFieldPath(t *testing.T) {
	steps, ok := parseFieldPath(`spec.http[12]["a.b/c"].x`)
	want := []pathStep{{key: "spec"}, {key: "http"}, {index: 12, isIndex: true}, {key: "a.b/c"}, {key: "x"}}
	if !ok || len(steps) != len(want) {
		t.Fatalf("steps = %+v %v, want %+v", steps, ok, want)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Errorf("step %d = %+v, want %+v", i, steps[i], want[i])
		}
	}
}

// TestDecodeFaultPositions: Decode puts each fault at its field in the file, counting the
// documents before it and a document that starts on its marker's line.
func TestDecodeFaultPositions(t *testing.T) {
	data := "# a comment\n" + positionDoc + "---\n" +
		"apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw}\nspec:\n  servers:\n  - hosts: [a]\n    portt: {}\n" +
		"--- {apiVersion: networking.istio.io/v1, kind: Gateway, metadata: {name: gw2}, spec: {colour: 1}}\n"
	_, errs := Decode([]byte(data), "f.yaml")
	var got []string
	for _, err := range errs {
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%v is not a *DecodeError", err)
		}
		got = append(got, de.Field+"@"+strings.SplitN(de.Error(), ": ", 2)[0])
	}
	want := []string{
		"spec.alias@f.yaml:18:3", // unknown to ServiceEntry; the JSON decoded has its keys sorted
		"spec.servers[0].portt@f.yaml:26:5",
		"spec.colour@f.yaml:27:87",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("faults at\n%v\nwant\n%v", got, want)
	}
}

// FuzzFieldPosition: whatever the text and the path, the finder answers without a panic, and
// a position it gives is in the text.
func FuzzFieldPosition(f *testing.F) {
	f.Add([]byte(positionDoc), "spec.other.location")
	f.Add([]byte("a: &x {<<: [*x]}\n"), "a.b")
	f.Add([]byte("a: &a {b: 1}\nc: &c {<<: [*a, *a, *a]}\nd: {<<: [*c, *c, *c]}\n"), "d.z")
	f.Add([]byte("- [a, {b: c}]\n"), `[0][1]["b"]`)
	f.Fuzz(func(t *testing.T, text []byte, field string) {
		line, col, ok := fieldPosition(parseNodes(text), field)
		if !ok {
			return
		}
		if line < 1 || col < 1 || line > bytes.Count(text, []byte("\n"))+1 {
			t.Fatalf("position %d:%d outside the text %q", line, col, text)
		}
	})
}
