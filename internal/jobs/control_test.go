package jobs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// putStatus stores the status a job's owner would publish: state, the
// steps decided (the next is open) and the open step's rung.
func (r registry) putStatus(t *testing.T, tenant, id, state string, steps int64, rung string) {
	t.Helper()
	st := schemas.JobStatus{
		Header: schemas.NewHeader(schemas.KindJobStatus), Tenant: tenant, JobID: id, State: state,
		Steps: steps, TotalSteps: 1023, Rung: rung, UpdatedAt: time.Now().UTC(),
	}
	data, err := schemas.Encode(&st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.topo.Status.Put(ctxT(t), bus.JobKey(tenant, id), data); err != nil {
		t.Fatal(err)
	}
}

// TestDecideChecksTheJobsState (finding 4): a person's answer is taken only
// for the step the job is at, and only while the fleet could not settle it
// (the step is on the judge's panel: paused for a person, or waiting for
// the panel). Before, `decide` on a paused healthy job overrode the step
// and the job ended unsolved; a step far beyond the open one, or one
// decided already (a replay), was recorded too. A refused answer writes
// nothing.
func TestDecideChecksTheJobsState(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	const open = 5
	type status struct {
		state string
		steps int64
		rung  string
	}
	for _, tc := range []struct {
		name     string
		control  string  // the record's control ("" for run)
		finished string  // the job ended in this state ("" for not)
		status   *status // nil: the job has no status yet
		step     int64
		want     error // nil: taken
		says     string
	}{
		{name: "paused for a person", status: &status{schemas.StatePaused, open, schemas.RungPanel}, step: open},
		{name: "waiting for the panel", status: &status{schemas.StateRunning, open, schemas.RungPanel}, step: open},
		{name: "paused for a person, pause asked", control: schemas.ControlPause, status: &status{schemas.StatePaused, open, schemas.RungPanel}, step: open},
		{name: "paused healthy job", control: schemas.ControlPause, status: &status{schemas.StatePaused, open, ""}, step: open,
			want: jobs.ErrNotWaiting, says: "step 5 of acme/paused-healthy-job is being voted on (the job is paused"},
		{name: "running healthy job", status: &status{schemas.StateRunning, open, ""}, step: open,
			want: jobs.ErrNotWaiting, says: "is being voted on"},
		{name: "stronger model voting", status: &status{schemas.StateRunning, open, schemas.RungStrongerModel}, step: open,
			want: jobs.ErrNotWaiting, says: "is being voted on"},
		{name: "step decided already", status: &status{schemas.StatePaused, open, schemas.RungPanel}, step: open - 1,
			want: jobs.ErrNotWaiting, says: "step 4 of acme/step-decided-already was decided already (the job is at step 5)"},
		{name: "step far beyond", status: &status{schemas.StatePaused, open, schemas.RungPanel}, step: 1 << 40,
			want: jobs.ErrNotWaiting, says: "step 1099511627776 of acme/step-far-beyond has not been reached (the job is at step 5)"},
		{name: "never started", step: 0, want: jobs.ErrNotWaiting, says: "has not started"},
		{name: "being cancelled", control: schemas.ControlCancel, status: &status{schemas.StatePaused, open, schemas.RungPanel}, step: open,
			want: jobs.ErrFinished, says: "is being cancelled"},
		{name: "finished", finished: schemas.StateSolved, status: &status{schemas.StateSolved, 7, ""}, step: open,
			want: jobs.ErrFinished, says: "ended solved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			id = strings.ReplaceAll(id, ",", "")
			r.register(t, record(t, "acme", id, 10, 1, time.Now().UTC()))
			if tc.control != "" {
				if _, err := jobs.Control(ctxT(t), r.topo, "acme", id, tc.control); err != nil {
					t.Fatal(err)
				}
			}
			if tc.finished != "" {
				if err := jobs.MarkFinished(ctxT(t), r.topo, "acme", id, tc.finished); err != nil {
					t.Fatal(err)
				}
			}
			if s := tc.status; s != nil {
				r.putStatus(t, "acme", id, s.state, s.steps, s.rung)
			}
			_, before := r.get(t, "acme", id)
			d := schemas.PersonDecision{Step: tc.step, VoteKey: "a move", By: "alice"}
			rec, err := jobs.Decide(ctxT(t), r.topo, "acme", id, d)
			got, after := r.get(t, "acme", id)
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("Decide = %v, want %v saying %q", err, tc.want, tc.says)
				}
				if after != before || got.Decision != nil {
					t.Errorf("a refused answer wrote the record (revision %d -> %d, decision %+v)", before, after, got.Decision)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decide = %v, want it taken", err)
			}
			if rec.Decision == nil || rec.Decision.Step != tc.step || rec.Decision.VoteKey != "a move" || rec.Decision.At.IsZero() ||
				rec.Control != schemas.ControlRun || got.Decision == nil || got.Control != schemas.ControlRun {
				t.Errorf("record after Decide: returned %+v, stored %+v; want the decision and control run", rec, got)
			}
		})
	}
	if _, err := jobs.Decide(ctxT(t), r.topo, "acme", "nope", schemas.PersonDecision{Step: 0, VoteKey: "x", By: "alice"}); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("Decide of an unknown job = %v, want ErrNotFound", err)
	}
	for _, d := range []schemas.PersonDecision{{Step: -1, VoteKey: "x", By: "a"}, {VoteKey: "", By: "a"}, {VoteKey: "x"}} {
		if _, err := jobs.Decide(ctxT(t), r.topo, "acme", "nope", d); !errors.Is(err, jobs.ErrInvalid) {
			t.Errorf("Decide(%+v) = %v, want ErrInvalid", d, err)
		}
	}
}

