package judge_test

import (
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

// The cost gate takes the stricter (lower threshold) of the declared and
// the detected type: declaring a type can tighten it, never loosen it.
func TestGateType(t *testing.T) {
	t.Parallel()
	s := judge.DefaultSettings() // code_bug 0.30 < infra 0.40 < lean 0.50 < math 0.75 < architecture 1.00
	tests := []struct {
		declared, detected, want string
		noted                    bool
	}{
		{"", schemas.ProblemCodeBug, schemas.ProblemCodeBug, false},
		{"", schemas.ProblemArchitecture, schemas.ProblemArchitecture, false},
		{schemas.ProblemArchitecture, schemas.ProblemCodeBug, schemas.ProblemCodeBug, true},
		{schemas.ProblemMathNovel, schemas.ProblemInfraDebug, schemas.ProblemInfraDebug, true},
		{schemas.ProblemCodeBug, schemas.ProblemArchitecture, schemas.ProblemCodeBug, false},
		{schemas.ProblemLeanProof, schemas.ProblemLeanProof, schemas.ProblemLeanProof, false},
	}
	for _, tt := range tests {
		typ, note := s.GateType(tt.declared, tt.detected)
		if typ != tt.want || (note != "") != tt.noted {
			t.Errorf("GateType(%q, %q) = %q, %q; want %q (noted %v)", tt.declared, tt.detected, typ, note, tt.want, tt.noted)
		}
	}
	// A code bug estimated at $2.57 is refused as code_bug and as a
	// declared architecture problem alike.
	for _, declared := range []string{"", schemas.ProblemCodeBug, schemas.ProblemArchitecture} {
		d, reason := s.RequestGate(declared, schemas.ProblemCodeBug, 2.57, 3, false)
		if d != judge.GateRefuse || !strings.Contains(reason, "code_bug threshold") {
			t.Errorf("declared %q: %s, %q; want refused at the code_bug threshold", declared, d, reason)
		}
	}
}
