package judge_test

import (
	"context"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit/judgetest"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestNextRung(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy       schemas.EscalationPolicy
		strongerDone bool
		want         string
	}{
		{schemas.EscalationPolicy{}, false, judge.RungNoConsensus},
		{schemas.EscalationPolicy{StrongerModel: "big"}, false, judge.RungStrongerModel},
		{schemas.EscalationPolicy{StrongerModel: "big"}, true, judge.RungNoConsensus},
		{schemas.EscalationPolicy{StrongerModel: "big", Panel: true}, true, judge.RungPanel},
		{schemas.EscalationPolicy{Panel: true}, false, judge.RungPanel},
	}
	for _, tt := range tests {
		if got := judge.NextRung(tt.policy, tt.strongerDone); got != tt.want {
			t.Errorf("NextRung(%+v, %v) = %s, want %s", tt.policy, tt.strongerDone, got, tt.want)
		}
	}
}

// A voting step that exhausted its samples (40 vs 45 vs 5 votes, no lead
// of k): the stronger model votes and also fails, the job opted in to the
// panel, the judge arbitrates. The panel's majority decides, not the
// tally, and the decision is an arbiter decision, not votes.
func noConsensusStep() schemas.ArbitrationStep {
	return schemas.ArbitrationStep{
		JobID: "hanoi-10-k50", Step: 731, Task: "hanoi", K: 50, Samples: 100,
		State: `{"pegs":[[10,9,8,7,6,5,4,3,2],[1],[]]}`,
		Candidates: []schemas.TallyEntry{
			{VoteKey: `{"move":[2,0,2]}`, Votes: 45},
			{VoteKey: `{"move":[2,0,1]}`, Votes: 40},
			{VoteKey: `{"move":[1,1,2]}`, Votes: 5},
		},
	}
}

func TestArbitrate(t *testing.T) {
	t.Parallel()
	policy := schemas.EscalationPolicy{StrongerModel: "big", Panel: true}
	if judge.NextRung(policy, false) != judge.RungStrongerModel || judge.NextRung(policy, true) != judge.RungPanel {
		t.Fatal("ladder")
	}
	notes := judge.ArbitrationNotes{LocalModel: "gpt-4.1-mini: 100 samples, no lead of 50", StrongerModel: "big: 10 samples, 5/5"}

	t.Run("decided", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
		defer cancel()
		env := judgetest.Start(t, simllm.Config{})
		s := judgetest.TestSettings()
		// Two members pick the fewest-votes candidate: the majority of the
		// panel, not of the tally, decides.
		s.Panels[schemas.ProblemCodeBug] = []string{"m1@dissent", "m2@dissent", "m3"}
		env.StartJudge(s)
		step := noConsensusStep()
		d, err := judge.Arbitrate(ctx, env.JS, bus.DefaultNamespace, "acme", step, policy, notes)
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != schemas.ArbiterDecided || d.VoteKey != `{"move":[1,1,2]}` || d.Confidence != 0.9 || d.Threshold != schemas.DefaultMinConfidence {
			t.Fatalf("decision %+v", d)
		}
		if d.JobID != step.JobID || d.Step != 731 || len(d.Panel) != 3 || d.CostUSD <= 0 {
			t.Errorf("decision %+v", d)
		}
		if err := d.Validate(); err != nil {
			t.Errorf("the decision is not a valid message: %v", err)
		}
		// Arbitrating the same step again returns the same decision
		// without calling the panel again.
		before := env.Sim.Stats().Requests
		again, err := judge.Arbitrate(ctx, env.JS, bus.DefaultNamespace, "acme", step, policy, notes)
		if err != nil || again.VoteKey != d.VoteKey || env.Sim.Stats().Requests != before {
			t.Errorf("second arbitration: %+v, %v", again, err)
		}
		if !strings.Contains(env.Requests.String(), "candidate 3 (votes 5)") {
			t.Error("the candidates are not in the panel's prompt")
		}
	})
	t.Run("needs human", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
		defer cancel()
		env := judgetest.Start(t, simllm.Config{})
		s := judgetest.TestSettings()
		s.JudgeModel = "judge@lowconf"
		env.StartJudge(s)
		d, err := judge.Arbitrate(ctx, env.JS, bus.DefaultNamespace, "acme", noConsensusStep(), policy, notes)
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != schemas.ArbiterNeedsHuman || d.VoteKey != "" || !strings.Contains(d.Reason, "confidence 0.30 is below the threshold 0.70") {
			t.Fatalf("decision %+v", d)
		}
		// Missing notes are refused by the trigger protocol: a needs_human
		// decision, not an error.
		d, err = judge.Arbitrate(ctx, env.JS, bus.DefaultNamespace, "acme", schemas.ArbitrationStep{
			JobID: "j2", Step: 1, Task: "hanoi", K: 3, Samples: 10, Candidates: []schemas.TallyEntry{{VoteKey: "a", Votes: 2}},
		}, policy, judge.ArbitrationNotes{})
		if err != nil || d.Outcome != schemas.ArbiterNeedsHuman || !strings.Contains(d.Reason, "refused") {
			t.Errorf("refused arbitration: %+v, %v", d, err)
		}
	})
}

func TestToArbiterDecision(t *testing.T) {
	t.Parallel()
	req := judge.ArbitrationRequest("acme", noConsensusStep(), judge.ArbitrationNotes{LocalModel: "x", StrongerModel: "y"})
	if err := req.Validate(); err != nil || !judge.HasTrigger(req.Problem) || len(judge.MissingAttempts(req)) != 0 {
		t.Fatalf("arbitration request: %v", err)
	}
	answer := func(outcome, key string, conf float64) *schemas.BreakGlassResponse {
		return &schemas.BreakGlassResponse{Outcome: outcome, Reason: "r", Solution: schemas.Solution{VoteKey: key, Confidence: conf}}
	}
	key := `{"move":[2,0,1]}`
	tests := []struct {
		resp   *schemas.BreakGlassResponse
		want   string
		reason string
	}{
		{answer(schemas.BreakGlassAnswered, key, 0.8), schemas.ArbiterDecided, "arbiter decision"},
		{answer(schemas.BreakGlassAnswered, key, 0.69), schemas.ArbiterNeedsHuman, "below the threshold"},
		{answer(schemas.BreakGlassAnswered, "other", 0.99), schemas.ArbiterNeedsHuman, "no candidate"},
		{answer(schemas.BreakGlassDegraded, key, 0.99), schemas.ArbiterNeedsHuman, "degraded"},
		{answer(schemas.BreakGlassRefused, "", 0), schemas.ArbiterNeedsHuman, "refused"},
		{nil, schemas.ArbiterNeedsHuman, "no answer"},
	}
	for _, tt := range tests {
		d := judge.ToArbiterDecision(req, tt.resp, 0.7)
		if d.Outcome != tt.want || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%+v: %s %q, want %s %q", tt.resp, d.Outcome, d.Reason, tt.want, tt.reason)
		}
		if err := d.Validate(); err != nil {
			t.Errorf("invalid decision: %v", err)
		}
	}
}
