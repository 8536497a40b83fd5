package retention_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/retention"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

const day = 24 * time.Hour

// newFleet is an in-process fleet (real nats-server and redis-server)
// whose model always answers right, with one coordinator that does not
// sweep on its own: the tests sweep.
func newFleet(t *testing.T) (*fleettest.Env, *fleettest.Coordinator) {
	t.Helper()
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(nil, func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		return fleettest.Right(c), nil
	})
	env.StartVoter(model, voter.Config{Concurrency: 16})
	c := env.StartCoordinator(coordinator.Config{RetentionInterval: -1})
	return env, c
}

// runJob runs a hanoi job of tenant to its end and waits until its record
// says finished.
func runJob(t *testing.T, env *fleettest.Env, tenant string, disks int) string {
	t.Helper()
	spec := fleettest.HanoiSpec(disks, 1, 7)
	spec.Tenant = tenant
	if rep := env.Run(&spec); rep.State != schemas.StateSolved {
		t.Fatalf("job %s/%s: %s (%s)", tenant, spec.JobID, rep.State, rep.Reason)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool {
		rec, _, err := jobs.Get(t.Context(), env.Topo, tenant, spec.JobID)
		return err == nil && rec.Finished
	}, "job %s/%s never marked finished", tenant, spec.JobID)
	return spec.JobID
}

