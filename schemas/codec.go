package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// A codec reads and writes one wire struct without reflection: the hot
// messages (samplecodec.go) are read and written by one, the others by
// encoding/json. A codec is a list of members, one a JSON field of the
// struct in declaration order, each made by field (or list) from the
// field's json tag and its address; TestCodecFields fails when the list
// and the struct differ.
//
// What it writes is byte for byte what json.Marshal writes. What it reads
// it reads to exactly the value Decode's reflection path (strict
// encoding/json and checkKeys) reads; it refuses nothing itself: anything
// that is not plainly a message the reflection path accepts (an unknown,
// repeated or escaped key, a type the field does not take, a number out
// of range, deep or wide raw JSON, a target that is not a zero value)
// makes it give up, and Decode reads the message the reflection way, which
// refuses it or not, with its own errors. FuzzSampleRequestDecode and
// FuzzSampleResultDecode hold the two paths to the same values and errors,
// FuzzSampleRequestEncode and FuzzSampleResultEncode the writer to
// json.Marshal.
type codec[T any] struct {
	members []member[T]
	// omitZero leaves out every field that holds its zero value (a map or
	// slice: also when empty), omitempty or not: Delta's rule
	// (leftOutAsZero).
	omitZero bool
}

// member is one JSON field of T.
type member[T any] struct {
	tag       string // the field's json tag, as the struct has it
	name      string // the JSON key
	omitEmpty bool
	key       []byte       // "name": as json.Marshal writes it
	typ       reflect.Type // the field's type (TestCodecFields)
	addr      func(*T) any // the field's address (TestCodecFields)
	// isZero: the field holds its type's zero value, bit for bit.
	isZero func(*T) bool
	// isEmpty: omitempty leaves the field out (encoding/json's rule).
	isEmpty func(*T) bool
	write   func(b []byte, v *T) ([]byte, error)
	// read reads the field's value at the reader into v's field, as
	// encoding/json does, or reports false where it gives up.
	read func(d *reader, v *T) bool
}

func newCodec[T any](members ...member[T]) *codec[T] {
	if len(members) > 64 {
		panic("schemas: a codec reads at most 64 fields") // readObject's seen bits
	}
	return &codec[T]{members: members}
}

