package schemas

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The reader behind a codec's decode (codec.go): a strict JSON reader that
// reads what encoding/json reads, and gives up where it is not plainly so.

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
