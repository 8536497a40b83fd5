package step

import (
	"errors"
	"fmt"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// decide closes the open step with d, the tally's decision: voters are
// told (when some of the step's requests are still out), the decision is
// journaled (fenced by the lease) and applied, and the job moves on from
// the winner's own next state.
func (m *Machine) decide(now time.Time, d *vote.Decision) ([]Action, error) {
	acts := m.crash(nil, CrashAfterCount, m.Step)
	// With none out, the usual case since waves never overshoot, there is
	// nothing to skip and the event is saved.
	if m.published > m.answered {
		acts = append(acts, Action{Kind: ActAnnounce, Decided: &schemas.StepDecided{
			Header: schemas.NewHeader(schemas.KindStepDecided),
			Tenant: m.spec.Tenant, JobID: m.spec.JobID, Step: m.Step, Epoch: m.Epoch,
			VoteKey: d.Winner, Votes: d.Votes, Lead: d.Lead, Samples: d.Counted, RedFlagged: d.RedFlagged,
			Tally: d.Tally, DecidedAt: now.UTC(),
		}})
	}
	// Answers recorded beyond the deciding one were drawn for nothing.
	m.Acct.LateSamples += int64(max(0, len(m.seen)-d.Counted))
	e := m.Entry(now, schemas.EntryDecision)
	e.VoteKey, e.Votes, e.Lead, e.Counted, e.Valid, e.RedFlagged = d.Winner, d.Votes, d.Lead, d.Counted, d.Valid, d.RedFlagged
	e.Tally, e.RedFlags = d.Tally, m.redFlags(d.Counted)
	if m.Rung != "" {
		e.Rung, e.Prior = m.Rung, m.prior
	}
	more, err := m.commit(now, &e, d.Counted)
	return append(acts, more...), err
}

// commit applies e, the open step's decision (by votes, the judge or a
// person), journals it with the figures' change, and moves on to the next
// step. counted is how many of the rung's samples (by index) it counted.
// The entry is stored while the next step samples: the next decision (or
// a checkpoint, or the end) waits for it, so the journal never runs ahead
// of itself, and a lost append stops the job before anything of the next
// step is journaled.
func (m *Machine) commit(now time.Time, e *schemas.JournalEntry, counted int) ([]Action, error) {
	m.decided.note(now, m.Step, m.Epoch, counted, m.seen)
	if err := m.apply(e, false); err != nil {
		if errors.Is(err, task.ErrEval) {
			return m.failEval(err), nil
		}
		return nil, err
	}
	e.Work = m.Acct.Delta()
	acts := []Action{{Kind: ActJournal, Entry: e}}
	if e.Type == schemas.EntryArbiter {
		// No vote closed the step, so no script opened the next one.
		acts = append(acts, m.Open())
	}
	acts = m.crash(acts, CrashAfterJournal, m.Step-1)
	more, err := m.MoveOn(now)
	return append(acts, more...), err
}

// apply folds a decision into the chain: the verifier's check, the trace,
// the next state, and (live, not when replayed from the journal, whose
// entries carry their figures) the figures. The next step starts from the
// state in the winning answer (task.Instance.Next), never from one
// recomputed by code; the verifier only counts wrong steps.
func (m *Machine) apply(e *schemas.JournalEntry, replay bool) error {
	if e.Step != m.Step {
		return fmt.Errorf("decision for step %d where step %d was expected", e.Step, m.Step)
	}
	vote := task.Vote{Key: e.VoteKey}
	next, err := m.Inst.Next(m.State, vote)
	if err != nil {
		return fmt.Errorf("coordinator: step %d: next state from the winning vote: %w", m.Step, err)
	}
	if !replay {
		if err := m.countDecision(e, vote); err != nil {
			return err
		}
	}
	m.Trace.Write([]byte(e.VoteKey))
	m.Trace.Write([]byte{'\n'})
	m.State = next
	m.Step++
	m.climb("", nil)
	for at := range m.strongerAt {
		if at[0] < m.Step-1 { // answers this late are rare: priced as the job's model
			delete(m.strongerAt, at)
		}
	}
	m.forgetAsked()
	m.resetStep()
	return nil
}

// countDecision adds a decided step to the figures. A verifier that cannot
// judge the step (a spec's reference failing) is an error.
func (m *Machine) countDecision(e *schemas.JournalEntry, vote task.Vote) error {
	f := &m.Acct.Figures
	if m.verifier != nil {
		err := m.verifier.Verify(m.State, vote)
		if errors.Is(err, task.ErrEval) {
			return fmt.Errorf("coordinator: step %d: verifier: %w", m.Step, err)
		}
		if err != nil {
			f.Errors++
			if len(f.ErrorSteps) < maxErrorSteps {
				f.ErrorSteps = append(f.ErrorSteps, m.Step)
			}
			m.log.Warn("verifier: wrong step decided", "step", m.Step, "err", err)
		}
	}
	f.Steps++
	m.countStep(m.Step, e.Counted, e.Valid, e.RedFlagged, e.RedFlags, e.Prior)
	switch {
	case e.Type == schemas.EntryArbiter:
		f.ArbiterDecisions++
		if e.Arbiter != nil {
			f.ArbiterCostUSD += e.Arbiter.CostUSD
		}
		if len(f.ArbiterSteps) < maxErrorSteps {
			f.ArbiterSteps = append(f.ArbiterSteps, m.Step)
		}
	case e.Rung == schemas.RungStrongerModel:
		f.Escalations++
	}
	// The step's k, its votes as evidence about p, the correlation test
	// (which logs a heavy-tailed step) and the receipt (reliability.go).
	m.noteDecision(e, true)
	return nil
}

// MoveOn goes on from a decision applied, with the next step open in
// Redis: the job ends after its last step; else a checkpoint when one is
// due, a pause or cancel asked for, and the next step's first wave.
func (m *Machine) MoveOn(now time.Time) ([]Action, error) {
	if acts := m.EndIfOver(); acts != nil {
		return acts, nil
	}
	var acts []Action
	if m.SinceCkpt++; m.SinceCkpt >= m.every {
		acts = append(acts, Action{Kind: ActCheckpoint})
	}
	if more := m.ObeyControl(); more != nil {
		return append(acts, more...), nil
	}
	more, err := m.TopUp(now)
	return append(acts, more...), err
}

// ObeyControl acts on a pause or cancel asked for the job, at a step
// boundary: a pause checkpoints and stops; a cancel ends the job,
// cancelled. nil: run on.
func (m *Machine) ObeyControl() []Action {
	switch m.Control {
	case schemas.ControlPause:
		m.DropAhead(0)
		m.Paused = true
		return []Action{{Kind: ActCheckpoint}, {Kind: ActPause}}
	case schemas.ControlCancel:
		m.abandonLadder()
		return m.finish(schemas.StateCancelled, fmt.Sprintf("cancelled at step %d", m.Step), nil)
	}
	return nil
}

// EndIfOver ends the job when its chain is over (nil: it is not).
func (m *Machine) EndIfOver() []Action {
	over, err := m.over()
	switch {
	case err != nil:
		return m.failEval(err)
	case over:
		return m.atGoal()
	}
	return nil
}

// atGoal ends the job where the chain is over: solved when the goal is
// reached and the verifier found no wrong step.
func (m *Machine) atGoal() []Action {
	errs := m.Acct.Errors
	switch {
	case m.Inst.Done(m.State) && errs == 0:
		return m.finish(schemas.StateSolved, "", nil)
	case m.Inst.Done(m.State):
		return m.finish(schemas.StateUnsolved, fmt.Sprintf("reached the goal, but the verifier found %d wrong steps", errs), nil)
	case m.spec.StepLimit > 0 && m.Step >= m.spec.StepLimit && m.Step < m.Inst.TotalSteps():
		return m.finish(schemas.StateUnsolved, fmt.Sprintf("stopped at the job's step limit, %d steps (%d wrong steps)", m.Step, errs), nil)
	default:
		return m.finish(schemas.StateUnsolved, fmt.Sprintf("not at the goal after %d steps (%d wrong steps)", m.Acct.Steps, errs), nil)
	}
}

// failEval ends the job failed at the open step: the task's own logic (a
// spec's expression or template) failed there. Trying again cannot help.
func (m *Machine) failEval(err error) []Action {
	m.log.Error("the task failed at this step: ending the job", "step", m.Step, "err", err)
	return m.finish(schemas.StateFailed, fmt.Sprintf("the task failed at step %d: %v", m.Step, err), nil)
}

// finish ends the job.
func (m *Machine) finish(state, reason string, nc *schemas.NoConsensus) []Action {
	m.DropAhead(0)
	m.End = &Ending{State: state, Reason: reason, NoConsensus: nc}
	return []Action{{Kind: ActEnd}}
}

// Halted reports whether the job has ended or stopped at this boundary
// (paused, or waiting for a person): nothing more is to be done.
func (m *Machine) Halted() bool { return m.End != nil || m.Paused }
