package filesource

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	f.Add([]byte("a: x\u2028y\nb: x\u0085y\nc: 'x\u2029y'\n"))
	f.Add([]byte("a: x\u2028  b: c\n"))
	f.Add([]byte("- x\u0085- y\n"))
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

// printableByByte is printable's definition for ASCII, one byte at a time: the reference its
// eight-byte check is held to.
func printableByByte(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// TestPrintableASCII8IsTheByteCheck: for every byte value at every place of a word of
// printable ASCII, and for random words, the eight-byte check says what the byte check says
// (a borrow or carry between bytes would make one wrong).
func TestPrintableASCII8IsTheByteCheck(t *testing.T) {
	check := func(word []byte) {
		t.Helper()
		if got, want := printableASCII8(binary.LittleEndian.Uint64(word)), printableByByte(word); got != want {
			t.Fatalf("% x: %v, want %v", word, got, want)
		}
	}
	for _, fill := range []byte{0x20, 0x21, 0x7e, 'a'} {
		for at := range 8 {
			for v := range 256 {
				word := bytes.Repeat([]byte{fill}, 8)
				word[at] = byte(v)
				check(word)
				// and with a byte just outside the range below it, for borrows upward
				if at > 0 {
					word[at-1] = 0x1f
					check(word)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		word := binary.LittleEndian.AppendUint64(nil, r.Uint64())
		for i := range word { // mostly printable, as config files are
			if r.IntN(4) > 0 {
				word[i] = 0x20 + word[i]%0x5f
			}
		}
		check(word)
	}
}

// TestPrintableReadsLinesOfAnyLength: lines that mix ASCII, other UTF-8 and a forbidden
// character at each place, of lengths around the eight-byte steps, are judged as byte by
// byte (for ASCII) and as utf8 does (for the rest).
func TestPrintableReadsLinesOfAnyLength(t *testing.T) {
	for n := range 40 {
		line := []byte(strings.Repeat("a", n))
		if !printable(string(line)) {
			t.Fatalf("%q: not printable", line)
		}
		for at := range n {
			for _, bad := range []byte{0x00, 0x09, 0x0d, 0x1f, 0x7f, 0x80, 0xff} {
				c := bytes.Clone(line)
				c[at] = bad
				if printable(string(c)) {
					t.Fatalf("%q: printable, with %#x at %d", c, bad, at)
				}
			}
			c := append(bytes.Clone(line[:at]), append([]byte("é"), line[at:]...)...)
			if !printable(string(c)) {
				t.Fatalf("%q: not printable", c)
			}
		}
	}
}

// TestFastYAMLLeavesNonASCIILineBreaksToTheDecoder: NEL, U+2028 and U+2029 break lines for the
// YAML decoder (YAML 1.1); the fast parser, which reads lines at '\n', took them for a
// scalar's characters and read "- x<NEL>- y" as ["x- y"] where the decoder reads
// ["x", true]. It now leaves such documents to the decoder.
func TestFastYAMLLeavesNonASCIILineBreaksToTheDecoder(t *testing.T) {
	for _, doc := range []string{"- x\u0085- y\n", "a: x\u2028y\n", "a: 'x\u2029y'\n", "a: b\u0085\n"} {
		if js, ok := fastYAMLToJSON([]byte(doc)); ok {
			t.Errorf("%q: the fast path read it, as %s", doc, js)
		}
	}
	if _, ok := fastYAMLToJSON([]byte("a: x\u00a0y é\n")); !ok {
		t.Error("a line with other characters past ASCII is refused")
	}
}
