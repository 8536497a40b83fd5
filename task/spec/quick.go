package spec

import (
	"cmp"
	"math"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schema is a compiled JSON Schema: the general validator and, when the
// schema uses only the common keywords, a quick check of its own.
//
// The general validator is thorough but slow on the hot path (every new
// answer is checked): it allocates per value and tests "integer" through
// big.Rat. The quick check only ever says "valid"; anything it does not
// pass goes to the general validator, which decides and writes the
// message. So a quick check may be too strict, never too lenient
// (FuzzQuickSchema holds it to that).
type schema struct {
	full  *jsonschema.Schema
	quick *quick // nil: the schema uses a keyword quick does not know
}

// validate checks v, a plain value (what plainjson.Decode gives).
func (s *schema) validate(v any) error {
	if s.quick != nil && s.quick.ok(v, 0) {
		return nil
	}
	return s.full.Validate(jsonValue(v))
}

// JSON types, as bits.
const (
	tNull = 1 << iota
	tBool
	tInteger
	tNumber // integers included, as in JSON Schema
	tString
	tArray
	tObject
)

var typeBits = map[string]uint8{
	"null": tNull, "boolean": tBool, "integer": tInteger, "number": tNumber,
	"string": tString, "array": tArray, "object": tObject,
}

// quick is a schema of the common keywords, checked directly.
type quick struct {
	never bool  // the schema false
	types uint8 // 0: any type

	enum []any // scalars
	// hasEnum: enum or const was given (an empty enum allows nothing).
	hasEnum bool

	min, max, exMin, exMax any // int64 or float64; nil: none

	minLen, maxLen int // -1: none

	prefix            []*quick
	items             *quick // nil: any
	minItems          int
	maxItems          int // -1: none
	props             map[string]*quick
	required          []string
	additional        *quick // nil: any
	minProps, maxProp int    // maxProp -1: none
}

// annotations are keywords that never fail a value.
var annotations = map[string]bool{
	"title": true, "description": true, "$comment": true, "examples": true, "default": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
}

// draft2020 is the only $schema a quick form is made for (the default).
const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// newQuick makes the quick form of a schema (decoded with plainjson.Decode), or
// nil when it uses a keyword quick does not know.
func newQuick(v any, depth int) *quick {
	if depth > maxDepth {
		return nil
	}
	switch x := v.(type) {
	case bool:
		return &quick{never: !x, minLen: -1, maxLen: -1, maxItems: -1, maxProp: -1}
	case map[string]any:
		q := &quick{minLen: -1, maxLen: -1, maxItems: -1, maxProp: -1}
		for k, e := range x {
			if annotations[k] {
				continue
			}
			if !q.keyword(k, e, depth) {
				return nil
			}
		}
		return q
	}
	return nil
}

// keyword reads one keyword into q; false when quick does not know it (or
// its value is not what the keyword takes, which the general compiler has
// already refused or will judge).
func (q *quick) keyword(k string, e any, depth int) bool {
	switch k {
	case "$schema":
		return e == draft2020
	case "type":
		switch t := e.(type) {
		case string:
			b, ok := typeBits[t]
			q.types |= b
			return ok
		case []any:
			for _, s := range t {
				name, _ := s.(string)
				b, ok := typeBits[name]
				if !ok {
					return false
				}
				q.types |= b
			}
			return len(t) > 0
		}
		return false
	case "enum":
		list, ok := e.([]any)
		if !ok || q.hasEnum { // with const: quick does not combine them
			return false
		}
		for _, s := range list {
			if !scalar(s) {
				return false
			}
		}
		q.enum, q.hasEnum = list, true
		return true
	case "const":
		if !scalar(e) || q.hasEnum {
			return false
		}
		q.enum, q.hasEnum = []any{e}, true
		return true
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		if !number(e) {
			return false
		}
		switch k {
		case "minimum":
			q.min = e
		case "maximum":
			q.max = e
		case "exclusiveMinimum":
			q.exMin = e
		default:
			q.exMax = e
		}
		return true
	case "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties":
		n, ok := e.(int64)
		if !ok || n < 0 || n > math.MaxInt32 {
			return false
		}
		switch k {
		case "minLength":
			q.minLen = int(n)
		case "maxLength":
			q.maxLen = int(n)
		case "minItems":
			q.minItems = int(n)
		case "maxItems":
			q.maxItems = int(n)
		case "minProperties":
			q.minProps = int(n)
		default:
			q.maxProp = int(n)
		}
		return true
	case "uniqueItems":
		return e == false
	case "items":
		q.items = newQuick(e, depth+1)
		return q.items != nil
	case "prefixItems":
		list, ok := e.([]any)
		if !ok {
			return false
		}
		for _, s := range list {
			p := newQuick(s, depth+1)
			if p == nil {
				return false
			}
			q.prefix = append(q.prefix, p)
		}
		return true
	case "properties":
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		q.props = make(map[string]*quick, len(m))
		for name, s := range m {
			p := newQuick(s, depth+1)
			if p == nil {
				return false
			}
			q.props[name] = p
		}
		return true
	case "required":
		list, ok := e.([]any)
		if !ok {
			return false
		}
		for _, s := range list {
			name, ok := s.(string)
			if !ok {
				return false
			}
			q.required = append(q.required, name)
		}
		return true
	case "additionalProperties":
		q.additional = newQuick(e, depth+1)
		return q.additional != nil
	}
	return false
}

func scalar(v any) bool {
	switch v.(type) {
	case nil, bool, int64, float64, string:
		return true
	}
	return false
}

func number(v any) bool {
	switch v.(type) {
	case int64, float64:
		return true
	}
	return false
}

// ok reports whether v surely satisfies q. False means "not surely": the
// general validator decides.
func (q *quick) ok(v any, depth int) bool {
	if q.never || depth > maxDepth {
		return false
	}
	if q.types != 0 && q.types&typeOf(v) == 0 {
		return false
	}
	if q.hasEnum && !q.inEnum(v) {
		return false
	}
	switch x := v.(type) {
	case int64, float64:
		return q.numberOK(x)
	case string:
		if q.minLen > 0 || q.maxLen >= 0 {
			n := utf8.RuneCountInString(x)
			if n < q.minLen || q.maxLen >= 0 && n > q.maxLen {
				return false
			}
		}
	case []any:
		if len(x) < q.minItems || q.maxItems >= 0 && len(x) > q.maxItems {
			return false
		}
		for i, e := range x {
			s := q.items
			if i < len(q.prefix) {
				s = q.prefix[i]
			}
			if s != nil && !s.ok(e, depth+1) {
				return false
			}
		}
	case map[string]any:
		if len(x) < q.minProps || q.maxProp >= 0 && len(x) > q.maxProp {
			return false
		}
		for _, name := range q.required {
			if _, ok := x[name]; !ok {
				return false
			}
		}
		for k, e := range x {
			s, named := q.props[k]
			if !named {
				s = q.additional
			}
			if s != nil && !s.ok(e, depth+1) {
				return false
			}
		}
	}
	return true
}

// typeOf is v's type bits: an integer is also a number, and a float with
// no fraction is an integer, as JSON Schema counts them.
func typeOf(v any) uint8 {
	switch x := v.(type) {
	case nil:
		return tNull
	case bool:
		return tBool
	case int64:
		return tInteger | tNumber
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			return tInteger | tNumber
		}
		return tNumber
	case string:
		return tString
	case []any:
		return tArray
	case map[string]any:
		return tObject
	}
	return 0
}

