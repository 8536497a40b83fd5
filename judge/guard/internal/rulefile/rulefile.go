// Package rulefile reads gitleaks' published rule file (config/gitleaks.toml):
// the TOML subset it is written in, into plain values. The judge's secret
// guard is generated from it (judge/guard/gitleaks_gen.go); nothing at run time
// reads TOML. The reader is strict: a key or construct it does not know
// is an error, so a newer rule file that needs more of TOML, or a rule
// feature the guard does not apply, is noticed when it is vendored rather
// than silently dropped.
package rulefile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrSyntax is wrapped by every error about the file.
var ErrSyntax = errors.New("rulefile: syntax")

// File is a rule file.
type File struct {
	Title      string
	MinVersion string
	// Allowlist is the global [allowlist]: what no rule reports.
	Allowlist *Allowlist
	Rules     []Rule
}

// Rule is one [[rules]] table.
type Rule struct {
	ID, Description string
	// Regex finds the candidate (Go RE2 syntax); empty for a rule on the
	// file path alone.
	Regex string
	// Path restricts the rule to file paths it matches.
	Path string
	// SecretGroup is the capture group holding the secret (0: the first
	// non-empty group, or the whole match).
	SecretGroup int
	// Entropy is the Shannon entropy the secret must exceed (0: none).
	Entropy float64
	// Keywords: the rule runs only on text holding one (lower case).
	Keywords   []string
	Allowlists []Allowlist
}

// Allowlist says what a rule (or every rule) does not report.
type Allowlist struct {
	Description string
	// Condition is "OR" (the default: any check allows) or "AND" (all do).
	Condition string
	// RegexTarget is what Regexes are matched against: "" (the secret),
	// "match" or "line".
	RegexTarget string
	Regexes     []string
	Paths       []string
	StopWords   []string
	Commits     []string
}

// Parse reads a rule file.
func Parse(src string) (*File, error) {
	p := &parser{src: src, line: 1}
	f := &File{}
	// where key = value pairs go: the top level, [allowlist], the last
	// [[rules]] or the last [[rules.allowlists]].
	table := "top"
	for {
		p.skipSpace(true)
		if p.eof() {
			return f, nil
		}
		if p.peek() == '[' {
			h, err := p.header()
			if err != nil {
				return nil, err
			}
			switch h {
			case "allowlist":
				if f.Allowlist != nil {
					return nil, p.errorf("[allowlist] given twice")
				}
				f.Allowlist = &Allowlist{}
			case "[rules]":
				f.Rules = append(f.Rules, Rule{})
			case "[rules.allowlists]":
				if len(f.Rules) == 0 {
					return nil, p.errorf("[[rules.allowlists]] before any [[rules]]")
				}
				r := &f.Rules[len(f.Rules)-1]
				r.Allowlists = append(r.Allowlists, Allowlist{})
			default:
				return nil, p.errorf("unknown table [%s]", h)
			}
			table = h
			continue
		}
		key, val, err := p.pair()
		if err != nil {
			return nil, err
		}
		switch table {
		case "top":
			err = setTop(f, key, val)
		case "allowlist":
			err = setAllowlist(f.Allowlist, key, val)
		case "[rules]":
			err = setRule(&f.Rules[len(f.Rules)-1], key, val)
		case "[rules.allowlists]":
			r := &f.Rules[len(f.Rules)-1]
			err = setAllowlist(&r.Allowlists[len(r.Allowlists)-1], key, val)
		}
		if err != nil {
			return nil, p.errorf("%s: %v", key, err)
		}
	}
}

func setTop(f *File, key string, v any) (err error) {
	switch key {
	case "title":
		f.Title, err = str(v)
	case "minVersion":
		f.MinVersion, err = str(v)
	default:
		err = errors.New("unknown key")
	}
	return err
}

