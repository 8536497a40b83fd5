package judge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

// Vote keys of the arbitrated step: the own model's tally leads with A,
// the stronger model's with B, and C trails.
const (
	keyA = `{"move":[2,0,2]}`
	keyB = `{"move":[2,0,1]}`
	keyC = `{"move":[1,1,2]}`
)

// arbitration returns the arbitration request of step of job (tenant
// acme): 100 own-model samples (A 45, B 40, C 5, 10 red-flagged), then
// 10 of a stronger model (B 5, A 5); candidates A 50, B 45, C 5.
func arbitration(job string, step int64) *schemas.ArbitrationRequest {
	rungs := []schemas.RungTally{
		{Rung: schemas.RungOwnModel, Counted: 100, Valid: 90, RedFlagged: 10, RedFlags: map[string]int{"parse": 10},
			Tally: []schemas.TallyEntry{{VoteKey: keyA, Votes: 45}, {VoteKey: keyB, Votes: 40}, {VoteKey: keyC, Votes: 5}}},
		{Rung: schemas.RungStrongerModel, Counted: 10, Valid: 10,
			Tally: []schemas.TallyEntry{{VoteKey: keyB, Votes: 5}, {VoteKey: keyA, Votes: 5}}},
	}
	cands, samples := schemas.MergeRungs(rungs)
	return &schemas.ArbitrationRequest{
		Tenant: "acme", JobID: job, Step: step, Task: "hanoi", State: `{"pegs":[[10,9,8,7,6,5,4,3,2],[1],[]]}`,
		K: 50, Samples: samples, Candidates: cands, Rungs: rungs, MinConfidence: schemas.DefaultMinConfidence,
	}
}

// The panel arbitrates: its majority decides, not the tally's, and the
// decision is the step's own kind. Asking again reads the stored answer.
// The prompts hold the step as data, no break-glass trigger and no prior
// attempts, and the audit record says it is an arbitration.
func TestArbitrationDecided(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	// Two members pick the fewest-votes candidate.
	s.Arbitration.Panel = []string{"m1@dissent", "m2@dissent", "m3"}
	env.StartJudge(s)
	req := arbitration("hanoi-10-k50", 731)
	d, err := env.Arbitrate(req)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != schemas.ArbiterDecided || d.VoteKey != keyC || d.Confidence != 0.9 || d.Threshold != schemas.DefaultMinConfidence {
		t.Fatalf("decision %+v", d)
	}
	if d.JobID != req.JobID || d.Step != 731 || d.RequestID != schemas.ArbitrationRequestID("acme", req.JobID, 731) ||
		d.JudgeModel != "judge" || len(d.Panel) != 3 || d.CostUSD <= 0 || !strings.Contains(d.Reason, "arbiter decision by judge over a panel of 3") {
		t.Errorf("decision %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("the decision is not a valid message: %v", err)
	}

	before := env.Sim.Stats().Requests
	again, err := env.Arbitrate(arbitration("hanoi-10-k50", 731))
	if err != nil || again.VoteKey != d.VoteKey || again.DecidedAt != d.DecidedAt {
		t.Errorf("second arbitration: %+v, %v", again, err)
	}
	if after := env.Sim.Stats().Requests; after != before {
		t.Errorf("the panel was called again: %d requests, then %d", before, after)
	}

	prompts := env.Requests.String()
	for _, want := range []string{judge.ArbitrationPanelMarker, judge.ArbitrationJudgeMarker, "candidate 3 (votes 5)",
		"own_model: 100 samples counted, 90 valid, 10 red-flagged; votes: candidate 1 ×45, candidate 2 ×40, candidate 3 ×5",
		"stronger_model: 10 samples counted", `[[10,9,8,7,6,5,4,3,2],[1],[]]`} {
		if !strings.Contains(prompts, want) {
			t.Errorf("the prompts lack %q", want)
		}
	}
	for _, not := range []string{"break glass:", "PRIOR ATTEMPTS", judge.PanelMarker} {
		if strings.Contains(prompts, not) {
			t.Errorf("an arbitration prompt holds %q", not)
		}
	}
	recs := env.Audit(req.JobID)
	if got := judgetest.Outcomes(recs); !slices.Equal(got, []string{d.RequestID + ":answered"}) {
		t.Fatalf("audit %v", got)
	}
	if r := recs[0]; r.RequestKind != schemas.KindArbitrationRequest || r.Session != req.JobID || r.Requester != "coordinator" ||
		!strings.Contains(r.Problem, "arbitration of step 731 of job hanoi-10-k50") || r.Confidence != 0.9 || r.ActualUSD != d.CostUSD {
		t.Errorf("audit record %+v", r)
	}
}

// What does not decide the step is a needs_human decision, not an error:
// an answer below the job's min confidence, a degraded answer, a failed
// panel.
func TestArbitrationNeedsHuman(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		set    func(*judge.Settings)
		reason string
	}{
		{"low confidence", func(s *judge.Settings) { s.Arbitration.JudgeModel = "judge@lowconf" }, "the judge's confidence 0.30 is below the threshold 0.70"},
		{"degraded", func(s *judge.Settings) { s.Arbitration.JudgeModel = "judge@badjson" }, "the judge's answer is degraded: judge synthesis failed"},
		{"failed", func(s *judge.Settings) { s.Arbitration.Panel = []string{"m1@fail", "m2@fail"} }, "the judge's answer is failed: every panel member failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := judgetest.Start(t, simllm.Config{})
			s := judgetest.TestSettings()
			tt.set(&s)
			env.StartJudge(s)
			d, err := env.Arbitrate(arbitration("j-unsure", 4))
			if err != nil {
				t.Fatal(err)
			}
			if d.Outcome != schemas.ArbiterNeedsHuman || d.VoteKey != "" || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("decision %+v, want needs_human with %q", d, tt.reason)
			}
		})
	}
}

