package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestSpeculationFleet: on the real fleet (NATS, Redis, voters, the
// simulated model), a job that samples ahead decides exactly what the same
// job without speculation decides: the same trace, errors, samples, votes
// and red flags, step by step through the journal, for a model that makes
// mistakes (some steps decided wrong, so the chain leaves the reference
// and guesses lose). Only wasted samples and tokens may differ.
func TestSpeculationFleet(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.8, Seed: 5, MalformedRate: 0.05})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 32})
	run := func(depth int) schemas.JobReport {
		spec := fleettest.HanoiSpec(6, 1, 21) // k = 1: wrong steps are decided
		spec.SpeculationDepth = depth
		rep := env.Run(&spec)
		if rep.Steps == 0 {
			t.Fatalf("depth %d: no step decided: %s (%s)", depth, rep.State, rep.Reason)
		}
		return rep
	}
	base := run(0)
	if base.Errors == 0 {
		t.Fatalf("no wrong step decided (%d steps): the case does not test a chain that leaves the reference", base.Steps)
	}
	for _, depth := range []int{3, 8} {
		rep := run(depth)
		if rep.TraceSHA256 != base.TraceSHA256 || rep.Errors != base.Errors || rep.Steps != base.Steps || rep.State != base.State {
			t.Errorf("depth %d: %s %d steps %d errors trace %s, want %s %d %d %s", depth,
				rep.State, rep.Steps, rep.Errors, rep.TraceSHA256, base.State, base.Steps, base.Errors, base.TraceSHA256)
		}
		if rep.Samples != base.Samples || rep.Votes != base.Votes || rep.RedFlagged != base.RedFlagged {
			t.Errorf("depth %d: samples %d votes %d red flags %d, want %d %d %d", depth,
				rep.Samples, rep.Votes, rep.RedFlagged, base.Samples, base.Votes, base.RedFlagged)
		}
		if rep.SpeculativeSamples == 0 || rep.SpeculativeWasted == 0 {
			t.Errorf("depth %d: speculative samples %d wasted %d: want both (wrong steps make guesses lose)",
				depth, rep.SpeculativeSamples, rep.SpeculativeWasted)
		}
		if want := rep.SkippedSamples + rep.CancelledSamples + rep.LateSamples + rep.DuplicateResults + rep.SpeculativeWasted; rep.WastedSamples != want {
			t.Errorf("depth %d: wasted_samples %d, want the sum %d", depth, rep.WastedSamples, want)
		}
	}
}

// BenchmarkSpeculation measures the wall time per decided step with a
// 200 ms simulated model at p = 0.998, k = 3 (the case), without
// speculation and at depths 4 and 8, in the same run: per step against the
// model latency, and samples per decided step (counted plus wasted)
// against theory E[N]/v.
//
//	go test -run '^$' -bench BenchmarkSpeculation -benchtime 1x ./coordinator/
func BenchmarkSpeculation(b *testing.B) {
	const disks, k, p = 6, 3, 0.998
	latency := 200 * time.Millisecond
	env := fleettest.New(b)
	sim := fleettest.StartSim(b, simllm.Config{Accuracy: p, Seed: 3, Latency: latency})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.SimClient(b, sim, llm.Config{}), voter.Config{Concurrency: 128})
	theory := plan.ExpectedVotes(p, k)
	for _, depth := range []int{0, 4, 8, 16} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			var steps, drawn int64
			var wall time.Duration
			for b.Loop() {
				spec := fleettest.HanoiSpec(disks, k, 3)
				spec.SpeculationDepth = depth
				start := time.Now()
				rep := env.Run(&spec)
				wall += time.Since(start)
				if !rep.Solved {
					b.Fatalf("job %s: %s (%s)", spec.JobID, rep.State, rep.Reason)
				}
				steps += rep.Steps
				drawn += rep.Samples + rep.WastedSamples
			}
			perStep := wall / time.Duration(steps)
			b.ReportMetric(float64(perStep.Microseconds())/1000, "ms/step")
			b.ReportMetric(float64(perStep)/float64(latency), "latency-ratio")
			b.ReportMetric(float64(drawn)/float64(steps), "samples/step")
			b.ReportMetric(float64(drawn)/float64(steps)/theory, "theory-ratio")
		})
	}
}

