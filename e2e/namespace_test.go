package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// streamNames lists the streams on the test's NATS server (a KV bucket B
// is stream KV_B).
func (s *services) streamNames(t *testing.T) []string {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	var out []string
	l := s.js.StreamNames(ctx)
	for n := range l.Name() {
		out = append(out, n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	return out
}

// TestRunOnExternalNATSIsPrivate: `maker run --nats URL` brings a whole
// fleet up on a shared server, in a namespace of its own. A job queued for
// the default fleet (no coordinator of it runs) stays queued, untouched,
// through a run that completes; the run's streams and buckets exist while
// it runs and are gone once it has exited.
func TestRunOnExternalNATSIsPrivate(t *testing.T) {
	svc := startServices(t, false)
	queued := runMaker(t, 30*time.Second, "submit", "--nats", svc.natsURL, "--disks", "3", "--k", "1")
	if queued.code != 0 {
		t.Fatalf("submit exited %d: %s", queued.code, queued.stderr)
	}
	defaultJobs := func() (pending uint64, ackPending, delivered int) {
		t.Helper()
		ctx, cancel := opCtx()
		defer cancel()
		c, err := svc.js.Consumer(ctx, bus.DefaultNamespace.JobsStream(), bus.ConsumerCoordinators)
		if err != nil {
			t.Fatalf("the default fleet's job consumer: %v", err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatalf("the default fleet's job consumer: %v", err)
		}
		return info.NumPending, info.NumAckPending, int(info.Delivered.Consumer)
	}
	if p, a, d := defaultJobs(); p != 1 || a != 0 || d != 0 {
		t.Fatalf("before the run: %d pending, %d ack pending, %d delivered; want the queued job pending", p, a, d)
	}
	private := func(name string) bool { return strings.HasPrefix(name, "RUN_") || strings.HasPrefix(name, "KV_run_") }

	// A slow model keeps the run going long enough to see its streams.
	run := startProc(t, "run", "run", "--nats", svc.natsURL, "--disks", "3", "--sim-latency", "100ms", "--json", "--quiet")
	var seen []string
	const want = 7 // JOBS, SAMPLES, RESULTS, JOURNAL, DLQ, BATCHES, WEBHOOKS
	for deadline := time.Now().Add(30 * time.Second); len(seen) < want && !run.exited() && time.Now().Before(deadline); {
		seen = seen[:0]
		for _, n := range svc.streamNames(t) {
			if private(n) {
				seen = append(seen, n)
			}
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	if len(seen) != want {
		t.Errorf("while it ran, the run had streams %v on the shared server; want its %d streams", seen, want)
	}
	if code := run.wait(60 * time.Second); code != 0 {
		t.Fatalf("run exited %d: %s", code, run.stderr())
	}
	rep := parseReport(t, run.stdout())
	if !rep.Solved || rep.TraceSHA256 != goldenTrace(t, 3) {
		t.Errorf("run: %s, trace %s; want solved with the true solution", rep.State, rep.TraceSHA256)
	}
	t.Logf("the run used %v", seen)

	if p, a, d := defaultJobs(); p != 1 || a != 0 || d != 0 {
		t.Errorf("after the run: the default fleet's job has %d pending, %d ack pending, %d delivered; want it untouched", p, a, d)
	}
	if n := svc.jobMessages(t); n != 1 {
		t.Errorf("the default job stream holds %d messages after the run, want the queued job", n)
	}
	for _, n := range svc.streamNames(t) {
		if private(n) {
			t.Errorf("stream %s left behind by the run", n)
		}
	}
}
