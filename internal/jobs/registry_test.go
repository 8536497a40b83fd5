package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// registry is a fresh server with the topology, for registry tests.
type registry struct {
	js   jetstream.JetStream
	cfg  topology.Config
	topo *topology.Topology
}

func newRegistry(t *testing.T) registry {
	t.Helper()
	cfg := topology.Config{Storage: jetstream.MemoryStorage}
	js, topo := testkit.StartTopology(t)
	return registry{js: js, cfg: cfg, topo: topo}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// record is a queued registry record of a hanoi job, as Submit writes it.
func record(t *testing.T, tenant, id string, disks, k int, submitted time.Time) schemas.JobRecord {
	t.Helper()
	spec := hanoiSpec(id, disks, k)
	spec.Tenant, spec.SubmittedAt = tenant, submitted
	if err := jobs.Prepare(context.Background(), &spec, taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)); err != nil {
		t.Fatal(err)
	}
	return schemas.JobRecord{
		Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: tenant, JobID: id, Spec: spec,
		Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: submitted,
	}
}

func (r registry) register(t *testing.T, rec schemas.JobRecord) {
	t.Helper()
	if err := jobs.Register(ctxT(t), r.topo, &rec); err != nil {
		t.Fatalf("Register %s/%s: %v", rec.Tenant, rec.JobID, err)
	}
}

func (r registry) get(t *testing.T, tenant, id string) (schemas.JobRecord, uint64) {
	t.Helper()
	rec, rev, err := jobs.Get(ctxT(t), r.topo, tenant, id)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", tenant, id, err)
	}
	return rec, rev
}

