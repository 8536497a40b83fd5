package guard

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Obfuscated secrets. Normalisation (normalize.go) already undoes
// invisible characters, look-alike letters and full-width forms; these
// passes undo the disguises left, so that a token a model could put back
// together is found:
//   - split: a token cut by spaces, dashes, dots or line breaks, or built
//     by concatenating string literals ("sk-" + "proj-…", Python's
//     implicit "ab" "cd", ["…", "…"].join("")), when it starts with a
//     provider prefix and the rest looks random;
//   - reversed: a line holding a reversed prefix or keyword ("-ks",
//     "drowssap") is read backwards;
//   - encoded: base64, hexadecimal (plain or separated), percent-encoding,
//     \x and \u escapes, HTML character references and lists of character
//     codes are decoded.
// What the reversed and decoded passes uncover is read by every own rule
// (ownSpans, one depth less); a finding marks the whole disguised text.

// obfuscationRule is one pass: find emits the spans of n that hide a
// secret, reading what it uncovers with read (ownSpans, one depth less;
// without this pass when once is set: reversing twice gives n back).
type obfuscationRule struct {
	id       string
	keywords []string
	once     bool
	find     func(n string, read func(string) []secretSpan, emit func(start, end int))
}

var obfuscationRules = []obfuscationRule{
	{id: "split-token", find: func(n string, _ func(string) []secretSpan, emit func(int, int)) { splitTokens(n, emit) }},
	{id: "reversed", keywords: reversedKeys, once: true, find: reversedText},
	{id: "encoded", find: encodedSecrets},
}

// splitSeparator reports the characters a split or concatenated token is
// read through.
func splitSeparator(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '+', ',', '.', '&', '|', '-', '_', '\\':
		return true
	}
	return false
}

