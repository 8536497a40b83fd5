package coordinator_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/voter"
)

// TestCrashHook: a crash point calls Config.Crash once, at the step
// CrashAt names (the CLI exits there; e2e's TestChaosCrashPoints kills the
// process). A hook that returns lets the job go on to its answer; without
// a hook, CrashAt is ignored.
func TestCrashHook(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, crashAt string
		hook          bool
		want          []string
	}{
		{"after-count", coordinator.CrashAfterCount + ":3", true, []string{coordinator.CrashAfterCount}},
		{"after-journal", coordinator.CrashAfterJournal + ":3", true, []string{coordinator.CrashAfterJournal}},
		{"mid-wave", coordinator.CrashMidWave + ":3", true, []string{coordinator.CrashMidWave}},
		{"no hook", coordinator.CrashAfterCount + ":3", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu     sync.Mutex
				points []string
			)
			cfg := coordinator.Config{CrashAt: tc.crashAt}
			if tc.hook {
				cfg.Crash = func(point string) {
					mu.Lock()
					defer mu.Unlock()
					points = append(points, point)
				}
			}
			env := fleettest.New(t)
			rn := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 5})
			env.StartCoordinator(cfg)
			env.StartVoter(fleettest.SimClient(t, rn, llm.Config{}), voter.Config{})
			spec := fleettest.HanoiSpec(3, 2, 5)
			checkSolved(t, env.Run(&spec), 3)
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(points, tc.want) {
				t.Errorf("crash points reached %q, want %q", points, tc.want)
			}
		})
	}
}
