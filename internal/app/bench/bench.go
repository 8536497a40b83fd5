// Package bench is maker bench's harness: one job's steps/s and per-step
// overhead on an in-process fleet against MAKER's theory and the targets
// (Run), the floor loop beside it (floor.go), many jobs at once (Many) and
// fair sharing between two tenants (Fair), each with the text maker bench
// prints. The CLI keeps the command: its flags, the fleet it starts, and
// --json.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/pprof"
	"sort"

	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// Benchmark targets (issue "The voting fleet end to end").
const (
	targetStepsPerSecond  = 1000
	targetSamplesVsTheory = 1.02
	// The task spec examples/tasks/hanoi.yaml against the built-in hanoi
	// (issue "Bring your own task").
	targetSpecVsBuiltin = 0.8
)

// Result is what `maker bench --json` prints.
type Result struct {
	// Task is the task benched: hanoi, or a spec's name@version.
	Task        string  `json:"task"`
	Disks       int     `json:"disks"`
	Steps       int64   `json:"steps"`
	K           int     `json:"k"`
	SimAccuracy float64 `json:"sim_accuracy"`
	Redis       string  `json:"redis"`
	NATS        string  `json:"nats"`
	Concurrency int     `json:"concurrency"`
	CPUs        int     `json:"cpus"`
	GoMaxProcs  int     `json:"gomaxprocs"`
	GOGC        int     `json:"gogc"`
	GoVersion   string  `json:"go_version"`
	// Runs is how many measured jobs ran; the figures are the median run's
	// (by steps/s), RunStepsPerSecond lists every run.
	Runs              int       `json:"runs"`
	RunStepsPerSecond []float64 `json:"run_steps_per_second"`

	Solved         bool    `json:"solved"`
	Errors         int64   `json:"errors"`
	WallSeconds    float64 `json:"wall_seconds"`
	StepsPerSecond float64 `json:"steps_per_second"`
	// PerStepOverheadUS is wall time per step: with a zero-latency model
	// all of it is fleet overhead (NATS, Redis, coordinator, voter).
	PerStepOverheadUS      float64 `json:"per_step_overhead_us"`
	SamplesPerStep         float64 `json:"samples_per_step"`
	ExpectedSamplesPerStep float64 `json:"expected_samples_per_step"`
	SamplesVsTheory        float64 `json:"samples_vs_theory"`
	WastedSamples          int64   `json:"wasted_samples"`
	TraceSHA256            string  `json:"trace_sha256"`

	// Spec is the task spec's figures (--task-file). Each run is a pair
	// (the built-in's job and the spec's, back to back); PairRatios are the
	// spec's steps/s over the built-in's in each pair, sorted, and
	// SpecVsBuiltin their median: a pair shares the machine's state, which
	// on a noisy machine moves both runs alike.
	Spec          *Result   `json:"spec,omitempty"`
	SpecVsBuiltin float64   `json:"spec_vs_builtin,omitempty"`
	PairRatios    []float64 `json:"pair_ratios,omitempty"`

	// Floor is the floor loop's comparison (--floor, floor.go).
	Floor *FloorResult `json:"floor,omitempty"`
	// Many is the concurrent jobs' comparison (--jobs, many.go).
	Many *ManyResult `json:"many,omitempty"`

	TargetStepsPerSecond  float64 `json:"target_steps_per_second"`
	TargetSamplesVsTheory float64 `json:"target_samples_vs_theory"`
	MeetsTargets          bool    `json:"meets_targets"`
}

// Config is one maker bench measurement on a fleet already started.
type Config struct {
	// Spec is the built-in job measured; SpecJob, when set, a task spec's
	// job measured in pairs with it, registered from SpecSource first.
	Spec       schemas.JobSpec
	SpecJob    *schemas.JobSpec
	SpecSource []byte
	// Runs is how many measured jobs (pairs) run after the warm-up.
	Runs int
	// Floor also runs the floor loop, FloorSteps steps a run, alternating
	// with the measured jobs.
	Floor      bool
	FloorSteps int
	// CPUProfile, when set, opens where a CPU profile of the measured
	// jobs is written (after the warm-up); its error is returned as is.
	CPUProfile func() (io.WriteCloser, error)
	// What the result reports about the fleet: the disks, the simulated
	// model's accuracy, "embedded" or "external" NATS, the voter's
	// concurrency.
	Disks       int
	SimAccuracy float64
	NATS        string
	Concurrency int
}

