package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Most hosts of a large mesh have no VirtualService: their virtual host is istiod's default
// route to their own cluster, the same message for every host but for the cluster's name and
// the decorator's operation. Building, validating and marshalling it per host was 7% of the
// bridge's CPU at 1,000,000 ServiceEntries. defaultRouteRest writes the encoding of that
// virtual host's rest (routeRests) from parts encoded once (wireTemplate), exactly as the
// message path would; TestDefaultRouteRestIsTheMarshalledMessage holds the two together.
//
// Validation: the constant parts were validated, as a whole virtual host, when they were
// encoded; what varies is checked here as Envoy's rules check it: a name, at least one
// domain, domains without NUL, CR or LF, a cluster and an operation, all UTF-8 (as
// proto.Marshal requires).

// Field numbers of the varying fields.
const (
	routeActionClusterField = 1 // envoy.config.route.v3.RouteAction.cluster
	routeRouteField         = 2 // envoy.config.route.v3.Route.route (the action)
	routeDecoratorField     = 5 // envoy.config.route.v3.Route.decorator
	decoratorOperationField = 1 // envoy.config.route.v3.Decorator.operation
	virtualHostRoutesField  = 3 // envoy.config.route.v3.VirtualHost.routes
	placeholderCluster      = "cluster"
	placeholderOperation    = "operation"
)

// wireTemplate is a message's encoding with holes for fields whose values vary: the
// encoding of the message with other values in those fields is its parts with each hole's
// field between them, in order. protobuf-go writes a message's fields in an order that
// depends on the message's type alone (newWireTemplate checks that each hole is one field).
type wireTemplate struct{ parts [][]byte }

// newWireTemplate splits the encoding of m, whose hole fields are set (once each), at
// those fields, which must appear in the order given.
func newWireTemplate(m proto.Message, holes ...protowire.Number) (wireTemplate, error) {
	enc, err := deterministic.Marshal(m)
	if err != nil {
		return wireTemplate{}, err
	}
	return newWireTemplateOf(enc, holes...)
}

// newWireTemplateOf is newWireTemplate of a message's encoding.
func newWireTemplateOf(enc []byte, holes ...protowire.Number) (wireTemplate, error) {
	var t wireTemplate
	start, next := 0, 0
	for b := enc; len(b) > 0; {
		at := len(enc) - len(b)
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return wireTemplate{}, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return wireTemplate{}, protowire.ParseError(m)
		}
		b = b[n+m:]
		if next < len(holes) && num == holes[next] {
			t.parts = append(t.parts, enc[start:at])
			start = len(enc) - len(b)
			next++
		} else if slices.Contains(holes, num) {
			return wireTemplate{}, fmt.Errorf("field %d: out of order, or more than once", num)
		}
	}
	if next != len(holes) {
		return wireTemplate{}, fmt.Errorf("fields %v: %d found", holes, next)
	}
	return wireTemplate{parts: append(t.parts, enc[start:])}, nil
}

// size is the size of the constant parts.
func (t wireTemplate) size() int {
	n := 0
	for _, p := range t.parts {
		n += len(p)
	}
	return n
}

// defaultRouteParts are the default route's virtual host rest's templates.
var defaultRouteParts = func() (p struct {
	action, route, vhost wireTemplate
	err                  error
}) {
	r := defaultRouteFor(placeholderCluster, placeholderOperation)
	vh := &routepb.VirtualHost{Name: "example.com:80", Domains: []string{"example.com"}, Routes: []*routepb.Route{r},
		IncludeRequestAttemptCount: includeRequestAttemptCount}
	if p.err = vh.ValidateAll(); p.err != nil {
		return p
	}
	vh.Name, vh.Domains = "", nil
	if p.vhost, p.err = newWireTemplate(vh, virtualHostRoutesField); p.err != nil {
		return p
	}
	// protobuf-go writes a oneof (the action) after the other fields.
	if p.route, p.err = newWireTemplate(r, routeDecoratorField, routeRouteField); p.err != nil {
		return p
	}
	p.action, p.err = newWireTemplate(r.GetRoute(), routeActionClusterField)
	return p
}()

