package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// maxErrorSteps bounds the wrong steps a report lists.
const maxErrorSteps = 100

// pending is a published sample with no answer yet.
type pending struct {
	attempt int
	sentAt  time.Time
	skips   int // answers "skipped" or "cancelled" for this index
}

// maxSkips bounds immediate re-publishes of an index voters keep skipping;
// past it the index waits for the sample timeout, so a confused voter
// cannot make the coordinator spin.
const maxSkips = 3

// jobRun is one job's step loop, run by the job's lease holder. It is
// owned by one goroutine.
type jobRun struct {
	c        *Coordinator
	topo     *bus.Topology
	log      *slog.Logger
	spec     schemas.JobSpec
	inst     task.Instance
	verifier task.Verifier
	ref      store.JobRef
	sampleSj string
	timeout  time.Duration

	// ownership: the lease, the journal appended under it, the control
	// (run, pause, cancel) last seen in the registry
	token      int64                 // the lease token (the lease itself is the renewer's)
	ended      *schemas.JournalEntry // the journal's end entry, found on resume
	jr         *journal.Journal
	control    atomic.Value  // string
	controlled chan struct{} // poked (never blocking) when control changes
	personAt   atomic.Int64  // the step a person's answer waits for (-1: none)
	sinceCkpt  int
	lastWork   schemas.StepWork // report figures at the last journal entry
	crashPoint string
	crashStep  int64

	// escalation of the open step: the rung sampling now ("" for the
	// job's own model), the rungs below it, and this rung's sample cap
	rung  string
	prior []schemas.RungTally
	capN  int
	// (step, epoch) pairs sampled by the stronger model, so its answers'
	// tokens, late ones included, are priced as its own
	strongerAt map[[2]int64]bool

	// open step
	step       int64
	epoch      int64
	state      task.State
	dispatched int
	pending    map[int]*pending
	counters   store.Counters
	seen       map[int]string // indices the tally holds for this step → red-flag reason ("" for a vote)
	published  int            // requests published for this step, re-publishes included
	answered   int            // results settled for this step, any outcome

	// the last decided step, to recognise its answers delivered again
	prev struct {
		step, epoch int64
		counted     int
		seen        map[int]bool
	}

	rep schemas.JobReport
	// the undecided step's samples, for the end entry of a no_consensus job
	endFigures *schemas.JournalEntry
	trace      hash.Hash
	start      time.Time
	done       bool
}

// runJob runs spec, resuming from its journal, until it ends (the report
// is returned and stored), is paused (errPaused) or the lease is lost
// (errLeaseLost). A spec the task registry refuses gets a failed report and
// an error wrapping ErrInvalidJob.
func (c *Coordinator) runJob(ctx context.Context, topo *bus.Topology, token int64, rec schemas.JobRecord) (schemas.JobReport, error) {
	spec := rec.Spec
	r := &jobRun{
		c:          c,
		topo:       topo,
		log:        c.log.With("tenant", spec.Tenant, "job", spec.JobID, "token", token),
		spec:       spec,
		ref:        store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID},
		sampleSj:   topo.NS.SampleSubject(spec.Tenant, spec.JobID),
		timeout:    time.Duration(spec.SampleTimeoutMS) * time.Millisecond,
		trace:      sha256.New(),
		start:      time.Now(),
		pending:    make(map[int]*pending),
		seen:       make(map[int]string),
		controlled: make(chan struct{}, 1),
		strongerAt: make(map[[2]int64]bool),
		token:      token,
	}
	r.prev.step, r.prev.seen = -1, make(map[int]bool)
	r.capN = spec.MaxSamplesPerStep
	// As the registry said when the job was taken; the watch keeps it
	// current from here.
	r.control.Store(rec.Control)
	r.notePerson(rec)
	if c.cfg.CrashAt != "" {
		r.crashPoint, r.crashStep, _ = ParseCrashAt(c.cfg.CrashAt)
	}
	r.rep = schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport),
		Tenant: spec.Tenant, JobID: spec.JobID, Task: spec.Task, Params: spec.Params,
		K: spec.K, PEstimate: spec.PEstimate, RedFlags: map[string]int64{},
		StartedAt: r.start.UTC(),
	}
	inst, err := c.cfg.Tasks.Bind(spec.Task, spec.Params)
	if err != nil {
		r.finish(ctx, schemas.StateFailed, err.Error())
		if perr := r.publishReport(ctx); perr != nil {
			return r.rep, perr
		}
		return r.rep, fmt.Errorf("%w: %v", ErrInvalidJob, err)
	}
	r.inst = inst
	r.verifier, _ = inst.(task.Verifier)
	r.rep.Params = inst.Params()
	r.rep.TotalSteps = inst.TotalSteps()
	stopWatch, err := r.watchControl(ctx)
	if err != nil {
		return r.rep, err
	}
	defer stopWatch()
	if err := r.resume(ctx); err != nil {
		return r.rep, err
	}
	if err := r.run(ctx); err != nil {
		if ctx.Err() != nil && context.Cause(ctx) == context.Canceled {
			// Stopped (SIGTERM): leave a resume point with the open
			// step's figures, so a new owner loses nothing of ours.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if cerr := r.checkpoint(sctx); cerr != nil {
				r.log.Warn("checkpoint at shutdown", "err", cerr)
			}
			cancel()
		}
		return r.rep, err
	}
	// The end is journaled, fenced like a decision, before anything that
	// makes it visible: an owner that lost the job cannot end it.
	if r.ended == nil {
		e := schemas.JournalEntry{
			Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
			Type: schemas.EntryEnd, Token: r.token, Owner: r.c.cfg.ID, Step: r.step, State: r.rep.State,
			Reason: r.rep.Reason, NoConsensus: r.rep.NoConsensus, At: time.Now().UTC(),
		}
		if f := r.endFigures; f != nil { // the undecided step's samples
			e.Counted, e.Valid, e.RedFlagged, e.RedFlags, e.Prior = f.Counted, f.Valid, f.RedFlagged, f.RedFlags, f.Prior
		}
		if err := r.appendNow(ctx, &e); err != nil {
			return r.rep, err
		}
	}
	// Settle the bookkeeping before the report makes the end visible (a
	// waiting client may stop everything as soon as it sees it).
	if err := c.store.ClearFailures(ctx, r.ref); err != nil {
		r.log.Warn("clear failure count", "err", err)
	}
	if err := r.cleanup(ctx); err != nil {
		r.log.Warn("cleanup after the job", "err", err)
	}
	if err := r.publishReport(ctx); err != nil {
		return r.rep, err
	}
	return r.rep, nil
}

