package judge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestAnswered(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	req := judgetest.Request("ok-1", "s1", "break glass: nil pointer panic in the voter after a reconnect")
	resp, err := env.Ask(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != schemas.BreakGlassAnswered || resp.ProblemType != schemas.ProblemCodeBug || resp.TypeSource != judge.SourceDetected {
		t.Fatalf("outcome %s type %s (%s): %s", resp.Outcome, resp.ProblemType, resp.TypeSource, resp.Reason)
	}
	if !strings.Contains(resp.Diagnosis, "nil pointer panic") || resp.Solution.Confidence != 0.9 || len(resp.Alternatives) == 0 || len(resp.Risks) == 0 {
		t.Errorf("answer %+v", resp)
	}
	if got := resp.PanelAnalysis.UniqueInsights; len(got) != 3 {
		t.Errorf("unique insights %v: want one per member", got)
	}
	c := resp.Cost
	if c.ActualUSD <= 0 || c.ActualUSD > c.EstimateUSD || c.EstimateUSD > c.BudgetUSD || c.BudgetUSD != 1 || c.PromptTokens == 0 {
		t.Errorf("cost %+v: want 0 < actual <= estimate <= budget 1", c)
	}
	if len(resp.Members) != 4 || resp.Members[3].Role != judge.RoleJudge || len(resp.FailedMembers) != 0 {
		t.Errorf("members %+v", resp.Members)
	}
	recs := env.Audit("s1")
	if got := judgetest.Outcomes(recs); !slices.Equal(got, []string{"ok-1:answered"}) {
		t.Fatalf("audit %v", got)
	}
	if r := recs[0]; r.EstimateUSD != c.EstimateUSD || r.ActualUSD != c.ActualUSD || r.ProblemType != schemas.ProblemCodeBug || len(r.Panel) != 3 || r.Requester != "test" {
		t.Errorf("audit record %+v", r)
	}

	// Asking again with the same id returns the stored answer; the panel
	// is not called again.
	before := env.Sim.Stats().Requests
	again, err := env.Ask(judgetest.Request("ok-1", "s1", "break glass: nil pointer panic in the voter after a reconnect"))
	if err != nil || again.AnsweredAt != resp.AnsweredAt {
		t.Errorf("second ask: %v, %v", again, err)
	}
	if after := env.Sim.Stats().Requests; after != before {
		t.Errorf("the panel was called again: %d requests, then %d", before, after)
	}

	// The second call of the session sees the first in its prompt.
	if _, err := env.Ask(judgetest.Request("ok-2", "s1", "break glass: the panic is back")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(env.Requests.String(), "EARLIER BREAK-GLASS CALLS IN THIS SESSION") {
		t.Error("the audit trail's earlier call is not in the second prompt")
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	noTrigger := judgetest.Request("r-trigger", "s-ref", "x")
	noTrigger.Problem = "please help: the parser is broken"
	noAttempts := judgetest.Request("r-attempts", "s-ref", "the parser is broken")
	noAttempts.PriorAttempts = noAttempts.PriorAttempts[:1]
	recursive := judgetest.Request("r-recursive", "s-ref", "the parser is broken")
	recursive.ParentRequestID = "ok-1"
	tests := []struct {
		req    *schemas.BreakGlassRequest
		reason string
	}{
		{noTrigger, `must start with "break glass:"`},
		{noAttempts, "not recorded: frontier_model, tools"},
		{recursive, "recursion guard"},
	}
	for _, tt := range tests {
		resp, err := env.Ask(tt.req)
		if !errors.Is(err, judgeclient.ErrRefused) || resp == nil || resp.Outcome != schemas.BreakGlassRefused || !strings.Contains(resp.Reason, tt.reason) {
			t.Errorf("%s: %v, %+v; want refused with %q", tt.req.RequestID, err, resp, tt.reason)
		}
	}
	if n := env.Sim.Stats().Requests; n != 0 {
		t.Errorf("refused requests reached the model %d times", n)
	}
	if got := judgetest.Outcomes(env.Audit("s-ref")); len(got) != 3 {
		t.Errorf("audit %v: every refusal is audited", got)
	}
}

func TestPanelFailures(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	s.MemberTimeout = 5 * time.Second // the slow member's deadline
	s.Panels[schemas.ProblemCodeBug] = []string{"m1", "m2@fail", "m3@slow"}
	s.Panels[schemas.ProblemInfraDebug] = []string{"m1@fail", "m2@fail"}
	env.StartJudge(s)

	resp, err := env.Ask(judgetest.Request("partial", "s-pf", "a crash in the parser"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != schemas.BreakGlassAnswered || !slices.Equal(resp.FailedMembers, []string{"m2@fail", "m3@slow"}) {
		t.Fatalf("outcome %s, failed %v", resp.Outcome, resp.FailedMembers)
	}
	if !strings.Contains(resp.Reason, "2 of 3 panel members failed") {
		t.Errorf("reason %q", resp.Reason)
	}
	if slow := resp.Members[2]; slow.OK || !strings.Contains(slow.Error, "deadline") {
		t.Errorf("slow member %+v", slow)
	}

	resp, err = env.Ask(judgetest.Request("total", "s-pf", "kubernetes dns fails"))
	if !errors.Is(err, judgeclient.ErrFailed) || resp.Outcome != schemas.BreakGlassFailed || !strings.Contains(resp.Reason, "every panel member failed") {
		t.Fatalf("total failure: %v, %+v", err, resp)
	}
	if got := judgetest.Outcomes(env.Audit("s-pf")); !slices.Equal(got, []string{"partial:answered", "total:failed"}) {
		t.Errorf("audit %v", got)
	}
}

func TestJudgeInvalidTwice(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	s.JudgeModel = "judge@badjson"
	env.StartJudge(s)
	resp, err := env.Ask(judgetest.Request("degraded", "s-bad", "a crash in the parser"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != schemas.BreakGlassDegraded || !strings.Contains(resp.Reason, "judge attempt 2") || resp.Solution.Confidence != 0 {
		t.Fatalf("outcome %s, reason %q", resp.Outcome, resp.Reason)
	}
	var judges, raw int
	for _, m := range resp.Members {
		if m.Role == judge.RoleJudge {
			judges++
		} else if strings.Contains(m.Response, "simulated diagnosis") {
			raw++
		}
	}
	if judges != 2 || raw != 3 {
		t.Errorf("%d judge calls (want 2: one retry), %d raw panel answers (want 3)", judges, raw)
	}
	// The retry told the judge what was wrong.
	if !strings.Contains(env.Requests.String(), "That answer was not valid") {
		t.Error("the retry does not carry the validation error")
	}
}

// costly returns settings where one call of the test panel is estimated at
// about usd: every token is priced so that the outputs' worst case alone
// is usd (prompts are free).
func costly(usd float64) judge.Settings {
	s := judgetest.TestSettings()
	outTokens := float64(3*s.MemberMaxTokens + s.JudgeMaxTokens)
	s.DefaultPrice = &judge.Price{OutputUSDPerMTok: usd / outTokens * 1e6}
	return s
}

func TestCostGate(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(costly(2.5))
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()

	// code_bug: $2.50 is over 3 × $0.30.
	resp, err := env.Ask(judgetest.Request("too-dear", "s-cost", "a crash in the parser"))
	if !errors.Is(err, judgeclient.ErrRefused) || !strings.Contains(resp.Reason, "escalate to a human") {
		t.Fatalf("refuse: %v %+v", err, resp)
	}
	// architecture: under 3 × $1.00 but over the default budget.
	req := judgetest.Request("over-budget", "s-cost", "redesign the module boundaries")
	if resp, err := env.Ask(req); !errors.Is(err, judgeclient.ErrRefused) || !strings.Contains(resp.Reason, "budget $1.00") {
		t.Fatalf("budget: %v %+v", err, resp)
	}

	// With a $3 budget it is held until a person approves.
	held := make(chan *schemas.BreakGlassResponse, 1)
	done := make(chan error, 1)
	var answer *schemas.BreakGlassResponse
	req = judgetest.Request("held-1", "s-cost", "redesign the module boundaries")
	req.BudgetUSD = 3
	go func() {
		r, err := env.Ask(req, judgeclient.OnHeld(func(r *schemas.BreakGlassResponse) { held <- r }))
		answer = r
		done <- err
	}()
	select {
	case h := <-held:
		if !strings.Contains(h.Reason, "maker judge approve held-1") {
			t.Errorf("held reason %q", h.Reason)
		}
	case err := <-done:
		t.Fatalf("answered without approval: %v", err)
	case <-ctx.Done():
		t.Fatal("never held")
	}
	if n := env.Sim.Stats().Requests; n != 0 {
		t.Fatalf("the model was called %d times before approval", n)
	}
	pending, err := judge.Pending(ctx, env.JS, bus.DefaultNamespace)
	if err != nil || len(pending) != 1 || pending[0].RequestID != "held-1" {
		t.Fatalf("pending %v, %v", pending, err)
	}
	// The requester's own identity may neither approve nor deny; the
	// approver may.
	for _, d := range []string{schemas.DecisionApprove, schemas.DecisionDeny} {
		if _, err := decide(ctx, env, "api", "held-1", d, "mallory"); !errors.Is(err, judgeclient.ErrOwnRequest) {
			t.Errorf("%s by the requester: %v, want ErrOwnRequest", d, err)
		}
	}
	if rec, err := decide(ctx, env, "approver", "held-1", schemas.DecisionApprove, "bob"); err != nil || rec.DecidedBy != "bob" || rec.DecidedAs != "approver" {
		t.Fatalf("approve: %+v, %v", rec, err)
	}
	if _, err := decide(ctx, env, "admin", "held-1", schemas.DecisionApprove, "eve"); !errors.Is(err, judgeclient.ErrNotPending) {
		t.Errorf("second approval: %v, want ErrNotPending", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if answer.Outcome != schemas.BreakGlassAnswered || answer.Approver != "bob" {
		t.Errorf("approved answer: %s by %q", answer.Outcome, answer.Approver)
	}

	// Denied: the asker gets ErrDenied with the reason.
	req = judgetest.Request("held-2", "s-cost", "redesign the module boundaries")
	req.BudgetUSD = 3
	go func() {
		_, err := env.Ask(req, judgeclient.OnHeld(func(r *schemas.BreakGlassResponse) { held <- r }))
		done <- err
	}()
	<-held
	if _, err := judgeclient.Decide(ctx, env.NC, bus.DefaultNamespace, "approver", &schemas.ApprovalDecision{
		RequestID: "held-2", Decision: schemas.DecisionDeny, By: "bob", Reason: "too expensive today"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, judgeclient.ErrDenied) || !strings.Contains(err.Error(), "too expensive today") {
		t.Errorf("denied: %v", err)
	}
	if _, err := decide(ctx, env, "approver", "nope", schemas.DecisionDeny, "bob"); !errors.Is(err, judgeclient.ErrNotPending) {
		t.Errorf("deny unknown: %v", err)
	}

	want := []string{"too-dear:refused", "over-budget:refused", "held-1:held", "held-1:approved", "held-1:answered", "held-2:held", "held-2:denied"}
	recs := env.Audit("s-cost")
	if got := judgetest.Outcomes(recs); !slices.Equal(got, want) {
		t.Errorf("audit %v, want %v", got, want)
	}
	for _, r := range recs {
		if (r.Outcome == schemas.BreakGlassAnswered || r.Outcome == schemas.BreakGlassApproved || r.Outcome == schemas.BreakGlassDenied) &&
			(r.Approver != "bob" || r.ApproverIdentity != "approver") {
			t.Errorf("%s: approver %q as %q", r.Outcome, r.Approver, r.ApproverIdentity)
		}
	}
}

// decide sends a decision on the held request id as identity as, by a
// person named by.
func decide(ctx context.Context, env *judgetest.Env, as, id, decision, by string) (*schemas.BreakGlassApproval, error) {
	return judgeclient.Decide(ctx, env.NC, bus.DefaultNamespace, as, &schemas.ApprovalDecision{RequestID: id, Decision: decision, By: by})
}

// The problem type a request declares cannot loosen the cost gate: a code
// bug estimated at $2.50 is refused as code_bug (over 3 × $0.30), and
// still refused when it claims to be architecture (whose 3 × $1.00 would
// let it through to a person's approval). A declared type that is
// stricter than the detected one applies.
func TestCostGateStricterType(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(costly(2.5))
	tests := []struct {
		id, problem, declared string
		want                  string
	}{
		{"as-detected", "a nil pointer panic crashes the parser", "", "the code_bug threshold $0.30"},
		{"as-architecture", "a nil pointer panic crashes the parser", schemas.ProblemArchitecture, "the code_bug threshold (the detected type; the request declared architecture"},
		{"stricter-declared", "redesign the module boundaries", schemas.ProblemCodeBug, "the code_bug threshold $0.30"},
	}
	for _, tt := range tests {
		req := judgetest.Request(tt.id, "s-type", tt.problem)
		req.ProblemType, req.BudgetUSD = tt.declared, 3
		resp, err := env.Ask(req)
		if !errors.Is(err, judgeclient.ErrRefused) || resp == nil || !strings.Contains(resp.Reason, "escalate to a human") || !strings.Contains(resp.Reason, tt.want) {
			t.Errorf("%s: %v, %+v; want refused at %q", tt.id, err, resp, tt.want)
			continue
		}
		if tt.declared != "" && (resp.ProblemType != tt.declared || resp.TypeSource != judge.SourceRequest) {
			t.Errorf("%s: type %s (%s): the declared type still picks the panel", tt.id, resp.ProblemType, resp.TypeSource)
		}
	}
	if n := env.Sim.Stats().Requests; n != 0 {
		t.Errorf("refused requests reached the model %d times", n)
	}
}

// askAll sends n requests of one session at once and returns their
// responses by outcome.
func askAll(t *testing.T, env *judgetest.Env, session string, n int) map[string][]*schemas.BreakGlassResponse {
	t.Helper()
	var mu sync.Mutex
	out := make(map[string][]*schemas.BreakGlassResponse)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := env.Ask(judgetest.Request(fmt.Sprintf("%s-%d", session, i), session, "a crash in the parser"))
			if resp == nil {
				t.Errorf("ask %d: %v", i, err)
				return
			}
			mu.Lock()
			out[resp.Outcome] = append(out[resp.Outcome], resp)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// Six calls at once in one session, over two judge replicas: exactly three
// run, the others are refused by the session limit.
func TestSessionLimitConcurrent(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	env.StartJudge(judgetest.TestSettings())
	got := askAll(t, env, "s-lim", 6)
	if len(got[schemas.BreakGlassAnswered]) != 3 || len(got[schemas.BreakGlassRefused]) != 3 {
		t.Fatalf("answered %d, refused %d; want 3 and 3", len(got[schemas.BreakGlassAnswered]), len(got[schemas.BreakGlassRefused]))
	}
	for _, r := range got[schemas.BreakGlassRefused] {
		if !strings.Contains(r.Reason, "session limit: 3 of 3") {
			t.Errorf("reason %q", r.Reason)
		}
	}
	// Another session is not affected.
	if _, err := env.Ask(judgetest.Request("other-1", "s-other", "a crash")); err != nil {
		t.Error(err)
	}
}

// Calls estimated at $1.80 each, priced by their prompts (a 24 KiB
// context file), so each settles at about 70% of its estimate: with room
// for ten calls but $5 a session, at most three fit however the six
// calls interleave over two replicas (a fourth would need 3 × ~$1.30
// settled plus $1.80 reserved), and never more than $5 is spent.
func TestSessionCapConcurrent(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	s.SessionInvocations = 10
	s.DefaultBudgetUSD = 2
	s.Thresholds = map[string]float64{schemas.ProblemCodeBug: 1}
	s.MemberMaxTokens, s.JudgeMaxTokens = 300, 600
	file := schemas.ContextFile{Path: "big.go", Content: strings.Repeat("// a line of context to price the prompt\n", 600)}
	request := func(id string) *schemas.BreakGlassRequest {
		r := judgetest.Request(id, "s-cap", "a crash in the parser")
		r.Files = []schemas.ContextFile{file}
		return r
	}
	// Price input tokens (only) so that one call is estimated at $1.80.
	filled, err := s.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	filled.DefaultPrice = &judge.Price{InputUSDPerMTok: 1}
	probe := request("probe")
	typ, _ := judge.Classify(probe)
	perDollar := filled.Estimate(judge.Assemble(probe, typ, nil, &filled), filled.Panel(typ), filled.JudgeModel)
	s.DefaultPrice = &judge.Price{InputUSDPerMTok: 1.8 / perDollar}
	env.StartJudge(s)
	env.StartJudge(s)

	var mu sync.Mutex
	var answered, refused []*schemas.BreakGlassResponse
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			resp, err := env.Ask(request(fmt.Sprintf("cap-%d", i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && resp.Outcome == schemas.BreakGlassAnswered:
				answered = append(answered, resp)
			case errors.Is(err, judgeclient.ErrRefused):
				refused = append(refused, resp)
			default:
				t.Errorf("ask %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if len(answered) < 2 || len(answered) > 3 || len(answered)+len(refused) != 6 {
		t.Fatalf("answered %d, refused %d; want 2 or 3 answered, the rest refused", len(answered), len(refused))
	}
	var spent float64
	for _, r := range answered {
		spent += r.Cost.ActualUSD
		if r.Cost.EstimateUSD < 1.75 || r.Cost.ActualUSD < 1.0 || r.Cost.ActualUSD > r.Cost.EstimateUSD {
			t.Errorf("cost %+v: want an estimate near $1.80 and an actual above $1", r.Cost)
		}
	}
	if spent > 5 {
		t.Errorf("the session spent $%.2f, over its $5 cap", spent)
	}
	for _, r := range refused {
		if !strings.Contains(r.Reason, "session cap") || !strings.Contains(r.Reason, "$5.00") {
			t.Errorf("reason %q", r.Reason)
		}
	}
}

// TestUnreadableRequestTerminated: a request that does not decode is
// terminated with the decoder's reason (not dead-lettered: the judge keeps
// no DLQ) and never delivered again, while the judge goes on answering.
func TestUnreadableRequestTerminated(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	ns := bus.DefaultNamespace
	terms := testkit.Terminations(t, env.NC, ns.JudgeStream(), bus.ConsumerJudges)
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	if _, err := env.JS.Publish(ctx, ns.JudgeSubject("acme"), []byte(`{"version":1,"kind":"break_glass_request","surprise":true}`)); err != nil {
		t.Fatal(err)
	}
	resp, err := judgeclient.Ask(ctx, env.JS, ns, judgetest.Request("r-after", "s-unreadable", "the build fails"))
	if err != nil || resp.Outcome != schemas.BreakGlassAnswered {
		t.Fatalf("a request after the unreadable one: %+v, %v", resp, err)
	}
	testkit.Eventually(t, judgetest.Timeout, func() bool { return len(terms()) > 0 }, "the unreadable request was not terminated")
	if got := terms(); len(got) != 1 || !strings.Contains(got[0].Reason, "surprise") || got[0].Deliveries != 1 {
		t.Errorf("terminations %+v: want the unreadable request terminated once, naming the unknown field", got)
	}
}
