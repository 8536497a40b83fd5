package guard

import (
	"regexp"
	"strings"
)

// Context rules: credentials with no provider prefix and no keyword
// gitleaks knows, recognised by the syntax around them: a .pgpass line,
// `pass:` in YAML, SQL's IDENTIFIED BY, a CLI's password flag, redis.conf's
// requirepass, a connection string, a password written in prose next to a
// user name. Each rule finds the value only (the context stays readable)
// and drops values that stand for a password instead of being one: a
// placeholder ('${PW}', '<password>', ***), code (os.Getenv(…), cfg.Pass),
// a plain word of a sentence ("the password is incorrect").
//
// The rules are the guard's own (no gitleaks type or rule is used here:
// replacing gitleaks leaves them as they are), run like ownRules on the
// normalised text: those of configuration files, code, connection strings
// and SQL in config.go, of command lines in commands.go,
// of sentences in prose.go. This file holds what they share: how
// a rule is run (on the lines its keywords point to) and how a value is
// told from a placeholder or code.

// contextRule is one context rule: find emits the byte spans of n it
// takes for secrets. A rule with keywords (lower case) runs only on the
// lines that hold one, and on reach bytes of text around them for a match
// that spans lines; one without runs on the whole text.
type contextRule struct {
	id       string
	keywords []string
	reach    int
	find     func(n string, emit func(start, end int))
}

// reRule is a context rule by regular expression: value picks the secret
// out of each match m (submatch indexes of n), or reports none.
func reRule(id string, keywords []string, re *regexp.Regexp, value func(n string, m []int) (start, end int, ok bool)) contextRule {
	return contextRule{id: id, keywords: keywords, find: func(n string, emit func(int, int)) {
		for _, m := range re.FindAllStringSubmatchIndex(n, -1) {
			if s, e, ok := value(n, m); ok {
				emit(s, e)
			}
		}
	}}
}

// Fragments of the rules' expressions.
const (
	// quoted is a quoted value on one line, in ASCII or typographic
	// quotes.
	quoted = "\"[^\"\\n]*\"|'[^'\\n]*'|\x60[^\x60\\n]*\x60|“[^”\\n]*”|‘[^’\\n]*’|«[^»\\n]*»"
	// argValue is a command-line argument: quoted, or a word that is not
	// a flag.
	argValue = `(` + quoted + `|[^\s"'\x60|;&<>-][^\s"'\x60|;&<>]*)`
	// passName is the last word of a name that marks its value as a
	// password.
	passName = `pass(?:word|wd|phrase|code)?|pwd|pw`
)

// group returns the span of group g of match m (-1s when it did not
// take part).
func group(m []int, g int) (int, int) { return m[2*g], m[2*g+1] }

// quotePairs are the quotes a value can be wrapped in.
var quotePairs = [][2]string{{`"`, `"`}, {`'`, `'`}, {"`", "`"}, {"“", "”"}, {"‘", "’"}, {"«", "»"}}

// unquote returns the span inside the quotes of n[s:e], if it is quoted.
func unquote(n string, s, e int) (int, int, bool) {
	v := n[s:e]
	for _, q := range quotePairs {
		if len(v) >= len(q[0])+len(q[1]) && strings.HasPrefix(v, q[0]) && strings.HasSuffix(v, q[1]) {
			return s + len(q[0]), e - len(q[1]), true
		}
	}
	return s, e, false
}

