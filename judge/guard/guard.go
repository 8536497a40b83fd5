package guard

import (
	"path"
	"strings"
	"unicode/utf8"
)

// Redacted replaces every key-like string.
const Redacted = "[REDACTED]"

// credentialNames match file names that hold credentials, whatever they
// contain (on the normalised, lower-case base name).
var credentialNames = []string{
	".env", ".env.*", "*.env", "*.pem", "*.key", "*.creds", "*.nk", "*.p12", "*.pfx", "*.jks", "*.keystore",
	"*.kdbx", "*.ppk", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".netrc", "_netrc", ".npmrc", ".pypirc",
	".pgpass", ".git-credentials", "credentials", "credentials.*", "secret.y*ml", "secrets.y*ml", "*.secret", "*.tfstate", "*.tfvars",
	"kubeconfig", "shadow", "htpasswd", ".htpasswd", ".dockercfg", "*.ovpn", "*.gpg", "*.asc",
}

// credentialPaths match the last elements of paths that hold credentials
// (on the normalised, lower-case path).
var credentialPaths = []string{
	".git/config", ".ssh/*", ".aws/*", ".docker/config.json", ".kube/config", ".gnupg/*", ".config/gh/hosts.y*ml",
	".config/gcloud/*", ".azure/*", ".terraform.d/credentials.tfrc.json",
}

// ContainsSecret reports whether text holds a credential.
func ContainsSecret(text string) bool {
	return scanSecrets(Normalize(text), "").found()
}

// Redact replaces every credential in text with Redacted. Invisible
// characters (zero-width spaces and the like) are dropped too: they hide
// text from a person reading it, and a model reads it anyway.
//
// Redact is idempotent: what it returns holds nothing it would redact. A
// replacement changes the context of what is left (the rest of a token
// part of which was a key can read as a token of its own), so the text is
// read again until nothing more is found (maxRedactPasses at most).
func Redact(text string) string {
	out, changed := redactOnce(text)
	for pass := 1; changed && pass < maxRedactPasses; pass++ {
		out, changed = redactOnce(out)
	}
	return out
}

// maxRedactPasses bounds the readings of Redact (two suffice in practice:
// FuzzSecretScan).
const maxRedactPasses = 4

// redactOnce is one reading of Redact; changed says whether it replaced
// anything.
func redactOnce(text string) (out string, changed bool) {
	if text == "" {
		return text, false
	}
	n := normalizeMap(text)
	res := scanSecrets(n.s, "")
	if res.whole != "" {
		return Redacted, text != Redacted
	}
	spans := make([][2]int, 0, len(res.spans))
	for _, sp := range res.spans {
		if sp.end > sp.start {
			a, b := n.span(sp.start, sp.end)
			spans = append(spans, [2]int{a, b})
		}
	}
	var b strings.Builder
	prev := 0
	for _, sp := range mergeSpans(spans) {
		b.WriteString(stripInvisible(text[prev:sp[0]]))
		b.WriteString(Redacted)
		prev = sp[1]
	}
	b.WriteString(stripInvisible(text[prev:]))
	out = b.String()
	return out, out != text
}

// stripInvisible drops the runes normalize drops as invisible; invalid
// bytes stay as they are (strings.Map would make them U+FFFD, which a
// second Redact would read differently).
func stripInvisible(s string) string {
	if isASCII(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !invisible(r) {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// CredentialName returns the pattern a file name matches, if any, after
// normalisation (".en\u200bv" and ".еnv" with a Cyrillic "е" are ".env").
func CredentialName(p string) (string, bool) {
	name := normalizeName(p)
	base := path.Base(name)
	for _, pat := range credentialNames {
		if ok, _ := path.Match(pat, base); ok {
			return pat, true
		}
	}
	els := strings.Split(name, "/")
	for _, pat := range credentialPaths {
		k := strings.Count(pat, "/") + 1
		if len(els) < k {
			continue
		}
		if ok, _ := path.Match(pat, strings.Join(els[len(els)-k:], "/")); ok {
			return pat, true
		}
	}
	return "", false
}

// ScreenFile returns why a file must be withheld, or "" when it may be
// sent. It checks the path shape (relative, no ".."), the name, secrets in
// the name, the size, binary content and secrets in the content.
func ScreenFile(p, content string, maxBytes int) string {
	name := normalizeName(p)
	for _, q := range []string{p, name} {
		if reason := screenPath(q); reason != "" {
			return reason
		}
	}
	if pat, ok := CredentialName(p); ok {
		return "credential file name (" + pat + ")"
	}
	if res := scanSecrets(name, name); res.found() {
		return "the file name holds a secret (" + res.rule() + ")"
	}
	if len(content) > maxBytes {
		return "larger than the per-file cap"
	}
	if strings.IndexByte(content, 0) >= 0 {
		return "binary content"
	}
	if res := scanSecrets(Normalize(content), name); res.found() {
		return "holds an API key, token, password or private key (" + res.rule() + ")"
	}
	return ""
}

// screenPath refuses absolute paths and paths with a ".." element.
func screenPath(p string) string {
	s := strings.ReplaceAll(p, `\`, "/")
	if strings.HasPrefix(s, "/") || (len(s) > 1 && s[1] == ':') {
		return "absolute path"
	}
	for _, el := range strings.Split(s, "/") {
		if el == ".." {
			return "path leaves the root (..)"
		}
	}
	return ""
}
