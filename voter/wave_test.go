package voter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestWaveRequests: with a wave's samples sent as one request (its first
// at temperature 0, the others at the job's rest temperature), the job is
// solved with fewer requests than samples, each sample is drawn at its
// own temperature, and the voter still has at most Concurrency model calls
// in flight: a wave in one message asks no more of the provider than its
// samples one a message did.
func TestWaveRequests(t *testing.T) {
	t.Parallel()
	const disks, k, seed, concurrency = 4, 3, 7, 2
	env := fleettest.New(t)
	var inFlight, most, greedy, warm atomic.Int64
	model := fleettest.NewFakeModel(fleettest.SeedTable(seed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if c.Temperature == 0 {
			greedy.Add(1)
		} else {
			warm.Add(1)
		}
		// Slow enough that calls of one voter overlap when they may.
		if err := fleettest.Wait(ctx, 5*time.Millisecond); err != nil {
			return llm.Response{}, err
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{SamplesPerCall: schemas.MaxSamplesPerCall})
	v := env.StartVoter(model, voter.Config{Concurrency: concurrency})
	spec := fleettest.HanoiSpec(disks, k, seed)
	rep := env.Run(&spec)
	if rep.State != schemas.StateSolved || rep.Errors != 0 {
		t.Fatalf("job %s with %d errors", rep.State, rep.Errors)
	}
	st := v.Stats()
	if st.Requests >= rep.Samples {
		t.Errorf("%d requests for %d samples: the waves went one sample a message", st.Requests, rep.Samples)
	}
	if m := most.Load(); m > concurrency {
		t.Errorf("%d model calls at once on a voter of concurrency %d", m, concurrency)
	}
	if g, w := greedy.Load(), warm.Load(); g < rep.Steps || w < (k-1)*rep.Steps {
		t.Errorf("%d calls at temperature 0 and %d above for %d steps at k %d: a wave's samples are not each at their own temperature", g, w, rep.Steps, k)
	}
}
