package schemas

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
)

// MaxListedSteps bounds the step lists a job's figures keep (ErrorSteps,
// ArbiterSteps).
const MaxListedSteps = 100

// Figures are a job's running counts, typed once: the report shows them
// (embedded in JobReport), a checkpoint keeps them (Progress), and each
// journal entry carries what changed since the entry before (Delta), so a
// new owner rebuilds them exactly. A new counter is a field here and in Add
// and Sub, nowhere else.
type Figures struct {
	// Steps decided so far, out of the report's TotalSteps at most.
	Steps int64 `json:"steps"`
	// Errors counts decided steps the verifier found wrong; ErrorSteps
	// lists the first ones (at most 100).
	Errors     int64   `json:"errors"`
	ErrorSteps []int64 `json:"error_steps,omitempty"`
	// Samples counts samples that took part in a step: Votes (valid votes)
	// plus RedFlagged (red-flagged samples).
	Samples    int64 `json:"samples"`
	Votes      int64 `json:"votes"`
	RedFlagged int64 `json:"red_flagged"`
	// RedFlags breaks RedFlagged down by reason.
	RedFlags map[string]int64 `json:"red_flags"`
	// SkippedSamples (model not called), CancelledSamples, LateSamples
	// (answered after the decision) and DuplicateResults (answers to an
	// index already answered) are published samples that took no part in a
	// step; the report's WastedSamples is their sum.
	SkippedSamples   int64 `json:"skipped_samples"`
	CancelledSamples int64 `json:"cancelled_samples"`
	LateSamples      int64 `json:"late_samples"`
	DuplicateResults int64 `json:"duplicate_results"`
	// Resampled counts re-publishes after a sample timed out.
	Resampled int64 `json:"resampled"`
	// MalformedMessages counts result messages dropped as unreadable.
	MalformedMessages int64 `json:"malformed_messages"`
	// ForgedResults counts result messages dropped because their token is
	// not the one the coordinator issued for their sample id
	// (SampleRequest.Token): answers for samples their sender was never
	// handed. Their tokens are not counted and their sample is answered by
	// someone else.
	ForgedResults int64 `json:"forged_results,omitempty"`
	// OverclaimedResults counts results that claimed more tokens than
	// their request allows (the prompt's bound, max_output_tokens): each
	// was counted as the red flag overclaim, not as a vote, and charged at
	// the bound, not as claimed.
	OverclaimedResults int64 `json:"overclaimed_results,omitempty"`
	// MaxSamplesInStep is the most samples any step needed (every rung of
	// an escalated step), MaxSamplesStep that step: a heavy tail signals
	// correlated errors.
	MaxSamplesInStep int   `json:"max_samples_in_step"`
	MaxSamplesStep   int64 `json:"max_samples_step"`
	// Token usage, PromptTokens and CompletionTokens, every model's;
	// StrongerPromptTokens and StrongerCompletionTokens the part the
	// escalation's stronger model used.
	PromptTokens             int64 `json:"prompt_tokens"`
	CompletionTokens         int64 `json:"completion_tokens"`
	StrongerPromptTokens     int64 `json:"stronger_prompt_tokens,omitempty"`
	StrongerCompletionTokens int64 `json:"stronger_completion_tokens,omitempty"`
	// CachedPromptTokens is the part of PromptTokens the providers served
	// from their prompt caches, priced at the cached price.
	CachedPromptTokens int64 `json:"cached_prompt_tokens,omitempty"`
	// ArbiterCostUSD is what the judge's panel calls on the job's steps
	// cost, as the judge reported it: those that decided a step and those
	// that left it to a person.
	ArbiterCostUSD float64 `json:"arbiter_cost_usd,omitempty"`
	// SampleCostNanoUSD is what the answers counted cost at the fleet's
	// prices (its price table, by the model each request named), in
	// nano-dollars (10⁻⁹ USD): each answer priced as it is counted,
	// rounded up to a whole nano-dollar. Budgets and the tenant's spend
	// for the day count it.
	SampleCostNanoUSD int64 `json:"sample_cost_nanousd,omitempty"`
	// UnverifiedCostNanoUSD is what answers the fleet did not price cost
	// at the job's own pricing (JobSpec.Pricing, the escalation's
	// stronger_pricing), in nano-dollars: only on a fleet without a price
	// table, for a job under no budget or spend limit. A claim, counted
	// against nothing.
	UnverifiedCostNanoUSD int64 `json:"unverified_cost_nanousd,omitempty"`
	// Escalations counts steps the job's stronger model decided after its
	// own model reached no consensus; ArbiterDecisions those the judge's
	// panel or a person settled (a choice, not votes), ArbiterSteps the
	// first of them.
	Escalations      int64   `json:"escalations"`
	ArbiterDecisions int64   `json:"arbiter_decisions"`
	ArbiterSteps     []int64 `json:"arbiter_steps,omitempty"`
	// SpeculativeSamples counts samples drawn for a step before the step
	// before it was decided (JobSpec.SpeculationDepth); SpeculativeWasted
	// those of them drawn from a guess that lost, thrown away uncounted
	// (part of the report's WastedSamples).
	SpeculativeSamples int64 `json:"speculative_samples"`
	SpeculativeWasted  int64 `json:"speculative_wasted"`
	// CorrelatedSteps counts decided steps whose samples ran past what the
	// job's estimate of p makes likely (a false alarm at most once in
	// Receipt.FalseAlarmRate steps); DecorrelatedSamples the samples of
	// theirs drawn decorrelated (JobSpec.Decorrelate).
	CorrelatedSteps     int64 `json:"correlated_steps,omitempty"`
	DecorrelatedSamples int64 `json:"decorrelated_samples,omitempty"`
}

