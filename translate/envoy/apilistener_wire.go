package envoy

import (
	"errors"
	"fmt"
	"unicode/utf8"

	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// A proxyless gRPC client's API listener (apiListener) is built for every HTTP host and port
// of the mesh, and all of them are the same message but for three strings and a port: at
// 1,000,000 hosts, building, validating and marshalling it was a twentieth of the bridge's
// CPU. encodeAPIListener writes its encoding directly from parts encoded once, exactly as a
// deterministic proto.Marshal of apiListener's message would (protobuf-go writes fields in
// the order of the generated struct: by number, a oneof's after the others, and a oneof's
// set scalar even when zero); TestAPIListenerEncodingIsTheMarshalledMessage holds the two
// together.
//
// Validation: the constant parts were validated, as a whole listener, when they were encoded;
// what varies is the name (the HCM's stat prefix; non-empty), the address (non-empty) and the
// port, which Envoy's rules bound to 65535; strings must be UTF-8, as proto.Marshal requires.

// Field numbers the encoding writes.
const (
	listenerNameField        = 1  // envoy.config.listener.v3.Listener.name
	listenerAddressField     = 2  // .address
	listenerAPIListenerField = 19 // .api_listener
	addressSocketField       = 1  // envoy.config.core.v3.Address.socket_address
	socketAddressField       = 2  // envoy.config.core.v3.SocketAddress.address
	socketPortField          = 3  // .port_value
	apiListenerAnyField      = 1  // envoy.config.listener.v3.ApiListener.api_listener
	anyTypeURLField          = 1  // google.protobuf.Any.type_url
	anyValueField            = 2  // .value
	hcmStatPrefixField       = 2  // HttpConnectionManager.stat_prefix
	hcmRDSField              = 3  // .rds
	rdsConfigSourceField     = 1  // Rds.config_source
	rdsRouteNameField        = 2  // .route_config_name
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

// encodeAPIListener is the encoding of apiListener(host, vip, port).
func encodeAPIListener(host, vip string, port uint32) ([]byte, error) {
	if apiListenerParts.err != nil {
		return nil, apiListenerParts.err
	}
	if port > 65535 {
		return nil, fmt.Errorf("port %d: not a port number", port)
	}
	name := APIListenerName(host, port)
	if vip == "" {
		vip = "0.0.0.0"
	}
	if !utf8.ValidString(name) || !utf8.ValidString(vip) {
		return nil, fmt.Errorf("API listener %q: invalid UTF-8", name) // as proto.Marshal refuses it
	}
	p := &apiListenerParts
	route := HostRouteName(host, port)
	rdsLen := len(p.source) + protowire.SizeTag(rdsRouteNameField) + protowire.SizeBytes(len(route))
	hcmLen := protowire.SizeTag(hcmStatPrefixField) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(hcmRDSField) + protowire.SizeBytes(rdsLen) + len(p.filters)
	anyLen := protowire.SizeTag(anyTypeURLField) + protowire.SizeBytes(len(p.hcmTypeURL)) +
		protowire.SizeTag(anyValueField) + protowire.SizeBytes(hcmLen)
	apiLen := protowire.SizeTag(apiListenerAnyField) + protowire.SizeBytes(anyLen)
	sockLen := protowire.SizeTag(socketAddressField) + protowire.SizeBytes(len(vip)) +
		protowire.SizeTag(socketPortField) + protowire.SizeVarint(uint64(port)) // a oneof's: written even when 0
	addrLen := protowire.SizeTag(addressSocketField) + protowire.SizeBytes(sockLen)
	size := protowire.SizeTag(listenerNameField) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(listenerAddressField) + protowire.SizeBytes(addrLen) +
		protowire.SizeTag(listenerAPIListenerField) + protowire.SizeBytes(apiLen)

	b := make([]byte, 0, size)
	b = appendStringField(b, listenerNameField, name)
	b = appendTagLen(b, listenerAddressField, addrLen)
	b = appendTagLen(b, addressSocketField, sockLen)
	b = appendStringField(b, socketAddressField, vip)
	b = protowire.AppendTag(b, socketPortField, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(port))
	b = appendTagLen(b, listenerAPIListenerField, apiLen)
	b = appendTagLen(b, apiListenerAnyField, anyLen)
	b = appendStringField(b, anyTypeURLField, p.hcmTypeURL)
	b = appendTagLen(b, anyValueField, hcmLen)
	b = appendStringField(b, hcmStatPrefixField, name)
	b = append(b, p.filters...)
	b = appendTagLen(b, hcmRDSField, rdsLen) // a oneof's field: after the others
	b = append(b, p.source...)
	b = appendStringField(b, rdsRouteNameField, route)
	if len(b) != size {
		return nil, fmt.Errorf("API listener %s: encoded %d bytes, sized %d", name, len(b), size)
	}
	return b, nil
}
