package schemas

import (
	"encoding/json"
	"reflect"
	"time"
)

// A journal entry is written once a decided step, by the coordinator on its
// hot path: it is written by a codec (codec.go) rather than by reflection,
// byte for byte what json.Marshal writes (TestJournalEntryEncode,
// FuzzJournalEntryEncode). The rare parts (an escalated step's prior
// rungs, the judge's decision, a no-consensus end) are left to
// encoding/json. Entries are read by the reflection path: a journal is read
// once, when a new owner takes a job over. A field added to JournalEntry,
// TallyEntry or Figures goes in its list below too, in the struct's order,
// with the struct's json tag (TestCodecFields fails until it is).

var journalEntryCodec = newCodec(
	field("version", func(e *JournalEntry) *int { return &e.Version }),
	field("kind", func(e *JournalEntry) *string { return &e.Kind }),
	field("tenant", func(e *JournalEntry) *string { return &e.Tenant }),
	field("job_id", func(e *JournalEntry) *string { return &e.JobID }),
	field("type", func(e *JournalEntry) *string { return &e.Type }),
	field("token", func(e *JournalEntry) *int64 { return &e.Token }),
	field("owner", func(e *JournalEntry) *string { return &e.Owner }),
	field("step", func(e *JournalEntry) *int64 { return &e.Step }),
	field("epoch,omitempty", func(e *JournalEntry) *int64 { return &e.Epoch }),
	field("vote_key,omitempty", func(e *JournalEntry) *string { return &e.VoteKey }),
	field("votes,omitempty", func(e *JournalEntry) *int { return &e.Votes }),
	field("lead,omitempty", func(e *JournalEntry) *int { return &e.Lead }),
	field("counted,omitempty", func(e *JournalEntry) *int { return &e.Counted }),
	field("valid,omitempty", func(e *JournalEntry) *int { return &e.Valid }),
	field("red_flagged,omitempty", func(e *JournalEntry) *int { return &e.RedFlagged }),
	field("red_flags,omitempty", func(e *JournalEntry) *map[string]int { return &e.RedFlags }),
	list("tally,omitempty", func(e *JournalEntry) *[]TallyEntry { return &e.Tally }, tallyEntryCodec),
	field("rung,omitempty", func(e *JournalEntry) *string { return &e.Rung }),
	marshalled("prior,omitempty", func(e *JournalEntry) *[]RungTally { return &e.Prior },
		func(p *[]RungTally) bool { return *p == nil }, func(p *[]RungTally) bool { return len(*p) == 0 }),
	marshalled("arbiter,omitempty", func(e *JournalEntry) **ArbiterDecision { return &e.Arbiter },
		func(p **ArbiterDecision) bool { return *p == nil }, func(p **ArbiterDecision) bool { return *p == nil }),
	field("k,omitempty", func(e *JournalEntry) *int { return &e.K }),
	field("state,omitempty", func(e *JournalEntry) *string { return &e.State }),
	field("reason,omitempty", func(e *JournalEntry) *string { return &e.Reason }),
	marshalled("no_consensus,omitempty", func(e *JournalEntry) **NoConsensus { return &e.NoConsensus },
		func(p **NoConsensus) bool { return *p == nil }, func(p **NoConsensus) bool { return *p == nil }),
	delta("work", func(e *JournalEntry) *Delta { return &e.Work }),
	field("at", func(e *JournalEntry) *time.Time { return &e.At }),
)

var tallyEntryCodec = newCodec(
	field("vote_key", func(t *TallyEntry) *string { return &t.VoteKey }),
	field("votes", func(t *TallyEntry) *int { return &t.Votes }),
)

