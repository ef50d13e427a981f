package kinds

import (
	"strings"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// The fast path of a producer's ServiceEntries. A producer pushes them by the thousand, and
// unmarshalling one of 2 KiB to validate it costs some 250 allocations that go to the garbage
// at once: the push of 1,000 such ServiceEntries took 30% more CPU than the wire check alone.
// fastServiceEntryValid reads the wire format in place and answers true only when it is sure
// that validateServiceEntry finds nothing; for anything it does not read (a workload
// selector, exportTo, DYNAMIC_DNS, more than a few hosts or ports, a message field given
// twice) and for any fault, it answers false, and the body is unmarshalled and validated
// whole, which also names the fault. FuzzServiceEntryFastPathAgrees holds it to the full
// validation.

// Field numbers of istio.networking.v1alpha3.ServiceEntry, ServicePort and WorkloadEntry.
const (
	seHosts            = 1
	seAddresses        = 2
	sePorts            = 3
	seResolution       = 5
	seEndpoints        = 6
	seExportTo         = 7
	seWorkloadSelector = 9

	portNumber     = 1
	portProtocol   = 2
	portName       = 3
	portTargetPort = 4

	weAddress = 1
	wePorts   = 2
	weLabels  = 3
	weNetwork = 4
)

// fastMax bounds the hosts and ports the fast path reads, in arrays on its stack.
const fastMax = 8

type fastPort struct {
	name, protocol     string
	number, targetPort uint64
}

// fastServiceEntryValid reports whether a ServiceEntry body, well formed (checkWire accepts
// it: SurelyValid checks, SurelyValidWellFormed's caller knows), is surely valid. The strings
// it reads alias value and do not outlive the call.
func fastServiceEntryValid(md *mcpapi.Metadata, value []byte) bool {
	if !fastMetadataValid(md) {
		return false
	}
	var (
		hosts      [fastMax]string
		ports      [fastMax]fastPort
		nh, np     int
		resolution networking.ServiceEntry_Resolution
		endpoints  int
		cidr       bool
	)
	// Pass 1: everything but the endpoints, which are checked against the ports.
	ok := eachField(value, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool {
		switch {
		case num == seHosts && typ == protowire.BytesType:
			if nh == fastMax {
				return false
			}
			hosts[nh] = view(v)
			nh++
		case num == seAddresses && typ == protowire.BytesType:
			a := view(v)
			cidr = cidr || strings.Contains(a, "/")
			return validateIPSubnet(a) == nil
		case num == sePorts && typ == protowire.BytesType:
			if np == fastMax {
				return false
			}
			p, ok := readPort(v)
			ports[np] = p
			np++
			return ok
		case num == seResolution && typ == protowire.VarintType:
			resolution = networking.ServiceEntry_Resolution(int32(x)) // as unmarshalling reads an enum
		case num == seEndpoints && typ == protowire.BytesType:
			endpoints++
		case (num == seWorkloadSelector || num == seExportTo) && typ == protowire.BytesType:
			return false
		}
		return true
	})
	if !ok || nh == 0 {
		return false
	}
	for _, h := range hosts[:nh] {
		if h == "*" || validateWildcardDomain(h) != nil {
			return false
		}
	}
	switch resolution {
	case networking.ServiceEntry_NONE:
		if endpoints != 0 {
			return false
		}
	case networking.ServiceEntry_STATIC:
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if endpoints == 0 {
			for _, h := range hosts[:nh] {
				if validateFQDN(h) != nil {
					return false
				}
			}
		}
		if resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && endpoints > 1 {
			return false
		}
	default:
		return false // DYNAMIC_DNS and unknown values: the full validation
	}
	if cidr && resolution != networking.ServiceEntry_NONE && resolution != networking.ServiceEntry_STATIC {
		return false
	}
	distinctNames := 0
	for i, p := range ports[:np] {
		if validatePortName(p.name) != nil || validateProtocol(p.protocol) != nil || validatePort(int(p.number)) != nil ||
			p.targetPort != 0 && validatePort(int(p.targetPort)) != nil {
			return false
		}
		newName := true
		for _, q := range ports[:i] {
			if q.number == p.number {
				return false
			}
			if q.name == p.name {
				newName = false
			}
		}
		if !newName {
			return false // a duplicate name is a fault
		}
		distinctNames++
		if resolution != networking.ServiceEntry_NONE && nh > 1 {
			if pr := parseProtocol(p.protocol); !pr.isHTTP() && !pr.isTLS() {
				return false
			}
		}
	}
	if endpoints == 0 {
		return true
	}
	static := resolution == networking.ServiceEntry_STATIC
	// Pass 2: the endpoints.
	return eachField(value, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) bool {
		if num != seEndpoints || typ != protowire.BytesType {
			return true
		}
		return fastEndpointValid(v, ports[:np], distinctNames, static)
	})
}