// TestSpeculationTakeover: a speculating job whose coordinator is killed
// mid-job (answers of the steps ahead held, uncounted) is resumed by
// another from the journal and decides exactly what an uninterrupted job
// without speculation decides: the same trace, steps, samples and votes.
func TestSpeculationTakeover(t *testing.T) {
	t.Parallel()
	const disks, killAfter = 7, 50
	sim := simllm.Config{Accuracy: 0.85, Seed: 8}
	spec := func(depth int) schemas.JobSpec {
		s := fleettest.HanoiSpec(disks, 2, 17)
		s.SpeculationDepth = depth
		return s
	}
	cfg := func(id string) coordinator.Config {
		return coordinator.Config{ID: id, LeaseTTL: time.Second, ScanInterval: 50 * time.Millisecond, CheckpointEvery: 16,
			StatusInterval: 20 * time.Millisecond}
	}
	whole := func() schemas.JobReport {
		env := fleettest.New(t)
		env.StartCoordinator(cfg("c0"))
		env.StartVoter(fleettest.SimClient(t, fleettest.StartSim(t, sim), llm.Config{}), voter.Config{Concurrency: 16})
		s := spec(0)
		return env.Run(&s)
	}()

	env := fleettest.New(t)
	env.StartVoter(fleettest.SimClient(t, fleettest.StartSim(t, sim), llm.Config{}), voter.Config{Concurrency: 16})
	c1 := env.StartCoordinator(cfg("c1"))
	s := spec(6)
	env.Submit(&s)
	fleettest.Eventually(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		e, err := env.Topo.Status.Get(ctx, bus.JobKey(s.Tenant, s.JobID))
		var st schemas.JobStatus
		return err == nil && schemas.Decode(e.Value(), &st) == nil && st.Steps >= killAfter
	}, "the job never reached step %d", killAfter)
	c1.Kill()
	env.StartCoordinator(cfg("c2"))
	taken := env.Wait(s)
	if taken.TraceSHA256 != whole.TraceSHA256 || taken.Steps != whole.Steps || taken.Samples != whole.Samples ||
		taken.Votes != whole.Votes || taken.Errors != whole.Errors || taken.State != whole.State {
		t.Errorf("taken over with speculation: %s %d steps %d samples %d votes %d errors trace %s; uninterrupted without: %s %d %d %d %d %s",
			taken.State, taken.Steps, taken.Samples, taken.Votes, taken.Errors, taken.TraceSHA256,
			whole.State, whole.Steps, whole.Samples, whole.Votes, whole.Errors, whole.TraceSHA256)
	}
	if taken.SpeculativeSamples == 0 {
		t.Error("the taken-over job did not speculate")
	}
}

// TestSpeculationHeldBack: a step ahead is a bet on spare room, never a
// claim on it: under a tenant's quota, or with a budget holding the job's
// cost, the job does not sample ahead (nothing is published for a step
// ahead, nothing waits for a timeout, nothing is paid twice) and decides
// what it decides without speculation.
func TestSpeculationHeldBack(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.95, Seed: 6, Latency: 5 * time.Millisecond})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 16})
	job := func(tenant string, depth int, budget float64) schemas.JobReport {
		s := fleettest.HanoiSpec(5, 2, 12)
		s.Tenant, s.SpeculationDepth, s.SampleTimeoutMS = tenant, depth, 3000
		s.BudgetUSD = budget
		return env.Run(&s)
	}
	env.SetPrice("", schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 1})
	base := job("free", 0, 0)
	setQuota(t, env, schemas.TenantQuota{Tenant: "acme", MaxInflightSamples: 64})
	for _, tc := range []struct {
		name   string
		tenant string
		budget float64
	}{{"quota", "acme", 0}, {"budget", "free", 100}} {
		rep := job(tc.tenant, 4, tc.budget)
		if rep.State != base.State || rep.TraceSHA256 != base.TraceSHA256 || rep.Samples != base.Samples {
			t.Errorf("%s: %s trace %s samples %d; without speculation %s %s %d", tc.name,
				rep.State, rep.TraceSHA256, rep.Samples, base.State, base.TraceSHA256, base.Samples)
		}
		if rep.SpeculativeSamples != 0 || rep.SpeculativeWasted != 0 || rep.Resampled != 0 {
			t.Errorf("%s: speculative %d wasted %d resampled %d, want none", tc.name,
				rep.SpeculativeSamples, rep.SpeculativeWasted, rep.Resampled)
		}
	}
	// The same job without quota or budget does speculate.
	if rep := job("free", 4, 0); rep.SpeculativeSamples == 0 {
		t.Error("no quota, no budget: the job did not speculate")
	}
}
