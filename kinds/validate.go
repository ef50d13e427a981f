package kinds

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
)

// ValidateResource checks the body of a resource of a collection, for store.Options.Validate:
// every resource a producer pushes (ResourceSink, upstreams) passes here before it is stored.
//
// For a collection of a known kind (canonical or alias), the body must be present, its Any type
// URL must be the kind's, its bytes must unmarshal into the kind's message, and that message
// must pass the kind's validation, istiod's (Kind.Validate): a sink that received it can then
// trust it, and istiod does not drop it. A collection the table does not name is opaque and
// passes unchecked. The resource's name is not checked here; the store does that.
//
// The body is unmarshalled once, here, and dropped: the store keeps the producer's bytes. A
// ServiceEntry, the kind producers push by the thousand, is first read in place by a fast path
// (validate_fast.go) that only says yes when it is sure; anything else is unmarshalled. The
// file source does not come this way: it validates the message it decoded from YAML, and
// hands the store encoded resources.
func ValidateResource(collection string, r *mcpapi.Resource) error {
	k, ok := ByCollection(collection)
	if !ok {
		return nil
	}
	body := r.GetBody()
	if body == nil {
		return errors.New("body is missing")
	}
	if body.GetTypeUrl() != k.AMCSTypeURL {
		return fmt.Errorf("body type %q does not match the collection's kind %s: want %q",
			body.GetTypeUrl(), k.Kind, k.AMCSTypeURL)
	}
	if k.fastValid != nil {
		// The fast path reads the wire format in place: well formed first.
		if err := k.CheckBody(body.GetValue()); err != nil {
			return err
		}
		if k.fastValid(r.GetMetadata(), body.GetValue()) {
			return nil
		}
	}
	msg := k.New()
	if err := proto.Unmarshal(body.GetValue(), msg); err != nil {
		return fmt.Errorf("body does not unmarshal as %s: %w", k.Message, err)
	}
	return k.Validate(r.GetMetadata(), msg)
}

// CheckBody reports whether value is a valid encoding of the kind's message: whether
// proto.Unmarshal accepts it, found without building the message (see checkWire). It does not
// validate the message: the translation uses it on bodies the store already validated.
func (k *Kind) CheckBody(value []byte) error {
	if checkWire(value, k.desc) != nil {
		// Unmarshalled only now, for the error it names.
		if err := proto.Unmarshal(value, k.New()); err != nil {
			return fmt.Errorf("body does not unmarshal as %s: %w", k.Message, err)
		}
	}
	return nil
}

// SurelyValid reports whether value is a valid encoding of the kind's message that Validate
// accepts with md, found without building the message; false when it cannot tell (the kind
// has no fast path, or the fast path does not read what the body holds), and the caller
// unmarshals and validates it. The file source asks first: a full load decodes a million
// ServiceEntries, and the message built only to be validated was a third of its allocations.
func (k *Kind) SurelyValid(md *mcpapi.Metadata, value []byte) bool {
	return k.fastValid != nil && checkWire(value, k.desc) == nil && k.fastValid(md, value)
}

// SurelyValidWellFormed is SurelyValid for a value its caller knows proto.Unmarshal accepts:
// one it encoded itself from typed values, as the file source's fast path does (whose fuzz
// target holds every encoding it makes to the check). SurelyValid walks the encoding once to
// find it well formed before the kind's fast path reads it; for such a value that walk was a
// sixth of a file's decoding.
func (k *Kind) SurelyValidWellFormed(md *mcpapi.Metadata, value []byte) bool {
	return k.fastValid != nil && k.fastValid(md, value)
}
