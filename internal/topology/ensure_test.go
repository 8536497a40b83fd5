package topology_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestEnsureNamespaces: two namespaces on one server each get their own
// streams, consumers and buckets; a subject of one lands in its own stream
// only; a bad namespace creates nothing.
func TestEnsureNamespaces(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	cfg := topology.Config{Storage: jetstream.MemoryStorage}
	topos := map[bus.Namespace]*topology.Topology{}
	for _, ns := range []bus.Namespace{"", "run-a"} {
		c := cfg
		c.Namespace = ns
		topo, err := topology.Ensure(ctx, js, c)
		if err != nil {
			t.Fatalf("Ensure(%q): %v", string(ns), err)
		}
		if topo.NS != ns {
			t.Errorf("Ensure(%q): topology namespace %q", string(ns), string(topo.NS))
		}
		topos[ns] = topo
	}
	want := []string{
		"KV_maker_apikeys", "KV_maker_batches", "KV_maker_jobs", "KV_maker_leases", "KV_maker_presence", "KV_maker_prices", "KV_maker_providers", "KV_maker_quotas", "KV_maker_reports", "KV_maker_status", "KV_maker_tasks", "KV_maker_webhooks",
		"KV_run_a_apikeys", "KV_run_a_batches", "KV_run_a_jobs", "KV_run_a_leases", "KV_run_a_presence", "KV_run_a_prices", "KV_run_a_providers", "KV_run_a_quotas", "KV_run_a_reports", "KV_run_a_status", "KV_run_a_tasks", "KV_run_a_webhooks",
		"MAKER_BATCHES", "MAKER_DLQ", "MAKER_JOBS", "MAKER_JOURNAL", "MAKER_RESULTS", "MAKER_SAMPLES", "MAKER_WEBHOOKS",
		"OBJ_maker_inputs", "OBJ_run_a_inputs",
		"RUN_A_BATCHES", "RUN_A_DLQ", "RUN_A_JOBS", "RUN_A_JOURNAL", "RUN_A_RESULTS", "RUN_A_SAMPLES", "RUN_A_WEBHOOKS",
	}
	if got := names(t, js); !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v", got, want)
	}
	for ns := range topos {
		for stream, consumer := range map[string]string{ns.JobsStream(): bus.ConsumerCoordinators, ns.SamplesStream(): bus.ConsumerVoters} {
			if _, err := js.Consumer(ctx, stream, consumer); err != nil {
				t.Errorf("consumer %s on %s: %v", consumer, stream, err)
			}
		}
	}
	for ns := range topos {
		for subject, stream := range map[string]string{
			ns.JobSubject("acme"):             ns.JobsStream(),
			ns.SampleSubject("acme", "j1"):    ns.SamplesStream(),
			ns.ResultSubject("acme", "j1", 1): ns.ResultsStream(),
		} {
			ack, err := js.Publish(ctx, subject, []byte("x"))
			if err != nil || ack.Stream != stream {
				t.Errorf("publish on %s: stored in %v (%v), want %s", subject, ack, err, stream)
			}
		}
	}
	if _, err := topos["run-a"].Reports.Put(ctx, "acme.j1", []byte("r")); err != nil {
		t.Fatal(err)
	}
	if _, err := topos[""].Reports.Get(ctx, "acme.j1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a report of namespace run-a is visible in the default one: %v", err)
	}

	bad := cfg
	bad.Namespace = "Bad" // the server would take it: only Validate stands in the way
	if _, err := topology.Ensure(ctx, js, bad); err == nil {
		t.Error("Ensure accepted namespace Bad")
	}
	if got := names(t, js); !slices.Equal(got, want) {
		t.Errorf("a refused Ensure changed the streams: %v", got)
	}
}

// TestEnsureIsIdempotent: a second Ensure, even with other settings, takes
// what exists as it is: no stream, consumer or bucket is recreated,
// updated or purged, so roles started with different settings never fight.
func TestEnsureIsIdempotent(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	first := topology.Config{Storage: jetstream.MemoryStorage, MaxMsgSize: 64 << 10, SampleAckWait: 5 * time.Second, SampleMaxDeliver: 3}
	topo, err := topology.Ensure(ctx, js, first)
	if err != nil {
		t.Fatal(err)
	}
	ns := topo.NS
	if _, err := js.Publish(ctx, ns.JobSubject("acme"), []byte("queued job")); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Reports.Put(ctx, "acme.j1", []byte("report")); err != nil {
		t.Fatal(err)
	}
	type snapshot struct {
		created    time.Time
		maxMsgSize int32
		msgs       uint64
	}
	snap := func() map[string]snapshot {
		out := map[string]snapshot{}
		for _, name := range names(t, js) {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = snapshot{info.Created, info.Config.MaxMsgSize, info.State.Msgs}
		}
		return out
	}
	voters := func() jetstream.ConsumerConfig {
		c, err := js.Consumer(ctx, ns.SamplesStream(), bus.ConsumerVoters)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Config
	}
	before, votersBefore := snap(), voters()

	// Same settings, then others (file storage would even be refused by
	// the server as an update).
	for _, cfg := range []topology.Config{first, {Storage: jetstream.FileStorage, MaxMsgSize: 2 << 20, SampleAckWait: time.Minute, SampleMaxDeliver: 20}} {
		again, err := topology.Ensure(ctx, js, cfg)
		if err != nil {
			t.Fatalf("Ensure again with %+v: %v", cfg, err)
		}
		if after := snap(); !maps.Equal(after, before) {
			t.Errorf("Ensure with %+v changed the streams:\n before %+v\n after  %+v", cfg, before, after)
		}
		if c := voters(); c.AckWait != votersBefore.AckWait || c.MaxDeliver != votersBefore.MaxDeliver {
			t.Errorf("Ensure with %+v changed the voters consumer: ack wait %v max deliver %d, was %v %d",
				cfg, c.AckWait, c.MaxDeliver, votersBefore.AckWait, votersBefore.MaxDeliver)
		}
		if e, err := again.Reports.Get(ctx, "acme.j1"); err != nil || string(e.Value()) != "report" {
			t.Errorf("the report after Ensure: %v", err)
		}
	}
	if before[ns.JobsStream()].msgs != 1 || before[ns.JobsStream()].maxMsgSize != 64<<10 {
		t.Errorf("job stream %+v: want the queued job and the first config's message size", before[ns.JobsStream()])
	}
}

