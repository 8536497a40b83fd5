// Package guard is the judge's secret guard. Nothing that looks like a credential is sent to a
// model or stored in the audit stream:
//   - a file is withheld whole (listed in excluded_files with the reason)
//     when its name marks it as credentials (.env, id_rsa, .git/config…),
//     when its name holds a secret (a token used as a file name), or when
//     its text holds one;
//   - in the problem, build log, constraints, notes, a step's state and
//     the panel's answers, each secret is replaced by Redacted, and so it
//     is in audit records, held-call listings and logs.
//
// Names and text are normalised first (normalize.go: invisible
// characters, NFKC, look-alike letters) and then read by gitleaks'
// maintained rules, the guard's own token rules and an entropy check
// (detect.go), its context rules for credentials no keyword marks
// (context.go) and its passes through split, reversed and encoded
// tokens (obfuscated.go).
//
// The gitleaks rules are its published rule file (gitleaks/, with its
// version and licence), turned into gitleaks_rules.go by go generate
// (gitleaks_gen.go, reading it with internal/rulefile): nothing of
// gitleaks is linked or read at run time.
package guard
