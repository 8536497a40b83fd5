package judge

import (
	"encoding/json"
	"testing"

	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/judge/internal/secretcases"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestSecretsReachNoModel: no secret form of issue 19 (item 8) reaches a
// model's prompt (the problem, a prior attempt's note, the build log and a
// file, through Assemble) or the audit record. (guard's TestContextSecrets
// checks the guard itself on the same cases.)
func TestSecretsReachNoModel(t *testing.T) {
	t.Parallel()
	s, err := Settings{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	leaked := func(out, text, secret string) string { return secretcases.Leaked(out, text, secret, guard.Normalize) }
	for _, tt := range secretcases.Cases() {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			req := &schemas.BreakGlassRequest{Problem: "break glass: the set-up below fails\n" + tt.Text, BuildLog: tt.Text,
				PriorAttempts: []schemas.PriorAttempt{{Kind: "local_model", Note: tt.Text}},
				Files:         []schemas.ContextFile{{Path: "src/main.go", Content: "package main\n"}, {Path: "conf/app.txt", Content: tt.Text}}}
			a := Assemble(req, schemas.ProblemCodeBug, nil, &s)
			if p := leaked(a.System+a.User+a.Problem, tt.Text, tt.Secret); p != "" {
				t.Errorf("a model receives %q:\n%s", p, a.User)
			}
			if len(a.Excluded) != 1 || a.Excluded[0].Path != "conf/app.txt" {
				t.Errorf("excluded %+v", a.Excluded)
			}
			// What the audit stream would store.
			rec := schemas.BreakGlassAudit{Problem: req.Problem, Diagnosis: tt.Text, Reason: tt.Text, Requester: tt.Text,
				ExcludedFiles: []schemas.ExcludedFile{{Path: tt.Text, Reason: tt.Text}}}
			redactAudit(&rec)
			data, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			var back schemas.BreakGlassAudit
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{back.Problem, back.Diagnosis, back.Reason, back.Requester, back.ExcludedFiles[0].Path} {
				if p := leaked(f, tt.Text, tt.Secret); p != "" {
					t.Errorf("the audit record holds %q: %q", p, f)
				}
			}
		})
	}
}
