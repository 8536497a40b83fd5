package coordinator_test

import (
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/voter"
)

// BenchmarkStepMetrics is BenchmarkStep with the coordinator's and the
// voter's metrics on (internal/metrics): the cost of the hooks per
// decided step is the difference of their ns/step.
func BenchmarkStepMetrics(b *testing.B) {
	const disks, k = 6, 2
	env := fleettest.New(b)
	sim := fleettest.StartSim(b, simllm.Config{Accuracy: 0.998, Seed: 1})
	env.StartCoordinator(coordinator.Config{Metrics: metrics.NewCoordinator(metrics.NewRegistry("coordinator", "bench"))})
	env.StartVoter(fleettest.SimClient(b, sim, llm.Config{}), voter.Config{Concurrency: 16,
		Metrics: metrics.NewVoter(metrics.NewRegistry("voter", "bench"))})
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
