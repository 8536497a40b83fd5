package judgeclient

import (
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// A stored decision decides the asking step only when it answers a
// request like the asker's: one of its candidates, judged against at
// least its min confidence.
func TestDecisionFor(t *testing.T) {
	t.Parallel()
	req := &schemas.ArbitrationRequest{MinConfidence: 0.7, RequestID: "arbitration-x",
		Candidates: []schemas.TallyEntry{{VoteKey: "A", Votes: 3}, {VoteKey: "B", Votes: 2}}}
	decided := func(key string, threshold float64) *schemas.ArbiterDecision {
		return &schemas.ArbiterDecision{Outcome: schemas.ArbiterDecided, VoteKey: key, Confidence: 0.9, Threshold: threshold, Reason: "r"}
	}
	tests := []struct {
		d         *schemas.ArbiterDecision
		want, why string
	}{
		{decided("B", 0.7), schemas.ArbiterDecided, "r"},
		{decided("A", 0.9), schemas.ArbiterDecided, "r"},
		{decided("C", 0.7), schemas.ArbiterNeedsHuman, "not one of this step's candidates"},
		{decided("A", 0.1), schemas.ArbiterNeedsHuman, "judged against min confidence 0.10, below this job's 0.70"},
		{&schemas.ArbiterDecision{Outcome: schemas.ArbiterNeedsHuman, Reason: "refused"}, schemas.ArbiterNeedsHuman, "refused"},
	}
	for _, tt := range tests {
		got := decisionFor(req, tt.d)
		if got.Outcome != tt.want || !strings.Contains(got.Reason, tt.why) || (got.Outcome == schemas.ArbiterNeedsHuman) != (got.VoteKey == "") {
			t.Errorf("decisionFor(%+v) = %+v, want %s %q", tt.d, got, tt.want, tt.why)
		}
	}
	if d := decided("C", 0.7); decisionFor(req, d) == d || d.Outcome != schemas.ArbiterDecided {
		t.Error("decisionFor changed the stored decision instead of returning another")
	}
}

func TestResponseError(t *testing.T) {
	t.Parallel()
	for outcome, want := range map[string]error{
		schemas.BreakGlassAnswered: nil, schemas.BreakGlassDegraded: nil,
		schemas.BreakGlassRefused: ErrRefused, schemas.BreakGlassDenied: ErrDenied, schemas.BreakGlassFailed: ErrFailed,
	} {
		err := ResponseError(&schemas.BreakGlassResponse{Outcome: outcome, Reason: "why"})
		if !errors.Is(err, want) || (want != nil && !strings.HasSuffix(err.Error(), ": why")) || (want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v with the reason", outcome, err, want)
		}
	}
}
