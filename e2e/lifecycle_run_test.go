package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestPauseResumeCancelRunningJob: pause stops a running job at a step
// boundary (no step is decided while it is paused), resume lets any
// coordinator pick it up where it stopped and it still ends with the true
// solution; cancel ends another job with a cancelled report.
func TestPauseResumeCancelRunningJob(t *testing.T) {
	const disks = 8
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.9", "--seed", "7", "--latency", "5ms")
	coord := svc.startCoordinator(t, "coordinator", "--lease-ttl", "2s")
	v := svc.startVoter(t, "voter-1", model.url, "--concurrency", "8")
	svc.waitFleet(t, coord, v)

	sub := startProc(t, "submit", submitArgs(svc.natsURL, disks, 3, 7, "--job-id", "pausable")...)
	waitFor(t, 60*time.Second, "20 steps", func() bool {
		st, ok := svc.status(t, "pausable")
		return ok && st.Steps >= 20
	}, sub, coord, v)
	if res := runMaker(t, 30*time.Second, "pause", "pausable", "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("pause exited %d: %s", res.code, res.stderr)
	}
	var paused schemas.JobStatus
	waitFor(t, 30*time.Second, "the job paused", func() bool {
		res := runMaker(t, 30*time.Second, "status", "pausable", "--nats", svc.natsURL, "--json")
		return res.code == 0 && json.Unmarshal([]byte(res.stdout), &paused) == nil && paused.State == schemas.StatePaused
	}, sub, coord, v)
	time.Sleep(time.Second)
	if st, _ := svc.status(t, "pausable"); st.Steps != paused.Steps {
		t.Fatalf("steps moved from %d to %d while paused", paused.Steps, st.Steps)
	}
	if res := runMaker(t, 30*time.Second, "resume", "pausable", "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("resume exited %d: %s", res.code, res.stderr)
	}
	if code := sub.wait(120 * time.Second); code != 0 {
		t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(t, sub.stdout())
	if !rep.Solved || rep.Steps != 1<<disks-1 || rep.TraceSHA256 != goldenTrace(t, disks) {
		t.Errorf("after pause and resume: state %s, steps %d, trace %s; want solved with the golden trace", rep.State, rep.Steps, rep.TraceSHA256)
	}
	checkAccounting(t, rep)
	res := runMaker(t, 30*time.Second, "result", "pausable", "--nats", svc.natsURL, "--json")
	if res.code != 0 || parseReport(t, res.stdout).TraceSHA256 != rep.TraceSHA256 {
		t.Errorf("result exited %d: %s", res.code, res.stderr)
	}

	sub2 := startProc(t, "submit-2", submitArgs(svc.natsURL, disks, 3, 7, "--job-id", "doomed")...)
	waitFor(t, 60*time.Second, "10 steps", func() bool {
		st, ok := svc.status(t, "doomed")
		return ok && st.Steps >= 10
	}, sub2, coord, v)
	if res := runMaker(t, 30*time.Second, "cancel", "doomed", "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("cancel exited %d: %s", res.code, res.stderr)
	}
	if code := sub2.wait(60 * time.Second); code != 0 {
		t.Fatalf("submit of the cancelled job exited %d: %s", code, sub2.stderr())
	}
	rep2 := parseReport(t, sub2.stdout())
	if rep2.State != schemas.StateCancelled || rep2.Solved || rep2.Steps >= 1<<disks-1 {
		t.Errorf("cancelled job: state %s, solved %v, steps %d", rep2.State, rep2.Solved, rep2.Steps)
	}
	if res := runMaker(t, 30*time.Second, "pause", "doomed", "--nats", svc.natsURL); res.code != 2 {
		t.Errorf("pausing a cancelled job exited %d, want 2: %s", res.code, res.stderr)
	}
}