// watchControl follows the job's registry record, so a pause or cancel is
// seen at the next step boundary without a read per step.
func (r *jobRun) watchControl(ctx context.Context) (stop func(), err error) {
	w, err := r.topo.Jobs.Watch(ctx, bus.JobKey(r.spec.Tenant, r.spec.JobID))
	if err != nil {
		return nil, fmt.Errorf("coordinator: watch job record: %w", err)
	}
	done := make(chan struct{})
	go func() {
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
	r.state = r.inst.Initial()
	if c := res.Checkpoint; c != nil {
		if err := r.restore(c); err != nil {
			return fmt.Errorf("%w: checkpoint: %w", journal.ErrCorrupt, err)
		}
	}
	for _, e := range res.Entries {
		switch e.Type {
		case schemas.EntryDecision, schemas.EntryArbiter:
			if err := r.apply(&e.JournalEntry, true); err != nil {
				return fmt.Errorf("%w: entry at %d: %w", journal.ErrCorrupt, e.Seq, err)
			}
			r.sinceCkpt++
		case schemas.EntryEscalation:
			// The step climbed its ladder: resume it on that rung.
			if e.Step != r.step {
				return fmt.Errorf("%w: entry at %d: escalation of step %d where step %d was expected", journal.ErrCorrupt, e.Seq, e.Step, r.step)
			}
			r.climb(e.Rung, e.Prior)
			addWork(&r.rep, e.Work)
			r.sinceCkpt++
		case schemas.EntryEnd:
			// Ended, but its owner stopped before the report was out.
			end := e.JournalEntry
			r.ended = &end
			countSamples(&r.rep, &end)
			addWork(&r.rep, e.Work)
		}
	}
	r.lastWork = workOf(&r.rep)
	replayed := len(res.Entries)
	if _, err := r.jr.Append(ctx, &schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
		Type: schemas.EntryTakeover, Token: r.token, Owner: r.c.cfg.ID, Step: r.step, At: time.Now().UTC(),
	}); err != nil {
		if errors.Is(err, journal.ErrFenced) {
			return fmt.Errorf("%w: %v", errLeaseLost, err)
		}
		return err
	}
	if r.step > 0 || replayed > 0 {
		r.log.Info("resumed from the journal", "step", r.step, "entries_read", replayed, "from_checkpoint", res.Checkpoint != nil)
	}
	r.epoch = r.token * schemas.EpochsPerLease
	return r.clearOldOwners(ctx)
}

