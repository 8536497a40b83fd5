package coordinator_test

import (
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/voter"
)

// BenchmarkStep measures the fleet's overhead per decided step: a whole
// in-process fleet (nats-server, redis-server, coordinator, voter) with a
// zero-latency simulated model at the paper's measured accuracy runs one
// short job per iteration. ns/step is wall time over decided steps, job
// start-up included.
func BenchmarkStep(b *testing.B) {
	const disks, k = 6, 2
	env := fleettest.New(b)
	sim := fleettest.StartSim(b, simllm.Config{Accuracy: 0.998, Seed: 1})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.SimClient(b, sim, llm.Config{}), voter.Config{Concurrency: 16})
	if kind := env.Redis().Kind; kind != "redis-server" {
		b.Logf("measuring against %s, not redis-server", kind)
	}
	run := func() int64 {
		spec := fleettest.HanoiSpec(disks, k, 1)
		rep := env.Run(&spec)
		if !rep.Solved {
			b.Fatalf("job %s: %s (%s)", spec.JobID, rep.State, rep.Reason)
		}
		return rep.Steps
	}
	run() // warm-up: connections, scripts, consumers
	var steps int64
	for b.Loop() {
		steps += run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
}
