package guard

import (
	"math"
	"regexp"
	"slices"
	"strings"
)

// The detectors of the secret guard, run on normalised text (see
// normalize.go):
//   - gitleaks' maintained default rules (about 220 providers' token
//     shapes, private keys, JWTs, webhooks, generic key assignments; the
//     rule file applied by gitleaks.go), also on what the
//     obfuscation passes decode, so an encoded key is found too;
//   - our own rules for what gitleaks leaves to context: credentials in
//     URLs, netrc entries, Authorization headers, quoted key/value pairs,
//     AWS keys whatever their suffix, and the guard's original patterns;
//   - an entropy check for long random-looking tokens that no rule names;
//   - the context rules (context.go) and the obfuscation passes
//     (obfuscated.go), with the rules above: ownSpans.
//
// Each finding is a byte span of the normalised text, or, when gitleaks
// cannot say where (a path-only rule), the whole input.

// secretSpan is a finding: bytes [start, end) of the scanned text, found
// by rule.
type secretSpan struct {
	start, end int
	rule       string
}

// scanResult is what the detectors found in one text.
type scanResult struct {
	spans []secretSpan
	// whole is set, with its rule, when a finding has no span: the whole
	// text counts as secret.
	whole string
}

func (r scanResult) found() bool { return len(r.spans) > 0 || r.whole != "" }

// rule names the first finding, for a reason.
func (r scanResult) rule() string {
	if r.whole != "" {
		return r.whole
	}
	if len(r.spans) > 0 {
		return r.spans[0].rule
	}
	return ""
}

// scanSecrets runs every detector on n (normalised text); name is the
// normalised file name the text comes from ("" for other text), for
// gitleaks' rules that apply to some file types only.
func scanSecrets(n, name string) scanResult {
	var res scanResult
	gitleaksSpans(&res, n, name)
	res.spans = append(res.spans, ownSpans(n, obfuscationDepth, "")...)
	return res
}

// obfuscationDepth is how many layers of disguise (encoding, reversal,
// splitting; obfuscated.go) the guard's own rules look through.
const obfuscationDepth = 2

// ownSpans runs the guard's own detectors on n: its token rules, its
// context rules (context.go), the entropy check and, while depth
// allows, the obfuscation passes but skip, which run ownSpans again on
// what they uncover.
func ownSpans(n string, depth int, skip string) []secretSpan {
	var spans []secretSpan
	lower := ""
	relevant := func(keywords []string) bool {
		if len(keywords) == 0 {
			return true
		}
		if lower == "" {
			lower = lowerASCII(n)
		}
		return slices.ContainsFunc(keywords, func(k string) bool { return strings.Contains(lower, k) })
	}
	for _, r := range ownRules {
		if !relevant(r.keywords) {
			continue
		}
		for _, m := range r.re.FindAllStringSubmatchIndex(n, -1) {
			if r.extendName {
				for m[0] > 0 && wordChar(n[m[0]-1]) {
					m[0]--
				}
				m[2] = m[0]
			}
			if r.keep != nil && !r.keep(submatches(n, m)) {
				continue
			}
			start, end := m[0], m[1]
			if r.group > 0 {
				start, end = m[2*r.group], m[2*r.group+1]
			}
			if start >= 0 && end > start {
				spans = append(spans, secretSpan{start, end, r.id})
			}
		}
	}
	for _, r := range contextRules {
		if len(r.keywords) == 0 {
			r.find(n, func(start, end int) { spans = append(spans, secretSpan{start, end, r.id}) })
			continue
		}
		if !relevant(r.keywords) {
			continue
		}
		for _, w := range keywordWindows(n, lower, r.keywords, r.reach) {
			r.find(n[w[0]:w[1]], func(start, end int) { spans = append(spans, secretSpan{w[0] + start, w[0] + end, r.id}) })
		}
	}
	spans = append(spans, entropySpans(n)...)
	if depth < obfuscationDepth {
		spans = append(spans, decodedLeakSpans(n)...)
	}
	if depth > 0 {
		for _, r := range obfuscationRules {
			if r.id == skip || !relevant(r.keywords) {
				continue
			}
			next := ""
			if r.once {
				next = r.id
			}
			read := func(text string) []secretSpan { return ownSpans(text, depth-1, next) }
			r.find(n, read, func(start, end int) { spans = append(spans, secretSpan{start, end, r.id}) })
		}
	}
	return spans
}