// Gate 1: a request that cannot be sent is an error before anything is
// published; one that reaches the bus invalid but names its step is
// refused, and whoever waits for that step hears why.
func TestArbitrationShape(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	bad := arbitration("j-shape", 1)
	bad.Candidates[0].Votes++ // not what the rungs drew
	if d, err := env.Arbitrate(bad); !errors.Is(err, schemas.ErrInvalid) || d != nil {
		t.Errorf("invalid request: %+v, %v; want ErrInvalid", d, err)
	}

	// A forged request for step 2 (a candidate no rung drew) reaches the
	// judge first; the step's real request, published under the same
	// message id, is a duplicate the stream drops.
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	id := schemas.ArbitrationRequestID("acme", "j-shape", 2)
	forged := fmt.Appendf(nil, `{"version":1,"kind":"arbitration_request","request_id":%q,"tenant":"acme","job_id":"j-shape","step":2,`+
		`"task":"hanoi","state":"{}","k":3,"samples":1,"candidates":[{"vote_key":"x","votes":1}],"rungs":[],"min_confidence":0.1,`+
		`"submitted_at":"2025-11-29T20:00:00Z"}`, id)
	if _, err := env.JS.Publish(ctx, bus.DefaultNamespace.ArbitrateSubject("acme"), forged, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	d, err := env.Arbitrate(arbitration("j-shape", 2))
	if err != nil || d.Outcome != schemas.ArbiterNeedsHuman || !strings.Contains(d.Reason, "refused: not a valid arbitration request") ||
		!strings.Contains(d.Reason, "rungs must start with own_model") {
		t.Errorf("forged request: %+v, %v; want a refusal naming the fault", d, err)
	}
	if n := env.Sim.Stats().Requests; n != 0 {
		t.Errorf("invalid requests reached the model %d times", n)
	}
}

// Gates 4 and 5 for arbitrations: the cost gate refuses above 3 × the
// arbitration threshold and holds above $2.00 for a person, whose
// approval or denial works as for break-glass requests; per-job limits
// count a job's arbitrations and no other job's or session's.
func TestArbitrationCostGate(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		env := judgetest.Start(t, simllm.Config{})
		env.StartJudge(costly(2.5)) // over 3 × the default (code_bug) $0.30
		d, err := env.Arbitrate(arbitration("j-dear", 1))
		if err != nil || d.Outcome != schemas.ArbiterNeedsHuman ||
			!strings.Contains(d.Reason, "is over 3 × the arbitration threshold $0.30 ($0.90): escalate to a human") {
			t.Fatalf("refuse: %+v, %v", d, err)
		}
		if n := env.Sim.Stats().Requests; n != 0 {
			t.Errorf("the model was called %d times", n)
		}
	})
	t.Run("held", func(t *testing.T) {
		t.Parallel()
		env := holdingArbitrations(t)
		ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
		defer cancel()
		approved, denied := arbitrateAsync(t, env, arbitration("j-approve", 7)), arbitrateAsync(t, env, arbitration("j-deny", 7))
		pending := waitPending(ctx, t, env, 2)
		for _, a := range pending {
			if a.Arbitration == nil || a.Session != a.Arbitration.JobID || !strings.Contains(judge.HeldProblem(&a), "arbitration of step 7 of job j-") ||
				!strings.Contains(a.Reason, "maker judge approve "+a.RequestID) {
				t.Errorf("pending %+v", a)
			}
		}
		if n := env.Sim.Stats().Requests; n != 0 {
			t.Fatalf("the model was called %d times before approval", n)
		}
		idOf := func(job string) string { return schemas.ArbitrationRequestID("acme", job, 7) }
		// The coordinator asked: it may not decide its own arbitration.
		if _, err := decide(ctx, env, "coordinator", idOf("j-approve"), schemas.DecisionApprove, "coord"); !errors.Is(err, judgeclient.ErrOwnRequest) {
			t.Errorf("approval by the coordinator: %v, want ErrOwnRequest", err)
		}
		if _, err := decide(ctx, env, "approver", idOf("j-approve"), schemas.DecisionApprove, "bob"); err != nil {
			t.Fatal(err)
		}
		if _, err := judgeclient.Decide(ctx, env.NC, bus.DefaultNamespace, "approver", &schemas.ApprovalDecision{
			RequestID: idOf("j-deny"), Tenant: "acme", Decision: schemas.DecisionDeny, By: "bob", Reason: "too expensive today"}); err != nil {
			t.Fatal(err)
		}
		if d := <-approved; d == nil || d.Outcome != schemas.ArbiterDecided || d.VoteKey != keyA {
			t.Errorf("approved: %+v", d)
		}
		if d := <-denied; d == nil || d.Outcome != schemas.ArbiterNeedsHuman || !strings.Contains(d.Reason, "denied: denied by bob: too expensive today") {
			t.Errorf("denied: %+v", d)
		}
		for job, want := range map[string][]string{
			"j-approve": {idOf("j-approve") + ":held", idOf("j-approve") + ":approved", idOf("j-approve") + ":answered"},
			"j-deny":    {idOf("j-deny") + ":held", idOf("j-deny") + ":denied"},
		} {
			recs := env.Audit(job)
			if got := judgetest.Outcomes(recs); !slices.Equal(got, want) {
				t.Errorf("audit of %s %v, want %v", job, got, want)
			}
			for _, r := range recs {
				if r.RequestKind != schemas.KindArbitrationRequest || r.Outcome != schemas.BreakGlassHeld && r.Approver != "bob" {
					t.Errorf("audit record %+v", r)
				}
			}
		}
	})
	t.Run("per-job limits", func(t *testing.T) {
		t.Parallel()
		env := judgetest.Start(t, simllm.Config{})
		s := judgetest.TestSettings()
		s.Arbitration.JobInvocations = 1
		env.StartJudge(s)
		env.StartJudge(s)
		if d, err := env.Arbitrate(arbitration("j-limit", 1)); err != nil || d.Outcome != schemas.ArbiterDecided {
			t.Fatalf("first: %+v, %v", d, err)
		}
		d, err := env.Arbitrate(arbitration("j-limit", 2))
		if err != nil || d.Outcome != schemas.ArbiterNeedsHuman || !strings.Contains(d.Reason, "job limit: 1 of 1 arbitrations already made in this job") {
			t.Errorf("second of the job: %+v, %v", d, err)
		}
		// Another job, and a break-glass session named like the job, have
		// limits of their own.
		if d, err := env.Arbitrate(arbitration("j-other", 2)); err != nil || d.Outcome != schemas.ArbiterDecided {
			t.Errorf("another job: %+v, %v", d, err)
		}
		if resp, err := env.Ask(judgetest.Request("bg-limit", "j-limit", "a crash in the parser")); err != nil || resp.Outcome != schemas.BreakGlassAnswered {
			t.Errorf("break-glass session j-limit: %v", err)
		}
	})
}