// journalMsgs is how many journal messages (entries and checkpoints)
// tenant's job has; "" counts every job's.
func journalMsgs(t *testing.T, topo *topology.Topology, tenant, job string) uint64 {
	t.Helper()
	s, err := topo.JS.Stream(t.Context(), topo.NS.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	if job == "" {
		info, err := s.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	filter := topo.NS.JournalSubject(tenant, job)
	filter = filter[:len(filter)-1] + "*"
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func has(t *testing.T, kv jetstream.KeyValue, key string) bool {
	t.Helper()
	_, err := kv.Get(t.Context(), key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// kept is what is left of a job: journal messages, report, status, record.
type kept struct {
	journal                bool
	report, status, record bool
}

func left(t *testing.T, topo *topology.Topology, tenant, job string) kept {
	key := bus.JobKey(tenant, job)
	return kept{journalMsgs(t, topo, tenant, job) > 0, has(t, topo.Reports, key), has(t, topo.Status, key), has(t, topo.Jobs, key)}
}

func newSweeper(t *testing.T, topo *topology.Topology, owner string) *retention.Sweeper {
	t.Helper()
	sw, err := retention.New(t.Context(), topo, retention.Config{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

// TestSweepPolicy: finished jobs lose each kind of data once it is past
// its age (defaults: status after a day, journal after a week, report and
// record after 30 days); a tenant's override and a job's keep-forever are
// respected; jobs not finished (queued, running, paused) keep everything
// however old; a dead letter goes after its tenant's age.
func TestSweepPolicy(t *testing.T) {
	t.Parallel()
	env, coord := newFleet(t)
	topo := env.Topo
	ctx := t.Context()
	acme := runJob(t, env, "acme", 3)
	keep := runJob(t, env, "acme", 3)
	beta := runJob(t, env, "beta", 3)
	if err := coord.Stop(); err != nil { // from here on, nothing runs the unfinished jobs below
		t.Fatal(err)
	}
	sw := newSweeper(t, topo, "sweeper-a")
	if _, err := retention.Set(ctx, sw.Bucket(), "beta", "", schemas.RetentionAges{JournalSeconds: secs(time.Hour), DLQSeconds: secs(0)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.Set(ctx, sw.Bucket(), "acme", keep, schemas.RetentionAges{JournalSeconds: secs(0)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Unfinished jobs, as old as can be, with journal entries.
	old := time.Now().Add(-400 * day)
	done, _, err := jobs.Get(ctx, topo, "acme", acme)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{schemas.StateQueued, schemas.StateRunning, schemas.StatePaused} {
		spec := done.Spec
		spec.JobID = "unfinished-" + st
		rec := schemas.JobRecord{Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: "acme", JobID: spec.JobID, Spec: spec,
			Control: schemas.ControlPause, State: st, UpdatedAt: old}
		if err := jobs.Register(ctx, topo, &rec); err != nil {
			t.Fatal(err)
		}
		if _, err := topo.JS.Publish(ctx, topo.NS.JournalSubject("acme", spec.JobID), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Dead letters of both tenants.
	for _, tenant := range []string{"acme", "beta"} {
		dl := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: topo.NS.SamplesStream(), Seq: uint64(tenant[0]),
			Subject: topo.NS.SampleSubject(tenant, "j1"), Reason: "max_deliveries", Deliveries: 10, At: time.Now().UTC(), Data: []byte(`{}`)}
		if err := bus.PublishDeadLetter(ctx, topo.JS, topo.NS, dl); err != nil {
			t.Fatal(err)
		}
	}

	unfinished := func() {
		t.Helper()
		for _, st := range []string{schemas.StateQueued, schemas.StateRunning, schemas.StatePaused} {
			if got := left(t, topo, "acme", "unfinished-"+st); !got.journal || !got.record {
				t.Errorf("unfinished %s job touched: %+v", st, got)
			}
		}
	}
	now := time.Now()
	for _, step := range []struct {
		at               time.Time
		acme, keep, beta kept
		want             retention.Counts
	}{
		{now, kept{true, true, true, true}, kept{true, true, true, true}, kept{true, true, true, true}, retention.Counts{}},
		// beta's journal (1h) goes first.
		{now.Add(2 * time.Hour), kept{true, true, true, true}, kept{true, true, true, true}, kept{false, true, true, true},
			retention.Counts{Jobs: 1, JournalMessages: int64(0)}},
		// A day: every status. A week: acme's journal and dead letter, but
		// not the journal kept forever, nor beta's dead letter.
		{now.Add(8 * day), kept{false, true, false, true}, kept{true, true, false, true}, kept{false, true, false, true},
			retention.Counts{Jobs: 3, Statuses: 3, DeadLetters: 1}},
		// 30 days: reports and records, but the record of the job whose
		// journal is kept forever stays with it.
		{now.Add(31 * day), kept{false, false, false, false}, kept{true, false, false, true}, kept{false, false, false, false},
			retention.Counts{Jobs: 3, Reports: 3, Records: 2, Leases: 2}},
		{now.Add(400 * day), kept{false, false, false, false}, kept{true, false, false, true}, kept{false, false, false, false}, retention.Counts{}},
	} {
		before := journalMsgs(t, topo, "", "")
		res, err := sw.Sweep(ctx, step.at)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Counts
		wantJournal := got.JournalMessages // checked against the stream below
		got.JournalMessages = 0
		if got != step.want {
			t.Errorf("sweep at +%v: removed %+v, want %+v", step.at.Sub(now).Round(time.Hour), got, step.want)
		}
		if after := journalMsgs(t, topo, "", ""); before-after != uint64(wantJournal) {
			t.Errorf("sweep at +%v: journal went from %d to %d messages, counted %d", step.at.Sub(now).Round(time.Hour), before, after, wantJournal)
		}
		for _, j := range []struct {
			tenant, id string
			want       kept
		}{{"acme", acme, step.acme}, {"acme", keep, step.keep}, {"beta", beta, step.beta}} {
			if got := left(t, topo, j.tenant, j.id); got != j.want {
				t.Errorf("sweep at +%v: %s/%s kept %+v, want %+v", step.at.Sub(now).Round(time.Hour), j.tenant, j.id, got, j.want)
			}
		}
		unfinished()
	}
	dls, err := bus.ListDeadLetters(ctx, topo.JS, topo.NS, "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Subject != topo.NS.SampleSubject("beta", "j1") {
		t.Errorf("dead letters left: %+v, want beta's only (kept forever)", dls)
	}
}

// TestSweepConcurrent: sweepers running at once (several coordinators)
// remove each thing once: the counts add up to what there was, and a
// sweep that finds the lease held says so (ErrBusy).
func TestSweepConcurrent(t *testing.T) {
	t.Parallel()
	env, _ := newFleet(t)
	topo := env.Topo
	var ids []string
	for range 3 {
		ids = append(ids, runJob(t, env, "acme", 2))
	}
	total := journalMsgs(t, topo, "", "")
	at := time.Now().Add(31 * day)
	sweepers := []*retention.Sweeper{newSweeper(t, topo, "a"), newSweeper(t, topo, "b"), newSweeper(t, topo, "c")}
	var (
		mu    sync.Mutex
		sum   retention.Counts
		busy  int
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for _, sw := range sweepers {
		wg.Go(func() {
			<-start
			res, err := sw.Sweep(t.Context(), at)
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, retention.ErrBusy) {
				busy++
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			sum.Jobs += res.Jobs
			sum.JournalMessages += res.JournalMessages
			sum.Reports += res.Reports
			sum.Statuses += res.Statuses
			sum.Records += res.Records
			sum.Leases += res.Leases
		})
	}
	close(start)
	wg.Wait()
	want := retention.Counts{Jobs: 3, JournalMessages: int64(total), Reports: 3, Statuses: 3, Records: 3, Leases: 3}
	if sum != want {
		t.Errorf("sweepers removed %+v in all (%d busy), want %+v", sum, busy, want)
	}
	if n := journalMsgs(t, topo, "", ""); n != 0 {
		t.Errorf("journal holds %d messages after the sweeps", n)
	}
	for _, id := range ids {
		if got := left(t, topo, "acme", id); got != (kept{}) {
			t.Errorf("acme/%s kept %+v", id, got)
		}
	}
	// Not even a purge marker stays behind.
	for _, kv := range []jetstream.KeyValue{topo.Reports, topo.Status, topo.Jobs, topo.Leases} {
		st, err := topo.JS.Stream(t.Context(), "KV_"+kv.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 0 {
			t.Errorf("bucket %s holds %d messages after the sweep", kv.Bucket(), info.State.Msgs)
		}
	}
}

// TestSweepBatches: a finished batch past its age loses its record, lease
// and lines; a running batch keeps its own, and its finished jobs keep
// everything (its runner reads their reports).
func TestSweepBatches(t *testing.T) {
	t.Parallel()
	env, coord := newFleet(t)
	topo := env.Topo
	ctx := t.Context()
	spec := fleettest.HanoiSpec(2, 1, 3)
	spec.Tenant, spec.JobID = "acme", "batch_open-1"
	if rep := env.Run(&spec); rep.State != schemas.StateSolved {
		t.Fatalf("job: %s", rep.State)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool {
		rec, _, err := jobs.Get(ctx, topo, "acme", "batch_open-1")
		return err == nil && rec.Finished
	}, "job never finished")
	if err := coord.Stop(); err != nil {
		t.Fatal(err)
	}
	ended := time.Now().Add(-40 * day).UTC()
	for _, b := range []struct {
		id, state string
	}{{"batch_done", schemas.BatchCompleted}, {"batch_open", schemas.BatchRunning}} {
		rec := schemas.BatchRecord{Header: schemas.NewHeader(schemas.KindBatchRecord), ID: b.id, Tenant: "acme", State: b.state,
			Window: 1, CreatedAt: ended, UpdatedAt: ended}
		if b.state == schemas.BatchCompleted {
			rec.CompletedAt = &ended
		}
		data, err := schemas.Encode(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topo.Batches.Put(ctx, bus.JobKey("acme", b.id), data); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := topo.JS.Publish(ctx, topo.NS.BatchSubject("acme", b.id), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := newSweeper(t, topo, "s").Sweep(ctx, time.Now().Add(31*day))
	if err != nil {
		t.Fatal(err)
	}
	if res.Batches != 1 || res.BatchLines != 2 || res.Jobs != 0 {
		t.Errorf("removed %+v, want the finished batch (1 record, 2 lines) and no job", res.Counts)
	}
	if has(t, topo.Batches, "acme.batch_done") || !has(t, topo.Batches, "acme.batch_open") {
		t.Error("wrong batch record removed")
	}
	if got := left(t, topo, "acme", "batch_open-1"); got != (kept{true, true, true, true}) {
		t.Errorf("a running batch's job lost %+v", got)
	}
}

// TestSweepForgedBatchRecord (issue 19, item 4): a record beta wrote under
// its own key whose body names alpha's running batch, completed in 1970,
// is beta's, not alpha's: the sweep leaves alpha's batch and its lines
// alone, and removes the forged record (and its key's own lines) only
// once the server's time of its write is past beta's age.
func TestSweepForgedBatchRecord(t *testing.T) {
	t.Parallel()
	topo := fleettest.New(t).Topo // no role runs
	ctx := t.Context()
	put := func(key string, rec schemas.BatchRecord) {
		t.Helper()
		data, err := schemas.Encode(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topo.Batches.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	put("alpha.batch_a1", schemas.BatchRecord{Header: schemas.NewHeader(schemas.KindBatchRecord), ID: "batch_a1", Tenant: "alpha",
		State: schemas.BatchRunning, Window: 1, CreatedAt: now, UpdatedAt: now})
	for range 2 {
		if _, err := topo.JS.Publish(ctx, topo.NS.BatchSubject("alpha", "batch_a1"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Unix(0, 0).UTC()
	put("beta.batch_f1", schemas.BatchRecord{Header: schemas.NewHeader(schemas.KindBatchRecord), ID: "batch_a1", Tenant: "alpha",
		State: schemas.BatchCompleted, Window: 1, CreatedAt: old, UpdatedAt: old, CompletedAt: &old})
	alphaLines := func() uint64 {
		t.Helper()
		st, err := topo.JS.Stream(ctx, topo.NS.BatchesStream())
		if err != nil {
			t.Fatal(err)
		}
		subj := topo.NS.BatchSubject("alpha", "batch_a1")
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[subj]
	}
	for _, at := range []time.Time{now.Add(time.Hour), now.Add(31 * day)} {
		res, err := newSweeper(t, topo, "s").Sweep(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		if n := alphaLines(); n != 2 || !has(t, topo.Batches, "alpha.batch_a1") || res.BatchLines != 0 {
			t.Errorf("sweep at %v: alpha's running batch has %d lines (record kept %v), %d lines removed; want all kept",
				at, n, has(t, topo.Batches, "alpha.batch_a1"), res.BatchLines)
		}
		if gone, due := !has(t, topo.Batches, "beta.batch_f1"), at.After(now.Add(30*day)); gone != due {
			t.Errorf("sweep at %v: forged record removed %v, want %v (beta's age from the server's time)", at, gone, due)
		}
	}
}