// Run measures cfg on f: a warm-up, then cfg.Runs measured jobs.
func Run(ctx context.Context, f *fleet.Fleet, cfg Config) (Result, error) {
	spec, specJob, src, floor, floorN, runs := cfg.Spec, cfg.SpecJob, cfg.SpecSource, cfg.Floor, cfg.FloorSteps, cfg.Runs
	if src != nil {
		if _, _, err := f.Registry.Register(ctx, src, "maker bench"); err != nil {
			return Result{}, err
		}
	}

	// Warm-up: connections, scripts, JIT-free but cache-warm paths.
	warm := spec
	warm.Params = json.RawMessage(`{"disks":5}`)
	if _, err := runJob(ctx, f, warm); err != nil {
		return Result{}, err
	}
	if specJob != nil {
		if _, err := runJob(ctx, f, *specJob); err != nil {
			return Result{}, err
		}
	}
	var fl *floorLoop
	if floor {
		var err error
		if fl, err = startFloor(ctx, f.RedisURL); err != nil {
			return Result{}, fmt.Errorf("floor: %w", err)
		}
		defer fl.Close()
		if _, err := fl.run(ctx, floorWarmup); err != nil {
			return Result{}, err
		}
	}
	var floorRuns []float64
	runFloor := func() error {
		if fl == nil {
			return nil
		}
		r, err := fl.run(ctx, floorN)
		floorRuns = append(floorRuns, math.Round(r))
		return err
	}
	if cfg.CPUProfile != nil {
		pf, err := cfg.CPUProfile()
		if err != nil {
			return Result{}, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return Result{}, err
		}
		defer pprof.StopCPUProfile()
	}
	// In pairs, so both see the same machine; which goes first
	// alternates, so neither always follows the other.
	var reps, specReps []schemas.JobReport
	var ratios []float64
	for i := 0; i < runs; i++ {
		order := []*schemas.JobSpec{&spec, specJob}
		if specJob != nil && i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		var pair [2]schemas.JobReport
		// The floor alternates with the jobs: before them in even
		// runs, after them in odd ones.
		if i%2 == 0 {
			if err := runFloor(); err != nil {
				return Result{}, err
			}
		}
		for _, s := range order {
			if s == nil {
				continue
			}
			rep, err := runJob(ctx, f, *s)
			if err != nil {
				return Result{}, err
			}
			if s == specJob {
				pair[1] = rep
				specReps = append(specReps, rep)
			} else {
				pair[0] = rep
				reps = append(reps, rep)
			}
		}
		if i%2 == 1 {
			if err := runFloor(); err != nil {
				return Result{}, err
			}
		}
		if specJob != nil && pair[0].StepsPerSecond > 0 {
			ratios = append(ratios, pair[1].StepsPerSecond/pair[0].StepsPerSecond)
		}
	}
	res := benchOf(reps, cfg.Disks, cfg.SimAccuracy, f.RedisKind, cfg.NATS, cfg.Concurrency)
	if specJob != nil {
		sr := benchOf(specReps, cfg.Disks, cfg.SimAccuracy, f.RedisKind, cfg.NATS, cfg.Concurrency)
		sr.Task = specJob.Task + "@" + specJob.TaskVersion
		res.Spec = &sr
		if len(ratios) > 0 {
			sort.Float64s(ratios)
			res.SpecVsBuiltin = ratios[len(ratios)/2]
			for _, r := range ratios {
				res.PairRatios = append(res.PairRatios, math.Round(r*100)/100)
			}
		}
	}
	if fl != nil {
		res.Floor = floorOf(floorRuns, reps)
	}
	return res, nil
}

// runJob runs a copy of s under a new job id on f and waits for its report.
func runJob(ctx context.Context, f *fleet.Fleet, s schemas.JobSpec) (schemas.JobReport, error) {
	s.JobID = jobs.NewJobID()
	if _, err := jobs.Submit(ctx, f.JS, f.Bus, &s, builtin.Registry()); err != nil {
		return schemas.JobReport{}, err
	}
	return jobs.Wait(ctx, f.Topo, s.Tenant, s.JobID, nil)
}

// benchOf is the result of the runs in reps: the median run's figures
// (by steps/s) and every run's steps/s.
func benchOf(reps []schemas.JobReport, disks int, acc float64, redisKind, natsKind string, conc int) Result {
	sort.Slice(reps, func(i, j int) bool { return reps[i].StepsPerSecond < reps[j].StepsPerSecond })
	res := benchFrom(reps[len(reps)/2], disks, acc, redisKind, natsKind, conc)
	res.Runs = len(reps)
	for _, r := range reps {
		res.RunStepsPerSecond = append(res.RunStepsPerSecond, math.Round(r.StepsPerSecond))
	}
	return res
}

