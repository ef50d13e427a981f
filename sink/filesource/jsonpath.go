package filesource

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// jsonPathAt returns the path, from the root of data, of the JSON token that covers byte
// offset pos: ".ports[0].number" for the value (or key) "number" of the first port. It returns
// "" for the root, for an offset past the end, or for JSON it cannot read.
//
// protojson reports where in the JSON a fault is, not which field: this turns the one into the
// other, because the author of the YAML knows field names, not offsets in a JSON they never saw.
func jsonPathAt(data []byte, pos int) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []jsonFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		covers := int(dec.InputOffset()) > pos
		top := len(stack) - 1
		if top >= 0 && stack[top].wantKey {
			if key, ok := tok.(string); ok {
				stack[top].key, stack[top].hasKey, stack[top].wantKey = key, true, false
				if covers {
					return framesPath(stack)
				}
				continue
			}
		}
		if delim, ok := tok.(json.Delim); ok && (delim == '}' || delim == ']') {
			if covers {
				return framesPath(stack[:top]) // the closed container itself
			}
			stack = stack[:top]
			valueDone(stack)
			continue
		}
		// A value: the next element of an array, or the value of the current key.
		if top >= 0 && stack[top].array {
			stack[top].index++
		}
		if covers {
			return framesPath(stack)
		}
		if delim, ok := tok.(json.Delim); ok {
			stack = append(stack, jsonFrame{array: delim == '[', index: -1, wantKey: delim == '{'})
			continue
		}
		valueDone(stack)
	}
}

// jsonFrame is an open object or array on the way to a token.
type jsonFrame struct {
	array   bool
	index   int    // the current element, in an array
	key     string // the current key, in an object
	hasKey  bool
	wantKey bool // in an object, the next token is a key or '}'
}

// valueDone records that the value of the innermost open object's key is complete.
func valueDone(stack []jsonFrame) {
	if top := len(stack) - 1; top >= 0 && !stack[top].array {
		stack[top].wantKey = true
	}
}

func framesPath(stack []jsonFrame) string {
	var path string
	for _, f := range stack {
		switch {
		case f.array && f.index >= 0:
			path += "[" + strconv.Itoa(f.index) + "]"
		case !f.array && f.hasKey:
			path = appendKey(path, f.key)
		}
	}
	return path
}
