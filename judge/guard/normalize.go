package guard

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Text and names are normalised before the secret guard looks at them, so
// that a credential cannot hide behind how it is spelt: ".env" with a
// zero-width space, "ＧＨＰ＿" in full-width letters or "pаssword" with a
// Cyrillic "а" are read as ".env", "GHP_" and "password". The detectors
// run on the normalised text; Redact maps what they find back to the
// original bytes, so legitimate non-Latin text keeps its letters.

// normalized is text after normalisation, with where each of its bytes
// came from: s[i] derives from original[lo[i]:hi[i]]. lo and hi are nil
// when s is the original (ASCII text, the common case, needs nothing).
type normalized struct {
	s      string
	lo, hi []int
}

// span maps the byte range [a, b) of n.s back to the original.
func (n normalized) span(a, b int) (int, int) {
	if n.lo == nil {
		return a, b
	}
	return n.lo[a], n.hi[b-1]
}

// Normalize returns text ready for detection: invisible characters
// removed, Unicode NFKC, look-alike letters folded to Latin. It is
// idempotent (FuzzSecretScan checks it).
func Normalize(text string) string { return normalizeMap(text).s }

// normalizeMap is Normalize, keeping the map back to text. The stages:
// drop invisible runes and fold look-alikes (rune by rune), NFKC (which
// can produce look-alikes from compatibility characters: fold again), and
// NFKC once more because a folded letter can compose with a following
// combining mark.
func normalizeMap(text string) normalized {
	if !needsNormalizing(text) {
		return normalized{s: text}
	}
	n := perRune(identity(text))
	n = nfkc(n)
	n = perRune(n)
	return nfkc(n)
}

// normalizeName is normalize for a file path: also lower case, slashes
// for backslashes, and no trailing dots or spaces on an element (Windows
// opens ".env." and ".env " as ".env").
func normalizeName(p string) string {
	n := p
	// Lower-casing and trimming can leave text that normalises further
	// (rarely); a few rounds reach the fixed point.
	for range 4 {
		next := trimElements(strings.ToLower(Normalize(n)))
		if next == n {
			break
		}
		n = next
	}
	return n
}

func trimElements(p string) string {
	els := strings.Split(strings.ReplaceAll(p, `\`, "/"), "/")
	for i, el := range els {
		if t := strings.TrimRight(el, ". "); t != "" {
			els[i] = t
		}
	}
	return strings.Join(els, "/")
}

// needsNormalizing reports whether normalizeMap would change text (most
// text, even with non-ASCII letters, does not: no map is needed then).
func needsNormalizing(text string) bool {
	if isASCII(text) {
		return false
	}
	for _, r := range text {
		if r >= utf8.RuneSelf {
			if _, ok := homoglyphs[r]; ok || invisible(r) {
				return true
			}
		}
	}
	return !norm.NFKC.IsNormalString(text)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func identity(s string) normalized {
	n := normalized{s: s, lo: make([]int, len(s)), hi: make([]int, len(s))}
	for i := 0; i < len(s); i++ {
		n.lo[i], n.hi[i] = i, i+1
	}
	return n
}

// perRune drops invisible runes and folds look-alikes, rune by rune.
func perRune(in normalized) normalized {
	var b strings.Builder
	b.Grow(len(in.s))
	out := normalized{lo: make([]int, 0, len(in.s)), hi: make([]int, 0, len(in.s))}
	for i, r := range in.s {
		size := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, size = utf8.DecodeRuneInString(in.s[i:])
		}
		if invisible(r) {
			continue
		}
		if f, ok := homoglyphs[r]; ok {
			r = f
		}
		before := b.Len()
		if r == utf8.RuneError && size == 1 {
			b.WriteByte(in.s[i]) // keep invalid bytes as they are
		} else {
			b.WriteRune(r)
		}
		lo, hi := in.lo[i], in.hi[i+size-1]
		for range b.Len() - before {
			out.lo, out.hi = append(out.lo, lo), append(out.hi, hi)
		}
	}
	out.s = b.String()
	return out
}

// nfkc applies Unicode NFKC, segment by segment, keeping the map.
func nfkc(in normalized) normalized {
	if norm.NFKC.IsNormalString(in.s) {
		return in
	}
	var it norm.Iter
	it.InitString(norm.NFKC, in.s)
	var b strings.Builder
	b.Grow(len(in.s))
	out := normalized{lo: make([]int, 0, len(in.s)), hi: make([]int, 0, len(in.s))}
	for !it.Done() {
		start := it.Pos()
		seg := it.Next()
		end := it.Pos()
		if end <= start {
			continue
		}
		b.Write(seg)
		lo, hi := in.lo[start], in.hi[end-1]
		for range seg {
			out.lo, out.hi = append(out.lo, lo), append(out.hi, hi)
		}
	}
	out.s = b.String()
	return out
}

// invisible reports runes that render as nothing: format characters (Cf:
// zero-width space and joiners, bidi controls, soft hyphen, BOM) and the
// fillers and selectors that are not Cf but draw nothing either.
func invisible(r rune) bool {
	switch {
	case unicode.Is(unicode.Cf, r):
		return true
	case r == 0x034F, r == 0x115F, r == 0x1160, r == 0x17B4, r == 0x17B5, r == 0x3164, r == 0xFFA0:
		return true
	case r >= 0x180B && r <= 0x180F, r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF:
		return true
	}
	return false
}

// homoglyphs folds letters of other scripts that look like Latin ones
// (Cyrillic, Greek, Armenian and a few Latin variants) to the Latin
// letter. NFKC already folds full-width, mathematical and other
// compatibility forms.
var homoglyphs = map[rune]rune{
	// Cyrillic.
	'А': 'A', 'В': 'B', 'Е': 'E', 'К': 'K', 'М': 'M', 'Н': 'H', 'О': 'O', 'Р': 'P', 'С': 'C', 'Т': 'T',
	'Х': 'X', 'У': 'Y', 'Ѕ': 'S', 'І': 'I', 'Ј': 'J', 'Ү': 'Y', 'Ԁ': 'D', 'Ԛ': 'Q', 'Ԝ': 'W', 'Ӏ': 'I',
	'а': 'a', 'е': 'e', 'о': 'o', 'р': 'p', 'с': 'c', 'у': 'y', 'х': 'x', 'ѕ': 's', 'і': 'i', 'ј': 'j',
	'ԁ': 'd', 'һ': 'h', 'ӏ': 'l', 'ԛ': 'q', 'ԝ': 'w', 'ү': 'y', 'ɡ': 'g',
	// Greek.
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O',
	'Ρ': 'P', 'Τ': 'T', 'Υ': 'Y', 'Χ': 'X', 'ο': 'o', 'ν': 'v', 'ρ': 'p', 'ι': 'i', 'υ': 'u', 'ϲ': 'c',
	'ϳ': 'j', 'α': 'a', 'κ': 'k',
	// Armenian.
	'օ': 'o', 'ս': 'u', 'հ': 'h', 'ո': 'n', 'ց': 'g', 'զ': 'q',
	// Latin variants.
	'ı': 'i', 'ȷ': 'j', 'ǀ': 'l', 'ƽ': 's',
}
