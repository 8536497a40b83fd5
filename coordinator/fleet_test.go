package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestConcurrentJobsAreIsolated: jobs of two tenants with the same job id
// and different disk counts run at once on one fleet; each solves with its
// own golden trace (subjects, consumers and Redis keys are per tenant and
// job).
func TestConcurrentJobsAreIsolated(t *testing.T) {
	t.Parallel()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 0.95, Seed: 4}, llm.Config{}, voter.Config{Concurrency: 16})
	jobs := []struct {
		tenant string
		disks  int
	}{{"default", 5}, {"acme", 6}, {"acme-2", 4}}
	specs := make([]schemas.JobSpec, len(jobs))
	for i, j := range jobs {
		specs[i] = fleettest.HanoiSpec(j.disks, 3, int64(100+i))
		specs[i].Tenant, specs[i].JobID = j.tenant, "same-id"
		env.Submit(&specs[i])
	}
	reps := make([]schemas.JobReport, len(jobs))
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i] = env.Wait(specs[i])
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		if reps[i].Tenant != j.tenant || reps[i].JobID != "same-id" {
			t.Errorf("report %d is for %s/%s, want %s/same-id", i, reps[i].Tenant, reps[i].JobID, j.tenant)
		}
		checkSolved(t, reps[i], j.disks)
		checkNoWaste(t, reps[i])
	}
}

// TestCoordinatorHandsJobBack: a coordinator stopped in the middle of a job
// hands it back (nak) without a report; another coordinator takes it and
// runs it to a correct end under a new epoch, ignoring answers of the old
// one.
func TestCoordinatorHandsJobBack(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, stopAt = 4, 2, 13, 5
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if err := fleettest.Wait(ctx, 5*time.Millisecond); err != nil {
			return llm.Response{}, err
		}
		return fleettest.Right(c), nil
	})
	started := make(chan fleettest.Call, 1024)
	model.Notify(started)
	env.StartVoter(model, voter.Config{Concurrency: 8})
	var logs lineBuffer
	c1 := env.StartCoordinator(coordinator.Config{ID: "coordinator-1", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	requests := fleettest.Capture[schemas.SampleRequest](env, bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID))
	env.Submit(&spec)

	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case c := <-started:
			if c.Step >= stopAt {
				break wait
			}
		case <-deadline:
			t.Fatal("the job never reached the step to stop at")
		}
	}
	if err := c1.Stop(); err != nil {
		t.Fatalf("coordinator 1: %v", err)
	}
	// A stopping coordinator says so, and when it is done.
	var stopping, stopped bool
	for _, l := range logs.Lines() {
		stopping = stopping || bytes.Contains(l, []byte(`msg="coordinator stopping`)) && bytes.Contains(l, []byte("running_jobs=1"))
		stopped = stopped || bytes.Contains(l, []byte(`msg="coordinator stopped"`))
	}
	if !stopping || !stopped {
		t.Errorf("coordinator 1 logged stopping %v, stopped %v on SIGTERM", stopping, stopped)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := env.Topo.Reports.Get(ctx, bus.JobKey(spec.Tenant, spec.JobID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("report after the hand-back: %v, want none", err)
	}
	env.StartCoordinator(coordinator.Config{ID: "coordinator-2"})
	rep := env.Wait(spec)
	checkSolved(t, rep, disks)
	epochs := map[int64]bool{}
	for _, r := range requests.All() {
		epochs[r.Epoch] = true
	}
	if len(epochs) != 2 {
		t.Errorf("requests carry %d epochs, want 2 (one per coordinator run)", len(epochs))
	}
}

// TestInvalidJobRefused: a job spec that passes the schema but not the task
// (hanoi with 99 disks), published without the client's checks, gets a
// failed report with the reason; the coordinator goes on with the next job.
func TestInvalidJobRefused(t *testing.T) {
	t.Parallel()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 0.95, Seed: 2}, llm.Config{}, voter.Config{})
	bad := fleettest.HanoiSpec(3, 2, 1)
	bad.Params = json.RawMessage(`{"disks":99}`)
	bad.ApplyDefaults()
	bad.SubmittedAt = time.Now().UTC()
	data, err := schemas.Encode(&bad)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.JS.Publish(ctx, bus.DefaultNamespace.JobSubject(bad.Tenant), data); err != nil {
		t.Fatal(err)
	}
	rep := env.Wait(bad)
	if rep.State != schemas.StateFailed || rep.Solved || rep.Reason == "" || rep.Steps != 0 {
		t.Errorf("state %s solved %v reason %q steps %d, want failed with a reason", rep.State, rep.Solved, rep.Reason, rep.Steps)
	}
	good := fleettest.HanoiSpec(3, 2, 1)
	checkSolved(t, env.Run(&good), 3)
}

