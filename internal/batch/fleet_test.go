package batch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// fleet is an in-process fleet (real nats-server and redis-server) with
// the simulated model and a batch store on it; coordinators are the
// test's to start.
type fleet struct {
	env   *fleettest.Env
	store *batch.Store
}

func newFleet(t testing.TB, sim simllm.Config) *fleet {
	t.Helper()
	env := fleettest.New(t)
	rn := fleettest.StartSim(t, sim)
	env.StartVoter(fleettest.SimClient(t, rn, llm.Config{}), voter.Config{Concurrency: 32})
	return &fleet{env: env, store: batch.NewStore(env.Topo, taskreg.New(env.Topo.Tasks, env.Tasks, taskspec.CompileSpec))}
}

// hanoiLines is a JSONL batch of n hanoi jobs, custom_ids req-1.., with
// extra lines inserted before the given (0-based) positions.
func hanoiLines(n, disks, k int, extra map[int]string) string {
	var b strings.Builder
	for i := range n {
		if l, ok := extra[i]; ok {
			b.WriteString(l + "\n")
		}
		fmt.Fprintf(&b, `{"custom_id":"req-%d","task":"hanoi","params":{"disks":%d},"k":%d,"seed":%d}`+"\n", i+1, disks, k, i)
	}
	return b.String()
}

// wait waits for the batch to end, failing the test if a role fails
// first; check sees every record on the way.
func (f *fleet) wait(t testing.TB, tenant, id string, check func(schemas.BatchRecord)) schemas.BatchRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		rec schemas.BatchRecord
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := f.store.Wait(ctx, tenant, id, check)
		done <- result{rec, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("batch %s: %v", id, r.err)
		}
		return r.rec
	case err := <-f.env.Fleet.Failed():
		cancel()
		<-done
		t.Fatalf("batch %s: a role failed: %v", id, err)
	}
	return schemas.BatchRecord{}
}

// checkEnded checks the counts of an ended batch add up.
func checkEnded(t *testing.T, rec schemas.BatchRecord) {
	t.Helper()
	c := rec.Counts
	if c.Completed+c.Failed+c.Cancelled != c.Total || len(rec.Pending) != 0 || rec.CompletedAt == nil {
		t.Errorf("ended batch %+v: completed %d + failed %d + cancelled %d != total %d, or jobs pending",
			rec, c.Completed, c.Failed, c.Cancelled, c.Total)
	}
}

