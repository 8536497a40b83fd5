package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/schemas"
)

// watchControl follows the job's registry record, so a pause or cancel is
// seen at the next step boundary without a read per step.
func (r *jobRun) watchControl(ctx context.Context) (stop func(), err error) {
	w, err := r.topo.Jobs.Watch(ctx, bus.JobKey(r.spec.Tenant, r.spec.JobID))
	if err != nil {
		return nil, fmt.Errorf("coordinator: watch job record: %w", err)
	}
	done := make(chan struct{})
	go func() { // owned: stop ends the watch and waits for this
		defer close(done)
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var rec schemas.JobRecord
			if schemas.Decode(e.Value(), &rec) == nil {
				r.control.Store(rec.Control)
				r.notePerson(rec)
				select {
				case r.controlled <- struct{}{}:
				default:
				}
			}
		}
	}()
	return func() {
		_ = w.Stop()
		<-done
	}, nil
}

// notePerson notes the step a person's answer in rec is for.
func (r *jobRun) notePerson(rec schemas.JobRecord) {
	if rec.Decision != nil {
		r.personAt.Store(rec.Decision.Step)
	} else {
		r.personAt.Store(-1)
	}
}

// resume rebuilds the job's position from its journal: the last
// checkpoint, then the entries after it. Then it appends a takeover entry
// under this lease's token, which fences every older owner out of the
// journal, and cleans up what older owners left in flight.
func (r *jobRun) resume(ctx context.Context) error {
	jr, res, err := journal.Open(ctx, r.c.js, r.topo.NS, r.spec.Tenant, r.spec.JobID)
	if err != nil {
		return err
	}
	r.jr = jr
	m := r.m
	if c := res.Checkpoint; c != nil {
		if err := m.restore(c); err != nil {
			return fmt.Errorf("%w: checkpoint: %w", journal.ErrCorrupt, err)
		}
	}
	if r.ended, err = m.replay(res.Entries); err != nil {
		return err
	}
	r.started = startedAt(res.Checkpoint, res.Entries, r.started)
	e := m.entry(time.Now(), schemas.EntryTakeover)
	e.Epoch = 0
	e.Work = m.acct.delta()
	if err := r.append(ctx, &e); err != nil {
		return err
	}
	if len(res.Entries) > 0 {
		// Entries after the last checkpoint: the last owner did not stop
		// cleanly (a clean stop checkpoints last).
		r.c.cfg.Metrics.LeaseTakeover()
	}
	if m.step > 0 || len(res.Entries) > 0 {
		r.log.Info("resumed from the journal", "step", m.step, "entries_read", len(res.Entries), "from_checkpoint", res.Checkpoint != nil)
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
	if err := r.c.store.DeleteJob(ctx, r.ref); err != nil {
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
	c, err := r.m.snapshot(r.jr.LastSeq(), r.started)
	if err != nil {
		return err
	}
	if err := fenced(r.jr.Checkpoint(ctx, c)); err != nil {
		return err
	}
	r.m.sinceCkpt = 0
	return nil
}

// personDecision journals a person's answer (maker decide) for the step the
// job is at, if the registry holds one, instead of sampling the step.
func (r *jobRun) personDecision(ctx context.Context) error {
	rec, _, err := jobs.Get(ctx, r.topo, r.spec.Tenant, r.spec.JobID)
	if err != nil {
		return err
	}
	d := rec.Decision
	if d == nil || d.Step != r.m.step {
		return nil
	}
	acts, _ := r.m.person(time.Now(), *d)
	return r.do(ctx, acts)
}

// report is the job's report as the machine stands now.
func (r *jobRun) report() schemas.JobReport {
	m := r.m
	rep := schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport),
		Tenant: r.spec.Tenant, JobID: r.spec.JobID, Task: r.spec.Task, Params: r.spec.Params,
		TaskVersion: r.spec.TaskVersion, TaskHash: r.spec.TaskHash,
		K: r.spec.K, PEstimate: r.spec.PEstimate, StartedAt: r.started.UTC(),
	}
	if m == nil {
		return rep
	}
	rep.Params, rep.TotalSteps, rep.Figures = m.params, m.inst.TotalSteps(), m.acct.Figures.Clone()
	if json.Valid(m.state) {
		rep.FinalState = bytes.Clone(m.state)
	}
	if e := m.end; e != nil {
		rep.State, rep.Solved, rep.Reason, rep.NoConsensus = e.state, e.state == schemas.StateSolved, e.reason, e.noConsensus
	}
	summarize(&rep, r.spec, fmt.Sprintf("%x", m.trace.Sum(nil)), time.Now())
	m.fillReceipt(&rep)
	return rep
}
