package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// errUnreadable: a stored line cannot be decoded (counted failed).
var errUnreadable = errors.New("stored line unreadable")

// maxReadAhead bounds the stored lines one feeding round goes past (the
// invalid ones take no slot in the window, so a round could otherwise
// read the whole batch).
const maxReadAhead = 1024

// feeder feeds one batch, for the runner holding its lease. Its state is
// the batch's record (rec, at revision rev), changed only by
// compare-and-set writes of the decisions in record.go.
type feeder struct {
	r      *Runner
	tenant string
	id     string
	log    *slog.Logger
	recs   *bus.KV[schemas.BatchRecord]

	rec    schemas.BatchRecord
	rev    uint64 // the revision rec was read at (load), for a refusal
	window int
	st     jetstream.Stream // the batch stream, once read (stream)
	asked  map[int64]bool   // pending lines whose jobs were asked to cancel
}

// run feeds the batch until it has ended or ctx is done.
func (f *feeder) run(ctx context.Context) error {
	if err := f.load(ctx); err != nil {
		return err
	}
	if schemas.BatchTerminal(f.rec.State) {
		return nil
	}
	if err := f.checkLines(ctx); err != nil {
		return err
	}
	// Watch first, then look: no report and no cancel slips between.
	reports, err := f.r.topo.Reports.Watch(ctx, bus.JobKey(f.tenant, "*"), jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch reports: %w", err)
	}
	defer func() { _ = reports.Stop() }()
	record, err := f.r.topo.Batches.Watch(ctx, recordKey(f.tenant, f.id), jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch the batch: %w", err)
	}
	defer func() { _ = record.Stop() }()
	f.window = f.windowSize(ctx)
	if err := f.update(ctx, func(r *schemas.BatchRecord) (bool, error) { return start(r, time.Now().UTC()), nil }); err != nil {
		return err
	}
	if err := f.check(ctx); err != nil {
		return err
	}
	f.log.Info("feeding batch", "lines", f.rec.Counts.Total, "cursor", f.rec.Cursor, "pending", len(f.rec.Pending), "window", f.window)
	check := time.NewTicker(f.r.cfg.CheckInterval)
	defer check.Stop()
	for {
		if err := f.step(ctx); err != nil {
			return err
		}
		if schemas.BatchTerminal(f.rec.State) {
			f.log.Info("batch ended", "state", f.rec.State, "completed", f.rec.Counts.Completed,
				"failed", f.rec.Counts.Failed, "cancelled", f.rec.Counts.Cancelled)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-reports.Updates():
			if !ok {
				return fmt.Errorf("report watch closed")
			}
			outcomes := map[int64]outcome{}
			f.report(e, outcomes)
			for more := true; more && len(outcomes) < f.window; { // take what else has arrived
				select {
				case e, ok := <-reports.Updates():
					if !ok {
						return fmt.Errorf("report watch closed")
					}
					f.report(e, outcomes)
				default:
					more = false
				}
			}
			if err := f.count(ctx, outcomes); err != nil {
				return err
			}
		case e, ok := <-record.Updates():
			if !ok {
				return fmt.Errorf("batch watch closed")
			}
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				return fmt.Errorf("%w: batch %s/%s was deleted", ErrNotFound, f.tenant, f.id)
			}
			// Mostly this runner's own writes, which change nothing; a
			// cancel, or another runner's feeding, has the record read
			// again (an update may be older than what this runner wrote
			// since, so it is never taken as it is).
			var rec schemas.BatchRecord
			if schemas.Decode(e.Value(), &rec) != nil || rec.State != f.rec.State || rec.Cursor > f.rec.Cursor {
				if err := f.load(ctx); err != nil {
					return err
				}
			}
		case <-check.C:
			f.window = f.windowSize(ctx)
			if err := f.check(ctx); err != nil {
				return err
			}
		}
	}
}

// step does what the record asks next: feed the free slots of the window
// (running), or cancel the pending jobs (cancelling) and end the batch
// once none is left.
func (f *feeder) step(ctx context.Context) error {
	switch f.rec.State {
	case schemas.BatchRunning:
		return f.feed(ctx)
	case schemas.BatchCancelling:
		for _, l := range f.rec.Pending {
			if f.asked[l] {
				continue
			}
			if err := f.cancelJob(ctx, l); err != nil {
				return err
			}
		}
		return f.update(ctx, func(r *schemas.BatchRecord) (bool, error) {
			before := r.State
			settle(r, time.Now().UTC())
			return r.State != before, nil
		})
	}
	return nil
}