// TestNewRunIsNotSkipped: a job run again (after a hand-back) by a
// coordinator whose clock is behind the previous one's gets a smaller
// epoch. Voters that saw a step-decided event of the previous run must not
// skip the new run's samples: they skip only within the event's own epoch.
// The event is simulated with a future epoch: what the voters saw from a
// coordinator whose clock ran 5 seconds ahead.
func TestNewRunIsNotSkipped(t *testing.T) {
	t.Parallel()
	env, _, v := simFleet(t, simllm.Config{Accuracy: 0.95, Seed: 2}, llm.Config{}, voter.Config{Concurrency: 4})
	warm := fleettest.HanoiSpec(2, 1, 1) // the voter is up and subscribed once this solves
	checkSolved(t, env.Run(&warm), 2)

	spec := fleettest.HanoiSpec(3, 2, 1)
	ev, err := json.Marshal(&schemas.StepDecided{
		Header: schemas.NewHeader(schemas.KindStepDecided), Tenant: spec.Tenant, JobID: spec.JobID,
		Step: 3, Epoch: time.Now().Add(5 * time.Second).UnixMilli(),
		VoteKey: "x", Votes: 2, Lead: 2, Samples: 2, DecidedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.NC.Publish(bus.DefaultNamespace.DecidedSubject(spec.Tenant, spec.JobID), ev); err != nil {
		t.Fatal(err)
	}
	env.Submit(&spec)
	rep := env.WaitFor(spec, 15*time.Second)
	checkSolved(t, rep, 3)
	t.Logf("voter %+v", v.Stats())
}

// TestTakeoverKeepsStart: a job whose owner dies (no checkpoint, no hand
// back) is finished by another coordinator, and its report's started_at
// and wall time cover the whole job, not only the new owner's part: the
// start is journaled with the first owner's takeover.
func TestTakeoverKeepsStart(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 4, 1, 17
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if err := fleettest.Wait(ctx, 2*time.Millisecond); err != nil {
			return llm.Response{}, err
		}
		return fleettest.Right(c), nil
	})
	started := make(chan fleettest.Call, 1024)
	model.Notify(started)
	env.StartVoter(model, voter.Config{Concurrency: 4})
	c1 := env.StartCoordinator(coordinator.Config{ID: "coordinator-1", LeaseTTL: time.Second, ScanInterval: 50 * time.Millisecond})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	env.Submit(&spec)
	deadline := time.After(20 * time.Second)
	for c := range started {
		if c.Step >= 4 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the job never reached step 4")
		default:
		}
	}
	c1.Kill()
	killedAt := time.Now()
	env.StartCoordinator(coordinator.Config{ID: "coordinator-2", LeaseTTL: time.Second, ScanInterval: 50 * time.Millisecond})
	rep := env.Wait(spec)
	checkSolved(t, rep, disks)
	if !rep.StartedAt.Before(killedAt) {
		t.Errorf("started_at %s is after the first owner died (%s): the report covers only the new owner's part", rep.StartedAt, killedAt)
	}
	if want := rep.FinishedAt.Sub(rep.StartedAt).Seconds(); rep.WallSeconds < want-0.01 {
		t.Errorf("wall_seconds %.3f, want the whole job's %.3f", rep.WallSeconds, want)
	}
}

// TestIntakeRefusesForgedTenant: the subject proves the tenant. A job
// published on tenant beta's subject whose body names tenant alpha (what
// tenant beta's identity could send on a secured server) is refused: it
// does not run, and nothing is written for alpha (no registry entry, no
// report). Beta's next job runs as usual.
func TestIntakeRefusesForgedTenant(t *testing.T) {
	t.Parallel()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 0.95, Seed: 2}, llm.Config{}, voter.Config{})
	forged := fleettest.HanoiSpec(3, 2, 1)
	forged.Tenant, forged.JobID = "alpha", "forged"
	forged.ApplyDefaults()
	forged.SubmittedAt = time.Now().UTC()
	data, err := schemas.Encode(&forged)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := env.JS.Publish(ctx, bus.DefaultNamespace.JobSubject("beta"), data); err != nil {
		t.Fatal(err)
	}
	good := fleettest.HanoiSpec(3, 2, 1)
	good.Tenant = "beta"
	checkSolved(t, env.Run(&good), 3)
	// Beta's job was queued after the forgery: once the intake has settled
	// every message, the forgery was refused, not put aside.
	cons, err := env.JS.Consumer(ctx, bus.DefaultNamespace.JobsStream(), bus.ConsumerCoordinators)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the intake still holds messages: %d pending, %d unacked", info.NumPending, info.NumAckPending)
		case <-time.After(20 * time.Millisecond):
		}
	}
	key := bus.JobKey("alpha", "forged")
	if _, err := env.Topo.Jobs.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the registry holds the forged alpha job (%v)", err)
	}
	if _, err := env.Topo.Reports.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the reports hold the forged alpha job (%v)", err)
	}
}
