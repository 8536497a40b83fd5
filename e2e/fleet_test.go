package e2e

import (
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// submitArgs are the flags of `maker submit --wait --json` for a hanoi job.
func submitArgs(natsURL string, disks, k int, seed int64, extra ...string) []string {
	return append([]string{
		"submit", "--nats", natsURL, "--task", "hanoi", "--disks", strconv.Itoa(disks),
		"--k", strconv.Itoa(k), "--seed", strconv.FormatInt(seed, 10), "--wait", "--json", "--timeout", "100s",
	}, extra...)
}

// checkAccounting checks the report's sample accounting: every counted
// sample is a vote or a red flag, the wasted ones add up, the per-step
// figures match the counts, and every decided step had at least k votes.
func checkAccounting(t *testing.T, rep schemas.JobReport) {
	t.Helper()
	if rep.Votes+rep.RedFlagged != rep.Samples {
		t.Errorf("votes %d + red_flagged %d != samples %d: a sample counted twice or not at all", rep.Votes, rep.RedFlagged, rep.Samples)
	}
	if w := rep.SkippedSamples + rep.CancelledSamples + rep.LateSamples + rep.DuplicateResults + rep.SpeculativeWasted; w != rep.WastedSamples {
		t.Errorf("wasted_samples %d != skipped %d + cancelled %d + late %d + duplicates %d + lost speculation %d",
			rep.WastedSamples, rep.SkippedSamples, rep.CancelledSamples, rep.LateSamples, rep.DuplicateResults, rep.SpeculativeWasted)
	}
	if rep.Steps > 0 {
		if want := float64(rep.Samples) / float64(rep.Steps); math.Abs(rep.SamplesPerStep-want) > 1e-9 {
			t.Errorf("samples_per_step %v, want samples/steps = %v", rep.SamplesPerStep, want)
		}
		if floor := int64(rep.K) * rep.Steps; rep.Votes < floor {
			t.Errorf("votes %d < k*steps %d: a step decided below margin k", rep.Votes, floor)
		}
	}
	if rep.WallSeconds <= 0 || rep.StepsPerSecond <= 0 {
		t.Errorf("wall_seconds %v, steps_per_second %v: want both > 0", rep.WallSeconds, rep.StepsPerSecond)
	}
	if rep.ExpectedSamplesPerStep <= 0 {
		t.Errorf("expected_samples_per_step %v, want > 0 (submit has a default p)", rep.ExpectedSamplesPerStep)
	}
	if rep.MaxSamplesInStep < rep.K {
		t.Errorf("max_samples_in_step %d < k %d", rep.MaxSamplesInStep, rep.K)
	}
}

// TestFleetEightDisks runs an even-disk job on a fleet of separate
// processes: simulated model, coordinator, two voters, submit --wait.
func TestFleetEightDisks(t *testing.T) { testFleet(t, 8) }

// TestFleetSevenDisks is the odd case: disk 1 cycles the other way.
func TestFleetSevenDisks(t *testing.T) { testFleet(t, 7) }

func testFleet(t *testing.T, disks int) {
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.9", "--seed", "7")
	coord := svc.startCoordinator(t, "coordinator")
	v1 := svc.startVoter(t, "voter-1", model.url, "--concurrency", "4")
	v2 := svc.startVoter(t, "voter-2", model.url, "--concurrency", "4")
	svc.waitFleet(t, coord, v1, v2)

	res := runMaker(t, 120*time.Second, submitArgs(svc.natsURL, disks, 4, 7)...)
	if res.code != 0 {
		t.Fatalf("submit exited %d: %s", res.code, res.stderr)
	}
	rep := parseReport(t, res.stdout)
	steps := int64(1)<<disks - 1
	if !rep.Solved || rep.State != schemas.StateSolved {
		t.Errorf("state %s (solved %v), want solved: %s", rep.State, rep.Solved, rep.Reason)
	}
	if rep.Errors != 0 || rep.Steps != steps || rep.TotalSteps != steps || rep.K != 4 {
		t.Errorf("errors %d, steps %d/%d, k %d; want 0, %d/%d, 4", rep.Errors, rep.Steps, rep.TotalSteps, rep.K, steps, steps)
	}
	checkAccounting(t, rep)
	if want := goldenTrace(t, disks); rep.TraceSHA256 != want {
		t.Errorf("trace_sha256 %s, want the true solution's %s", rep.TraceSHA256, want)
	}
	if st := model.stats(t); st.Completions < rep.Samples {
		t.Errorf("simllm answered %d calls, fewer than the %d samples counted", st.Completions, rep.Samples)
	}
	if !strings.Contains(res.stderr, "submitted hanoi") {
		t.Errorf("submit --wait did not say what it submitted on stderr: %q", res.stderr)
	}
	t.Logf("%d disks: %d samples (%.2f/step, theory %.2f), wasted %d, %.2fs",
		disks, rep.Samples, rep.SamplesPerStep, rep.ExpectedSamplesPerStep, rep.WastedSamples, rep.WallSeconds)
}

// TestSameTraceInProcessAndFleet: the simulated model answers each request
// deterministically and votes are counted in index order, so `maker run`
// (one process) and a fleet of processes, with answers arriving in another
// order, decide the very same steps from the very same samples. Accuracy
// 0.75 makes steps need many samples, so order would show if it mattered.
func TestSameTraceInProcessAndFleet(t *testing.T) {
	const disks, k, seed = 7, 3, 11
	inproc := runMaker(t, 120*time.Second, "run", "--task", "hanoi", "--disks", strconv.Itoa(disks), "--k", strconv.Itoa(k),
		"--sim-accuracy", "0.75", "--seed", strconv.Itoa(seed), "--json", "--quiet")
	if inproc.code != 0 {
		t.Fatalf("run exited %d: %s", inproc.code, inproc.stderr)
	}
	want := parseReport(t, inproc.stdout)

	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.75", "--seed", strconv.Itoa(seed))
	coord := svc.startCoordinator(t, "coordinator")
	v1 := svc.startVoter(t, "voter-1", model.url, "--concurrency", "4")
	v2 := svc.startVoter(t, "voter-2", model.url, "--concurrency", "4")
	svc.waitFleet(t, coord, v1, v2)
	res := runMaker(t, 120*time.Second, submitArgs(svc.natsURL, disks, k, seed)...)
	if res.code != 0 {
		t.Fatalf("submit exited %d: %s", res.code, res.stderr)
	}
	got := parseReport(t, res.stdout)

	type figures struct {
		State                                string
		Steps, Errors, Samples, Votes, RedFl int64
		MaxInStep                            int
		MaxStep                              int64
		Trace                                string
	}
	fig := func(r schemas.JobReport) figures {
		return figures{r.State, r.Steps, r.Errors, r.Samples, r.Votes, r.RedFlagged, r.MaxSamplesInStep, r.MaxSamplesStep, r.TraceSHA256}
	}
	if fig(got) != fig(want) {
		t.Errorf("fleet and in-process runs differ:\n fleet      %+v\n in-process %+v", fig(got), fig(want))
	}
	checkAccounting(t, got)
	t.Logf("accuracy 0.75: %s, %d samples (%.2f/step), hardest step %d samples, golden trace %v",
		got.State, got.Samples, got.SamplesPerStep, got.MaxSamplesInStep, got.TraceSHA256 == goldenTrace(t, disks))
}

// TestVoterKilledMidRun SIGKILLs a voter while it holds a model call in
// flight. The samples it took die with it; the coordinator re-samples them
// after the sample timeout and the job still ends solved, with the true
// solution, every sample counted once.
func TestVoterKilledMidRun(t *testing.T) {
	const disks, jobID = 8, "killed-voter"
	svc := startServices(t, true)
	// Each voter has a simulated model of its own, alike in everything (the
	// answers are a function of the seed and the request): calls in flight
	// at the victim's model are the victim's.
	victimModel := startSim(t, "simllm-victim", "--accuracy", "0.9", "--seed", "7", "--latency", "20ms")
	survivorModel := startSim(t, "simllm-survivor", "--accuracy", "0.9", "--seed", "7", "--latency", "20ms")
	coord := svc.startCoordinator(t, "coordinator")
	victim := svc.startVoter(t, "victim", victimModel.url, "--concurrency", "4")
	survivor := svc.startVoter(t, "survivor", survivorModel.url, "--concurrency", "4")
	svc.waitFleet(t, coord, victim, survivor)

	sub := startProc(t, "submit", submitArgs(svc.natsURL, disks, 4, 7, "--job-id", jobID, "--sample-timeout", "2s")...)
	total := int64(1)<<disks - 1
	waitFor(t, 60*time.Second, "30% of the steps", func() bool {
		st, ok := svc.status(t, jobID)
		return ok && st.Steps >= total*3/10
	}, sub, coord, victim, survivor)

	// Freeze the victim, then look: a call its model has not answered yet
	// can no longer reach it. With one in flight, kill it; else let it go
	// on and look again.
	killed := false
	waitFor(t, 30*time.Second, "the victim to hold a model call", func() bool {
		victim.signal(syscall.SIGSTOP)
		if victimModel.stats(t).inFlight() >= 1 {
			victim.signal(syscall.SIGKILL)
			killed = true
			return true
		}
		victim.signal(syscall.SIGCONT)
		return false
	}, sub, coord, victim, survivor)
	if !killed {
		t.Fatal("victim not killed")
	}
	if code := victim.wait(10 * time.Second); code != -1 {
		t.Errorf("victim exit code %d, want -1 (killed)", code)
	}
	killedAt, _ := svc.status(t, jobID)

	if code := sub.wait(100 * time.Second); code != 0 {
		t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(t, sub.stdout())
	if !rep.Solved || rep.Errors != 0 || rep.Steps != total {
		t.Errorf("state %s, errors %d, steps %d; want solved, 0, %d (%s)", rep.State, rep.Errors, rep.Steps, total, rep.Reason)
	}
	if want := goldenTrace(t, disks); rep.TraceSHA256 != want {
		t.Errorf("trace_sha256 %s, want the true solution's %s", rep.TraceSHA256, want)
	}
	checkAccounting(t, rep)
	// No vote counted twice, none lost: the simulated model answers a
	// function of the request, votes count in index order and a re-sample
	// asks the same question, so the killed voter's run must count exactly
	// what a fault-free run of the same job counts. A vote counted twice
	// (or a lost one) would shift some step's decision point.
	clean := runMaker(t, 120*time.Second, "run", "--task", "hanoi", "--disks", strconv.Itoa(disks), "--k", "4",
		"--sim-accuracy", "0.9", "--seed", "7", "--json", "--quiet")
	if clean.code != 0 {
		t.Fatalf("fault-free run exited %d: %s", clean.code, clean.stderr)
	}
	want := parseReport(t, clean.stdout)
	if rep.Samples != want.Samples || rep.Votes != want.Votes || rep.RedFlagged != want.RedFlagged ||
		rep.MaxSamplesInStep != want.MaxSamplesInStep || rep.TraceSHA256 != want.TraceSHA256 {
		t.Errorf("counted %d samples (%d votes, %d red flags, hardest step %d), a fault-free run %d (%d, %d, %d)",
			rep.Samples, rep.Votes, rep.RedFlagged, rep.MaxSamplesInStep, want.Samples, want.Votes, want.RedFlagged, want.MaxSamplesInStep)
	}
	// The victim's call was for an index its step cannot be decided
	// without (waves never overshoot), so it must have been re-sampled.
	if rep.Resampled < 1 {
		t.Errorf("resampled %d: the victim's lost samples were never re-sampled", rep.Resampled)
	}
	if calls := victimModel.stats(t).Completions + survivorModel.stats(t).Completions; calls < rep.Samples {
		t.Errorf("the models answered %d calls, fewer than the %d samples counted: a sample was counted without a model call", calls, rep.Samples)
	}
	if survivor.exited() {
		t.Errorf("survivor exited: %v", survivor.cmd.ProcessState)
	}
	t.Logf("killed at step %d/%d; resampled %d, duplicates %d, late %d, wasted %d, %.2fs",
		killedAt.Steps, total, rep.Resampled, rep.DuplicateResults, rep.LateSamples, rep.WastedSamples, rep.WallSeconds)
}

// TestVoterSIGTERMDrains: a voter told to stop while its (slow) model calls
// are in flight stops pulling, finishes them, hands nothing back and exits
// 0 well within its drain timeout; another voter finishes the job.
func TestVoterSIGTERMDrains(t *testing.T) {
	const disks, jobID, drain = 5, "drained-voter", 10 * time.Second
	svc := startServices(t, true)
	slow := startSim(t, "simllm-slow", "--accuracy", "0.9", "--seed", "7", "--latency", "300ms")
	fast := startSim(t, "simllm-fast", "--accuracy", "0.9", "--seed", "7")
	coord := svc.startCoordinator(t, "coordinator")
	drained := svc.startVoter(t, "drained", slow.url, "--concurrency", "4", "--drain-timeout", drain.String())
	other := svc.startVoter(t, "other", fast.url, "--concurrency", "4")
	svc.waitFleet(t, coord, drained, other)

	sub := startProc(t, "submit", submitArgs(svc.natsURL, disks, 3, 7, "--job-id", jobID, "--sample-timeout", "5s")...)
	// Only the drained voter calls the slow model: a call in flight there
	// is one of its own.
	waitFor(t, 30*time.Second, "the drained voter to hold a model call", func() bool {
		return slow.stats(t).inFlight() >= 1
	}, sub, coord, drained, other)
	sentAt := time.Now()
	drained.signal(syscall.SIGTERM)
	code := drained.wait(drain + 5*time.Second)
	took := drained.exitTime().Sub(sentAt)
	if code != 0 {
		t.Errorf("drained voter exited %d after SIGTERM, want 0", code)
	}
	if took >= drain {
		t.Errorf("drained voter took %s to exit, not within its drain timeout %s", took, drain)
	}
	log := drained.stderr()
	if !strings.Contains(log, "voter stopped") || !strings.Contains(log, "HandedBack:0") {
		t.Errorf("drained voter did not stop cleanly with nothing handed back:\n%s", log)
	}
	if strings.Contains(log, "drain timeout") {
		t.Errorf("drained voter hit its drain timeout")
	}
	if st := slow.stats(t); st.inFlight() != 0 || st.Canceled != 0 {
		t.Errorf("slow model: %d calls still in flight, %d cancelled; the drain should have finished them", st.inFlight(), st.Canceled)
	}

	if code := sub.wait(100 * time.Second); code != 0 {
		t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(t, sub.stdout())
	if !rep.Solved || rep.TraceSHA256 != goldenTrace(t, disks) {
		t.Errorf("state %s, trace %s: want solved with the true solution", rep.State, rep.TraceSHA256)
	}
	checkAccounting(t, rep)
	t.Logf("drained in %s; job resampled %d, wasted %d, %.2fs", took.Round(time.Millisecond), rep.Resampled, rep.WastedSamples, rep.WallSeconds)
}

// TestVoterSIGTERMDrainTimeoutHandsBack: when the calls in hand outlast the
// drain timeout, the voter cancels them, hands the samples back at once
// (no waiting out AckWait or the sample timeout) and still exits 0; another
// voter answers them.
func TestVoterSIGTERMDrainTimeoutHandsBack(t *testing.T) {
	const disks, jobID, drain = 4, "handed-back", 300 * time.Millisecond
	svc := startServices(t, true)
	hung := startSim(t, "simllm-hung", "--accuracy", "0.9", "--seed", "7", "--latency", "10m")
	fast := startSim(t, "simllm-fast", "--accuracy", "0.9", "--seed", "7")
	coord := svc.startCoordinator(t, "coordinator")
	stuck := svc.startVoter(t, "stuck", hung.url, "--concurrency", "2", "--drain-timeout", drain.String())
	svc.waitFleet(t, coord, stuck)

	// The sample timeout is far longer than the test: only a hand-back can
	// get the stuck voter's samples answered in time.
	sub := startProc(t, "submit", submitArgs(svc.natsURL, disks, 3, 7, "--job-id", jobID, "--sample-timeout", "10m")...)
	waitFor(t, 30*time.Second, "the stuck voter to hold its calls", func() bool {
		return hung.stats(t).inFlight() >= 2
	}, sub, coord, stuck)
	other := svc.startVoter(t, "other", fast.url, "--concurrency", "4")
	waitFor(t, 20*time.Second, "the other voter to start", func() bool {
		return strings.Contains(other.stderr(), "voter started")
	}, other)

	sentAt := time.Now()
	stuck.signal(syscall.SIGTERM)
	if code := stuck.wait(10 * time.Second); code != 0 {
		t.Errorf("stuck voter exited %d after SIGTERM, want 0", code)
	}
	took := stuck.exitTime().Sub(sentAt)
	if took < drain || took > drain+5*time.Second {
		t.Errorf("stuck voter exited %s after SIGTERM; want just after its %s drain timeout", took, drain)
	}
	if log := stuck.stderr(); !strings.Contains(log, "soft stop timeout") || strings.Contains(log, "HandedBack:0") {
		t.Errorf("stuck voter should have timed out its drain and handed samples back:\n%s", log)
	}
	if code := sub.wait(60 * time.Second); code != 0 {
		t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(t, sub.stdout())
	if !rep.Solved || rep.TraceSHA256 != goldenTrace(t, disks) {
		t.Errorf("state %s, trace %s: want solved with the true solution", rep.State, rep.TraceSHA256)
	}
	if rep.Resampled != 0 {
		t.Errorf("resampled %d: handed-back samples should be redelivered, not wait for the sample timeout", rep.Resampled)
	}
	checkAccounting(t, rep)
	t.Logf("drain timed out after %s; job took %.2fs", took.Round(time.Millisecond), rep.WallSeconds)
}

// TestSubmitWithoutWait: without --wait, submit prints the job id (or, with
// --json, what was submitted) and returns; a second submit of the same job
// id is recognised as a duplicate and not queued again. No coordinator
// runs, so the job stream keeps what was queued.
func TestSubmitWithoutWait(t *testing.T) {
	svc := startServices(t, false)
	base := []string{"submit", "--nats", svc.natsURL, "--disks", "5", "--k", "2"}

	res := runMaker(t, 30*time.Second, base...)
	if res.code != 0 {
		t.Fatalf("submit exited %d: %s", res.code, res.stderr)
	}
	id := strings.TrimSpace(res.stdout)
	if err := schemas.ValidJobID(id); err != nil || strings.Contains(id, "\n") {
		t.Fatalf("submit printed %q, want one job id: %v", res.stdout, err)
	}
	if n := svc.jobMessages(t); n != 1 {
		t.Fatalf("job stream holds %d messages after one submit, want 1", n)
	}

	sub := func() map[string]any {
		t.Helper()
		res := runMaker(t, 30*time.Second, append(base, "--job-id", "twice", "--json")...)
		if res.code != 0 {
			t.Fatalf("submit exited %d: %s", res.code, res.stderr)
		}
		return parseJSONOnly(t, res.stdout)
	}
	first, second := sub(), sub()
	if first["job_id"] != "twice" || first["tenant"] != "default" || first["duplicate"] != false {
		t.Errorf("first submit printed %v, want job_id twice, tenant default, duplicate false", first)
	}
	if second["job_id"] != "twice" || second["duplicate"] != true {
		t.Errorf("second submit of the same id printed %v, want duplicate true", second)
	}
	if n := svc.jobMessages(t); n != 2 {
		t.Errorf("job stream holds %d messages, want 2 (the first job and one copy of %q)", n, "twice")
	}
}

// TestCoordinatorSIGTERMHandsJobBack: a coordinator told to stop mid-job
// hands the job back to the job stream and exits 0; a coordinator started
// later takes the job and brings it to a solved end.
func TestCoordinatorSIGTERMHandsJobBack(t *testing.T) {
	const disks, jobID = 7, "handed-over"
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.9", "--seed", "7", "--latency", "10ms")
	first := svc.startCoordinator(t, "coordinator-1")
	v1 := svc.startVoter(t, "voter-1", model.url, "--concurrency", "4")
	v2 := svc.startVoter(t, "voter-2", model.url, "--concurrency", "4")
	svc.waitFleet(t, first, v1, v2)

	sub := startProc(t, "submit", submitArgs(svc.natsURL, disks, 3, 7, "--job-id", jobID, "--sample-timeout", "2s")...)
	total := int64(1)<<disks - 1
	waitFor(t, 60*time.Second, "30% of the steps", func() bool {
		st, ok := svc.status(t, jobID)
		return ok && st.Steps >= total*3/10
	}, sub, first, v1, v2)
	first.signal(syscall.SIGTERM)
	if code := first.wait(15 * time.Second); code != 0 {
		t.Errorf("coordinator exited %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(first.stderr(), "job handed back at shutdown") {
		t.Errorf("first coordinator did not hand the job back:\n%s", first.stderr())
	}
	stoppedAt, _ := svc.status(t, jobID)

	second := svc.startCoordinator(t, "coordinator-2")
	if code := sub.wait(60 * time.Second); code != 0 {
		t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(t, sub.stdout())
	if !rep.Solved || rep.Steps != total || rep.TraceSHA256 != goldenTrace(t, disks) {
		t.Errorf("state %s, steps %d, trace %s: want solved, %d, the true solution", rep.State, rep.Steps, rep.TraceSHA256, total)
	}
	checkAccounting(t, rep)
	if !strings.Contains(second.stderr(), "job finished") {
		t.Errorf("the second coordinator did not finish the job:\n%s", second.stderr())
	}
	t.Logf("first coordinator stopped at step %d/%d; the second resumed the job there (report: %d steps, %.2fs)",
		stoppedAt.Steps, total, rep.Steps, rep.WallSeconds)
}

// TestSubmitConflictingJobID: a job id belongs to the job that finished
// under it. Submitting another job (other disks) under that id is refused
// as bad input, naming the conflict, and nothing is enqueued; submitting
// the same job again prints the existing report without running it again.
func TestSubmitConflictingJobID(t *testing.T) {
	const jobID = "taken"
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "1", "--seed", "3") // k 1 solves
	coord := svc.startCoordinator(t, "coordinator")
	v := svc.startVoter(t, "voter", model.url, "--concurrency", "4")
	svc.waitFleet(t, coord, v)

	first := runMaker(t, 60*time.Second, submitArgs(svc.natsURL, 4, 1, 3, "--job-id", jobID)...)
	if first.code != 0 {
		t.Fatalf("first submit exited %d: %s", first.code, first.stderr)
	}
	rep := parseReport(t, first.stdout)
	if !rep.Solved || rep.JobID != jobID {
		t.Fatalf("first job: %s %s, want %s solved", rep.JobID, rep.State, jobID)
	}

	other := runMaker(t, 60*time.Second, "submit", "--nats", svc.natsURL, "--job-id", jobID, "--disks", "3", "--k", "1", "--wait")
	checkRefused(t, other, "different job")
	if !strings.Contains(other.stderr, jobID) {
		t.Errorf("the refusal does not name the job id: %q", other.stderr)
	}
	if n := svc.jobMessages(t); n != 0 {
		t.Errorf("the refused submit left %d messages in the job stream", n)
	}

	again := runMaker(t, 60*time.Second, submitArgs(svc.natsURL, 4, 1, 3, "--job-id", jobID)...)
	if again.code != 0 {
		t.Fatalf("resubmitting the same job exited %d: %s", again.code, again.stderr)
	}
	if rep2 := parseReport(t, again.stdout); rep2.TraceSHA256 != rep.TraceSHA256 || !rep2.StartedAt.Equal(rep.StartedAt) {
		t.Errorf("the same job submitted again printed a report started %s, want the first run's (%s)", rep2.StartedAt, rep.StartedAt)
	}
	if n := strings.Count(coord.stderr(), "job finished"); n != 1 {
		t.Errorf("the coordinator finished %d jobs, want the one run", n)
	}
}