func benchFrom(rep schemas.JobReport, disks int, acc float64, redisKind, natsKind string, conc int) Result {
	res := Result{
		Task: rep.Task, Disks: disks, Steps: rep.Steps, K: rep.K, SimAccuracy: acc, Redis: redisKind, NATS: natsKind,
		Concurrency: conc, CPUs: runtime.NumCPU(), GoMaxProcs: runtime.GOMAXPROCS(0), GOGC: GCPercent(), GoVersion: runtime.Version(),
		Solved: rep.Solved, Errors: rep.Errors, WallSeconds: rep.WallSeconds, StepsPerSecond: rep.StepsPerSecond,
		SamplesPerStep: rep.SamplesPerStep, ExpectedSamplesPerStep: rep.ExpectedSamplesPerStep,
		WastedSamples: rep.WastedSamples, TraceSHA256: rep.TraceSHA256,
		TargetStepsPerSecond: targetStepsPerSecond, TargetSamplesVsTheory: targetSamplesVsTheory,
	}
	if rep.Steps > 0 {
		res.PerStepOverheadUS = rep.WallSeconds / float64(rep.Steps) * 1e6
	}
	if rep.ExpectedSamplesPerStep > 0 {
		res.SamplesVsTheory = rep.SamplesPerStep / rep.ExpectedSamplesPerStep
	}
	res.MeetsTargets = res.StepsPerSecond >= targetStepsPerSecond && res.SamplesVsTheory <= targetSamplesVsTheory
	return res
}

// Print writes r as maker bench prints it.
func Print(w io.Writer, r Result) {
	mark := okMark
	fmt.Fprintf(w, "bench: hanoi %d disks (%d steps), k=%d, sim accuracy %g, redis %s, nats %s, %d CPUs, GOMAXPROCS %d, GOGC %d, %s\n",
		r.Disks, r.Steps, r.K, r.SimAccuracy, r.Redis, r.NATS, r.CPUs, r.GoMaxProcs, r.GOGC, r.GoVersion)
	fmt.Fprintf(w, "  median of %d runs  (steps/s per run: %v)\n", r.Runs, r.RunStepsPerSecond)
	fmt.Fprintf(w, "  steps/s            %8.0f   (target >= %d: %s)\n", r.StepsPerSecond, targetStepsPerSecond, mark(r.StepsPerSecond >= targetStepsPerSecond))
	fmt.Fprintf(w, "  per-step overhead  %8.0f µs\n", r.PerStepOverheadUS)
	fmt.Fprintf(w, "  samples/step       %8.3f   theory %.3f   ratio %.3f (target <= %.2f: %s)\n",
		r.SamplesPerStep, r.ExpectedSamplesPerStep, r.SamplesVsTheory, targetSamplesVsTheory, mark(r.SamplesVsTheory <= targetSamplesVsTheory))
	fmt.Fprintf(w, "  solved %v, wrong steps %d, wasted samples %d, wall %.2fs\n", r.Solved, r.Errors, r.WastedSamples, r.WallSeconds)
	if fr := r.Floor; fr != nil {
		fmt.Fprintf(w, "floor loop (3 samples a step, no model, task or journal), alternating with the jobs:\n")
		fmt.Fprintf(w, "  floor steps/s per run %v, median %.0f; jobs' %v, median %.0f\n", fr.FloorStepsPerSecond, fr.FloorMedian, fr.BenchStepsPerSecond, fr.BenchMedian)
		fmt.Fprintf(w, "  bench / floor        %8.2f in steps/s (target >= %.1f: %s), %.2f in samples/s (%.3f samples a step vs 3)\n",
			fr.Ratio, fr.Target, mark(fr.Ratio >= fr.Target), fr.SampleRatio, fr.SamplesPerStep)
	}
	if sp := r.Spec; sp != nil {
		fmt.Fprintf(w, "task spec %s, the same job, in pairs with the built-in's in the same fleet:\n", sp.Task)
		fmt.Fprintf(w, "  median of %d runs  (steps/s per run: %v)\n", sp.Runs, sp.RunStepsPerSecond)
		fmt.Fprintf(w, "  steps/s            %8.0f   %.2f× the built-in, the median pair (target >= %.1f: %s)\n", sp.StepsPerSecond, r.SpecVsBuiltin,
			targetSpecVsBuiltin, mark(r.SpecVsBuiltin >= targetSpecVsBuiltin))
		fmt.Fprintf(w, "  spec/built-in per pair: %v\n", r.PairRatios)
		fmt.Fprintf(w, "  samples/step       %8.3f   solved %v, wrong steps %d, trace sha256 %s\n", sp.SamplesPerStep, sp.Solved, sp.Errors, sp.TraceSHA256)
		same := "the same as"
		if sp.TraceSHA256 != r.TraceSHA256 {
			same = "NOT the same as"
		}
		fmt.Fprintf(w, "  trace %s the built-in's\n", same)
	}
}