// TestDecideReplayedAfterTheStepMovedOn: the same answer sent again once
// its step was decided is refused; sent again while the step still waits
// it is harmless (the same answer).
func TestDecideReplayedAfterTheStepMovedOn(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 10, 1, time.Now().UTC()))
	r.putStatus(t, "acme", "j1", schemas.StatePaused, 5, schemas.RungPanel)
	d := schemas.PersonDecision{Step: 5, VoteKey: "a move", By: "alice"}
	for range 2 {
		if _, err := jobs.Decide(ctxT(t), r.topo, "acme", "j1", d); err != nil {
			t.Fatalf("Decide while the step waits: %v", err)
		}
	}
	// The owner journals the answer and moves on.
	r.putStatus(t, "acme", "j1", schemas.StateRunning, 6, "")
	_, before := r.get(t, "acme", "j1")
	if _, err := jobs.Decide(ctxT(t), r.topo, "acme", "j1", d); !errors.Is(err, jobs.ErrNotWaiting) || !strings.Contains(err.Error(), "decided already") {
		t.Errorf("replayed Decide = %v, want ErrNotWaiting: decided already", err)
	}
	if _, after := r.get(t, "acme", "j1"); after != before {
		t.Errorf("the replay wrote the record")
	}
}

// TestApply: a person's control request is checked as Control is, says
// whether it changed anything, and refuses an unknown action or job.
func TestApply(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 3, 1, time.Now().UTC()))
	for i, s := range []struct {
		action  string
		want    error
		changed bool
		control string
	}{
		{schemas.ActionPause, nil, true, schemas.ControlPause},
		{schemas.ActionPause, nil, false, schemas.ControlPause},
		{schemas.ActionResume, nil, true, schemas.ControlRun},
		{schemas.ActionResume, nil, false, schemas.ControlRun},
		{"run", jobs.ErrInvalid, false, ""},
		{schemas.ActionCancel, nil, true, schemas.ControlCancel},
		{schemas.ActionCancel, nil, false, schemas.ControlCancel},
		{schemas.ActionResume, jobs.ErrFinished, false, ""},
	} {
		out, err := jobs.Apply(ctxT(t), r.topo, "acme", "j1", schemas.ControlRequest{Action: s.action})
		if !errors.Is(err, s.want) || s.want == nil && err != nil {
			t.Fatalf("step %d: Apply(%s) = %v, want %v", i, s.action, err, s.want)
		}
		if s.want == nil && (out.Changed != s.changed || out.Record.Control != s.control) {
			t.Errorf("step %d: Apply(%s) = changed %v, control %q; want %v, %q", i, s.action, out.Changed, out.Record.Control, s.changed, s.control)
		}
	}
	if _, err := jobs.Apply(ctxT(t), r.topo, "acme", "nope", schemas.ControlRequest{Action: schemas.ActionPause}); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("Apply to an unknown job = %v, want ErrNotFound", err)
	}
	if _, err := jobs.Apply(ctxT(t), r.topo, "Not A Tenant", "j1", schemas.ControlRequest{Action: schemas.ActionPause}); !errors.Is(err, jobs.ErrInvalid) {
		t.Errorf("Apply to a malformed tenant = %v, want ErrInvalid", err)
	}
}

// TestControlAfterTheReport: a job's report is out before its owner marks
// the registry finished; a control asked in between (right after Wait
// returned) is refused as for a finished job, and changes nothing.
func TestControlAfterTheReport(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	rec := record(t, "acme", "j2", 3, 1, time.Now().UTC())
	r.register(t, rec)
	now := time.Now().UTC()
	rep := schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport), Tenant: "acme", JobID: "j2",
		Task: rec.Spec.Task, Params: rec.Spec.Params, K: rec.Spec.K, State: schemas.StateSolved, Solved: true,
		TotalSteps: 7, Figures: schemas.Figures{Steps: 7, Samples: 7, Votes: 7, RedFlags: map[string]int64{}},
		TraceSHA256: strings.Repeat("ab", 32), StartedAt: now.Add(-time.Minute), FinishedAt: now,
	}
	data, err := schemas.Encode(&rep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.topo.Reports.Put(ctxT(t), bus.JobKey("acme", "j2"), data); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{schemas.ActionPause, schemas.ActionCancel, schemas.ActionResume} {
		if _, err := jobs.Apply(ctxT(t), r.topo, "acme", "j2", schemas.ControlRequest{Action: action}); !errors.Is(err, jobs.ErrFinished) {
			t.Errorf("Apply(%s) after the report = %v, want ErrFinished", action, err)
		}
	}
	if got, _ := r.get(t, "acme", "j2"); got.Control != schemas.ControlRun {
		t.Errorf("control %q after refused requests, want run", got.Control)
	}
}

// TestProblems: every refusal becomes a reply's problem with its code, and
// the coordinator's message.
func TestProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code string
	}{
		{jobs.ErrInvalid, schemas.CodeInvalid},
		{jobs.ErrNotFound, schemas.CodeNotFound},
		{jobs.ErrFinished, schemas.CodeFinished},
		{jobs.ErrNotWaiting, schemas.CodeNotWaiting},
		{errors.New("nats: timeout"), schemas.CodeUnavailable},
	} {
		err := errors.Join(errors.New("context"), tc.err)
		rep := jobs.Reply("acme", "j1", jobs.Outcome{}, err)
		if rep.Problem == nil || rep.Problem.Code != tc.code || rep.Problem.Message != err.Error() || rep.Record != nil {
			t.Errorf("Reply(%v) = %+v, want problem %s with its message", tc.err, rep, tc.code)
		}
		if _, err := schemas.Encode(rep); err != nil {
			t.Errorf("the reply does not encode: %v", err)
		}
	}
}
