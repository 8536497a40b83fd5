package plainjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Decode reads one JSON value into plain values. Trailing data, a
// repeated object key, a string that is not UTF-8 and nesting deeper than
// MaxDepth are errors (where encoding/json would take the last key or
// replace the bytes); anything else it reads as encoding/json does, to
// the same values (FuzzDecode).
func Decode(data []byte) (any, error) {
	r := jsonReader{data: data}
	v, err := r.value(0)
	if err != nil {
		return nil, err
	}
	r.space()
	if r.i != len(r.data) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

type jsonReader struct {
	data []byte
	i    int
}

func (r *jsonReader) space() {
	for r.i < len(r.data) {
		switch r.data[r.i] {
		case ' ', '\t', '\r', '\n':
			r.i++
		default:
			return
		}
	}
}

func (r *jsonReader) fail(what string) error {
	if r.i >= len(r.data) {
		return fmt.Errorf("unexpected end of JSON: %s", what)
	}
	return fmt.Errorf("invalid JSON at byte %d: %s", r.i, what)
}

func (r *jsonReader) value(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("JSON nested more than %d deep", MaxDepth)
	}
	r.space()
	if r.i >= len(r.data) {
		return nil, r.fail("want a value")
	}
	switch c := r.data[r.i]; {
	case c == '{':
		return r.object(depth)
	case c == '[':
		return r.array(depth)
	case c == '"':
		return r.str()
	case c == 't':
		return true, r.literal("true")
	case c == 'f':
		return false, r.literal("false")
	case c == 'n':
		return nil, r.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return r.number()
	}
	return nil, r.fail("want a value")
}

func (r *jsonReader) literal(word string) error {
	if len(r.data)-r.i < len(word) || string(r.data[r.i:r.i+len(word)]) != word {
		return r.fail("want " + word)
	}
	r.i += len(word)
	return nil
}

func (r *jsonReader) object(depth int) (any, error) {
	r.i++ // {
	obj := map[string]any{}
	r.space()
	if r.i < len(r.data) && r.data[r.i] == '}' {
		r.i++
		return obj, nil
	}
	for {
		r.space()
		if r.i >= len(r.data) || r.data[r.i] != '"' {
			return nil, r.fail("want an object key")
		}
		k, err := r.str()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[k]; dup {
			return nil, fmt.Errorf("invalid JSON: key %q given twice", k)
		}
		r.space()
		if r.i >= len(r.data) || r.data[r.i] != ':' {
			return nil, r.fail("want ':'")
		}
		r.i++
		v, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj[k] = v
		r.space()
		if r.i >= len(r.data) {
			return nil, r.fail("want ',' or '}'")
		}
		switch r.data[r.i] {
		case ',':
			r.i++
		case '}':
			r.i++
			return obj, nil
		default:
			return nil, r.fail("want ',' or '}'")
		}
	}
}

func (r *jsonReader) array(depth int) (any, error) {
	r.i++ // [
	list := []any{}
	r.space()
	if r.i < len(r.data) && r.data[r.i] == ']' {
		r.i++
		return list, nil
	}
	for {
		v, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
		r.space()
		if r.i >= len(r.data) {
			return nil, r.fail("want ',' or ']'")
		}
		switch r.data[r.i] {
		case ',':
			r.i++
		case ']':
			r.i++
			return list, nil
		default:
			return nil, r.fail("want ',' or ']'")
		}
	}
}

// str reads a string. Bytes that are not UTF-8 are an error (where
// encoding/json would quietly replace them). One without escapes is taken
// as it is; one with escapes is handed to encoding/json.
func (r *jsonReader) str() (string, error) {
	start := r.i
	r.i++ // "
	escaped := false
	for r.i < len(r.data) {
		switch c := r.data[r.i]; {
		case c == '"':
			r.i++
			raw := r.data[start:r.i]
			body := raw[1 : len(raw)-1]
			if !utf8.Valid(body) {
				return "", errors.New("invalid JSON: a string is not UTF-8")
			}
			if !escaped {
				return string(body), nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", fmt.Errorf("invalid JSON string: %v", err)
			}
			return s, nil
		case c == '\\':
			escaped = true
			r.i += 2
		case c < 0x20:
			return "", r.fail("a control character in a string")
		default:
			r.i++
		}
	}
	return "", r.fail("an unterminated string")
}

// number reads a JSON number: int64 when it is an integer literal that
// fits, float64 otherwise.
func (r *jsonReader) number() (any, error) {
	start := r.i
	if r.data[r.i] == '-' {
		r.i++
	}
	digits := func() int {
		n := 0
		for r.i < len(r.data) && r.data[r.i] >= '0' && r.data[r.i] <= '9' {
			r.i++
			n++
		}
		return n
	}
	intStart := r.i
	n := digits()
	if n == 0 || n > 1 && r.data[intStart] == '0' {
		return nil, r.fail("a malformed number")
	}
	integer := true
	if r.i < len(r.data) && r.data[r.i] == '.' {
		r.i++
		integer = false
		if digits() == 0 {
			return nil, r.fail("a malformed number")
		}
	}
	if r.i < len(r.data) && (r.data[r.i] == 'e' || r.data[r.i] == 'E') {
		r.i++
		integer = false
		if r.i < len(r.data) && (r.data[r.i] == '+' || r.data[r.i] == '-') {
			r.i++
		}
		if digits() == 0 {
			return nil, r.fail("a malformed number")
		}
	}
	text := string(r.data[start:r.i])
	if integer {
		if v, err := strconv.ParseInt(text, 10, 64); err == nil {
			return v, nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("number %s out of range", text)
	}
	return f, nil
}
