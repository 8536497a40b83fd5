package step

import (
	"crypto/sha256"
	"encoding"
	"fmt"
	"iter"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// A new owner rebuilds the machine from the job's journal: the last
// checkpoint, then the entries after it. Entries carry the figures' change
// (Work), so replaying adds them up instead of counting again; decisions
// move the chain (state, trace) on.

// Restore loads a checkpoint.
func (m *Machine) Restore(c *schemas.Checkpoint) error {
	st := task.State(c.State)
	if c.Step > 0 || !m.Inst.Done(st) {
		m.State = st
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(c.Trace); err != nil {
		return err
	}
	m.Trace = h
	m.Acct.reset(c.Progress.Figures)
	m.Step = c.Step
	m.climb(c.Rung, c.Prior)
	m.panelBilled = c.PanelBilled
	m.resetStep()
	m.restoreReliability(c.Receipt)
	return nil
}

// Replay folds the journal entries after the checkpoint into the machine,
// each with its sequence in the journal (for errors). It returns the end
// entry when the job ended but its owner stopped before the report was
// out. An entry the machine cannot apply is an error (the shell's: the
// journal is corrupt).
func (m *Machine) Replay(entries iter.Seq2[uint64, *schemas.JournalEntry]) (*schemas.JournalEntry, error) {
	var ended *schemas.JournalEntry
	for seq, e := range entries {
		switch e.Type {
		case schemas.EntryDecision, schemas.EntryArbiter:
			if e.Step == m.Step {
				m.noteDecision(e, false)
			}
			if err := m.apply(e, true); err != nil {
				return nil, fmt.Errorf("entry at %d: %w", seq, err)
			}
			m.SinceCkpt++
		case schemas.EntryEscalation:
			// The step climbed its ladder: resume it on that rung.
			if e.Step != m.Step {
				return nil, fmt.Errorf("entry at %d: escalation of step %d where step %d was expected", seq, e.Step, m.Step)
			}
			m.climb(e.Rung, e.Prior)
			m.SinceCkpt++
		case schemas.EntryEnd:
			end := *e
			ended = &end
		}
		m.Acct.Add(e.Work.Figures)
		m.Acct.journaled.Add(e.Work.Figures)
	}
	return ended, nil
}

// Snapshot is the machine's checkpoint at now: everything needed to resume
// after the journal entry at seq without reading the entries before it.
// The figures it holds are, from then on, what the journal holds.
func (m *Machine) Snapshot(now time.Time, seq uint64, started time.Time) (*schemas.Checkpoint, error) {
	tr, err := m.Trace.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("coordinator: checkpoint trace: %w", err)
	}
	// From here on the journal holds these figures: the next entry
	// carries the change since them.
	m.Acct.journaled = m.Acct.Figures.Clone()
	return &schemas.Checkpoint{
		Header: schemas.NewHeader(schemas.KindCheckpoint), Tenant: m.spec.Tenant, JobID: m.spec.JobID,
		Token: m.token, JournalSeq: seq, Step: m.Step, State: []byte(m.State),
		Trace: tr, Progress: schemas.Progress{Figures: m.Acct.Figures.Clone(), StartedAt: started.UTC()},
		Rung: m.Rung, Prior: m.prior, PanelBilled: m.panelBilled, Receipt: m.receipt(), At: now.UTC(),
	}, nil
}