// queued is the number of messages in the job stream.
func (r registry) queued(t *testing.T) uint64 {
	t.Helper()
	s, err := r.js.Stream(ctxT(t), r.topo.NS.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestRegister: a new job is stored as given; the same job again is
// ErrExists and a different job under the id (any field of its spec but
// when it was submitted) ErrConflict, naming it and what differs; in both
// cases the record is left as it was.
func TestRegister(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec := record(t, "acme", "j1", 4, 2, now)
	r.register(t, rec)
	got, rev := r.get(t, "acme", "j1")
	if got.Spec.Task != "hanoi" || got.Spec.K != 2 || string(got.Spec.Params) != string(rec.Spec.Params) ||
		got.Control != schemas.ControlRun || got.State != schemas.StateQueued || got.Finished || !got.Spec.SubmittedAt.Equal(now) {
		t.Errorf("stored record %+v, want %+v", got, rec)
	}

	same := record(t, "acme", "j1", 4, 2, now.Add(time.Minute)) // resubmitted later
	same.Spec.Params = json.RawMessage(`{ "disks" : 4 }`)       // and spelt otherwise
	other := func(change func(*schemas.JobSpec)) schemas.JobRecord {
		rec := record(t, "acme", "j1", 4, 2, now)
		change(&rec.Spec)
		return rec
	}
	rest := 0.3
	tests := []struct {
		name string
		rec  schemas.JobRecord
		want error
		says string // in the conflict: the field and both values
	}{
		{"same job", same, jobs.ErrExists, ""},
		{"other params", record(t, "acme", "j1", 5, 2, now), jobs.ErrConflict, `params {"disks":4} (this one: {"disks":5})`},
		{"other k", record(t, "acme", "j1", 4, 3, now), jobs.ErrConflict, "k 2 (this one: 3)"},
		{"other seed", other(func(s *schemas.JobSpec) { s.Seed = 8 }), jobs.ErrConflict, "seed 0 (this one: 8)"},
		{"other max samples", other(func(s *schemas.JobSpec) { s.MaxSamplesPerStep = 50 }), jobs.ErrConflict, "max_samples_per_step 100 (this one: 50)"},
		{"other temperature", other(func(s *schemas.JobSpec) { s.TemperatureRest = &rest }), jobs.ErrConflict, "temperature_rest 0.1 (this one: 0.3)"},
	}
	for _, tt := range tests {
		err := jobs.Register(ctxT(t), r.topo, &tt.rec)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Register = %v, want %v", tt.name, err, tt.want)
		}
		if tt.want == jobs.ErrConflict && (err == nil || !strings.Contains(err.Error(), "acme/j1") || !strings.Contains(err.Error(), tt.says)) {
			t.Errorf("%s: %v does not name the job and %q", tt.name, err, tt.says)
		}
		if after, rev2 := r.get(t, "acme", "j1"); rev2 != rev || !after.Spec.SubmittedAt.Equal(now) {
			t.Errorf("%s: record changed (revision %d -> %d)", tt.name, rev, rev2)
		}
	}

	// The same id in another tenant is another job.
	r.register(t, record(t, "other", "j1", 5, 3, now))
	if got, _ := r.get(t, "other", "j1"); got.Spec.K != 3 {
		t.Errorf("other tenant's job has k %d, want 3", got.Spec.K)
	}
}

// TestGetRefs: unknown jobs are ErrNotFound, malformed references
// ErrInvalid, for every call that takes one.
func TestGetRefs(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 3, 1, time.Now().UTC()))
	calls := map[string]func(tenant, id string) error{
		"Get": func(tenant, id string) error { _, _, err := jobs.Get(ctxT(t), r.topo, tenant, id); return err },
		"Status": func(tenant, id string) error {
			_, err := jobs.Status(ctxT(t), r.topo, tenant, id)
			return err
		},
		"Result": func(tenant, id string) error {
			_, err := jobs.Result(ctxT(t), r.topo, tenant, id)
			return err
		},
		"Control": func(tenant, id string) error {
			_, err := jobs.Control(ctxT(t), r.topo, tenant, id, schemas.ControlPause)
			return err
		},
		"MarkState": func(tenant, id string) error {
			return jobs.MarkState(ctxT(t), r.topo, tenant, id, schemas.StateRunning)
		},
		"MarkFinished": func(tenant, id string) error {
			return jobs.MarkFinished(ctxT(t), r.topo, tenant, id, schemas.StateSolved)
		},
	}
	refs := []struct {
		tenant, id string
		want       error
	}{
		{"acme", "nope", jobs.ErrNotFound},
		{"nobody", "j1", jobs.ErrNotFound},
		{"acme", "", jobs.ErrInvalid},
		{"acme", "a b", jobs.ErrInvalid},
		{"acme", "a.b", jobs.ErrInvalid},
		{"acme", "j1.>", jobs.ErrInvalid},
		{"", "j1", jobs.ErrInvalid},
		{"ACME", "j1", jobs.ErrInvalid},
		{"ac.me", "j1", jobs.ErrInvalid},
	}
	for name, call := range calls {
		for _, ref := range refs {
			err := call(ref.tenant, ref.id)
			if !errors.Is(err, ref.want) {
				t.Errorf("%s(%q, %q) = %v, want %v", name, ref.tenant, ref.id, err, ref.want)
			}
			if ref.want == jobs.ErrNotFound && (err == nil || !strings.Contains(err.Error(), ref.tenant+"/"+ref.id)) {
				t.Errorf("%s(%q, %q): %v does not name the job", name, ref.tenant, ref.id, err)
			}
		}
	}
	if n := len(list(t, r, "")); n != 1 {
		t.Errorf("registry holds %d jobs after refused calls, want 1", n)
	}
}

