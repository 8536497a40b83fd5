package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/core/step"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// summarize fills a report's derived figures from its counts: timing,
// per-step rates, waste, the trace, MAKER theory and the cost.
func summarize(rep *schemas.JobReport, spec schemas.JobSpec, trace string, now time.Time) {
	rep.FinishedAt = now.UTC()
	rep.WallSeconds = max(now.Sub(rep.StartedAt).Seconds(), 0)
	if rep.WallSeconds > 0 {
		rep.StepsPerSecond = float64(rep.Steps) / rep.WallSeconds
	}
	if rep.Steps > 0 {
		rep.SamplesPerStep = float64(rep.Samples) / float64(rep.Steps)
		rep.VotesPerStep = float64(rep.Votes) / float64(rep.Steps)
	}
	if rep.RedFlags == nil {
		rep.RedFlags = map[string]int64{} // {} rather than null: readers index it by reason
	}
	rep.WastedSamples = rep.SkippedSamples + rep.CancelledSamples + rep.LateSamples + rep.DuplicateResults + rep.SpeculativeWasted
	rep.TraceSHA256 = trace
	if p := spec.PEstimate; p > 0.5 && p < 1 {
		v := spec.ValidFraction
		if v <= 0 || v > 1 {
			v = 1
		}
		votes := plan.ExpectedVotes(p, spec.K)
		rep.ExpectedVotesPerStep = votes
		rep.ExpectedSamplesPerStep = votes / v
	}
	// Each answer was priced as it was counted (internal/core/step/pricing.go).
	rep.CostUSD, rep.UnverifiedCostUSD = step.ReportCost(&rep.Figures)
}

// failedReport is the report of a job that failed before (or without)
// running, for reason.
func failedReport(spec schemas.JobSpec, reason string) schemas.JobReport {
	now := time.Now().UTC()
	return schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport),
		Tenant: spec.Tenant, JobID: spec.JobID, Task: spec.Task, Params: spec.Params, ParamsRef: spec.ParamsRef, K: spec.K,
		TaskVersion: spec.TaskVersion, TaskHash: spec.TaskHash, State: schemas.StateFailed, Reason: reason, Figures: schemas.Figures{RedFlags: map[string]int64{}},
		StartedAt: now, FinishedAt: now,
	}
}

// publishStatus stores the job's progress in state. A paused job has no
// owner, so its status names none.
func (r *jobRun) publishStatus(ctx context.Context, state string) {
	st := r.status(state)
	why := ""
	if st.Waiting != nil {
		why = st.Waiting.Reason
	}
	r.c.setWaiting(bus.JobKey(r.spec.Tenant, r.spec.JobID), why)
	r.c.notePresence(bus.JobKey(r.spec.Tenant, r.spec.JobID), schemas.PresenceJob{
		Tenant: r.spec.Tenant, ID: r.spec.JobID, State: state, Step: r.m.Acct.Steps, InFlight: len(r.m.Pending),
	})
	if state == schemas.StatePaused {
		st.Coordinator = ""
	}
	r.putStatus(ctx, &st)
}

// status is the job's status in state, as its figures stand.
func (r *jobRun) status(state string) schemas.JobStatus {
	m := r.m
	progress := 0.0
	if p, ok := m.Inst.(task.Progresser); ok && m.State != nil {
		progress = p.Progress(m.State)
	} else if total := task.PlannedSteps(m.Inst); total > 0 {
		progress = float64(m.Acct.Steps) / float64(total)
		if progress >= 1 && state == schemas.StateRunning {
			progress = 0.99 // past its expected steps, a job not done is not done
		}
	}
	st := schemas.JobStatus{
		Header: schemas.NewHeader(schemas.KindJobStatus),
		Tenant: r.spec.Tenant, JobID: r.spec.JobID, State: state, Progress: min(max(progress, 0), 1),
		Steps: m.Acct.Steps, TotalSteps: m.Inst.TotalSteps(), Samples: m.Acct.Samples,
		Votes: m.Acct.Votes, RedFlagged: m.Acct.RedFlagged, Errors: m.Acct.Errors,
		Coordinator: r.c.cfg.ID, UpdatedAt: time.Now().UTC(),
	}
	st.SpentUSD, st.ReservedUSD = r.money()
	if !schemas.Terminal(state) {
		st.Rung = m.Rung
	} else if e := m.End; e != nil {
		st.Reason = e.Reason // why it ended, as its report says
	}
	if state == schemas.StateRunning {
		st.Waiting = waitingOf(m)
		switch w := st.Waiting; {
		case w == nil:
		case w.Reason == schemas.WaitTaskRefused:
			st.Reason = fmt.Sprintf("task_refused: voters cannot run this step's requests (%s) and dead-letter them; since %s",
				w.Error, w.Since.UTC().Format(time.RFC3339))
		case w.Reason == schemas.WaitProviderUnavailable:
			st.Reason = fmt.Sprintf("provider_unavailable: voters cannot have model %s served (%s); samples handed back since %s; the job resumes by itself once a voter can serve it",
				modelName(w.Model), w.Error, w.Since.UTC().Format(time.RFC3339))
		default:
			st.Reason = fmt.Sprintf("samples unanswered past the sample timeout since %s: are voters running, and ready? (a voter's /readyz names a model its provider refuses)",
				w.Since.UTC().Format(time.RFC3339))
		}
	}
	return st
}

