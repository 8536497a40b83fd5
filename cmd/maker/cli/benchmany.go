package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"
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

// manyFlags say how many jobs run at once and on how many roles.
type manyFlags struct {
	jobs, coordinators, voters int
	// cpuProfile, when set, receives a CPU profile of the jobs at once.
	cpuProfile string
}

func addManyFlags(cmd *cobra.Command, m *manyFlags) {
	fl := cmd.Flags()
	fl.IntVar(&m.jobs, "jobs", 0, "measure N jobs at once instead (each --disks, k as for one), against one job alone on the same fleet")
	fl.IntVar(&m.coordinators, "coordinators", 1, "with --jobs: coordinators in the fleet (the jobs are shared among them)")
	fl.IntVar(&m.voters, "voters", 1, "with --jobs: voters in the fleet, each with --concurrency")
}

// check refuses flags that make no fleet.
func (m manyFlags) check() error {
	if m.jobs < 0 || m.coordinators < 1 || m.voters < 1 {
		return usagef("--jobs must be >= 0, --coordinators and --voters >= 1")
	}
	return nil
}

// perCoordinator is how many jobs each coordinator runs at once: all of
// them between the coordinators.
func (m manyFlags) perCoordinator() int {
	return max((m.jobs+m.coordinators-1)/m.coordinators, 16)
}

// manyResult is what maker bench --jobs measured.
type manyResult struct {
	Jobs         int `json:"jobs"`
	Coordinators int `json:"coordinators"`
	Voters       int `json:"voters"`
	Concurrency  int `json:"concurrency"`
	GoMaxProcs   int `json:"gomaxprocs"`
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

// benchMany runs one job alone, then m.jobs copies of spec at once, on f
// grown to m.coordinators coordinators and m.voters voters.
// f's first coordinator takes m.perCoordinator() jobs at once (startFleet,
// fleetOptions.maxJobs), and so do the others.
func benchMany(ctx context.Context, e *env, f *fleet.Fleet, spec schemas.JobSpec, m manyFlags, conc int, asJSON bool) error {
	perCoord := m.perCoordinator()
	for range m.coordinators - 1 {
		if _, err := f.AddCoordinator(coordinator.Config{MaxJobs: perCoord}); err != nil {
			return err
		}
	}
	for range m.voters - 1 {
		if _, err := f.AddVoter(nil, voter.Config{Concurrency: conc, Policy: voter.Policy{
			AllowModels: []string{voter.AnyModel}, MaxTokensCeiling: 1_000_000, TemperatureMax: 2}}); err != nil {
			return err
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
			return err
		}
		if single, err = jobs.Wait(ctx, f.Topo, s.Tenant, s.JobID, nil); err != nil {
			return err
		}
	}
	res := manyResult{
		Jobs: m.jobs, Coordinators: m.coordinators, Voters: m.voters, Concurrency: conc, GoMaxProcs: runtime.GOMAXPROCS(0),
		K: single.K, SingleStepsPerSecond: math.Round(single.StepsPerSecond), TargetSamplesPerS: targetManySamplesPerSecond,
	}
	if single.WallSeconds > 0 {
		res.SingleSamplesPerSecond = math.Round(float64(single.Samples) / single.WallSeconds)
	}
	_ = json.Unmarshal(spec.Params, &struct {
		Disks *int `json:"disks"`
	}{&res.Disks})
	if m.cpuProfile != "" {
		pf, err := os.Create(m.cpuProfile)
		if err != nil {
			return usagef("--cpuprofile: %v", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	specs := make([]schemas.JobSpec, m.jobs)
	for i := range specs {
		s, err := submit(spec)
		if err != nil {
			return err
		}
		specs[i] = s
	}
	reps := make([]schemas.JobReport, m.jobs)
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range specs {
		g.Go(func() error {
			rep, err := jobs.Wait(gctx, f.Topo, s.Tenant, s.JobID, nil)
			reps[i] = rep
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
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
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	w := e.stdout
	fmt.Fprintf(w, "bench --jobs: %d hanoi %d-disk jobs at once (k=%d), %d coordinators, %d voters (concurrency %d), GOMAXPROCS %d, %d CPUs\n",
		res.Jobs, res.Disks, res.K, res.Coordinators, res.Voters, res.Concurrency, res.GoMaxProcs, runtime.NumCPU())
	fmt.Fprintf(w, "  one job alone      %8.0f steps/s  %8.0f samples/s\n", res.SingleStepsPerSecond, res.SingleSamplesPerSecond)
	fmt.Fprintf(w, "  %d jobs at once   %8.0f steps/s  %8.0f samples/s  (%.2fx one job; target >= %d samples/s: %s)\n",
		res.Jobs, res.StepsPerSecond, res.SamplesPerSecond, res.VsSingle, targetManySamplesPerSecond, okMark(res.SamplesPerSecond >= targetManySamplesPerSecond))
	fmt.Fprintf(w, "  %d steps, %d samples in %.2fs; solved %d of %d, wrong steps %d\n", res.Steps, res.Samples, res.WallSeconds, res.Solved, res.Jobs, res.Errors)
	return nil
}

func okMark(ok bool) string {
	if ok {
		return "ok"
	}
	return "BELOW TARGET"
}
