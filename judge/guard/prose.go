package guard

import (
	"regexp"
	"strings"
)

// Passwords in prose: a person writes "log in as admin with password …"
// or "user: bob pw: …" in a problem statement, a note or a log. These
// rules find the value after "password" (or before "as the password"),
// and tell a value from a word of the sentence: a common word is never
// one, a plain lower-case word only where the clause ends with it, and
// with no connective ("is", ":") only a value that looks made up.

var (
	// reProsePassword: "password" (or pw, passphrase, a few other
	// languages' words) in a sentence, then optionally whose it is, a
	// connective (is, was set to, :, =, —) and the value.
	reProsePassword = regexp.MustCompile(`(?i)\b(?:` + passName + `|passwort|kennwort|contrase[nñ]a|senha|wachtwoord|mot[ \t]+de[ \t]+passe|has[lł]o|parola)(?:'s|s)?\b` +
		`(?:[ \t]+(?:for|of)[ \t]+(?:the[ \t]+|user[ \t]+|account[ \t]+)?[^\s,;:]{1,40}(?:[ \t]+(?:account|user|login|database|db|server|box|host|machine|vm))?)?` +
		`([ \t]+(?:(?:is|was)(?:[ \t]+(?:now|still|set[ \t]+to|changed[ \t]+to|reset[ \t]+to))?|has[ \t]+been[ \t]+(?:set|changed|reset)[ \t]+to|(?:will|would|should|must)[ \t]+be|set[ \t]+to|changed[ \t]+to|reset[ \t]+to|equals|being|reads)(?:[ \t]*:)?[ \t]+|[ \t]*(?::|=>|->|=|—|–)[ \t]*|[ \t]+-[ \t]+)?` +
		`[ \t]*(` + quoted + `|[^\s"'\x60]+)`)
	// reProseReversed: "use … as the password", "… is the root
	// password".
	reProseReversed = regexp.MustCompile(`(?i)(?:^|[\s(,;:])(?:(use|using|try|enter|type|with|set|choose|pick)[ \t]+)?(` + quoted + `|[^\s"'\x60(]+)[ \t]+(?:as|is)[ \t]+(?:(?:the|my|our|your|his|her|their|a|an)[ \t]+)?(?:(?:new|root|admin|default|db|database|user|login|account)[ \t]+)?(?:` + passName + `)\b`)
	// reProsePair: user and password given as a pair: "credentials:
	// admin / …", "login admin:…", "log in as bob/…".
	reProsePair = regexp.MustCompile(`(?i)\b(creds?|credentials?|login|log[ \t]?in(?:[ \t]+(?:as|with))?|sign[ \t]?in(?:[ \t]+(?:as|with))?|user(?:name)?[ \t]*/[ \t]*pass(?:word)?|u/p|user/pw)\b[ \t]*(?:are|is|:|=|-)?[ \t]*[^\s/:,;'"()]{1,64}[ \t]*(?:/|:|[ \t]/[ \t])[ \t]*([^\s'"/][^\s'"]*)`)
)

// Rules of prose: a password in a sentence, next to a user name or not.
var proseRules = []contextRule{
	reRule("prose-password", []string{"pass", "pw", "kennwort", "contrase", "senha", "wachtwoord", "hasło", "haslo", "parola"}, reProsePassword,
		func(n string, m []int) (int, int, bool) {
			s, e, ok := proseValue(n, m, 2)
			if !ok || directoryValue(n[m[0]:tokenEnd(n, m[0])], n[s:e]) {
				return 0, 0, false
			}
			_, _, q := unquote(n, m[4], m[5])
			if cs, _ := group(m, 1); cs < 0 {
				// No connective: "pass" is a verb ("pass `--flag`"); after
				// another name, a quoted value or one that does not read
				// as a word ("with password …" and a made-up value).
				name := strings.ToLower(n[m[0]:min(m[0]+4, len(n))])
				switch {
				case name == "pass" && !strings.HasPrefix(strings.ToLower(n[m[0]:]), "passw"):
					return 0, 0, false
				case q:
					if n[s] == '-' {
						return 0, 0, false
					}
				case !alnum(n[s]) || !strongValue(n[s:e]):
					return 0, 0, false
				}
			} else if v := strings.TrimRight(n[s:e], ".,;:!?)"); !q && wordValue(v) && !clauseEnd(n, s+len(v)) {
				return 0, 0, false // "the password is hashed with bcrypt"
			}
			return s, e, true
		}),
	reRule("prose-password", []string{"pass", "pw"}, reProseReversed, func(n string, m []int) (int, int, bool) {
		s, e, ok := proseValue(n, m, 2)
		if vs, _ := group(m, 1); ok && vs < 0 {
			// No verb ("use X as the password"): only a made-up value.
			if _, _, q := unquote(n, m[4], m[5]); !q && !strongValue(n[s:e]) {
				return 0, 0, false
			}
		}
		return s, e, ok
	}),
	reRule("prose-credentials", []string{"cred", "login", "log in", "log-in", "signin", "sign in", "sign-in", "/pass", "/ pass", "/pw", "u/p"}, reProsePair, func(n string, m []int) (int, int, bool) {
		s, e, ok := proseValue(n, m, 2)
		if !ok {
			return 0, 0, false
		}
		kw := strings.ToLower(n[m[2]:m[3]])
		if !strongValue(n[s:e]) && !strings.HasPrefix(kw, "cred") && !strings.Contains(kw, "pass") && !strings.Contains(kw, "pw") && kw != "u/p" {
			return 0, 0, false
		}
		return s, e, true
	}),
}