// gitleaksSpans adds the findings of gitleaks' rules (gitleaks.go)
// in n to res: every occurrence of a secret (or, failing that, of its
// match) is a span; a finding on the path alone withholds the whole text.
func gitleaksSpans(res *scanResult, n, name string) {
	for _, f := range leakFindings(n, name) {
		if f.secret == "" {
			res.whole = "gitleaks:" + f.rule // a path-only rule (a .p12 file)
			continue
		}
		if f.rule == "generic-api-key" && hashValue(n, f.secret) {
			continue
		}
		spans := occurrences(n, f, nil)
		if len(spans) == 0 {
			res.whole = "gitleaks:" + f.rule
		}
		res.spans = append(res.spans, spans...)
	}
}

// decodedLeakSpans runs gitleaks' rules on text an obfuscation pass
// uncovered (decoded, reversed, joined): what gitleaks' own decoding
// passes did, and more.
func decodedLeakSpans(n string) []secretSpan {
	var spans []secretSpan
	for _, f := range leakFindings(n, "") {
		if f.secret != "" && (f.rule != "generic-api-key" || !hashValue(n, f.secret)) {
			spans = occurrences(n, f, spans)
		}
	}
	return spans
}

// occurrences appends a span for every occurrence of f's secret in n, or
// of its match when the secret is not there as such.
func occurrences(n string, f leakFinding, spans []secretSpan) []secretSpan {
	for _, t := range []string{f.secret, f.match} {
		found := false
		for i := 0; t != "" && i < len(n); {
			j := strings.Index(n[i:], t)
			if j < 0 {
				break
			}
			spans = append(spans, secretSpan{i + j, i + j + len(t), "gitleaks:" + f.rule})
			found = true
			i += j + len(t)
		}
		if found {
			break
		}
	}
	return spans
}

// hashPrefix matches the text just before a value that marks it as a
// content hash (go.sum "h1:", npm integrity "sha512-", digests
// "sha256:"), which gitleaks' generic rule may take for a key.
var hashPrefix = regexp.MustCompile(`(?i)(?:\bh1:|\b(?:sha(?:1|224|256|384|512)|md5)[-:]|\bintegrity[\s:="']+)$`)

// hashValue reports whether every occurrence of secret in n follows a
// content-hash prefix.
func hashValue(n, secret string) bool {
	seen := false
	for i := 0; i < len(n); {
		j := strings.Index(n[i:], secret)
		if j < 0 {
			break
		}
		seen = true
		at := i + j
		if !hashPrefix.MatchString(n[max(0, at-16):at]) {
			return false
		}
		i = at + len(secret)
	}
	return seen
}

// ownRule is one of the guard's own patterns. It runs only on text that
// holds one of its keywords (lower case; none: always), as gitleaks' rules
// do. group, when set, is the capture group that is the secret (the rest
// is context that stays); keep, when set, drops a match that is not a
// secret (a placeholder, a code expression).
type ownRule struct {
	id       string
	keywords []string
	re       *regexp.Regexp
	group    int
	keep     func(match []string) bool
	// extendName moves the start of the match and of group 1 left over
	// the rest of a name ([A-Za-z0-9_]).
	extendName bool
}

// secretNames are the parts of a variable or key name that mark its value
// as secret.
const secretNames = `api[_-]?key|apikey|secret|token|passw(?:or)?d|private[_-]?key|access[_-]?key|auth[_-]?key|credentials?`

var secretKeywords = []string{"key", "secret", "token", "passw", "credential"}

