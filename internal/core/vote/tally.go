package vote

import "github.com/makerfleet/makerfleet/schemas"

// Tally is one job's vote state in memory: the open step's slots (an
// answer per sample index), its candidates' votes and counters, and the
// last decision, kept so that recording again into a decided step replays
// it. The zero Tally has no open step. Not safe for concurrent use.
//
// It is the rule internal/store runs in Redis, operation for operation:
// Open is open_step.lua, Record record_sample.lua, Close close_step.lua.
type Tally struct {
	open     bool
	c        Counters
	closed   bool
	slots    map[int]Sample
	votes    map[string]int
	decision *Decision // the last decided step's, for replays
}

// Open opens step under epoch. Opening the open step again changes
// nothing and returns its counters (opened false); a later epoch opens any
// step, a later step of the open epoch opens; anything older is
// ErrStaleOpen with the open step's counters. A fresh step counts nothing.
func (t *Tally) Open(step, epoch int64) (c Counters, opened bool, err error) {
	if t.open {
		if t.c.Step == step && t.c.Epoch == epoch {
			return t.c, false, nil
		}
		if t.c.Epoch > epoch || (t.c.Epoch == epoch && t.c.Step > step) {
			return t.c, false, ErrStaleOpen
		}
	}
	t.reset(step, epoch)
	return t.c, true, nil
}

func (t *Tally) reset(step, epoch int64) {
	t.open, t.closed = true, false
	t.c = Counters{Step: step, Epoch: epoch}
	t.slots = map[int]Sample{}
	t.votes = map[string]int{}
}

// Record records s, counting the open step's samples in index order (one
// that arrives early waits until every lower index is in), and decides the
// step when a candidate leads every other by k valid votes: the decision
// is kept and the next step opens under the same epoch. An index answered
// before is a Duplicate, a sample of another step or epoch (or of a step
// closed without a decision) is Stale, and a sample of the step just
// decided replays its decision. A guarded sample (Sample.AfterWinner) is
// NotYet unless its step is open right after the decision it names. With
// no open step it is ErrNoStep.
func (t *Tally) Record(s Sample, k int) (RecordResult, error) {
	if !t.open {
		return RecordResult{}, ErrNoStep
	}
	if s.AfterWinner != "" {
		d := t.decision
		if d == nil || s.Step != t.c.Step || s.Epoch != t.c.Epoch || d.Step != s.Step-1 || d.Epoch != s.Epoch || d.Winner != s.AfterWinner {
			return RecordResult{Outcome: NotYet, Counters: t.c}, nil
		}
	}
	if d := t.decision; d != nil && d.Step == s.Step && d.Epoch == s.Epoch {
		return RecordResult{Outcome: Replayed, Counters: decided(d), Decision: d}, nil
	}
	if s.Step != t.c.Step || s.Epoch != t.c.Epoch || t.closed {
		return RecordResult{Outcome: Stale, Counters: t.c}, nil
	}
	if _, ok := t.slots[s.Index]; ok {
		return RecordResult{Outcome: Duplicate, Counters: t.c}, nil
	}
	t.slots[s.Index] = s
	for {
		a, ok := t.slots[t.c.Next]
		if !ok {
			return RecordResult{Outcome: Recorded, Counters: t.c}, nil
		}
		t.c.Next++
		if a.VoteKey == "" {
			t.c.RedFlagged++
			continue
		}
		t.votes[a.VoteKey]++
		t.c.Valid++
		lead, winner, top := Standings(t.votes)
		t.c.Lead = lead
		if lead >= k {
			d := &Decision{Step: t.c.Step, Epoch: t.c.Epoch, Winner: winner, Votes: top, Lead: lead,
				Counted: t.c.Next, Valid: t.c.Valid, RedFlagged: t.c.RedFlagged, Tally: t.entries()}
			c := t.c
			t.decision = d
			t.reset(c.Step+1, c.Epoch)
			return RecordResult{Outcome: Decided, Counters: c, Decision: d}, nil
		}
	}
}

// Close closes the open step without a decision (no consensus within the
// sample cap, or the job stopped) and returns its tally; closed is false
// when it was closed already. A step or epoch that is not the open one is
// ErrNoStep. Samples recorded afterwards are Stale.
func (t *Tally) Close(step, epoch int64) (tally []schemas.TallyEntry, closed bool, err error) {
	if !t.open || t.c.Step != step || t.c.Epoch != epoch {
		return nil, false, ErrNoStep
	}
	closed = !t.closed
	t.closed = true
	return t.entries(), closed, nil
}

// Counters returns the open step's counters.
func (t *Tally) Counters() Counters { return t.c }

func (t *Tally) entries() []schemas.TallyEntry {
	if len(t.votes) == 0 {
		return nil
	}
	out := make([]schemas.TallyEntry, 0, len(t.votes))
	for k, n := range t.votes {
		out = append(out, schemas.TallyEntry{VoteKey: k, Votes: n})
	}
	SortTally(out)
	return out
}

// decided is the counters a decision reports: those of its step as it
// was decided.
func decided(d *Decision) Counters {
	return Counters{Step: d.Step, Epoch: d.Epoch, Next: d.Counted, Valid: d.Valid, RedFlagged: d.RedFlagged, Lead: d.Lead}
}
