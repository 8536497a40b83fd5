package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// testCtx is a context bounded by the test's deadline safety net.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dial returns a client on env's server, closed at cleanup.
func dial(t *testing.T, env *fleettest.Env, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(testCtx(t), env.NATS.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func hanoi(disks, k int, seed int64) schemas.JobSpec {
	return schemas.JobSpec{Task: "hanoi", Params: json.RawMessage(`{"disks":` + string(rune('0'+disks)) + `}`), K: k, Seed: seed}
}

// TestSubmitWaitResult: a job submitted through the client runs on the
// fleet; Wait sees its status and returns the report Result returns; the
// same job again is a duplicate, another job under its id a conflict.
func TestSubmitWaitResult(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	c := dial(t, env, client.WithTenant("acme"))
	ctx := testCtx(t)

	spec := hanoi(3, 1, 5)
	spec.JobID = "job-1"
	sub, err := c.Submit(ctx, spec)
	if err != nil || sub != (client.Submitted{Tenant: "acme", JobID: "job-1"}) {
		t.Fatalf("submit: %+v, %v", sub, err)
	}
	statuses := 0
	rep, err := c.Wait(ctx, "job-1", func(st schemas.JobStatus) {
		if st.Tenant != "acme" || st.JobID != "job-1" {
			t.Errorf("status of %s/%s", st.Tenant, st.JobID)
		}
		statuses++
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Solved || rep.Steps != 7 || rep.Tenant != "acme" {
		t.Fatalf("report: solved %v steps %d tenant %s", rep.Solved, rep.Steps, rep.Tenant)
	}
	if statuses == 0 {
		t.Error("Wait passed no status update")
	}
	got, err := c.Result(ctx, "acme/job-1")
	if err != nil || got.TraceSHA256 != rep.TraceSHA256 {
		t.Fatalf("result: %v, trace %s want %s", err, got.TraceSHA256, rep.TraceSHA256)
	}
	// The registry says finished just after the report is out.
	var info client.JobInfo
	fleettest.Eventually(t, 10*time.Second, func() bool {
		info, err = c.Job(ctx, "job-1")
		return err == nil && info.Record.Finished
	}, "job never finished in the registry: %+v, %v", info, err)
	if info.Status.State != schemas.StateSolved || info.Record.Spec.Task != "hanoi" {
		t.Errorf("job: state %s task %s", info.Status.State, info.Record.Spec.Task)
	}

	if sub, err := c.Submit(ctx, spec); err != nil || !sub.Duplicate {
		t.Errorf("same job again: %+v, %v; want a duplicate", sub, err)
	}
	other := spec
	other.K = 2
	if _, err := c.Submit(ctx, other); !errors.Is(err, client.ErrConflict) {
		t.Errorf("another job under the id: %v, want ErrConflict", err)
	}
	if _, err := c.Pause(ctx, "job-1"); !errors.Is(err, client.ErrFinished) {
		t.Errorf("pause a finished job: %v, want ErrFinished", err)
	}
	recs, err := c.List(ctx, client.ListOptions{})
	if err != nil || len(recs) != 1 || recs[0].JobID != "job-1" {
		t.Errorf("list: %d jobs, %v", len(recs), err)
	}
	if recs, err := c.List(ctx, client.ListOptions{Tenant: "other"}); err != nil || len(recs) != 0 {
		t.Errorf("another tenant's list: %d jobs, %v", len(recs), err)
	}
}

// TestErrors: each refusal matches its sentinel, with the fleet's message.
func TestErrors(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	c := dial(t, env)
	ctx := testCtx(t)
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"unknown job status", func() error { _, err := c.Status(ctx, "nope"); return err }, client.ErrNotFound},
		{"unknown job result", func() error { _, err := c.Result(ctx, "t1/nope"); return err }, client.ErrNotFound},
		{"malformed id", func() error { _, err := c.Job(ctx, "a b"); return err }, client.ErrInvalid},
		{"malformed tenant", func() error { _, err := c.Cancel(ctx, "A!/x"); return err }, client.ErrInvalid},
		{"invalid spec", func() error { _, err := c.Submit(ctx, hanoi(3, -1, 1)); return err }, client.ErrInvalid},
		{"unknown task", func() error {
			_, err := c.Submit(ctx, schemas.JobSpec{Task: "nope", Params: json.RawMessage(`{}`), K: 1})
			return err
		}, client.ErrInvalid},
		{"both tenant and all", func() error {
			_, err := c.List(ctx, client.ListOptions{Tenant: "a", AllTenants: true})
			return err
		}, client.ErrInvalid},
		{"decide unknown job", func() error {
			_, err := c.Decide(ctx, "nope", client.Decision{Step: 1, VoteKey: "x", By: "me"})
			return err
		}, client.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Fatalf("%v, want %v", err, tt.want)
			}
			if err.Error() == tt.want.Error() {
				t.Errorf("message %q says no more than the sentinel", err)
			}
		})
	}
}

