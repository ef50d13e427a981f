package zksource

import (
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"
)

const (
	maxLabel = 63  // a DNS-1123 label, a Kubernetes label name or value
	maxHost  = 253 // a DNS-1123 subdomain: the host is also the resource's name
	// hashLen is the length of the hash suffix that keeps a shortened or emptied label
	// unique: 8 hex digits of the label's source text.
	hashLen = 8
)

// hostLabel turns any text into one DNS-1123 label: ASCII letters lower-cased, digits kept,
// everything else a '-', dashes trimmed from both ends. Text that leaves nothing ("__", "世界")
// becomes "x" and a hash of it; a label longer than 63 characters is cut and ends with a hash
// of the whole text, so that two long names that differ only at their ends stay two labels.
func hostLabel(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b = append(b, c)
		case 'A' <= c && c <= 'Z':
			b = append(b, c+'a'-'A')
		default:
			b = append(b, '-')
		}
	}
	out := strings.Trim(string(b), "-")
	switch {
	case out == "":
		return "x" + hash8(s)
	case len(out) > maxLabel:
		return strings.TrimRight(out[:maxLabel-hashLen-1], "-") + "-" + hash8(s)
	}
	return out
}

func hash8(s string) string { return fmt.Sprintf("%08x", uint32(xxhash.Sum64String(s))) }

// dottedLabels turns a dotted name (a Java interface, a service name) into labels, one per
// dot-separated part, each as hostLabel makes it.
func dottedLabels(s string) []string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = hostLabel(p)
	}
	return parts
}

// dubboHost is the host of a Dubbo service: the interface's parts, then "v-VERSION" and
// "g-GROUP" when the providers declare them, then the protocol when it is not dubbo, then
// "dubbo". See the package documentation.
func dubboHost(iface string, k dubboKey) string {
	labels := dottedLabels(iface)
	if k.version != "" {
		labels = append(labels, hostLabel("v-"+k.version))
	}
	if k.group != "" {
		labels = append(labels, hostLabel("g-"+k.group))
	}
	if k.scheme != "dubbo" {
		labels = append(labels, hostLabel(k.scheme))
	}
	return strings.Join(append(labels, "dubbo"), ".")
}

// springHost is the host of a Spring Cloud service: its name's parts, then "spring".
func springHost(name string) string {
	return strings.Join(append(dottedLabels(name), "spring"), ".")
}

// isDNSLabel is whether s is a DNS-1123 label: lower-case letters, digits and '-', starting
// and ending with a letter or digit, at most 63 characters.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > maxLabel || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isDNSSubdomain is whether s is DNS-1123 labels joined by dots, at most 253 characters.
func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > maxHost {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !isDNSLabel(label) {
			return false
		}
	}
	return true
}

// labelsOf keeps the pairs that are valid Kubernetes labels (a key of an optional DNS-1123
// subdomain prefix and a name of at most 63 characters, a value of at most 63): Istio accepts
// those on an endpoint, and they are what a DestinationRule subset or an AuthorizationPolicy
// can select on. The others are left out, whatever they are; nil when none is kept.
func labelsOf(pairs map[string]string) map[string]string {
	var out map[string]string
	for k, v := range pairs {
		if !isLabelKey(k) || !isLabelValue(v) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(pairs))
		}
		out[k] = v
	}
	return out
}

func isLabelKey(k string) bool {
	prefix, name, ok := strings.Cut(k, "/")
	if !ok {
		return isQualifiedName(k)
	}
	return isDNSSubdomain(prefix) && isQualifiedName(name)
}

// isLabelValue is whether v is empty or a qualified name.
func isLabelValue(v string) bool { return v == "" || isQualifiedName(v) }

// isQualifiedName is Kubernetes' label name: at most 63 characters of letters, digits, '-',
// '_' and '.', beginning and ending with a letter or a digit.
func isQualifiedName(s string) bool {
	if s == "" || len(s) > maxLabel || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