// defaultRouteRest is the rest (routeRests) of a host's virtual host whose only route is its
// default route to cluster, without a hash policy; name and domains are its head's, checked
// here as the virtual host's validation would check them.
func defaultRouteRest(name string, domains []string, cluster, operation string) ([]byte, error) {
	if err := checkDefaultRoute(name, domains, cluster, operation); err != nil {
		return nil, err
	}
	s := plainDefaultRoute{cluster, operation}
	size := defaultRouteRestSize(s)
	b := appendDefaultRouteRest(make([]byte, 0, size), s)
	if len(b) != size {
		return nil, fmt.Errorf("virtual host %s: encoded %d bytes, sized %d", name, len(b), size)
	}
	return b, nil
}

// checkDefaultRoute checks what defaultRouteRest writes that varies.
func checkDefaultRoute(name string, domains []string, cluster, operation string) error {
	if defaultRouteParts.err != nil {
		return defaultRouteParts.err
	}
	if err := checkVirtualHostHead(name, domains); err != nil {
		return err
	}
	if cluster == "" || operation == "" || !utf8.ValidString(cluster) || !utf8.ValidString(operation) {
		return errors.New("the default route's cluster and operation must be non-empty UTF-8")
	}
	return nil
}

// defaultRouteSurelyValid tells, without making them, that checkDefaultRoute passes the
// default route of host on a port whose virtual host is name: its gRPC domains are the
// sidecar's domains each also with ":PORT" ("[ADDRESS]:PORT", and "ADDRESS.:PORT" for an
// address), its cluster "outbound|PORT||HOST" and its operation "HOST:PORT/*", all valid
// exactly when the sidecar's domains and the host are. False means only: check in full.
// TestDefaultRouteSurelyValidOnlyWhenTheCheckPasses holds the two together.
func defaultRouteSurelyValid(name string, sidecarDomains []string, host string) bool {
	// The host's UTF-8 is checked with the name, "HOST:PORT".
	return defaultRouteParts.err == nil && host != "" && checkVirtualHostHead(name, sidecarDomains) == nil
}

// defaultRouteStrings are the default route's varying strings, written in place.
type defaultRouteStrings interface {
	clusterLen() int
	appendCluster([]byte) []byte
	operationLen() int
	appendOperation([]byte) []byte
}

// plainDefaultRoute is a default route's cluster and operation as strings.
type plainDefaultRoute struct{ cluster, operation string }

func (d plainDefaultRoute) clusterLen() int                 { return len(d.cluster) }
func (d plainDefaultRoute) appendCluster(b []byte) []byte   { return append(b, d.cluster...) }
func (d plainDefaultRoute) operationLen() int               { return len(d.operation) }
func (d plainDefaultRoute) appendOperation(b []byte) []byte { return append(b, d.operation...) }

// defaultTail is the default route of a host's sidecar virtual host on a port, to the
// host's cluster (ClusterName(port, "", host)) with the operation defaultRouteOperation: what
// a port's route configuration gathers for most hosts of a large mesh. The translator keeps
// it as the host and port alone and writes its bytes as it assembles the port's route
// configuration: kept as bytes it was a third of what the translator held per host. The zero
// value (no host) is no default route.
type defaultTail struct {
	host string
	port uint32
}

// restSize is the size of its rest's encoding (defaultRouteRest).
func (d defaultTail) restSize() int { return defaultRouteRestSize(d) }

// appendRest writes its rest's encoding.
func (d defaultTail) appendRest(b []byte) []byte { return appendDefaultRouteRest(b, d) }

func (d defaultTail) clusterLen() int {
	return len("outbound|") + decimalLen(d.port) + len("||") + len(d.host)
}

func (d defaultTail) appendCluster(b []byte) []byte {
	b = append(b, "outbound|"...)
	b = strconv.AppendUint(b, uint64(d.port), 10)
	return append(append(b, "||"...), d.host...)
}

func (d defaultTail) operationLen() int {
	n := len(d.host) + len(":") + decimalLen(d.port) + len("/*")
	if strings.Contains(d.host, ":") {
		n += len("[]")
	}
	return n
}

func (d defaultTail) appendOperation(b []byte) []byte {
	if strings.Contains(d.host, ":") {
		b = append(append(append(b, '['), d.host...), ']')
	} else {
		b = append(b, d.host...)
	}
	b = strconv.AppendUint(append(b, ':'), uint64(d.port), 10)
	return append(b, "/*"...)
}

