package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/voter"
)

// TestLateResultsDrained (issue 9, finding 9): results a voter publishes
// after its job's lease generation ended (the job finished, or was taken
// over) have no consumer; a coordinator removes them instead of leaving
// them in the results stream. (Results of a generation whose owner still
// reads them are consumed and counted late in its report: the machine
// tests' late answers.)
func TestLateResultsDrained(t *testing.T) {
	t.Parallel()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 1, Seed: 3}, llm.Config{}, voter.Config{})
	spec := fleettest.HanoiSpec(3, 2, 5)
	rep := env.Run(&spec)
	checkSolved(t, rep, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns := env.Topo.NS
	late := map[string]int{
		ns.ResultSubject(spec.Tenant, spec.JobID, 1):  2, // the finished job's own generation
		ns.ResultSubject(spec.Tenant, spec.JobID, 99): 1, // a generation that never read
	}
	for subject, n := range late {
		for range n {
			if _, err := env.JS.Publish(ctx, subject, []byte(`{"late":true}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := env.JS.Stream(ctx, ns.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	stored := func() uint64 {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(ns.ResultJobWildcard(spec.Tenant, spec.JobID)))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if n := stored(); n != 3 {
		t.Fatalf("results stream holds %d of the job's results, want the 3 late ones", n)
	}
	// A coordinator (here one starting) removes them.
	env.StartCoordinator(coordinator.Config{ID: "coordinator-late"})
	fleettest.Eventually(t, 15*time.Second, func() bool { return stored() == 0 }, "late results of an ended generation stay in the results stream")
}
