package batch

import (
	"errors"
	"slices"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// The decisions on a batch's record, without I/O: each takes the current
// record (as a compare-and-set read it) and changes it in place. The
// runner and the store apply them through bus.KV.Update, so a decision is
// always made on the record as it stands.

// outcome is how a line's job ended, as the batch counts it.
type outcome int

const (
	outcomeCompleted outcome = iota + 1
	outcomeFailed
	outcomeCancelled
)

// outcomeOf maps a job report's (or registry record's) final state to the
// batch's count; 0 for a state that has not ended.
func outcomeOf(state string) outcome {
	switch state {
	case schemas.StateSolved, schemas.StateUnsolved, schemas.StateNoConsensus:
		return outcomeCompleted
	case schemas.StateFailed:
		return outcomeFailed
	case schemas.StateCancelled:
		return outcomeCancelled
	}
	return 0
}

// errStale: the record moved on since the runner read it (another runner
// fed the same lines): nothing is written, the runner reads it again.
var errStale = errors.New("batch record moved on")

// start moves a queued batch to running, before its first job is fed: a
// queued batch has no job in the fleet, so Cancel may end it at once.
func start(r *schemas.BatchRecord, now time.Time) bool {
	if r.State != schemas.BatchQueued {
		return false
	}
	r.State, r.UpdatedAt = schemas.BatchRunning, now
	return true
}

// fed records a feeding round that started at cursor from: consumed more
// lines gone past (up to stream sequence nextSeq-1), the jobs of lines
// submitted, and bad stored lines that count as failed. errStale when the
// record's cursor is no longer from.
func fed(r *schemas.BatchRecord, from, consumed, nextSeq int64, lines []int64, bad int64, now time.Time) error {
	if r.Cursor != from || schemas.BatchTerminal(r.State) {
		return errStale
	}
	r.Cursor += consumed
	r.NextSeq = nextSeq
	r.Pending = append(r.Pending, lines...)
	r.Counts.Submitted += int64(len(lines))
	r.Counts.Failed += bad
	r.UpdatedAt = now
	settle(r, now)
	return nil
}

// counted records how the jobs of lines ended; a line no longer pending
// (counted already, by this runner or another) is skipped. It reports
// whether anything changed.
func counted(r *schemas.BatchRecord, outcomes map[int64]outcome, now time.Time) bool {
	changed := false
	r.Pending = slices.DeleteFunc(r.Pending, func(l int64) bool {
		o, ok := outcomes[l]
		if !ok {
			return false
		}
		switch o {
		case outcomeCompleted:
			r.Counts.Completed++
		case outcomeFailed:
			r.Counts.Failed++
		case outcomeCancelled:
			r.Counts.Cancelled++
		}
		changed = true
		return true
	})
	if changed {
		r.UpdatedAt = now
		settle(r, now)
	}
	return changed
}

// settle ends a batch that has nothing left: a running batch whose every
// line is fed and counted is completed; a cancelling one with no job
// pending is cancelled, its lines never fed counted cancelled.
func settle(r *schemas.BatchRecord, now time.Time) {
	if len(r.Pending) > 0 {
		return
	}
	switch {
	case r.State == schemas.BatchRunning && r.Cursor >= r.Counts.Total:
		r.State = schemas.BatchCompleted
	case r.State == schemas.BatchCancelling:
		r.State = schemas.BatchCancelled
		r.Counts.Cancelled += r.Counts.Valid - r.Counts.Submitted
	default:
		return
	}
	r.UpdatedAt, r.CompletedAt = now, &now
}

// cancelRecord is a person's cancel: a queued batch (none of its jobs fed)
// is cancelled at once, a running one starts cancelling (its runner
// cancels its jobs).
func cancelRecord(r *schemas.BatchRecord, now time.Time) {
	switch r.State {
	case schemas.BatchQueued:
		r.State = schemas.BatchCancelling
		settle(r, now)
	case schemas.BatchRunning:
		// Its runner may be feeding a job this moment: the runner ends it.
		r.State, r.UpdatedAt = schemas.BatchCancelling, now
	}
}
