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

	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// A codec reads and writes one wire struct without reflection: the hot
// messages are read and written by one (samplecodec.go; the journal entry
// is only written, journalcodec.go), the others by encoding/json; what it
// reads, it reads with the strict reader in codecreader.go. A codec is a list of members, one a JSON field of the
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
