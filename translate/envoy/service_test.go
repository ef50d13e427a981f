package envoy

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// istioHostPattern is what Istio accepts as a host (DNS labels, optionally behind "*.", or
// "*"), as the expression validHost replaced.
var istioHostPattern = regexp.MustCompile(`^(\*|(\*\.)?[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?)*)$`)

// TestValidHostIsThePattern holds validHost to the expression: random strings over the
// characters that matter (and some that do not belong), and the edges written out.
func TestValidHostIsThePattern(t *testing.T) {
	check := func(t interface{ Fatalf(string, ...any) }, h string) {
		want := len(h) <= 253 && istioHostPattern.MatchString(h)
		if got := validHost(h); got != want {
			t.Fatalf("validHost(%q) = %v, the pattern says %v", h, got, want)
		}
	}
	for _, h := range []string{"", "*", "**", "*.", ".", "*.a", "*a", "a*", "a.*", "a.b.c", "a..b", "a.", ".a",
		"-a", "a-", "a-b", "_a", "a_", "a_b", "a\n", "A9.z-0_Z.example", "*.*.a", "a b", "ä.example",
		strings.Repeat("a", 253), strings.Repeat("a", 254), "*." + strings.Repeat("a", 251), "*." + strings.Repeat("a", 252)} {
		check(t, h)
	}
	rapid.Check(t, func(rt *rapid.T) {
		h := rapid.StringOfN(rapid.SampledFrom([]rune("aZ09-_.*. \n/é")), 0, 20, -1).Draw(rt, "host")
		check(rt, h)
	})
}