// restore loads a checkpoint.
func (r *jobRun) restore(c *schemas.Checkpoint) error {
	st := task.State(c.State)
	if c.Step > 0 || !r.inst.Done(st) {
		r.state = st
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(c.Trace); err != nil {
		return err
	}
	r.trace = h
	p := c.Progress
	rep := &r.rep
	rep.Steps, rep.Errors, rep.ErrorSteps = p.Steps, p.Errors, p.ErrorSteps
	rep.Samples, rep.Votes, rep.RedFlagged = p.Samples, p.Votes, p.RedFlagged
	rep.RedFlags = map[string]int64{}
	for why, n := range p.RedFlags {
		rep.RedFlags[why] = n
	}
	rep.SkippedSamples, rep.CancelledSamples, rep.LateSamples = p.SkippedSamples, p.CancelledSamples, p.LateSamples
	rep.DuplicateResults, rep.Resampled, rep.MalformedMessages = p.DuplicateResults, p.Resampled, p.MalformedMessages
	rep.MaxSamplesInStep, rep.MaxSamplesStep = p.MaxSamplesInStep, p.MaxSamplesStep
	rep.PromptTokens, rep.CompletionTokens = p.PromptTokens, p.CompletionTokens
	rep.StrongerPromptTokens, rep.StrongerCompletionTokens = p.StrongerPromptTokens, p.StrongerCompletionTokens
	rep.ArbiterCostUSD = p.ArbiterCostUSD
	rep.Escalations, rep.ArbiterDecisions, rep.ArbiterSteps = p.Escalations, p.ArbiterDecisions, p.ArbiterSteps
	rep.StartedAt = p.StartedAt
	r.start = p.StartedAt
	r.step = c.Step
	r.climb(c.Rung, c.Prior)
	return nil
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

func (r *jobRun) run(ctx context.Context) error {
	js := r.c.js
	if e := r.ended; e != nil {
		r.rep.NoConsensus = e.NoConsensus
		r.finish(ctx, e.State, e.Reason)
		return nil
	}
	if r.finishedAt() {
		return r.end(ctx)
	}
	if err := r.obeyControl(ctx); err != nil || r.done {
		return err
	}
	if err := r.personDecision(ctx); err != nil {
		return err
	}
	if r.finishedAt() {
		return r.end(ctx)
	}
	if err := r.openStep(ctx); err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, r.topo.NS.ResultsStream(), jetstream.ConsumerConfig{
		Durable:           bus.ResultConsumer(r.spec.Tenant, r.spec.JobID, r.token),
		Description:       "results of one job, read by the coordinator holding its lease",
		FilterSubject:     r.topo.NS.ResultSubject(r.spec.Tenant, r.spec.JobID, r.token),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           30 * time.Second,
		MaxAckPending:     4096,
		InactiveThreshold: time.Hour,
	})
	if err != nil {
		return fmt.Errorf("coordinator: result consumer: %w", err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("coordinator: result consumer: %w", err)
	}
	defer iter.Stop()

	r.publishStatus(ctx, schemas.StateRunning)
	if err := jobs.MarkState(ctx, r.topo, r.spec.Tenant, r.spec.JobID, schemas.StateRunning); err != nil {
		r.log.Warn("mark the job running in the registry", "err", err)
	}
	if r.rung == schemas.RungPanel {
		// Taken over while the panel arbitrated: ask again. The request
		// id is the step's, so a stored answer is read, not paid for twice.
		if err := r.arbitrate(ctx, r.policy()); err != nil {
			return err
		}
	} else if err := r.topUp(ctx); err != nil {
		return err
	}
	// The loop reads the iterator itself (no goroutine in between: one
	// hand-off less on every result) and wakes at least every tick for the
	// timers and ctx.
	tick := min(r.c.cfg.StatusInterval, max(r.timeout/4, 5*time.Millisecond))
	nextStatus := time.Now().Add(r.c.cfg.StatusInterval)
	nextSweep := time.Now().Add(tick)
	batch := make([]jetstream.Msg, 0, maxBatch)
	for !r.done {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		if !now.Before(nextSweep) {
			if err := r.resampleOverdue(ctx); err != nil {
				return err
			}
			nextSweep = now.Add(tick)
		}
		if !now.Before(nextStatus) {
			r.publishStatus(ctx, schemas.StateRunning)
			nextStatus = now.Add(r.c.cfg.StatusInterval)
		}
		wake := nextSweep
		if nextStatus.Before(wake) {
			wake = nextStatus
		}
		m, err := iter.Next(jetstream.NextMaxWait(max(time.Until(wake), time.Millisecond)))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return fmt.Errorf("coordinator: result consumer closed: %w", err)
			}
			continue // timeout, missed heartbeat or reconnect: the iterator recovers
		}
		// Take what else is already here: one Redis round trip for all.
		batch = append(batch[:0], m)
		for len(batch) < maxBatch {
			m, err := iter.Next(jetstream.NextMaxWait(time.Microsecond))
			if err != nil {
				break
			}
			batch = append(batch, m)
		}
		if err := r.handleBatch(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// obeyControl acts on a pause or cancel asked for the job, at a step
// boundary: a pause checkpoints and stops (errPaused); a cancel ends the
// job with a cancelled report.
func (r *jobRun) obeyControl(ctx context.Context) error {
	switch r.control.Load().(string) {
	case schemas.ControlPause:
		if err := r.checkpoint(ctx); err != nil {
			return err
		}
		return r.pause(ctx)
	case schemas.ControlCancel:
		r.abandonLadder()
		r.finish(ctx, schemas.StateCancelled, fmt.Sprintf("cancelled at step %d", r.step))
	}
	return nil
}

// pause stops the job, checkpointed, as paused: the lease is released and
// the job waits for maker resume (or decide).
func (r *jobRun) pause(ctx context.Context) error {
	r.publishStatus(ctx, schemas.StatePaused)
	if err := jobs.MarkState(ctx, r.topo, r.spec.Tenant, r.spec.JobID, schemas.StatePaused); err != nil {
		return err
	}
	return errPaused
}

// openStep opens the step in Redis under the current epoch. Another
// owner's newer epoch there means the job is lost.
func (r *jobRun) openStep(ctx context.Context) error {
	if _, _, err := r.c.store.OpenStep(ctx, r.ref, r.step, r.epoch); err != nil {
		if errors.Is(err, store.ErrStaleOpen) {
			return fmt.Errorf("%w: %v", errLeaseLost, err)
		}
		return err
	}
	r.markRung()
	return nil
}

// checkpoint stores the job's resume point: a new owner reads no journal
// entry before it.
func (r *jobRun) checkpoint(ctx context.Context) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	tr, err := r.trace.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return fmt.Errorf("coordinator: checkpoint trace: %w", err)
	}
	c := schemas.Checkpoint{
		Header: schemas.NewHeader(schemas.KindCheckpoint), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
		Token: r.token, JournalSeq: r.jr.LastSeq(), Step: r.step, State: json.RawMessage(r.state),
		Trace: tr, Progress: progressOf(&r.rep), Rung: r.rung, Prior: r.prior, At: time.Now().UTC(),
	}
	if err := r.jr.Checkpoint(ctx, &c); err != nil {
		if errors.Is(err, journal.ErrFenced) {
			return fmt.Errorf("%w: %v", errLeaseLost, err)
		}
		return err
	}
	r.sinceCkpt = 0
	// Entries after a checkpoint carry work since the checkpoint.
	r.lastWork = workOf(&r.rep)
	return nil
}

// appendNow journals e, with the work done since the last entry, and waits
// until it is stored. A fenced append means the lease is lost.
func (r *jobRun) appendNow(ctx context.Context, e *schemas.JournalEntry) error {
	e.Work = r.nextWork()
	if _, err := r.jr.Append(ctx, e); err != nil {
		if errors.Is(err, journal.ErrFenced) {
			return fmt.Errorf("%w: %v", errLeaseLost, err)
		}
		return err
	}
	r.lastWork = mapWork(r.lastWork, e.Work, plus)
	return nil
}

// nextWork is the work the next journal entry carries: what was done since
// the last entry. A figure that went down since (tokens of an answer taken
// back as a duplicate after they were journaled) stays pending, to be set
// off against later work: an entry never carries a negative figure.
func (r *jobRun) nextWork() schemas.StepWork {
	return mapWork(workOf(&r.rep), r.lastWork, func(x, y int64) int64 { return max(x-y, 0) })
}

// flush waits until every decision is journaled.
func (r *jobRun) flush(ctx context.Context) error {
	if err := r.jr.Flush(ctx); err != nil {
		if errors.Is(err, journal.ErrFenced) {
			return fmt.Errorf("%w: %v", errLeaseLost, err)
		}
		return err
	}
	return nil
}

// progressOf takes the report's running figures for a checkpoint.
func progressOf(rep *schemas.JobReport) schemas.Progress {
	return schemas.Progress{
		Steps: rep.Steps, Errors: rep.Errors, ErrorSteps: rep.ErrorSteps,
		Samples: rep.Samples, Votes: rep.Votes, RedFlagged: rep.RedFlagged, RedFlags: rep.RedFlags,
		SkippedSamples: rep.SkippedSamples, CancelledSamples: rep.CancelledSamples, LateSamples: rep.LateSamples,
		DuplicateResults: rep.DuplicateResults, Resampled: rep.Resampled, MalformedMessages: rep.MalformedMessages,
		MaxSamplesInStep: rep.MaxSamplesInStep, MaxSamplesStep: rep.MaxSamplesStep,
		PromptTokens: rep.PromptTokens, CompletionTokens: rep.CompletionTokens, StartedAt: rep.StartedAt,
		StrongerPromptTokens: rep.StrongerPromptTokens, StrongerCompletionTokens: rep.StrongerCompletionTokens,
		ArbiterCostUSD: rep.ArbiterCostUSD,
		Escalations:    rep.Escalations, ArbiterDecisions: rep.ArbiterDecisions, ArbiterSteps: rep.ArbiterSteps,
	}
}

// workOf takes the report's running figures that journal entries carry as
// deltas.
func workOf(rep *schemas.JobReport) schemas.StepWork {
	return schemas.StepWork{
		PromptTokens: rep.PromptTokens, CompletionTokens: rep.CompletionTokens,
		StrongerPromptTokens: rep.StrongerPromptTokens, StrongerCompletionTokens: rep.StrongerCompletionTokens,
		Skipped: rep.SkippedSamples, Cancelled: rep.CancelledSamples, Late: rep.LateSamples,
		Duplicates: rep.DuplicateResults, Resampled: rep.Resampled, MalformedMessages: rep.MalformedMessages,
	}
}

// addWork adds a journal entry's work to the report.
func addWork(rep *schemas.JobReport, w schemas.StepWork) {
	rep.PromptTokens += w.PromptTokens
	rep.CompletionTokens += w.CompletionTokens
	rep.StrongerPromptTokens += w.StrongerPromptTokens
	rep.StrongerCompletionTokens += w.StrongerCompletionTokens
	rep.SkippedSamples += w.Skipped
	rep.CancelledSamples += w.Cancelled
	rep.LateSamples += w.Late
	rep.DuplicateResults += w.Duplicates
	rep.Resampled += w.Resampled
	rep.MalformedMessages += w.MalformedMessages
}

// mapWork combines a and b figure by figure with f.
func mapWork(a, b schemas.StepWork, f func(x, y int64) int64) schemas.StepWork {
	return schemas.StepWork{
		PromptTokens: f(a.PromptTokens, b.PromptTokens), CompletionTokens: f(a.CompletionTokens, b.CompletionTokens),
		StrongerPromptTokens:     f(a.StrongerPromptTokens, b.StrongerPromptTokens),
		StrongerCompletionTokens: f(a.StrongerCompletionTokens, b.StrongerCompletionTokens),
		Skipped:                  f(a.Skipped, b.Skipped), Cancelled: f(a.Cancelled, b.Cancelled), Late: f(a.Late, b.Late),
		Duplicates: f(a.Duplicates, b.Duplicates), Resampled: f(a.Resampled, b.Resampled),
		MalformedMessages: f(a.MalformedMessages, b.MalformedMessages),
	}
}

func plus(x, y int64) int64 { return x + y }

// maxBatch bounds the results handled, and recorded in one Redis round
// trip, at once.
const maxBatch = 128

// handleBatch settles a batch of result messages: it checks them, records
// the ones for the open step in one round trip, acts on each outcome in
// order and then tops the step up.
func (r *jobRun) handleBatch(ctx context.Context, batch []jetstream.Msg) error {
	type item struct {
		m   jetstream.Msg
		res schemas.SampleResult
	}
	var (
		items   []item
		samples []store.Sample
	)
	for _, m := range batch {
		var res schemas.SampleResult
		if err := schemas.Decode(m.Data(), &res); err != nil || res.Tenant != r.spec.Tenant || res.JobID != r.spec.JobID {
			r.rep.MalformedMessages++
			r.log.Warn("dropping malformed result", "err", err, "subject", m.Subject())
			_ = m.TermWithReason("malformed result")
			continue
		}
		if res.Step != r.step || res.Epoch != r.epoch {
			r.countLate(res, false)
			_ = m.Ack()
			continue
		}
		if res.Index >= r.dispatched {
			r.addTokens(&res, 1)
			r.rep.MalformedMessages++
			r.log.Warn("dropping result for an index never published", "step", res.Step, "index", res.Index)
			_ = m.TermWithReason("index never published")
			continue
		}
		if res.Outcome == schemas.OutcomeVote {
			// A voter's key is counted only if the task could move on from
			// it: a rogue or broken voter cannot win a step with garbage.
			if _, err := r.inst.Next(r.state, task.Vote{Key: res.VoteKey}); err != nil {
				r.addTokens(&res, 1)
				r.rep.MalformedMessages++
				r.log.Warn("dropping a vote the task cannot read", "voter", res.VoterID, "step", res.Step, "index", res.Index, "err", err)
				_ = m.TermWithReason("vote key the task cannot read")
				continue
			}
		}
		if res.Outcome == schemas.OutcomeSkipped || res.Outcome == schemas.OutcomeCancelled {
			// A voter thought this step decided (an old event); ask again.
			r.countLate(res, false)
			r.answered++
			_ = m.Ack()
			if p, ok := r.pending[res.Index]; ok && p.attempt == res.Attempt {
				if p.skips++; p.skips <= maxSkips {
					if err := r.publish(ctx, res.Index, p.attempt+1); err != nil {
						return err
					}
					r.pending[res.Index].skips = p.skips
				}
			}
			continue
		}
		items = append(items, item{m, res})
		samples = append(samples, store.Sample{
			Step: res.Step, Epoch: res.Epoch, Index: res.Index, VoteKey: res.VoteKey, RedFlag: res.RedFlag,
		})
	}
	if len(items) == 0 {
		return nil
	}

	// Each answer's tokens are counted as it is settled below, so an
	// answer settled after a decision (a copy of one it counted) is
	// accounted on the right side of that decision's journal entry.
	outs, err := r.c.store.RecordMany(ctx, r.ref, samples, r.spec.K)
	if errors.Is(err, store.ErrNoStep) {
		for _, it := range items {
			r.addTokens(&it.res, 1)
			r.answered++
			_ = it.m.Ack()
		}
		return r.reopen(ctx, "the step's tally is gone from Redis")
	}
	if err != nil {
		// Not settled: the results come back after the delay and are
		// recorded (and accounted) then; recording is idempotent.
		for _, it := range items {
			_ = it.m.NakWithDelay(250 * time.Millisecond)
		}
		r.log.Warn("record samples", "err", err)
		return nil
	}
	for i, out := range outs {
		it := items[i]
		if r.done || it.res.Step != r.step || it.res.Epoch != r.epoch {
			// An earlier sample of this batch decided the step (or ended
			// the job): this one came too late to count.
			r.countLate(it.res, false)
			_ = it.m.Ack()
			continue
		}
		r.addTokens(&it.res, 1)
		r.answered++
		switch out.Outcome {
		case store.Duplicate:
			if _, ok := r.seen[it.res.Index]; ok {
				r.rep.DuplicateResults++
			} else {
				// Ours: a call that ran but whose reply was lost (go-redis
				// retried it, or we nak'ed it) recorded this index.
				r.recordedAnswer(it.res)
			}
			delete(r.pending, it.res.Index)
			r.counters = out.Counters
		case store.Stale:
			// Redis holds another step or epoch than ours: re-sample this
			// step under a new epoch rather than wait for votes that never
			// count.
			_ = it.m.Ack()
			r.countLate(it.res, true)
			if err := r.reopen(ctx, fmt.Sprintf("Redis has step %d epoch %d open", out.Counters.Step, out.Counters.Epoch)); err != nil {
				return err
			}
			continue
		case store.Recorded:
			r.recordedAnswer(it.res)
			r.counters = out.Counters
		case store.Decided, store.Replayed:
			if _, ok := r.seen[it.res.Index]; ok {
				r.rep.DuplicateResults++
			} else {
				r.recordedAnswer(it.res) // for Replayed: the deciding call's reply was lost
			}
			if out.Decision.Step == r.step && out.Decision.Epoch == r.epoch {
				if err := r.decide(ctx, out.Decision); err != nil {
					_ = it.m.NakWithDelay(250 * time.Millisecond)
					return err
				}
			}
		}
		_ = it.m.Ack()
	}
	if r.done {
		return nil
	}
	return r.topUp(ctx)
}

// recordedAnswer notes an answer the tally now holds for the open step.
func (r *jobRun) recordedAnswer(res schemas.SampleResult) {
	r.seen[res.Index] = res.RedFlag
	delete(r.pending, res.Index)
}

// countLate accounts a result that came too late to count: its tokens and
// its kind of waste. A second delivery of an answer the last decided step
// already counted (it was handed back when Redis did not answer, and
// Redis had in fact recorded it) is not accounted again.
func (r *jobRun) countLate(res schemas.SampleResult, tokensCounted bool) {
	if p := &r.prev; res.Step == p.step && res.Epoch == p.epoch && (res.Index < p.counted || p.seen[res.Index]) &&
		(res.Outcome == schemas.OutcomeVote || res.Outcome == schemas.OutcomeRedFlag) {
		if tokensCounted { // not a model call of ours: take its tokens back out
			r.addTokens(&res, -1)
		}
		return
	}
	if !tokensCounted {
		r.addTokens(&res, 1)
	}
	switch res.Outcome {
	case schemas.OutcomeSkipped:
		r.rep.SkippedSamples++
	case schemas.OutcomeCancelled:
		r.rep.CancelledSamples++
	default:
		r.rep.LateSamples++
	}
}

// topUp publishes the samples the step needs now: up to k − lead valid
// votes beyond the ones still uncounted, within the sample cap. When the cap
// is spent and every sample is counted, the job ends without consensus.
func (r *jobRun) topUp(ctx context.Context) error {
	uncounted := r.dispatched - r.counters.Next
	need := r.spec.K - r.counters.Lead - uncounted
	if room := r.capN - r.dispatched; need > room {
		need = room
	}
	for i := 0; i < need; i++ {
		if i == need/2 && need >= 2 {
			r.crash(CrashMidWave)
		}
		if err := r.publish(ctx, r.dispatched, 0); err != nil {
			return err
		}
		r.dispatched++
	}
	if r.dispatched >= r.capN && r.counters.Next >= r.dispatched {
		return r.escalate(ctx)
	}
	return nil
}

// publish sends the request for index at attempt.
func (r *jobRun) publish(ctx context.Context, index, attempt int) error {
	temp := r.spec.Rest()
	if index == 0 {
		temp = r.spec.TemperatureFirst
	}
	req := schemas.SampleRequest{
		Header:          schemas.NewHeader(schemas.KindSampleRequest),
		Tenant:          r.spec.Tenant,
		JobID:           r.spec.JobID,
		SampleID:        schemas.SampleID(r.spec.Tenant, r.spec.JobID, r.step, r.epoch, index, attempt),
		Step:            r.step,
		Epoch:           r.epoch,
		Index:           index,
		Attempt:         attempt,
		Task:            r.spec.Task,
		Params:          r.rep.Params,
		State:           r.state,
		Temperature:     temp,
		Seed:            SampleSeed(r.spec.Seed, r.step, index),
		MaxOutputTokens: r.spec.MaxOutputTokens,
		IssuedAt:        time.Now().UTC(),
	}
	if r.rung == schemas.RungStrongerModel {
		req.Model = r.spec.Escalation.StrongerModel
	}
	data, err := json.Marshal(&req)
	if err != nil {
		return fmt.Errorf("coordinator: encode sample request: %w", err)
	}
	msg := &nats.Msg{Subject: r.sampleSj, Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, req.SampleID)
	// A plain publish: the stream stores it, the server sends no ack and
	// none is waited for. A request that never lands times out and is
	// re-published like any other lost sample; meanwhile the job saves k
	// acks a step.
	if err := r.c.nc.PublishMsg(msg); err != nil {
		r.log.Warn("publish sample request", "err", err, "sample", req.SampleID)
	}
	r.published++
	if attempt > 0 {
		r.rep.Resampled++
	}
	r.pending[index] = &pending{attempt: attempt, sentAt: time.Now()}
	return ctx.Err()
}

// resampleOverdue re-publishes samples whose answer is overdue. Each
// attempt waits twice as long as the one before (up to 16 timeouts): an
// answer that is only slow (a backlog, a rate-limited model retrying) is
// not paid for again and again, and the fleet is not flooded when it is
// already behind. A job never gives up on an index: the model may come
// back; voters log why it does not answer.
func (r *jobRun) resampleOverdue(ctx context.Context) error {
	now := time.Now()
	for idx, p := range r.pending {
		if now.Sub(p.sentAt) < r.timeout<<min(p.attempt, 4) {
			continue
		}
		lvl := slog.LevelDebug
		if p.attempt >= 2 {
			lvl = slog.LevelWarn
		}
		r.log.Log(ctx, lvl, "sample still unanswered; re-publishing (is the model reachable? see the voters' logs)",
			"step", r.step, "index", idx, "attempt", p.attempt+1)
		if err := r.publish(ctx, idx, p.attempt+1); err != nil {
			return err
		}
	}
	return nil
}

// reopen restarts the open step under a new epoch, re-sampling it from
// scratch; answers of the old epoch are stale from then on.
func (r *jobRun) reopen(ctx context.Context, why string) error {
	if r.epoch+1 >= (r.token+1)*schemas.EpochsPerLease {
		return fmt.Errorf("coordinator: step %d: out of epochs under lease %d", r.step, r.token)
	}
	r.epoch++
	r.log.Warn("re-sampling the open step under a new epoch", "step", r.step, "epoch", r.epoch, "why", why)
	if err := r.openStep(ctx); err != nil {
		return err
	}
	r.resetStep()
	return r.topUp(ctx)
}

// markRung notes that the open step's epoch samples the stronger model,
// when it does.
func (r *jobRun) markRung() {
	if r.rung == schemas.RungStrongerModel {
		r.strongerAt[[2]int64{r.step, r.epoch}] = true
	}
}

// addTokens adds (sign 1) or takes back (sign -1) an answer's tokens.
func (r *jobRun) addTokens(res *schemas.SampleResult, sign int64) {
	p, c := sign*int64(res.PromptTokens), sign*int64(res.CompletionTokens)
	r.rep.PromptTokens += p
	r.rep.CompletionTokens += c
	if r.strongerAt[[2]int64{res.Step, res.Epoch}] {
		r.rep.StrongerPromptTokens += p
		r.rep.StrongerCompletionTokens += c
	}
}

func (r *jobRun) resetStep() {
	r.dispatched = 0
	r.published = 0
	r.answered = 0
	r.counters = store.Counters{Step: r.step, Epoch: r.epoch}
	clear(r.pending)
	clear(r.seen)
}

// decide closes the open step with d: it journals the decision (fenced by
// the lease), applies it and moves to the next step, from the winner's own
// next state.
func (r *jobRun) decide(ctx context.Context, d *store.Decision) error {
	r.crash(CrashAfterCount)
	// Tell voters, so they skip or cancel this step's requests still out
	// there (overdue ones that were re-published, or ones beyond the
	// deciding index). With none out, the usual case since waves never
	// overshoot, there is nothing to skip and the event is saved.
	if r.published > r.answered {
		ev := schemas.StepDecided{
			Header: schemas.NewHeader(schemas.KindStepDecided),
			Tenant: r.spec.Tenant, JobID: r.spec.JobID, Step: r.step, Epoch: r.epoch,
			VoteKey: d.Winner, Votes: d.Votes, Lead: d.Lead, Samples: d.Counted, RedFlagged: d.RedFlagged,
			Tally: d.Tally, DecidedAt: time.Now().UTC(),
		}
		if data, err := json.Marshal(&ev); err == nil {
			_ = r.c.nc.Publish(r.topo.NS.DecidedSubject(r.spec.Tenant, r.spec.JobID), data)
		}
	}
	// Answers recorded beyond the deciding one were drawn for nothing.
	r.rep.LateSamples += int64(max(0, len(r.seen)-d.Counted))
	e := schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
		Type: schemas.EntryDecision, Token: r.token, Owner: r.c.cfg.ID, Step: r.step, Epoch: r.epoch,
		VoteKey: d.Winner, Votes: d.Votes, Lead: d.Lead, Counted: d.Counted, Valid: d.Valid, RedFlagged: d.RedFlagged,
		Tally: d.Tally, At: time.Now().UTC(),
	}
	e.RedFlags = r.redFlags(d.Counted)
	if r.rung != "" {
		e.Rung, e.Prior = r.rung, r.prior
	}
	return r.commit(ctx, &e, d.Counted)
}

