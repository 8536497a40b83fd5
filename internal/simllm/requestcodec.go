package simllm

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The fast path of decodeRequest: a hand-written reader for the chat
// bodies clients send, on the hot path of every model call (encoding/json's
// reflection was a third of the handler's CPU). It reads a body to exactly
// the chatRequest encoding/json makes of it, or gives up and leaves the body
// to encoding/json: every error, and every body it is not sure of, goes
// the old way (FuzzDecodeRequest holds the two paths to the same values).
//
// It gives up on: anything that is not valid JSON or has data after the
// object; a repeated known key; a key with an escape or a non-ASCII byte,
// or one that matches a known key only case-insensitively (encoding/json
// matches names case-insensitively); a known field of an unexpected type
// (a content array, a float or out-of-range integer, a string where a bool
// goes); a string that is not UTF-8 or holds an escaped surrogate; nesting
// deeper than maxFastDepth.

// maxFastDepth bounds the nesting of the values the reader skips.
const maxFastDepth = 64

// fastRequest is one allocation for the request and what its pointer
// fields point to.
type fastRequest struct {
	req                               chatRequest
	seed                              int64
	n, maxTokens, maxCompletionTokens int
	stream, includeUsage              bool
	opts                              streamOptions
	msgs                              [4]chatMessage // Messages while they fit
	temp                              [16]byte       // Temperature while it fits
}

// Known keys; any other key that matches one case-insensitively, and so
// would be matched by encoding/json, sends the body the slow way.
var (
	requestKeys = []string{"model", "messages", "temperature", "seed", "n", "max_tokens", "max_completion_tokens", "stream", "stream_options"}
	messageKeys = []string{"role", "content"}
	optionKeys  = []string{"include_usage"}
)

// decodeRequestFast reads body as encoding/json reads it into a
// chatRequest; false: not sure, use encoding/json.
func decodeRequestFast(body []byte) (*chatRequest, bool) {
	d := reqReader{b: body}
	f := &fastRequest{}
	d.space()
	if !d.request(f) {
		return nil, false
	}
	d.space()
	if d.i != len(d.b) {
		return nil, false
	}
	f.req.temperatureSet = f.req.Temperature != nil
	return &f.req, true
}

type reqReader struct {
	b []byte
	i int
}

func (d *reqReader) request(f *fastRequest) bool {
	req := &f.req
	var seen uint16
	return d.object(requestKeys, func(k int) bool {
		if k < 0 {
			return d.skip(0)
		}
		if seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		switch requestKeys[k] {
		case "model":
			s, null, ok := d.stringOrNull()
			if !null {
				req.Model = s
			}
			return ok
		case "messages":
			return d.messages(f)
		case "temperature":
			start := d.i
			if !d.skip(0) {
				return false
			}
			raw := d.b[start:d.i]
			if len(raw) <= len(f.temp) {
				req.Temperature = f.temp[:copy(f.temp[:], raw):len(raw)]
			} else {
				req.Temperature = append([]byte(nil), raw...)
			}
			return true
		case "seed":
			v, null, ok := d.integer()
			if ok && !null {
				f.seed = v
				req.Seed = &f.seed
			}
			return ok
		case "n":
			return d.intField(&req.N, &f.n)
		case "max_tokens":
			return d.intField(&req.MaxTokens, &f.maxTokens)
		case "max_completion_tokens":
			return d.intField(&req.MaxCompletionTokens, &f.maxCompletionTokens)
		case "stream":
			return d.boolField(&req.Stream, &f.stream)
		default: // stream_options
			if d.null() {
				return true
			}
			var seenUsage bool
			req.StreamOptions = &f.opts
			return d.object(optionKeys, func(k int) bool {
				if k < 0 {
					return d.skip(0)
				}
				if seenUsage {
					return false
				}
				seenUsage = true
				return d.boolField(&f.opts.IncludeUsage, &f.includeUsage)
			})
		}
	})
}