// TestTeardown: Teardown removes exactly what Ensure created for its
// namespace, leaves other namespaces alone, and is a no-op the second time.
func TestTeardown(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	for _, ns := range []bus.Namespace{"", "run-a", "run-b"} {
		if _, err := topology.Ensure(ctx, js, topology.Config{Namespace: ns, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, bus.Namespace("run-a").JobSubject("acme"), []byte("job")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := topology.Teardown(ctx, js, "run-a"); err != nil {
			t.Fatalf("Teardown: %v", err)
		}
		want := []string{
			"KV_maker_apikeys", "KV_maker_batches", "KV_maker_jobs", "KV_maker_leases", "KV_maker_presence", "KV_maker_prices", "KV_maker_providers", "KV_maker_quotas", "KV_maker_reports", "KV_maker_status", "KV_maker_tasks", "KV_maker_webhooks",
			"KV_run_b_apikeys", "KV_run_b_batches", "KV_run_b_jobs", "KV_run_b_leases", "KV_run_b_presence", "KV_run_b_prices", "KV_run_b_providers", "KV_run_b_quotas", "KV_run_b_reports", "KV_run_b_status", "KV_run_b_tasks", "KV_run_b_webhooks",
			"MAKER_BATCHES", "MAKER_DLQ", "MAKER_JOBS", "MAKER_JOURNAL", "MAKER_RESULTS", "MAKER_SAMPLES", "MAKER_WEBHOOKS",
			"OBJ_maker_inputs", "OBJ_run_b_inputs",
			"RUN_B_BATCHES", "RUN_B_DLQ", "RUN_B_JOBS", "RUN_B_JOURNAL", "RUN_B_RESULTS", "RUN_B_SAMPLES", "RUN_B_WEBHOOKS",
		}
		if got := names(t, js); !slices.Equal(got, want) {
			t.Errorf("streams after Teardown(run-a): %v, want %v", got, want)
		}
	}
	// The namespace can be set up again from scratch.
	topo, err := topology.Ensure(ctx, js, topology.Config{Namespace: "run-a", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, topo.NS.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("run-a's job stream after Teardown and Ensure: %+v, %v; want a new, empty one", info, err)
	}
}

// TestEnsureWaitsForJetStream: a role started before the server serves
// JetStream waits for it (within StartupWait) instead of exiting, and gives
// up with the server's error once StartupWait is spent.
func TestEnsureWaitsForJetStream(t *testing.T) {
	// The store directory is made first, so it is removed after the
	// server has shut down (cleanups run last in, first out): removed
	// under a running server, its file stores' flush loops could outlive
	// the shutdown.
	storeDir := t.TempDir()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	js := connect(t, srv.ClientURL())

	start := time.Now()
	_, err = topology.Ensure(opCtx(t), js, topology.Config{StartupWait: 400 * time.Millisecond})
	if err == nil || !bus.Transient(err) {
		t.Fatalf("Ensure without JetStream: err %v, want a transient error", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("Ensure gave up after %v, want it to retry for StartupWait", d)
	}

	done := make(chan error, 1)
	go func() {
		_, err := topology.Ensure(opCtx(t), js, topology.Config{StartupWait: 30 * time.Second})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := srv.EnableJetStream(&server.JetStreamConfig{StoreDir: storeDir}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Ensure once JetStream is on: %v", err)
	}
}

// TestEnsureRefusesStaleStream: a stream left by an older layout that does
// not take this release's subjects is reported, not silently used.
func TestEnsureRefusesStaleStream(t *testing.T) {
	js := jetStream(t)
	ctx := opCtx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MAKER_RESULTS", Subjects: []string{"maker.v1.result.*.*"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	_, err := topology.Ensure(ctx, js, topology.Config{})
	if !errors.Is(err, topology.ErrTopology) || !strings.Contains(err.Error(), "maker.v1.result.*.*.*") {
		t.Fatalf("Ensure over a stale results stream: %v, want ErrTopology naming the missing subject", err)
	}
}