// TestBatchRuns: a batch with a bad line runs the rest, never more than
// its window at once, in input order; its output has one line per input
// line, in order, each with its custom_id and its job's report or error.
func TestBatchRuns(t *testing.T) {
	t.Parallel()
	f := newFleet(t, simllm.Config{Accuracy: 1})
	f.env.StartCoordinator(coordinator.Config{})
	ctx := ctxFor(t)
	const n, window = 9, 3
	in := hanoiLines(n, 2, 1, map[int]string{4: `{"custom_id":"bad","task":"hanoi","params":{"disks":-3},"k":1}`})
	rec, err := f.store.Create(ctx, "acme", strings.NewReader(in), batch.CreateOptions{Window: window, Priority: 4})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	maxPending := 0
	end := f.wait(t, "acme", rec.ID, func(r schemas.BatchRecord) {
		mu.Lock()
		defer mu.Unlock()
		maxPending = max(maxPending, len(r.Pending))
		if !sortedLines(r.Pending) {
			t.Errorf("pending lines %v are not fed in input order", r.Pending)
		}
	})
	checkEnded(t, end)
	if want := (schemas.BatchCounts{Total: n + 1, Valid: n, Invalid: 1, Submitted: n, Completed: n, Failed: 1}); end.Counts != want || end.State != schemas.BatchCompleted {
		t.Errorf("ended %s with %+v, want completed with %+v", end.State, end.Counts, want)
	}
	if maxPending > window {
		t.Errorf("%d jobs unfinished at once, window %d", maxPending, window)
	}
	out := output(t, ctx, f.store, "acme", rec.ID, false)
	if len(out) != n+1 {
		t.Fatalf("%d output lines, want %d", len(out), n+1)
	}
	for i, o := range out {
		line := int64(i + 1)
		if o.Line != line {
			t.Errorf("output line %d is input line %d", i+1, o.Line)
		}
		if line == 5 {
			if o.CustomID != "bad" || o.Error == nil || o.Error.Code != schemas.BatchErrInvalidParams || o.Response != nil {
				t.Errorf("bad line's output: %+v", o)
			}
			continue
		}
		want := fmt.Sprintf("req-%d", i+1)
		if line > 5 {
			want = fmt.Sprintf("req-%d", i)
		}
		if o.CustomID != want || o.Error != nil || o.Response == nil || o.Response.JobID != o.JobID ||
			o.JobID != schemas.BatchJobID(rec.ID, line) || o.Response.State != schemas.StateSolved {
			t.Errorf("line %d: %+v, want %s solved", line, o, want)
		}
	}
	if errs := output(t, ctx, f.store, "acme", rec.ID, true); len(errs) != 1 || errs[0].Line != 5 {
		t.Errorf("error file %+v, want line 5 only", errs)
	}
	// The jobs carry the batch, the line and the batch's priority.
	job, _, err := jobs.Get(ctx, f.env.Topo, "acme", schemas.BatchJobID(rec.ID, 2))
	if err != nil || job.Spec.BatchID != rec.ID || job.Spec.BatchLine != 2 || job.Spec.Priority != 4 || job.Spec.Tenant != "acme" {
		t.Errorf("line 2's job: %+v, %v", job.Spec, err)
	}
}

func sortedLines(ls []int64) bool {
	for i := 1; i < len(ls); i++ {
		if ls[i] <= ls[i-1] {
			return false
		}
	}
	return true
}

// TestBatchCancel: cancelling a running batch stops feeding it and
// cancels its unfinished jobs; lines never fed say batch_cancelled.
func TestBatchCancel(t *testing.T) {
	t.Parallel()
	f := newFleet(t, simllm.Config{Accuracy: 1, Latency: 20 * time.Millisecond})
	f.env.StartCoordinator(coordinator.Config{})
	ctx := ctxFor(t)
	const n = 12
	rec, err := f.store.Create(ctx, "acme", strings.NewReader(hanoiLines(n, 5, 1, nil)), batch.CreateOptions{Window: 2})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end := f.wait(t, "acme", rec.ID, func(r schemas.BatchRecord) {
		if r.Counts.Completed >= 1 {
			once.Do(func() {
				if _, err := f.store.Cancel(ctx, "acme", rec.ID); err != nil {
					t.Errorf("Cancel: %v", err)
				}
			})
		}
	})
	checkEnded(t, end)
	if end.State != schemas.BatchCancelled || end.Counts.Cancelled == 0 || end.Counts.Submitted >= n {
		t.Errorf("ended %+v, want cancelled with lines never fed", end)
	}
	out := output(t, ctx, f.store, "acme", rec.ID, false)
	if len(out) != n {
		t.Fatalf("%d output lines, want %d", len(out), n)
	}
	var never, cancelled, done int64
	for _, o := range out {
		switch {
		case o.Error != nil && o.Error.Code == schemas.BatchErrBatchCancelled:
			never++
			if _, _, err := jobs.Get(ctx, f.env.Topo, "acme", o.JobID); !errors.Is(err, jobs.ErrNotFound) {
				t.Errorf("line %d was never fed, yet its job is registered (%v)", o.Line, err)
			}
		case o.Error != nil && o.Error.Code == schemas.BatchErrJobCancelled:
			cancelled++
		case o.Error == nil && o.Response != nil:
			done++
		default:
			t.Errorf("line %d: %+v", o.Line, o)
		}
	}
	c := end.Counts
	if never != c.Valid-c.Submitted || cancelled+never != c.Cancelled || done != c.Completed {
		t.Errorf("output: %d never fed, %d cancelled, %d done; counts %+v", never, cancelled, done, c)
	}
	if _, err := f.store.Cancel(ctx, "acme", rec.ID); err != nil {
		t.Errorf("cancelling a cancelled batch: %v", err)
	}
}

