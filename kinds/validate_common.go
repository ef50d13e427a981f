package kinds

import (
	"errors"
	"fmt"
	"net/netip"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// The semantic validation of the kinds: what istiod's own validation (Istio's
// pkg/config/validation, the ValidateXxx function of each kind's schema) refuses, the bridge
// refuses too, so that a resource istiod would drop ("empty domain name not allowed") is
// refused where it enters the bridge, with a fault that names the resource and the field,
// instead of being served and dropped downstream with a log line in istiod.
//
// Each kind's validation is plain Go over its decoded message, in validate_<kind>.go; every
// function says which Istio function it mirrors, and the messages are Istio's, so that a user
// recognises them. Where Istio's check needs what the bridge does not have (a CEL parser for
// Telemetry filters, a JWKS parser, every Envoy extension type for EnvoyFilter patches), the
// bridge checks less, never more: a resource istiod accepts must never be refused here.
// Istio's warnings are not faults: istiod accepts those resources, and so does the bridge.

// FieldError is one fault of a resource: the field, as a path in the YAML of the resource
// ("spec.ports[0].name", "metadata.name"), and what is wrong, in the words of istiod.
type FieldError struct {
	Field   string
	Message string
}

func (e FieldError) Error() string { return "field " + e.Field + ": " + e.Message }

// InvalidError is a resource that istiod's validation refuses, with its faults in the order
// of their fields.
type InvalidError struct {
	Kind   string
	Faults []FieldError
	// More counts the faults found beyond those kept (maxFaults).
	More int
}

// maxFaults bounds the faults kept of one resource: a NACK names them all, and a resource with
// thousands of bad entries must not make a message of megabytes.
const maxFaults = 20

func (e *InvalidError) Error() string {
	var b strings.Builder
	for i, f := range e.Faults {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Error())
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "; and %d more", e.More)
	}
	return b.String()
}

// Validate checks a decoded body of the kind as istiod would before accepting it. md is the
// resource's metadata: its name ("namespace/name"), labels and annotations, which istiod's
// validation reads too. It returns nil or an *InvalidError.
func (k *Kind) Validate(md *mcpapi.Metadata, spec proto.Message) error {
	if spec == nil || spec.ProtoReflect().Descriptor().FullName() != k.Message {
		return fmt.Errorf("body is not a %s", k.Message)
	}
	v := &validator{labels: md.GetLabels(), annotations: md.GetAnnotations()}
	v.name = md.GetName()
	if ns, name, ok := strings.Cut(v.name, "/"); ok {
		v.namespace, v.name = ns, name
	}
	v.metadata(md.GetName())
	k.check(v, spec)
	if len(v.faults) == 0 {
		return nil
	}
	v.sort()
	faults, more := v.faults, 0
	if len(faults) > maxFaults {
		faults, more = faults[:maxFaults:maxFaults], len(faults)-maxFaults
	}
	return &InvalidError{Kind: k.Kind, Faults: faults, More: more}
}

// validator collects the faults of one resource, as Istio's Validation does. All are kept
// until they are sorted, so that the ones reported do not depend on the order maps are walked.
type validator struct {
	namespace, name     string
	labels, annotations map[string]string
	faults              []FieldError
}

// add records err, if any, as a fault of the field at p.
func (v *validator) add(p *path, err error) {
	if err == nil {
		return
	}
	v.faults = append(v.faults, FieldError{Field: p.String(), Message: err.Error()})
}

func (v *validator) errorf(p *path, format string, args ...any) {
	v.add(p, fmt.Errorf(format, args...))
}

// sort orders the faults by field, indexes by number, keeping the order of the faults of one
// field: maps are walked in random order, and the same resource must give the same message.
func (v *validator) sort() {
	slices.SortStableFunc(v.faults, func(a, b FieldError) int { return compareFields(a.Field, b.Field) })
}