// messages reads the messages array or null.
func (d *reqReader) messages(f *fastRequest) bool {
	if d.null() {
		return true
	}
	f.req.Messages = f.msgs[:0]
	return d.array(func() bool {
		f.req.Messages = append(f.req.Messages, chatMessage{})
		return d.message(&f.req.Messages[len(f.req.Messages)-1])
	})
}

// message reads one message object or null.
func (d *reqReader) message(m *chatMessage) bool {
	if d.null() {
		return true
	}
	var seen [2]bool
	return d.object(messageKeys, func(k int) bool {
		if k < 0 {
			return d.skip(0)
		}
		if seen[k] {
			return false
		}
		seen[k] = true
		s, null, ok := d.stringOrNull()
		if !ok || null {
			return ok
		}
		if k == 0 {
			m.Role = s
		} else {
			m.Content = s
		}
		return true
	})
}

// object reads an object from its '{', calling member for each key with
// the key's index in keys, or -1 for another key; member reads the value.
func (d *reqReader) object(keys []string, member func(k int) bool) bool {
	if d.next() != '{' {
		return false
	}
	d.space()
	if d.peek() == '}' {
		d.i++
		return true
	}
	for {
		d.space()
		k, ok := d.key(keys)
		if !ok {
			return false
		}
		d.space()
		if d.next() != ':' {
			return false
		}
		d.space()
		if !member(k) {
			return false
		}
		d.space()
		switch d.next() {
		case ',':
		case '}':
			return true
		default:
			return false
		}
	}
}

// array reads an array from its '[', calling elem to read each element.
func (d *reqReader) array(elem func() bool) bool {
	if d.next() != '[' {
		return false
	}
	d.space()
	if d.peek() == ']' {
		d.i++
		return true
	}
	for {
		d.space()
		if !elem() {
			return false
		}
		d.space()
		switch d.next() {
		case ',':
		case ']':
			return true
		default:
			return false
		}
	}
}

// key reads an object key: its index in keys, or -1 for a key that is
// none of them, not even case-insensitively. With keys, a key with an
// escape or a byte outside ASCII is refused; without, any key is -1.
func (d *reqReader) key(keys []string) (int, bool) {
	if d.peek() != '"' {
		return 0, false
	}
	if keys == nil {
		_, _, ok := d.scanString()
		return -1, ok
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			break
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return 0, false
		}
		d.i++
	}
	if d.i >= len(d.b) {
		return 0, false
	}
	name := d.b[start:d.i]
	d.i++
	for k, want := range keys {
		if string(name) == want {
			return k, true
		}
	}
	for _, want := range keys {
		if strings.EqualFold(string(name), want) {
			return 0, false
		}
	}
	return -1, true
}

// stringOrNull reads a string or null.
func (d *reqReader) stringOrNull() (s string, null, ok bool) {
	if d.null() {
		return "", true, true
	}
	if d.peek() != '"' {
		return "", false, false
	}
	start := d.i
	escaped, ascii, ok := d.scanString()
	if !ok {
		return "", false, false
	}
	raw := d.b[start+1 : d.i-1]
	if !ascii && !utf8.Valid(raw) {
		return "", false, false
	}
	if !escaped {
		return role(raw), false, true
	}
	s, ok = unescape(raw)
	return s, false, ok
}

// role returns raw as a string, without a copy for the message roles.
func role(raw []byte) string {
	switch string(raw) {
	case "system":
		return "system"
	case "user":
		return "user"
	case "assistant":
		return "assistant"
	}
	return string(raw)
}