// commit journals e, the open step's decision, applies it and moves on to
// the next step. counted is how many of the rung's samples (by index) it
// counted.
func (r *jobRun) commit(ctx context.Context, e *schemas.JournalEntry, counted int) error {
	e.Work = r.nextWork()
	// Stored while the next step samples: the next decision (or a
	// checkpoint, or the end) waits for it, so the journal never runs
	// ahead of itself, and a lost append stops the job before anything of
	// the next step is journaled.
	if err := r.jr.Start(ctx, e); err != nil {
		if errors.Is(err, journal.ErrFenced) {
			return fmt.Errorf("%w: %v", errLeaseLost, err)
		}
		return err
	}
	r.lastWork = mapWork(r.lastWork, e.Work, plus)
	r.notePrev(counted)
	if err := r.apply(e, false); err != nil {
		return err
	}
	if e.Type == schemas.EntryArbiter {
		// No vote closed the step, so no script opened the next one.
		if err := r.openStep(ctx); err != nil {
			return err
		}
	}
	if r.crashPoint == CrashAfterJournal && r.step-1 == r.crashStep {
		if err := r.jr.Flush(ctx); err != nil {
			return err
		}
		r.step-- // crash reports the step just journaled
		r.crash(CrashAfterJournal)
	}
	// record_sample.lua already opened the next step.
	return r.moveOn(ctx)
}