// putStatus stores st in the status bucket.
func (r *jobRun) putStatus(ctx context.Context, st *schemas.JobStatus) {
	data, err := json.Marshal(st)
	if err != nil {
		return
	}
	if _, err := r.topo.Status.Put(ctx, bus.JobKey(r.spec.Tenant, r.spec.JobID), data); err != nil {
		r.log.Warn("publish status", "err", err)
	}
}

// publishReport stores rep, the job's final report.
func (r *jobRun) publishReport(ctx context.Context, rep schemas.JobReport) error {
	data, err := schemas.Encode(&rep)
	if err != nil {
		return fmt.Errorf("coordinator: report: %w", err)
	}
	if _, err := r.topo.Reports.Put(ctx, bus.JobKey(r.spec.Tenant, r.spec.JobID), data); err != nil {
		return fmt.Errorf("coordinator: store report: %w", err)
	}
	r.c.queueWebhook(ctx, r.topo, r.spec, rep)
	return nil
}

// queueWebhook queues the delivery of the job's end to its webhook, if it
// names one, once its report is stored (the event links to it). A
// report stored again (a resumed end) queues it again, which the
// delivery id dedups.
func (c *Coordinator) queueWebhook(ctx context.Context, topo *topology.Topology, spec schemas.JobSpec, rep schemas.JobReport) {
	if err := webhook.Publish(ctx, topo.JS, topo.NS, webhook.JobTask(spec, rep)); err != nil {
		c.log.Error("queue the job's webhook delivery; it is not made", "tenant", spec.Tenant, "job", spec.JobID, "err", err)
	}
}

// result is a solved job's answer by its task's result expression (nil
// for a task without one). An expression that fails on the final state
// leaves the report without it, logged: the job is solved all the same,
// and its final_state holds the answer.
func (r *jobRun) result(m *step.Machine) json.RawMessage {
	res, ok := m.Inst.(task.Resulter)
	if !ok {
		return nil
	}
	out, err := res.Result(m.State)
	switch {
	case errors.Is(err, task.ErrNoResult):
		return nil
	case err != nil:
		r.log.Warn("the task's result expression failed on the final state; the report has final_state only", "err", err)
		return nil
	case len(out) > schemas.MaxStateBytes:
		r.log.Warn("the task's result is over the state limit; the report has final_state only", "bytes", len(out), "limit", schemas.MaxStateBytes)
		return nil
	}
	return out
}

// report is the job's report as the machine stands now.
func (r *jobRun) report() schemas.JobReport {
	m := r.m
	rep := schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport),
		Tenant: r.spec.Tenant, JobID: r.spec.JobID, Task: r.spec.Task, Params: r.spec.Params, ParamsRef: r.spec.ParamsRef,
		TaskVersion: r.spec.TaskVersion, TaskHash: r.spec.TaskHash,
		K: r.spec.K, PEstimate: r.spec.PEstimate, StartedAt: r.started.UTC(),
	}
	if m == nil {
		return rep
	}
	rep.Params, rep.ParamsRef, rep.TotalSteps, rep.Figures = m.Params, m.ParamsRef, m.Inst.TotalSteps(), m.Acct.Figures.Clone()
	if json.Valid(m.State) {
		rep.FinalState = bytes.Clone(m.State)
	}
	if e := m.End; e != nil {
		rep.State, rep.Solved, rep.Reason, rep.NoConsensus = e.State, e.State == schemas.StateSolved, e.Reason, e.NoConsensus
	}
	if rep.Solved {
		rep.Result = r.result(m)
	}
	summarize(&rep, r.spec, fmt.Sprintf("%x", m.Trace.Sum(nil)), time.Now())
	m.FillReceipt(&rep)
	return rep
}

// waitingOf is why a running job waits on the fleet, if it does: voters'
// notices that they cannot have its open step's samples served, else its
// samples unanswered past the sample timeout.
func waitingOf(m *step.Machine) *schemas.JobWaiting {
	if u := m.Unserved; u != nil && u.Step == m.Step {
		since := u.At
		if !m.Stalled.IsZero() && m.Stalled.Before(since) {
			since = m.Stalled
		}
		if u.Task {
			return &schemas.JobWaiting{Reason: schemas.WaitTaskRefused, Error: u.Error, Since: since}
		}
		return &schemas.JobWaiting{Reason: schemas.WaitProviderUnavailable, Model: u.Model, Error: u.Error, Since: since}
	}
	if !m.Stalled.IsZero() {
		return &schemas.JobWaiting{Reason: schemas.WaitUnanswered, Since: m.Stalled}
	}
	return nil
}

// modelName names a model in a status ("" is the voters' own).
func modelName(model string) string {
	if model == "" {
		return "(the voters' own)"
	}
	return strconv.Quote(model)
}
