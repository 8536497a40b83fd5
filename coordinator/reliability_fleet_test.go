package coordinator_test

import (
	"context"
	"math"
	"reflect"
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

// The statistical claims of docs/statistics.md on the whole fleet (real
// NATS and redis-server, the simulated model at WrongSpread 1: every wrong
// answer of a step the same, the two-candidate race MAKER's formulas
// assume). Every run is seeded: the sim's answers are a function of its
// seed and the request, so a run is the same each time.

// wilson99 is the 99 % (two-sided) Wilson score interval of x out of n.
func wilson99(x, n int64) (lo, hi float64) {
	const z = 2.5758293035489004
	p, nf := float64(x)/float64(n), float64(n)
	den := 1 + z*z/nf
	c := (p + z*z/(2*nf)) / den
	h := z / den * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf))
	return c - h, c + h
}

// TestErrorRateMatchesPVote: at p = 0.75 and k = 2 the theory says a step
// is decided wrong with chance 1 − p_vote = r²/(1 + r²) = 0.1. Over 2046
// decided steps (two 1023-step jobs run at once, seeds apart) the measured
// rate's 99 % Wilson interval must contain it. (A wrong step here is the
// reversed move with the right next state, so the chain goes on and every
// step is an independent race.)
func TestErrorRateMatchesPVote(t *testing.T) {
	t.Parallel()
	const p, k, disks = 0.75, 2, 10
	env, _, _ := simFleet(t, simllm.Config{Accuracy: p, WrongSpread: 1, Seed: 21}, llm.Config{}, voter.Config{Concurrency: 16})
	specs := []schemas.JobSpec{fleettest.HanoiSpec(disks, k, 5), fleettest.HanoiSpec(disks, k, 6)}
	for i := range specs {
		specs[i].PEstimate = p
		env.Submit(&specs[i])
	}
	var errs, steps int64
	for _, spec := range specs {
		rep := env.WaitFor(spec, 5*time.Minute) // 2,046 steps: generous on a loaded machine
		if rep.Steps != 1<<disks-1 || rep.Receipt == nil || rep.Receipt.BoundSteps+rep.Receipt.OtherSteps != rep.Steps {
			t.Fatalf("job %s: %d steps decided (state %s, %s), receipt %+v; want %d, covered", spec.JobID, rep.Steps, rep.State,
				rep.Reason, rep.Receipt, 1<<disks-1)
		}
		errs, steps = errs+rep.Errors, steps+rep.Steps
		t.Logf("job seed %d: %d wrong of %d; receipt p̂ %.4f [%.4f, %.4f] (the winner taken as right: optimistic at p_vote 0.9)",
			spec.Seed, rep.Errors, rep.Steps, rep.Receipt.PHat, rep.Receipt.PLow, rep.Receipt.PHigh)
	}
	want := 1 - plan.PVote(p, k)
	lo, hi := wilson99(errs, steps)
	t.Logf("p=%v k=%d: %d wrong of %d steps = %.4f, 99 %% interval [%.4f, %.4f], theory 1 − p_vote = %.4f",
		p, k, errs, steps, float64(errs)/float64(steps), lo, hi, want)
	if want < lo || want > hi {
		t.Errorf("measured error rate %d/%d: its 99 %% Wilson interval [%.4f, %.4f] misses 1 − p_vote = %.4f", errs, steps, lo, hi, want)
	}
}

// TestAdaptiveKCheaper: a 255-step job at true p = 0.9 with target 0.95.
// A fixed k from a pessimistic p = 0.8 (k_min 7) meets it at a cost;
// adaptive k, starting from the same k and the same pessimistic p as its
// prior, learns p from its votes and meets it with fewer samples: both
// runs decide every step right, and the adaptive run's receipt shows a
// bound of at least the target at 99 % confidence.
func TestAdaptiveKCheaper(t *testing.T) {
	t.Parallel()
	const p, pPess, target, disks = 0.9, 0.8, 0.95, 8
	steps := int64(1)<<disks - 1
	kPess, err := plan.KMin(pPess, steps, target)
	if err != nil {
		t.Fatal(err)
	}
	run := func(adaptive bool) schemas.JobReport {
		env, _, _ := simFleet(t, simllm.Config{Accuracy: p, WrongSpread: 1, Seed: 8}, llm.Config{}, voter.Config{Concurrency: 16})
		spec := fleettest.HanoiSpec(disks, kPess, 13)
		spec.PEstimate = pPess
		if adaptive {
			spec.ReliabilityTarget = target
		}
		return env.Run(&spec)
	}
	fixed, adapt := run(false), run(true)
	for _, r := range []struct {
		name string
		rep  schemas.JobReport
	}{{"fixed", fixed}, {"adaptive", adapt}} {
		checkSolved(t, r.rep, disks)
		rc := r.rep.Receipt
		t.Logf("%s: %d samples (%.2f a step), errors %d; k schedule %v; p̂ %.4f [%.4f, %.4f]; bound %.4f",
			r.name, r.rep.Samples, r.rep.SamplesPerStep, r.rep.Errors, rc.KSchedule, rc.PHat, rc.PLow, rc.PHigh, rc.BoundAchieved)
	}
	if adapt.Receipt.BoundAchieved < target {
		t.Errorf("adaptive run's bound %v below the target %v", adapt.Receipt.BoundAchieved, target)
	}
	if adapt.Samples >= fixed.Samples {
		t.Errorf("adaptive k drew %d samples, fixed k=%d from p=%v drew %d: want fewer", adapt.Samples, kPess, pPess, fixed.Samples)
	}
}

