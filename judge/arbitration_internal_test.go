package judge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// step returns a valid arbitration request with candidates A (45) and B
// (40), drawn by the own model.
func step() *schemas.ArbitrationRequest {
	rungs := []schemas.RungTally{{Rung: schemas.RungOwnModel, Counted: 85, Valid: 85,
		Tally: []schemas.TallyEntry{{VoteKey: "A", Votes: 45}, {VoteKey: "B", Votes: 40}}}}
	cands, samples := schemas.MergeRungs(rungs)
	return &schemas.ArbitrationRequest{
		Header:    schemas.NewHeader(schemas.KindArbitrationRequest),
		RequestID: schemas.ArbitrationRequestID("acme", "j1", 9), Tenant: "acme", JobID: "j1", Step: 9, Task: "hanoi",
		State: `{"pegs":[[3,2,1],[],[]]}`, K: 3, Samples: samples, Candidates: cands, Rungs: rungs, MinConfidence: 0.7,
	}
}

// The step's decision, from how the arbitration ended: decided only for
// an answered outcome naming a candidate with enough confidence.
func TestArbitrationDecide(t *testing.T) {
	t.Parallel()
	answer := func(key string, conf float64) *synthesis {
		return &synthesis{Diagnosis: "d", Solution: schemas.Solution{VoteKey: key, Confidence: conf}}
	}
	s := DefaultSettings()
	tests := []struct {
		outcome, reason string
		syn             *synthesis
		want, why       string
	}{
		{schemas.BreakGlassAnswered, "", answer("B", 0.8), schemas.ArbiterDecided, "arbiter decision by anthropic/claude-opus-4.8 over a panel of 3 (confidence 0.80)"},
		{schemas.BreakGlassAnswered, "1 of 3 panel members failed: m2", answer("A", 0.7), schemas.ArbiterDecided, "(confidence 0.70); 1 of 3 panel members failed: m2"},
		{schemas.BreakGlassAnswered, "", answer("B", 0.69), schemas.ArbiterNeedsHuman, "the judge's confidence 0.69 is below the threshold 0.70"},
		{schemas.BreakGlassAnswered, "", answer("C", 0.99), schemas.ArbiterNeedsHuman, "the judge chose no candidate of the step"},
		{schemas.BreakGlassAnswered, "", nil, schemas.ArbiterNeedsHuman, "the judge's answer is answered"},
		{schemas.BreakGlassDegraded, "judge synthesis failed: x", nil, schemas.ArbiterNeedsHuman, "the judge's answer is degraded: judge synthesis failed: x"},
		{schemas.BreakGlassRefused, "job limit: 3 of 3", nil, schemas.ArbiterNeedsHuman, "the judge's answer is refused: job limit: 3 of 3"},
		{schemas.BreakGlassFailed, "every panel member failed (a, b)", nil, schemas.ArbiterNeedsHuman, "is failed: every panel member failed"},
		{schemas.BreakGlassDenied, "denied by bob", nil, schemas.ArbiterNeedsHuman, "is denied: denied by bob"},
	}
	for _, tt := range tests {
		c := newArbitration(step(), &s)
		c.resp.Cost.ActualUSD = 0.12
		d := c.decide(tt.outcome, tt.reason, tt.syn)
		if d.Outcome != tt.want || !strings.Contains(d.Reason, tt.why) {
			t.Errorf("%s %v: %s %q, want %s %q", tt.outcome, tt.syn, d.Outcome, d.Reason, tt.want, tt.why)
		}
		if (d.Outcome == schemas.ArbiterDecided) != (d.VoteKey != "") || d.CostUSD != 0.12 || d.Threshold != 0.7 || len(d.Panel) != 3 {
			t.Errorf("%s: decision %+v", tt.outcome, d)
		}
		if err := d.Validate(); err != nil {
			t.Errorf("%s: invalid decision: %v", tt.outcome, err)
		}
	}
}

// A request that fails Decode is answered only when it names its step
// consistently; only the step's ids are kept from it.
func TestReadStep(t *testing.T) {
	t.Parallel()
	good := step()
	good.Samples = -1 // invalid, but the step is named
	data, _ := json.Marshal(good)
	r, ok := readStep(data)
	if !ok || r.RequestID != good.RequestID || r.JobID != "j1" || r.Step != 9 || r.Task != "" || len(r.Candidates) != 0 || r.MinConfidence != 0 {
		t.Errorf("readStep = %+v, %v", r, ok)
	}
	for name, edit := range map[string]func(*schemas.ArbitrationRequest){
		"another step's id": func(r *schemas.ArbitrationRequest) { r.Step = 10 },
		"bad tenant":        func(r *schemas.ArbitrationRequest) { r.Tenant = "A B" },
		"bad job":           func(r *schemas.ArbitrationRequest) { r.JobID = "" },
		"negative step":     func(r *schemas.ArbitrationRequest) { r.Step = -1 },
	} {
		r := step()
		edit(r)
		data, _ := json.Marshal(r)
		if _, ok := readStep(data); ok {
			t.Errorf("%s: answered", name)
		}
	}
	if _, ok := readStep([]byte("not json")); ok {
		t.Error("not JSON: answered")
	}
}

// Context assembly fences the step, redacts the state, and refuses what
// cannot go to a model.
func TestAssembleArbitration(t *testing.T) {
	t.Parallel()
	s := DefaultSettings()
	req := step()
	req.State = `{"note":"OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx"}`
	a, refusal := AssembleArbitration(req, &s)
	if refusal != "" {
		t.Fatal(refusal)
	}
	fenced := "<<<DATA " + a.Nonce + " candidates\ncandidate 1 (votes 45): A\ncandidate 2 (votes 40): B\nDATA " + a.Nonce + ">>>"
	if !strings.Contains(a.User, fenced) || !strings.Contains(a.User, "<<<DATA "+a.Nonce+" rungs\nown_model: 85 samples counted") ||
		!strings.Contains(a.judgeUser(nil), fenced) {
		t.Errorf("candidates and rungs not fenced:\n%s", a.User)
	}
	if guard.ContainsSecret(a.User) || guard.ContainsSecret(a.judgeUser(nil)) || !strings.Contains(a.User, guard.Redacted) {
		t.Errorf("the state's key reached the prompt:\n%s", a.User)
	}
	if !strings.HasPrefix(a.System, ArbitrationPanelMarker+"\n") || !strings.HasPrefix(a.judgeSystem, ArbitrationJudgeMarker+"\n") {
		t.Error("the prompts do not name their roles")
	}

	secret := step()
	secret.Candidates[1].VoteKey = "ghp_" + strings.Repeat("a", 36)
	if _, refusal := AssembleArbitration(secret, &s); !strings.Contains(refusal, "secret guard: candidate 2") {
		t.Errorf("a candidate holding a key: %q", refusal)
	}
	small := s
	small.MaxContextTokens = 200
	if _, refusal := AssembleArbitration(step(), &small); !strings.Contains(refusal, "over max_context_tokens 200") {
		t.Errorf("over the token cap: %q", refusal)
	}
}