// field returns the member for the field at p(v) with json tag tag. The
// field's Go type picks its reader and writer; a type not listed here
// panics at init.
func field[T, V any](tag string, p func(*T) *V) member[T] {
	m := newMember[T, V](tag, func(v *T) any { return p(v) })
	switch p := any(p).(type) {
	case func(*T) *string:
		m.isZero = func(v *T) bool { return *p(v) == "" }
		m.isEmpty = m.isZero
		m.write = func(b []byte, v *T) ([]byte, error) { return plainjson.AppendStringHTML(b, *p(v)), nil }
		m.read = func(d *reader, v *T) bool { return d.readString(p(v)) }
	case func(*T) *int:
		m.isZero = func(v *T) bool { return *p(v) == 0 }
		m.isEmpty = m.isZero
		m.write = func(b []byte, v *T) ([]byte, error) { return strconv.AppendInt(b, int64(*p(v)), 10), nil }
		m.read = func(d *reader, v *T) bool {
			n, set, ok := d.readInt(strconv.IntSize)
			if set {
				*p(v) = int(n)
			}
			return ok
		}
	case func(*T) *int64:
		m.isZero = func(v *T) bool { return *p(v) == 0 }
		m.isEmpty = m.isZero
		m.write = func(b []byte, v *T) ([]byte, error) { return strconv.AppendInt(b, *p(v), 10), nil }
		m.read = func(d *reader, v *T) bool {
			n, set, ok := d.readInt(64)
			if set {
				*p(v) = n
			}
			return ok
		}
	case func(*T) *float64:
		m.isZero = func(v *T) bool { return math.Float64bits(*p(v)) == 0 }
		m.isEmpty = func(v *T) bool { return *p(v) == 0 }
		m.write = func(b []byte, v *T) ([]byte, error) { return plainjson.AppendFloat(b, *p(v)) }
		m.read = func(d *reader, v *T) bool { return d.readFloat(p(v)) }
	case func(*T) *json.RawMessage:
		m.isZero = func(v *T) bool { return *p(v) == nil }
		m.isEmpty = func(v *T) bool { return len(*p(v)) == 0 }
		m.write = func(b []byte, v *T) ([]byte, error) { return appendRaw(b, *p(v)) }
		m.read = func(d *reader, v *T) bool { return d.readRaw(p(v)) }
	case func(*T) *time.Time:
		m.isZero = func(v *T) bool { return *p(v) == time.Time{} }
		m.isEmpty = func(*T) bool { return false } // omitempty never leaves a struct out
		m.write = func(b []byte, v *T) ([]byte, error) { return appendTime(b, *p(v)) }
		m.read = func(d *reader, v *T) bool { return d.readTime(p(v)) }
	// The types below are only written (the journal entry, codecs never
	// decoded): their readers give up, leaving the message to the
	// reflection path.
	case func(*T) *[]int64:
		m.isZero = func(v *T) bool { return *p(v) == nil }
		m.isEmpty = func(v *T) bool { return len(*p(v)) == 0 }
		m.write = func(b []byte, v *T) ([]byte, error) { return appendInts(b, *p(v)), nil }
		m.read = giveUp[T]
	case func(*T) *map[string]int64:
		m.isZero = func(v *T) bool { return *p(v) == nil }
		m.isEmpty = func(v *T) bool { return len(*p(v)) == 0 }
		m.write = func(b []byte, v *T) ([]byte, error) { return appendCounts(b, *p(v)), nil }
		m.read = giveUp[T]
	case func(*T) *map[string]int:
		m.isZero = func(v *T) bool { return *p(v) == nil }
		m.isEmpty = func(v *T) bool { return len(*p(v)) == 0 }
		m.write = func(b []byte, v *T) ([]byte, error) { return appendCounts(b, *p(v)), nil }
		m.read = giveUp[T]
	default:
		panic("schemas: the codec has no reader or writer for a field of type " + m.typ.String())
	}
	return m
}

// marshalled returns the member for a field that encoding/json writes
// (by json.Marshal: a rare part of a message a codec writes, such as a
// journal entry's arbiter decision) and the reflection path reads (its
// reader gives up). zero and empty tell whether the field holds its zero
// value and whether omitempty leaves it out.
func marshalled[T, V any](tag string, p func(*T) *V, zero, empty func(*V) bool) member[T] {
	m := newMember[T, V](tag, func(v *T) any { return p(v) })
	m.isZero = func(v *T) bool { return zero(p(v)) }
	m.isEmpty = func(v *T) bool { return empty(p(v)) }
	m.write = func(b []byte, v *T) ([]byte, error) {
		data, err := json.Marshal(*p(v))
		if err != nil {
			return nil, err
		}
		return append(b, data...), nil
	}
	m.read = giveUp[T]
	return m
}

// giveUp is the reader of a member only ever written.
func giveUp[T any](*reader, *T) bool { return false }