func setRule(r *Rule, key string, v any) (err error) {
	switch key {
	case "id":
		r.ID, err = str(v)
	case "description":
		r.Description, err = str(v)
	case "regex":
		r.Regex, err = str(v)
	case "path":
		r.Path, err = str(v)
	case "secretGroup":
		var n float64
		if n, err = num(v); err == nil {
			if n != float64(int(n)) || n < 0 {
				return fmt.Errorf("%v is not a group number", n)
			}
			r.SecretGroup = int(n)
		}
	case "entropy":
		r.Entropy, err = num(v)
	case "keywords":
		r.Keywords, err = strs(v)
	default:
		err = errors.New("unknown key")
	}
	return err
}

func setAllowlist(a *Allowlist, key string, v any) (err error) {
	switch key {
	case "description":
		a.Description, err = str(v)
	case "condition":
		if a.Condition, err = str(v); err == nil && a.Condition != "AND" && a.Condition != "OR" {
			err = fmt.Errorf("%q is neither AND nor OR", a.Condition)
		}
	case "regexTarget":
		if a.RegexTarget, err = str(v); err == nil && a.RegexTarget != "match" && a.RegexTarget != "line" {
			err = fmt.Errorf("%q is neither match nor line", a.RegexTarget)
		}
	case "regexes":
		a.Regexes, err = strs(v)
	case "paths":
		a.Paths, err = strs(v)
	case "stopwords":
		a.StopWords, err = strs(v)
	case "commits":
		a.Commits, err = strs(v)
	default:
		err = errors.New("unknown key")
	}
	return err
}

func str(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T", v)
	}
	return s, nil
}

func num(v any) (float64, error) {
	n, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("want a number, got %T", v)
	}
	return n, nil
}

func strs(v any) ([]string, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array, got %T", v)
	}
	out := make([]string, len(a))
	for i, e := range a {
		s, err := str(e)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = s
	}
	return out, nil
}

type parser struct {
	src  string
	pos  int
	line int
}

func (p *parser) eof() bool  { return p.pos >= len(p.src) }
func (p *parser) peek() byte { return p.src[p.pos] }

func (p *parser) errorf(format string, a ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrSyntax, p.line, fmt.Sprintf(format, a...))
}

