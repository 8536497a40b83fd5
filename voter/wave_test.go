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

// TestWaveAnswersAsTheyCome: a request's answers are published as they
// come, not when its slowest sample's call ends: while a wave's greedy
// call hangs, the answers of its other samples reach the job. (A voter
// that waited for the whole wave held them back until the hung call
// ended, and the step waited for its sample timeout.)
func TestWaveAnswersAsTheyCome(t *testing.T) {
	t.Parallel()
	const disks, k, seed = 3, 3, 11
	env := fleettest.New(t)
	release := make(chan struct{})
	model := fleettest.NewFakeModel(fleettest.SeedTable(seed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Step == 0 && c.Index == 0 && c.Seq == 0 {
			select { // the wave's greedy call hangs until the test lets it go
			case <-release:
			case <-ctx.Done():
				return llm.Response{}, ctx.Err()
			}
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{SamplesPerCall: schemas.MaxSamplesPerCall})
	env.StartVoter(model, voter.Config{Concurrency: k})
	spec := fleettest.HanoiSpec(disks, k, seed)
	spec.SampleTimeoutMS = time.Hour.Milliseconds() // no re-sample comes to the rescue
	results := fleettest.Capture[schemas.SampleResult](env, env.Topo.NS.ResultJobWildcard(spec.Tenant, spec.JobID))
	env.Submit(&spec)
	fleettest.Eventually(t, 20*time.Second, func() bool {
		for _, r := range results.All() {
			for _, p := range r.AppendParts(nil) {
				if p.Step == 0 && p.Index > 0 && p.Outcome == schemas.OutcomeVote {
					return true
				}
			}
		}
		return false
	}, "an answer of step 0's wave while its greedy call hangs")
	close(release)
	rep := env.Wait(spec)
	if rep.State != schemas.StateSolved || rep.Errors != 0 {
		t.Fatalf("job %s with %d errors", rep.State, rep.Errors)
	}
}

// TestWaveAnswersLinger: the answers of a wave whose calls end apart
// (here the greedy call at once, the others 50ms later) go in one
// message when they come within ResultLinger of the first: the step
// needs them all anyway, and a message is a publish, a delivery, an ack
// and a Redis round trip. (A voter without the linger sends the greedy
// answer alone.)
func TestWaveAnswersLinger(t *testing.T) {
	t.Parallel()
	const disks, k, seed = 3, 3, 13
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(seed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Index > 0 {
			if err := fleettest.Wait(ctx, 50*time.Millisecond); err != nil {
				return llm.Response{}, err
			}
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{SamplesPerCall: schemas.MaxSamplesPerCall})
	env.StartVoter(model, voter.Config{Concurrency: k, ResultLinger: voter.MaxResultLinger})
	spec := fleettest.HanoiSpec(disks, k, seed)
	spec.SpeculationDepth = 0
	results := fleettest.Capture[schemas.SampleResult](env, env.Topo.NS.ResultJobWildcard(spec.Tenant, spec.JobID))
	rep := env.Run(&spec)
	if rep.State != schemas.StateSolved || rep.Errors != 0 {
		t.Fatalf("job %s with %d errors", rep.State, rep.Errors)
	}
	// Every step's first wave of k samples came in one message.
	whole := map[int64]bool{}
	for _, r := range results.All() {
		parts := r.AppendParts(nil)
		if parts[0].Index == 0 && len(parts) == k {
			whole[parts[0].Step] = true
		} else if parts[0].Index == 0 {
			t.Errorf("step %d: its greedy answer came with %d answers, want the wave's %d", parts[0].Step, len(parts), k)
		}
	}
	if int64(len(whole)) != rep.Steps {
		t.Errorf("%d of %d steps had their wave's answers in one message", len(whole), rep.Steps)
	}
}