// TestControlsWithoutCoordinator: with no coordinator running, controls
// are written to the registry with the same checks; a queued job says no
// coordinator has taken it; Result is ErrNotFinished.
func TestControlsWithoutCoordinator(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	c := dial(t, env)
	ctx := testCtx(t)
	sub, err := c.Submit(ctx, hanoi(3, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Result(ctx, sub.JobID); !errors.Is(err, client.ErrNotFinished) {
		t.Errorf("result of a queued job: %v, want ErrNotFinished", err)
	}
	if why, err := c.QueuedReason(ctx, sub.JobID); err != nil || why != client.NoCoordinator {
		t.Errorf("queued reason %q, %v; want %q", why, err, client.NoCoordinator)
	}
	steps := []struct {
		name    string
		do      func(context.Context, string) (client.Outcome, error)
		control string
		changed bool
	}{
		{"pause", c.Pause, schemas.ControlPause, true},
		{"pause again", c.Pause, schemas.ControlPause, false},
		{"resume", c.Resume, schemas.ControlRun, true},
		{"cancel", c.Cancel, schemas.ControlCancel, true},
	}
	for _, s := range steps {
		out, err := s.do(ctx, sub.JobID)
		if err != nil || out.Changed != s.changed || out.Record.Control != s.control {
			t.Fatalf("%s: %+v, %v; want control %s, changed %v", s.name, out, err, s.control, s.changed)
		}
	}
	if _, err := c.Resume(ctx, sub.JobID); !errors.Is(err, client.ErrFinished) {
		t.Errorf("resume a job being cancelled: %v, want ErrFinished", err)
	}
	if st, err := c.Status(ctx, sub.JobID); err != nil || st.State != schemas.StateQueued || st.Control != schemas.ControlCancel {
		t.Errorf("status: %+v, %v; want queued, cancel asked", st, err)
	}
}

// TestControlsThroughCoordinator: a running job is paused and cancelled
// through the coordinators' control service and ends cancelled.
func TestControlsThroughCoordinator(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	c := dial(t, env)
	ctx := testCtx(t)
	sub, err := c.Submit(ctx, hanoi(3, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	// No voter yet: the job is taken and waits at its first step.
	var st schemas.JobStatus
	fleettest.Eventually(t, 20*time.Second, func() bool {
		st, err = c.Status(ctx, sub.JobID)
		return err == nil && st.State == schemas.StateRunning
	}, "the job never ran: %+v, %v", st, err)
	if out, err := c.Cancel(ctx, sub.JobID); err != nil || !out.Changed {
		t.Fatalf("cancel: %+v, %v", out, err)
	}
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	rep, err := c.Wait(ctx, sub.JobID, nil)
	if err != nil || rep.State != schemas.StateCancelled {
		t.Fatalf("report: state %s, %v; want cancelled", rep.State, err)
	}
}

// TestNoFleet: a server without a fleet is ErrNoFleet for a reader, and
// only the built-in tasks are known.
func TestNoFleet(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	ctx := testCtx(t)
	c, err := client.Dial(ctx, srv.URL, client.WithName("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Status(ctx, "j1"); !errors.Is(err, client.ErrNoFleet) {
		t.Errorf("status: %v, want ErrNoFleet", err)
	}
	tasks, err := c.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.Resolve(ctx, "hanoi", ""); err != nil {
		t.Errorf("hanoi: %v", err)
	}
	_ = c.Close()
	if _, err := c.Status(ctx, "j1"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("after close: %v, want ErrClosed", err)
	}
}

// TestOptions: invalid options are refused before anything is sent.
func TestOptions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, opts := range [][]client.Option{
		{client.WithTenant("Not A Tenant")},
		{client.WithNamespace("UPPER")},
		{client.WithNKey("a.nk"), client.WithCreds("b.creds")},
	} {
		if _, err := client.Dial(ctx, "nats://127.0.0.1:1", opts...); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%d options: %v, want ErrInvalid", len(opts), err)
		}
	}
	if _, err := client.New(nil); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
}