// redFlags counts the red flags among the open step's first counted
// samples by reason (nil for none).
func (r *jobRun) redFlags(counted int) map[string]int {
	var m map[string]int
	for idx, why := range r.seen {
		if why != "" && idx < counted {
			if m == nil {
				m = map[string]int{}
			}
			m[why]++
		}
	}
	return m
}

// notePrev remembers the open step, about to be decided, and what its
// rung recorded (counted of them counted), to recognise its answers
// delivered again.
func (r *jobRun) notePrev(counted int) {
	r.prev.step, r.prev.epoch, r.prev.counted = r.step, r.epoch, counted
	clear(r.prev.seen)
	for idx := range r.seen {
		r.prev.seen[idx] = true
	}
}

// moveOn goes on from a decision applied, with the next step open in
// Redis: the job ends after its last step; else a checkpoint when one is
// due, a pause or cancel asked for, and the next step's first wave.
func (r *jobRun) moveOn(ctx context.Context) error {
	if r.finishedAt() {
		return r.end(ctx)
	}
	if r.sinceCkpt++; r.sinceCkpt >= r.c.cfg.CheckpointEvery {
		if err := r.checkpoint(ctx); err != nil {
			return err
		}
	}
	if err := r.obeyControl(ctx); err != nil || r.done {
		return err
	}
	return r.topUp(ctx)
}

