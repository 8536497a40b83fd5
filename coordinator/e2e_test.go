package coordinator_test

import (
	"context"
	"encoding/json"
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

// simFleet starts coordinator and voter against the simulated model.
func simFleet(t *testing.T, sim simllm.Config, client llm.Config, vc voter.Config) (*fleettest.Env, *simllm.Running, *fleettest.Voter) {
	t.Helper()
	env := fleettest.New(t)
	rn := fleettest.StartSim(t, sim)
	env.StartCoordinator(coordinator.Config{})
	v := env.StartVoter(fleettest.SimClient(t, rn, client), vc)
	return env, rn, v
}

// TestEndToEnd is the fault-free oracle: hanoi on the whole fleet (real
// NATS, redis-server, simulated model at accuracy 0.9) for odd and even
// disk counts (the strategy's direction differs), k from the planner. The
// run must solve with zero errors, decide exactly the strategy's keys (the
// trace equals the golden one computed from hanoi.StrategyMove/Apply) and
// draw about as many samples per step as MAKER's theory says.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	const accuracy = 0.9
	for _, disks := range []int{5, 6, 7} {
		t.Run(fmt.Sprintf("disks=%d", disks), func(t *testing.T) {
			t.Parallel()
			env, _, _ := simFleet(t, simllm.Config{Accuracy: accuracy, Seed: 11}, llm.Config{}, voter.Config{Concurrency: 16})
			k, err := plan.KMin(accuracy, int64(1)<<disks-1, 0.99)
			if err != nil {
				t.Fatal(err)
			}
			spec := fleettest.HanoiSpec(disks, k, 42)
			spec.PEstimate = accuracy
			rep := env.Run(&spec)
			checkSolved(t, rep, disks)
			checkNoWaste(t, rep)
			if rep.K != k {
				t.Errorf("report k %d, want %d", rep.K, k)
			}
			if rep.RedFlagged != 0 {
				t.Errorf("red_flagged %d with a model that never misformats", rep.RedFlagged)
			}
			// A step needs at least k votes; the planner's E[N] is for the
			// two-candidate race, and the simulated model spreads its wrong
			// answers over several candidates, so a run lands near it.
			if rep.MaxSamplesInStep < k {
				t.Errorf("max_samples_in_step %d below k=%d", rep.MaxSamplesInStep, k)
			}
			checkBand(t, "samples_per_step", rep.SamplesPerStep, rep.ExpectedSamplesPerStep, 0.8, 1.25)
			checkFinalStatus(t, env, rep)
			if want := plan.ExpectedVotes(accuracy, k); rep.ExpectedSamplesPerStep != want {
				t.Errorf("expected_samples_per_step %v, want E[N] = %v", rep.ExpectedSamplesPerStep, want)
			}
			t.Logf("disks=%d k=%d: %d samples, %.3f/step (theory %.3f), max %d at step %d, %.2fs",
				disks, k, rep.Samples, rep.SamplesPerStep, rep.ExpectedSamplesPerStep, rep.MaxSamplesInStep, rep.MaxSamplesStep, rep.WallSeconds)
		})
	}
}

// checkFinalStatus: the job's last status (what `maker status` shows)
// agrees with its report.
func checkFinalStatus(t *testing.T, env *fleettest.Env, rep schemas.JobReport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := env.Topo.Status.Get(ctx, bus.JobKey(rep.Tenant, rep.JobID))
	if err != nil {
		t.Fatalf("final status: %v", err)
	}
	var st schemas.JobStatus
	if err := schemas.Decode(e.Value(), &st); err != nil {
		t.Fatalf("final status: %v", err)
	}
	if st.State != rep.State || st.Steps != rep.Steps || st.Samples != rep.Samples || st.Votes != rep.Votes ||
		st.RedFlagged != rep.RedFlagged || st.Errors != rep.Errors || st.TotalSteps != rep.TotalSteps {
		t.Errorf("final status %+v disagrees with the report", st)
	}
}