// TestControl: pause, resume and cancel move a job's control; asking for
// the control the job already has writes nothing (a repeated or replayed
// request is harmless); a job being cancelled cannot be paused or resumed,
// and a finished job cannot be controlled at all. A refused control leaves
// the record as it was.
func TestControl(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 3, 1, time.Now().UTC()))
	steps := []struct {
		control string
		want    error  // nil: accepted
		after   string // the record's control afterwards
		writes  bool   // the record is written
	}{
		{schemas.ControlPause, nil, schemas.ControlPause, true},
		{schemas.ControlPause, nil, schemas.ControlPause, false}, // twice is fine, and writes nothing
		{schemas.ControlRun, nil, schemas.ControlRun, true},
		{schemas.ControlRun, nil, schemas.ControlRun, false},
		{"stop", jobs.ErrInvalid, schemas.ControlRun, false},
		{"", jobs.ErrInvalid, schemas.ControlRun, false},
		{schemas.ControlPause, nil, schemas.ControlPause, true},
		{schemas.ControlCancel, nil, schemas.ControlCancel, true}, // a paused job can be cancelled
		{schemas.ControlCancel, nil, schemas.ControlCancel, false},
		{schemas.ControlRun, jobs.ErrFinished, schemas.ControlCancel, false},
		{schemas.ControlPause, jobs.ErrFinished, schemas.ControlCancel, false},
	}
	for i, s := range steps {
		_, before := r.get(t, "acme", "j1")
		rec, err := jobs.Control(ctxT(t), r.topo, "acme", "j1", s.control)
		if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Fatalf("step %d: Control(%q) = %v, want %v", i, s.control, err, s.want)
		}
		got, rev := r.get(t, "acme", "j1")
		if got.Control != s.after {
			t.Errorf("step %d: control %q after Control(%q), want %q", i, got.Control, s.control, s.after)
		}
		if s.want == nil && rec.Control != s.after {
			t.Errorf("step %d: Control returned %q, want %q", i, rec.Control, s.after)
		}
		if (rev != before) != s.writes {
			t.Errorf("step %d: Control(%q) moved the revision %d -> %d, want a write: %v", i, s.control, before, rev, s.writes)
		}
	}

	r.register(t, record(t, "acme", "done", 3, 1, time.Now().UTC()))
	if err := jobs.MarkFinished(ctxT(t), r.topo, "acme", "done", schemas.StateSolved); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{schemas.ControlPause, schemas.ControlRun, schemas.ControlCancel} {
		_, err := jobs.Control(ctxT(t), r.topo, "acme", "done", c)
		if !errors.Is(err, jobs.ErrFinished) || !strings.Contains(err.Error(), "solved") {
			t.Errorf("Control(%q) of a finished job = %v, want ErrFinished saying how it ended", c, err)
		}
	}
}

// TestMarkStateAndFinished: MarkState records where an unfinished job
// stands and never un-finishes one; MarkFinished ends it.
func TestMarkStateAndFinished(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 3, 1, time.Now().UTC()))
	before, _ := r.get(t, "acme", "j1")
	if err := jobs.MarkState(ctxT(t), r.topo, "acme", "j1", schemas.StateRunning); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.get(t, "acme", "j1"); got.State != schemas.StateRunning || got.Finished || got.UpdatedAt.Before(before.UpdatedAt) {
		t.Errorf("after MarkState(running): %+v", got)
	}
	if err := jobs.MarkFinished(ctxT(t), r.topo, "acme", "j1", schemas.StateCancelled); err != nil {
		t.Fatal(err)
	}
	if err := jobs.MarkState(ctxT(t), r.topo, "acme", "j1", schemas.StatePaused); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.get(t, "acme", "j1"); got.State != schemas.StateCancelled || !got.Finished {
		t.Errorf("MarkState after MarkFinished changed the record to state %q finished %v", got.State, got.Finished)
	}
}

// TestConcurrentUpdates: updates racing on one record all land (each
// retries its compare-and-set), so none is lost.
func TestConcurrentUpdates(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 3, 1, time.Now().UTC()))
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range n {
		wg.Go(func() { _, errs[i] = jobs.Control(ctxT(t), r.topo, "acme", "j1", schemas.ControlPause) })
		wg.Go(func() { errs[n+i] = jobs.MarkState(ctxT(t), r.topo, "acme", "j1", schemas.StateRunning) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("update %d: %v", i, err)
		}
	}
	got, rev := r.get(t, "acme", "j1")
	if got.Control != schemas.ControlPause || got.State != schemas.StateRunning {
		t.Errorf("record %q/%q, want both updates (pause, running)", got.Control, got.State)
	}
	// One write per MarkState; the pauses write once, the first: a pause
	// asked again changes nothing.
	if rev != 1+1+n {
		t.Errorf("revision %d, want %d (one write per MarkState, one for the pauses)", rev, 1+1+n)
	}
}

func list(t *testing.T, r registry, tenant string) []string {
	t.Helper()
	recs, err := jobs.List(ctxT(t), r.topo, tenant)
	if err != nil {
		t.Fatalf("List(%q): %v", tenant, err)
	}
	out := []string{}
	for _, rec := range recs {
		out = append(out, rec.Tenant+"/"+rec.JobID)
	}
	return out
}

