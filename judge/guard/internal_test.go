package guard

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/makerfleet/makerfleet/judge/internal/secretcases"
)

func TestNormalizeName(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{".env", ".env"},
		{".en\u200bv", ".env"},               // zero-width space
		{"\u200d.env\ufeff", ".env"},         // zero-width joiner, BOM
		{".\u0435nv", ".env"},                // Cyrillic е
		{".\u0415NV", ".env"},                // Cyrillic Е, upper case
		{"\uff0e\uff45\uff4e\uff56", ".env"}, // full-width
		{".env.", ".env"},                    // Windows drops trailing dots
		{".env ", ".env"},                    // and spaces
		{`conf\.env`, "conf/.env"},
		{"id_rs\u0430", "id_rsa"},
		{"ＩＤ＿ＲＳＡ.pub", "id_rsa.pub"},
		{"\uff0e\uff0e/etc/passwd", "../etc/passwd"},
		{"src/main.go", "src/main.go"},
		// Look-alikes fold even in Cyrillic words (names are only compared,
		// never shown); letters with no Latin twin stay.
		{"докумéнты/отчёт.md", "д\u006fк\u0079мéнты/\u006fтчёт.md"},
	}
	for _, tt := range tests {
		if got := normalizeName(tt.in); got != tt.want {
			t.Errorf("normalizeName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCredentialName(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]string{
		".en\u200bv": ".env", "svc/.\u0435nv.production": ".env.*", "home/u/.ssh/known_hosts": ".ssh/*",
		"repo/.git/config": ".git/config", ".aws/config": ".aws/*", "tls.KEY": "*.key", "src/main.go": "",
		"git/config": "", "docs/keys.md": "",
	} {
		got, ok := CredentialName(p)
		if got != want || ok != (want != "") {
			t.Errorf("CredentialName(%q) = %q, %v; want %q", p, got, ok, want)
		}
	}
}

// TestRedactMapsBack: secrets found in the normalised text are replaced in
// the original, whose other letters (Cyrillic here) stay as they are, and
// invisible characters are dropped.
func TestRedactMapsBack(t *testing.T) {
	t.Parallel()
	tok := "ghp_" + strings.Repeat("Zx9Qw2", 6)
	hidden := tok[:6] + "\u200b" + tok[6:] // a zero-width space inside the token
	tests := []struct{ in, want string }{
		{"Привет, токен " + hidden + " конец", "Привет, токен [REDACTED] конец"},
		{"p\u0430ssword=hunter2hunter2 ok", "[REDACTED] ok"}, // Cyrillic а in the name
		{"ｇｈｐ＿" + tok[4:] + " ✓", "[REDACTED] ✓"},            // full-width prefix
		{"a\u200bb — ünïcödé", "ab — ünïcödé"},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestLeakRulesCompile: gitleaks' rules are compiled once per process,
// not per request; every one compiles; no allowlist skips files by name.
func TestLeakRulesCompile(t *testing.T) {
	t.Parallel()
	first, second := leakRules(), leakRules()
	if &first.rules[0] != &second.rules[0] {
		t.Fatal("rules compiled twice")
	}
	if len(first.rules) != len(gitleaksRules) || len(first.rules) < 200 {
		t.Fatalf("%d rules compiled of %d", len(first.rules), len(gitleaksRules))
	}
	for _, a := range gitleaksAllowlist {
		if a.paths && len(a.regexes)+len(a.stopWords) == 0 && len(first.global) == len(gitleaksAllowlist) {
			t.Error("a global allowlist by path alone was kept")
		}
	}
}

// TestLeakAllowlists: gitleaks' allowlist semantics as the guard applies
// them, on findings of its rules.
func TestLeakAllowlists(t *testing.T) {
	t.Parallel()
	f := leakFinding{rule: "r", secret: "AKIAEXAMPLE", match: "key=AKIAEXAMPLE", line: "x key=AKIAEXAMPLE y"}
	re := func(s string) []*regexp.Regexp { return []*regexp.Regexp{regexp.MustCompile(s)} }
	for _, tc := range []struct {
		name string
		a    compiledAllow
		want bool
	}{
		{"secret regex", compiledAllow{res: re(`EXAMPLE$`)}, true},
		{"secret regex misses the match", compiledAllow{res: re(`^key=`)}, false},
		{"match target", compiledAllow{target: "match", res: re(`^key=`)}, true},
		{"line target", compiledAllow{target: "line", res: re(`^x `)}, true},
		{"stop word, any case", compiledAllow{stop: []string{"example"}}, true},
		{"AND needs both", compiledAllow{and: true, res: re(`EXAMPLE`), stop: []string{"zzz"}}, false},
		{"AND with both", compiledAllow{and: true, res: re(`EXAMPLE`), stop: []string{"akia"}}, true},
		{"nothing matches", compiledAllow{res: re(`nope`), stop: []string{"nope"}}, false},
	} {
		if got := tc.a.allowed(f); got != tc.want {
			t.Errorf("%s: allowed = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := compileAllows([]leakAllow{{paths: true}, {paths: true, and: true, regexes: []string{"a"}}, {paths: true, stopWords: []string{"x"}}}); len(got) != 1 || got[0].stop[0] != "x" {
		t.Errorf("path allowlists kept: %+v", got)
	}
}

// FuzzSecretScan: the normaliser and the detectors (the context rules and
// the obfuscation passes too) never panic; normalisation is idempotent,
// and so is redaction: redacted text holds nothing the guard would redact
// again.
func FuzzSecretScan(f *testing.F) {
	for _, s := range []string{
		"", ".en\u200bv", "p\u0430ssword=hunter2hunter2", "e\u200b\u0301", "\u0435\u0301", "\xff\xfe",
		"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "postgres://a:b@c/d",
		"machine m login l password p", "ＧＨＰ＿", "ﬁ①", "İ\u0307", "kind: Secret\ndata:\n  k: TFMwdExTMUNSVWRKVGlCUVVrbFdRVlJGSUV0RldTMHRMUzB0",
	} {
		f.Add(s)
	}
	for _, c := range secretcases.Cases() {
		f.Add(c.Text)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if again := Normalize(n); again != n {
			t.Errorf("normalize not idempotent: %q → %q → %q", s, n, again)
		}
		name := normalizeName(s)
		if again := normalizeName(name); again != name {
			t.Errorf("normalizeName not idempotent: %q → %q → %q", s, name, again)
		}
		m := normalizeMap(s)
		if m.lo != nil && (len(m.lo) != len(m.s) || len(m.hi) != len(m.s)) {
			t.Fatalf("map of %d bytes for %d", len(m.lo), len(m.s))
		}
		for i := range m.lo {
			if m.lo[i] < 0 || m.hi[i] > len(s) || m.lo[i] >= m.hi[i] {
				t.Fatalf("byte %d maps to [%d, %d) of %d", i, m.lo[i], m.hi[i], len(s))
			}
		}
		_ = ContainsSecret(s)
		r := Redact(s)
		if utf8.ValidString(s) && !utf8.ValidString(r) {
			t.Errorf("Redact(%q) = %q: invalid UTF-8", s, r)
		}
		if again := Redact(r); again != r {
			t.Errorf("Redact not idempotent: %q → %q → %q", s, r, again)
		}
		_ = ScreenFile(s, s, 1<<20)
	})
}

// BenchmarkSecretScan: the guard on one 64 KiB file (name and content),
// as Assemble runs it on every file of a request: Go source (go, the
// common case), and prose about passwords (docs, this repository's
// security page, where the context rules find the most to read). Neither
// holds a secret. cpu-ns/op is the process's CPU time per scan, steadier
// than ns/op on a shared machine.
func BenchmarkSecretScan(b *testing.B) {
	for _, in := range []struct{ name, path string }{{"go", "judge/service.go"}, {"docs", "docs/security.md"}} {
		b.Run(in.name, func(b *testing.B) {
			data, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(in.path))) // from the repository's root
			if err != nil {
				b.Fatal(err)
			}
			content := strings.Repeat(string(data), 64<<10/len(data)+1)[:64<<10]
			content = strings.ToValidUTF8(content, "")
			leakRules() // compiled once, outside the measurement
			b.SetBytes(int64(len(content)))
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				if reason := ScreenFile(in.path, content, 1<<20); reason != "" {
					b.Fatal(reason)
				}
			}
			if used := cpuTime() - start; used > 0 {
				b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
