package judge

import (
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

func TestParseSynthesis(t *testing.T) {
	t.Parallel()
	ar := []schemas.TallyEntry{{VoteKey: "A", Votes: 3}, {VoteKey: "B", Votes: 2}}
	good := `{"diagnosis": "d", "solution": {"approach": "a", "confidence": 0.7}}`
	tests := []struct {
		name, text string
		ar         []schemas.TallyEntry
		msg        string
	}{
		{"minimal", good, nil, ""},
		{"fenced with prose", "Sure:\n```json\n" + good + "\n```\n", nil, ""},
		{"extra fields ignored", `{"diagnosis": "d", "cost_estimate": "$0.40", "solution": {"approach": "a", "confidence": 1}}`, nil, ""},
		{"not json", "the answer is 42", nil, "no JSON object"},
		{"truncated", `{"diagnosis": "d", "solution": {"approach": `, nil, "no JSON object"},
		{"bad json", `{"diagnosis": "d", "solution": }`, nil, "invalid character"},
		{"no diagnosis", `{"solution": {"approach": "a", "confidence": 0.5}}`, nil, "diagnosis is missing"},
		{"no solution", `{"diagnosis": "d"}`, nil, "solution is missing"},
		{"no confidence", `{"diagnosis": "d", "solution": {"approach": "a"}}`, nil, "confidence must be"},
		{"confidence over 1", `{"diagnosis": "d", "solution": {"approach": "a", "confidence": 1.2}}`, nil, "confidence must be"},
		{"arbitration without vote", good, ar, "vote_key must be one of the candidates"},
		{"arbitration with unknown vote", `{"diagnosis": "d", "solution": {"approach": "a", "confidence": 0.9, "vote_key": "C"}}`, ar, "vote_key must be one of"},
		{"arbitration", `{"diagnosis": "d", "solution": {"approach": "a", "confidence": 0.9, "vote_key": "B"}}`, ar, ""},
	}
	for _, tt := range tests {
		syn, err := parseSynthesis(tt.text, tt.ar)
		if tt.msg == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			} else if syn.Alternatives == nil || syn.PanelAnalysis.BlindSpots == nil || syn.Solution.CodeSnippets == nil {
				t.Errorf("%s: absent lists are not empty lists", tt.name)
			}
			continue
		}
		if !errors.Is(err, ErrJudgeOutput) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want ErrJudgeOutput containing %q", tt.name, err, tt.msg)
		}
	}
}

// FuzzParseSynthesis: any judge output either parses into an answer that
// satisfies the response's rules or is an ErrJudgeOutput; never a panic.
func FuzzParseSynthesis(f *testing.F) {
	f.Add(`{"diagnosis": "d", "solution": {"approach": "a", "confidence": 0.7, "vote_key": "A"}}`)
	f.Add("```json\n{}\n```")
	f.Add(`{"solution": {"confidence": NaN}}`)
	ar := []schemas.TallyEntry{{VoteKey: "A", Votes: 1}}
	f.Fuzz(func(t *testing.T, text string) {
		for _, a := range [][]schemas.TallyEntry{nil, ar} {
			syn, err := parseSynthesis(text, a)
			if err != nil {
				if !errors.Is(err, ErrJudgeOutput) {
					t.Fatalf("error %v is not ErrJudgeOutput", err)
				}
				continue
			}
			if strings.TrimSpace(syn.Diagnosis) == "" || syn.Solution.Confidence < 0 || syn.Solution.Confidence > 1 {
				t.Fatalf("accepted %q as %+v", text, syn)
			}
			if a != nil && syn.Solution.VoteKey != "A" {
				t.Fatalf("accepted vote key %q", syn.Solution.VoteKey)
			}
		}
	})
}