// deltaCodec writes a Delta: Figures' fields, the zero ones left out.
var deltaCodec = func() *codec[Figures] {
	c := newCodec(
		field("steps", func(f *Figures) *int64 { return &f.Steps }),
		field("errors", func(f *Figures) *int64 { return &f.Errors }),
		field("error_steps,omitempty", func(f *Figures) *[]int64 { return &f.ErrorSteps }),
		field("samples", func(f *Figures) *int64 { return &f.Samples }),
		field("votes", func(f *Figures) *int64 { return &f.Votes }),
		field("red_flagged", func(f *Figures) *int64 { return &f.RedFlagged }),
		field("red_flags", func(f *Figures) *map[string]int64 { return &f.RedFlags }),
		field("skipped_samples", func(f *Figures) *int64 { return &f.SkippedSamples }),
		field("cancelled_samples", func(f *Figures) *int64 { return &f.CancelledSamples }),
		field("late_samples", func(f *Figures) *int64 { return &f.LateSamples }),
		field("duplicate_results", func(f *Figures) *int64 { return &f.DuplicateResults }),
		field("resampled", func(f *Figures) *int64 { return &f.Resampled }),
		field("malformed_messages", func(f *Figures) *int64 { return &f.MalformedMessages }),
		field("forged_results,omitempty", func(f *Figures) *int64 { return &f.ForgedResults }),
		field("overclaimed_results,omitempty", func(f *Figures) *int64 { return &f.OverclaimedResults }),
		field("max_samples_in_step", func(f *Figures) *int { return &f.MaxSamplesInStep }),
		field("max_samples_step", func(f *Figures) *int64 { return &f.MaxSamplesStep }),
		field("prompt_tokens", func(f *Figures) *int64 { return &f.PromptTokens }),
		field("completion_tokens", func(f *Figures) *int64 { return &f.CompletionTokens }),
		field("stronger_prompt_tokens,omitempty", func(f *Figures) *int64 { return &f.StrongerPromptTokens }),
		field("stronger_completion_tokens,omitempty", func(f *Figures) *int64 { return &f.StrongerCompletionTokens }),
		field("cached_prompt_tokens,omitempty", func(f *Figures) *int64 { return &f.CachedPromptTokens }),
		field("arbiter_cost_usd,omitempty", func(f *Figures) *float64 { return &f.ArbiterCostUSD }),
		field("sample_cost_nanousd,omitempty", func(f *Figures) *int64 { return &f.SampleCostNanoUSD }),
		field("unverified_cost_nanousd,omitempty", func(f *Figures) *int64 { return &f.UnverifiedCostNanoUSD }),
		field("escalations", func(f *Figures) *int64 { return &f.Escalations }),
		field("arbiter_decisions", func(f *Figures) *int64 { return &f.ArbiterDecisions }),
		field("arbiter_steps,omitempty", func(f *Figures) *[]int64 { return &f.ArbiterSteps }),
		field("speculative_samples", func(f *Figures) *int64 { return &f.SpeculativeSamples }),
		field("speculative_wasted", func(f *Figures) *int64 { return &f.SpeculativeWasted }),
		field("correlated_steps,omitempty", func(f *Figures) *int64 { return &f.CorrelatedSteps }),
		field("decorrelated_samples,omitempty", func(f *Figures) *int64 { return &f.DecorrelatedSamples }),
	)
	c.omitZero = true
	return c
}()

// delta returns the member for a Delta field, written by deltaCodec as
// json.Marshal writes it through Delta.MarshalJSON.
func delta[T any](tag string, p func(*T) *Delta) member[T] {
	m := newMember[T, Delta](tag, func(v *T) any { return p(v) })
	m.isZero = func(v *T) bool { return reflect.ValueOf(p(v)).Elem().IsZero() }
	m.isEmpty = func(*T) bool { return false } // omitempty never leaves a struct out
	m.write = func(b []byte, v *T) ([]byte, error) {
		b, err := deltaCodec.appendObject(b, &p(v).Figures)
		if err != nil {
			return nil, errorCallingMarshalJSON(err)
		}
		return b, nil
	}
	m.read = giveUp[T]
	return m
}

// errorCallingMarshalJSON is the error json.Marshal returns when a
// Delta's MarshalJSON fails with err.
func errorCallingMarshalJSON(err error) error {
	return &json.MarshalerError{Type: reflect.TypeFor[Delta](), Err: err}
}
