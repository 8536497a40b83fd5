package retention_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/lease"
	"github.com/makerfleet/makerfleet/internal/retention"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestSweepUnreadablePolicy: a policy record this build cannot decode (a
// newer build's, with a field it does not know) stops the sweep with an
// error naming it; the job of the tenant that keeps everything forever
// loses nothing (the defaults would have removed all of it).
func TestSweepUnreadablePolicy(t *testing.T) {
	t.Parallel()
	env, coord := newFleet(t)
	topo := env.Topo
	ctx := t.Context()
	id := runJob(t, env, "acme", 2)
	if err := coord.Stop(); err != nil {
		t.Fatal(err)
	}
	sw := newSweeper(t, topo, "s")
	forever := schemas.RetentionAges{JournalSeconds: secs(0), ReportsSeconds: secs(0), RegistrySeconds: secs(0),
		StatusSeconds: secs(0), DLQSeconds: secs(0), BatchesSeconds: secs(0)}
	if _, err := retention.Set(ctx, sw.Bucket(), "acme", "", forever, time.Now()); err != nil {
		t.Fatal(err)
	}
	e, err := sw.Bucket().Get(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec["checkpoints_seconds"] = 0 // as a newer build would write it
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Bucket().Put(ctx, "acme", data); err != nil {
		t.Fatal(err)
	}
	res, err := sw.Sweep(ctx, time.Now().Add(40*day))
	if err == nil || !strings.Contains(err.Error(), "policy acme") {
		t.Errorf("sweep: err %v, want one naming the policy acme", err)
	}
	if res.Counts != (retention.Counts{}) {
		t.Errorf("sweep removed %+v, want nothing", res.Counts)
	}
	if got := left(t, topo, "acme", id); got != (kept{true, true, true, true}) || !has(t, topo.Leases, bus.JobKey("acme", id)) {
		t.Errorf("acme/%s kept %+v, want everything", id, got)
	}
}

// TestSweepRechecksRecord: a job id used again between the sweep's read
// of the old record and its removals (another sweep removed the old run,
// the tenant submitted the id again) keeps the new run's journal, report,
// status, lease and record.
func TestSweepRechecksRecord(t *testing.T) {
	t.Parallel()
	env, coord := newFleet(t)
	topo := env.Topo
	ctx := t.Context()
	id := runJob(t, env, "acme", 2)
	if err := coord.Stop(); err != nil {
		t.Fatal(err)
	}
	sw := newSweeper(t, topo, "s")
	retention.SetAfterRead(sw, func(tenant, job string) {
		rec, _, err := jobs.Get(ctx, topo, tenant, job)
		if err != nil {
			t.Error(err)
			return
		}
		rec.Finished, rec.State, rec.UpdatedAt = false, schemas.StateRunning, time.Now().UTC()
		data, err := schemas.Encode(&rec)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := topo.Jobs.Put(ctx, bus.JobKey(tenant, job), data); err != nil {
			t.Error(err)
		}
	})
	res, err := sw.Sweep(ctx, time.Now().Add(40*day))
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts != (retention.Counts{}) {
		t.Errorf("sweep removed %+v, want nothing", res.Counts)
	}
	if got := left(t, topo, "acme", id); got != (kept{true, true, true, true}) || !has(t, topo.Leases, bus.JobKey("acme", id)) {
		t.Errorf("acme/%s kept %+v (and its lease?), want everything", id, got)
	}
}

// TestSweepLeaseLost: a sweep renews its lease as it goes; once another
// sweeper has taken it, the renewal fails and the sweep stops
// (ErrLeaseLost) without touching the jobs left.
func TestSweepLeaseLost(t *testing.T) {
	t.Parallel()
	env, coord := newFleet(t)
	topo := env.Topo
	ctx := t.Context()
	for range 3 {
		runJob(t, env, "acme", 2)
	}
	if err := coord.Stop(); err != nil {
		t.Fatal(err)
	}
	sw := newSweeper(t, topo, "s")
	retention.SetRenewEvery(sw, 1)
	other, err := lease.NewManager(sw.Bucket(), "other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	taken := false
	retention.SetAfterRead(sw, func(string, string) {
		if taken {
			return
		}
		taken = true
		// The sweep's lease expired and another sweeper took it.
		if err := sw.Bucket().Purge(ctx, "sweep.lease"); err != nil {
			t.Error(err)
		}
		if _, err := other.Acquire(ctx, "sweep", "lease"); err != nil {
			t.Error(err)
		}
	})
	res, err := sw.Sweep(ctx, time.Now().Add(40*day))
	if !errors.Is(err, retention.ErrLeaseLost) {
		t.Fatalf("sweep: err %v, want ErrLeaseLost", err)
	}
	if res.Jobs != 1 {
		t.Errorf("sweep removed %+v, want one job's data before it stopped", res.Counts)
	}
	recs, err := jobs.Keys(ctx, topo, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Errorf("%d job records left, want 2", len(recs))
	}
}

// TestSweepManyDeadLetters: the dead letters stored before the time go,
// subject by subject, and the later ones stay, in a number of requests
// that does not grow with the letters (a binary search per subject).
func TestSweepManyDeadLetters(t *testing.T) {
	t.Parallel()
	nsrv := testkit.StartNATS(t)
	nc, js := testkit.Connect(t, nsrv.URL)
	ctx := t.Context()
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	publish := func(tenant, job string, n int) {
		t.Helper()
		for range n {
			seq++
			dl := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: topo.NS.SamplesStream(), Seq: seq,
				Subject: topo.NS.SampleSubject(tenant, job), Reason: "max_deliveries", Deliveries: 10, At: time.Now().UTC(), Data: []byte(`{}`)}
			if err := bus.PublishDeadLetter(ctx, topo.JS, topo.NS, dl); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("acme", "j1", 300)
	publish("acme", "j3", 20)
	cut := time.Now()
	publish("acme", "j1", 100)
	publish("beta", "j2", 50)

	sw := newSweeper(t, topo, "s")
	dry, err := sw.Run(ctx, time.Now(), retention.Options{Before: cut, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.DeadLetters != 320 {
		t.Errorf("dry run counted %d dead letters, want 320", dry.DeadLetters)
	}
	sent := nc.Stats().OutMsgs
	res, err := sw.Run(ctx, time.Now(), retention.Options{Before: cut})
	if err != nil {
		t.Fatal(err)
	}
	if n := nc.Stats().OutMsgs - sent; n > 80 {
		t.Errorf("the sweep made %d requests for 470 dead letters", n)
	}
	if res.DeadLetters != 320 || len(res.Items) != 2 {
		t.Errorf("removed %d dead letters in %+v, want 320 of acme/j1 and acme/j3", res.DeadLetters, res.Items)
	}
	for _, tc := range []struct {
		tenant, job string
		want        int
	}{{"acme", "j1", 100}, {"acme", "j3", 0}, {"beta", "j2", 50}} {
		dls, err := bus.ListDeadLetters(ctx, topo.JS, topo.NS, tc.tenant, tc.job, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != tc.want {
			t.Errorf("%s/%s: %d dead letters left, want %d", tc.tenant, tc.job, len(dls), tc.want)
		}
		for _, dl := range dls {
			if dl.Seq <= 320 { // the letters published before cut
				t.Errorf("%s/%s: letter %d (published before the time) stayed", tc.tenant, tc.job, dl.Seq)
			}
		}
	}
}
