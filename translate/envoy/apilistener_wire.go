package envoy

import (
	"errors"
	"fmt"
	"unicode/utf8"

	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// A proxyless gRPC client's API listener (apiListener) is built for every HTTP host and port
// of the mesh, and all of them are the same message but for three strings and a port: at
// 1,000,000 hosts, building, validating and marshalling it was a twentieth of the bridge's
// CPU. apiListenerWire writes its encoding directly from parts encoded once, exactly as a
// deterministic proto.Marshal of apiListener's message would (protobuf-go writes fields in
// the order of the generated struct: by number, a oneof's after the others, and a oneof's
// set scalar even when zero); TestAPIListenerEncodingIsTheMarshalledMessage holds the two
// together.
//
// Validation: the constant parts were validated, as a whole listener, when they were encoded;
// what varies is the name (the HCM's stat prefix; non-empty), the address (non-empty) and the
// port, which Envoy's rules bound to 65535; strings must be UTF-8, as proto.Marshal requires.

// Field numbers the encoding writes (the Address's are endpoints_wire.go's).
const (
	listenerNameField        = 1  // envoy.config.listener.v3.Listener.name
	listenerAddressField     = 2  // .address
	listenerAPIListenerField = 19 // .api_listener
	apiListenerAnyField      = 1  // envoy.config.listener.v3.ApiListener.api_listener
	anyTypeURLField          = 1  // google.protobuf.Any.type_url
	anyValueField            = 2  // .value
	hcmStatPrefixField       = 2  // HttpConnectionManager.stat_prefix
	hcmRDSField              = 3  // .rds
	rdsRouteNameField        = 2  // Rds.route_config_name (config_source, 1, is a part)
)

// apiListenerParts are the constant parts of every API listener's encoding.
var apiListenerParts = func() (p struct {
	hcmTypeURL string
	source     []byte // Rds.config_source, field and all
	filters    []byte // HttpConnectionManager.http_filters, fields and all
	err        error
}) {
	p.hcmTypeURL = typeURLs["type.googleapis.com/"+string((&hcmpb.HttpConnectionManager{}).ProtoReflect().Descriptor().FullName())]
	if p.hcmTypeURL == "" {
		p.err = errors.New("the HttpConnectionManager's type URL is not interned")
		return p
	}
	filters, err := httpFilters(false)
	if err != nil {
		p.err = err
		return p
	}
	if p.filters, p.err = deterministic.Marshal(&hcmpb.HttpConnectionManager{HttpFilters: filters}); p.err != nil {
		return p
	}
	p.source, p.err = deterministic.Marshal(&hcmpb.Rds{ConfigSource: grpcADSSource})
	if p.err != nil {
		return p
	}
	// The whole, once: what the per-host checks do not cover is the same in every listener.
	l, err := apiListener("example.com", "", 80)
	if err == nil {
		err = l.ValidateAll()
	}
	p.err = err
	return p
}()

// apiListenerWire is the encoding of apiListener(host, vip, port), sized before it is
// written (into the store's resource, by store.EncodeBody).
type apiListenerWire struct {
	name, route, vip                  string
	port                              uint32
	rdsLen, hcmLen, anyLen, apiLen, n int
}

func newAPIListenerWire(host, vip string, port uint32) apiListenerWire {
	if vip == "" {
		vip = "0.0.0.0"
	}
	w := apiListenerWire{name: APIListenerName(host, port), route: HostRouteName(host, port), vip: vip, port: port}
	p := &apiListenerParts
	w.rdsLen = len(p.source) + mapStringField(rdsRouteNameField, w.route)
	w.hcmLen = mapStringField(hcmStatPrefixField, w.name) + len(p.filters) + messageField(hcmRDSField, w.rdsLen)
	w.anyLen = mapStringField(anyTypeURLField, p.hcmTypeURL) + messageField(anyValueField, w.hcmLen)
	w.apiLen = messageField(apiListenerAnyField, w.anyLen)
	w.n = mapStringField(listenerNameField, w.name) + messageField(listenerAddressField, addressSize(vip, port)) +
		messageField(listenerAPIListenerField, w.apiLen)
	return w
}

func (w apiListenerWire) size() int { return w.n }

// append appends the encoding (size bytes), or refuses what validation or proto.Marshal
// would: the parts that could not be made, a port over 65535, strings that are not UTF-8.
func (w apiListenerWire) append(b []byte) ([]byte, error) {
	p := &apiListenerParts
	switch {
	case p.err != nil:
		return nil, p.err
	case w.port > 65535:
		return nil, fmt.Errorf("port %d: not a port number", w.port)
	case !utf8.ValidString(w.name) || !utf8.ValidString(w.vip):
		return nil, fmt.Errorf("API listener %q: invalid UTF-8", w.name)
	}
	b = appendStringField(b, listenerNameField, w.name)
	b = appendTagLen(b, listenerAddressField, addressSize(w.vip, w.port))
	b = appendAddress(b, w.vip, w.port)
	b = appendTagLen(b, listenerAPIListenerField, w.apiLen)
	b = appendTagLen(b, apiListenerAnyField, w.anyLen)
	b = appendStringField(b, anyTypeURLField, p.hcmTypeURL)
	b = appendTagLen(b, anyValueField, w.hcmLen)
	b = appendStringField(b, hcmStatPrefixField, w.name)
	b = append(b, p.filters...)
	b = appendTagLen(b, hcmRDSField, w.rdsLen) // a oneof's field: after the others
	b = append(b, p.source...)
	return appendStringField(b, rdsRouteNameField, w.route), nil
}
