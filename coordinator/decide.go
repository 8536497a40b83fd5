package coordinator

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
func (m *machine) decide(now time.Time, d *vote.Decision) ([]action, error) {
	acts := m.crash(nil, CrashAfterCount, m.step)
	// With none out, the usual case since waves never overshoot, there is
	// nothing to skip and the event is saved.
	if m.published > m.answered {
		acts = append(acts, action{kind: actAnnounce, decided: &schemas.StepDecided{
			Header: schemas.NewHeader(schemas.KindStepDecided),
			Tenant: m.spec.Tenant, JobID: m.spec.JobID, Step: m.step, Epoch: m.epoch,
			VoteKey: d.Winner, Votes: d.Votes, Lead: d.Lead, Samples: d.Counted, RedFlagged: d.RedFlagged,
			Tally: d.Tally, DecidedAt: now.UTC(),
		}})
	}
	// Answers recorded beyond the deciding one were drawn for nothing.
	m.acct.LateSamples += int64(max(0, len(m.seen)-d.Counted))
	e := m.entry(now, schemas.EntryDecision)
	e.VoteKey, e.Votes, e.Lead, e.Counted, e.Valid, e.RedFlagged = d.Winner, d.Votes, d.Lead, d.Counted, d.Valid, d.RedFlagged
	e.Tally, e.RedFlags = d.Tally, m.redFlags(d.Counted)
	if m.rung != "" {
		e.Rung, e.Prior = m.rung, m.prior
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
func (m *machine) commit(now time.Time, e *schemas.JournalEntry, counted int) ([]action, error) {
	m.notePrev(counted)
	if err := m.apply(e, false); err != nil {
		if errors.Is(err, task.ErrEval) {
			return m.failEval(err), nil
		}
		return nil, err
	}
	e.Work = m.acct.delta()
	acts := []action{{kind: actJournal, entry: e}}
	if e.Type == schemas.EntryArbiter {
		// No vote closed the step, so no script opened the next one.
		acts = append(acts, m.open())
	}
	acts = m.crash(acts, CrashAfterJournal, m.step-1)
	more, err := m.moveOn(now)
	return append(acts, more...), err
}

// notePrev remembers the open step, about to be decided, and what its
// rung recorded (counted of them counted), to recognise its answers
// delivered again.
func (m *machine) notePrev(counted int) {
	m.prev.step, m.prev.epoch, m.prev.counted = m.step, m.epoch, counted
	clear(m.prev.seen)
	for idx := range m.seen {
		m.prev.seen[idx] = true
	}
}

// apply folds a decision into the chain: the verifier's check, the trace,
// the next state, and (live, not when replayed from the journal, whose
// entries carry their figures) the figures. The next step starts from the
// state in the winning answer (task.Instance.Next), never from one
// recomputed by code; the verifier only counts wrong steps.
func (m *machine) apply(e *schemas.JournalEntry, replay bool) error {
	if e.Step != m.step {
		return fmt.Errorf("decision for step %d where step %d was expected", e.Step, m.step)
	}
	vote := task.Vote{Key: e.VoteKey}
	next, err := m.inst.Next(m.state, vote)
	if err != nil {
		return fmt.Errorf("coordinator: step %d: next state from the winning vote: %w", m.step, err)
	}
	if !replay {
		if err := m.countDecision(e, vote); err != nil {
			return err
		}
	}
	m.trace.Write([]byte(e.VoteKey))
	m.trace.Write([]byte{'\n'})
	m.state = next
	m.step++
	m.climb("", nil)
	for at := range m.strongerAt {
		if at[0] < m.step-1 { // answers this late are rare: priced as the job's model
			delete(m.strongerAt, at)
		}
	}
	m.forgetAsked()
	m.resetStep()
	return nil
}

// countDecision adds a decided step to the figures. A verifier that cannot
// judge the step (a spec's reference failing) is an error.
func (m *machine) countDecision(e *schemas.JournalEntry, vote task.Vote) error {
	f := &m.acct.Figures
	if m.verifier != nil {
		err := m.verifier.Verify(m.state, vote)
		if errors.Is(err, task.ErrEval) {
			return fmt.Errorf("coordinator: step %d: verifier: %w", m.step, err)
		}
		if err != nil {
			f.Errors++
			if len(f.ErrorSteps) < maxErrorSteps {
				f.ErrorSteps = append(f.ErrorSteps, m.step)
			}
			m.log.Warn("verifier: wrong step decided", "step", m.step, "err", err)
		}
	}
	f.Steps++
	m.countStep(m.step, e.Counted, e.Valid, e.RedFlagged, e.RedFlags, e.Prior)
	switch {
	case e.Type == schemas.EntryArbiter:
		f.ArbiterDecisions++
		if e.Arbiter != nil {
			f.ArbiterCostUSD += e.Arbiter.CostUSD
		}
		if len(f.ArbiterSteps) < maxErrorSteps {
			f.ArbiterSteps = append(f.ArbiterSteps, m.step)
		}
	case e.Rung == schemas.RungStrongerModel:
		f.Escalations++
	}
	// The step's k, its votes as evidence about p, the correlation test
	// (which logs a heavy-tailed step) and the receipt (reliability.go).
	m.noteDecision(e, true)
	return nil
}

// moveOn goes on from a decision applied, with the next step open in
// Redis: the job ends after its last step; else a checkpoint when one is
// due, a pause or cancel asked for, and the next step's first wave.
func (m *machine) moveOn(now time.Time) ([]action, error) {
	if acts := m.endIfOver(); acts != nil {
		return acts, nil
	}
	var acts []action
	if m.sinceCkpt++; m.sinceCkpt >= m.every {
		acts = append(acts, action{kind: actCheckpoint})
	}
	if more := m.obeyControl(); more != nil {
		return append(acts, more...), nil
	}
	more, err := m.topUp(now)
	return append(acts, more...), err
}

// obeyControl acts on a pause or cancel asked for the job, at a step
// boundary: a pause checkpoints and stops; a cancel ends the job,
// cancelled. nil: run on.
func (m *machine) obeyControl() []action {
	switch m.control {
	case schemas.ControlPause:
		m.dropAhead(0)
		m.paused = true
		return []action{{kind: actCheckpoint}, {kind: actPause}}
	case schemas.ControlCancel:
		m.abandonLadder()
		return m.finish(schemas.StateCancelled, fmt.Sprintf("cancelled at step %d", m.step), nil)
	}
	return nil
}

// endIfOver ends the job when its chain is over (nil: it is not).
func (m *machine) endIfOver() []action {
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
func (m *machine) atGoal() []action {
	errs := m.acct.Errors
	switch {
	case m.inst.Done(m.state) && errs == 0:
		return m.finish(schemas.StateSolved, "", nil)
	case m.inst.Done(m.state):
		return m.finish(schemas.StateUnsolved, fmt.Sprintf("reached the goal, but the verifier found %d wrong steps", errs), nil)
	case m.spec.StepLimit > 0 && m.step >= m.spec.StepLimit && m.step < m.inst.TotalSteps():
		return m.finish(schemas.StateUnsolved, fmt.Sprintf("stopped at the job's step limit, %d steps (%d wrong steps)", m.step, errs), nil)
	default:
		return m.finish(schemas.StateUnsolved, fmt.Sprintf("not at the goal after %d steps (%d wrong steps)", m.acct.Steps, errs), nil)
	}
}

// failEval ends the job failed at the open step: the task's own logic (a
// spec's expression or template) failed there. Trying again cannot help.
func (m *machine) failEval(err error) []action {
	m.log.Error("the task failed at this step: ending the job", "step", m.step, "err", err)
	return m.finish(schemas.StateFailed, fmt.Sprintf("the task failed at step %d: %v", m.step, err), nil)
}

// finish ends the job.
func (m *machine) finish(state, reason string, nc *schemas.NoConsensus) []action {
	m.dropAhead(0)
	m.end = &ending{state: state, reason: reason, noConsensus: nc}
	return []action{{kind: actEnd}}
}

// halted reports whether the job has ended or stopped at this boundary
// (paused, or waiting for a person): nothing more is to be done.
func (m *machine) halted() bool { return m.end != nil || m.paused }
