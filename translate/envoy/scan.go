package envoy

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1alpha3"
)

// A ServiceEntry is read twice by the translation: when it changes, for what indexes it
// (hosts, ports, resolution, workload selector, whether it lists endpoints), and when its
// host is built, whole. Reading it whole the first time too and keeping the message until
// the build took it held every ServiceEntry of a full load decoded at once (170 MB at
// 100,000, most of it endpoint label maps); decoding it whole twice cost CPU. So the first
// read scans the encoding for those fields only (scanServiceEntry), after checking that the
// body is a valid ServiceEntry; TestScanServiceEntryReadsWhatUnmarshalReads holds the scan to
// what proto.Unmarshal reads.

// Field numbers of networking.ServiceEntry, ServicePort and WorkloadSelector, from their
// descriptors.
var (
	seHosts      = fieldNum(&networking.ServiceEntry{}, "hosts")
	sePorts      = fieldNum(&networking.ServiceEntry{}, "ports")
	seResolution = fieldNum(&networking.ServiceEntry{}, "resolution")
	seEndpoints  = fieldNum(&networking.ServiceEntry{}, "endpoints")
	seSelector   = fieldNum(&networking.ServiceEntry{}, "workload_selector")
	spNumber     = fieldNum(&networking.ServicePort{}, "number")
	spProtocol   = fieldNum(&networking.ServicePort{}, "protocol")
	spName       = fieldNum(&networking.ServicePort{}, "name")
	spTarget     = fieldNum(&networking.ServicePort{}, "target_port")
	wsLabels     = fieldNum(&networking.WorkloadSelector{}, "labels")
)

func fieldNum(m proto.Message, name string) protowire.Number {
	f := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("envoy: %T has no field %s", m, name)) // the generated types say otherwise
	}
	return f.Number()
}

// servicePort is a ServiceEntry port as written.
type servicePort struct {
	number, target uint32
	name, protocol string
}

// scanned is what scanServiceEntry reads.
type scanned struct {
	hosts      []string
	ports      []servicePort
	resolution networking.ServiceEntry_Resolution
	selector   map[string]string
	endpoints  int
}

// scanServiceEntry reads the indexed fields of a valid ServiceEntry encoding, as
// proto.Unmarshal would: repeated fields in order, the last value of a scalar, message fields
// merged (a workload selector's labels given twice are one map, later keys winning).
func scanServiceEntry(b []byte) scanned {
	var s scanned
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
		switch {
		case num == seHosts && typ == protowire.BytesType:
			s.hosts = append(s.hosts, string(v))
		case num == sePorts && typ == protowire.BytesType:
			s.ports = append(s.ports, scanPort(v))
		case num == seResolution && typ == protowire.VarintType:
			s.resolution = networking.ServiceEntry_Resolution(int32(x))
		case num == seEndpoints && typ == protowire.BytesType:
			s.endpoints++
		case num == seSelector && typ == protowire.BytesType:
			eachField(v, func(num protowire.Number, typ protowire.Type, entry []byte, _ uint64) {
				if num != wsLabels || typ != protowire.BytesType {
					return
				}
				var k, val string
				eachField(entry, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
					switch {
					case num == 1 && typ == protowire.BytesType:
						k = string(v)
					case num == 2 && typ == protowire.BytesType:
						val = string(v)
					}
				})
				if s.selector == nil {
					s.selector = map[string]string{}
				}
				s.selector[k] = val
			})
		}
	})
	return s
}

func scanPort(b []byte) servicePort {
	var p servicePort
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
		switch {
		case num == spNumber && typ == protowire.VarintType:
			p.number = uint32(x)
		case num == spTarget && typ == protowire.VarintType:
			p.target = uint32(x)
		case num == spName && typ == protowire.BytesType:
			p.name = string(v)
		case num == spProtocol && typ == protowire.BytesType:
			p.protocol = string(v)
		}
	})
	return p
}

// eachField calls f with each field of a valid encoding: for a length-delimited field its
// content, for a varint its value. Other wire types are passed with neither.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return
		}
		switch typ {
		case protowire.BytesType:
			v, _ := protowire.ConsumeBytes(b)
			f(num, typ, v, 0)
		case protowire.VarintType:
			x, _ := protowire.ConsumeVarint(b)
			f(num, typ, nil, x)
		default:
			f(num, typ, nil, 0)
		}
		b = b[n:]
	}
}