// TestCorrelatedStepsDecorrelated: a tenth of the steps are hard for the
// simulated model (chosen by a hash of the prompt: right half the time,
// the wrong answer the other half). The correlation test flags the hard
// steps whose race runs long; decorrelating their remaining samples (a
// paraphrased prompt is another prompt to the model, hard again only a
// tenth of the time; here also another model name of the job's mix)
// settles them in fewer samples and more often right than letting the
// race run on.
func TestCorrelatedStepsDecorrelated(t *testing.T) {
	t.Parallel()
	const disks = 9
	run := func(mode string) schemas.JobReport {
		sim := simllm.Config{Accuracy: 0.95, WrongSpread: 1, HardFraction: 0.1, HardAccuracy: 0.5, Seed: 3}
		vc := voter.Config{Concurrency: 16, Policy: voter.Policy{AllowModels: []string{voter.AnyModel}}}
		env, _, _ := simFleet(t, sim, llm.Config{}, vc)
		spec := fleettest.HanoiSpec(disks, 3, 17)
		spec.PEstimate, spec.Decorrelate, spec.MaxSamplesPerStep = 0.95, mode, 400
		if mode == schemas.DecorrelateOn {
			spec.Models = []string{"sim-a", "sim-b"}
		}
		return env.Run(&spec)
	}
	on, off := run(schemas.DecorrelateOn), run(schemas.DecorrelateOff)
	// rounds is the mean samples of the listed correlated steps.
	rounds := func(rep schemas.JobReport) float64 {
		var n, sum float64
		for _, s := range rep.Receipt.Steps {
			if s.Correlated {
				n++
				sum += float64(s.Counted)
			}
		}
		return sum / max(n, 1)
	}
	for _, r := range []struct {
		name string
		rep  schemas.JobReport
	}{{"on", on}, {"off", off}} {
		rc := r.rep.Receipt
		t.Logf("decorrelation %s: %s, %d samples, %d wrong steps, %d correlated steps (%.1f samples each), %d decorrelated samples, max %d samples in a step; p̂ %.4f",
			r.name, r.rep.State, r.rep.Samples, r.rep.Errors, r.rep.CorrelatedSteps, rounds(r.rep), r.rep.DecorrelatedSamples,
			r.rep.MaxSamplesInStep, rc.PHat)
		if r.rep.Steps != 1<<disks-1 || r.rep.CorrelatedSteps == 0 || int64(len(rc.Steps)) < r.rep.CorrelatedSteps {
			t.Errorf("decorrelation %s: %d steps, %d correlated, %d listed: want every step and some correlated, listed",
				r.name, r.rep.Steps, r.rep.CorrelatedSteps, len(rc.Steps))
		}
		if r.rep.RedFlagged != 0 {
			t.Errorf("decorrelation %s: %d red-flagged samples: a paraphrased prompt must read as the task's", r.name, r.rep.RedFlagged)
		}
	}
	if on.DecorrelatedSamples == 0 || off.DecorrelatedSamples != 0 {
		t.Errorf("decorrelated samples: on %d, off %d; want some and none", on.DecorrelatedSamples, off.DecorrelatedSamples)
	}
	if rounds(on) >= rounds(off) || on.Errors > off.Errors {
		t.Errorf("correlated steps took %.1f samples with decorrelation (%d wrong steps), %.1f without (%d): want fewer",
			rounds(on), on.Errors, rounds(off), off.Errors)
	}
}

// TestAdaptiveKTakeover: a coordinator dies in the middle of an adaptive-k
// job (checkpoints every 16 steps, so the new owner reads a checkpoint's
// receipt and the entries after it); the new owner chooses the same k for
// every step as an uninterrupted run of the same job: the same decisions,
// k schedule and receipt.
func TestAdaptiveKTakeover(t *testing.T) {
	t.Parallel()
	const disks, killAfter = 8, 80
	sim := simllm.Config{Accuracy: 0.9, WrongSpread: 1, Seed: 4}
	spec := func() schemas.JobSpec {
		s := fleettest.HanoiSpec(disks, 6, 23)
		s.PEstimate, s.ReliabilityTarget = 0.85, 0.99
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
		s := spec()
		return env.Run(&s)
	}()

	env := fleettest.New(t)
	env.StartVoter(fleettest.SimClient(t, fleettest.StartSim(t, sim), llm.Config{}), voter.Config{Concurrency: 16})
	c1 := env.StartCoordinator(cfg("c1"))
	s := spec()
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

	checkSolved(t, whole, disks)
	checkSolved(t, taken, disks)
	a, b := whole.Receipt, taken.Receipt
	t.Logf("uninterrupted: %v; taken over: %v", a.KSchedule, b.KSchedule)
	if taken.TraceSHA256 != whole.TraceSHA256 || !reflect.DeepEqual(a.KSchedule, b.KSchedule) || !reflect.DeepEqual(a.KSteps, b.KSteps) ||
		a.RightVotes != b.RightVotes || a.WrongVotes != b.WrongVotes || a.BoundAchieved != b.BoundAchieved {
		t.Errorf("the taken-over job's receipt differs from the uninterrupted one's:\n%s", diffReports(
			schemas.JobReport{Receipt: a}, schemas.JobReport{Receipt: b}))
	}
}
