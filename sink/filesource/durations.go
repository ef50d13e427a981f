package filesource

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// durationName is the full name of google.protobuf.Duration.
var durationName = (&durationpb.Duration{}).ProtoReflect().Descriptor().FullName()

// normalizeDurations rewrites, in a spec's JSON, every google.protobuf.Duration given in Go's
// form ("5m", "1h30m", "250ms") into the form protojson accepts ("300s"). Istio reads its YAML
// with the older jsonpb, which accepts both, and its documentation writes "interval: 5m"; a
// user's files must decode here as they do in Istio. Anything that is not such a duration is
// left as it is, for protojson to judge. The JSON is returned unchanged when nothing was
// rewritten, so error positions stay those of the document.
func normalizeDurations(raw []byte, md protoreflect.MessageDescriptor) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep 64-bit integers exact
	var v any
	if dec.Decode(&v) != nil {
		return raw
	}
	if !rewriteMessage(v, md) {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

// rewriteMessage rewrites the durations of one JSON object of message md; it reports whether
// it changed anything.
func rewriteMessage(v any, md protoreflect.MessageDescriptor) bool {
	obj, ok := v.(map[string]any)
	if !ok {
		return false
	}
	changed := false
	for key, val := range obj {
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(key))
		}
		if fd == nil || fd.Message() == nil {
			continue
		}
		switch {
		case fd.IsMap():
			if m, ok := val.(map[string]any); ok && fd.MapValue().Message() != nil {
				for k, e := range m {
					if r, ok := rewriteValue(e, fd.MapValue().Message()); ok {
						m[k], changed = r, true
					}
				}
			}
		case fd.IsList():
			if list, ok := val.([]any); ok {
				for i, e := range list {
					if r, ok := rewriteValue(e, fd.Message()); ok {
						list[i], changed = r, true
					}
				}
			}
		default:
			if r, ok := rewriteValue(val, fd.Message()); ok {
				obj[key], changed = r, true
			}
		}
	}
	return changed
}

// rewriteValue rewrites one value of message type md: a Go-form duration string, or the
// durations inside a nested message.
func rewriteValue(v any, md protoreflect.MessageDescriptor) (any, bool) {
	if md.FullName() != durationName {
		return v, rewriteMessage(v, md)
	}
	s, ok := v.(string)
	if !ok {
		return v, false
	}
	if r, ok := protojsonDuration(s); ok {
		return r, true
	}
	return v, false
}

// protojsonDuration converts a duration in Go's form ("5m") to protojson's ("300s"); it reports
// false for a string already in protojson's form ("1.5s") or in neither, which is left as it
// is. The fast decoder reads durations through it too, so that both paths agree on each one.
func protojsonDuration(s string) (string, bool) {
	if _, err := strconv.ParseFloat(s[:max(len(s)-1, 0)], 64); err == nil && len(s) > 1 && s[len(s)-1] == 's' {
		return s, false // already protojson's form
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return s, false
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s", true
}