// TestDeterminism: one spec and seed on fresh fleets gives the same report
// (timing and job id aside) whatever the arrival order of answers: a voter
// with concurrency 1 answers in index order, one with concurrency 16 and
// latency jitter out of order. Votes are counted by index, so decisions,
// counts, tokens and the trace must not change.
func TestDeterminism(t *testing.T) {
	t.Parallel()
	runs := []struct {
		name        string
		concurrency int
		jitter      time.Duration
	}{
		{"concurrency=1", 1, 0},
		{"concurrency=16", 16, 0},
		{"concurrency=16+jitter", 16, 3 * time.Millisecond},
	}
	reps := make([]schemas.JobReport, len(runs))
	t.Run("runs", func(t *testing.T) {
		for i, r := range runs {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				sim := simllm.Config{Accuracy: 0.85, MalformedRate: 0.1, Seed: 5, LatencyJitter: r.jitter}
				env, _, _ := simFleet(t, sim, llm.Config{}, voter.Config{Concurrency: r.concurrency})
				spec := fleettest.HanoiSpec(5, 3, 77)
				spec.PEstimate, spec.ValidFraction = 0.85, 0.9
				reps[i] = env.Run(&spec)
			})
		}
	})
	if t.Failed() {
		return
	}
	base := timeless(reps[0])
	if base.State != schemas.StateSolved || base.RedFlagged == 0 {
		t.Errorf("baseline run: state %s, red_flagged %d; want a solved run with red flags, to compare something", base.State, base.RedFlagged)
	}
	checkNoWaste(t, reps[0])
	for i := 1; i < len(runs); i++ {
		if d := diffReports(base, timeless(reps[i])); d != "" {
			t.Errorf("%s differs from %s:\n%s", runs[i].name, runs[0].name, d)
		}
	}
}

// TestTemperaturesOnTheWire reads what reached the model (the simulated
// model's request log): the first vote of every step at temperature 0,
// every other at 0.1, never a missing (null) temperature; max_tokens 750
// and the step's seed on every request. Peer mistake: temperature 0 on
// every vote.
func TestTemperaturesOnTheWire(t *testing.T) {
	t.Parallel()
	var log lineBuffer
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 0.9, Seed: 3, LogRequests: &log}, llm.Config{}, voter.Config{Concurrency: 16})
	const disks, k, jobSeed = 5, 3, 1234
	steps := int64(1)<<disks - 1
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	rep := env.Run(&spec)
	// The wire first: a wrong temperature also spoils the run, and the
	// cause is the more useful failure.
	defer checkSolved(t, rep, disks)
	defer checkNoWaste(t, rep)

	seeds := fleettest.SeedTable(jobSeed, steps, 64)
	lines := log.Lines()
	if int64(len(lines)) != rep.Samples {
		t.Errorf("%d requests reached the model, report counts %d samples (no waste)", len(lines), rep.Samples)
	}
	firsts := make(map[int64]int) // step -> requests at temperature 0
	for i, line := range lines {
		var body map[string]json.RawMessage
		if err := json.Unmarshal(line, &body); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var (
			temp      *float64
			maxTokens int
			seed      *int64
		)
		if err := json.Unmarshal(body["temperature"], &temp); err != nil || temp == nil {
			t.Errorf("request %d: temperature %s, want a number", i, body["temperature"])
			continue
		}
		if err := json.Unmarshal(body["max_tokens"], &maxTokens); err != nil || maxTokens != schemas.DefaultMaxOutputTokens {
			t.Errorf("request %d: max_tokens %s, want %d", i, body["max_tokens"], schemas.DefaultMaxOutputTokens)
		}
		if err := json.Unmarshal(body["seed"], &seed); err != nil || seed == nil {
			t.Errorf("request %d: seed %s, want one", i, body["seed"])
			continue
		}
		pos, ok := seeds[*seed]
		if !ok {
			t.Errorf("request %d: seed %d is no (step, index) of job seed %d", i, *seed, jobSeed)
			continue
		}
		want := schemas.DefaultTemperatureRest
		if pos.Index == 0 {
			want = 0
			firsts[pos.Step]++
		}
		if *temp != want {
			t.Errorf("step %d index %d: temperature %v, want %v", pos.Step, pos.Index, *temp, want)
		}
	}
	for s := range steps {
		if firsts[s] != 1 {
			t.Errorf("step %d: %d requests at temperature 0, want exactly 1", s, firsts[s])
		}
	}
}