// scanString moves past a string whose syntax is valid JSON, reporting
// whether it holds an escape and whether it is all ASCII.
func (d *reqReader) scanString() (escaped, ascii, ok bool) {
	b := d.b
	var or byte // of the unescaped bytes: ASCII while below 0x80
	for i := d.i + 1; i < len(b); {
		c := b[i]
		if plainByte[c] {
			or |= c
			i++
			continue
		}
		switch {
		case c == '"':
			d.i = i + 1
			return escaped, or < utf8.RuneSelf, true
		case c != '\\' || i+1 >= len(b): // a control character, or the end
			return false, false, false
		}
		escaped = true
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if _, ok := hex4(b[i+2:]); !ok {
				return false, false, false
			}
			i += 6
		default:
			return false, false, false
		}
	}
	return false, false, false
}

// plainByte: the bytes a JSON string holds as they are.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// unescape decodes the body of a string scanString passed; an escaped
// surrogate is refused.
func unescape(raw []byte) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw)) // an escape is never shorter than what it stands for
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			b.Write(raw[i:])
			break
		}
		j += i
		b.Write(raw[i:j])
		switch c := raw[j+1]; c {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, _ := hex4(raw[j+2:])
			if r >= 0xd800 && r < 0xe000 {
				return "", false
			}
			b.WriteRune(r)
			i = j + 6
			continue
		default: // " \ /
			b.WriteByte(c)
		}
		i = j + 2
	}
	return b.String(), true
}

// hex4 reads the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v), err == nil
}

// intField reads an integer or null into *field, pointing it at store.
func (d *reqReader) intField(field **int, store *int) bool {
	v, null, ok := d.integer()
	if !ok || null {
		return ok
	}
	if int64(int(v)) != v { // a 32-bit int: encoding/json's range error
		return false
	}
	*store = int(v)
	*field = store
	return true
}

// boolField reads true, false or null into *field, pointing it at store.
func (d *reqReader) boolField(field **bool, store *bool) bool {
	switch {
	case d.null():
		return true
	case d.literal("true"):
		*store = true
	case d.literal("false"):
		*store = false
	default:
		return false
	}
	*field = store
	return true
}

// integer reads null or an integer literal that fits an int64, written
// without a fraction or an exponent.
func (d *reqReader) integer() (v int64, null, ok bool) {
	if d.null() {
		return 0, true, true
	}
	neg := d.peek() == '-'
	if neg {
		d.i++
	}
	start := d.i
	var u uint64
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		if u > (1<<63)/10 {
			return 0, false, false
		}
		u = u*10 + uint64(d.b[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	switch {
	case digits == 0 || digits > 1 && d.b[start] == '0':
		return 0, false, false
	case d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E'):
		return 0, false, false
	case neg && u <= 1<<63:
		return -int64(u), false, true
	case !neg && u < 1<<63:
		return int64(u), false, true
	}
	return 0, false, false
}

// skip moves past any valid JSON value.
func (d *reqReader) skip(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	switch c := d.peek(); {
	case c == '{':
		return d.object(nil, func(int) bool { return d.skip(depth + 1) })
	case c == '[':
		return d.array(func() bool { return d.skip(depth + 1) })
	case c == '"':
		_, _, ok := d.scanString()
		return ok
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	}
	return false
}

// number moves past a number with JSON's grammar.
func (d *reqReader) number() bool {
	if d.peek() == '-' {
		d.i++
	}
	start := d.i
	n := d.digits()
	if n == 0 || n > 1 && d.b[start] == '0' {
		return false
	}
	if d.peek() == '.' {
		d.i++
		if d.digits() == 0 {
			return false
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if d.digits() == 0 {
			return false
		}
	}
	return true
}

func (d *reqReader) digits() int {
	start := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i - start
}

func (d *reqReader) null() bool { return d.literal("null") }

// literal moves past word if it comes next.
func (d *reqReader) literal(word string) bool {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return false
	}
	d.i += len(word)
	return true
}

func (d *reqReader) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\r', '\n':
			d.i++
		default:
			return
		}
	}
}

// peek is the next byte, 0 at the end.
func (d *reqReader) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// next is the next byte, 0 at the end, and moves past it.
func (d *reqReader) next() byte {
	c := d.peek()
	d.i++
	return c
}