// TestList: jobs come oldest submission first (ties by key), filtered by
// tenant; an empty registry lists nothing.
func TestList(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	if got := list(t, r, ""); len(got) != 0 {
		t.Fatalf("empty registry lists %v", got)
	}
	base := time.Now().UTC()
	for _, j := range []struct {
		tenant, id string
		at         time.Duration
	}{
		{"acme", "late", 3 * time.Second},
		{"beta", "b1", time.Second},
		{"acme", "early", 0},
		{"acme", "tie-b", 2 * time.Second},
		{"acme", "tie-a", 2 * time.Second},
		{"acme2", "x", 4 * time.Second}, // a tenant whose name extends another's
	} {
		r.register(t, record(t, j.tenant, j.id, 3, 1, base.Add(j.at)))
	}
	tests := []struct {
		tenant string
		want   []string
	}{
		{"", []string{"acme/early", "beta/b1", "acme/tie-a", "acme/tie-b", "acme/late", "acme2/x"}},
		{"acme", []string{"acme/early", "acme/tie-a", "acme/tie-b", "acme/late"}},
		{"beta", []string{"beta/b1"}},
		{"nobody", []string{}},
	}
	for _, tt := range tests {
		if got := list(t, r, tt.tenant); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("List(%q) = %v, want %v", tt.tenant, got, tt.want)
		}
	}
}

// TestStatus: a job no coordinator has reported on is queued as its record
// says; a coordinator's figures are shown; the record decides paused and
// finished states (a paused job has no coordinator); control is shown while
// pause or cancel is asked.
func TestStatus(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 3, 1, time.Now().UTC()))
	status := func() schemas.JobStatus {
		t.Helper()
		st, err := jobs.Status(ctxT(t), r.topo, "acme", "j1")
		if err != nil {
			t.Fatal(err)
		}
		if st.Tenant != "acme" || st.JobID != "j1" {
			t.Errorf("status names %s/%s", st.Tenant, st.JobID)
		}
		return st
	}
	if st := status(); st.State != schemas.StateQueued || st.Control != "" || st.Steps != 0 {
		t.Errorf("new job: state %q control %q steps %d, want queued, no control", st.State, st.Control, st.Steps)
	}
	if _, err := jobs.Control(ctxT(t), r.topo, "acme", "j1", schemas.ControlPause); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.State != schemas.StateQueued || st.Control != schemas.ControlPause {
		t.Errorf("pause asked: state %q control %q, want queued, pause", st.State, st.Control)
	}

	// A coordinator reports progress.
	rep := schemas.JobStatus{
		Header: schemas.NewHeader(schemas.KindJobStatus), Tenant: "acme", JobID: "j1", State: schemas.StateRunning,
		Steps: 3, TotalSteps: 7, Progress: 3.0 / 7, Samples: 9, Votes: 9, Coordinator: "c1", UpdatedAt: time.Now().UTC(),
	}
	data, err := schemas.Encode(&rep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.topo.Status.Put(ctxT(t), bus.JobKey("acme", "j1"), data); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Control(ctxT(t), r.topo, "acme", "j1", schemas.ControlRun); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.State != schemas.StateRunning || st.Steps != 3 || st.Coordinator != "c1" || st.Control != "" {
		t.Errorf("running: %+v, want the coordinator's figures and no control", st)
	}
	if err := jobs.MarkState(ctxT(t), r.topo, "acme", "j1", schemas.StatePaused); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.State != schemas.StatePaused || st.Steps != 3 || st.Coordinator != "" {
		t.Errorf("paused: state %q steps %d coordinator %q, want paused at step 3, on no coordinator", st.State, st.Steps, st.Coordinator)
	}
	if _, err := jobs.Control(ctxT(t), r.topo, "acme", "j1", schemas.ControlCancel); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.Control != schemas.ControlCancel {
		t.Errorf("cancel asked: control %q", st.Control)
	}
	// Its owner publishes the final status before it marks the record
	// finished: in between the job is cancelled, not paused.
	rep.State, rep.Coordinator = schemas.StateCancelled, "c1"
	if data, err = schemas.Encode(&rep); err != nil {
		t.Fatal(err)
	}
	if _, err := r.topo.Status.Put(ctxT(t), bus.JobKey("acme", "j1"), data); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.State != schemas.StateCancelled || st.Control != "" {
		t.Errorf("final status, record not yet finished: state %q control %q, want cancelled, no control", st.State, st.Control)
	}
	if err := jobs.MarkFinished(ctxT(t), r.topo, "acme", "j1", schemas.StateCancelled); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.State != schemas.StateCancelled || st.Control != "" {
		t.Errorf("finished: state %q control %q, want cancelled, no control", st.State, st.Control)
	}
}