// TestBatchSurvivesCoordinatorDeath: the coordinator feeding a batch is
// killed mid-batch; another takes the batch's lease over once it lapses
// and feeds the rest from the record's cursor. Every line is counted
// exactly once.
func TestBatchSurvivesCoordinatorDeath(t *testing.T) {
	t.Parallel()
	f := newFleet(t, simllm.Config{Accuracy: 1, Latency: 5 * time.Millisecond})
	cfg := coordinator.Config{LeaseTTL: time.Second, ScanInterval: 50 * time.Millisecond}
	cfg.ID = "coordinator-1"
	c1 := f.env.StartCoordinator(cfg)
	ctx := ctxFor(t)
	const n = 16
	rec, err := f.store.Create(ctx, "acme", strings.NewReader(hanoiLines(n, 3, 1, nil)), batch.CreateOptions{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	var once sync.Once
	end := f.wait(t, "acme", rec.ID, func(r schemas.BatchRecord) {
		if r.Counts.Completed >= 3 {
			once.Do(func() {
				c1.Kill()
				cfg.ID = "coordinator-2"
				f.env.StartCoordinator(cfg)
				close(killed)
			})
		}
	})
	select {
	case <-killed:
	default:
		t.Fatal("the batch ended before its coordinator was killed")
	}
	checkEnded(t, end)
	if want := (schemas.BatchCounts{Total: n, Valid: n, Submitted: n, Completed: n}); end.Counts != want || end.State != schemas.BatchCompleted {
		t.Errorf("ended %s with %+v, want completed with %+v", end.State, end.Counts, want)
	}
	out := output(t, ctx, f.store, "acme", rec.ID, false)
	for i, o := range out {
		if o.Line != int64(i+1) || o.Response == nil || o.Response.State != schemas.StateSolved {
			t.Errorf("line %d: %+v", i+1, o)
		}
	}
	if len(out) != n {
		t.Errorf("%d output lines, want %d", len(out), n)
	}
	l, err := f.env.Topo.Batches.Get(ctx, bus.JobKey("acme", rec.ID+"-lease"))
	if err != nil || !strings.Contains(string(l.Value()), "coordinator-2") {
		t.Errorf("the batch's lease is not coordinator-2's: %v", err)
	}
}

// TestBatchWindowQuota: a tenant's max_running_jobs quota lowers a
// batch's window.
func TestBatchWindowQuota(t *testing.T) {
	t.Parallel()
	f := newFleet(t, simllm.Config{Accuracy: 1})
	ctx := ctxFor(t)
	q := schemas.TenantQuota{Header: schemas.NewHeader(schemas.KindTenantQuota), Tenant: "acme", MaxRunningJobs: 1, UpdatedAt: time.Now().UTC()}
	data, err := schemas.Encode(&q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Topo.Quotas.Put(ctx, "acme", data); err != nil {
		t.Fatal(err)
	}
	f.env.StartCoordinator(coordinator.Config{})
	rec, err := f.store.Create(ctx, "acme", strings.NewReader(hanoiLines(5, 2, 1, nil)), batch.CreateOptions{Window: 8})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	maxPending := 0
	end := f.wait(t, "acme", rec.ID, func(r schemas.BatchRecord) {
		mu.Lock()
		defer mu.Unlock()
		maxPending = max(maxPending, len(r.Pending))
	})
	checkEnded(t, end)
	if end.Counts.Completed != 5 || maxPending != 1 {
		t.Errorf("completed %d with up to %d jobs at once; want 5, one at a time", end.Counts.Completed, maxPending)
	}
}
