package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/step"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// jobRun is the shell around one job's step machine: it does the
// machine's I/O (sample requests and results on NATS, the tally in Redis,
// the journal, the judge, the registry, status and report) and feeds the
// outcomes back to it. It is owned by one goroutine.
type jobRun struct {
	c        *Coordinator
	topo     *topology.Topology
	log      *slog.Logger
	spec     schemas.JobSpec
	ref      store.JobRef
	sampleSj string
	token    int64
	m        *step.Machine
	jr       Journal
	started  time.Time
	// ended is the journal's end entry, found on resume: the job ended
	// but its owner stopped before the report was out.
	ended *schemas.JournalEntry

	// control (run, pause, cancel) and the step a person's answer waits
	// for (-1: none), as the registry watch last saw them
	control    atomic.Value  // string
	controlled chan struct{} // poked (never blocking) when they change
	personAt   atomic.Int64

	// the result messages being handled, by their position in the batch
	batch   []jetstream.Msg
	settled []bool

	// adm: deferred publishes, requests held in flight, hand-back (admit.go)
	adm admission
	// bud: the job's budget reservations (budget.go); nil until used
	bud *jobBudget
	// met: the job's metrics (metrics.go)
	met jobMetrics
	// tr: the job's spans (tracing.go); no-ops with tracing off
	tr stepTrace
}

