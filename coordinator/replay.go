package coordinator

import (
	"crypto/sha256"
	"encoding"
	"fmt"
	"time"

	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// A new owner rebuilds the machine from the job's journal: the last
// checkpoint, then the entries after it. Entries carry the figures' change
// (Work), so replaying adds them up instead of counting again; decisions
// move the chain (state, trace) on.

// restore loads a checkpoint.
func (m *machine) restore(c *schemas.Checkpoint) error {
	st := task.State(c.State)
	if c.Step > 0 || !m.inst.Done(st) {
		m.state = st
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(c.Trace); err != nil {
		return err
	}
	m.trace = h
	m.acct.reset(c.Progress.Figures)
	m.step = c.Step
	m.climb(c.Rung, c.Prior)
	m.panelBilled = c.PanelBilled
	m.resetStep()
	m.restoreReliability(c.Receipt)
	return nil
}

// replay folds the journal entries after the checkpoint into the machine.
// It returns the end entry when the job ended but its owner stopped before
// the report was out.
func (m *machine) replay(entries []journal.Entry) (*schemas.JournalEntry, error) {
	var ended *schemas.JournalEntry
	for _, e := range entries {
		switch e.Type {
		case schemas.EntryDecision, schemas.EntryArbiter:
			if e.Step == m.step {
				m.noteDecision(&e.JournalEntry, false)
			}
			if err := m.apply(&e.JournalEntry, true); err != nil {
				return nil, fmt.Errorf("%w: entry at %d: %w", journal.ErrCorrupt, e.Seq, err)
			}
			m.sinceCkpt++
		case schemas.EntryEscalation:
			// The step climbed its ladder: resume it on that rung.
			if e.Step != m.step {
				return nil, fmt.Errorf("%w: entry at %d: escalation of step %d where step %d was expected", journal.ErrCorrupt, e.Seq, e.Step, m.step)
			}
			m.climb(e.Rung, e.Prior)
			m.sinceCkpt++
		case schemas.EntryEnd:
			end := e.JournalEntry
			ended = &end
		}
		m.acct.Add(e.Work.Figures)
		m.acct.journaled.Add(e.Work.Figures)
	}
	return ended, nil
}

// startedAt is when the job first started: the checkpoint says, else the
// journal's first entry (the first owner's takeover, written at its start);
// a job with neither starts now.
func startedAt(c *schemas.Checkpoint, entries []journal.Entry, now time.Time) time.Time {
	switch {
	case c != nil && !c.Progress.StartedAt.IsZero():
		return c.Progress.StartedAt
	case c == nil && len(entries) > 0 && entries[0].Seq == 1:
		return entries[0].At
	}
	return now
}

// snapshot is the machine's checkpoint: everything needed to resume after
// the journal entry at seq without reading the entries before it. The
// figures it holds are, from then on, what the journal holds.
func (m *machine) snapshot(seq uint64, started time.Time) (*schemas.Checkpoint, error) {
	tr, err := m.trace.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("coordinator: checkpoint trace: %w", err)
	}
	// From here on the journal holds these figures: the next entry
	// carries the change since them.
	m.acct.journaled = m.acct.Figures.Clone()
	return &schemas.Checkpoint{
		Header: schemas.NewHeader(schemas.KindCheckpoint), Tenant: m.spec.Tenant, JobID: m.spec.JobID,
		Token: m.token, JournalSeq: seq, Step: m.step, State: []byte(m.state),
		Trace: tr, Progress: schemas.Progress{Figures: m.acct.Figures.Clone(), StartedAt: started.UTC()},
		Rung: m.rung, Prior: m.prior, PanelBilled: m.panelBilled, Receipt: m.receipt(), At: time.Now().UTC(),
	}, nil
}
