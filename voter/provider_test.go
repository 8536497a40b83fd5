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
	"github.com/makerfleet/makerfleet/internal/providers"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
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

	// The job's status says why it waits: provider_unavailable, the model
	// and the provider's answer.
	var st schemas.JobStatus
	fleettest.Eventually(t, 30*time.Second, func() bool {
		st, _ = jobs.Status(ctx, env.Topo, spec.Tenant, spec.JobID)
		w := st.Waiting
		return st.State == schemas.StateRunning && w != nil && w.Reason == schemas.WaitProviderUnavailable &&
			w.Model == "gpt-nope" && strings.Contains(w.Error, "404") && strings.HasPrefix(st.Reason, "provider_unavailable: ")
	}, "the waiting job's status %+v does not say why it waits", st)

	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{ID: "voter-good", Concurrency: 4})
	rep := env.Wait(spec)
	if rep.State != schemas.StateSolved || rep.RedFlags[schemas.RedFlagRefused] != 0 || rep.RedFlagged != 0 {
		t.Errorf("report %s with red flags %v, want solved with none", rep.State, rep.RedFlags)
	}
	// The notices were never samples.
	if rep.Samples != rep.Votes {
		t.Errorf("report counts %d samples for %d votes: a notice was counted", rep.Samples, rep.Votes)
	}
}

// TestFailoverKeepsTheTrace: a job's voters call the model through two
// deployments; one goes down in the middle of the job. The job solves
// with exactly the decisions and counts of a run on one healthy
// deployment (the simulated model's answers are a function of the
// request, not of the deployment).
func TestFailoverKeepsTheTrace(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.9, Seed: 7})
	env.StartCoordinator(coordinator.Config{})
	flaky := testkit.StartFlaky(t, sim.URL())
	// The endpoint goes down after its 20th call, for good.
	flaky.DownAfter.Store(20)
	router, err := providers.NewRouter(providers.Config{
		Model: simllm.DefaultModel,
		Source: providers.StaticSource([]schemas.Deployment{
			{Name: "flaky", BaseURL: flaky.URL(), Model: simllm.DefaultModel},
			{Name: "steady", BaseURL: sim.URL(), Model: simllm.DefaultModel},
		}),
		LLM:      llm.Config{MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond},
		Cooldown: 50 * time.Millisecond, MaxCooldown: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	env.StartVoter(router, voter.Config{ID: "voter-routed", Concurrency: 4, ModelErrorDelay: 10 * time.Millisecond})

	spec := fleettest.HanoiSpec(5, 2, 7)
	got := env.Run(&spec)
	if flaky.Refused.Load() == 0 {
		t.Fatal("the flaky deployment never went down during the job; the test proves nothing")
	}

	// The reference: the same job on one healthy deployment.
	ref := fleettest.New(t)
	ref.StartCoordinator(coordinator.Config{})
	ref.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{ID: "voter-ref", Concurrency: 4})
	refSpec := fleettest.HanoiSpec(5, 2, 7)
	want := ref.Run(&refSpec)

	if got.State != schemas.StateSolved || got.TraceSHA256 != want.TraceSHA256 || got.Steps != want.Steps ||
		got.Votes != want.Votes || got.RedFlagged != want.RedFlagged {
		t.Errorf("with a deployment down mid-job: %s, %d steps, trace %s, %d votes, %d red-flagged; want %s, %d, %s, %d, %d",
			got.State, got.Steps, got.TraceSHA256, got.Votes, got.RedFlagged,
			want.State, want.Steps, want.TraceSHA256, want.Votes, want.RedFlagged)
	}
}
