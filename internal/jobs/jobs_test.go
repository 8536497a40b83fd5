package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hanoiSpec is a hanoi job of disks with margin k, defaults to be filled.
func hanoiSpec(id string, disks, k int) schemas.JobSpec {
	return schemas.JobSpec{
		Header: schemas.NewHeader(schemas.KindJobSpec), Tenant: schemas.DefaultTenant, JobID: id,
		Task: "hanoi", Params: json.RawMessage(fmt.Sprintf(`{"disks":%d}`, disks)), K: k,
	}
}

// TestSubmitFinishedJob: a job id whose job has finished (its report is in
// the reports bucket, its submission long out of the stream's duplicate
// window) is not run again. The same job is answered as a duplicate and
// Wait returns its report; a different job (another disk count or k) is
// refused with ErrConflict. Either way nothing is enqueued.
func TestSubmitFinishedJob(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := topology.Config{Storage: jetstream.MemoryStorage}
	topo, err := topology.Ensure(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	queued := func() uint64 {
		t.Helper()
		s, err := js.Stream(ctx, topo.NS.JobsStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	// The finished job: 4 disks, k 1, as a coordinator reports it.
	now := time.Now().UTC()
	done := schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport), Tenant: schemas.DefaultTenant, JobID: "x",
		Task: "hanoi", Params: json.RawMessage(`{"disks":4}`), K: 1, State: schemas.StateSolved, Solved: true,
		TotalSteps: 15, Figures: schemas.Figures{Steps: 15, Samples: 15, Votes: 15, RedFlags: map[string]int64{}},
		TraceSHA256: strings.Repeat("ab", 32), StartedAt: now.Add(-time.Hour), FinishedAt: now.Add(-time.Hour),
	}
	data, err := schemas.Encode(&done)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Reports.Put(ctx, bus.JobKey(done.Tenant, done.JobID), data); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		spec schemas.JobSpec
	}{
		{"other disks", hanoiSpec("x", 3, 1)},
		{"other k", hanoiSpec("x", 4, 2)},
	} {
		spec := tc.spec
		sub, err := jobs.Submit(ctx, js, cfg, &spec, builtin.Registry())
		if !errors.Is(err, jobs.ErrConflict) {
			t.Errorf("%s: Submit = %+v, %v; want ErrConflict", tc.name, sub, err)
		} else if !strings.Contains(err.Error(), "default/x") {
			t.Errorf("%s: %v does not name the job", tc.name, err)
		}
		if n := queued(); n != 0 {
			t.Fatalf("%s: a refused submit enqueued %d jobs", tc.name, n)
		}
	}

	same := hanoiSpec("x", 4, 1)
	same.Params = json.RawMessage(`{ "disks": 4 }`) // another spelling of the same params
	sub, err := jobs.Submit(ctx, js, cfg, &same, builtin.Registry())
	if err != nil || !sub.Duplicate || sub.JobID != "x" || sub.Tenant != schemas.DefaultTenant {
		t.Fatalf("Submit of the finished job again = %+v, %v; want a duplicate", sub, err)
	}
	if n := queued(); n != 0 {
		t.Fatalf("resubmitting a finished job enqueued %d jobs", n)
	}
	rep, err := jobs.Wait(ctx, topo, same.Tenant, same.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TraceSHA256 != done.TraceSHA256 || !rep.StartedAt.Equal(done.StartedAt) || rep.Steps != 15 {
		t.Errorf("Wait returned %+v, want the finished job's report", rep)
	}
	if err := jobs.CheckReport(same, rep); err != nil {
		t.Errorf("CheckReport of the same job: %v", err)
	}
	spaced := rep
	spaced.Params = json.RawMessage(`{ "disks": 4 }`)
	if err := jobs.CheckReport(same, spaced); err != nil {
		t.Errorf("CheckReport with the params spelt otherwise: %v", err)
	}
	if err := jobs.CheckReport(hanoiSpec("x", 3, 1), rep); !errors.Is(err, jobs.ErrConflict) {
		t.Errorf("CheckReport of another job: %v, want ErrConflict", err)
	}

	// A new id is queued as usual.
	fresh := hanoiSpec("y", 4, 1)
	if sub, err := jobs.Submit(ctx, js, cfg, &fresh, builtin.Registry()); err != nil || sub.Duplicate {
		t.Fatalf("Submit of a new job = %+v, %v", sub, err)
	}
	if n := queued(); n != 1 {
		t.Errorf("job stream holds %d jobs after a new submit, want 1", n)
	}
}

// TestSubmitIntakeOnly: what a tenant's identity may do. On a server
// without a fleet the submit fails (ErrNoFleet) and creates nothing; on a
// fleet it only queues the job (no registry write). The same job queued
// again before a coordinator registered it is queued once more (the
// message id another tenant could have taken counts only once the
// registry holds the job); once registered it is a duplicate, and a
// different job under the id is ErrConflict, with nothing queued.
func TestSubmitIntakeOnly(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := topology.Config{Storage: jetstream.MemoryStorage}

	spec := hanoiSpec("i1", 3, 1)
	if _, err := jobs.Submit(ctx, js, cfg, &spec, builtin.Registry(), jobs.IntakeOnly()); !errors.Is(err, topology.ErrNoFleet) {
		t.Fatalf("intake-only submit without a fleet: %v, want ErrNoFleet", err)
	}
	names := js.StreamNames(ctx)
	if n := len(collect(names.Name())); n != 0 || names.Err() != nil {
		t.Fatalf("intake-only submit without a fleet created %d streams (%v)", n, names.Err())
	}

	topo, err := topology.Ensure(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	queued := func() uint64 {
		t.Helper()
		s, err := js.Stream(ctx, topo.NS.JobsStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	for i, want := range []uint64{1, 2} {
		spec := hanoiSpec("i1", 3, 1)
		sub, err := jobs.Submit(ctx, js, cfg, &spec, builtin.Registry(), jobs.IntakeOnly())
		if err != nil || sub.Duplicate {
			t.Fatalf("intake-only submit %d = %+v, %v; want queued", i+1, sub, err)
		}
		if n := queued(); n != want {
			t.Fatalf("after intake-only submit %d the job stream holds %d, want %d", i+1, n, want)
		}
		if _, _, err := jobs.Get(ctx, topo, spec.Tenant, spec.JobID); !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("intake-only submit wrote the registry: %v", err)
		}
	}

	// A coordinator registers it.
	spec = hanoiSpec("i1", 3, 1)
	if err := jobs.Prepare(ctx, &spec, taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)); err != nil {
		t.Fatal(err)
	}
	rec := schemas.JobRecord{Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: spec.Tenant, JobID: spec.JobID,
		Spec: spec, Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: time.Now().UTC()}
	if err := jobs.Register(ctx, topo, &rec); err != nil {
		t.Fatal(err)
	}
	again := hanoiSpec("i1", 3, 1)
	if sub, err := jobs.Submit(ctx, js, cfg, &again, builtin.Registry(), jobs.IntakeOnly()); err != nil || !sub.Duplicate {
		t.Errorf("intake-only resubmit of a registered job = %+v, %v; want a duplicate", sub, err)
	}
	other := hanoiSpec("i1", 4, 1)
	if _, err := jobs.Submit(ctx, js, cfg, &other, builtin.Registry(), jobs.IntakeOnly()); !errors.Is(err, jobs.ErrConflict) {
		t.Errorf("intake-only submit of another job under a registered id: %v, want ErrConflict", err)
	}
	if n := queued(); n != 2 {
		t.Errorf("the job stream holds %d after a duplicate and a conflict, want still 2", n)
	}
}

func collect(ch <-chan string) []string {
	var out []string
	for s := range ch {
		out = append(out, s)
	}
	return out
}
