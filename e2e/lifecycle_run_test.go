package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestPauseResumeCancelRunningJob: pause stops a running job at a step
// boundary (no step is decided while it is paused), resume lets any
// coordinator pick it up where it stopped and it still ends with the true
// solution; cancel ends another job with a cancelled report. The controls
// go through the coordinator's control service: a pause asked twice is
// paused, and a person's answer for the paused healthy job's step is
// refused (finding 4: it used to override the step, and the job ended
// unsolved).
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
	if res := runMaker(t, 30*time.Second, "pause", "pausable", "--nats", svc.natsURL); res.code != 0 || res.stdout != "default/pausable: already paused\n" {
		t.Errorf("pause of the paused job: exit %d, %q, %s; want it already paused", res.code, res.stdout, res.stderr)
	}
	for _, step := range []int64{paused.Steps, paused.Steps + 1, 1 << 40} {
		res := runMaker(t, 30*time.Second, "decide", "pausable", "--step", strconv.FormatInt(step, 10),
			"--vote", `{"move":[1,0,2],"next_state":[[8,7,6,5,4,3,2],[],[1]]}`, "--by", "mallory", "--nats", svc.natsURL)
		if res.code != 2 || !strings.Contains(res.stderr, "not waiting for a person") {
			t.Errorf("decide step %d of the paused healthy job: exit %d, stderr %q; want it refused (exit 2)", step, res.code, res.stderr)
		}
	}
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
