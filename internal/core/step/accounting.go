package step

import (
	"github.com/makerfleet/makerfleet/schemas"
)

// accounts are a job's figures (schemas.Figures, the report's counts) and
// what of them the journal already holds: each entry carries the change
// since the last one, so a new owner adds them up to the same figures.
type accounts struct {
	schemas.Figures
	// journaled is what the entries (and the last checkpoint) add up to.
	journaled schemas.Figures
}

// Delta is what the next journal entry carries: what changed since the
// last one. A count that went down since (tokens of an answer taken back
// as a duplicate after they were journaled) stays pending, to be set off
// against later work: an entry never carries a negative figure.
func (a *accounts) Delta() schemas.Delta {
	d := a.Figures.Sub(a.journaled)
	a.journaled.Add(d)
	return schemas.Delta{Figures: d}
}

// reset makes f both the figures and what the journal holds (a
// checkpoint).
func (a *accounts) reset(f schemas.Figures) {
	a.Figures = f.Clone()
	a.journaled = f.Clone()
}

// addTokens adds (sign 1) or takes back (sign -1) an answer's tokens. The
// stronger model's share is priced apart.
func (m *Machine) addTokens(res *schemas.SampleResult, sign int64) {
	p, c := sign*int64(res.PromptTokens), sign*int64(res.CompletionTokens)
	// What a result says its provider cached is at most its prompt (as
	// bounded by its request: claims.go).
	cached := sign * int64(min(max(res.CachedPromptTokens, 0), res.PromptTokens))
	f := &m.Acct.Figures
	f.PromptTokens += p
	f.CompletionTokens += c
	f.CachedPromptTokens += cached
	stronger := m.strongerAt[[2]int64{res.Step, res.Epoch}]
	if stronger {
		f.StrongerPromptTokens += p
		f.StrongerCompletionTokens += c
	}
	nano := m.priceTokens(res, stronger, p, c, cached) // pricing.go
	m.Tokens.add(res.Model, stronger, p, c, nano)
}

// countLate accounts a result that came too late to count: its tokens and
// its kind of waste. An answer for an index a step decided lately already
// counted is not accounted again: a second delivery of one (handed back
// when Redis did not answer, and Redis had in fact recorded it), or the
// answer to a copy of its request (recall.go).
func (m *Machine) countLate(res schemas.SampleResult, tokensCounted bool) {
	if m.decided.counted(res.Step, res.Epoch, res.Index) &&
		(res.Outcome == schemas.OutcomeVote || res.Outcome == schemas.OutcomeRedFlag) {
		if tokensCounted { // not a model call of ours: take its tokens back out
			m.addTokens(&res, -1)
		}
		return
	}
	if !tokensCounted {
		m.addTokens(&res, 1)
	}
	f := &m.Acct.Figures
	switch res.Outcome {
	case schemas.OutcomeSkipped:
		f.SkippedSamples++
	case schemas.OutcomeCancelled:
		f.CancelledSamples++
	default:
		f.LateSamples++
	}
}

// countStep adds the samples a step counted to the figures: the deciding
// (or last) rung's and the rungs' below it. The step's total is its size
// for the hardest step.
func (m *Machine) countStep(step int64, counted, valid, redFlagged int, redFlags map[string]int, prior []schemas.RungTally) {
	f := &m.Acct.Figures
	total := counted
	add := func(counted, valid, redFlagged int, redFlags map[string]int) {
		f.Samples += int64(counted)
		f.Votes += int64(valid)
		f.RedFlagged += int64(redFlagged)
		for why, n := range redFlags {
			if f.RedFlags == nil {
				f.RedFlags = map[string]int64{}
			}
			f.RedFlags[why] += int64(n)
		}
	}
	add(counted, valid, redFlagged, redFlags)
	for _, p := range prior {
		add(p.Counted, p.Valid, p.RedFlagged, p.RedFlags)
		total += p.Counted
	}
	if total > f.MaxSamplesInStep {
		f.MaxSamplesInStep, f.MaxSamplesStep = total, step
	}
}

// redFlags counts the red flags among the open step's first counted
// samples by reason (nil for none).
func (m *Machine) redFlags(counted int) map[string]int {
	var out map[string]int
	for idx, why := range m.seen {
		if why != "" && idx < counted {
			if out == nil {
				out = map[string]int{}
			}
			out[why]++
		}
	}
	return out
}
