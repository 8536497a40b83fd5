package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/schemas"
)

// The job's journal writes: entries, flushes and checkpoints, each fenced
// by the job's lease (internal/journal).

// append journals e and waits until it is stored. A fenced append means
// the lease is lost.
func (r *jobRun) append(ctx context.Context, e *schemas.JournalEntry) error {
	_, err := r.jr.Append(ctx, e)
	return fenced(err)
}

// flush waits until every entry is journaled.
func (r *jobRun) flush(ctx context.Context) error {
	if err := fenced(r.jr.Flush(ctx)); err != nil {
		return err
	}
	r.countStored()
	return nil
}

// fenced turns the journal's fencing error into a lost lease.
func fenced(err error) error {
	if errors.Is(err, journal.ErrFenced) {
		return fmt.Errorf("%w: %v", errLeaseLost, err)
	}
	return err
}

// checkpoint stores the job's resume point: a new owner reads no journal
// entry before it.
func (r *jobRun) checkpoint(ctx context.Context) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	c, err := r.m.Snapshot(time.Now(), r.jr.LastSeq(), r.started)
	if err != nil {
		return err
	}
	if err := fenced(r.jr.Checkpoint(ctx, c)); err != nil {
		return err
	}
	r.m.SinceCkpt = 0
	return nil
}
