package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/pprof"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/voter"
)

// Many jobs on one fleet (issue "The paper's million steps": 100
// concurrent 10-disk jobs, aggregate samples/s against a single job's,
// target >= 10,000 samples/s with the zero-latency simulated model).

// targetManySamplesPerSecond is the aggregate target.
const targetManySamplesPerSecond = 10_000

// ManyConfig says how many jobs run at once and on how many roles.
type ManyConfig struct {
	Jobs, Coordinators, Voters int
	// CPUProfile, when set, opens where a CPU profile of the jobs at once
	// is written (just before they are submitted); its error is returned
	// as is.
	CPUProfile func() (io.WriteCloser, error)
}

// PerCoordinator is how many jobs each coordinator runs at once: all of
// them between the coordinators.
func (m ManyConfig) PerCoordinator() int {
	return max((m.Jobs+m.Coordinators-1)/m.Coordinators, 16)
}

// ManyResult is what maker bench --jobs measured.
type ManyResult struct {
	Jobs         int `json:"jobs"`
	Coordinators int `json:"coordinators"`
	Voters       int `json:"voters"`
	Concurrency  int `json:"concurrency"`
	GoMaxProcs   int `json:"gomaxprocs"`
	GOGC         int `json:"gogc"`
	Disks        int `json:"disks"`
	K            int `json:"k"`
	// Single is one job alone on the same fleet, just before.
	SingleStepsPerSecond   float64 `json:"single_steps_per_second"`
	SingleSamplesPerSecond float64 `json:"single_samples_per_second"`
	// The jobs together: from the first submit to the last report.
	WallSeconds       float64 `json:"wall_seconds"`
	Steps             int64   `json:"steps"`
	Samples           int64   `json:"samples"`
	StepsPerSecond    float64 `json:"steps_per_second"`
	SamplesPerSecond  float64 `json:"samples_per_second"`
	VsSingle          float64 `json:"vs_single"`
	Solved            int     `json:"solved"`
	Errors            int64   `json:"errors"`
	TargetSamplesPerS float64 `json:"target_samples_per_second"`
}

// Many runs one job alone, then m.Jobs copies of spec at once, on f grown
// to m.Coordinators coordinators and m.Voters voters. f's first
// coordinator must take m.PerCoordinator() jobs at once, as the others
// added here do.
func Many(ctx context.Context, f *fleet.Fleet, spec schemas.JobSpec, m ManyConfig, conc int) (ManyResult, error) {
	var res ManyResult
	perCoord := m.PerCoordinator()
	for range m.Coordinators - 1 {
		if _, err := f.AddCoordinator(coordinator.Config{MaxJobs: perCoord}); err != nil {
			return res, err
		}
	}
	for range m.Voters - 1 {
		if _, err := f.AddVoter(nil, voter.Config{Concurrency: conc, Policy: voter.Policy{
			AllowModels: []string{voter.AnyModel}, MaxTokensCeiling: 1_000_000, TemperatureMax: 2}}); err != nil {
			return res, err
		}
	}
	submit := func(s schemas.JobSpec) (schemas.JobSpec, error) {
		s.JobID = jobs.NewJobID()
		_, err := jobs.Submit(ctx, f.JS, f.Bus, &s, builtin.Registry())
		return s, err
	}
	// Warm-up, then one job alone.
	var single schemas.JobReport
	for range 2 {
		s, err := submit(spec)
		if err != nil {
			return res, err
		}
		if single, err = jobs.Wait(ctx, f.Topo, s.Tenant, s.JobID, nil); err != nil {
			return res, err
		}
	}
	res = ManyResult{
		Jobs: m.Jobs, Coordinators: m.Coordinators, Voters: m.Voters, Concurrency: conc, GoMaxProcs: runtime.GOMAXPROCS(0), GOGC: GCPercent(),
		K: single.K, SingleStepsPerSecond: math.Round(single.StepsPerSecond), TargetSamplesPerS: targetManySamplesPerSecond,
	}
	if single.WallSeconds > 0 {
		res.SingleSamplesPerSecond = math.Round(float64(single.Samples) / single.WallSeconds)
	}
	_ = json.Unmarshal(spec.Params, &struct {
		Disks *int `json:"disks"`
	}{&res.Disks})
	if m.CPUProfile != nil {
		pf, err := m.CPUProfile()
		if err != nil {
			return res, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	specs := make([]schemas.JobSpec, m.Jobs)
	for i := range specs {
		s, err := submit(spec)
		if err != nil {
			return res, err
		}
		specs[i] = s
	}
	reps := make([]schemas.JobReport, m.Jobs)
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range specs {
		g.Go(func() error {
			rep, err := jobs.Wait(gctx, f.Topo, s.Tenant, s.JobID, nil)
			reps[i] = rep
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.WallSeconds = time.Since(start).Seconds()
	for _, r := range reps {
		res.Steps += r.Steps
		res.Samples += r.Samples
		res.Errors += r.Errors
		if r.Solved {
			res.Solved++
		}
	}
	res.StepsPerSecond = math.Round(float64(res.Steps) / res.WallSeconds)
	res.SamplesPerSecond = math.Round(float64(res.Samples) / res.WallSeconds)
	if res.SingleStepsPerSecond > 0 {
		res.VsSingle = math.Round(res.StepsPerSecond/res.SingleStepsPerSecond*100) / 100
	}
	return res, nil
}

// PrintMany writes res as maker bench --jobs prints it.
func PrintMany(w io.Writer, res ManyResult) {
	fmt.Fprintf(w, "bench --jobs: %d hanoi %d-disk jobs at once (k=%d), %d coordinators, %d voters (concurrency %d), GOMAXPROCS %d, GOGC %d, %d CPUs\n",
		res.Jobs, res.Disks, res.K, res.Coordinators, res.Voters, res.Concurrency, res.GoMaxProcs, res.GOGC, runtime.NumCPU())
	fmt.Fprintf(w, "  one job alone      %8.0f steps/s  %8.0f samples/s\n", res.SingleStepsPerSecond, res.SingleSamplesPerSecond)
	fmt.Fprintf(w, "  %d jobs at once   %8.0f steps/s  %8.0f samples/s  (%.2fx one job; target >= %d samples/s: %s)\n",
		res.Jobs, res.StepsPerSecond, res.SamplesPerSecond, res.VsSingle, targetManySamplesPerSecond, okMark(res.SamplesPerSecond >= targetManySamplesPerSecond))
	fmt.Fprintf(w, "  %d steps, %d samples in %.2fs; solved %d of %d, wrong steps %d\n", res.Steps, res.Samples, res.WallSeconds, res.Solved, res.Jobs, res.Errors)
}

func okMark(ok bool) string {
	if ok {
		return "ok"
	}
	return "BELOW TARGET"
}