// fastMetadataValid is validator.metadata's verdict: a namespace/name, and none of Istio's
// internal annotations.
func fastMetadataValid(md *mcpapi.Metadata) bool {
	if strings.Count(md.GetName(), "/") != 1 {
		return false
	}
	for _, a := range [...]string{annotationAlwaysReject, annotationParentNamespace, annotationParentNames} {
		if _, ok := md.GetAnnotations()[a]; ok {
			return false
		}
	}
	return true
}

// readPort reads a ServicePort, the last value of each field winning, as unmarshalling does.
func readPort(b []byte) (fastPort, bool) {
	var p fastPort
	ok := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool {
		switch {
		case num == portNumber && typ == protowire.VarintType:
			p.number = uint64(uint32(x))
		case num == portTargetPort && typ == protowire.VarintType:
			p.targetPort = uint64(uint32(x))
		case num == portProtocol && typ == protowire.BytesType:
			p.protocol = view(v)
		case num == portName && typ == protowire.BytesType:
			p.name = view(v)
		}
		return true
	})
	return p, ok
}

// fastEndpointValid checks an endpoint as workloadEntryAt (STATIC) or the DNS branch of
// validateServiceEntry does. Each map entry is checked as it comes: if all are valid, so is
// the map unmarshalling makes of them, whichever of a key's entries wins.
func fastEndpointValid(b []byte, ports []fastPort, distinctNames int, static bool) bool {
	var address, network string
	portEntries := 0
	ok := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) bool {
		if typ != protowire.BytesType {
			return true
		}
		switch num {
		case weAddress:
			address = view(v)
		case weNetwork:
			network = view(v)
		case wePorts:
			portEntries++
			name, _, n, ok := readMapEntry(v, protowire.VarintType)
			if !ok || validatePortName(name) != nil || validatePort(int(uint32(n))) != nil {
				return false
			}
			for _, p := range ports {
				if p.name == name {
					return true
				}
			}
			return false // not a port of the ServiceEntry
		case weLabels:
			key, value, _, ok := readMapEntry(v, protowire.BytesType)
			return ok && validateTagKey(key) == nil && (value == "" || isQualifiedName(value))
		}
		return true
	})
	if !ok {
		return false
	}
	if !static {
		return isValidIPAddress(address) || validateFQDN(address) == nil
	}
	if address == "" {
		return network != "" // an address left to the network's gateway
	}
	if rest, unix := strings.CutPrefix(address, unixAddressPrefix); unix {
		return validateUnixAddress(rest) == nil && portEntries == 0 && distinctNames == 1
	}
	return isValidIPAddress(address)
}

// readMapEntry reads a map entry of string keys: its key, and its value as a string (vtyp
// BytesType) or a number (VarintType); missing fields are zero, the last of a field wins.
func readMapEntry(b []byte, vtyp protowire.Type) (key, s string, n uint64, ok bool) {
	ok = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool {
		switch {
		case num == 1 && typ == protowire.BytesType:
			key = view(v)
		case num == 2 && typ == vtyp && typ == protowire.BytesType:
			s = view(v)
		case num == 2 && typ == vtyp && typ == protowire.VarintType:
			n = x
		}
		return true
	})
	return key, s, n, ok
}

// eachField calls f with each field of a message that checkWire accepted: its number and
// type, and its bytes (length-delimited) or its value (varint). It stops, and reports false,
// when f does, or on anything it does not expect.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false
		}
		b = b[n:]
		if !f(num, typ, v, x) {
			return false
		}
	}
	return true
}

// view is b as a string without copying it: the fast path reads many strings and keeps none.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