// countSamples adds the samples an entry counted, its rung's and the rungs
// below's, to rep.
func countSamples(rep *schemas.JobReport, e *schemas.JournalEntry) {
	rep.Samples += int64(e.Counted)
	rep.Votes += int64(e.Valid)
	rep.RedFlagged += int64(e.RedFlagged)
	for why, n := range e.RedFlags {
		rep.RedFlags[why] += int64(n)
	}
	for _, p := range e.Prior {
		rep.Samples += int64(p.Counted)
		rep.Votes += int64(p.Valid)
		rep.RedFlagged += int64(p.RedFlagged)
		for why, n := range p.RedFlags {
			rep.RedFlags[why] += int64(n)
		}
	}
	if e.Counted > rep.MaxSamplesInStep {
		rep.MaxSamplesInStep = e.Counted
		rep.MaxSamplesStep = e.Step
	}
}

// apply folds a journaled decision into the run: the verifier's check, the
// trace, the report, and the next state. Replayed entries (a resume) also
// add the work they carry; live ones are in the report already.
func (r *jobRun) apply(e *schemas.JournalEntry, replay bool) error {
	if e.Step != r.step {
		return fmt.Errorf("decision for step %d where step %d was expected", e.Step, r.step)
	}
	vote := task.Vote{Key: e.VoteKey}
	if r.verifier != nil {
		if err := r.verifier.Verify(r.state, vote); err != nil {
			r.rep.Errors++
			if len(r.rep.ErrorSteps) < maxErrorSteps {
				r.rep.ErrorSteps = append(r.rep.ErrorSteps, r.step)
			}
			if !replay {
				r.log.Warn("verifier: wrong step decided", "step", r.step, "err", err)
			}
		}
	}
	next, err := r.inst.Next(r.state, vote)
	if err != nil {
		return fmt.Errorf("coordinator: step %d: next state from the winning vote: %w", r.step, err)
	}
	r.trace.Write([]byte(e.VoteKey))
	r.trace.Write([]byte{'\n'})
	rep := &r.rep
	rep.Steps++
	countSamples(rep, e)
	switch {
	case e.Type == schemas.EntryArbiter:
		rep.ArbiterDecisions++
		if e.Arbiter != nil {
			rep.ArbiterCostUSD += e.Arbiter.CostUSD
		}
		if len(rep.ArbiterSteps) < maxErrorSteps {
			rep.ArbiterSteps = append(rep.ArbiterSteps, r.step)
		}
	case e.Rung == schemas.RungStrongerModel:
		rep.Escalations++
	}
	if replay {
		addWork(rep, e.Work)
	} else if e.Counted > 3*r.spec.K+10 {
		r.log.Warn("heavy-tailed step: many samples before consensus (correlated errors?)",
			"step", r.step, "samples", e.Counted, "tally", len(e.Tally))
	}
	r.state = next
	r.step++
	r.climb("", nil)
	for at := range r.strongerAt {
		if at[0] < r.step-1 { // answers this late are rare: priced as the job's model
			delete(r.strongerAt, at)
		}
	}
	r.resetStep()
	return nil
}