func decimalLen(n uint32) int {
	l := 1
	for ; n >= 10; n /= 10 {
		l++
	}
	return l
}

// defaultRouteRestSize is the size of appendDefaultRouteRest's encoding.
func defaultRouteRestSize[S defaultRouteStrings](s S) int {
	p := &defaultRouteParts
	actionLen := p.action.size() + messageField(routeActionClusterField, s.clusterLen())
	decoratorLen := messageField(decoratorOperationField, s.operationLen())
	routeLen := p.route.size() + messageField(routeRouteField, actionLen) + messageField(routeDecoratorField, decoratorLen)
	return p.vhost.size() + messageField(virtualHostRoutesField, routeLen)
}

// appendDefaultRouteRest writes the default route's virtual host rest of s's cluster and
// operation from the parts encoded once (defaultRouteParts, which must have no error).
func appendDefaultRouteRest[S defaultRouteStrings](b []byte, s S) []byte {
	p := &defaultRouteParts
	actionLen := p.action.size() + messageField(routeActionClusterField, s.clusterLen())
	decoratorLen := messageField(decoratorOperationField, s.operationLen())
	routeLen := p.route.size() + messageField(routeRouteField, actionLen) + messageField(routeDecoratorField, decoratorLen)
	b = append(b, p.vhost.parts[0]...)
	b = appendTagLen(b, virtualHostRoutesField, routeLen)
	b = append(b, p.route.parts[0]...)
	b = appendTagLen(b, routeDecoratorField, decoratorLen)
	b = s.appendOperation(appendTagLen(b, decoratorOperationField, s.operationLen()))
	b = append(b, p.route.parts[1]...)
	b = appendTagLen(b, routeRouteField, actionLen)
	b = append(b, p.action.parts[0]...)
	b = s.appendCluster(appendTagLen(b, routeActionClusterField, s.clusterLen()))
	b = append(b, p.action.parts[1]...)
	b = append(b, p.route.parts[2]...)
	return append(b, p.vhost.parts[1]...)
}

// checkVirtualHostHead checks a virtual host's name and domains as Envoy's validation does
// (a name; at least one domain; no NUL, CR or LF in a domain) and as proto.Marshal does
// (UTF-8).
func checkVirtualHostHead(name string, domains []string) error {
	if name == "" || !utf8.ValidString(name) {
		return fmt.Errorf("virtual host name %q: must be non-empty UTF-8", name)
	}
	if len(domains) == 0 {
		return fmt.Errorf("virtual host %s: no domains", name)
	}
	for i, d := range domains {
		if strings.ContainsAny(d, "\x00\r\n") || !utf8.ValidString(d) {
			return fmt.Errorf("virtual host %s: domains[%d] %q: NUL, CR or LF, or not UTF-8", name, i, d)
		}
	}
	return nil
}

// Field numbers of a virtual host's head.
const (
	virtualHostNameField    = 1 // envoy.config.route.v3.VirtualHost.name
	virtualHostDomainsField = 2 // envoy.config.route.v3.VirtualHost.domains
)

// virtualHostHead is the encoding of VirtualHost{name, domains}, the head of a virtual host
// (see portVhost): written directly, as proto.Marshal writes it, without the message (over
// 400 bytes to allocate, per host and kind of client, at a million hosts). What proto.Marshal
// refuses, a string that is not UTF-8, is handed to it for its error.
// TestVirtualHostHeadIsTheMarshalledMessage holds the two together.
func virtualHostHead(name string, domains []string) ([]byte, error) {
	size := 0
	if name != "" {
		size += protowire.SizeTag(virtualHostNameField) + protowire.SizeBytes(len(name))
	}
	valid := utf8.ValidString(name)
	for _, d := range domains {
		size += protowire.SizeTag(virtualHostDomainsField) + protowire.SizeBytes(len(d))
		valid = valid && utf8.ValidString(d)
	}
	if !valid {
		return deterministic.Marshal(&routepb.VirtualHost{Name: name, Domains: domains})
	}
	out := make([]byte, 0, size)
	if name != "" {
		out = protowire.AppendTag(out, virtualHostNameField, protowire.BytesType)
		out = protowire.AppendString(out, name)
	}
	for _, d := range domains {
		out = protowire.AppendTag(out, virtualHostDomainsField, protowire.BytesType)
		out = protowire.AppendString(out, d)
	}
	return out, nil
}
