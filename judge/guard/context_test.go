package guard

import (
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/judge/internal/secretcases"
)

// TestContextSecrets: every secret form of issue 19 (item 8) and its
// variants is caught: ContainsSecret sees it, a file holding it is
// withheld, and Redact leaves none of it readable. (judge's
// TestSecretsReachNoModel follows the same cases into a model's prompt
// and the audit record.)
func TestContextSecrets(t *testing.T) {
	t.Parallel()
	cases := secretcases.Cases()
	if len(cases) < 100 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(secretcases.Squeeze(Normalize(tt.Text)), secretcases.Squeeze(tt.Secret)) {
				t.Fatalf("bad case: %q not in %q", tt.Secret, tt.Text)
			}
			if !ContainsSecret(tt.Text) {
				t.Errorf("ContainsSecret(%q) = false", tt.Text)
			}
			if reason := ScreenFile("notes/setup.txt", tt.Text, 1<<20); reason == "" {
				t.Errorf("a file holding %q is not withheld", tt.Text)
			}
			red := Redact(tt.Text)
			if p := secretcases.Leaked(red, tt.Text, tt.Secret, Normalize); p != "" {
				t.Errorf("Redact(%q) = %q: %q is readable", tt.Text, red, p)
			}
		})
	}
}

// TestContextNoFalseAlarms: code and prose that name passwords without
// holding one pass the guard untouched.
func TestContextNoFalseAlarms(t *testing.T) {
	t.Parallel()
	for _, text := range secretcases.NoFalseAlarms {
		if ContainsSecret(text) {
			res := scanSecrets(Normalize(text), "")
			t.Errorf("%q: taken for a secret (%s: %q)", text, res.rule(), Redact(text))
		}
	}
}