// Add adds d (a Delta's figures) to f: counts add up, step lists are
// appended (up to MaxListedSteps), and the hardest step is d's when d's
// is harder.
func (f *Figures) Add(d Figures) {
	f.Steps += d.Steps
	f.Errors += d.Errors
	f.ErrorSteps = appendSteps(f.ErrorSteps, d.ErrorSteps)
	f.Samples += d.Samples
	f.Votes += d.Votes
	f.RedFlagged += d.RedFlagged
	for why, n := range d.RedFlags {
		if f.RedFlags == nil {
			f.RedFlags = map[string]int64{}
		}
		f.RedFlags[why] += n
	}
	f.SkippedSamples += d.SkippedSamples
	f.CancelledSamples += d.CancelledSamples
	f.LateSamples += d.LateSamples
	f.DuplicateResults += d.DuplicateResults
	f.Resampled += d.Resampled
	f.MalformedMessages += d.MalformedMessages
	f.ForgedResults += d.ForgedResults
	f.OverclaimedResults += d.OverclaimedResults
	if d.MaxSamplesInStep > f.MaxSamplesInStep {
		f.MaxSamplesInStep, f.MaxSamplesStep = d.MaxSamplesInStep, d.MaxSamplesStep
	}
	f.PromptTokens += d.PromptTokens
	f.CompletionTokens += d.CompletionTokens
	f.StrongerPromptTokens += d.StrongerPromptTokens
	f.StrongerCompletionTokens += d.StrongerCompletionTokens
	f.CachedPromptTokens += d.CachedPromptTokens
	f.ArbiterCostUSD += d.ArbiterCostUSD
	f.SampleCostNanoUSD += d.SampleCostNanoUSD
	f.UnverifiedCostNanoUSD += d.UnverifiedCostNanoUSD
	f.Escalations += d.Escalations
	f.ArbiterDecisions += d.ArbiterDecisions
	f.ArbiterSteps = appendSteps(f.ArbiterSteps, d.ArbiterSteps)
	f.SpeculativeSamples += d.SpeculativeSamples
	f.SpeculativeWasted += d.SpeculativeWasted
	f.CorrelatedSteps += d.CorrelatedSteps
	f.DecorrelatedSamples += d.DecorrelatedSamples
}

