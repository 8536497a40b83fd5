package judge_test

import (
	"slices"
	"testing"

	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestDetect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		problem string
		files   []string
		want    string
	}{
		{"break glass: cleanMerge_preservesGap sorry; simp makes no progress on the lemma", nil, schemas.ProblemLeanProof},
		{"break glass: the proof does not close", []string{"Gap.lean"}, schemas.ProblemLeanProof},
		{"break glass: nil pointer panic in the voter after a reconnect", nil, schemas.ProblemCodeBug},
		{"break glass: something is off", []string{"voter/pull.go"}, schemas.ProblemCodeBug},
		{"break glass: how should we redesign the module boundaries for multi-tenant scale?", nil, schemas.ProblemArchitecture},
		{"break glass: is there a closed form for this integral, or an upper bound?", nil, schemas.ProblemMathNovel},
		{"break glass: pods lose their NATS connection behind the load balancer; connection reset after the TLS handshake", nil, schemas.ProblemInfraDebug},
		{"break glass: it does not work", []string{"deploy/k8s/nats.yaml"}, schemas.ProblemInfraDebug},
		{"break glass: ???", nil, schemas.ProblemCodeBug}, // no evidence at all
		// Case does not matter, and the trigger itself is no evidence.
		{"BREAK GLASS: KUBERNETES DNS", nil, schemas.ProblemInfraDebug},
		// A tie goes to the type listed first: lean_proof before code_bug.
		{"break glass: lemma crash", nil, schemas.ProblemLeanProof},
	}
	for _, tt := range tests {
		if got := judge.Detect(tt.problem, tt.files); got != tt.want {
			t.Errorf("Detect(%q, %v) = %s, want %s", tt.problem, tt.files, got, tt.want)
		}
	}
}

func TestClassifySource(t *testing.T) {
	t.Parallel()
	req := &schemas.BreakGlassRequest{Problem: "break glass: kubernetes dns", ProblemType: schemas.ProblemMathNovel}
	if typ, src := judge.Classify(req); typ != schemas.ProblemMathNovel || src != judge.SourceRequest {
		t.Errorf("Classify with a type = %s, %s", typ, src)
	}
	req.ProblemType = ""
	if typ, src := judge.Classify(req); typ != schemas.ProblemInfraDebug || src != judge.SourceDetected {
		t.Errorf("Classify without a type = %s, %s", typ, src)
	}
}

func TestTrigger(t *testing.T) {
	t.Parallel()
	for problem, want := range map[string]bool{
		"break glass: x":           true,
		"  Break Glass:   the bug": true,
		"break glass:":             false,
		"break glass:   ":          false,
		"please break glass: x":    false,
		"break-glass: x":           false,
		"":                         false,
	} {
		if got := judge.HasTrigger(problem); got != want {
			t.Errorf("HasTrigger(%q) = %v", problem, got)
		}
	}
}

func TestMissingAttempts(t *testing.T) {
	t.Parallel()
	req := &schemas.BreakGlassRequest{PriorAttempts: []schemas.PriorAttempt{
		{Kind: schemas.AttemptLocalModel, Note: "tried"},
		{Kind: schemas.AttemptTools, Note: "   "}, // an empty note does not count
	}}
	if got := judge.MissingAttempts(req); !slices.Equal(got, []string{schemas.AttemptFrontierModel, schemas.AttemptTools}) {
		t.Errorf("MissingAttempts = %v", got)
	}
}