// cancelJob asks line l's job to cancel; a job that has ended or was
// never registered is counted at once.
func (f *feeder) cancelJob(ctx context.Context, l int64) error {
	if f.asked == nil {
		f.asked = map[int64]bool{}
	}
	job := schemas.BatchJobID(f.id, l)
	_, err := jobs.Control(ctx, f.r.topo, f.tenant, job, schemas.ControlCancel)
	switch {
	case err == nil || errors.Is(err, jobs.ErrFinished):
		f.asked[l] = true // its report ends it
		return nil
	case errors.Is(err, jobs.ErrNotFound):
		return f.count(ctx, map[int64]outcome{l: outcomeCancelled})
	}
	return fmt.Errorf("cancel job %s: %w", job, err)
}

// feed submits the jobs of the next lines, in input order, while the
// window has room, and records them.
func (f *feeder) feed(ctx context.Context) error {
	for f.rec.State == schemas.BatchRunning && len(f.rec.Pending) < f.window && f.rec.Cursor < f.rec.Counts.Total {
		free := f.window - len(f.rec.Pending)
		from := f.rec.Cursor
		var (
			specs         []schemas.JobSpec
			consumed, bad int64
			nextSeq       = max(f.rec.NextSeq, 1)
			remaining     = f.rec.Counts.Total - from
			last          int64
		)
		// One line at a time, by the next message on the batch's subject
		// from the cursor's sequence: no consumer, nothing read ahead.
		for consumed < remaining && len(specs) < free && consumed < maxReadAhead {
			it, seq, err := f.next(ctx, nextSeq)
			if err != nil && !errors.Is(err, errUnreadable) {
				return err
			}
			consumed++
			nextSeq = int64(seq) + 1
			switch {
			case err != nil:
				f.badLine(seq, err)
				bad++
			case it.Line <= last:
				return fmt.Errorf("%w: batch %s/%s: stored line %d is out of order", ErrUnavailable, f.tenant, f.id, it.Line)
			case it.Spec != nil:
				last = it.Line
				specs = append(specs, *it.Spec)
			default:
				last = it.Line
			}
		}
		lines := make([]int64, 0, len(specs))
		for i := range specs {
			if err := f.submit(ctx, &specs[i]); err != nil {
				return err
			}
			lines = append(lines, specs[i].BatchLine)
		}
		err := f.update(ctx, func(r *schemas.BatchRecord) (bool, error) {
			return true, fed(r, from, consumed, nextSeq, lines, bad, time.Now().UTC())
		})
		if errors.Is(err, errStale) {
			if f.rec.State == schemas.BatchCancelled { // ended under us: these must not run
				for _, l := range lines {
					_, _ = jobs.Control(ctx, f.r.topo, f.tenant, schemas.BatchJobID(f.id, l), schemas.ControlCancel)
				}
			}
			continue // another runner fed them: go on from the record as it is
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// next reads the batch's first stored line at or after stream sequence
// seq.
func (f *feeder) next(ctx context.Context, seq int64) (schemas.BatchItem, uint64, error) {
	st, err := f.stream(ctx)
	if err != nil {
		return schemas.BatchItem{}, 0, err
	}
	msg, err := st.GetMsg(ctx, uint64(seq), jetstream.WithGetMsgSubject(f.r.topo.NS.BatchSubject(f.tenant, f.id)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return schemas.BatchItem{}, 0, fmt.Errorf("%w: batch %s/%s: its lines after sequence %d are missing", ErrUnavailable, f.tenant, f.id, seq)
	}
	if err != nil {
		return schemas.BatchItem{}, 0, fmt.Errorf("read the batch's line at sequence %d: %w", seq, err)
	}
	var it schemas.BatchItem
	if err := schemas.Decode(msg.Data, &it); err != nil {
		return it, msg.Sequence, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if it.Tenant != f.tenant || it.BatchID != f.id {
		return it, msg.Sequence, fmt.Errorf("%w: the line names batch %s/%s", errUnreadable, it.Tenant, it.BatchID)
	}
	return it, msg.Sequence, nil
}

// stream is the batch stream.
func (f *feeder) stream(ctx context.Context) (jetstream.Stream, error) {
	if f.st == nil {
		st, err := f.r.topo.JS.Stream(ctx, f.r.topo.NS.BatchesStream())
		if err != nil {
			return nil, fmt.Errorf("batch stream: %w", err)
		}
		f.st = st
	}
	return f.st, nil
}

// submit registers spec's job (a no-op if it is registered, or has a
// report, already: a resumed runner feeds a line again) and queues it on
// the job stream, which wakes a coordinator.
func (f *feeder) submit(ctx context.Context, spec *schemas.JobSpec) error {
	topo := f.r.topo
	if _, err := topo.Reports.Get(ctx, bus.JobKey(spec.Tenant, spec.JobID)); err == nil {
		return nil // it ran already; its report is counted by check
	}
	spec.SubmittedAt = time.Now().UTC()
	if err := jobs.Externalize(ctx, f.r.inputs, spec); err != nil {
		return fmt.Errorf("job %s: %w", spec.JobID, err)
	}
	rec := schemas.JobRecord{
		Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: spec.Tenant, JobID: spec.JobID, Spec: *spec,
		Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: spec.SubmittedAt,
	}
	switch err := jobs.Register(ctx, topo, &rec); {
	case errors.Is(err, jobs.ErrExists):
		return nil
	case errors.Is(err, jobs.ErrConflict):
		// Only a job of the batch's own tenant can hold its id; its report
		// stands for the line.
		f.log.Error("a batch job's id is taken by another job of the tenant", "job", spec.JobID, "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("register job %s: %w", spec.JobID, err)
	}
	data, err := schemas.Encode(spec)
	if err != nil {
		return fmt.Errorf("encode job %s: %w", spec.JobID, err)
	}
	msg := &nats.Msg{Subject: topo.NS.JobSubject(spec.Tenant), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, spec.Tenant+"/"+spec.JobID)
	if _, err := topo.JS.PublishMsg(ctx, msg); err != nil {
		// Registered, so it runs anyway: coordinators scan the registry.
		f.log.Warn("queue a batch job; a coordinator's scan finds it", "job", spec.JobID, "err", err)
	}
	return nil
}

// report adds the outcome of a report update to outcomes, if it is the
// report of a pending line of this batch.
func (f *feeder) report(e jetstream.KeyValueEntry, outcomes map[int64]outcome) {
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return
	}
	l, ok := f.lineOf(e.Key())
	if !ok || !slices.Contains(f.rec.Pending, l) {
		return
	}
	var rep schemas.JobReport
	if err := schemas.Decode(e.Value(), &rep); err != nil {
		f.log.Warn("unreadable report of a batch job; counted failed", "line", l, "err", err)
		outcomes[l] = outcomeFailed
		return
	}
	if o := outcomeOf(rep.State); o != 0 {
		outcomes[l] = o
	}
}

// lineOf parses the line of a report key <tenant>.<batch>-<line>.
func (f *feeder) lineOf(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, bus.JobKey(f.tenant, f.id)+"-")
	if !ok {
		return 0, false
	}
	l, err := strconv.ParseInt(rest, 10, 64)
	return l, err == nil && l > 0
}

// check reads the reports of the pending lines itself: those that ended
// while nobody watched (before a takeover), and jobs that ended without a
// report.
func (f *feeder) check(ctx context.Context) error {
	outcomes := map[int64]outcome{}
	for _, l := range f.rec.Pending {
		job := schemas.BatchJobID(f.id, l)
		e, err := f.r.topo.Reports.Get(ctx, bus.JobKey(f.tenant, job))
		if err == nil {
			f.report(e, outcomes)
			continue
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("read report of %s: %w", job, err)
		}
		rec, _, err := jobs.Get(ctx, f.r.topo, f.tenant, job)
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			// Registered before it was recorded pending: removed since.
			f.log.Error("a fed job is no longer registered and has no report; counted failed", "job", job)
			outcomes[l] = outcomeFailed
			continue
		case err != nil:
			return err
		case !rec.Finished:
			continue
		}
		// Ended: its report is written before the registry says so.
		if e, err := f.r.topo.Reports.Get(ctx, bus.JobKey(f.tenant, job)); err == nil {
			f.report(e, outcomes)
		} else if o := outcomeOf(rec.State); o != 0 {
			outcomes[l] = o
		} else {
			outcomes[l] = outcomeFailed
		}
	}
	return f.count(ctx, outcomes)
}

// count records outcomes.
func (f *feeder) count(ctx context.Context, outcomes map[int64]outcome) error {
	if len(outcomes) == 0 {
		return nil
	}
	return f.update(ctx, func(r *schemas.BatchRecord) (bool, error) {
		return counted(r, outcomes, time.Now().UTC()), nil
	})
}

// load reads the record; one whose body names another tenant or batch
// than its key is refused (owner.go).
func (f *feeder) load(ctx context.Context) error {
	rec, rev, err := f.recs.Get(ctx, recordKey(f.tenant, f.id))
	if err != nil {
		return fmt.Errorf("read batch: %w", err)
	}
	if ref := foreign(f.tenant, f.id, rec, rev); ref != nil {
		return ref
	}
	f.rec, f.rev = *rec, rev
	return nil
}

// checkLines refuses a record that counts other lines than its subject
// holds (owner.go): its runner would otherwise look for lines that are
// not there, fail, and be taken up again at every scan.
func (f *feeder) checkLines(ctx context.Context) error {
	st, err := f.stream(ctx)
	if err != nil {
		return err
	}
	subj := f.r.topo.NS.BatchSubject(f.tenant, f.id)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return fmt.Errorf("count the batch's lines: %w", err)
	}
	if n := int64(info.State.Subjects[subj]); n != f.rec.Counts.Total {
		return &refusal{reason: refusedLines, rev: f.rev,
			detail: fmt.Sprintf("the record of %s counts %d lines and %s holds %d", recordKey(f.tenant, f.id), f.rec.Counts.Total, subj, n)}
	}
	return nil
}

// badLine counts a stored line that cannot be fed (counted failed in its
// batch); the log is the runner's refused log, spaced out.
func (f *feeder) badLine(seq uint64, err error) {
	f.r.countRefused(f.tenant, &refusal{reason: refusedLine})
	if f.r.refusedLog.Allow() {
		f.log.Warn("a stored line cannot be fed; counted failed", "seq", seq, "err", err, "refused_so_far", f.r.Refused())
	}
}

// update applies decide to the record with compare-and-set and keeps what
// was written (or, when decide changes nothing, the record as read).
// decide's error is returned as it is, with the record as read kept.
func (f *feeder) update(ctx context.Context, decide func(*schemas.BatchRecord) (bool, error)) error {
	var derr error
	var seen schemas.BatchRecord
	rec, err := f.recs.Update(ctx, recordKey(f.tenant, f.id), func(cur *schemas.BatchRecord) (*schemas.BatchRecord, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, f.tenant, f.id)
		}
		if ref := foreign(f.tenant, f.id, cur, 0); ref != nil {
			derr = ref
			return nil, bus.ErrAbort
		}
		seen = *cur
		seen.Pending = slices.Clone(cur.Pending)
		changed, err := decide(cur)
		if derr = err; err != nil || !changed {
			return nil, bus.ErrAbort
		}
		return cur, nil
	})
	switch {
	case err != nil:
		return err
	case errors.Is(derr, errRefused):
		// Rewritten under us to name another batch: refused at the
		// revision read again (or, changed back meanwhile, fed anew).
		if err := f.load(ctx); err != nil {
			return err
		}
		return fmt.Errorf("%w: the batch record changed while it was written", ErrUnavailable)
	case rec == nil: // nothing written
		f.rec = seen
		return derr
	}
	f.rec = *rec
	if schemas.BatchTerminal(rec.State) && !schemas.BatchTerminal(seen.State) {
		queueWebhook(ctx, f.r.topo, *rec, f.log) // this write ended it
	}
	return nil
}

// windowSize is the batch's window, lowered to the tenant's running jobs
// quota when it has one.
func (f *feeder) windowSize(ctx context.Context) int {
	w := f.rec.Window
	if f.r.topo.Quotas == nil {
		return w
	}
	e, err := f.r.topo.Quotas.Get(ctx, f.tenant)
	if err != nil {
		return w
	}
	var q schemas.TenantQuota
	if schemas.Decode(e.Value(), &q) == nil && q.MaxRunningJobs > 0 {
		w = min(w, q.MaxRunningJobs)
	}
	return w
}