// compareFields compares field paths, runs of digits by their value: spec.ports[2] before
// spec.ports[10].
func compareFields(a, b string) int {
	for a != "" && b != "" {
		if isDigit(a[0]) && isDigit(b[0]) {
			na, nb := digitRun(a), digitRun(b)
			x, _ := strconv.Atoi(a[:na])
			y, _ := strconv.Atoi(b[:nb])
			if x != y {
				return x - y
			}
			a, b = a[na:], b[nb:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digitRun(s string) int {
	n := 0
	for n < len(s) && n < 9 && isDigit(s[n]) {
		n++
	}
	return n
}

// Istio's internal annotations, refused on configuration that users write
// (constants.AlwaysReject, InternalParentNamespace, InternalParentNames), and the dry-run
// annotation that only AuthorizationPolicy takes.
const (
	annotationAlwaysReject    = "internal.istio.io/webhook-always-reject"
	annotationParentNamespace = "internal.istio.io/parent-namespace"
	annotationParentNames     = "internal.istio.io/parents"
	annotationDryRun          = "istio.io/dry-run"
)

// metadata checks the resource's name as istiod reads it from a config source (pkg/adsc,
// mcpToPilot: every kind it reads is namespaced, and a name that is not namespace/name is
// dropped as "invalid name"), and mirrors the checks of validateMetadata that apply to every
// kind (the dry-run annotation is AuthorizationPolicy's: see validateAuthorizationPolicy).
func (v *validator) metadata(fullName string) {
	if strings.Count(fullName, "/") != 1 {
		np := metadataRoot.f("name")
		v.errorf(&np, "invalid name %s: istiod reads namespace/name", fullName)
	}
	for _, a := range [...]string{annotationAlwaysReject, annotationParentNamespace, annotationParentNames} {
		if _, ok := v.annotations[a]; ok {
			p := annotationPath(a)
			if a == annotationAlwaysReject {
				v.errorf(&p, "%q annotation found, rejecting", a)
			} else {
				v.errorf(&p, "%q annotation found, this may not be set by users", a)
			}
		}
	}
}

func annotationPath(name string) path {
	return path{up: &metadataRoot, step: stepField, name: "annotations"}.withKey(name)
}

// path is the path of a field, built only when a fault names it: validating a valid resource
// allocates nothing for paths. Each step points to its parent, which lives on the stack of the
// function that walks it.
type path struct {
	up   *path
	step uint8
	name string // the field (stepField) or the map key (stepKey)
	idx  int    // stepIndex
}

const (
	stepField = iota
	stepIndex
	stepKey
)

var (
	specRoot     = path{name: "spec"}
	metadataRoot = path{name: "metadata"}
)

func (p *path) f(name string) path { return path{up: p, step: stepField, name: name} }
func (p *path) i(i int) path       { return path{up: p, step: stepIndex, idx: i} }
func (p *path) k(key string) path  { return path{up: p, step: stepKey, name: key} }

// withKey is k for a path held by value; it copies p first.
func (p path) withKey(key string) path {
	parent := p
	return path{up: &parent, step: stepKey, name: key}
}

func (p *path) String() string {
	var b strings.Builder
	p.write(&b)
	return b.String()
}

// write writes the path, root first. It keeps no pointer to any step, so that the steps,
// which live on the stacks of the functions that walk a resource, stay there.
func (p *path) write(b *strings.Builder) {
	if p.up != nil {
		p.up.write(b)
	}
	switch p.step {
	case stepField:
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p.name)
	case stepIndex:
		b.WriteByte('[')
		b.WriteString(strconv.Itoa(p.idx))
		b.WriteByte(']')
	case stepKey:
		if plainKey(p.name) {
			b.WriteByte('.')
			b.WriteString(p.name)
		} else {
			b.WriteByte('[')
			b.WriteString(strconv.Quote(p.name))
			b.WriteByte(']')
		}
	}
}

// plainKey is a map key written .key in a path, as the file source writes them; any other is
// written ["key"].
func plainKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c)) {
			return false
		}
	}
	return true
}

// --- Names, hosts and addresses (Istio's pkg/config/labels and pkg/config/validation/agent) ---
//
// Istio checks these with regular expressions; they are written out by hand here because a
// load of 100,000 ServiceEntries checks a million of them. TestNamesAgreeWithIstioRegexps and
// FuzzNamesAgreeWithIstioRegexps hold them to Istio's expressions.

const dns1123LabelMaxLength = 63

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) }