// TestRedFlagsReplaced: a model that misformats 20% of replies and runs 10%
// to the token limit still solves the task: red-flagged samples count for
// nobody and are redrawn, so a step costs about theory / v samples.
func TestRedFlagsReplaced(t *testing.T) {
	t.Parallel()
	const accuracy, malformed, overlong = 0.9, 0.2, 0.1
	env, sim, v := simFleet(t, simllm.Config{Accuracy: accuracy, MalformedRate: malformed, OverlongRate: overlong, Seed: 21},
		llm.Config{}, voter.Config{Concurrency: 16})
	const disks, k = 6, 4
	spec := fleettest.HanoiSpec(disks, k, 8)
	spec.PEstimate, spec.ValidFraction = accuracy, 1-malformed-overlong
	rep := env.Run(&spec)
	checkSolved(t, rep, disks)
	checkNoWaste(t, rep)
	if rep.RedFlagged == 0 || rep.RedFlags[schemas.RedFlagParse] == 0 || rep.RedFlags[schemas.RedFlagLength] == 0 {
		t.Errorf("red_flagged %d, by reason %v: want parse and length red flags", rep.RedFlagged, rep.RedFlags)
	}
	if n := len(rep.RedFlags); n != 2 {
		t.Errorf("red flag reasons %v, want only parse and length", rep.RedFlags)
	}
	checkBand(t, "samples_per_step", rep.SamplesPerStep, rep.ExpectedSamplesPerStep, 0.75, 1.3)
	if got := float64(rep.RedFlagged) / float64(rep.Samples); got < 0.2 || got > 0.4 {
		t.Errorf("red-flagged share %.3f, the model misformats or overruns %.2f", got, malformed+overlong)
	}
	if st := v.Stats(); st.RedFlags < rep.RedFlagged || st.Votes < rep.Votes {
		t.Errorf("voter stats %+v do not cover the report's %d votes and %d red flags", st, rep.Votes, rep.RedFlagged)
	}
	if st := sim.Stats(); st.Overlong == 0 || st.Malformed == 0 {
		t.Errorf("simulated model stats %+v: no overlong or malformed replies drawn", st)
	}
}

// TestRateLimitsDoNotKillTheRun: 30% of calls answered 429 (Retry-After
// 20ms) and 5% answered 500 do not end the run. Either the client retries
// within the call, or, when it gives up at once (MaxAttempts 1), the voter
// hands the sample back for redelivery. Peer mistake: a 1,000-step run died
// at step 223 on a rate limit.
func TestRateLimitsDoNotKillTheRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		maxAttempts int
	}{
		{"client retries", 6},
		{"voter hands back", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := simllm.Config{Accuracy: 0.95, Seed: 9, RateLimitRate: 0.3, RetryAfter: 20 * time.Millisecond, ServerErrorRate: 0.05}
			client := llm.Config{MaxAttempts: tc.maxAttempts, BackoffBase: 2 * time.Millisecond, BackoffMax: 20 * time.Millisecond}
			env, rn, v := simFleet(t, sim, client, voter.Config{Concurrency: 16, ModelErrorDelay: 10 * time.Millisecond})
			const disks = 5
			spec := fleettest.HanoiSpec(disks, 3, 31)
			spec.SampleTimeoutMS = 5000 // a sample dropped after SampleMaxDeliver is re-published
			rep := env.Run(&spec)
			checkSolved(t, rep, disks)
			st := rn.Stats()
			if st.RateLimited == 0 || st.ServerErrors == 0 {
				t.Errorf("simulated model stats %+v: no 429 or 500 was served", st)
			}
			if tc.maxAttempts == 1 && v.Stats().ModelErrors == 0 {
				t.Errorf("voter stats %+v: no model error reached the voter", v.Stats())
			}
			t.Logf("429s %d, 500s %d, voter %+v, resampled %d", st.RateLimited, st.ServerErrors, v.Stats(), rep.Resampled)
		})
	}
}
