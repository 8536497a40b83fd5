package coordinator

import (
	"strings"

	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/schemas"
)

// jobMetrics are one job's metric handles (nil when the coordinator has no
// Metrics: then every hook returns at once) and the waves of sample
// requests the open step published.
type jobMetrics struct {
	t         *metrics.CoordinatorTenant
	waveStep  int64
	waves     int
	strongerP *schemas.Pricing
}

// initMetrics takes the job's handles from the coordinator's metrics.
func (r *jobRun) initMetrics() {
	r.met.t = r.c.cfg.Metrics.Tenant(r.spec.Tenant)
	if r.met.t == nil {
		return
	}
	r.met.waveStep = -1
	r.met.strongerP = r.spec.Pricing
	if e := r.spec.Escalation; e != nil && e.StrongerPricing != nil {
		r.met.strongerP = e.StrongerPricing
	}
}

// noteSent counts a wave of sample requests published.
func (r *jobRun) noteSent(reqs []*schemas.SampleRequest) {
	mt := &r.met
	if mt.t == nil || len(reqs) == 0 {
		return
	}
	mt.t.SamplesRequested(len(reqs))
	if s := reqs[0].Step; s != mt.waveStep {
		mt.waveStep, mt.waves = s, 0
	}
	mt.waves++
}

// observe counts a journal entry about to be appended: its figures'
// change (votes, red flags, tokens and cost) and, for a decision or a
// climb of the ladder, the step's.
func (r *jobRun) observe(e *schemas.JournalEntry) {
	mt := &r.met
	if mt.t == nil {
		return
	}
	switch e.Type {
	case schemas.EntryDecision, schemas.EntryArbiter:
		rung := e.Rung
		if rung == "" {
			rung = schemas.RungOwnModel
		}
		samples := e.Counted
		for _, p := range e.Prior {
			samples += p.Counted
		}
		rounds := 0
		if mt.waveStep == e.Step {
			rounds = mt.waves
		}
		mt.waveStep, mt.waves = -1, 0
		mt.t.Decision(rung, rounds, samples, e.Lead, e.Type == schemas.EntryDecision)
	case schemas.EntryEscalation:
		mt.t.Escalation(e.Rung)
	}
	mt.t.Counted(e.Work.Votes, e.Work.RedFlags)
	if a := e.Arbiter; a != nil && e.Work.ArbiterCostUSD > 0 {
		model := a.JudgeModel
		if model == "" || strings.HasPrefix(model, "person:") {
			model = "judge"
		}
		mt.t.Cost(model, e.Work.ArbiterCostUSD)
	}
	r.flushTokens()
}

// flushTokens counts the tokens the machine tallied since the last flush,
// priced as the report prices them.
func (r *jobRun) flushTokens() {
	mt := &r.met
	if mt.t == nil || r.m == nil {
		return
	}
	r.m.tok.drain(func(model string, stronger bool, prompt, completion int64) {
		p := r.spec.Pricing
		if stronger {
			p = mt.strongerP
		}
		mt.t.Tokens(model, prompt, completion, p.Cost(prompt, completion))
	})
}

// tokenTally is the tokens of a job's answers by model and by whether the
// escalation's stronger model was asked, and what of them was counted in
// the metrics. Off (the zero value) it tallies nothing.
type tokenTally struct {
	on      bool
	byModel map[tokenKey]*tokenCount
}

type tokenKey struct {
	model    string
	stronger bool
}

type tokenCount struct{ prompt, completion, sentPrompt, sentCompletion int64 }

// add adds (or, negative, takes back) an answer's tokens.
func (t *tokenTally) add(model string, stronger bool, prompt, completion int64) {
	if !t.on {
		return
	}
	if model == "" {
		model = "unknown"
	}
	k := tokenKey{model, stronger}
	c := t.byModel[k]
	if c == nil {
		if t.byModel == nil {
			t.byModel = map[tokenKey]*tokenCount{}
		}
		c = &tokenCount{}
		t.byModel[k] = c
	}
	c.prompt += prompt
	c.completion += completion
}

// drain hands fn what grew since the last drain. A count that went down
// (tokens taken back) stays pending, set off against later ones: a
// counter never goes down.
func (t *tokenTally) drain(fn func(model string, stronger bool, prompt, completion int64)) {
	for k, c := range t.byModel {
		p, cc := max(c.prompt-c.sentPrompt, 0), max(c.completion-c.sentCompletion, 0)
		if p == 0 && cc == 0 {
			continue
		}
		c.sentPrompt += p
		c.sentCompletion += cc
		fn(k.model, k.stronger, p, cc)
	}
}
