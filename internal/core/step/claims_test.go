package step

import (
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// TestBoundClaim: token counts at the bounds pass as they are; one token
// above either bound, or far above, makes an answer the red flag
// overclaim, charged at the bound; negative counts become 0; a skip or a
// cancel keeps its outcome, its counts bounded all the same.
func TestBoundClaim(t *testing.T) {
	lim := claimLimit{prompt: 900, completion: 750}
	vote := schemas.SampleResult{Outcome: schemas.OutcomeVote, VoteKey: "A@1"}
	for _, tc := range []struct {
		name               string
		res                schemas.SampleResult
		prompt, completion int
		over               bool
		outcome, redFlag   string
		wantP, wantC       int
	}{
		{"within", vote, 400, 60, false, schemas.OutcomeVote, "", 400, 60},
		{"at the bounds", vote, 900, 750, false, schemas.OutcomeVote, "", 900, 750},
		{"none", vote, 0, 0, false, schemas.OutcomeVote, "", 0, 0},
		{"one prompt token above", vote, 901, 60, true, schemas.OutcomeRedFlag, schemas.RedFlagOverclaim, 900, 60},
		{"one completion token above", vote, 400, 751, true, schemas.OutcomeRedFlag, schemas.RedFlagOverclaim, 400, 750},
		{"far above (5e10 each)", vote, 50_000_000_000, 50_000_000_000, true, schemas.OutcomeRedFlag, schemas.RedFlagOverclaim, 900, 750},
		{"negative", vote, -5, -1, false, schemas.OutcomeVote, "", 0, 0},
		{"a red flag above", schemas.SampleResult{Outcome: schemas.OutcomeRedFlag, RedFlag: schemas.RedFlagTooLong}, 400, 5000, true,
			schemas.OutcomeRedFlag, schemas.RedFlagOverclaim, 400, 750},
		{"a skip above", schemas.SampleResult{Outcome: schemas.OutcomeSkipped}, 1e9, 1e9, true, schemas.OutcomeSkipped, "", 900, 750},
		{"a cancel within", schemas.SampleResult{Outcome: schemas.OutcomeCancelled}, 3, 0, false, schemas.OutcomeCancelled, "", 3, 0},
	} {
		res := tc.res
		res.PromptTokens, res.CompletionTokens = tc.prompt, tc.completion
		over := boundClaim(&res, lim)
		if over != tc.over || res.Outcome != tc.outcome || res.RedFlag != tc.redFlag || res.PromptTokens != tc.wantP || res.CompletionTokens != tc.wantC {
			t.Errorf("%s: over %v, %s %q, tokens %d/%d; want %v, %s %q, %d/%d",
				tc.name, over, res.Outcome, res.RedFlag, res.PromptTokens, res.CompletionTokens, tc.over, tc.outcome, tc.redFlag, tc.wantP, tc.wantC)
		}
		if res.RedFlag == schemas.RedFlagOverclaim && (res.VoteKey != "" || !strings.Contains(res.Detail, "the request allows 900 and 750")) {
			t.Errorf("%s: vote key %q, detail %q", tc.name, res.VoteKey, res.Detail)
		}
	}
}

// TestClaimLimits: a result's limit is the bound of the prompt the voter
// built for its own request: the task's prompt for its state, paraphrased
// for a decorrelated sample (and for that index and attempt only), its
// step's state for a step sampled ahead; a step whose prompts are
// forgotten is held to the largest request of the run. The budget
// reserves the same bound.
func TestClaimLimits(t *testing.T) {
	h := newHarness(t, spec(2, 100), 10, byIndex(rightAns))
	m := h.m
	now := time.Unix(1_700_000_000, 0)
	plain := m.request(now, 0, task.State("0"), 0, 0, 0)
	para := m.request(now, 0, task.State("0"), 5, 1, 0)
	para.PromptVariant = 3
	ahead := m.request(now, 1, task.State("1234567"), 0, 0, 7)
	for _, req := range []*schemas.SampleRequest{plain, para, ahead} {
		m.noteSent(req)
	}
	paraphrased, err := task.Paraphrase(walkPrompt(0), 3)
	if err != nil {
		t.Fatal(err)
	}
	longState, _ := walk{}.Prompt(task.State("1234567"))
	out := int64(m.spec.MaxOutputTokens)
	base, para3, long := pricing.PromptTokensBound(walkPrompt(0)), pricing.PromptTokensBound(paraphrased), pricing.PromptTokensBound(longState)
	if !(para3 > base && long > base) {
		t.Fatalf("bounds %d, %d, %d: the paraphrase and the longer state should make longer prompts", base, para3, long)
	}
	top := max(base, para3, long) // the largest request of the run
	result := func(req *schemas.SampleRequest, attempt int) *schemas.SampleResult {
		return &schemas.SampleResult{Step: req.Step, Epoch: req.Epoch, Index: req.Index, Attempt: attempt, Branch: req.Branch}
	}
	for _, tc := range []struct {
		name string
		res  *schemas.SampleResult
		want claimLimit
	}{
		{"the task's prompt", result(plain, 0), claimLimit{base, out}},
		{"a paraphrase", result(para, 1), claimLimit{para3, out}},
		{"another attempt of the paraphrased index", result(para, 0), claimLimit{base, out}},
		{"a step ahead", result(ahead, 0), claimLimit{long, out}},
		{"a step forgotten", &schemas.SampleResult{Step: 0, Epoch: m.Epoch - 1}, claimLimit{top, out}},
	} {
		if got := m.limit(tc.res); got != tc.want {
			t.Errorf("%s: limit %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, req := range []*schemas.SampleRequest{plain, para, ahead} {
		got, err := m.PromptBound(req)
		if want := m.limit(result(req, req.Attempt)).prompt; err != nil || got != want {
			t.Errorf("the budget's bound of %s: %d, %v; want the claims' %d", req.SampleID, got, err, want)
		}
	}
	m.Step = 4
	m.forgetPrompts()
	if got := m.limit(result(plain, 0)); got != (claimLimit{top, out}) {
		t.Errorf("a step forgotten: limit %+v, want the run's largest %d/%d", got, top, out)
	}
}

// TestUntrustedAhead: a step sampled ahead is screened like the open one,
// before its answers are held: a forged answer (another sample's token)
// is dropped, never held, and the honest one is held in its place; an
// answer that overclaims is held as the red flag overclaim, charged at
// its own step's bound. Adopted, the step counts the honest answer and
// the overclaim, as a job without speculation would.
func TestUntrustedAhead(t *testing.T) {
	sp := spec(2, 100)
	sp.SpeculationDepth = 1
	h := harnessFor(t, sp, refWalk{walk{10}}, byIndex(rightAns))
	h.start()
	var ahead []*schemas.SampleRequest
	for _, req := range h.queue {
		if req.Branch != 0 {
			ahead = append(ahead, req)
		}
	}
	if len(ahead) != 2 {
		t.Fatalf("%d requests ahead, want step 1's first wave of 2", len(ahead))
	}
	forged := *ahead[0]
	forged.Token = ahead[1].Token
	over := h.resultWith(ahead[1], right(1), func(r *schemas.SampleResult) { r.PromptTokens = 1 << 40 })
	n := len(h.acts)
	h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.result(&forged, wrongAns(1))}, {Data: h.result(ahead[0], right(1))}, {Data: over}}))
	if got := strings.Join(h.acts[n:], ", "); got != "term #0, ack #1, ack #2" {
		t.Fatalf("actions %q, want the forgery terminated, the others held", got)
	}
	s := h.m.Ahead.slots[0]
	if s.got[0].VoteKey != right(1) || s.got[1].RedFlag != schemas.RedFlagOverclaim {
		t.Errorf("held %+v: want index 0's honest vote and index 1 as the red flag overclaim", s.got)
	}
	f := h.m.Acct.Figures
	wantPrompt := 100 + pricing.PromptTokensBound(walkPrompt(1))
	if f.ForgedResults != 1 || f.OverclaimedResults != 1 || f.PromptTokens != wantPrompt {
		t.Errorf("forged %d, overclaimed %d, prompt tokens %d; want 1, 1 and %d", f.ForgedResults, f.OverclaimedResults, f.PromptTokens, wantPrompt)
	}
	h.deliver(-1)
	h.run()
	if e := h.m.End; e == nil || e.State != schemas.StateSolved || h.m.Acct.RedFlags[schemas.RedFlagOverclaim] != 1 {
		t.Errorf("end %+v, red flags %v: want solved, the overclaim counted once", e, h.m.Acct.RedFlags)
	}
}
