package coordinator

import (
	"strings"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/schemas"
)

// jobMetrics are one job's metric handles (nil when the coordinator has no
// Metrics: then every hook returns at once) and the waves of sample
// requests the open step published.
type jobMetrics struct {
	t        *metrics.CoordinatorTenant
	waveStep int64
	waves    int
	pending  func() // counts the entry in flight (journal Start), once stored
}

// initMetrics takes the job's handles from the coordinator's metrics.
func (r *jobRun) initMetrics() {
	r.met.t = r.c.cfg.Metrics.Tenant(r.spec.Tenant)
	if r.met.t == nil {
		return
	}
	r.met.waveStep = -1
}

// noteSent counts a wave of sample requests published.
func (r *jobRun) noteSent(reqs []*schemas.SampleRequest) {
	mt := &r.met
	if mt.t == nil || len(reqs) == 0 {
		return
	}
	mt.t.SamplesRequested(len(reqs))
	// A wave is the open step's; samples drawn ahead (speculation) are
	// the first wave of their step, counted when it is adopted.
	for _, req := range reqs {
		if req.Branch != 0 {
			continue
		}
		if req.Step != mt.waveStep {
			mt.waveStep, mt.waves = req.Step, 0
		}
		mt.waves++
		return
	}
}

// countUntrusted notes the forged and overclaiming results counted so
// far; the function it returns counts those found since in the metrics
// (at once, not with the next journal entry: a flood shows while it
// lasts).
func (r *jobRun) countUntrusted() func() {
	f := &r.m.Acct.Figures
	forged, over := f.ForgedResults, f.OverclaimedResults
	return func() { r.met.t.Untrusted(f.ForgedResults-forged, f.OverclaimedResults-over) }
}

// observe takes the figures of a journal entry about to be appended: its
// figures' change (votes, red flags, tokens and cost) and, for a decision
// or a climb of the ladder, the step's. They are counted by the function
// it returns, to be called once the entry is stored (a failed append, the
// lease lost say, counts nothing: the next owner decides the step again
// and counts it then). Taken now, so the step's waves and the tokens
// tallied so far are the entry's.
func (r *jobRun) observe(e *schemas.JournalEntry) func() {
	mt := &r.met
	if mt.t == nil {
		return func() {}
	}
	t := mt.t
	var count []func()
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
		if r.m != nil && r.m.Ahead.WasAdopted(e.Step) {
			rounds++ // its first wave went out ahead of it
		}
		mt.waveStep, mt.waves = -1, 0
		lead, byVotes := e.Lead, e.Type == schemas.EntryDecision
		count = append(count, func() { t.Decision(rung, rounds, samples, lead, byVotes) })
	case schemas.EntryEscalation:
		rung := e.Rung
		count = append(count, func() { t.Escalation(rung) })
	}
	votes, redFlags := e.Work.Votes, e.Work.RedFlags
	count = append(count, func() { t.Counted(votes, redFlags) })
	if a := e.Arbiter; a != nil && e.Work.ArbiterCostUSD > 0 {
		model := a.JudgeModel
		if model == "" || strings.HasPrefix(model, "person:") {
			model = "judge"
		}
		usd := e.Work.ArbiterCostUSD
		count = append(count, func() { t.Cost(model, usd) })
	}
	count = append(count, r.takeTokens())
	return func() {
		for _, f := range count {
			f()
		}
	}
}

// countStored counts the entry the journal had in flight (Start), once a
// flush has stored it.
func (r *jobRun) countStored() {
	if f := r.met.pending; f != nil {
		r.met.pending = nil
		f()
	}
}

// flushTokens counts the tokens the machine tallied since the last flush
// at once (the run's end).
func (r *jobRun) flushTokens() { r.takeTokens()() }

// takeTokens takes the tokens the machine tallied since the last take,
// at the fleet's prices as the report counts them; the function returned
// counts them.
func (r *jobRun) takeTokens() func() {
	mt := &r.met
	if mt.t == nil || r.m == nil {
		return func() {}
	}
	type taken struct {
		model              string
		prompt, completion int64
		usd                float64
	}
	var all []taken
	r.m.Tokens.Drain(func(model string, prompt, completion int64, cost pricing.Nano) {
		all = append(all, taken{model, prompt, completion, cost.USD()})
	})
	t := mt.t
	return func() {
		for _, k := range all {
			t.Tokens(k.model, k.prompt, k.completion, k.usd)
		}
	}
}