// valueOf is the secret of group g of m when it passes secretValue:
// inside its quotes, or the bare word without trailing punctuation.
func valueOf(n string, m []int, g int) (int, int, bool) {
	s, e := group(m, g)
	if s < 0 || e <= s {
		return 0, 0, false
	}
	s, e, q := unquote(n, s, e)
	if q && e > s && (isBlank(n[s]) || isBlank(n[e-1]) || strings.IndexByte("),;:.]}", n[s]) >= 0) {
		return 0, 0, false // quotes around code (`" autocomplete="`, "`), code (`"), not a value
	}
	if !q {
		e = s + len(strings.TrimRight(n[s:e], ".,;:!?)]}`'\""))
	}
	return s, e, e > s && secretValue(n[s:e], q)
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// capitalised matches a capitalised word.
var capitalised = regexp.MustCompile(`^[A-Z][a-z]+$`)

// secretValue reports whether v, a value found where a password goes, is
// one: not a placeholder, a mask, a plain word of a sentence, a boolean or
// small number, or (unquoted) code.
func secretValue(v string, quoted bool) bool {
	v = strings.TrimSpace(v)
	if len(v) < 3 || placeholder(v) || maskValue(v) || strings.Contains(v, "://") || strings.Contains(v, Redacted) {
		return false
	}
	if stopValues[strings.ToLower(strings.Trim(v, ".,;:!?'\"()"))] {
		return false
	}
	if allDigits(v) && len(v) < 4 {
		return false
	}
	// A capitalised word (Swordfish) is no identifier in CamelCase.
	return quoted || !codeValue.MatchString(v) || capitalised.MatchString(v)
}

func allDigits(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return v != ""
}

// maskValue reports a value that hides one: ***, xxxxx, ••••, ..., ….
func maskValue(v string) bool {
	return strings.Trim(strings.ToLower(v), "*x•.…#_-") == ""
}

// passwordName reports whether a variable or key name names a password:
// its last word is pass, pwd, pw or passphrase (db_pass, dbPass, DB-PWD,
// sshpass, ODBC's Pwd), or it ends in password or passwd
// (MYSQL_ROOT_PASSWORD, rootpassword). "bypass" and "compass" do not;
// OLDPWD is a directory (and so is PWD, when its value is a path: see
// directoryValue).
func passwordName(name string) bool {
	name = strings.Trim(name, `"'-_.$@:`)
	l := strings.ToLower(name)
	if l == "oldpwd" || l == "" {
		return false
	}
	for _, suf := range []string{"password", "passwd", "passphrase", "passcode"} {
		if strings.HasSuffix(l, suf) {
			return true
		}
	}
	for _, suf := range []string{"pass", "pwd", "pw"} {
		if !strings.HasSuffix(l, suf) {
			continue
		}
		i := len(l) - len(suf)
		if i == 0 {
			return true
		}
		prev := name[i-1]
		switch {
		case prev == '_' || prev == '-' || prev == '.':
			return true
		case name[i] == 'P' && (prev >= 'a' && prev <= 'z' || prev >= '0' && prev <= '9'):
			return true // camelCase: dbPass, userPwd
		}
		prefix := strings.TrimRight(l[:i], "_-.")
		if i := strings.LastIndexAny(prefix, "_-."); i >= 0 {
			prefix = prefix[i+1:]
		}
		if fusedPassPrefixes[prefix] {
			return true
		}
	}
	return false
}

// directoryValue reports the shell's working directory: PWD set to a
// path.
func directoryValue(name, value string) bool {
	return strings.EqualFold(strings.Trim(name, `"'`), "pwd") && strings.ContainsAny(value[:min(1, len(value))], `/~.\`)
}

// fusedPassPrefixes are words written fused with pass (sshpass,
// requirepass, rootpass, PGPASS).
var fusedPassPrefixes = map[string]bool{
	"ssh": true, "require": true, "pg": true, "db": true, "root": true, "admin": true, "user": true, "mysql": true,
	"redis": true, "smtp": true, "mail": true, "ldap": true, "bind": true, "ftp": true, "proxy": true, "master": true,
	"app": true, "api": true, "svc": true, "sa": true, "wifi": true, "vnc": true, "my": true, "key": true, "store": true,
	"trust": true, "auth": true, "login": true, "web": true, "rpc": true, "sql": true, "mongo": true, "amqp": true,
	"rabbit": true, "keystore": true, "truststore": true, "db_": true,
}

// lineStart reports whether only blanks, a list dash, "export" or "set"
// come before byte i on its line: a key that starts a line of YAML, an
// .env file, an INI file.
func lineStart(n string, i int) bool {
	j := strings.LastIndexByte(n[:i], '\n') + 1
	head := strings.TrimSpace(n[j:i])
	for _, p := range []string{"- ", "export ", "set ", "SET ", "-"} {
		head = strings.TrimSpace(strings.TrimPrefix(head, p))
	}
	return head == "" || head == `"` || head == "'"
}

// lineBefore returns the last two words before byte i on its line
// ("CONFIG SET" before "requirepass" in "redis-cli CONFIG SET requirepass").
func lineBefore(n string, i int) string {
	head := strings.Fields(n[strings.LastIndexByte(n[:i], '\n')+1 : i])
	if len(head) >= 2 {
		return head[len(head)-2] + " " + head[len(head)-1]
	}
	return strings.Join(head, " ")
}

// restOfLine returns the text after byte i up to the end of its line.
func restOfLine(n string, i int) string {
	if j := strings.IndexByte(n[i:], '\n'); j >= 0 {
		return n[i : i+j]
	}
	return n[i:]
}

// reach sets how far around its keyword's line r's matches may reach.
func reach(bytes int, r contextRule) contextRule {
	r.reach = bytes
	return r
}

// keywordWindows returns the parts of n that rule keywords point to: the
// lines holding one (found in lower, n lower-cased byte for byte), with
// reach bytes more on each side, merged where they overlap.
func keywordWindows(n, lower string, keywords []string, reach int) [][2]int {
	var ws [][2]int
	for _, k := range keywords {
		for i := 0; ; {
			j := strings.Index(lower[i:], k)
			if j < 0 {
				break
			}
			at := i + j
			a := strings.LastIndexByte(n[:max(0, at-reach)], '\n') + 1
			b := len(n)
			if e := strings.IndexByte(n[min(len(n), at+len(k)+reach):], '\n'); e >= 0 {
				b = min(len(n), at+len(k)+reach) + e
			}
			ws = append(ws, [2]int{a, b})
			i = max(b, at+len(k))
			if i >= len(n) {
				break
			}
		}
	}
	// Windows on adjacent lines are read as one (fewer, longer reads).
	for i := range ws {
		ws[i][1] = min(len(n), ws[i][1]+1)
	}
	return mergeSpans(ws)
}

// lowerASCII lower-cases the ASCII letters of s only, so that every byte
// keeps its place.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// contextRules are every context rule, in the order they run.
var contextRules = concat(configRules, commandRules, proseRules)

func concat[T any](parts ...[]T) []T {
	var out []T
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
