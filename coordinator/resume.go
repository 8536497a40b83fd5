package coordinator

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/schemas"
)

// resume rebuilds the job's position from its journal: the last
// checkpoint, then the entries after it. Then it appends a takeover entry
// under this lease's token, which fences every older owner out of the
// journal, and cleans up what older owners left in flight.
func (r *jobRun) resume(ctx context.Context) error {
	jr, res, err := r.c.journals.Open(ctx, r.spec.Tenant, r.spec.JobID)
	if err != nil {
		return err
	}
	r.jr = jr
	m := r.m
	if c := res.Checkpoint; c != nil {
		if err := m.Restore(c); err != nil {
			return fmt.Errorf("%w: checkpoint: %w", journal.ErrCorrupt, err)
		}
	}
	if r.ended, err = m.Replay(entriesOf(res.Entries)); err != nil {
		return fmt.Errorf("%w: %w", journal.ErrCorrupt, err)
	}
	r.started = startedAt(res.Checkpoint, res.Entries, r.started)
	e := m.Entry(time.Now(), schemas.EntryTakeover)
	e.Epoch = 0
	e.Work = m.Acct.Delta()
	if err := r.append(ctx, &e); err != nil {
		return err
	}
	if len(res.Entries) > 0 {
		// Entries after the last checkpoint: the last owner did not stop
		// cleanly (a clean stop checkpoints last).
		r.c.cfg.Metrics.LeaseTakeover()
	}
	if m.Step > 0 || len(res.Entries) > 0 {
		r.log.Info("resumed from the journal", "step", m.Step, "entries_read", len(res.Entries), "from_checkpoint", res.Checkpoint != nil)
	}
	return r.clearOldOwners(ctx)
}

// clearOldOwners drops what earlier owners of the job left in flight: their
// queued sample requests and their result consumers and results, which can
// no longer count (their epochs are below ours).
func (r *jobRun) clearOldOwners(ctx context.Context) error {
	js := r.c.js
	if s, err := js.Stream(ctx, r.topo.NS.SamplesStream()); err == nil {
		_ = s.Purge(ctx, jetstream.WithPurgeSubject(r.sampleSj))
	}
	mine := bus.ResultConsumer(r.spec.Tenant, r.spec.JobID, r.token)
	prefix := bus.ResultConsumerPrefix(r.spec.Tenant, r.spec.JobID)
	s, err := js.Stream(ctx, r.topo.NS.ResultsStream())
	if err != nil {
		return fmt.Errorf("coordinator: results stream: %w", err)
	}
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		if strings.HasPrefix(name, prefix) && name != mine {
			if err := s.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("coordinator: delete old result consumer %s: %w", name, err)
			}
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("coordinator: list result consumers: %w", err)
	}
	// Results of older generations still stored cannot count any more;
	// this generation has asked for nothing yet, so every stored result of
	// the job goes. (They are not added to the report: some of them were
	// counted already, in a decision the old owner journaled before it
	// could ack them. The answers a crashed owner held are the report's
	// only gap.)
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(r.topo.NS.ResultJobWildcard(r.spec.Tenant, r.spec.JobID))); err != nil {
		r.log.Warn("purge older owners' results; they stay until the stream's max age", "err", err)
	}
	return nil
}

// cleanup removes the job's hot state, queued requests, stray results and
// result consumer. The journal stays: it is the job's record.
func (r *jobRun) cleanup(ctx context.Context) error {
	if err := r.c.tally.DeleteJob(ctx, r.ref); err != nil {
		return err
	}
	js := r.c.js
	if s, err := js.Stream(ctx, r.topo.NS.SamplesStream()); err == nil {
		_ = s.Purge(ctx, jetstream.WithPurgeSubject(r.sampleSj))
	}
	err := js.DeleteConsumer(ctx, r.topo.NS.ResultsStream(), bus.ResultConsumer(r.spec.Tenant, r.spec.JobID, r.token))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("coordinator: delete result consumer: %w", err)
	}
	if s, err := js.Stream(ctx, r.topo.NS.ResultsStream()); err == nil {
		_ = s.Purge(ctx, jetstream.WithPurgeSubject(r.topo.NS.ResultJobWildcard(r.spec.Tenant, r.spec.JobID)))
	}
	return nil
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

// entriesOf yields the journal's entries with their sequences, as the
// machine's replay reads them.
func entriesOf(entries []journal.Entry) iter.Seq2[uint64, *schemas.JournalEntry] {
	return func(yield func(uint64, *schemas.JournalEntry) bool) {
		for i := range entries {
			if !yield(entries[i].Seq, &entries[i].JournalEntry) {
				return
			}
		}
	}
}