// list returns the member for the slice at p(v), each element an object
// that elem reads and writes.
func list[T, E any](tag string, p func(*T) *[]E, elem *codec[E]) member[T] {
	m := newMember[T, []E](tag, func(v *T) any { return p(v) })
	m.isZero = func(v *T) bool { return *p(v) == nil }
	m.isEmpty = func(v *T) bool { return len(*p(v)) == 0 }
	m.write = func(b []byte, v *T) ([]byte, error) {
		s := *p(v)
		if s == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i := range s {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = elem.appendObject(b, &s[i]); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	}
	m.read = func(d *reader, v *T) bool {
		if d.null() {
			return true // nil, as it is
		}
		if d.next() != '[' {
			return false
		}
		// Counted first, so the slice is made once and the strings
		// set later point into it for good.
		start := d.i
		if !d.skipValue(0) {
			return false
		}
		n := d.elems
		d.i = start + 1
		s := make([]E, n) // [] is an empty slice, not nil, as encoding/json makes it
		for i := range s {
			if i > 0 {
				if d.next() != ',' {
					return false
				}
				d.i++
			}
			switch d.next() {
			case '{':
				if !elem.readObject(d, &s[i]) {
					return false
				}
			case 'n':
				if !d.literal("null") { // the zero element
					return false
				}
			default:
				return false
			}
		}
		if d.next() != ']' {
			return false
		}
		d.i++
		*p(v) = s
		return true
	}
	return m
}

// newMember starts the member of the field of type V with json tag tag
// (a name, and omitempty or nothing) at addr(v).
func newMember[T, V any](tag string, addr func(*T) any) member[T] {
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" || opts != "" && opts != "omitempty" {
		panic("schemas: the codec takes a json tag of a name and omitempty or nothing, not " + strconv.Quote(tag))
	}
	return member[T]{
		tag:       tag,
		name:      name,
		omitEmpty: opts == "omitempty",
		key:       append(plainjson.AppendStringHTML(nil, name), ':'),
		typ:       reflect.TypeFor[V](),
		addr:      addr,
	}
}

// appendObject appends v as json.Marshal writes it.
func (c *codec[T]) appendObject(b []byte, v *T) ([]byte, error) {
	b = append(b, '{')
	first := true
	for i := range c.members {
		m := &c.members[i]
		if c.omitZero && m.leftOutAsZero(v) || !c.omitZero && m.omitEmpty && m.isEmpty(v) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, m.key...)
		var err error
		if b, err = m.write(b, v); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// leftOutAsZero: a codec that omits zero fields leaves this one out, as
// reflect.Value.IsZero sees it (-0 is zero), or an empty map or list.
func (m *member[T]) leftOutAsZero(v *T) bool {
	if m.isZero(v) {
		return true
	}
	switch m.typ.Kind() {
	case reflect.Map, reflect.Slice, reflect.Float64:
		return m.isEmpty(v)
	}
	return false
}

// appendTo appends v to dst; on an error dst is returned as it was.
func (c *codec[T]) appendTo(dst []byte, v *T) ([]byte, error) {
	b, err := c.appendObject(dst, v)
	if err != nil {
		return dst, err
	}
	return b, nil
}

// encode returns v's JSON in a slice of its own.
func (c *codec[T]) encode(v *T) ([]byte, error) {
	bp := scratch.Get().(*[]byte)
	b, err := c.appendObject((*bp)[:0], v)
	var out []byte
	if err == nil {
		out = bytes.Clone(b)
		*bp = b
	}
	if cap(*bp) <= maxPooled {
		scratch.Put(bp)
	}
	return out, err
}

// maxPooled bounds a buffer kept for the next message.
const maxPooled = 64 << 10

var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// decode reads data, one JSON object, into v, which must be a zero value
// (as encoding/json would, a decode into a set value keeps the fields the
// message leaves out: that is left to the reflection path). It reports
// false, with v zero again, where it gives up. data is UTF-8 (Decode
// checked).
func (c *codec[T]) decode(data []byte, v *T) bool {
	if v == nil {
		return false
	}
	for i := range c.members {
		if !c.members[i].isZero(v) {
			return false
		}
	}
	d := readers.Get().(*reader)
	d.data = data
	ok := d.next() == '{' && c.readObject(d, v)
	if ok {
		d.space()
		ok = d.i == len(data)
	}
	if ok {
		d.finish()
	} else {
		var zero T
		*v = zero
	}
	d.reset()
	readers.Put(d)
	return ok
}

// readObject reads the object at the reader into v: keys exactly the
// members' names (escapes, unknown keys and repeats give up).
func (c *codec[T]) readObject(d *reader, v *T) bool {
	var seen uint64
	next := 0 // keys come in the members' order, usually
	return d.object(func(key []byte) bool {
		k := c.lookup(key, next)
		if k < 0 || seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		next = k + 1
		return c.members[k].read(d, v)
	})
}

// lookup returns the index of the member named key, looking from hint on
// (and round), or -1.
func (c *codec[T]) lookup(key []byte, hint int) int {
	n := len(c.members)
	for j := range n {
		k := hint + j
		if k >= n {
			k -= n
		}
		if string(key) == c.members[k].name {
			return k
		}
	}
	return -1
}

// appendInts appends s as json.Marshal writes a []int64.
func appendInts(b []byte, s []int64) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, n := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, n, 10)
	}
	return append(b, ']')
}

