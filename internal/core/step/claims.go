package step

import (
	"fmt"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Bounded claims. A result's token counts are its voter's word, and they
// are billed: each is bounded by what its request allows. Completion
// tokens by the request's max_output_tokens (the voter sends it to the
// model as max_tokens); prompt tokens by pricing.PromptTokensBound of the
// prompt the voter builds for the request: the task's prompt for the
// request's state, paraphrased as its prompt_variant asks (task.Paraphrase,
// as the voter does). Each prompt is built once per step, epoch and
// branch, and its bound worked out once per variant: the same bound the
// job's budget reserves for the request (budget.go). A result claiming
// more is counted as the red flag overclaim (its vote never counts),
// charged at the bound, counted (Figures.OverclaimedResults,
// maker_overclaimed_results_total) and logged; the step draws another
// sample in its place.

// promptKey names the requests that share a prompt: a step's (its branch
// when sampled ahead) under an epoch.
type promptKey struct{ step, epoch, branch int64 }

// stepPrompt is the prompt of a promptKey and the bounds of the requests
// published with it.
type stepPrompt struct {
	msgs []task.Message
	err  error // the task could not build it: no voter can either
	// bounds holds each variant's prompt-token bound (0: not worked out).
	bounds [schemas.MaxPromptVariant + 1]int64
	// variants holds the prompt variant of each request published with a
	// paraphrase, by index and attempt (the others ask the task's own).
	variants map[[2]int]int
	// maxOut is the largest max_output_tokens published.
	maxOut int64
}

// claims are the prompts of the steps whose answers may still come, and
// the largest bounds of any request the run published (for an answer of
// a step forgotten since).
type claims struct {
	prompts           map[promptKey]*stepPrompt
	TopPrompt, topOut int64
	log               logGate // of overclaims
}

// keepPromptSteps is how many steps before the open one keep their
// prompts, for late answers to be bounded exactly.
const keepPromptSteps = 2

// prompt returns the prompt entry of key, building the prompt of state
// the first time.
func (m *Machine) prompt(key promptKey, state task.State) *stepPrompt {
	c := &m.Claims
	if p, ok := c.prompts[key]; ok {
		return p
	}
	if c.prompts == nil {
		c.prompts = map[promptKey]*stepPrompt{}
	}
	p := &stepPrompt{}
	p.msgs, p.err = m.Inst.Prompt(state)
	c.prompts[key] = p
	return p
}

// PromptBound is the bound of the prompt tokens of req: of the prompt the
// voter builds for it. An error is the task's, building the prompt.
func (m *Machine) PromptBound(req *schemas.SampleRequest) (int64, error) {
	p := m.prompt(promptKey{req.Step, req.Epoch, req.Branch}, task.State(req.State))
	return p.bound(req.PromptVariant)
}

// bound is the prompt-token bound of variant v of p's prompt.
func (p *stepPrompt) bound(v int) (int64, error) {
	if p.err != nil {
		return 0, p.err
	}
	if v < 0 || v > schemas.MaxPromptVariant {
		return 0, fmt.Errorf("coordinator: prompt variant %d out of range", v)
	}
	if p.bounds[v] == 0 {
		msgs, err := task.Paraphrase(p.msgs, v)
		if err != nil {
			return 0, err
		}
		p.bounds[v] = pricing.PromptTokensBound(msgs)
	}
	return p.bounds[v], nil
}

// noteSent notes req, about to be published: its answer may claim up to
// its bounds. A prompt the task cannot build bounds its answers' prompt
// tokens at 0: no voter can send it to a model either.
func (m *Machine) noteSent(req *schemas.SampleRequest) {
	c := &m.Claims
	p := m.prompt(promptKey{req.Step, req.Epoch, req.Branch}, task.State(req.State))
	b, _ := p.bound(req.PromptVariant)
	if v := req.PromptVariant; v != 0 {
		if p.variants == nil {
			p.variants = map[[2]int]int{}
		}
		p.variants[[2]int{req.Index, req.Attempt}] = v
	}
	out := int64(req.MaxOutputTokens)
	p.maxOut = max(p.maxOut, out)
	c.TopPrompt, c.topOut = max(c.TopPrompt, b), max(c.topOut, out)
}

// claimLimit is the most tokens a result may claim.
type claimLimit struct{ prompt, completion int64 }

// limit is what the request res answers allows: its prompt's bound and
// its max_output_tokens, or, for a step whose prompts are forgotten, the
// largest of any request the run published.
func (m *Machine) limit(res *schemas.SampleResult) claimLimit {
	c := &m.Claims
	p, ok := c.prompts[promptKey{res.Step, res.Epoch, res.Branch}]
	if !ok || p.maxOut == 0 {
		return claimLimit{c.TopPrompt, c.topOut}
	}
	b, _ := p.bound(p.variants[[2]int{res.Index, res.Attempt}]) // worked out when it was sent
	return claimLimit{b, p.maxOut}
}

// boundClaim brings res's token counts within lim (negative ones to 0)
// and reports whether they were outside it. An answer outside it becomes
// the red flag overclaim: the vote of a voter that lies about its usage
// is not counted. A skip or a cancel keeps its outcome (neither counts).
func boundClaim(res *schemas.SampleResult, lim claimLimit) bool {
	p, c := max(int64(res.PromptTokens), 0), max(int64(res.CompletionTokens), 0)
	over := p > lim.prompt || c > lim.completion
	res.PromptTokens, res.CompletionTokens = int(min(p, lim.prompt)), int(min(c, lim.completion))
	if !over {
		return false
	}
	if res.Outcome == schemas.OutcomeVote || res.Outcome == schemas.OutcomeRedFlag {
		res.Detail = fmt.Sprintf("claimed %d prompt and %d completion tokens (%s); the request allows %d and %d",
			p, c, overclaimWas(res), lim.prompt, lim.completion)
		res.Outcome, res.VoteKey, res.RedFlag = schemas.OutcomeRedFlag, "", schemas.RedFlagOverclaim
	}
	return true
}

// overclaimWas says what the result was before it became an overclaim.
func overclaimWas(res *schemas.SampleResult) string {
	if res.Outcome == schemas.OutcomeVote {
		return "a vote"
	}
	return "red flag " + res.RedFlag
}

// bounded brings res's claims within what its request allows; one outside
// is counted and logged (at most once a second).
func (m *Machine) bounded(now time.Time, res *schemas.SampleResult) {
	claimed := [2]int{res.PromptTokens, res.CompletionTokens}
	lim := m.limit(res)
	if !boundClaim(res, lim) {
		return
	}
	m.Acct.OverclaimedResults++
	if m.Claims.log.open(now) {
		m.log.Warn("a result claims more tokens than its request allows: counted as the red flag overclaim, charged at the bound",
			"voter", truncate(res.VoterID, 64), "sample", res.SampleID, "prompt_tokens", claimed[0], "completion_tokens", claimed[1],
			"prompt_bound", lim.prompt, "completion_bound", lim.completion, "overclaimed_so_far", m.Acct.OverclaimedResults)
	}
}

// forgetPrompts forgets the prompts of steps more than keepPromptSteps
// before the open one: their late answers are bounded by the largest
// request of the run.
func (m *Machine) forgetPrompts() {
	for k := range m.Claims.prompts {
		if k.step+keepPromptSteps < m.Step {
			delete(m.Claims.prompts, k)
		}
	}
}
