package e2e

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/devserver"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// restartableNATS is an in-process nats-server that can be stopped and
// started again on the same port and store dir, as a restarted server.
type restartableNATS struct {
	dir  string
	port int
	ns   *server.Server
	url  string
}

func startRestartableNATS(t *testing.T) *restartableNATS {
	t.Helper()
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &restartableNATS{dir: t.TempDir(), port: port}
	r.start(t)
	t.Cleanup(func() {
		if r.ns != nil {
			r.ns.Shutdown()
			r.ns.WaitForShutdown()
		}
	})
	return r
}

func (r *restartableNATS) start(t *testing.T) {
	t.Helper()
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The port was ours a moment ago; the old listener may still be
		// closing, so try again briefly.
		r.ns, err = devserver.RunNATS(devserver.NATSOptions{StoreDir: r.dir, Port: r.port})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("start nats-server on port %d: %v", r.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.url = r.ns.ClientURL()
}

func (r *restartableNATS) restart(t *testing.T) {
	t.Helper()
	r.ns.Shutdown()
	r.ns.WaitForShutdown()
	r.ns = nil
	r.start(t)
}

// TestNATSRestartMidRun restarts the nats-server while a job runs. Every
// role reconnects on its own; the job must still end solved with the true
// solution.
//
// "pre-provisioned streams" creates MAKER_SAMPLES and MAKER_RESULTS before
// the roles start (topology.Ensure leaves existing streams alone), as an
// operator could; "default topology" uses the streams topology.Ensure creates.
// Both are file-stored, so a restarted server still has them.
func TestNATSRestartMidRun(t *testing.T) {
	t.Run("pre-provisioned streams", func(t *testing.T) { testNATSRestart(t, true) })
	t.Run("default topology", func(t *testing.T) { testNATSRestart(t, false) })
}

func testNATSRestart(t *testing.T, fileStreams bool) {
	const disks, jobID = 7, "nats-restart"
	srv := startRestartableNATS(t)
	nc, err := nats.Connect(srv.url, nats.Name("e2e-test"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if fileStreams {
		for name, subj := range map[string]string{bus.DefaultNamespace.SamplesStream(): "maker.v1.sample.*.*", bus.DefaultNamespace.ResultsStream(): "maker.v1.result.*.*.*"} {
			ctx, cancel := opCtx()
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{
				Name: name, Subjects: []string{subj}, Retention: jetstream.WorkQueuePolicy,
				Storage: jetstream.FileStorage, MaxAge: 24 * time.Hour, Duplicates: 2 * time.Minute,
			})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	svc := &services{natsURL: srv.url, redisURL: testkit.StartRedis(t).URL(), nc: nc, js: js}
	model := startSim(t, "simllm", "--accuracy", "0.9", "--seed", "7", "--latency", "20ms")
	coord := svc.startCoordinator(t, "coordinator")
	v1 := svc.startVoter(t, "voter-1", model.url, "--concurrency", "4")
	v2 := svc.startVoter(t, "voter-2", model.url, "--concurrency", "4")
	svc.waitFleet(t, coord, v1, v2)

	sub := startProc(t, "submit", submitArgs(srv.url, disks, 3, 7, "--job-id", jobID, "--sample-timeout", "2s")...)
	total := int64(1)<<disks - 1
	waitFor(t, 60*time.Second, "30% of the steps", func() bool {
		st, ok := svc.status(t, jobID)
		return ok && st.Steps >= total*3/10
	}, sub, coord, v1, v2)
	srv.restart(t)
	restartedAt, _ := svc.status(t, jobID)

	if code := sub.wait(60 * time.Second); code != 0 {
		t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(t, sub.stdout())
	if !rep.Solved || rep.Steps != total || rep.TraceSHA256 != goldenTrace(t, disks) {
		t.Errorf("state %s, steps %d, trace %s: want solved, %d, the true solution", rep.State, rep.Steps, rep.TraceSHA256, total)
	}
	checkAccounting(t, rep)
	for _, p := range []*proc{coord, v1, v2} {
		if p.exited() {
			t.Errorf("%s exited across the restart: %v", p.name, p.cmd.ProcessState)
		}
	}
	t.Logf("restarted at step %d/%d; resampled %d, wasted %d, %.2fs", restartedAt.Steps, total, rep.Resampled, rep.WastedSamples, rep.WallSeconds)
}
