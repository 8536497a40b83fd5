package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestCoordinatorSIGTERMHandsOver: a coordinator told to stop mid-job
// releases the job's lease at once, so the other coordinator resumes it at
// the last journaled step long before the lease would have expired; the
// journal holds each step once and the job ends with the true solution.
func TestCoordinatorSIGTERMHandsOver(t *testing.T) {
	const disks, job = 8, "handover"
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.9", "--seed", "7", "--latency", "5ms")
	// A long lease: only a release can explain a quick takeover.
	first := svc.startCoordinator(t, "coordinator-a", "--lease-ttl", "60s")
	v := svc.startVoter(t, "voter-1", model.url, "--concurrency", "8")
	svc.waitFleet(t, first, v)

	sub := startProc(t, "submit", submitArgs(svc.natsURL, disks, 3, 7, "--job-id", job)...)
	waitFor(t, 60*time.Second, "40 steps", func() bool {
		st, ok := svc.status(t, job)
		return ok && st.Steps >= 40
	}, sub, first, v)
	second := svc.startCoordinator(t, "coordinator-b", "--lease-ttl", "60s")
	first.signal(syscall.SIGTERM)
	if code := first.wait(30 * time.Second); code != 0 {
		t.Fatalf("coordinator-a exited %d after SIGTERM, want 0", code)
	}
	stoppedAt := time.Now()
	waitFor(t, 20*time.Second, "coordinator-b to take the job", func() bool {
		st, ok := svc.status(t, job)
		return ok && st.Coordinator == "coordinator-b"
	}, sub, second, v)
	if d := time.Since(stoppedAt); d > 15*time.Second {
		t.Errorf("takeover took %v; a released lease should be taken at the next scan", d)
	}
	if code := sub.wait(120 * time.Second); code != 0 {
		t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(t, sub.stdout())
	total := int64(1)<<disks - 1
	if !rep.Solved || rep.Steps != total || rep.TraceSHA256 != goldenTrace(t, disks) {
		t.Errorf("state %s, steps %d, trace %s: want solved with the golden trace", rep.State, rep.Steps, rep.TraceSHA256)
	}
	checkAccounting(t, rep)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var decisions, takeovers int64
	var resumedAt int64 = -1
	err := journal.ReadAll(ctx, svc.js, bus.DefaultNamespace, schemas.DefaultTenant, job, func(e journal.Entry) error {
		switch e.Type {
		case schemas.EntryDecision:
			if e.Step != decisions {
				t.Errorf("journal entry %d decides step %d, want %d", e.Seq, e.Step, decisions)
			}
			decisions++
		case schemas.EntryTakeover:
			takeovers++
			if e.Owner == "coordinator-b" {
				resumedAt = e.Step
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if decisions != total || takeovers != 2 || resumedAt < 40 {
		t.Errorf("journal: %d decisions, %d takeovers, coordinator-b resumed at step %d; want %d, 2, >= 40", decisions, takeovers, resumedAt, total)
	}
}
