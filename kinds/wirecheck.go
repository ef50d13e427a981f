package kinds

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// checkWire reports whether proto.Unmarshal accepts b as a message of md, without building
// the message: validating a 2 KiB ServiceEntry by unmarshalling it allocated a hundred objects
// that went to the garbage at once, for every resource of every write. It checks what
// unmarshalling checks: the encoding is well formed (tags, lengths, varints, groups), strings
// of fields that enforce it are UTF-8, packed repeated scalars hold whole values, and nested
// messages (map entries too) recursively, to protobuf-go's recursion limit. A known field
// with another wire type than its own is an unknown field to protobuf-go, as any unknown
// field, and accepted. FuzzCheckBodyAgreesWithUnmarshal holds it to proto.Unmarshal.
func checkWire(b []byte, md protoreflect.MessageDescriptor) error {
	return checkMessage(b, md, recursionLimit)
}

// recursionLimit is protobuf-go's default nesting limit for unmarshalling.
const recursionLimit = 10000

var (
	errTooDeep   = errors.New("exceeded maximum recursion depth")
	errNotUTF8   = errors.New("string field contains invalid UTF-8")
	errBadPacked = errors.New("packed repeated field is malformed")
	errBadNumber = errors.New("field number out of range")
)

func checkMessage(b []byte, md protoreflect.MessageDescriptor, depth int) error {
	if depth--; depth < 0 {
		return errTooDeep
	}
	fields := md.Fields()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return errBadNumber
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		value := b[:n]
		b = b[n:]
		if typ != protowire.BytesType {
			continue // a varint or fixed value is any value; a group is skipped whole
		}
		fd := fields.ByNumber(num)
		if fd == nil {
			continue
		}
		v, _ := protowire.ConsumeBytes(value)
		if err := checkBytesField(v, fd, depth); err != nil {
			return err
		}
	}
	return nil
}

// checkBytesField checks the content of a length-delimited field of a known field.
func checkBytesField(v []byte, fd protoreflect.FieldDescriptor, depth int) error {
	switch k := fd.Kind(); {
	case k == protoreflect.StringKind:
		if enforceUTF8(fd) && !utf8.Valid(v) {
			return errNotUTF8
		}
	case k == protoreflect.MessageKind:
		return checkMessage(v, fd.Message(), depth)
	case fd.IsList() && k != protoreflect.BytesKind && k != protoreflect.GroupKind:
		return checkPacked(v, k)
	}
	return nil
}

// checkPacked checks a packed repeated scalar: whole varints, or whole fixed-size values.
func checkPacked(v []byte, k protoreflect.Kind) error {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		if len(v)%4 != 0 {
			return errBadPacked
		}
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		if len(v)%8 != 0 {
			return errBadPacked
		}
	default:
		for len(v) > 0 {
			_, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return errBadPacked
			}
			v = v[n:]
		}
	}
	return nil
}

// enforceUTF8 is protobuf-go's rule: proto3 strings are UTF-8, and so are those of editions
// whose features say so.
func enforceUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if e, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return e.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}