// skipSpace skips blanks and comments, and newlines too when lines is set.
func (p *parser) skipSpace(lines bool) {
	for !p.eof() {
		switch c := p.peek(); {
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == '\n' && lines:
			p.pos++
			p.line++
		case c == '#':
			for !p.eof() && p.peek() != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

// header reads [name] or [[name]]; [[name]] is returned as "[name]".
func (p *parser) header() (string, error) {
	end := strings.IndexByte(p.src[p.pos:], '\n')
	if end < 0 {
		end = len(p.src) - p.pos
	}
	h := strings.TrimSpace(p.src[p.pos : p.pos+end])
	p.pos += end
	switch {
	case strings.HasPrefix(h, "[[") && strings.HasSuffix(h, "]]") && len(h) > 4:
		return "[" + h[2:len(h)-2] + "]", nil
	case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") && !strings.HasPrefix(h, "[[") && len(h) > 2:
		return h[1 : len(h)-1], nil
	}
	return "", p.errorf("malformed table header %q", h)
}

// pair reads key = value and the end of its line.
func (p *parser) pair() (string, any, error) {
	start := p.pos
	for !p.eof() && (isKeyByte(p.peek())) {
		p.pos++
	}
	key := p.src[start:p.pos]
	if key == "" {
		return "", nil, p.errorf("want a key, got %q", p.rest())
	}
	p.skipSpace(false)
	if p.eof() || p.peek() != '=' {
		return "", nil, p.errorf("want = after %q", key)
	}
	p.pos++
	p.skipSpace(false)
	v, err := p.value()
	if err != nil {
		return "", nil, err
	}
	p.skipSpace(false)
	if !p.eof() && p.peek() != '\n' {
		return "", nil, p.errorf("unexpected %q after the value of %s", p.rest(), key)
	}
	return key, v, nil
}

func isKeyByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *parser) rest() string {
	r := p.src[p.pos:]
	if i := strings.IndexByte(r, '\n'); i >= 0 {
		r = r[:i]
	}
	if len(r) > 20 {
		r = r[:20]
	}
	return r
}

func (p *parser) value() (any, error) {
	if p.eof() {
		return nil, p.errorf("missing value")
	}
	switch c := p.peek(); {
	case strings.HasPrefix(p.src[p.pos:], "'''"):
		p.pos += 3
		end := strings.Index(p.src[p.pos:], "'''")
		if end < 0 || strings.Contains(p.src[p.pos:p.pos+end], "\n") {
			return nil, p.errorf("unterminated ''' string (multi-line strings are not read)")
		}
		s := p.src[p.pos : p.pos+end]
		p.pos += end + 3
		return s, p.utf8(s)
	case c == '\'':
		p.pos++
		end := strings.IndexAny(p.src[p.pos:], "'\n")
		if end < 0 || p.src[p.pos+end] != '\'' {
			return nil, p.errorf("unterminated ' string")
		}
		s := p.src[p.pos : p.pos+end]
		p.pos += end + 1
		return s, p.utf8(s)
	case c == '"':
		if strings.HasPrefix(p.src[p.pos:], `"""`) {
			return nil, p.errorf(`multi-line """ strings are not read`)
		}
		return p.basic()
	case c == '[':
		return p.array()
	case c == 't' && strings.HasPrefix(p.src[p.pos:], "true"):
		p.pos += 4
		return true, nil
	case c == 'f' && strings.HasPrefix(p.src[p.pos:], "false"):
		p.pos += 5
		return false, nil
	case c == '-' || c == '+' || c >= '0' && c <= '9':
		start := p.pos
		for !p.eof() && strings.IndexByte("+-0123456789._eE", p.peek()) >= 0 {
			p.pos++
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(p.src[start:p.pos], "_", ""), 64)
		if err != nil {
			return nil, p.errorf("bad number %q", p.src[start:p.pos])
		}
		return n, nil
	}
	return nil, p.errorf("unknown value %q", p.rest())
}

func (p *parser) utf8(s string) error {
	if !utf8.ValidString(s) {
		return p.errorf("string is not UTF-8")
	}
	return nil
}

// basic reads a "basic" string with its escapes.
func (p *parser) basic() (string, error) {
	p.pos++ // the opening quote
	var b strings.Builder
	for {
		if p.eof() || p.peek() == '\n' {
			return "", p.errorf("unterminated \" string")
		}
		c := p.peek()
		p.pos++
		switch c {
		case '"':
			s := b.String()
			return s, p.utf8(s)
		case '\\':
			if p.eof() {
				return "", p.errorf("unterminated escape")
			}
			e := p.peek()
			p.pos++
			switch e {
			case '"', '\\':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'u', 'U':
				n := 4
				if e == 'U' {
					n = 8
				}
				if p.pos+n > len(p.src) {
					return "", p.errorf("short \\%c escape", e)
				}
				r, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(r)) {
					return "", p.errorf("bad \\%c escape", e)
				}
				p.pos += n
				b.WriteRune(rune(r))
			default:
				return "", p.errorf("unknown escape \\%c", e)
			}
		default:
			b.WriteByte(c)
		}
	}
}

// array reads [v, v, ...], across lines, a trailing comma allowed.
func (p *parser) array() ([]any, error) {
	p.pos++ // [
	out := []any{}
	for {
		p.skipSpace(true)
		if p.eof() {
			return nil, p.errorf("unterminated array")
		}
		if p.peek() == ']' {
			p.pos++
			return out, nil
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if _, nested := v.([]any); nested {
			return nil, p.errorf("nested arrays are not read")
		}
		out = append(out, v)
		p.skipSpace(true)
		if p.eof() {
			return nil, p.errorf("unterminated array")
		}
		switch p.peek() {
		case ',':
			p.pos++
		case ']':
		default:
			return nil, p.errorf("want , or ] in an array, got %q", p.rest())
		}
	}
}