// finishedAt reports whether the run is over at the current state.
func (r *jobRun) finishedAt() bool {
	return r.inst.Done(r.state) || r.step >= r.inst.TotalSteps()
}

func (r *jobRun) end(ctx context.Context) error {
	solved := r.inst.Done(r.state) && r.rep.Errors == 0
	switch {
	case solved:
		r.finish(ctx, schemas.StateSolved, "")
	case r.inst.Done(r.state):
		r.finish(ctx, schemas.StateUnsolved, fmt.Sprintf("reached the goal, but the verifier found %d wrong steps", r.rep.Errors))
	default:
		r.finish(ctx, schemas.StateUnsolved, fmt.Sprintf("not at the goal after %d steps (%d wrong steps)", r.rep.Steps, r.rep.Errors))
	}
	return nil
}

// noConsensus ends the job at a step that spent its sample cap.
func (r *jobRun) noConsensus(ctx context.Context) error {
	tally, _, err := r.c.store.CloseStep(ctx, r.ref, r.step, r.epoch)
	if errors.Is(err, store.ErrNoStep) {
		return r.reopen(ctx, "the step's tally is gone from Redis")
	}
	if err != nil {
		return err
	}
	// The step's samples, this rung's and the rungs below's, go into the
	// report and, with the end, into the journal.
	rt := r.rungTally(tally)
	r.endFigures = &schemas.JournalEntry{
		Step: r.step, Counted: rt.Counted, Valid: rt.Valid, RedFlagged: rt.RedFlagged, RedFlags: rt.RedFlags, Prior: r.prior,
	}
	countSamples(&r.rep, r.endFigures)
	nc := &schemas.NoConsensus{Step: r.step, Samples: r.counters.Next, Tally: tally, Rung: schemas.RungOwnModel, Prior: r.prior}
	reason := fmt.Sprintf("step %d drew %d samples (the cap) without a candidate leading by k=%d", r.step, r.counters.Next, r.spec.K)
	if r.rung != "" {
		nc.Rung = r.rung
		n := r.counters.Next
		for _, p := range r.prior {
			n += p.Counted
		}
		reason = fmt.Sprintf("step %d drew %d samples on %d rungs (the stronger model's cap last) without a candidate leading by k=%d",
			r.step, n, len(r.prior)+1, r.spec.K)
	}
	r.rep.NoConsensus = nc
	r.log.Warn("no consensus within the sample cap", "step", r.step, "rung", nc.Rung, "samples", r.counters.Next, "tally", tally)
	r.finish(ctx, schemas.StateNoConsensus, reason)
	return nil
}