func (q *quick) inEnum(v any) bool {
	for _, e := range q.enum {
		switch a := e.(type) {
		case nil:
			if v == nil {
				return true
			}
		case bool, string:
			if v == e {
				return true
			}
		case int64, float64:
			if c, sure := compare(v, a); sure && c == 0 {
				return true
			}
		}
	}
	return false
}

func (q *quick) numberOK(v any) bool {
	check := func(bound any, want func(c int) bool) bool {
		if bound == nil {
			return true
		}
		c, sure := compare(v, bound)
		return sure && want(c)
	}
	return check(q.min, func(c int) bool { return c >= 0 }) &&
		check(q.max, func(c int) bool { return c <= 0 }) &&
		check(q.exMin, func(c int) bool { return c > 0 }) &&
		check(q.exMax, func(c int) bool { return c < 0 })
}

// exact is the largest magnitude every float64 holds exactly as an
// integer.
const exact = 1 << 53

// compare orders two numbers (int64 or float64): -1, 0 or 1, and whether
// it is sure (not when a float64 would round an int64, or for a value that
// is not a number).
func compare(a, b any) (int, bool) {
	ai, aInt := a.(int64)
	bi, bInt := b.(int64)
	if aInt && bInt {
		return cmp.Compare(ai, bi), true
	}
	af, ok1 := asFloat(a)
	bf, ok2 := asFloat(b)
	if !ok1 || !ok2 || math.IsNaN(af) || math.IsNaN(bf) {
		return 0, false
	}
	return cmp.Compare(af, bf), true
}

// asFloat is a number as a float64, when that is exact.
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		if x > exact || x < -exact {
			return 0, false
		}
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}