func alnum(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// splitPrefixes are the provider prefixes of tokens without their
// separators (sk-proj- is skproj).
var splitPrefixes = []string{
	"skproj", "skant", "skor", "sksvcacct", "skadmin", "sk", "ghp", "gho", "ghu", "ghs", "ghr", "githubpat",
	"xoxa", "xoxb", "xoxp", "xoxo", "xoxs", "xoxr", "AKIA", "ASIA", "ABIA", "ACCA", "A3T", "AIza", "hf", "glpat",
	"sklive", "rklive", "npm",
}

// maxSplitGap is the most separator characters read between two parts of
// a split token (`" +\n    "` is 9).
const maxSplitGap = 16

// splitTokens finds provider tokens written in parts. It reads n without
// separators (squeezed), keeping where each byte came from; a prefix that
// starts a word of n is followed word by word until a separator gap too
// long, a character that is no separator, or an ordinary word.
func splitTokens(n string, emit func(int, int)) {
	sq := make([]byte, 0, len(n))
	pos := make([]int32, 0, len(n))
	for i := 0; i < len(n); i++ {
		if !splitSeparator(n[i]) {
			sq = append(sq, n[i])
			pos = append(pos, int32(i))
		}
	}
	for a := range sq {
		start := int(pos[a])
		if start > 0 && alnum(n[start-1]) || strings.IndexByte("sgxAhnr", sq[a]) < 0 {
			continue // inside a word (task, risk), or no prefix starts here
		}
		for _, p := range splitPrefixes {
			if !strings.HasPrefix(string(sq[a:min(len(sq), a+len(p))]), p) {
				continue
			}
			b := a + len(p)
			if int(pos[b-1])-start+1 == b-a && tokenEnd(n, int(pos[b-1])+1)-start >= 24 {
				break // written whole: the rules on n see it
			}
			if tail, end := splitTail(n, sq, pos, b); splitSecret(p, tail) {
				emit(start, end)
			}
			break
		}
	}
}

// tokenEnd returns where the token of n that runs on from i ends.
func tokenEnd(n string, i int) int {
	for i < len(n) && (alnum(n[i]) || n[i] == '-' || n[i] == '_') {
		i++
	}
	return i
}

// splitTail reads the rest of a split token from squeezed index b: its
// characters and the end of its last part in n.
func splitTail(n string, sq []byte, pos []int32, b int) (string, int) {
	k := b
	end := int(pos[b-1]) + 1
	for k < len(sq) && k-b < 256 && alnum(sq[k]) {
		at := int(pos[k])
		if at != end {
			gap := n[end:at]
			if len(gap) > maxSplitGap || strings.Trim(gap, " \t\n\r\"'`+,.&|-_\\") != "" {
				break
			}
			// A new part: an ordinary word ends the token.
			w := at
			for w < len(n) && alnum(n[w]) {
				w++
			}
			if word := strings.ToLower(n[at:w]); w-at > 1 && (stopValues[word] || commonWord(word)) || slices.Contains(splitPrefixes, n[at:w]) {
				break // an ordinary word, or the prefix of the next token
			}
		}
		end = at + 1
		k++
	}
	return string(sq[b:k]), end
}

// commonWord reports a lower-case word of English or code that ends a
// split token.
func commonWord(w string) bool {
	switch w {
	case "join", "concat", "func", "return", "const", "var", "let", "key", "keys", "tokens", "here", "mine",
		"then", "please", "thanks", "done", "end", "and", "the", "ok":
		return true
	}
	return false
}

// splitSecret reports whether tail, read after prefix, is a token's body.
func splitSecret(prefix, tail string) bool {
	switch prefix {
	case "AKIA", "ASIA", "ABIA", "ACCA":
		if len(tail) < 16 {
			return false
		}
		for i := 0; i < 16; i++ {
			if c := tail[i]; !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
		return true
	}
	if strings.HasPrefix(prefix, "A3T") {
		return len(tail) >= 16
	}
	minLen := 20
	if prefix == "sk" || prefix == "npm" {
		minLen = 32
	}
	return len(tail) >= minLen && randomLooking(tail[:min(len(tail), 64)])
}

// reversedKeys are token prefixes and keywords spelt backwards.
var reversedKeys = []string{
	"-ks", "_phg", "_ohg", "_uhg", "_shg", "_rhg", "_tap_buhtig", "aika", "aisa", "azia", "_fh", "-taplg",
	"-bxox", "-pxox", "-axox", "-oxox", "-sxox", "-rxox", "_evil_ks", "_evil_kr", "drowssap", "dwssap", "ssaperiuqer",
	"yek yek etavirp", "yek etavirp",
}

// reversedText reads backwards the lines of n that hold a reversed key
// (adjacent ones as one text); a finding inside a content hash is
// dropped.
func reversedText(n string, read func(string) []secretSpan, emit func(int, int)) {
	for _, w := range keywordWindows(n, lowerASCII(n), reversedKeys, 0) {
		rev, at := reverseRunes(n[w[0]:w[1]])
		for _, sp := range read(rev) {
			// Byte j of rev is byte at[j] of the window.
			lo, hi := at[sp.start], at[sp.start]
			for j := sp.start; j < sp.end; j++ {
				lo, hi = min(lo, at[j]), max(hi, at[j])
			}
			if !contentHash(n, w[0]+lo, w[0]+hi+1) {
				emit(w[0]+lo, w[0]+hi+1)
			}
		}
	}
}

// contentHash reports whether n[start:end] lies in a content hash
// (sha512-…, h1:…): reversed, a hash's random text can read as a key.
func contentHash(n string, start, end int) bool {
	ws := start
	for ws > 0 && base64Char(n[ws-1]) {
		ws--
	}
	we := end
	for we < len(n) && base64Char(n[we]) {
		we++
	}
	return hashPrefix.MatchString(n[max(0, ws-16):ws]) || hashPrefix.MatchString(hashHead(n[ws:we]))
}

// reverseRunes returns s backwards (rune by rune) and, for each byte of
// the result, the byte of s it came from.
func reverseRunes(s string) (string, []int) {
	var b strings.Builder
	b.Grow(len(s))
	at := make([]int, 0, len(s))
	for i := len(s); i > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
		if r == utf8.RuneError && size == 1 {
			b.WriteByte(s[i])
		} else {
			b.WriteRune(r)
		}
		for k := range b.Len() - len(at) {
			at = append(at, i+min(k, size-1))
		}
	}
	return b.String(), at
}

// decoders turn a disguised text back. Each reads runs of the bytes in
// its alphabet at least minLen long, holding its mark at least three
// times ("": any run): most text has nothing for a decoder to undo, and
// finding that out costs one pass over the bytes.
var decoders = []struct {
	in     func(c byte) bool
	minLen int
	mark   string
	decode func(string) (string, bool)
}{
	{func(c byte) bool { return alnum(c) || c == '+' || c == '/' || c == '_' || c == '-' || c == '=' }, 16, "", decodeBase64},
	{func(c byte) bool {
		return hexDigit(c) || c == 'x' || c == 'X' || c == ' ' || c == ':' || c == ',' || c == '-'
	}, 24, "", decodeHex},
	{func(c byte) bool { return alnum(c) || strings.IndexByte("%._~+-", c) >= 0 }, 9, "%", func(s string) (string, bool) {
		d, err := url.PathUnescape(s)
		return d, err == nil
	}},
	{func(c byte) bool { return alnum(c) || strings.IndexByte(`\{}_-`, c) >= 0 }, 12, `\`, decodeEscapes},
	{func(c byte) bool { return alnum(c) || strings.IndexByte("&#;_-", c) >= 0 }, 12, "&#", decodeEntities},
	{func(c byte) bool { return c >= '0' && c <= '9' || c == ',' || c == ' ' || c == '\t' }, 23, ",", decodeCodes},
}

func hexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// encodedSecrets decodes every candidate run of each decoder and reads
// the result; a secret found in it marks the whole run.
func encodedSecrets(n string, read func(string) []secretSpan, emit func(int, int)) {
	for _, d := range decoders {
		if d.mark != "" && !strings.Contains(n, d.mark) {
			continue
		}
		for start := 0; start < len(n); {
			if !d.in(n[start]) {
				start++
				continue
			}
			end := start
			for end < len(n) && d.in(n[end]) {
				end++
			}
			c := strings.Trim(n[start:end], " \t,-")
			cs := start + strings.Index(n[start:end], c)
			start = end
			if len(c) < d.minLen || d.mark != "" && strings.Count(c, d.mark) < 3 {
				continue
			}
			text, ok := d.decode(c)
			if !ok || text == c || !printable(text) {
				continue
			}
			if len(read(Normalize(text))) > 0 {
				emit(cs, cs+len(c))
			}
		}
	}
}

// printable reports text a person could read: valid UTF-8, at least 90%
// printable characters.
func printable(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	bad, total := 0, 0
	for _, r := range s {
		total++
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' || r == 0x7f || r == utf8.RuneError {
			bad++
		}
	}
	return bad*10 <= total
}

func decodeBase64(s string) (string, bool) {
	t := strings.TrimRight(s, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(t); err == nil {
			return string(b), true
		}
	}
	return "", false
}

// decodeHex reads hexadecimal: one run of digits, or pairs separated by
// blanks, colons, commas or dashes, each pair perhaps written 0x73.
func decodeHex(s string) (string, bool) {
	if !strings.ContainsAny(s, " :,-xX") {
		b, err := hex.DecodeString(s)
		return string(b), err == nil
	}
	var out []byte
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(" :,-", r) }) {
		f = strings.TrimPrefix(strings.TrimPrefix(f, "0x"), "0X")
		b, err := hex.DecodeString(f)
		if err != nil || len(b) != 1 {
			return "", false
		}
		out = append(out, b[0])
	}
	return string(out), len(out) >= 12
}

// decodeEscapes undoes \xHH, \uHHHH, \u{H…} and octal \OOO escapes.
func decodeEscapes(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		var digits string
		base, skip := 16, 0
		switch {
		case s[i+1] == 'x' && i+4 <= len(s):
			digits, skip = s[i+2:i+4], 4
		case s[i+1] == 'u' && i+2 < len(s) && s[i+2] == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return "", false
			}
			digits, skip = s[i+3:i+j], j+1
		case s[i+1] == 'u' && i+6 <= len(s):
			digits, skip = s[i+2:i+6], 6
		case s[i+1] >= '0' && s[i+1] <= '7' && i+4 <= len(s):
			digits, skip, base = s[i+1:i+4], 4, 8
		default:
			return "", false
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil {
			return "", false
		}
		if base == 16 && s[i+1] == 'x' || base == 8 {
			b.WriteByte(byte(v))
		} else {
			b.WriteRune(rune(v))
		}
		i += skip
	}
	return b.String(), true
}

// decodeEntities undoes HTML character references (&#115; &#x73;).
func decodeEntities(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); {
		if !strings.HasPrefix(s[i:], "&#") {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := strings.IndexByte(s[i:], ';')
		if j < 0 {
			return "", false
		}
		num, base := s[i+2:i+j], 10
		if num != "" && (num[0] == 'x' || num[0] == 'X') {
			num, base = num[1:], 16
		}
		v, err := strconv.ParseUint(num, base, 32)
		if err != nil || v > utf8.MaxRune {
			return "", false
		}
		b.WriteRune(rune(v))
		i += j + 1
	}
	return b.String(), true
}

// decodeCodes reads a list of character codes (115, 107, 45, …).
func decodeCodes(s string) (string, bool) {
	var b strings.Builder
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0x20 || v > 0x7e {
			return "", false
		}
		b.WriteByte(byte(v))
	}
	return b.String(), true
}
