package voter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestWrongModelNeverEndsAJob: a voter started with a model name its
// provider does not serve (404 model_not_found) answers none of its
// samples: it hands them back, reports not ready naming the model and the
// provider's answer, and backs off. A job with a sample cap of 4 sees
// more refusals than its cap (answered as red flags, as before, they
// would have ended it no_consensus) and stays unfinished, its status
// saying that its samples go unanswered; once a voter with the right
// model joins, it solves, with no sample red-flagged.
func TestWrongModelNeverEndsAJob(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 3, Models: []string{"sim-strong"}})
	env.StartCoordinator(coordinator.Config{})
	bad := env.StartVoter(fleettest.SimClient(t, sim, llm.Config{Model: "gpt-nope"}),
		voter.Config{ID: "voter-bad", Model: "gpt-nope", Concurrency: 2, ModelErrorDelay: 20 * time.Millisecond})

	spec := fleettest.HanoiSpec(3, 2, 3)
	spec.MaxSamplesPerStep = 4
	spec.SampleTimeoutMS = 300 // so the job says soon that it waits
	env.Submit(&spec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reported := func() bool {
		_, err := jobs.Result(ctx, env.Topo, spec.Tenant, spec.JobID)
		return err == nil
	}
	// Answered as red flags, the cap's worth of refusals would end the job.
	fleettest.Eventually(t, 30*time.Second, func() bool { return bad.Stats().ModelErrors > int64(spec.MaxSamplesPerStep) || reported() },
		"the wrong voter was refused %d times; want more than the job's sample cap", bad.Stats().ModelErrors)
	if reported() {
		t.Fatal("the job has a report while no voter could serve it")
	}
	ready := bad.Ready()
	if ready == nil || !strings.Contains(ready.Error(), `"gpt-nope"`) || !strings.Contains(ready.Error(), "404") {
		t.Errorf("the wrong voter's Ready = %v, want it naming the model and the provider's answer", ready)
	}
	if st := bad.Stats(); st.RedFlags != 0 || st.Votes != 0 || st.ProviderRefusals != st.ModelErrors {
		t.Errorf("the wrong voter answered samples, or counted its refusals as other errors: %+v", st)
	}

	// The job's status says why it waits.
	var st schemas.JobStatus
	fleettest.Eventually(t, 30*time.Second, func() bool {
		st, _ = jobs.Status(ctx, env.Topo, spec.Tenant, spec.JobID)
		return st.State == schemas.StateRunning && strings.Contains(st.Reason, "samples unanswered past the sample timeout")
	}, "the waiting job's status %+v does not say why it waits", st)

	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{ID: "voter-good", Concurrency: 4})
	rep := env.Wait(spec)
	if rep.State != schemas.StateSolved || rep.RedFlags[schemas.RedFlagRefused] != 0 || rep.RedFlagged != 0 {
		t.Errorf("report %s with red flags %v, want solved with none", rep.State, rep.RedFlags)
	}
}