// Sub returns what f holds beyond base (an earlier value of the same
// figures): the change a journal entry carries. A count that went down
// since base (tokens of an answer taken back as a duplicate after they were
// journaled) gives 0, never a negative change: base.Add(f.Sub(base)) then
// stays at or below f, and the difference is carried by a later change.
func (f Figures) Sub(base Figures) Figures {
	d := Figures{
		Steps: pos(f.Steps - base.Steps), Errors: pos(f.Errors - base.Errors),
		ErrorSteps: tail(f.ErrorSteps, base.ErrorSteps),
		Samples:    pos(f.Samples - base.Samples), Votes: pos(f.Votes - base.Votes), RedFlagged: pos(f.RedFlagged - base.RedFlagged),
		SkippedSamples: pos(f.SkippedSamples - base.SkippedSamples), CancelledSamples: pos(f.CancelledSamples - base.CancelledSamples),
		LateSamples: pos(f.LateSamples - base.LateSamples), DuplicateResults: pos(f.DuplicateResults - base.DuplicateResults),
		Resampled: pos(f.Resampled - base.Resampled), MalformedMessages: pos(f.MalformedMessages - base.MalformedMessages),
		ForgedResults: pos(f.ForgedResults - base.ForgedResults), OverclaimedResults: pos(f.OverclaimedResults - base.OverclaimedResults),
		PromptTokens: pos(f.PromptTokens - base.PromptTokens), CompletionTokens: pos(f.CompletionTokens - base.CompletionTokens),
		StrongerPromptTokens:     pos(f.StrongerPromptTokens - base.StrongerPromptTokens),
		StrongerCompletionTokens: pos(f.StrongerCompletionTokens - base.StrongerCompletionTokens),
		CachedPromptTokens:       pos(f.CachedPromptTokens - base.CachedPromptTokens),
		ArbiterCostUSD:           max(f.ArbiterCostUSD-base.ArbiterCostUSD, 0),
		SampleCostNanoUSD:        pos(f.SampleCostNanoUSD - base.SampleCostNanoUSD),
		UnverifiedCostNanoUSD:    pos(f.UnverifiedCostNanoUSD - base.UnverifiedCostNanoUSD),
		Escalations:              pos(f.Escalations - base.Escalations), ArbiterDecisions: pos(f.ArbiterDecisions - base.ArbiterDecisions),
		ArbiterSteps:        tail(f.ArbiterSteps, base.ArbiterSteps),
		SpeculativeSamples:  pos(f.SpeculativeSamples - base.SpeculativeSamples),
		SpeculativeWasted:   pos(f.SpeculativeWasted - base.SpeculativeWasted),
		CorrelatedSteps:     pos(f.CorrelatedSteps - base.CorrelatedSteps),
		DecorrelatedSamples: pos(f.DecorrelatedSamples - base.DecorrelatedSamples),
	}
	for why, n := range f.RedFlags {
		if n > base.RedFlags[why] {
			if d.RedFlags == nil {
				d.RedFlags = map[string]int64{}
			}
			d.RedFlags[why] = n - base.RedFlags[why]
		}
	}
	if f.MaxSamplesInStep > base.MaxSamplesInStep {
		d.MaxSamplesInStep, d.MaxSamplesStep = f.MaxSamplesInStep, f.MaxSamplesStep
	}
	return d
}

// Clone returns a copy of f that shares no map or slice with it.
func (f Figures) Clone() Figures {
	f.RedFlags = maps.Clone(f.RedFlags)
	f.ErrorSteps = append([]int64(nil), f.ErrorSteps...)
	f.ArbiterSteps = append([]int64(nil), f.ArbiterSteps...)
	if len(f.ErrorSteps) == 0 {
		f.ErrorSteps = nil
	}
	if len(f.ArbiterSteps) == 0 {
		f.ArbiterSteps = nil
	}
	return f
}

