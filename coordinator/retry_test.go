package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// flakyTask is hanoi with a bug on demand: while failures is positive,
// Initial (which every attempt at a job calls once, first) panics and
// counts it down. It records when each attempt started.
type flakyTask struct {
	failures atomic.Int64
	mu       sync.Mutex
	starts   []time.Time
}

const flakyName = "flaky"

var _ task.Task = (*flakyTask)(nil)

func (f *flakyTask) Name() string { return flakyName }

func (f *flakyTask) Bind(params json.RawMessage) (task.Instance, error) {
	in, err := hanoi.Task{}.Bind(params)
	if err != nil {
		return nil, err
	}
	return &flakyInstance{Instance: in.(*hanoi.Instance), t: f}, nil
}

func (f *flakyTask) attempts() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.starts...)
}

type flakyInstance struct {
	*hanoi.Instance
	t *flakyTask
}

func (in *flakyInstance) Initial() task.State {
	in.t.mu.Lock()
	in.t.starts = append(in.t.starts, time.Now())
	in.t.mu.Unlock()
	if in.t.failures.Add(-1) >= 0 {
		panic("flaky task: broken on purpose")
	}
	return in.Instance.Initial()
}

// flakyFleet is a test fleet whose registry also holds a flakyTask.
func flakyFleet(t *testing.T, failures int64) (*fleettest.Env, *flakyTask) {
	t.Helper()
	env := fleettest.New(t)
	ft := &flakyTask{}
	ft.failures.Store(failures)
	env.Tasks = task.NewRegistry(hanoi.Task{}, ft)
	return env, ft
}

// failureCount reads a job's failure count through the store's API: it
// adds one, so it returns the count before plus one (1: none counted).
func failureCount(t *testing.T, env *fleettest.Env, spec schemas.JobSpec) int64 {
	t.Helper()
	n, err := env.Store().AddFailure(context.Background(), store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFailingJobGivesUp: a job whose every attempt fails (its task panics,
// which the coordinator recovers into an error) is retried after
// JobRetryDelay, then twice that, and after MaxJobAttempts failures gets a
// failed report with the reason; its registry record is finished, so no
// coordinator takes it again, and its failure count is cleared.
func TestFailingJobGivesUp(t *testing.T) {
	t.Parallel()
	const delay, maxAttempts = 50 * time.Millisecond, 3
	env, ft := flakyFleet(t, 1<<30)
	env.StartCoordinator(coordinator.Config{JobRetryDelay: delay, MaxJobAttempts: maxAttempts})
	spec := fleettest.HanoiSpec(3, 2, 1)
	spec.Task = flakyName

	rep := env.Run(&spec)
	if rep.State != schemas.StateFailed || rep.Solved || rep.Steps != 0 {
		t.Errorf("state %s solved %v steps %d, want failed", rep.State, rep.Solved, rep.Steps)
	}
	for _, want := range []string{"failed 3 times", "panic", "broken on purpose"} {
		if !strings.Contains(rep.Reason, want) {
			t.Errorf("reason %q does not mention %q", rep.Reason, want)
		}
	}
	if err := rep.Validate(); err != nil {
		t.Errorf("failed report does not validate: %v", err)
	}
	rec, _, err := jobs.Get(context.Background(), env.Topo, spec.Tenant, spec.JobID)
	if err != nil || !rec.Finished || rec.State != schemas.StateFailed {
		t.Errorf("registry record %+v, %v: want finished, failed", rec, err)
	}
	starts := ft.attempts()
	if len(starts) != maxAttempts {
		t.Fatalf("%d attempts, want MaxJobAttempts = %d", len(starts), maxAttempts)
	}
	for i := 1; i < len(starts); i++ {
		if gap, want := starts[i].Sub(starts[i-1]), delay<<(i-1); gap < want {
			t.Errorf("attempt %d started %s after attempt %d, want at least %s (the delay doubles)", i+1, gap, i, want)
		}
	}
	if n := failureCount(t, env, spec); n != 1 {
		t.Errorf("failure count left at %d after the failed report, want it cleared", n-1)
	}
}

// TestFailedAttemptsRetried: a job that fails twice (fewer times than
// MaxJobAttempts) is retried and solves; success clears its failure count.
func TestFailedAttemptsRetried(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 43
	env, ft := flakyFleet(t, 2)
	env.StartCoordinator(coordinator.Config{JobRetryDelay: 10 * time.Millisecond, MaxJobAttempts: 3})
	env.StartVoter(fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), nil), voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.Task = flakyName

	checkSolved(t, env.Run(&spec), disks)
	if n := len(ft.attempts()); n != 3 {
		t.Errorf("%d attempts, want 2 failures and the one that solved", n)
	}
	if n := failureCount(t, env, spec); n != 1 {
		t.Errorf("failure count left at %d after the job solved, want it cleared", n-1)
	}
}

// TestHandBackIsNotAFailure: a job handed back at shutdown has not failed.
// With MaxJobAttempts 2, a job handed back once and then failing once is
// retried (counting deliveries would have given up on it), and solves.
func TestHandBackIsNotAFailure(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 47
	env, ft := flakyFleet(t, 0)
	release := make(chan struct{})
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if err := waitFor(ctx, release); err != nil {
			return llm.Response{}, err
		}
		return fleettest.Right(c), nil
	})
	started := make(chan fleettest.Call, 64)
	model.Notify(started)
	cfg := coordinator.Config{JobRetryDelay: 10 * time.Millisecond, MaxJobAttempts: 2}
	c1cfg := cfg
	c1cfg.ID = "coordinator-1"
	c1 := env.StartCoordinator(c1cfg)
	env.StartVoter(model, voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.Task = flakyName
	env.Submit(&spec)

	select {
	case <-started:
	case <-time.After(gateTimeout):
		t.Fatal("the job never asked for a sample")
	}
	if err := c1.Stop(); err != nil {
		t.Fatalf("coordinator 1: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.Topo.Reports.Get(ctx, bus.JobKey(spec.Tenant, spec.JobID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("report after the hand-back: %v, want none", err)
	}

	ft.failures.Store(1) // the next attempt fails
	close(release)
	c2cfg := cfg
	c2cfg.ID = "coordinator-2"
	env.StartCoordinator(c2cfg)
	rep := env.Wait(spec)
	checkSolved(t, rep, disks)
	if n := len(ft.attempts()); n != 3 {
		t.Errorf("%d attempts, want 3: handed back, failed, solved", n)
	}
}
