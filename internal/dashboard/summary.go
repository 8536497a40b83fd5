package dashboard

import (
	"maps"

	"github.com/makerfleet/makerfleet/internal/core/step"
	"github.com/makerfleet/makerfleet/schemas"
)

// Summarize is journal entry e, at stream sequence seq, as the step stream
// sends it: the deciding rung's counts, every rung's samples, the winner's
// votes and lead, who decided, the k the step was sampled at, and what
// the entry's work cost. A decision by the job's own model has
// rung own_model; an end entry carries the job's end state.
func Summarize(seq uint64, e *schemas.JournalEntry) schemas.StepSummary {
	s := schemas.StepSummary{
		Seq: seq, Type: e.Type, Step: e.Step,
		Counted: e.Counted, Valid: e.Valid, RedFlagged: e.RedFlagged,
		Votes: e.Votes, Lead: e.Lead, Rung: e.Rung,
		K: e.K, State: e.State, Reason: e.Reason, At: e.At,
	}
	// The entry's own work, priced as the job's report prices it: added
	// up over the journal, the job's cost so far.
	s.USD, s.UnverifiedUSD = step.ReportCost(&e.Work.Figures)
	if len(e.RedFlags) > 0 {
		s.RedFlags = maps.Clone(e.RedFlags)
	}
	s.Samples = e.Counted
	for _, p := range e.Prior {
		s.Samples += p.Counted
	}
	switch e.Type {
	case schemas.EntryDecision:
		if s.Rung == "" {
			s.Rung = schemas.RungOwnModel
		}
	case schemas.EntryTakeover, schemas.EntryEnd:
		s.Rung = ""
	}
	return s
}
