package coordinator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/retention"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestRetentionSweepPeriodic: a coordinator with a RetentionInterval
// sweeps on its own: a finished job's journal and status go once past the
// fleet's policy (1s here), its report (30 days by default) stays.
func TestRetentionSweepPeriodic(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	ctx := t.Context()
	kv, err := retention.OpenBucket(ctx, env.Topo)
	if err != nil {
		t.Fatal(err)
	}
	one := int64(1)
	if _, err := retention.Set(ctx, kv, "", "", schemas.RetentionAges{JournalSeconds: &one, StatusSeconds: &one}, time.Now()); err != nil {
		t.Fatal(err)
	}
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	env.StartCoordinator(coordinator.Config{RetentionInterval: 100 * time.Millisecond})
	spec := fleettest.HanoiSpec(2, 1, 1)
	if rep := env.Run(&spec); rep.State != schemas.StateSolved {
		t.Fatalf("job: %s", rep.State)
	}
	key := bus.JobKey(spec.Tenant, spec.JobID)
	js, err := env.JS.Stream(ctx, env.Topo.NS.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 20*time.Second, func() bool {
		info, err := js.Info(ctx)
		if err != nil {
			return false
		}
		_, serr := env.Topo.Status.Get(ctx, key)
		return info.State.Msgs == 0 && errors.Is(serr, jetstream.ErrKeyNotFound)
	}, "the coordinator never swept the finished job's journal and status")
	if _, err := env.Topo.Reports.Get(ctx, key); err != nil {
		t.Errorf("report: %v, want it kept", err)
	}
}