// runJob runs the job of rec, resuming from its journal, until it ends
// (the report is returned and stored), is paused (errPaused) or the lease
// is lost (errLeaseLost). A spec the task registry refuses gets a failed
// report and an error wrapping ErrInvalidJob.
func (c *Coordinator) runJob(ctx context.Context, topo *topology.Topology, token int64, rec schemas.JobRecord) (schemas.JobReport, error) {
	spec := rec.Spec
	r := &jobRun{
		c: c, topo: topo, spec: spec, token: token,
		log:        c.log.With("tenant", spec.Tenant, "job", spec.JobID, "token", token),
		ref:        store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID},
		sampleSj:   topo.NS.SampleSubject(spec.Tenant, spec.JobID),
		controlled: make(chan struct{}, 1),
		started:    time.Now(),
	}
	r.initAdmission()
	defer r.admitDone(ctx)
	defer r.tr.end("run stopped")
	// Before anything else: what an earlier owner left reserved is
	// released whether or not this run publishes (budget.go).
	if err := r.openBudget(ctx); err != nil {
		return schemas.JobReport{}, err
	}
	// As the registry said when the job was taken; the watch keeps it
	// current from here.
	r.control.Store(rec.Control)
	r.notePerson(rec)
	inst, err := c.bind(ctx, spec)
	if errors.Is(err, inputs.ErrUnavailable) {
		return schemas.JobReport{}, err // not the job's fault: it is tried again
	}
	if err != nil {
		rep := failedReport(spec, err.Error())
		if perr := r.publishReport(ctx, rep); perr != nil {
			return rep, perr
		}
		return rep, fmt.Errorf("%w: %v", ErrInvalidJob, err)
	}
	var crashAt step.CrashPoint
	if c.cfg.Crash != nil && c.cfg.CrashAt != "" {
		crashAt.Point, crashAt.Step, _ = ParseCrashAt(c.cfg.CrashAt)
	}
	r.initMetrics()
	r.m = step.New(spec, inst, step.Config{
		Token: token, Owner: c.cfg.ID, CheckpointEvery: c.cfg.CheckpointEvery, CrashAt: crashAt, Log: r.log,
		SampleKey: c.sampleKey, Price: r.priceOf, TokensByModel: r.met.t != nil,
		RecallWindow: c.cfg.Bus.WorkDuplicates, // what the results stream itself would drop
	})
	defer r.flushTokens()
	stopWatch, err := r.watchControl(ctx)
	if err != nil {
		return r.report(), err
	}
	defer stopWatch()
	if err := r.resume(ctx); err != nil {
		return r.report(), err
	}
	if err := r.run(ctx); err != nil {
		if ctx.Err() != nil && context.Cause(ctx) == context.Canceled {
			// Stopped (SIGTERM): leave a resume point with the open
			// step's figures, so a new owner loses nothing of ours.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r.m.DropAhead(0)
			if cerr := r.checkpoint(sctx); cerr != nil {
				r.log.Warn("checkpoint at shutdown", "err", cerr)
			}
			cancel()
		}
		return r.report(), err
	}
	// The end is journaled, fenced like a decision, before anything that
	// makes it visible: an owner that lost the job cannot end it.
	if r.ended == nil {
		e := r.m.Entry(time.Now(), schemas.EntryEnd)
		e.Epoch = 0
		e.State, e.Reason, e.NoConsensus = r.m.End.State, r.m.End.Reason, r.m.End.NoConsensus
		e.Work = r.m.Acct.Delta()
		count := r.observe(&e)
		if err := r.append(ctx, &e); err != nil {
			return r.report(), err
		}
		r.countStored() // Append stored the entry in flight first
		count()
	}
	rep := r.report()
	// Settle the bookkeeping before the report makes the end visible (a
	// waiting client may stop everything as soon as it sees it).
	if err := c.store.ClearFailures(ctx, r.ref); err != nil {
		r.log.Warn("clear failure count", "err", err)
	}
	if err := r.cleanup(ctx); err != nil {
		r.log.Warn("cleanup after the job", "err", err)
	}
	// The job's cost is spent before the report shows it, so a client that
	// reads the job's budget or its tenant's day on seeing the end finds
	// it spent (admitDone, as the run stops, releases what is left
	// reserved; it spent it only then, after the report).
	if b, _ := r.budget(); b.claimed {
		if err := r.settleIDs(ctx, nil); err != nil {
			r.log.Warn("spend the job's cost at its end", "err", err)
		}
	}
	if err := r.publishReport(ctx, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// run drives the machine from where resume left it until the job ends,
// pauses or fails.
func (r *jobRun) run(ctx context.Context) error {
	m := r.m
	if e := r.ended; e != nil {
		m.End = &step.Ending{State: e.State, Reason: e.Reason, NoConsensus: e.NoConsensus}
		r.publishStatus(ctx, e.State)
		return nil
	}
	r.sync()
	if acts := m.EndIfOver(); acts != nil {
		return r.do(ctx, acts)
	}
	if err := r.do(ctx, m.ObeyControl()); err != nil || m.Halted() {
		return err
	}
	if err := r.personDecision(ctx); err != nil || m.Halted() {
		return err
	}
	if acts := m.EndIfOver(); acts != nil {
		return r.do(ctx, acts)
	}
	if err := r.do(ctx, []step.Action{m.Open()}); err != nil {
		return err
	}
	iter, err := r.results(ctx)
	if err != nil {
		return err
	}
	defer iter.Stop()

	r.publishStatus(ctx, schemas.StateRunning)
	if err := r.c.registry.MarkState(ctx, r.spec.Tenant, r.spec.JobID, schemas.StateRunning); err != nil {
		r.log.Warn("mark the job running in the registry", "err", err)
	}
	if m.Rung == schemas.RungPanel {
		// Taken over while the panel arbitrated: ask again. The request
		// id is the step's, so a stored answer is read, not paid for twice.
		if err := r.do(ctx, m.Arbitrate()); err != nil {
			return err
		}
	} else if err := r.event(ctx, m.TopUp); err != nil {
		return err
	}
	return r.loop(ctx, iter)
}

// results creates the job's result consumer for this lease generation and
// starts reading it.
func (r *jobRun) results(ctx context.Context) (jetstream.MessagesContext, error) {
	cons, err := r.c.js.CreateOrUpdateConsumer(ctx, r.topo.NS.ResultsStream(), jetstream.ConsumerConfig{
		Durable:           bus.ResultConsumer(r.spec.Tenant, r.spec.JobID, r.token),
		Description:       "results of one job, read by the coordinator holding its lease",
		FilterSubject:     r.topo.NS.ResultSubject(r.spec.Tenant, r.spec.JobID, r.token),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           30 * time.Second,
		MaxAckPending:     4096,
		InactiveThreshold: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: result consumer: %w", err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, fmt.Errorf("coordinator: result consumer: %w", err)
	}
	return iter, nil
}

// maxBatch bounds the results handled, and recorded in one Redis round
// trip, at once.
const maxBatch = 128

// loop reads results until the job ends or stops. It reads the iterator
// itself (no goroutine in between: one hand-off less on every result) and
// wakes at least every tick for the timers and ctx.
func (r *jobRun) loop(ctx context.Context, iter jetstream.MessagesContext) error {
	m := r.m
	timeout := time.Duration(r.spec.SampleTimeoutMS) * time.Millisecond
	tick := min(r.c.cfg.StatusInterval, max(timeout/4, 5*time.Millisecond))
	nextStatus := time.Now().Add(r.c.cfg.StatusInterval)
	nextSweep := time.Now().Add(tick)
	msgs := make([]jetstream.Msg, 0, maxBatch)
	for !m.Halted() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if m.FeedDue(time.Now()) {
			// A step adopted from speculation: record its answers held,
			// with what else is in already (its answers still unread
			// among them): one Redis round trip for all.
			if msgs = r.drain(iter, msgs[:0], time.Microsecond); len(msgs) > 0 {
				if err := r.handle(ctx, msgs); err != nil {
					return err
				}
				continue
			}
			r.sync()
			if err := r.do(ctx, m.OnFeed(time.Now())); err != nil {
				return err
			}
			continue
		}
		now := time.Now()
		if err := r.admitTick(ctx, now); err != nil {
			return err
		}
		if !now.Before(nextSweep) {
			r.sync()
			if err := r.do(ctx, m.OnTick(now)); err != nil {
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
		if at := r.admitWake(); !at.IsZero() && at.Before(wake) {
			wake = at
		}
		if len(m.Ahead.Feed) > 0 && m.Ahead.FeedAt.Before(wake) {
			wake = m.Ahead.FeedAt // held answers Redis did not take: again then
		}
		msg, err := iter.Next(jetstream.NextMaxWait(max(time.Until(wake), time.Millisecond)))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return fmt.Errorf("coordinator: result consumer closed: %w", err)
			}
			continue // timeout, missed heartbeat or reconnect: the iterator recovers
		}
		// Take what else is already here: one Redis round trip for all.
		if err := r.handle(ctx, r.drain(iter, append(msgs[:0], msg), time.Microsecond)); err != nil {
			return err
		}
	}
	return nil
}

// drain appends to msgs the results already in, up to maxBatch, each
// waited for at most wait.
func (r *jobRun) drain(iter jetstream.MessagesContext, msgs []jetstream.Msg, wait time.Duration) []jetstream.Msg {
	for len(msgs) < maxBatch {
		msg, err := iter.Next(jetstream.NextMaxWait(wait))
		if err != nil {
			break
		}
		msgs = append(msgs, msg)
	}
	return msgs
}

// handle passes a batch of result messages to the machine and carries
// out what it says. Messages still unsettled when that fails are handed
// back with a delay.
func (r *jobRun) handle(ctx context.Context, msgs []jetstream.Msg) error {
	r.batch, r.settled = msgs, append(r.settled[:0], make([]bool, len(msgs))...)
	in := make([]step.Incoming, len(msgs))
	for i, msg := range msgs {
		in[i] = step.Incoming{Data: msg.Data(), Subject: msg.Subject()}
	}
	r.tr.results(msgs)
	r.sync()
	untrusted := r.countUntrusted()
	err := r.do(ctx, r.m.OnResults(time.Now(), in))
	untrusted()
	if err == nil {
		err = r.settleBatch(ctx, msgs, r.settled) // budget.go
	}
	if err != nil {
		for i, msg := range msgs {
			if !r.settled[i] {
				_ = msg.NakWithDelay(step.NakDelay)
			}
		}
	}
	r.batch = nil
	return err
}

// event runs a machine event that may fail, then its actions.
func (r *jobRun) event(ctx context.Context, ev func(time.Time) ([]step.Action, error)) error {
	r.sync()
	acts, err := ev(time.Now())
	if derr := r.do(ctx, acts); derr != nil {
		return derr
	}
	return err
}

// sync hands the machine the control the registry watch last saw.
func (r *jobRun) sync() { r.m.Control = r.control.Load().(string) }

// do carries out the machine's actions in order. The first that fails
// stops the rest. A run of sample requests is admitted as one wave.
func (r *jobRun) do(ctx context.Context, acts []step.Action) error {
	for i := 0; i < len(acts); i++ {
		if acts[i].Kind == step.ActPublish {
			// The open step's requests and the steps ahead's are
			// admitted apart (admitAhead).
			ahead := acts[i].Req.Branch != 0
			reqs := r.adm.reqs[:0]
			for ; i < len(acts) && acts[i].Kind == step.ActPublish && (acts[i].Req.Branch != 0) == ahead; i++ {
				reqs = append(reqs, acts[i].Req)
			}
			i--
			r.adm.reqs = reqs
			admit := r.admit
			if ahead {
				admit = r.admitAhead
			}
			if err := admit(ctx, reqs); err != nil {
				return err
			}
			continue
		}
		if err := r.exec(ctx, acts[i]); err != nil {
			return err
		}
	}
	return nil
}

func (r *jobRun) exec(ctx context.Context, a step.Action) error {
	m := r.m
	switch a.Kind {
	case step.ActPublish:
		return r.admit(ctx, []*schemas.SampleRequest{a.Req})
	case step.ActAnnounce:
		if data, err := json.Marshal(a.Decided); err == nil {
			_ = r.c.nc.Publish(r.topo.NS.DecidedSubject(r.spec.Tenant, r.spec.JobID), data)
		}
	case step.ActRecord:
		outs, err := r.c.tally.RecordMany(ctx, r.ref, a.Samples, m.K())
		if err != nil {
			return r.event(ctx, func(now time.Time) ([]step.Action, error) { return m.RecordFailed(now, err) })
		}
		r.counted(ctx, m.Batch)
		return r.event(ctx, func(now time.Time) ([]step.Action, error) { return m.Recorded(now, outs) })
	case step.ActSettle:
		if a.Msg < 0 {
			return nil // held while its step was ahead: settled when it came
		}
		msg := r.batch[a.Msg]
		r.settled[a.Msg] = true
		switch a.Fate {
		case step.FateAck:
			_ = msg.Ack()
		case step.FateTerm:
			_ = msg.TermWithReason(a.Reason)
		default:
			_ = msg.NakWithDelay(a.Delay)
		}
	case step.ActJournal:
		// Counted once stored (observe): the entry in flight before
		// this one is settled first.
		count := r.observe(a.Entry)
		r.tr.journaled(a.Entry)
		if err := r.flush(ctx); err != nil {
			return err
		}
		if a.Wait {
			if err := r.append(ctx, a.Entry); err != nil {
				return err
			}
			count()
			return nil
		}
		if err := fenced(r.jr.Start(ctx, a.Entry)); err != nil {
			return err
		}
		r.met.pending = count
	case step.ActOpenStep:
		if _, _, err := r.c.tally.OpenStep(ctx, r.ref, m.Step, m.Epoch); err != nil {
			if errors.Is(err, store.ErrStaleOpen) {
				return fmt.Errorf("%w: %v", errLeaseLost, err)
			}
			return err
		}
	case step.ActCloseStep:
		tally, _, err := r.c.tally.CloseStep(ctx, r.ref, m.Step, m.Epoch)
		switch {
		case errors.Is(err, store.ErrNoStep):
			return r.event(ctx, func(now time.Time) ([]step.Action, error) {
				return m.Reopen(now, "the step's tally is gone from Redis")
			})
		case err != nil:
			return err
		}
		return r.event(ctx, func(now time.Time) ([]step.Action, error) { return m.Closed(now, tally) })
	case step.ActArbitrate:
		return r.arbitrate(ctx, a.Arb)
	case step.ActCheckpoint:
		return r.checkpoint(ctx)
	case step.ActPause:
		return r.pause(ctx)
	case step.ActNeedsHuman:
		return r.needsHuman(ctx)
	case step.ActStatus:
		r.publishStatus(ctx, schemas.StateRunning)
	case step.ActEnd:
		r.publishStatus(ctx, m.End.State)
	case step.ActCrash:
		if a.Point == CrashAfterJournal {
			if err := r.flush(ctx); err != nil {
				return err
			}
		}
		r.log.Error("crash point reached", "point", a.Point)
		r.c.cfg.Crash(a.Point) // the CLI exits here (crash.go)
	default:
		return fmt.Errorf("coordinator: unknown action %v", a)
	}
	return nil
}

// requestBufs are publish's buffers, one a request being published.
var requestBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// publish sends a sample request. A plain publish: the stream stores it,
// the server sends no ack and none is waited for. A request that never
// lands times out and is published again like any other lost sample;
// meanwhile the job saves k acks a step. It carries no Nats-Msg-Id: no
// sample id is published twice (a re-sample is a new attempt, a new
// epoch or owner a new id), so the stream would only hold ids in memory
// for its duplicate window, at every sample's cost; a request that
// reached the stream twice all the same is answered twice and counted
// once (docs/durability.md "Duplicate windows").
func (r *jobRun) publish(ctx context.Context, req *schemas.SampleRequest) error {
	buf := requestBufs.Get().(*[]byte)
	defer requestBufs.Put(buf)
	data, err := schemas.AppendSampleRequest((*buf)[:0], req)
	if err != nil {
		return fmt.Errorf("coordinator: encode sample request: %w", err)
	}
	*buf = data // NATS copies it as it publishes: the buffer serves the next request
	msg := &nats.Msg{Subject: r.sampleSj, Data: data, Header: nats.Header{}}
	r.tr.request(r, req, msg.Header, len(data))
	if err := r.c.nc.PublishMsg(msg); err != nil {
		r.log.Warn("publish sample request", "err", err, "sample", req.SampleID)
	}
	return ctx.Err()
}

// pause stops the job, checkpointed, as paused: the lease is released and
// the job waits for maker resume (or decide).
func (r *jobRun) pause(ctx context.Context) error {
	r.publishStatus(ctx, schemas.StatePaused)
	if err := r.c.registry.MarkState(ctx, r.spec.Tenant, r.spec.JobID, schemas.StatePaused); err != nil {
		return err
	}
	return errPaused
}

// needsHuman pauses the job at the open step for a person: checkpointed
// first (fenced: an owner that lost the job must not pause it), then
// paused in the registry. A job being cancelled is cancelled instead.
func (r *jobRun) needsHuman(ctx context.Context) error {
	r.m.DropAhead(0)
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	if _, err := jobs.Control(ctx, r.topo, r.spec.Tenant, r.spec.JobID, schemas.ControlPause); err != nil {
		if !errors.Is(err, jobs.ErrFinished) {
			return err
		}
		// Being cancelled: the cancel wins.
		r.m.Paused = false
		r.m.Control = schemas.ControlCancel
		return r.do(ctx, r.m.ObeyControl())
	}
	// Paused here and now, not through the control the registry watch
	// keeps: it may still deliver an older record saying run.
	return r.pause(ctx)
}

// bind binds the job's task to its params. Params kept by reference are
// stored again (a no-op while they are fresh), so that they outlive the
// job in the inputs store.
func (c *Coordinator) bind(ctx context.Context, spec schemas.JobSpec) (task.Instance, error) {
	inst, err := jobs.Bind(ctx, c.tasks, c.inputs, spec)
	if err != nil || spec.ParamsRef == "" {
		return inst, err
	}
	params, err := jobs.Params(ctx, c.inputs, spec)
	if err != nil {
		return nil, err
	}
	if _, err := c.inputs.Put(ctx, params); err != nil {
		c.log.Warn("could not refresh a job's params in the inputs store", "tenant", spec.Tenant, "job", spec.JobID, "params_ref", spec.ParamsRef, "err", err)
	}
	return inst, nil
}