// holdingArbitrations starts NATS, the simulated model and a judge whose
// cost gate holds every arbitration for a person ($2.50 estimated, over a
// $1 threshold, within the $3 budget).
func holdingArbitrations(t *testing.T) *judgetest.Env {
	t.Helper()
	env := judgetest.Start(t, simllm.Config{})
	s := costly(2.5)
	s.Arbitration.Threshold, s.Arbitration.BudgetUSD = 1, 3
	env.StartJudge(s)
	return env
}

// arbitrateAsync asks req in the background; the channel gets the
// decision (nil on an error, which fails the test).
func arbitrateAsync(t *testing.T, env *judgetest.Env, req *schemas.ArbitrationRequest) <-chan *schemas.ArbiterDecision {
	out := make(chan *schemas.ArbiterDecision, 1)
	go func() {
		d, err := env.Arbitrate(req)
		if err != nil {
			t.Error(err)
		}
		out <- d
	}()
	return out
}

// waitPending polls the approvals until n requests wait.
func waitPending(ctx context.Context, t *testing.T, env *judgetest.Env, n int) []schemas.BreakGlassApproval {
	t.Helper()
	for {
		pending, err := judge.Pending(ctx, env.JS, bus.DefaultNamespace)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) == n {
			return pending
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d requests pending, want %d", len(pending), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A request id is a step's: arbitrating the same step of another tenant
// or job is another request, answered on its own.
func TestArbitrationRequestIDs(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	ids := map[string]bool{}
	for _, req := range []*schemas.ArbitrationRequest{arbitration("j-a", 3), arbitration("j-b", 3), arbitration("j-a", 4)} {
		d, err := env.Arbitrate(req)
		if err != nil || d.Outcome != schemas.ArbiterDecided || d.JobID != req.JobID || d.Step != req.Step {
			t.Errorf("%s/%d: %+v, %v", req.JobID, req.Step, d, err)
			continue
		}
		ids[d.RequestID] = true
	}
	if len(ids) != 3 {
		t.Errorf("request ids %v: want one a step", ids)
	}
}

// TestArbitrationTenantWindow: the arbitrations of a tenant's jobs count
// against its break-glass window, with its break-glass calls: five jobs
// of one tenant, two steps each, get at most the window's calls to the
// panel, and the rest are refused (needs_human) before any model is
// called; a break-glass call is refused then too; deleting the window's
// counters gives nothing back (they are rebuilt from the audit, both
// kinds). Another tenant's window is its own.
func TestArbitrationTenantWindow(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	s.TenantInvocations = 3
	env.StartJudge(s)
	env.StartJudge(s)
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	var decided, refused int
	for job := range 5 {
		for step := range int64(2) {
			d, err := env.Arbitrate(arbitration(fmt.Sprintf("j-window-%d", job), step))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case d.Outcome == schemas.ArbiterDecided:
				decided++
			case strings.Contains(d.Reason, "tenant limit: 3 of 3 judge calls (break glass and arbitrations) already made in the tenant's last 24h0m0s"):
				refused++
				if d.CostUSD != 0 {
					t.Errorf("a refused arbitration cost %v", d.CostUSD)
				}
			default:
				t.Errorf("job %d step %d: %+v", job, step, d)
			}
		}
	}
	if decided != 3 || refused != 7 {
		t.Errorf("%d arbitrations decided, %d refused: want the window's 3 and 7", decided, refused)
	}
	calls := env.Sim.Stats().Requests
	if calls != 3*4 { // 3 panel members and the judge each
		t.Errorf("%d model calls, want %d", calls, 3*4)
	}
	if resp, err := env.Ask(judgetest.Request("bg-after", "s1", "a crash in the parser")); !errors.Is(err, judgeclient.ErrRefused) ||
		!strings.Contains(resp.Reason, "tenant limit: 3 of 3") {
		t.Errorf("break glass after the window's arbitrations: %v", err)
	}
	topo, err := topology.OpenJudge(ctx, env.JS, topology.JudgeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Sessions.Purge(ctx, bus.JudgeTenantKey("acme")); err != nil {
		t.Fatal(err)
	}
	if d, err := env.Arbitrate(arbitration("j-window-9", 1)); err != nil || !strings.Contains(d.Reason, "tenant limit: 3 of 3") {
		t.Errorf("after the window's counters were purged: %+v, %v", d, err)
	}
	if n := env.Sim.Stats().Requests; n != calls {
		t.Errorf("the models were called %d more times", n-calls)
	}
	other := arbitration("j-window-0", 0)
	other.Tenant = "beta"
	if d, err := env.Arbitrate(other); err != nil || d.Outcome != schemas.ArbiterDecided {
		t.Errorf("another tenant's arbitration: %+v, %v", d, err)
	}
}

// TestArbitrationJobBudget: an arbitration request carries what its job
// holds for it; the judge spends no more, and refuses a call whose
// estimate is over it before any model is called.
func TestArbitrationJobBudget(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	req := arbitration("j-budget", 1)
	req.BudgetUSD = 0.0001
	d, err := env.Arbitrate(req)
	if err != nil || d.Outcome != schemas.ArbiterNeedsHuman || !strings.Contains(d.Reason, "over the call's budget $0.00") ||
		!strings.Contains(d.Reason, "the job holds no more for it") {
		t.Fatalf("%+v, %v", d, err)
	}
	if n := env.Sim.Stats().Requests; n != 0 {
		t.Errorf("the model was called %d times", n)
	}
	req = arbitration("j-budget", 2)
	req.BudgetUSD = 0.5
	if d, err := env.Arbitrate(req); err != nil || d.Outcome != schemas.ArbiterDecided || d.CostUSD > 0.5 {
		t.Errorf("within the job's hold: %+v, %v", d, err)
	}
}