// isDNS1123Label mirrors labels.IsDNS1123Label: [a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?, at
// most 63 characters.
func isDNS1123Label(s string) bool {
	if s == "" || len(s) > dns1123LabelMaxLength || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

// isWildcardDNS1123Label mirrors labels.IsWildcardDNS1123Label: "*", or a DNS-1123 label with
// an optional leading "*" or "*-".
func isWildcardDNS1123Label(s string) bool {
	if len(s) > dns1123LabelMaxLength {
		return false
	}
	if s == "*" {
		return true
	}
	if rest, ok := strings.CutPrefix(s, "*-"); ok && isDNS1123Label(rest) {
		return true
	}
	if rest, ok := strings.CutPrefix(s, "*"); ok && isDNS1123Label(rest) {
		return true
	}
	return isDNS1123Label(s)
}

// isQualifiedName matches Kubernetes' qualified name: (?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9].
func isQualifiedName(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// isDNSNamePrefix matches a label key's prefix without its "/": DNS-1123 labels joined by dots.
func isDNSNamePrefix(s string) bool {
	for {
		label, rest, more := strings.Cut(s, ".")
		// The labels of the prefix are matched without the 63-character bound of a DNS label.
		if label == "" || !isAlnum(label[0]) || !isAlnum(label[len(label)-1]) {
			return false
		}
		for i := 1; i < len(label)-1; i++ {
			if c := label[i]; !isAlnum(c) && c != '-' {
				return false
			}
		}
		if !more {
			return true
		}
		s = rest
	}
}

// validateTagKey mirrors labels.validateTagKey: a Kubernetes label key, an optional DNS
// prefix and "/" before a qualified name.
func validateTagKey(k string) error {
	prefix, name, hasPrefix := "", k, false
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix, name, hasPrefix = k[:i], k[i+1:], true
	}
	if !isQualifiedName(name) || hasPrefix && !isDNSNamePrefix(prefix) {
		return fmt.Errorf("invalid tag key: %q", k)
	}
	if len(prefix) > 253 {
		return fmt.Errorf("invalid tag key: %q (DNS prefix is too long)", k)
	}
	if len(name) > dns1123LabelMaxLength {
		return fmt.Errorf("invalid tag key: %q (name is too long)", k)
	}
	return nil
}

// labelsAt mirrors labels.Instance.Validate, each fault at its key.
func (v *validator) labelsAt(p *path, m map[string]string) {
	for key, value := range m {
		if err := validateTagKey(key); err != nil {
			kp := p.k(key)
			v.add(&kp, err)
		}
		if value != "" && !isQualifiedName(value) {
			kp := p.k(key)
			v.errorf(&kp, "invalid tag value: %q", value)
		}
	}
}

// checkDNS1123Preconditions mirrors agent.CheckDNS1123Preconditions.
func checkDNS1123Preconditions(name string) error {
	if len(name) > 255 {
		return fmt.Errorf("domain name %q too long (max 255)", name)
	}
	if len(name) == 0 {
		return errors.New("empty domain name not allowed")
	}
	return nil
}

// isNumber is whether strconv.Atoi accepts s. Atoi can only succeed on a sign or a digit
// first, and costs an error value per call when it fails: asked only then, since this runs
// for every host of every ServiceEntry a producer pushes.
func isNumber(s string) bool {
	if s == "" || !(s[0] == '+' || s[0] == '-' || '0' <= s[0] && s[0] <= '9') {
		return false
	}
	_, err := strconv.Atoi(s)
	return err == nil
}

// validateDNS1123Labels mirrors agent.ValidateDNS1123Labels.
func validateDNS1123Labels(domain string) error {
	top := domain[strings.LastIndexByte(domain, '.')+1:]
	if isNumber(top) {
		return fmt.Errorf("domain name %q invalid (top level domain %q cannot be all-numeric)", domain, top)
	}
	rest := domain
	for {
		label, after, more := strings.Cut(rest, ".")
		if !more && label == "" {
			return nil // a trailing dot, as in "istio.io." (and, as in Istio, the empty name)
		}
		if !isDNS1123Label(label) {
			return fmt.Errorf("domain name %q invalid (label %q invalid)", domain, label)
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// validateFQDN mirrors agent.ValidateFQDN.
func validateFQDN(fqdn string) error {
	if err := checkDNS1123Preconditions(fqdn); err != nil {
		return err
	}
	return validateDNS1123Labels(fqdn)
}

// validateWildcardDomain mirrors agent.ValidateWildcardDomain: an FQDN whose first label may be
// a wildcard.
func validateWildcardDomain(domain string) error {
	if err := checkDNS1123Preconditions(domain); err != nil {
		return err
	}
	first, rest, more := strings.Cut(domain, ".")
	if !isWildcardDNS1123Label(first) {
		return fmt.Errorf("domain name %q invalid (label %q invalid)", domain, first)
	}
	if more {
		return validateDNS1123Labels(rest)
	}
	return nil
}

// validateWildcardDomainForVirtualServiceBoundToGateway mirrors
// agent.ValidateWildcardDomainForVirtualServiceBoundToGateway: an SNI host may also be
// auto-generated, outbound_.<PORT>_._.<HOSTNAME>.
func validateWildcardDomainForVirtualServiceBoundToGateway(sni bool, domain string) error {
	if err := checkDNS1123Preconditions(domain); err != nil {
		return err
	}
	const format = "outbound_.<PORT>_._.<HOSTNAME>"
	if sni && strings.HasPrefix(domain, "outbound_") {
		parts := strings.Split(domain, "_")
		if len(parts) < 4 {
			return fmt.Errorf("domain name %s invalid, should follow '%s' format", domain, format)
		}
		port, hostname := strings.Trim(parts[1], "."), strings.Trim(parts[3], ".")
		if parts[0] != "outbound" {
			return fmt.Errorf("domain name %q invalid (label %q invalid)", domain, parts[0])
		}
		// Istio's expressions ([0-9].*) and ([a-zA-Z].*) are unanchored: one such character anywhere.
		if !strings.ContainsAny(port, "0123456789") {
			return fmt.Errorf("domain name %q invalid (label %q invalid). should follow %s format", domain, port, format)
		}
		if !strings.ContainsFunc(hostname, func(r rune) bool { return r < 0x80 && isAlnum(byte(r)) && !isDigit(byte(r)) }) {
			return fmt.Errorf("domain name %q invalid (label %q invalid). should follow %s format", domain, hostname, format)
		}
		return nil
	}
	return validateWildcardDomain(domain)
}

// validatePartialWildCard mirrors agent.ValidatePartialWildCard.
func validatePartialWildCard(host string) error {
	if strings.Contains(host, "*") && len(host) != 1 && !strings.HasPrefix(host, "*.") {
		return fmt.Errorf("partial wildcard %q not allowed", host)
	}
	return nil
}

// validatePort mirrors agent.ValidatePort.
func validatePort(port int) error {
	if 1 <= port && port <= 65535 {
		return nil
	}
	return fmt.Errorf("port number %d must be in the range 1..65535", port)
}

// validatePortName mirrors ValidatePortName.
func validatePortName(name string) error {
	if !isDNS1123Label(name) {
		return fmt.Errorf("invalid port name: %s", name)
	}
	return nil
}

// isValidIPAddress mirrors netutil.IsValidIPAddress.
func isValidIPAddress(addr string) bool {
	_, err := netip.ParseAddr(addr)
	return err == nil
}

// validateIPAddress mirrors agent.ValidateIPAddress.
func validateIPAddress(addr string) error {
	if !isValidIPAddress(addr) {
		return fmt.Errorf("%v is not a valid IP", addr)
	}
	return nil
}

// validateIPSubnet mirrors agent.ValidateIPSubnet: an address, or a block in CIDR notation.
func validateIPSubnet(subnet string) error {
	if strings.Count(subnet, "/") == 1 {
		if _, err := netip.ParsePrefix(subnet); err != nil {
			return fmt.Errorf("%v is not a valid CIDR block", subnet)
		}
		return nil
	}
	return validateIPAddress(subnet)
}

// validateUnixAddress mirrors ValidateUnixAddress.
func validateUnixAddress(addr string) error {
	if len(addr) == 0 {
		return errors.New("unix address must not be empty")
	}
	if strings.HasPrefix(addr, "@") {
		return nil // an abstract socket
	}
	if !pathpkg.IsAbs(addr) || strings.HasSuffix(addr, "/") {
		return fmt.Errorf("%s is not an absolute path to a file", addr)
	}
	return nil
}

const unixAddressPrefix = "unix://"

// validateDuration mirrors agent.ValidateDuration: at least 1ms, to the millisecond.
func validateDuration(pd *durationpb.Duration) error {
	dur := pd.AsDuration()
	if dur < time.Millisecond {
		return errors.New("duration must be greater than 1ms")
	}
	if dur%time.Millisecond != 0 {
		return errors.New("only durations to ms precision are supported")
	}
	return nil
}

// durationAt checks a duration that is set.
func (v *validator) durationAt(p *path, d *durationpb.Duration) {
	if d != nil {
		v.add(p, validateDuration(d))
	}
}

// validatePercent mirrors ValidatePercent.
func validatePercent(val int32) error {
	if val < 0 || val > 100 {
		return fmt.Errorf("percentage %v is not in range 0..100", val)
	}
	return nil
}

// --- Protocols (Istio's pkg/config/protocol) ---

// protocol is Istio's protocol.Instance, as protocol.Parse reads a port's protocol.
type protocol uint8

const (
	protoUnsupported protocol = iota
	protoTCP
	protoUDP
	protoGRPC
	protoGRPCWeb
	protoHTTP
	protoHTTPProxy
	protoHTTP2
	protoHTTPS
	protoTLS
	protoMongo
	protoRedis
	protoMySQL
)

// parseProtocol mirrors protocol.Parse, which is case-insensitive. (Istio's Parse also lists
// "DoubleHBONE", in a switch on the lower-cased name that it can never match.)
func parseProtocol(s string) protocol {
	switch strings.ToLower(s) {
	case "tcp":
		return protoTCP
	case "udp":
		return protoUDP
	case "grpc":
		return protoGRPC
	case "grpc-web":
		return protoGRPCWeb
	case "http":
		return protoHTTP
	case "http_proxy":
		return protoHTTPProxy
	case "http2":
		return protoHTTP2
	case "https":
		return protoHTTPS
	case "tls":
		return protoTLS
	case "mongo":
		return protoMongo
	case "redis":
		return protoRedis
	case "mysql":
		return protoMySQL
	}
	return protoUnsupported
}

func (p protocol) isHTTP() bool {
	return p == protoHTTP || p == protoHTTP2 || p == protoHTTPProxy || p == protoGRPC || p == protoGRPCWeb
}

func (p protocol) isTLS() bool { return p == protoHTTPS || p == protoTLS }

// validateProtocol mirrors ValidateProtocol: empty (sniffed) or a protocol Istio knows.
func validateProtocol(s string) error {
	if s != "" && parseProtocol(s) == protoUnsupported {
		return fmt.Errorf("unsupported protocol: %s", s)
	}
	return nil
}

// --- Selectors, target references and exportTo ---

// alphaWorkloadSelectorAt mirrors ValidateAlphaWorkloadSelector (the networking kinds'
// selector); an empty selector is a warning there, not a fault.
func (v *validator) alphaWorkloadSelectorAt(p *path, matchLabels map[string]string) {
	for key, value := range matchLabels {
		kp := p.k(key)
		if key == "" {
			v.errorf(&kp, "empty key is not supported in selector: %q", key+"="+value)
		}
		if strings.Contains(key, "*") || strings.Contains(value, "*") {
			v.errorf(&kp, "wildcard is not supported in selector: %q", key+"="+value)
		}
	}
}

// workloadSelectorAt mirrors validateWorkloadSelector (istio.type.v1beta1.WorkloadSelector):
// the same rules, on matchLabels.
func (v *validator) workloadSelectorAt(p *path, s *typev1beta1.WorkloadSelector) {
	if s == nil {
		return
	}
	ml := p.f("matchLabels")
	v.alphaWorkloadSelectorAt(&ml, s.GetMatchLabels())
}

// oneOfSelectorTypeAt mirrors validateOneOfSelectorType.
func (v *validator) oneOfSelectorTypeAt(p *path, selector *typev1beta1.WorkloadSelector, targetRef *typev1beta1.PolicyTargetReference, targetRefs []*typev1beta1.PolicyTargetReference) {
	set := 0
	if selector != nil {
		set++
	}
	if targetRef != nil {
		set++
	}
	if len(targetRefs) > 0 {
		set++
	}
	if set > 1 {
		v.errorf(p, "only one of targetRefs or workloadSelector can be set")
	}
}

// allowedTargetRefs are the (group, kind) a policy may target, by validatePolicyTargetReference;
// the core group is written "" in a reference.
var allowedTargetRefs = [...][2]string{
	{"", "Service"},
	{"networking.istio.io", "ServiceEntry"},
	{"gateway.networking.k8s.io", "Gateway"},
	{"gateway.networking.k8s.io", "GatewayClass"},
}

// targetRefAt mirrors validatePolicyTargetReference.
func (v *validator) targetRefAt(p *path, r *typev1beta1.PolicyTargetReference) {
	if r == nil {
		return
	}
	if r.GetName() == "" {
		np := p.f("name")
		v.errorf(&np, "targetRef name must be set")
	}
	if r.GetNamespace() != "" {
		np := p.f("namespace")
		v.errorf(&np, "targetRef namespace must not be set; cross namespace referencing is not supported")
	}
	group := r.GetGroup()
	if group == "core" {
		group = ""
	}
	if !slices.Contains(allowedTargetRefs[:], [2]string{group, r.GetKind()}) {
		kp := p.f("kind")
		v.errorf(&kp, "targetRef must be to one of [core/v1/Service networking.istio.io/v1/ServiceEntry gateway.networking.k8s.io/v1/Gateway gateway.networking.k8s.io/v1/GatewayClass] but was %s/%s",
			r.GetGroup(), r.GetKind())
	}
}

// policySelectionAt checks the selector, targetRef and targetRefs of a policy kind, as the
// ValidateXxx of AuthorizationPolicy, RequestAuthentication, Telemetry and WasmPlugin do.
func (v *validator) policySelectionAt(selector *typev1beta1.WorkloadSelector, targetRef *typev1beta1.PolicyTargetReference, targetRefs []*typev1beta1.PolicyTargetReference) {
	v.oneOfSelectorTypeAt(&specRoot, selector, targetRef, targetRefs)
	sp := specRoot.f("selector")
	v.workloadSelectorAt(&sp, selector)
	tp := specRoot.f("targetRef")
	v.targetRefAt(&tp, targetRef)
	tps := specRoot.f("targetRefs")
	for i, r := range targetRefs {
		ip := tps.i(i)
		v.targetRefAt(&ip, r)
	}
}

// exportToAt mirrors validateExportTo.
func (v *validator) exportToAt(p *path, exportTo []string, isServiceEntry, isDestinationRuleWithSelector bool) {
	if len(exportTo) == 0 {
		return
	}
	set := make(map[string]bool, len(exportTo))
	for i, e := range exportTo {
		ip := p.i(i)
		key := e
		if e == "." {
			key = v.namespace // "." and the namespace itself are the same entry
		}
		switch {
		case set[key] && key != e:
			v.errorf(&ip, "duplicate entries in exportTo: . and current namespace %s", v.namespace)
		case set[key]:
			v.errorf(&ip, "duplicate entries in exportTo for entry %s", e)
		case isServiceEntry && e == "~":
			set[key] = true
		default:
			if err := validateVisibility(key); err != nil {
				v.add(&ip, err)
			} else {
				set[key] = true
			}
		}
	}
	if isDestinationRuleWithSelector && len(set) > 0 {
		if set[v.namespace] {
			if len(set) > 1 {
				v.errorf(p, "destination rule with workload selector cannot have multiple entries in exportTo")
			}
		} else {
			v.errorf(p, "destination rule with workload selector cannot have exportTo beyond current namespace")
		}
	}
	if set["*"] && len(exportTo) > 1 {
		v.errorf(p, "cannot have both public (*) and non-public exportTo values for a resource")
	}
	if set["~"] && len(exportTo) > 1 {
		v.errorf(p, "cannot export service entry to no one (~) and someone")
	}
}

// validateVisibility mirrors visibility.Instance.Validate.
func validateVisibility(e string) error {
	switch e {
	case ".", "*":
		return nil
	case "~":
		return errors.New("exportTo ~ (none) is not allowed for Istio configuration objects")
	}
	if !isDNS1123Label(e) {
		return errors.New("only .,*, or a valid DNS 1123 label is allowed as exportTo entry")
	}
	return nil
}
