package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// FairResult is what maker bench --fair measured.
type FairResult struct {
	// SmallDisks and BigDisks are the two tenants' jobs; BigK the big
	// job's k (it asks that many samples a step, twice the capacity).
	SmallDisks int `json:"small_disks"`
	BigDisks   int `json:"big_disks"`
	BigK       int `json:"big_k"`
	// Capacity is the fleet's in-flight capacity (the voter's
	// concurrency), LatencyMS the simulated model's latency.
	Capacity  int     `json:"capacity"`
	LatencyMS float64 `json:"latency_ms"`
	Runs      int     `json:"runs"`
	// AloneSeconds and SharedSeconds are the small job's median times
	// alone and while the big job runs; Ratio is the median of each
	// pair's shared over alone.
	AloneSeconds  float64 `json:"alone_seconds"`
	SharedSeconds float64 `json:"shared_seconds"`
	Ratio         float64 `json:"ratio"`
	Goal          float64 `json:"goal"`
	MeetsGoal     bool    `json:"meets_goal"`

	latency time.Duration // the model's, as Print shows it
}

// Fair measures fair sharing on the private fleet f: tenant small's
// job (spec) alone, then while tenant big's 16-disk job runs and asks for
// twice what the fleet answers at once, runs times each, the fleet's
// in-flight capacity set to the voter's concurrency.
func Fair(ctx context.Context, f *fleet.Fleet, spec schemas.JobSpec, capacity, runs int, latency time.Duration) (FairResult, error) {
	var res FairResult
	if _, err := quota.New(f.Topo).Set(ctx, schemas.TenantQuota{MaxInflightSamples: capacity}); err != nil {
		return res, err
	}
	small := spec
	small.Tenant = "small"
	timed := func() (float64, error) {
		start := time.Now()
		rep, err := runJob(ctx, f, small)
		if err == nil && !rep.Solved {
			err = fmt.Errorf("small job %s: %s (%s)", rep.JobID, rep.State, rep.Reason)
		}
		return time.Since(start).Seconds(), err
	}
	if _, err := timed(); err != nil { // warm-up
		return res, err
	}
	bigK := 2 * capacity
	res = FairResult{latency: latency, Capacity: capacity, LatencyMS: float64(latency) / float64(time.Millisecond), Runs: runs, BigDisks: 16, BigK: bigK, Goal: 1.5}
	if err := json.Unmarshal(small.Params, &struct {
		Disks *int `json:"disks"`
	}{&res.SmallDisks}); err != nil {
		return res, err
	}
	var alone, shared, ratios []float64
	for i := range runs {
		a, err := timed()
		if err != nil {
			return res, err
		}
		big := spec
		big.Tenant, big.K, big.JobID = "big", bigK, jobs.NewJobID()
		big.Params = json.RawMessage(`{"disks":16}`)
		big.Seed = int64(1000 + i)
		if _, err := jobs.Submit(ctx, f.JS, f.Bus, &big, builtin.Registry()); err != nil {
			return res, err
		}
		for {
			st, err := jobs.Status(ctx, f.Topo, big.Tenant, big.JobID)
			if err == nil && st.Steps >= 5 {
				break
			}
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		s, err := timed()
		if err != nil {
			return res, err
		}
		if _, err := jobs.Control(ctx, f.Topo, big.Tenant, big.JobID, schemas.ControlCancel); err != nil {
			return res, err
		}
		if _, err := jobs.Wait(ctx, f.Topo, big.Tenant, big.JobID, nil); err != nil {
			return res, err
		}
		alone, shared, ratios = append(alone, a), append(shared, s), append(ratios, s/a)
	}
	res.AloneSeconds, res.SharedSeconds, res.Ratio = median(alone), median(shared), median(ratios)
	res.MeetsGoal = res.Ratio <= res.Goal
	return res, nil
}

// PrintFair writes res as maker bench --fair prints it.
func PrintFair(w io.Writer, res FairResult) {
	fmt.Fprintf(w, "fair sharing: tenant small's %d-disk job, fleet capacity %d in flight, model latency %v, median of %d runs\n",
		res.SmallDisks, res.Capacity, res.latency, res.Runs)
	fmt.Fprintf(w, "  alone:                                  %.3fs\n", res.AloneSeconds)
	fmt.Fprintf(w, "  while tenant big's 16-disk job runs:    %.3fs (big asks k=%d a step)\n", res.SharedSeconds, res.BigK)
	verdict := "meets"
	if !res.MeetsGoal {
		verdict = "misses"
	}
	fmt.Fprintf(w, "  ratio %.2f (%s the goal <= %.1f)\n", res.Ratio, verdict, res.Goal)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
