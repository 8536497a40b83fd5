package judge

import (
	"path"
	"regexp"
	"strings"
)

// The secret guard. Nothing that looks like a credential is sent to a
// model: files whose name marks them as credentials, and files whose text
// holds an API key or private key, are withheld whole; key-like strings in
// the problem, build log, constraints and notes are replaced by Redacted,
// and so are those in audit records and logs.

// Redacted replaces every key-like string.
const Redacted = "[REDACTED]"

// secretPatterns match API keys, tokens and private keys.
var secretPatterns = []*regexp.Regexp{
	// OpenAI-style keys, including sk-proj-, sk-ant-, sk-or-v1-.
	regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`),
	// PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, PGP blocks).
	regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----`),
	// NATS user credentials and nkey seeds.
	regexp.MustCompile(`-----BEGIN NATS USER JWT-----`),
	regexp.MustCompile(`\bS[UAONCX][A-Z2-7]{56}\b`),
	// AWS access key ids, GitHub, Slack, Google, Stripe, Hugging Face tokens.
	regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`),
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}`),
	regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{30,}`),
	regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`),
	regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`),
	regexp.MustCompile(`\b[rs]k_live_[A-Za-z0-9]{16,}`),
	regexp.MustCompile(`\bhf_[A-Za-z0-9]{30,}`),
	// key = value assignments of secret-named variables.
	regexp.MustCompile(`(?i)\b[A-Z0-9_]*(api[_-]?key|secret|token|passw(or)?d|private[_-]?key)[A-Z0-9_]*\s*[:=]\s*["']?[^\s"',;]{12,}`),
}

// credentialNames match file names that hold credentials, whatever they
// contain.
var credentialNames = []string{
	".env", ".env.*", "*.env", "*.pem", "*.key", "*.creds", "*.nk", "*.p12", "*.pfx", "*.jks", "*.keystore",
	"*.kdbx", "*.ppk", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".netrc", "_netrc", ".npmrc", ".pypirc",
	".pgpass", ".git-credentials", "credentials", "credentials.*", "secret.y*ml", "secrets.y*ml", "*.secret", "*.tfstate", "*.tfvars",
	"kubeconfig", "shadow", "htpasswd", ".htpasswd",
}

// ContainsSecret reports whether text holds a key-like string.
func ContainsSecret(text string) bool {
	for _, re := range secretPatterns {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// Redact replaces every key-like string in text with Redacted.
func Redact(text string) string {
	for _, re := range secretPatterns {
		text = re.ReplaceAllString(text, Redacted)
	}
	return text
}

// credentialName returns the pattern a file name matches, if any.
func credentialName(p string) (string, bool) {
	base := strings.ToLower(path.Base(strings.ReplaceAll(p, `\`, "/")))
	for _, pat := range credentialNames {
		if ok, _ := path.Match(pat, base); ok {
			return pat, true
		}
	}
	return "", false
}

// screenFile returns why a file must be withheld, or "" when it may be
// sent. It checks the name, the path shape (relative, no ".."), the size,
// binary content and key-like strings.
func screenFile(p, content string, maxBytes int) string {
	if reason := screenPath(p); reason != "" {
		return reason
	}
	if pat, ok := credentialName(p); ok {
		return "credential file name (" + pat + ")"
	}
	if len(content) > maxBytes {
		return "larger than the per-file cap"
	}
	if strings.IndexByte(content, 0) >= 0 {
		return "binary content"
	}
	if ContainsSecret(content) {
		return "holds an API key or private key pattern"
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
