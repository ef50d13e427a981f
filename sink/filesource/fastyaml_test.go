package filesource

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// sameJSON decodes two JSON texts (numbers exactly) and compares them.
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	decode := func(js []byte) any {
		d := json.NewDecoder(bytes.NewReader(js))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("invalid JSON %s: %v", js, err)
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

// FuzzFastYAMLAgreesWithYAML: whatever the fast path accepts, the general decoder accepts too
// and reads as the same JSON value.
func FuzzFastYAMLAgreesWithYAML(f *testing.F) {
	f.Add([]byte(reviewsSE))
	f.Add([]byte("a: 1\nb:\n- x\n- y: 2\n  z: '3'\nc: \"d\"\n"))
	f.Add([]byte("a:\n  b:\n    - 10.0.0.1\n    - yes\n"))
	f.Add([]byte("key: value # comment\n"))
	f.Add([]byte("- - a\n  - b\n- c\n"))
	f.Add([]byte("a: 0777\nb: 1e3\nc: .5\nd: ~\ne: 2001-12-14\n"))
	f.Add([]byte("a: true\nb: False\nc: TRUE\nd:\n- false\n- 'true'\n- yes\ne: tRue\n"))
	f.Add([]byte("a: 10s\nb: 1h30m\nc: 250ms\nd: 5xx,reset\ne: 0x1F\nf: 0_x1F\ng: 1_000\nh: 2001-12-14t21:59:43.10-05:00\n"))
	f.Add([]byte("a: 1.5s\nb: 0b101\nc: 0o17\nd: 12e\ne: 1:20\nf: 7c9d2e0b-1111\ng: 1f\nh: 3 4\n5x: y\n"))
	f.Add([]byte("hosts:\n- ./*\n- ./x.y\n- .5\n- .inf\n- ./\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := fastYAMLToJSON(data)
		if !ok {
			return
		}
		general, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			t.Fatalf("fast path accepted what the decoder refuses (%v):\n%s\nfast: %s", err, data, fast)
		}
		if !sameJSON(t, fast, general) {
			t.Fatalf("fast path reads\n%s\nas %s; the decoder as %s", data, fast, general)
		}
	})
}

// TestFastYAMLAgreesOnTheExamples: every document of the examples and golden inputs that the
// fast path accepts reads as the general decoder reads it, and plain Istio config takes it.
func TestFastYAMLAgreesOnTheExamples(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	more, _ := filepath.Glob("../../translate/envoy/testdata/*/*.yaml")
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no example files")
	}
	fast := 0
	docs := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range splitDocuments(data) {
			if isBlank(d.text) {
				continue
			}
			docs++
			js, ok := fastYAMLToJSON(d.text)
			if !ok {
				continue
			}
			fast++
			general, err := yaml.YAMLToJSONStrict(d.text)
			if err != nil || !sameJSON(t, js, general) {
				t.Fatalf("%s line %d: fast %s, general %s (%v)", file, d.line, js, general, err)
			}
		}
	}
	if fast*2 < docs {
		t.Errorf("the fast path took %d of %d example documents", fast, docs)
	}
}

// TestFastYAMLTakesPlainServiceEntries: a ServiceEntry as operators write them (and as the
// scale benchmark generates them) is read by the fast path.
func TestFastYAMLTakesPlainServiceEntries(t *testing.T) {
	doc := strings.TrimPrefix(reviewsSE, "---\n")
	if _, ok := fastYAMLToJSON([]byte(doc)); !ok {
		t.Fatalf("fast path refused:\n%s", doc)
	}
}

// TestFastYAMLLongKeys: YAML bounds an implicit key to 1024 characters; the fast path refuses
// a longer one, which the general decoder then reports.
func TestFastYAMLLongKeys(t *testing.T) {
	for _, n := range []int{1024, 1025} {
		for _, doc := range []string{"%s: v\n", "a:\n  %s: v\n", "- %s: v\n"} {
			doc = fmt.Sprintf(doc, strings.Repeat("k", n))
			_, fast := fastYAMLToJSON([]byte(doc))
			_, err := yaml.YAMLToJSONStrict([]byte(doc))
			if fast && err != nil {
				t.Errorf("key of %d: the fast path took what the decoder rejects (%v)", n, err)
			}
			if n == 1024 && !fast {
				t.Errorf("key of %d: the fast path refused", n)
			}
		}
	}
}