var ownRules = []ownRule{
	// OpenAI-style keys, including sk-proj-, sk-ant-, sk-or-v1-.
	{id: "openai-style-key", keywords: []string{"sk-"}, re: regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`)},
	// PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, PGP blocks), even
	// without their body. ("-{5}" so that this file is not a finding.)
	{id: "private-key-header", keywords: []string{"private key"}, re: regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-{5}`)},
	// NATS user credentials and nkey seeds.
	{id: "nats-creds", keywords: []string{"nats user jwt"}, re: regexp.MustCompile(`-----BEGIN NATS USER JWT-{5}`)},
	{id: "nkey-seed", re: regexp.MustCompile(`\bS[UAONCX][A-Z2-7]{56}\b`)},
	// AWS access key ids, GitHub, Slack, Google, Stripe, Hugging Face
	// tokens (gitleaks knows them too, with stricter lengths).
	// AWS access key ids whatever follows the prefix (gitleaks lets
	// AKIA…EXAMPLE through; an attacker chooses the suffix). Secret
	// access keys are found by awsSecretKeys.
	{id: "aws-key-id", keywords: []string{"akia", "asia", "abia", "acca", "a3t"}, group: 1,
		re: regexp.MustCompile(`(?:^|[^A-Z0-9])((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{12,}[A-Za-z0-9_+/=-]*)`)},

	{id: "github-token", keywords: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, re: regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}`)},
	{id: "github-pat", keywords: []string{"github_pat_"}, re: regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{30,}`)},
	{id: "slack-token", keywords: []string{"xox"}, re: regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`)},
	{id: "slack-webhook", keywords: []string{"hooks.slack.com"}, re: regexp.MustCompile(`(?i)hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/+_-]{16,}`)},
	{id: "google-api-key", keywords: []string{"aiza"}, re: regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`)},
	{id: "stripe-key", keywords: []string{"_live_"}, re: regexp.MustCompile(`\b[rs]k_live_[A-Za-z0-9]{16,}`)},
	{id: "huggingface-token", keywords: []string{"hf_"}, re: regexp.MustCompile(`\bhf_[A-Za-z0-9]{30,}`)},
	// JWTs (three base64url parts, header and payload JSON objects).
	{id: "jwt", keywords: []string{"eyj"}, re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`)},
	// key = value assignments of secret-named variables (the whole
	// assignment is replaced), unless the value is code or a reference.
	// (The name's start is found by hand, extendName: a leading
	// \b[A-Z0-9_]* would make the regexp several times slower.)
	{id: "secret-assignment", keywords: secretKeywords, keep: literalAssignment, extendName: true,
		re: regexp.MustCompile(`(?i)((?:` + secretNames + `)[A-Z0-9_]*)\s*[:=]\s*(["']?)([^\s"',;\x60]{12,})`)},
	// Quoted keys with quoted values: JSON {"password": "..."}, YAML
	// 'token': '...'.
	{id: "secret-json-value", keywords: secretKeywords, group: 3, keep: literalAssignment,
		re: regexp.MustCompile(`(?i)["']([\w.-]*(?:` + secretNames + `)[\w.-]*)["']\s*[:=]\s*(["'])([^"'\s]{6,})["']`)},
	// Credentials in URLs: scheme://user:password@host (git remotes,
	// DATABASE_URL, proxies).
	{id: "url-credentials", keywords: []string{"://"}, group: 1, keep: notPlaceholder(1),
		re: regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]{1,30}://[^\s/?#@:"'<>\[\]]*:([^\s/?#@"'<>\[\]]+)@`)},
	// netrc entries: machine HOST [login USER] password PASS.
	{id: "netrc-password", keywords: []string{"password"}, group: 1, keep: notPlaceholder(1),
		re: regexp.MustCompile(`(?i)\b(?:machine\s+\S+|default)(?:\s+(?:login|account|port)\s+\S+)*\s+password\s+(\S+)`)},
	// HTTP Authorization headers and bearer tokens.
	{id: "authorization-header", keywords: []string{"authorization"}, group: 1, keep: notPlaceholder(1),
		re: regexp.MustCompile(`(?i)\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?\s*(?:(?:bearer|basic|token|digest|bot|apikey)\s+)?([A-Za-z0-9._~+/=:-]{8,})`)},
	{id: "bearer-token", keywords: []string{"bearer"}, group: 1, keep: notPlaceholder(1),
		re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)`)},
}

// notPlaceholder keeps a match whose group is not a placeholder.
func notPlaceholder(group int) func([]string) bool {
	return func(m []string) bool { return !placeholder(m[group]) }
}

// codeValue matches unquoted values that are code, not literals: a
// dotted chain (cfg.APIKey, req.MaxTokens), an environment variable's
// name (OPENROUTER_API_KEY), a call or an index, an identifier in
// CamelCase without digits (DefaultMaxTokens).
var codeValue = regexp.MustCompile(`^(?:[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+[\w$.]*|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|.*[()\[\]{}].*|[a-z]*(?:[A-Z][a-z]+)+)$`)

// literalAssignment keeps an assignment (groups: name, quote, value)
// whose value is a literal to a name that is not a count of model tokens
// (max_tokens, PromptTokens) or the name of a variable (api_key_env). A
// quoted value is a literal; an unquoted one is unless it looks like code.
func literalAssignment(m []string) bool {
	name, quote, value := strings.ToLower(m[1]), m[2], m[3]
	if strings.Contains(name, "tokens") || strings.HasSuffix(name, "env") {
		return false
	}
	if placeholder(value) {
		return false
	}
	if quote == "" && strings.Trim(strings.TrimRight(value, ".,;:!?"), "abcdefghijklmnopqrstuvwxyz-") == "" {
		return false // a word ("apikey: unauthorized"), not a random key
	}
	return quote != "" || !codeValue.MatchString(value)
}

// submatches returns the groups of match m of n ("" for a group that
// did not take part).
func submatches(n string, m []int) []string {
	out := make([]string, len(m)/2)
	for i := range out {
		if m[2*i] >= 0 {
			out[i] = n[m[2*i]:m[2*i+1]]
		}
	}
	return out
}

// envName matches YOUR_API_KEY, DB_PASSWORD: a name standing for a value;
// capsWords matches PASSWORD, USER:PASSWORD, TOKEN/SECRET: words in
// capitals standing for values in documentation.
var (
	envName   = regexp.MustCompile(`^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$`)
	capsWords = regexp.MustCompile(`^[A-Z]{2,}(?:[_:/@.-][A-Z]{2,})*$`)
)

// placeholder reports a value that stands for a secret instead of being
// one: a variable reference, a template, a mask, a type name, a word.
func placeholder(v string) bool {
	if v == "" || strings.ContainsAny(v[:1], "$<{%*[(") || strings.ContainsAny(v, "[]") || envName.MatchString(v) || capsWords.MatchString(v) || maskValue(v) {
		return true
	}
	switch strings.ToLower(v) {
	case "password", "passwd", "pass", "secret", "token", "string", "null", "none", "redacted", "xxxxxx", "xxxxxxxx":
		return true
	}
	return false
}

// Entropy check: a token this long, with upper and lower case letters and
// digits, whose Shannon entropy is this high, is taken for a random
// credential. Hexadecimal hashes, UUIDs, identifiers and words fail the
// mixed-case-and-digits test; hashes with a known prefix are skipped.
const (
	entropyMinLen  = 24
	entropyMinBits = 4.2
	// entropyMinSwitches is the share of adjacent characters of different
	// classes (upper, lower, digit, other).
	entropyMinSwitches = 0.3
)

var entropyToken = regexp.MustCompile(`[A-Za-z0-9+_=-]{24,}`)

// entropySpans returns the high-entropy tokens of n.
func entropySpans(n string) []secretSpan {
	var out []secretSpan
	for _, m := range entropyToken.FindAllStringIndex(n, -1) {
		start, end := m[0], m[1]
		tok := strings.Trim(n[start:end], "=-_/+")
		if len(tok) < entropyMinLen || !randomLooking(tok) {
			continue
		}
		// The whole base64 word ('/' splits tokens, so that paths do not
		// read as one) decides whether it is a content hash.
		ws := start
		for ws > 0 && base64Char(n[ws-1]) {
			ws--
		}
		if hashPrefix.MatchString(n[max(0, ws-16):ws]) || hashPrefix.MatchString(hashHead(n[ws:end])) {
			continue
		}
		out = append(out, secretSpan{start, end, "high-entropy-token"})
	}
	return out
}

func wordChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
}

func base64Char(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '_' || c == '-'
}

// hashHead returns the "sha512-" of a token that starts with one.
func hashHead(tok string) string {
	if i := strings.IndexAny(tok, "-:"); i > 0 && i < 8 {
		return tok[:i+1]
	}
	return ""
}

// awsSecretKeys finds AWS secret access keys: words of exactly 40 base64
// characters (without "=", "_" or "-" around them) that look random
// (awsSecretLooking). A hand-written scan: a regular expression counting
// to 40 costs more than the rest of the guard's own rules.
func awsSecretKeys(n string, emit func(int, int)) {
	in := func(c byte) bool { return alnum(c) || c == '/' || c == '+' }
	for i := 0; i < len(n); {
		if !in(n[i]) {
			i++
			continue
		}
		j := i
		for j < len(n) && in(n[j]) {
			j++
		}
		if j-i == 40 && (i == 0 || !strings.ContainsRune("=_-", rune(n[i-1]))) &&
			(j == len(n) || !strings.ContainsRune("=_-", rune(n[j]))) && awsSecretLooking(n[i:j]) {
			emit(i, j)
		}
		i = j
	}
}

// awsSecretLooking reports a 40-character base64 word that mixes upper
// and lower case letters with digits or slashes the way a random AWS
// secret access key does (the documentation's example key included), and
// not the way a path does.
func awsSecretLooking(tok string) bool {
	count, switches := classes(tok)
	slashes := strings.Count(tok, "/")
	return count[1] >= 4 && count[2] >= 4 && count[0]+count[3] >= 2 && slashes <= 4 && !strings.Contains(tok, "//") &&
		switches >= entropyMinSwitches && shannon(tok) >= entropyMinBits
}

// classes counts the characters of tok by class (charClass) and returns
// the share of adjacent characters of different classes.
func classes(tok string) (count [4]int, switches float64) {
	changes := 0
	for i := 0; i < len(tok); i++ {
		c := charClass(tok[i])
		count[c]++
		if i > 0 && c != charClass(tok[i-1]) {
			changes++
		}
	}
	if len(tok) > 1 {
		switches = float64(changes) / float64(len(tok)-1)
	}
	return count, switches
}

// charClass is 1 for an upper case letter, 2 lower case, 3 a digit, 0
// anything else.
func charClass(c byte) int {
	switch {
	case c >= 'A' && c <= 'Z':
		return 1
	case c >= 'a' && c <= 'z':
		return 2
	case c >= '0' && c <= '9':
		return 3
	}
	return 0
}

// randomLooking reports a token with at least two upper case letters, two
// lower case letters and two digits, that changes between these classes
// often (random base62 does at about 60% of its characters, an identifier
// with a number, TestFoo3271894562, at 20%), and whose Shannon entropy is
// at least entropyMinBits bits a character.
func randomLooking(tok string) bool {
	count, switches := classes(tok)
	return count[1] >= 2 && count[2] >= 2 && count[3] >= 2 && switches >= entropyMinSwitches && shannon(tok) >= entropyMinBits
}

// shannon is the Shannon entropy of s in bits a byte.
func shannon(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	var h float64
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h
}

// mergeSpans sorts spans and joins those that overlap or touch.
func mergeSpans(spans [][2]int) [][2]int {
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var out [][2]int
	for _, s := range spans {
		if n := len(out); n > 0 && s[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}
