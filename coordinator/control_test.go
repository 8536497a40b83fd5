package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// logBuffer is a slog handler's writer the test can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gate holds the fake model's answers for one step until opened.
type gate struct {
	step int64
	open chan struct{}
	once sync.Once
}

func newGate(step int64) *gate { return &gate{step: step, open: make(chan struct{})} }

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// wait blocks a call for the gated step until the gate opens.
func (g *gate) wait(ctx context.Context, c fleettest.Call) error {
	if !c.Known || c.Step != g.step {
		return nil
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func askCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestControlHealthyJob (finding 4): through the coordinators' control
// service, pause is idempotent (twice is paused, the second changes
// nothing), and a person's answer for a paused healthy job is refused:
// before, it overrode the step and the job ended unsolved. Resumed, the job
// ends solved with the golden trace, no step overridden. Unknown jobs,
// malformed requests and finished jobs get a clear refusal.
func TestControlHealthyJob(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, held = 4, 1, 11, 3
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	g := newGate(held)
	t.Cleanup(g.release)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 16), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if err := g.wait(ctx, c); err != nil {
			return llm.Response{}, err
		}
		return fleettest.Right(c), nil
	})
	env.StartVoter(model, voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	env.Submit(&spec)
	ns, tenant, id := env.Bus.Namespace, spec.Tenant, spec.JobID
	fleettest.Eventually(t, 20*time.Second, func() bool {
		st, err := jobs.Status(askCtx(t), env.Topo, tenant, id)
		return err == nil && st.State == schemas.StateRunning && st.Steps == held
	}, "the job never reached step %d", held)

	pause := schemas.ControlRequest{Action: schemas.ActionPause}
	out, err := jobs.Ask(askCtx(t), env.NC, ns, tenant, id, pause)
	if err != nil || !out.Changed || out.Record.Control != schemas.ControlPause {
		t.Fatalf("pause: %+v, %v; want it changed to pause", out, err)
	}
	out, err = jobs.Ask(askCtx(t), env.NC, ns, tenant, id, pause)
	if err != nil || out.Changed || out.Record.Control != schemas.ControlPause {
		t.Fatalf("pause again: %+v, %v; want pause, nothing changed", out, err)
	}
	g.release()
	var st schemas.JobStatus
	fleettest.Eventually(t, 20*time.Second, func() bool {
		st, err = jobs.Status(askCtx(t), env.Topo, tenant, id)
		return err == nil && st.State == schemas.StatePaused
	}, "the job did not pause: %+v", st)

	// A person answers the paused healthy job's open step, with a move
	// that is not the right one: refused, nothing recorded.
	keys, _ := fleettest.Golden(disks)
	wrong := keys[st.Steps+1]
	for _, step := range []int64{st.Steps, st.Steps - 1, 1 << 40} {
		_, err := jobs.AskDecide(askCtx(t), env.NC, ns, tenant, id, schemas.DecideRequest{Step: step, VoteKey: wrong, By: "mallory"})
		if !errors.Is(err, jobs.ErrNotWaiting) {
			t.Errorf("decide step %d of a paused healthy job: %v, want ErrNotWaiting", step, err)
		}
	}
	if rec, _, err := jobs.Get(askCtx(t), env.Topo, tenant, id); err != nil || rec.Decision != nil || rec.Control != schemas.ControlPause {
		t.Errorf("record after the refused answers: %+v, %v; want no decision, still paused", rec, err)
	}

	out, err = jobs.Ask(askCtx(t), env.NC, ns, tenant, id, schemas.ControlRequest{Action: schemas.ActionResume})
	if err != nil || !out.Changed || out.Record.Control != schemas.ControlRun {
		t.Fatalf("resume: %+v, %v", out, err)
	}
	rep := env.Wait(spec)
	checkSolved(t, rep, disks)
	if rep.ArbiterDecisions != 0 {
		t.Errorf("arbiter decisions %d at %v, want none: no step was overridden", rep.ArbiterDecisions, rep.ArbiterSteps)
	}

	// Refusals, each with its reason. (The record says finished just after
	// the report is out.)
	fleettest.Eventually(t, 10*time.Second, func() bool {
		rec, _, err := jobs.Get(askCtx(t), env.Topo, tenant, id)
		return err == nil && rec.Finished
	}, "the record never said finished")
	for _, tc := range []struct {
		name, job, action string
		want              error
		says              string
	}{
		{"finished job", id, schemas.ActionCancel, jobs.ErrFinished, "ended solved"},
		{"unknown job", "nope", schemas.ActionPause, jobs.ErrNotFound, "unknown job: default/nope"},
	} {
		_, err := jobs.Ask(askCtx(t), env.NC, ns, tenant, tc.job, schemas.ControlRequest{Action: tc.action})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
	for _, tc := range []struct {
		name, subject, body string
	}{
		{"malformed body", ns.ControlSubject(tenant, id), `{"version":1,"kind":"control_request","action":"explode"}`},
		{"a decide body on the control subject", ns.ControlSubject(tenant, id), `{"version":1,"kind":"decide_request","step":0,"vote_key":"x","by":"a"}`},
		{"malformed tenant", ns.ControlSubject("Not_A_Tenant", id), `{"version":1,"kind":"control_request","action":"pause"}`},
		// Only the subject names the tenant and job: a body that names
		// them too (another tenant's) is refused, not obeyed.
		{"a control body naming a tenant and job", ns.ControlSubject("beta", id), `{"version":1,"kind":"control_request","action":"cancel","tenant":"` + tenant + `","job_id":"` + id + `"}`},
		{"a decide body naming a tenant and job", ns.DecideSubject("beta", id), `{"version":1,"kind":"decide_request","step":0,"vote_key":"x","by":"a","tenant":"` + tenant + `","job_id":"` + id + `"}`},
	} {
		msg, err := env.NC.Request(tc.subject, []byte(tc.body), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var rep schemas.ControlReply
		if err := schemas.Decode(msg.Data, &rep); err != nil || rep.Problem == nil || rep.Problem.Code != schemas.CodeInvalid {
			t.Errorf("%s: reply %s (%v), want an invalid problem", tc.name, msg.Data, err)
		}
	}
}

// TestDecideThroughTheService: a job paused for a person (every sample of
// a step red-flagged, nothing for the panel to choose from) is decided
// through the coordinators' decide service; answers for other steps are
// refused and logged; the job runs on from the person's answer, and the
// same answer replayed once the step moved on is refused.
func TestDecideThroughTheService(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, hard = 4, 1, 47, 3
	env := fleettest.New(t)
	var logs logBuffer
	env.StartCoordinator(coordinator.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	later := newGate(hard + 2) // holds the job after the decided step
	t.Cleanup(later.release)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if err := later.wait(ctx, c); err != nil {
			return llm.Response{}, err
		}
		if c.Known && c.Step == hard {
			return fleettest.Garbage(), nil
		}
		return fleettest.Right(c), nil
	})
	env.StartVoter(model, voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.MaxSamplesPerStep = 3
	spec.Escalation = &schemas.EscalationPolicy{Panel: true}
	env.Submit(&spec)
	ns, tenant, id := env.Bus.Namespace, spec.Tenant, spec.JobID
	var st schemas.JobStatus
	fleettest.Eventually(t, 30*time.Second, func() bool {
		st, _ = jobs.Status(askCtx(t), env.Topo, tenant, id)
		return st.State == schemas.StatePaused
	}, "the job did not pause for a person: %+v", st)
	if st.Steps != hard || st.Rung != schemas.RungPanel {
		t.Fatalf("paused at step %d on rung %q, want step %d on the panel's rung", st.Steps, st.Rung, hard)
	}

	keys, _ := fleettest.Golden(disks)
	for _, step := range []int64{hard + 1, 1 << 40, hard - 1} {
		_, err := jobs.AskDecide(askCtx(t), env.NC, ns, tenant, id, schemas.DecideRequest{Step: step, VoteKey: keys[hard], By: "alice"})
		if !errors.Is(err, jobs.ErrNotWaiting) {
			t.Errorf("decide step %d while step %d waits: %v, want ErrNotWaiting", step, hard, err)
		}
	}
	if l := logs.String(); !strings.Contains(l, "person's decision refused") || !strings.Contains(l, "step 1099511627776") {
		t.Errorf("the refusal of step 2^40 was not logged:\n%s", l)
	}

	answer := schemas.DecideRequest{Step: hard, VoteKey: keys[hard], By: "alice"}
	out, err := jobs.AskDecide(askCtx(t), env.NC, ns, tenant, id, answer)
	if err != nil || !out.Changed || out.Record.Decision == nil || out.Record.Decision.Step != hard || out.Record.Control != schemas.ControlRun {
		t.Fatalf("decide step %d: %+v, %v; want the decision recorded and the job asked to run", hard, out, err)
	}
	fleettest.Eventually(t, 30*time.Second, func() bool {
		st, _ = jobs.Status(askCtx(t), env.Topo, tenant, id)
		return st.State == schemas.StateRunning && st.Steps > hard
	}, "the job did not run on from the person's answer: %+v", st)
	if _, err := jobs.AskDecide(askCtx(t), env.NC, ns, tenant, id, answer); !errors.Is(err, jobs.ErrNotWaiting) || !strings.Contains(err.Error(), "decided already") {
		t.Errorf("the answer replayed after the step moved on: %v, want ErrNotWaiting: decided already", err)
	}
	later.release()
	rep := env.Wait(spec)
	if !rep.Solved || rep.TraceSHA256 != fleettest.GoldenTrace(disks) || rep.ArbiterDecisions != 1 || rep.ArbiterSteps[0] != hard {
		t.Errorf("state %s, trace %s, arbiter decisions %d at %v: want solved, the person's at step %d",
			rep.State, rep.TraceSHA256, rep.ArbiterDecisions, rep.ArbiterSteps, hard)
	}
}

// TestControlNoResponders: with no coordinator serving, a request fails
// with nats.ErrNoResponders at once, so a client can tell "nobody serves"
// from a refusal.
func TestControlNoResponders(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	spec := fleettest.HanoiSpec(3, 1, 1)
	env.Submit(&spec)
	_, err := jobs.Ask(askCtx(t), env.NC, env.Bus.Namespace, spec.Tenant, spec.JobID, schemas.ControlRequest{Action: schemas.ActionPause})
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("Ask without a coordinator: %v, want nats.ErrNoResponders", err)
	}
}

// TestControlReplyMustBeInbox: a request's reply subject is the sender's
// to choose and the server does not check it. A control request whose
// reply names another tenant's job record (or a sample subject) is
// refused unanswered: the coordinator never publishes there with its own
// rights. A genuine request after it (same subscription, so handled after
// it) is answered.
func TestControlReplyMustBeInbox(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	ns := env.Bus.Namespace
	fleettest.Eventually(t, 10*time.Second, func() bool {
		_, err := jobs.Ask(askCtx(t), env.NC, ns, "alpha", "x", schemas.ControlRequest{Action: schemas.ActionPause})
		return !errors.Is(err, nats.ErrNoResponders)
	}, "the control service never came up")
	spy, err := env.NC.SubscribeSync(ns.SampleSubject("beta", "job1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, reply := range []string{"$KV." + ns.JobsBucket() + ".beta.job1", ns.SampleSubject("beta", "job1")} {
		if err := env.NC.PublishMsg(&nats.Msg{Subject: ns.ControlSubject("alpha", "x"), Reply: reply, Data: []byte(`{"kind":"control_request","action":"pause"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = jobs.Ask(askCtx(t), env.NC, ns, "alpha", "x", schemas.ControlRequest{Action: schemas.ActionPause})
	if !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("genuine request: %v, want ErrNotFound (answered)", err)
	}
	if e, err := env.Topo.Jobs.Get(askCtx(t), "beta.job1"); err == nil {
		t.Errorf("a control reply was written into beta's job record: %q", e.Value())
	}
	if m, err := spy.NextMsg(10 * time.Millisecond); err == nil {
		t.Errorf("a control reply was published on a sample subject: %q", m.Data)
	}
}