// check validates the figures of a message of kind k, field names under
// prefix ("progress." in a checkpoint, "work." in a journal entry), named
// only on an error: a journal entry a step is checked on the hot path.
func (f *Figures) check(k, prefix string) error {
	if err := nonNegativeIn(k, prefix,
		count{"steps", f.Steps}, count{"errors", f.Errors},
		count{"samples", f.Samples}, count{"votes", f.Votes}, count{"red_flagged", f.RedFlagged},
		count{"skipped_samples", f.SkippedSamples}, count{"cancelled_samples", f.CancelledSamples},
		count{"late_samples", f.LateSamples}, count{"duplicate_results", f.DuplicateResults},
		count{"resampled", f.Resampled}, count{"malformed_messages", f.MalformedMessages},
		count{"forged_results", f.ForgedResults}, count{"overclaimed_results", f.OverclaimedResults},
		count{"max_samples_in_step", int64(f.MaxSamplesInStep)}, count{"max_samples_step", f.MaxSamplesStep},
		count{"prompt_tokens", f.PromptTokens}, count{"completion_tokens", f.CompletionTokens},
		count{"stronger_prompt_tokens", f.StrongerPromptTokens},
		count{"stronger_completion_tokens", f.StrongerCompletionTokens},
		count{"cached_prompt_tokens", f.CachedPromptTokens},
		count{"escalations", f.Escalations}, count{"arbiter_decisions", f.ArbiterDecisions},
		count{"correlated_steps", f.CorrelatedSteps}, count{"decorrelated_samples", f.DecorrelatedSamples},
		count{"sample_cost_nanousd", f.SampleCostNanoUSD}, count{"unverified_cost_nanousd", f.UnverifiedCostNanoUSD},
	); err != nil {
		return err
	}
	if v := f.ArbiterCostUSD; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return nonNegativeFigures(k, figure{prefix + "arbiter_cost_usd", v})
	}
	for name, n := range f.RedFlags {
		if n < 0 || name == "" {
			return invalid(k, "%sred_flags[%q] must be >= 0, got %d", prefix, name, n)
		}
	}
	for _, l := range []struct {
		name  string
		steps []int64
	}{{"error_steps", f.ErrorSteps}, {"arbiter_steps", f.ArbiterSteps}} {
		if len(l.steps) > MaxListedSteps {
			return invalid(k, "%s%s lists at most %d steps, got %d", prefix, l.name, MaxListedSteps, len(l.steps))
		}
		for i, s := range l.steps {
			if s < 0 {
				return invalid(k, "%s%s[%d] must be >= 0, got %d", prefix, l.name, i, s)
			}
		}
	}
	return nil
}

// Delta is a change of a job's Figures, as a journal entry carries it:
// the same fields, with the zero ones left out of the JSON (most entries
// change only a few).
type Delta struct {
	Figures
}

// MarshalJSON writes the non-zero fields only (deltaCodec, without
// reflection: a journal entry a step carries one).
func (d Delta) MarshalJSON() ([]byte, error) { return deltaCodec.encode(&d.Figures) }

// UnmarshalJSON reads the fields present, strictly (unknown fields are an
// error, as everywhere in a message).
func (d *Delta) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f Figures
	if err := dec.Decode(&f); err != nil {
		return err
	}
	d.Figures = f
	return nil
}

func pos(n int64) int64 { return max(n, 0) }

// tail is what cur holds beyond its prefix base.
func tail(cur, base []int64) []int64 {
	if len(cur) <= len(base) {
		return nil
	}
	return append([]int64(nil), cur[len(base):]...)
}

func appendSteps(to, more []int64) []int64 {
	for _, s := range more {
		if len(to) >= MaxListedSteps {
			break
		}
		to = append(to, s)
	}
	return to
}