// proseValue is valueOf for a sentence: an unquoted value keeps the
// punctuation that ends it (a value ending in "!" stays whole: the "!" may be part
// of it).
func proseValue(n string, m []int, g int) (int, int, bool) {
	s, e, ok := valueOf(n, m, g)
	if !ok {
		return 0, 0, false
	}
	gs, ge := group(m, g)
	if _, _, q := unquote(n, gs, ge); q {
		return s, e, true
	}
	return s, ge, true
}

// wordValue reports a value that is a plain lower-case word (swordfish,
// every, password-less): it is a password only where the sentence ends
// with it (see clauseEnd).
func wordValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(c >= 'a' && c <= 'z' || c == '-' || c == '\'') {
			return false
		}
	}
	return true
}

// clauseEnd reports whether a clause ends at byte e of n: the end of the
// text or of the line, or punctuation. "the root password is …." ends
// there; "the Redis password: every error…" goes on, so "every" is a word
// of the sentence, not the password.
func clauseEnd(n string, e int) bool {
	for e < len(n) && (n[e] == ' ' || n[e] == '\t') {
		e++
	}
	return e == len(n) || strings.IndexByte("\r\n,.;:!?)]}\"'`", n[e]) >= 0
}

// strongValue reports whether v looks made up rather than a word: letters
// with digits or symbols, or capitals inside lower case (a digit in a
// word, a "!" or "&" in it, a capital inside it). It decides where a
// sentence gives a value no label ("log in as admin with password …").
func strongValue(v string) bool {
	v = strings.TrimRight(v, ".,;:!?)")
	if !secretValue(v, false) || len(v) < 4 {
		return false
	}
	var letter, digit, symbol, upperInside, lower bool
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'z':
			letter, lower = true, true
		case c >= 'A' && c <= 'Z':
			letter = true
			upperInside = upperInside || i > 0
		case c >= '0' && c <= '9':
			digit = true
		case strings.IndexByte("!@#$%^&*+=?~|<>{}[]\\", c) >= 0:
			symbol = true
		}
	}
	return letter && (digit || symbol || upperInside && lower)
}

// stopValues are words that follow "password" in sentences and code
// without being one: states, verbs, types, connectives, the names of
// hashing schemes.
var stopValues = func() map[string]bool {
	m := make(map[string]bool)
	for _, w := range strings.Fields(`
		true false yes no on off null nil none nan undefined empty blank unset missing required optional
		string str bool boolean int integer bytes text char varchar number object array list map type value values
		secret password passwd pass pwd pw passphrase passcode token key credential credentials hash hashed salt
		incorrect wrong invalid valid correct right expired expiring expires weak strong short long too
		not never always still also now then only just again already ever yet even
		is are was were be been being has have had do does did will would should must can could may might shall
		the a an this that these those it its it's there here which what who whom whose when where why how
		and or but nor so if else than as at by for from in into of off onto out over per to up via with within without
		about above after against along among around before behind below beneath beside between beyond during
		except inside near outside since through toward towards under until upon
		your my our his her their me you we they them us him one ones someone something nothing anything everything
		set reset change changed changes rotate rotated rotation update updated stored store saved kept sent given
		provided shown hidden masked generated derived encrypted decrypted encoded decoded protected needed used
		user users username login logout auth authentication authorization prompt prompted field fields
		manager policy policies file files flag flags option options env environment variable variable's variables
		length characters chars letters digits case sensitive insensitive same different unknown default defaults
		reuse reused later first last next new old current previous temporary temp initial
		please enter type use using used try tried see check read write ask asks asked send sends
		bcrypt scrypt argon2 argon2id pbkdf2 sha1 sha256 sha512 md5 base64 hex utf8 utf-8 2fa mfa otp totp
		like such e.g. i.e. etc via vs
	`) {
		m[w] = true
	}
	return m
}()
