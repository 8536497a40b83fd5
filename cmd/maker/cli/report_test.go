package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestPrintReportEscalation: the text report says what the ladder did: the
// stronger model's share of the tokens, the panel's cost, the steps it
// settled, and for a step no rung settled, every rung's tally.
func TestPrintReportEscalation(t *testing.T) {
	rep := schemas.JobReport{
		Tenant: "default", JobID: "j1", Task: "hanoi", Params: []byte(`{"disks":3}`), K: 2,
		State: schemas.StateNoConsensus, TotalSteps: 7, CostUSD: 0.25,
		Figures: schemas.Figures{
			Steps: 3, PromptTokens: 1200, CompletionTokens: 300, StrongerPromptTokens: 480, StrongerCompletionTokens: 100,
			ArbiterCostUSD: 0.2, Escalations: 1, ArbiterDecisions: 1, ArbiterSteps: []int64{1},
		},
		NoConsensus: &schemas.NoConsensus{
			Step: 3, Samples: 4, Rung: schemas.RungStrongerModel,
			Tally: []schemas.TallyEntry{{VoteKey: "b", Votes: 2}, {VoteKey: "a", Votes: 2}},
			Prior: []schemas.RungTally{{Rung: schemas.RungOwnModel, Counted: 5, Valid: 5, Tally: []schemas.TallyEntry{{VoteKey: "a", Votes: 3}, {VoteKey: "b", Votes: 2}}}},
		},
	}
	var b bytes.Buffer
	if err := printReport(&b, rep, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"tokens           1200 in, 300 out (stronger model 480 in, 100 out)   cost $0.2500 (panel $0.2000)",
		"escalated        1 steps decided by the stronger model, 1 by an arbiter (step 1)\n",
		"no consensus     step 3, own_model: 5 samples; tally:\n       3  a\n       2  b\n",
		"no consensus     step 3, stronger_model: 4 samples; tally:\n       2  b\n       2  a\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestPrintReportArbiterSteps: the escalated line lists the arbiter's
// steps only when there are some, as numbers, and says how many there are
// when it lists only the first.
func TestPrintReportArbiterSteps(t *testing.T) {
	t.Parallel()
	const head = "  escalated        "
	for _, tc := range []struct {
		name        string
		escalations int64
		decisions   int64
		steps       []int64
		want        string // the line; "" for none
	}{
		{"no escalation", 0, 0, nil, ""},
		{"only the stronger model", 2, 0, nil, head + "2 steps decided by the stronger model, 0 by an arbiter\n"},
		{"one arbiter step", 0, 1, []int64{7}, head + "0 steps decided by the stronger model, 1 by an arbiter (step 7)\n"},
		{"three arbiter steps", 1, 3, []int64{3, 9, 40}, head + "1 steps decided by the stronger model, 3 by an arbiter (steps 3, 9, 40)\n"},
		{"more than are listed", 0, 12, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
			head + "0 steps decided by the stronger model, 12 by an arbiter (steps 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, … (12 in all))\n"},
		{"more than the report keeps", 0, 150, []int64{5, 6},
			head + "0 steps decided by the stronger model, 150 by an arbiter (steps 5, 6, … (150 in all))\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := reportLine(t, schemas.Figures{Escalations: tc.escalations, ArbiterDecisions: tc.decisions, ArbiterSteps: tc.steps}, head)
			if got != tc.want {
				t.Errorf("escalated line %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPrintReportUntrusted: the text report says how many results were
// dropped as forged and how many claimed more tokens than allowed, and
// says nothing of them when there were none.
func TestPrintReportUntrusted(t *testing.T) {
	t.Parallel()
	const head = "  untrusted        "
	for _, tc := range []struct {
		name                string
		forged, overclaimed int64
		want                string
	}{
		{"none", 0, 0, ""},
		{"both", 7, 2, head + "7 forged results dropped, 2 results over their token bounds (red flag overclaim, charged at the bound)\n"},
		{"forged only", 3, 0, head + "3 forged results dropped, 0 results over their token bounds (red flag overclaim, charged at the bound)\n"},
	} {
		if got := reportLine(t, schemas.Figures{ForgedResults: tc.forged, OverclaimedResults: tc.overclaimed}, head); got != tc.want {
			t.Errorf("%s: line %q, want %q", tc.name, got, tc.want)
		}
	}
}

// reportLine is the line of the text report of a solved job with figures
// f that starts with head ("" when there is none).
func reportLine(t *testing.T, f schemas.Figures, head string) string {
	t.Helper()
	rep := schemas.JobReport{Tenant: "default", JobID: "j1", Task: "hanoi", Params: []byte(`{"disks":3}`), K: 2,
		State: schemas.StateSolved, Figures: f}
	var b bytes.Buffer
	if err := printReport(&b, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if strings.HasPrefix(l, head) {
			return l
		}
	}
	return ""
}
