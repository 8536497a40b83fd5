package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/cmd/maker/cli"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// checkInterrupted: the command exited with the interrupted code and said
// so on stderr, not with the cancelled context it saw. (The roles' own
// shutdown logs may mention the context; the command's message may not.)
func checkInterrupted(t *testing.T, p *proc) {
	t.Helper()
	code := p.wait(60 * time.Second)
	stderr := p.stderr()
	if code != cli.ExitInterrupted {
		t.Errorf("%s exited %d after the signal, want %d", p.name, code, cli.ExitInterrupted)
	}
	var said []string
	for _, l := range lines(stderr) {
		if strings.HasPrefix(l, "maker: ") {
			said = append(said, l)
		}
	}
	if len(said) != 1 || said[0] != "maker: interrupted" {
		t.Errorf("%s said %q on stderr, want only \"maker: interrupted\"\n%s", p.name, said, stderr)
	}
}

// TestRunInterruptedCleansUp: `maker run` on external servers, stopped with
// Ctrl-C (SIGINT) mid-run, exits 130 saying it was interrupted, and leaves
// nothing of its private namespace behind: no run-* key in Redis, no RUN_*
// stream or run_* bucket in NATS.
func TestRunInterruptedCleansUp(t *testing.T) {
	ns := testkit.StartNATS(t)
	r := testkit.StartRedis(t)
	svc := &services{natsURL: ns.URL}
	svc.nc, svc.js = testkit.Connect(t, ns.URL)
	rdb := r.Client(t)
	runKeys := func() []string {
		t.Helper()
		ctx, cancel := opCtx()
		defer cancel()
		keys, err := rdb.Keys(ctx, "run-*").Result()
		if err != nil {
			t.Fatalf("redis keys: %v", err)
		}
		return keys
	}
	private := func() []string {
		var out []string
		for _, n := range svc.streamNames(t) {
			if strings.HasPrefix(n, "RUN_") || strings.HasPrefix(n, "KV_run_") {
				out = append(out, n)
			}
		}
		return out
	}

	// A slow model keeps the job's open step in Redis long enough to see it.
	run := startProc(t, "run", "run", "--nats", ns.URL, "--redis", r.URL(), "--disks", "6", "--sim-latency", "50ms", "--json", "--quiet")
	waitFor(t, 30*time.Second, "the run's Redis keys and streams", func() bool {
		return len(runKeys()) > 0 && len(private()) > 0
	}, run)
	run.signal(syscall.SIGINT)
	checkInterrupted(t, run)
	if run.stdout() != "" {
		t.Errorf("an interrupted run printed a report: %q", run.stdout())
	}
	if keys := runKeys(); len(keys) > 0 {
		t.Errorf("Redis keys left behind by the interrupted run: %v", keys)
	}
	if left := private(); len(left) > 0 {
		t.Errorf("streams and buckets left behind by the interrupted run: %v", left)
	}
}

// TestSubmitWaitInterrupted: `maker submit --wait` stopped with SIGTERM
// exits 130 saying it was interrupted; the job stays submitted.
func TestSubmitWaitInterrupted(t *testing.T) {
	svc := startServices(t, false)
	sub := startProc(t, "submit", "submit", "--nats", svc.natsURL, "--disks", "3", "--k", "1", "--job-id", "waited", "--wait")
	waitFor(t, 30*time.Second, "the job queued", func() bool { return svc.jobMessages(t) == 1 }, sub)
	waitFor(t, 30*time.Second, "submit waiting", func() bool { return strings.Contains(sub.stderr(), "submitted") }, sub)
	sub.signal(syscall.SIGTERM)
	checkInterrupted(t, sub)
	if n := svc.jobMessages(t); n != 1 {
		t.Errorf("the job stream holds %d messages after the interrupted wait, want the job", n)
	}
}
