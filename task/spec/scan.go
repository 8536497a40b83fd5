package spec

import (
	"regexp"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// scanner finds every match of a pattern in a reply, as
// regexp.FindAllStringSubmatchIndex does (FuzzScanner holds it to that),
// faster where the pattern's matches can only start at a few bytes.
//
// Go's regexp tries a match at every position of the text unless the
// pattern starts with a literal; a reply is mostly reasoning the answer
// pattern does not start in (hanoi's `\bmove\s*=...|\bnext_state\s*=...`
// can start only at an 'm' or an 'n'). The scanner jumps from one such
// byte to the next and tries the pattern anchored there, with the byte
// before it in view, so that \b, (?m)^ and \A judge it as the unanchored
// search would.
type scanner struct {
	re *regexp.Regexp
	// first marks the bytes a match can start with; nil when the pattern
	// could start almost anywhere (or match the empty string): then re
	// does the whole search.
	first *[256]bool
	// at matches re anchored at the text's start; after matches one rune
	// (the one before the candidate), then re.
	at, after *regexp.Regexp
}

// maxFirstBytes bounds the start bytes worth jumping between.
const maxFirstBytes = 24

func newScanner(re *regexp.Regexp) *scanner {
	s := &scanner{re: re}
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return s
	}
	set := map[byte]bool{}
	if nullable, ok := firstBytes(tree.Simplify(), set); !ok || nullable || len(set) > maxFirstBytes {
		return s
	}
	at, err1 := regexp.Compile(`^(?:` + re.String() + `)`)
	after, err2 := regexp.Compile(`^(?s:.)(?:` + re.String() + `)`)
	if err1 != nil || err2 != nil || at.NumSubexp() != re.NumSubexp() || after.NumSubexp() != re.NumSubexp() {
		return s
	}
	var first [256]bool
	for b := range set {
		first[b] = true
	}
	s.first, s.at, s.after = &first, at, after
	return s
}

// all returns every match's submatch indexes, as
// re.FindAllStringSubmatchIndex(text, -1) does.
func (s *scanner) all(text string) [][]int {
	if s.first == nil {
		return s.re.FindAllStringSubmatchIndex(text, -1)
	}
	var out [][]int
	for pos := 0; pos < len(text); {
		i := pos
		for i < len(text) && !s.first[text[i]] {
			i++
		}
		if i == len(text) {
			break
		}
		m := s.matchAt(text, i)
		if m == nil {
			pos = i + 1
			continue
		}
		out = append(out, m)
		pos = m[1] // matches are never empty: the pattern is not nullable
	}
	return out
}

// matchAt is the match of the pattern starting exactly at i, if any, with
// indexes into text.
func (s *scanner) matchAt(text string, i int) []int {
	if i == 0 {
		return s.at.FindStringSubmatchIndex(text)
	}
	// One rune of context: the one ending at i. A candidate byte never
	// sits inside a rune (a first byte of a match is a rune's first byte).
	_, size := utf8.DecodeLastRuneInString(text[:i])
	j := i - size
	m := s.after.FindStringSubmatchIndex(text[j:])
	if m == nil {
		return nil
	}
	for k := range m {
		if m[k] >= 0 {
			m[k] += j
		}
	}
	m[0] = i // the context rune is not part of the match
	return m
}

// firstBytes adds to set every byte a match of re can start with and says
// whether re matches the empty string; ok is false when the set would be
// everything or unknowable (any character, a large class).
func firstBytes(re *syntax.Regexp, set map[byte]bool) (nullable, ok bool) {
	switch re.Op {
	case syntax.OpNoMatch:
		return false, true
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true, true
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return true, true
		}
		r := re.Rune[0]
		if !addRune(set, r) {
			return false, false
		}
		if re.Flags&syntax.FoldCase != 0 {
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				if !addRune(set, f) {
					return false, false
				}
			}
		}
		return false, true
	case syntax.OpCharClass:
		n := 0
		for k := 0; k+1 < len(re.Rune); k += 2 {
			n += int(re.Rune[k+1]-re.Rune[k]) + 1
			if n > maxFirstBytes {
				return false, false
			}
		}
		for k := 0; k+1 < len(re.Rune); k += 2 {
			for r := re.Rune[k]; r <= re.Rune[k+1]; r++ {
				if !addRune(set, r) {
					return false, false
				}
			}
		}
		return false, true
	case syntax.OpCapture:
		return firstBytes(re.Sub[0], set)
	case syntax.OpStar, syntax.OpQuest:
		_, ok := firstBytes(re.Sub[0], set)
		return true, ok
	case syntax.OpPlus:
		return firstBytes(re.Sub[0], set)
	case syntax.OpRepeat:
		nullable, ok := firstBytes(re.Sub[0], set)
		return nullable || re.Min == 0, ok
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			nullable, ok := firstBytes(sub, set)
			if !ok {
				return false, false
			}
			if !nullable {
				return false, true
			}
		}
		return true, true
	case syntax.OpAlternate:
		any := false
		for _, sub := range re.Sub {
			nullable, ok := firstBytes(sub, set)
			if !ok {
				return false, false
			}
			any = any || nullable
		}
		return any, true
	}
	return false, false // any character, or an op this does not know
}

// addRune adds r's first UTF-8 byte. It refuses U+FFFD, which the regexp
// also matches at any byte that is not UTF-8, and what is not a rune.
func addRune(set map[byte]bool, r rune) bool {
	if r == utf8.RuneError || !utf8.ValidRune(r) {
		return false
	}
	var b [utf8.UTFMax]byte
	utf8.EncodeRune(b[:], r)
	set[b[0]] = true
	return true
}