// appendCounts appends m as json.Marshal writes a map of counts: keys
// sorted, escaped as strings are.
func appendCounts[N int | int64](b []byte, m map[string]N) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = plainjson.AppendStringHTML(b, k)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(m[k]), 10)
	}
	return append(b, '}')
}

// appendTime appends t as json.Marshal writes a time.Time (MarshalJSON).
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		// The same checks fail there, with the words encoding/json reports.
		if _, jerr := t.MarshalJSON(); jerr != nil {
			err = jerr
		}
		return nil, errors.New("json: error calling MarshalJSON for type time.Time: " + err.Error())
	}
	return append(b, '"'), nil
}

// appendRaw appends raw as json.Marshal writes a json.RawMessage: null
// when nil, else compacted, with <, >, &, U+2028 and U+2029 escaped; raw
// that is not one JSON value is an error.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	if !json.Valid(raw) {
		return nil, errors.New("json: error calling MarshalJSON for type json.RawMessage: invalid JSON")
	}
	const hex = "0123456789abcdef"
	start := 0
	inString, escaped := false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			b = append(b, raw[start:i]...)
			start = i + 1
			continue
		}
		// Only in strings, raw being valid.
		switch {
		case c == '<' || c == '>' || c == '&':
			b = append(b, raw[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			b = append(b, raw[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[raw[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(b, raw[start:]...), nil
}

// Raw JSON (params, state) deeper or with more keys in one object than
// this is left to the reflection path.
const (
	maxRawDepth = 64
	maxRawKeys  = 64
)

// reader reads one message. Strings are collected end to end and made
// one string when the message is read (one allocation for them all), raw
// values copied into one buffer. It moves over space as checkKeys does.
type reader struct {
	keyScanner
	strs  []byte       // the strings' bytes, unescaped
	pend  []pendString // strings to set from strs
	raws  []pendRaw    // raw values to set, as spans of data
	keys  [][]byte     // the keys of the raw objects being read
	elems int          // skipValue: an array's elements
}

type pendString struct {
	p        *string
	from, to int
}

type pendRaw struct {
	p        *json.RawMessage
	from, to int
}

var readers = sync.Pool{New: func() any { return new(reader) }}

func (d *reader) reset() {
	d.data, d.i, d.elems = nil, 0, 0
	clear(d.pend)
	clear(d.raws)
	clear(d.keys)
	d.strs, d.pend, d.raws, d.keys = d.strs[:0], d.pend[:0], d.raws[:0], d.keys[:0]
	if cap(d.strs) > maxPooled {
		d.strs = nil
	}
}

// finish sets the strings and raw values read.
func (d *reader) finish() {
	if len(d.pend) > 0 {
		s := string(d.strs)
		for _, ps := range d.pend {
			if ps.from < ps.to {
				*ps.p = s[ps.from:ps.to]
			}
		}
	}
	if len(d.raws) > 0 {
		n := 0
		for _, r := range d.raws {
			n += r.to - r.from
		}
		buf := make([]byte, 0, n)
		for _, r := range d.raws {
			at := len(buf)
			buf = append(buf, d.data[r.from:r.to]...)
			*r.p = buf[at:len(buf):len(buf)]
		}
	}
}

func (d *reader) literal(word string) bool {
	if len(d.data)-d.i < len(word) || string(d.data[d.i:d.i+len(word)]) != word {
		return false
	}
	d.i += len(word)
	return true
}

// scanString moves past the string at d.i, checking it as encoding/json's
// scanner does (no control characters, known escapes), and returns its
// span, quotes included, and whether it holds an escape.
func (d *reader) scanString() (from, to int, escaped, ok bool) {
	from = d.i
	data := d.data
	for i := from + 1; i < len(data); {
		switch c := data[i]; {
		case c == '"':
			d.i = i + 1
			return from, i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(data) {
				return 0, 0, false, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if hex4(data[i+2:]) < 0 {
					return 0, 0, false, false
				}
				i += 6
			default:
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, false
		default:
			i++
		}
	}
	return 0, 0, false, false
}

// hex4 reads the 4 hex digits at the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// unescape appends the body of a checked JSON string as encoding/json
// reads it: a lone or broken surrogate becomes U+FFFD.
func unescape(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		switch c := s[i+1]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(s[i+2:])); pair != unicode.ReplacementChar {
						dst = utf8.AppendRune(dst, pair)
						i += 6
						continue
					}
				}
				r = unicode.ReplacementChar
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // " \ /
			dst = append(dst, c)
		}
		i += 2
	}
	return dst
}

// object moves through the object at d.i (at its '{'): for each member it
// reads the key (an escaped key gives up) and calls value with the reader
// at the member's value, for value to read it.
func (d *reader) object(value func(key []byte) bool) bool {
	d.i++ // {
	if d.next() == '}' {
		d.i++
		return true
	}
	for {
		if d.next() != '"' {
			return false
		}
		from, to, escaped, ok := d.scanString()
		if !ok || escaped || d.next() != ':' {
			return false
		}
		d.i++
		if !value(d.data[from+1 : to-1]) {
			return false
		}
		switch d.next() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// null reads a null, if one comes next.
func (d *reader) null() bool {
	return d.next() == 'n' && d.literal("null")
}

// readString reads a string (null leaves *p as it is).
func (d *reader) readString(p *string) bool {
	if d.null() {
		return true
	}
	if d.next() != '"' {
		return false
	}
	from, to, escaped, ok := d.scanString()
	if !ok {
		return false
	}
	at := len(d.strs)
	if escaped {
		d.strs = unescape(d.strs, d.data[from+1:to-1])
	} else {
		d.strs = append(d.strs, d.data[from+1:to-1]...)
	}
	d.pend = append(d.pend, pendString{p, at, len(d.strs)})
	return true
}

// number moves past the number at d.i, checking it as encoding/json's
// scanner does, and returns its span and whether it is an integer
// literal (no fraction, no exponent).
func (d *reader) number() (from, to int, integer, ok bool) {
	data, i := d.data, d.i
	from = i
	if i < len(data) && data[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
			n++
		}
		return n
	}
	first := i
	if n := digits(); n == 0 || n > 1 && data[first] == '0' {
		return 0, 0, false, false
	}
	integer = true
	if i < len(data) && data[i] == '.' {
		i++
		integer = false
		if digits() == 0 {
			return 0, 0, false, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		integer = false
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0, 0, false, false
		}
	}
	d.i = i
	return from, i, integer, true
}

// readInt reads an integer that fits in bits bits; set is false for
// null, which leaves the field as it is. A fraction or an exponent, even
// 1.0 or 1e2, is no integer to encoding/json.
func (d *reader) readInt(bits int) (n int64, set, ok bool) {
	if d.null() {
		return 0, false, true
	}
	from, to, integer, ok := d.number()
	if !ok || !integer {
		return 0, false, false
	}
	lit := d.data[from:to]
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if len(lit) > 19 {
		return 0, false, false // over 2⁶³
	}
	var u uint64
	for _, c := range lit {
		u = u*10 + uint64(c-'0')
	}
	limit := uint64(1)<<(bits-1) - 1
	if neg {
		limit++
	}
	if u > limit {
		return 0, false, false
	}
	n = int64(u)
	if neg {
		n = -n // -(1<<63) wraps to itself
	}
	return n, true, true
}

// readFloat reads a number as encoding/json does: strconv.ParseFloat,
// out of range refused (null leaves *p as it is).
func (d *reader) readFloat(p *float64) bool {
	if d.null() {
		return true
	}
	from, to, _, ok := d.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(d.data[from:to]), 64)
	if err != nil {
		return false
	}
	*p = f
	return true
}

// readRaw reads any JSON value as encoding/json copies it into a
// json.RawMessage: its bytes as they are, space inside kept.
func (d *reader) readRaw(p *json.RawMessage) bool {
	d.space()
	from := d.i
	if !d.skipValue(0) {
		return false
	}
	d.raws = append(d.raws, pendRaw{p, from, d.i})
	return true
}

// readTime reads a time.Time with its UnmarshalJSON, given the string's
// bytes as they are, as encoding/json does (null leaves *p as it is).
func (d *reader) readTime(p *time.Time) bool {
	if d.null() {
		return true
	}
	if d.next() != '"' {
		return false
	}
	from, to, _, ok := d.scanString()
	return ok && p.UnmarshalJSON(d.data[from:to]) == nil
}

// skipValue moves past one JSON value, checking it as encoding/json's
// scanner does and its objects' keys as checkKeys does (none repeated);
// an array's element count is left in d.elems. Escaped keys, deep
// nesting and wide objects give up.
func (d *reader) skipValue(depth int) bool {
	switch d.next() {
	case '{':
		if depth >= maxRawDepth {
			return false
		}
		base := len(d.keys)
		ok := d.object(func(key []byte) bool {
			if len(d.keys)-base >= maxRawKeys {
				return false
			}
			for _, k := range d.keys[base:] {
				if bytes.Equal(k, key) {
					return false
				}
			}
			d.keys = append(d.keys, key)
			return d.skipValue(depth + 1)
		})
		clear(d.keys[base:])
		d.keys = d.keys[:base]
		return ok
	case '[':
		if depth >= maxRawDepth {
			return false
		}
		d.i++
		if d.next() == ']' {
			d.i++
			d.elems = 0
			return true
		}
		for n := 1; ; n++ {
			if !d.skipValue(depth + 1) {
				return false
			}
			switch d.next() {
			case ',':
				d.i++
			case ']':
				d.i++
				d.elems = n
				return true
			default:
				return false
			}
		}
	case '"':
		_, _, _, ok := d.scanString()
		return ok
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		_, _, _, ok := d.number()
		return ok
	}
	return false
}

// encodeFast writes the messages that have a codec; ok is false for the
// others.
func encodeFast(m Message) (data []byte, ok bool, err error) {
	switch m := m.(type) {
	case *SampleRequest:
		data, err = sampleRequestCodec.encode(m)
	case *SampleResult:
		data, err = sampleResultCodec.encode(m)
	case *JournalEntry:
		data, err = journalEntryCodec.encode(m)
	default:
		return nil, false, nil
	}
	return data, true, err
}

// decodeFast reads the messages that have a codec and validates them;
// done is false where it gave up (another kind, or a message the codec
// leaves to the reflection path), m then as it was.
func decodeFast(data []byte, m Message) (done bool, err error) {
	switch m := m.(type) {
	case *SampleRequest:
		done = sampleRequestCodec.decode(data, m)
	case *SampleResult:
		done = sampleResultCodec.decode(data, m)
	}
	if !done {
		return false, nil
	}
	return true, m.Validate()
}
