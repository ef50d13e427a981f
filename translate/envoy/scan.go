package envoy

import (
	"fmt"
	"unsafe"

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
// read scans the encoding for those fields only (scanServiceEntryInto), after checking that the
// body is a valid ServiceEntry; TestScanServiceEntryReadsWhatUnmarshalReads holds the scan to
// what proto.Unmarshal reads.

// Field numbers of networking.ServiceEntry, ServicePort and WorkloadSelector, from their
// descriptors.
var (
	seHosts      = fieldNum(&networking.ServiceEntry{}, "hosts")
	seAddresses  = fieldNum(&networking.ServiceEntry{}, "addresses")
	sePorts      = fieldNum(&networking.ServiceEntry{}, "ports")
	seResolution = fieldNum(&networking.ServiceEntry{}, "resolution")
	seEndpoints  = fieldNum(&networking.ServiceEntry{}, "endpoints")
	seSelector   = fieldNum(&networking.ServiceEntry{}, "workload_selector")
	seSANs       = fieldNum(&networking.ServiceEntry{}, "subject_alt_names")
	seExportTo   = fieldNum(&networking.ServiceEntry{}, "export_to")
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

// scanned is what scanServiceEntryInto reads.
type scanned struct {
	hosts      []string
	addresses  []string
	ports      []servicePort
	resolution networking.ServiceEntry_Resolution
	selector   map[string]string
	endpoints  int
	sans       []string // subjectAltNames: the identities TLS origination verifies by default
	exportTo   []string
}

// scanServiceEntryInto reads the indexed fields of a valid ServiceEntry encoding into s, as
// proto.Unmarshal would: repeated fields in order, the last value of a scalar, message fields
// merged (a workload selector's labels given twice are one map, later keys winning). Lists are
// appended to what s has (room for the first host and port in the record that keeps them,
// see serviceEntry.firstHost).
func scanServiceEntryInto(b []byte, s *scanned) {
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
		switch {
		case num == seHosts && typ == protowire.BytesType:
			s.hosts = append(s.hosts, string(v))
		case num == seAddresses && typ == protowire.BytesType:
			s.addresses = append(s.addresses, string(v))
		case num == sePorts && typ == protowire.BytesType:
			s.ports = append(s.ports, scanPort(v))
		case num == seResolution && typ == protowire.VarintType:
			s.resolution = networking.ServiceEntry_Resolution(int32(x))
		case num == seEndpoints && typ == protowire.BytesType:
			s.endpoints++
		case num == seSANs && typ == protowire.BytesType:
			s.sans = append(s.sans, string(v))
		case num == seExportTo && typ == protowire.BytesType:
			s.exportTo = append(s.exportTo, string(v))
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
			p.name = portWord(v)
		case num == spProtocol && typ == protowire.BytesType:
			p.protocol = portWord(v)
		}
	})
	return p
}

// portWord is a port's name or protocol as a string: Istio's protocol names, in upper or
// lower case, are the strings of this table and not a copy each (two small objects a
// ServiceEntry, a million at scale, all "http" and "HTTP"); others are copied.
func portWord(v []byte) string {
	switch string(v) { // compared in place: no string is made
	case "HTTP":
		return "HTTP"
	case "http":
		return "http"
	case "HTTPS":
		return "HTTPS"
	case "https":
		return "https"
	case "HTTP2":
		return "HTTP2"
	case "http2":
		return "http2"
	case "GRPC":
		return "GRPC"
	case "grpc":
		return "grpc"
	case "TCP":
		return "TCP"
	case "tcp":
		return "tcp"
	case "TLS":
		return "TLS"
	case "tls":
		return "tls"
	}
	return string(v)
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

// Field numbers of networking.WorkloadEntry, an inline endpoint of a ServiceEntry.
var (
	weAddress  = fieldNum(&networking.WorkloadEntry{}, "address")
	wePorts    = fieldNum(&networking.WorkloadEntry{}, "ports")
	weLabels   = fieldNum(&networking.WorkloadEntry{}, "labels")
	weNetwork  = fieldNum(&networking.WorkloadEntry{}, "network")
	weLocality = fieldNum(&networking.WorkloadEntry{}, "locality")
	weWeight   = fieldNum(&networking.WorkloadEntry{}, "weight")
)

// appendEndpoints appends a valid ServiceEntry encoding's inline endpoints to out as
// workloads, read as proto.Unmarshal would read them (a repeated map key's last value wins,
// the last of a scalar), without building their messages. Strings are views into b, which
// the store never modifies: a build holds its workloads only while it encodes them.
//
// A pooled out keeps, in the room past its length, the label lists of the workloads it held
// before, emptied (putWorkloads): a workload written there appends its labels to that room
// rather than to a list of its own (an allocation per endpoint, three a host at scale).
func appendEndpoints(out []workload, b []byte, kind, key string) []workload {
	start := len(out)
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
		if num == seEndpoints && typ == protowire.BytesType {
			var room labels
			if len(out) < cap(out) {
				room = out[:len(out)+1][len(out)].labels[:0]
			}
			w := scanWorkload(v, room)
			w.kind, w.key, w.index = kind, key, len(out)-start
			out = append(out, w)
		}
	})
	return out
}

// scanWorkload reads a WorkloadEntry encoding, appending its labels to room.
func scanWorkload(b []byte, room labels) workload {
	w := workload{labels: room}
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
		switch {
		case num == weAddress && typ == protowire.BytesType:
			w.address = view(v)
		case num == weNetwork && typ == protowire.BytesType:
			w.network = view(v)
		case num == weLocality && typ == protowire.BytesType:
			w.locality = view(v)
		case num == weWeight && typ == protowire.VarintType:
			w.weight = uint32(x)
		case num == weLabels && typ == protowire.BytesType:
			k, val := scanStringEntry(v)
			w.labels = append(w.labels, label{view(k), view(val)})
		case num == wePorts && typ == protowire.BytesType:
			var p label
			var n uint32
			eachField(v, func(num protowire.Number, typ protowire.Type, s []byte, x uint64) {
				switch {
				case num == 1 && typ == protowire.BytesType:
					p.k = view(s)
				case num == 2 && typ == protowire.VarintType:
					n = uint32(x)
				}
			})
			w.ports = append(w.ports, namedPort{p.k, n})
		}
	})
	w.labels = w.labels.settled()
	w.ports = settledPorts(w.ports)
	return w
}

// scanStringEntry reads a map<string, string> entry: its key (1) and value (2).
func scanStringEntry(b []byte) (k, v []byte) {
	eachField(b, func(num protowire.Number, typ protowire.Type, s []byte, _ uint64) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			k = s
		case num == 2 && typ == protowire.BytesType:
			v = s
		}
	})
	return k, v
}

// view is a string over immutable bytes, without a copy.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
