package retention_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// measureEnv sets the number of disks of TestRetentionBoundsJournal's
// jobs (default 5: 31 steps; 14 is the 16,383-step job).
const measureEnv = "MAKER_RETENTION_DISKS"

// TestRetentionBoundsJournal measures the journal stream after N jobs
// without retention (one message per decided step, plus takeovers, the
// end and checkpoints, kept forever) and after a sweep past the policy:
// the stream is empty again.
func TestRetentionBoundsJournal(t *testing.T) {
	t.Parallel()
	disks, jobsN := 5, 4
	if s := os.Getenv(measureEnv); s != "" {
		d, err := strconv.Atoi(s)
		if err != nil || d < 1 || d > 16 {
			t.Fatalf("%s=%q: want 1-16", measureEnv, s)
		}
		disks, jobsN = d, 1
	}
	env, _ := newFleet(t)
	topo := env.Topo
	var ids []string
	for range jobsN {
		spec := fleettest.HanoiSpec(disks, 1, 11)
		spec.Tenant = "acme"
		env.Submit(&spec)
		ids = append(ids, spec.JobID)
		if rep := env.WaitFor(spec, 10*time.Minute); rep.State != schemas.StateSolved {
			t.Fatalf("job: %s (%s)", rep.State, rep.Reason)
		}
	}
	for _, id := range ids {
		fleettest.Eventually(t, 10*time.Second, func() bool {
			rec, _, err := jobs.Get(t.Context(), topo, "acme", id)
			return err == nil && rec.Finished
		}, "job never finished")
	}
	s, err := topo.JS.Stream(t.Context(), topo.NS.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	steps := int64(1)<<disks - 1
	if min := uint64(jobsN) * uint64(steps); before.State.Msgs < min {
		t.Errorf("journal holds %d messages after %d jobs of %d steps, want >= %d", before.State.Msgs, jobsN, steps, min)
	}
	res, err := newSweeper(t, topo, "m").Sweep(t.Context(), time.Now().Add(8*day))
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d job(s) of %d steps: journal %d messages (%d bytes) without retention; after a sweep past the policy %d messages (%d bytes); removed %d",
		jobsN, steps, before.State.Msgs, before.State.Bytes, after.State.Msgs, after.State.Bytes, res.JournalMessages)
	if after.State.Msgs != 0 || uint64(res.JournalMessages) != before.State.Msgs {
		t.Errorf("after the sweep: %d messages left, %d counted removed of %d", after.State.Msgs, res.JournalMessages, before.State.Msgs)
	}
}
