package cli

import (
	"encoding/json"
	"testing"

	"github.com/makerfleet/makerfleet/internal/app/bench"
)

// bench --floor runs the floor loop alternating with the measured jobs
// and compares the medians; bench --jobs runs jobs at once on a fleet of
// several roles and compares them with one alone. Figures are not
// asserted (a noisy machine must not fail the build), only that they were
// measured.
func TestBenchFloorAndMany(t *testing.T) {
	t.Run("floor", func(t *testing.T) {
		res := runMain(t, "bench", "--json", "--runs", "2", "--disks", "4", "--floor", "--floor-steps", "50")
		if res.code != ExitOK {
			t.Fatalf("exit %d; stderr:\n%s", res.code, res.stderr)
		}
		var r bench.Result
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
			t.Fatalf("%v\n%s", err, res.stdout)
		}
		fr := r.Floor
		if fr == nil || len(fr.FloorStepsPerSecond) != 2 || len(fr.BenchStepsPerSecond) != 2 || fr.FloorMedian <= 0 || fr.Ratio <= 0 || fr.Target != 0.8 {
			t.Fatalf("floor comparison: %+v", fr)
		}
	})
	t.Run("jobs", func(t *testing.T) {
		res := runMain(t, "bench", "--json", "--disks", "4", "--jobs", "6", "--coordinators", "2", "--voters", "2", "--gomaxprocs", "0")
		if res.code != ExitOK {
			t.Fatalf("exit %d; stderr:\n%s", res.code, res.stderr)
		}
		var r bench.ManyResult
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
			t.Fatalf("%v\n%s", err, res.stdout)
		}
		if r.Jobs != 6 || r.Solved != 6 || r.Steps != 6*15 || r.Coordinators != 2 || r.Voters != 2 || r.SamplesPerSecond <= 0 || r.SingleStepsPerSecond <= 0 {
			t.Fatalf("many jobs: %+v", r)
		}
	})
	t.Run("bad flags", func(t *testing.T) {
		for _, args := range [][]string{{"--jobs", "-1"}, {"--jobs", "2", "--voters", "0"}, {"--floor", "--floor-steps", "0"}} {
			if res := runMain(t, append([]string{"bench"}, args...)...); res.code != ExitUsage {
				t.Errorf("bench %v: exit %d, want %d", args, res.code, ExitUsage)
			}
		}
	})
}