// finish fills the report's summary figures and ends the loop.
func (r *jobRun) finish(ctx context.Context, state, reason string) {
	r.done = true
	rep := &r.rep
	rep.State = state
	rep.Solved = state == schemas.StateSolved
	rep.Reason = reason
	now := time.Now()
	rep.FinishedAt = now.UTC()
	rep.WallSeconds = now.Sub(r.start).Seconds()
	if rep.WallSeconds > 0 {
		rep.StepsPerSecond = float64(rep.Steps) / rep.WallSeconds
	}
	if rep.Steps > 0 {
		rep.SamplesPerStep = float64(rep.Samples) / float64(rep.Steps)
		rep.VotesPerStep = float64(rep.Votes) / float64(rep.Steps)
	}
	rep.WastedSamples = rep.SkippedSamples + rep.CancelledSamples + rep.LateSamples + rep.DuplicateResults
	if r.trace != nil {
		rep.TraceSHA256 = fmt.Sprintf("%x", r.trace.Sum(nil))
	}
	fillTheory(rep, r.spec)
	strongerPrice := r.spec.Pricing
	if e := r.spec.Escalation; e != nil && e.StrongerPricing != nil {
		strongerPrice = e.StrongerPricing
	}
	rep.CostUSD = r.spec.Pricing.Cost(rep.PromptTokens-rep.StrongerPromptTokens, rep.CompletionTokens-rep.StrongerCompletionTokens) +
		strongerPrice.Cost(rep.StrongerPromptTokens, rep.StrongerCompletionTokens) + rep.ArbiterCostUSD
	r.publishStatus(ctx, state)
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

func (r *jobRun) publishStatus(ctx context.Context, state string) {
	progress := 0.0
	if p, ok := r.inst.(task.Progresser); ok && r.state != nil {
		progress = p.Progress(r.state)
	} else if r.rep.TotalSteps > 0 {
		progress = float64(r.rep.Steps) / float64(r.rep.TotalSteps)
	}
	st := schemas.JobStatus{
		Header: schemas.NewHeader(schemas.KindJobStatus),
		Tenant: r.spec.Tenant, JobID: r.spec.JobID, State: state, Progress: min(max(progress, 0), 1),
		Steps: r.rep.Steps, TotalSteps: r.rep.TotalSteps, Samples: r.rep.Samples,
		Votes: r.rep.Votes, RedFlagged: r.rep.RedFlagged, Errors: r.rep.Errors,
		Coordinator: r.c.cfg.ID, UpdatedAt: time.Now().UTC(),
	}
	if !schemas.Terminal(state) {
		st.Rung = r.rung
	}
	data, err := json.Marshal(&st)
	if err != nil {
		return
	}
	if _, err := r.topo.Status.Put(ctx, bus.JobKey(r.spec.Tenant, r.spec.JobID), data); err != nil {
		r.log.Warn("publish status", "err", err)
	}
}

func (r *jobRun) publishReport(ctx context.Context) error {
	data, err := schemas.Encode(&r.rep)
	if err != nil {
		return fmt.Errorf("coordinator: report: %w", err)
	}
	if _, err := r.topo.Reports.Put(ctx, bus.JobKey(r.spec.Tenant, r.spec.JobID), data); err != nil {
		return fmt.Errorf("coordinator: store report: %w", err)
	}
	return nil
}

// SampleSeed derives a sample's model seed from the job seed, the step and
// the index (splitmix64), so a re-sample of an index asks the same
// question. It stays below 2^31 for servers that read seeds as int32.
func SampleSeed(jobSeed, step int64, index int) int64 {
	x := uint64(jobSeed) ^ uint64(step)*0x9E3779B97F4A7C15 ^ uint64(index+1)*0xC2B2AE3D27D4EB4F
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return int64(x & 0x7FFFFFFF)
}