// TestResult: an unfinished job has no result yet (saying where it is); a
// finished one returns its report.
func TestResult(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	r.register(t, record(t, "acme", "j1", 3, 1, time.Now().UTC()))
	_, err := jobs.Result(ctxT(t), r.topo, "acme", "j1")
	if !errors.Is(err, jobs.ErrNotFinished) || !strings.Contains(err.Error(), "acme/j1") || !strings.Contains(err.Error(), schemas.StateQueued) {
		t.Errorf("Result of a queued job = %v, want ErrNotFinished naming it and its state", err)
	}

	now := time.Now().UTC()
	done := schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport), Tenant: "acme", JobID: "j1",
		Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 1, State: schemas.StateSolved, Solved: true,
		TotalSteps: 7, Figures: schemas.Figures{Steps: 7, Samples: 7, Votes: 7, RedFlags: map[string]int64{}},
		TraceSHA256: strings.Repeat("cd", 32), StartedAt: now, FinishedAt: now,
	}
	data, err := schemas.Encode(&done)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.topo.Reports.Put(ctxT(t), bus.JobKey("acme", "j1"), data); err != nil {
		t.Fatal(err)
	}
	got, err := jobs.Result(ctxT(t), r.topo, "acme", "j1")
	if err != nil || got.TraceSHA256 != done.TraceSHA256 || got.Steps != 7 || !got.Solved {
		t.Errorf("Result = %+v, %v; want the stored report", got, err)
	}
}

// TestSubmitRegisters: Submit registers the job and queues it once; the
// same job again (submitted later) is a duplicate that writes nothing; a
// different job under the id (other params, seed, sample cap or
// temperature) is ErrConflict and writes nothing either.
func TestSubmitRegisters(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	spec := hanoiSpec("s1", 4, 2)
	sub, err := jobs.Submit(ctxT(t), r.js, r.cfg, &spec, builtin.Registry())
	if err != nil || sub.Duplicate || sub.JobID != "s1" || sub.Tenant != schemas.DefaultTenant {
		t.Fatalf("Submit = %+v, %v", sub, err)
	}
	rec, rev := r.get(t, schemas.DefaultTenant, "s1")
	if rec.State != schemas.StateQueued || rec.Control != schemas.ControlRun || rec.Finished || rec.Spec.K != 2 {
		t.Errorf("registered %+v, want queued, run", rec)
	}
	if err := rec.Validate(); err != nil {
		t.Errorf("registered record does not validate: %v", err)
	}
	if n := r.queued(t); n != 1 {
		t.Fatalf("job stream holds %d messages, want 1", n)
	}

	again := hanoiSpec("s1", 4, 2)
	if sub, err := jobs.Submit(ctxT(t), r.js, r.cfg, &again, builtin.Registry()); err != nil || !sub.Duplicate {
		t.Errorf("Submit of the same job again = %+v, %v; want a duplicate", sub, err)
	}
	for _, change := range []func(*schemas.JobSpec){
		func(s *schemas.JobSpec) { s.Params = json.RawMessage(`{"disks":5}`) },
		func(s *schemas.JobSpec) { s.Seed = 7 },
		func(s *schemas.JobSpec) { s.MaxSamplesPerStep = 40 },
		func(s *schemas.JobSpec) { s.TemperatureFirst = 0.5 },
	} {
		other := hanoiSpec("s1", 4, 2)
		change(&other)
		if _, err := jobs.Submit(ctxT(t), r.js, r.cfg, &other, builtin.Registry()); !errors.Is(err, jobs.ErrConflict) {
			t.Errorf("Submit of another job under the id = %v, want ErrConflict", err)
		}
	}
	if n := r.queued(t); n != 1 {
		t.Errorf("job stream holds %d messages after resubmits, want 1", n)
	}
	if _, rev2 := r.get(t, schemas.DefaultTenant, "s1"); rev2 != rev {
		t.Errorf("resubmits rewrote the record (revision %d -> %d)", rev, rev2)
	}
	if got := list(t, r, ""); fmt.Sprint(got) != "[default/s1]" {
		t.Errorf("registry lists %v, want only default/s1", got)
	}
}
