package e2e

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// backendJob is the job every backend test runs: hanoi with 5 disks (31
// steps) on the simulated model, seeded, with a little model latency so a
// fault can land mid-job. Its trace must be the golden one.
const (
	backendDisks    = 5
	backendK        = 3
	backendSeed     = 7
	backendAccuracy = 0.95
	// backendKillAt: the fault strikes once a sample request of this step
	// is out, a third of the way in.
	backendKillAt = 10
)

// runBackendJob starts a coordinator (id "coordinator-test") and a voter
// on env, submits the backend job, calls fault (if any) with its spec once the job has
// reached backendKillAt, and returns the report after checking that the
// job was solved with the golden trace and no step in error.
func runBackendJob(t *testing.T, env *fleettest.Env, fault func(schemas.JobSpec)) schemas.JobReport {
	t.Helper()
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: backendAccuracy, Seed: backendSeed, Latency: 5 * time.Millisecond})
	env.StartCoordinator(coordinator.Config{
		// A job that fails while the store fails over is retried soon.
		JobRetryDelay: 200 * time.Millisecond, MaxJobAttempts: 20,
	})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 16})
	spec := fleettest.HanoiSpec(backendDisks, backendK, backendSeed)
	// Sample requests published while a NATS node dies are lost (a plain
	// publish, no ack) and re-sampled after this timeout: 3s rather than
	// the default minute keeps the test short.
	spec.SampleTimeoutMS = 3000
	if fault != nil {
		requests := fleettest.Capture[schemas.SampleRequest](env, bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID))
		env.Submit(&spec)
		fleettest.Eventually(t, 30*time.Second, func() bool {
			for _, r := range requests.All() {
				if r.Step >= backendKillAt {
					return true
				}
			}
			return false
		}, "job never reached step %d", backendKillAt)
		fault(spec)
	} else {
		env.Submit(&spec)
	}
	rep := env.Wait(spec)
	checkBackendReport(t, rep)
	return rep
}

// checkBackendReport: solved, every step decided, the golden trace.
func checkBackendReport(t *testing.T, rep schemas.JobReport) {
	t.Helper()
	steps := int64(1)<<backendDisks - 1
	if rep.State != schemas.StateSolved || rep.Steps != steps || rep.Errors != 0 {
		t.Fatalf("state %q, %d steps, %d errors (reason %q); want solved, %d steps, none", rep.State, rep.Steps, rep.Errors, rep.Reason, steps)
	}
	if want := fleettest.GoldenTrace(backendDisks); rep.TraceSHA256 != want {
		t.Fatalf("trace_sha256 %s, want the golden trace %s", rep.TraceSHA256, want)
	}
}

// newBackendEnv is fleettest.NewWith, and at cleanup, once the fleet's
// clients are closed, waits (up to 5s) for go-redis's background dialers
// to notice: after a node was killed each sleeps a second between dials,
// and would otherwise be reported as leaked by TestMain.
func newBackendEnv(t *testing.T, b fleettest.Backends) *fleettest.Env {
	t.Helper()
	t.Cleanup(func() { // registered first: runs after the fleet's cleanups
		deadline := time.Now().Add(5 * time.Second)
		buf := make([]byte, 1<<20)
		for time.Now().Before(deadline) {
			n := runtime.Stack(buf, true)
			if !bytes.Contains(buf[:n], []byte("pool.(*ConnPool).tryDial")) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return fleettest.NewWith(t, b)
}
