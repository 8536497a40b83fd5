package bus_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestMain checks that no goroutine of ours outlives the tests. Two of
// the embedded nats-server's own are let go: a file store created while
// its server shuts down (an Ensure still creating the topology when a
// test ends) keeps its flush loop, and with it the server's shared clock
// (seen in CI once the topology grew to six streams and eight buckets).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}

// jetStream connects a JetStream client to a fresh in-process server.
func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	return connect(t, testkit.StartNATS(t).URL)
}

// connect returns a JetStream client of the server at url.
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// names lists the streams on the server (KV buckets are streams KV_<bucket>).
func names(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	l := js.StreamNames(opCtx(t))
	for n := range l.Name() {
		out = append(out, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestNamespaceNames: the default namespace (and the empty one) keeps the
// names deployed fleets already have; another namespace renames every
// stream, bucket and subject, so nothing of it matches the default's.
func TestNamespaceNames(t *testing.T) {
	t.Parallel()
	type names struct {
		str, jobs, samples, results, status, reports string
		job, sample, result, decided, decidedAll     string
	}
	get := func(ns bus.Namespace) names {
		return names{
			ns.String(), ns.JobsStream(), ns.SamplesStream(), ns.ResultsStream(), ns.StatusBucket(), ns.ReportsBucket(),
			ns.JobSubject("acme"), ns.SampleSubject("acme", "j1"), ns.ResultSubject("acme", "j1", 1),
			ns.DecidedSubject("acme", "j1"), ns.DecidedWildcard(),
		}
	}
	def := names{
		"maker", "MAKER_JOBS", "MAKER_SAMPLES", "MAKER_RESULTS", "maker_status", "maker_reports",
		"maker.v1.job.acme", "maker.v1.sample.acme.j1", "maker.v1.result.acme.j1.1",
		"maker.v1.decided.acme.j1", "maker.v1.decided.>",
	}
	tests := []struct {
		ns   bus.Namespace
		want names
	}{
		{"", def},
		{bus.DefaultNamespace, def},
		{"run-1f2e3d4c", names{
			"run-1f2e3d4c", "RUN_1F2E3D4C_JOBS", "RUN_1F2E3D4C_SAMPLES", "RUN_1F2E3D4C_RESULTS",
			"run_1f2e3d4c_status", "run_1f2e3d4c_reports",
			"run-1f2e3d4c.v1.job.acme", "run-1f2e3d4c.v1.sample.acme.j1", "run-1f2e3d4c.v1.result.acme.j1.1",
			"run-1f2e3d4c.v1.decided.acme.j1", "run-1f2e3d4c.v1.decided.>",
		}},
		{"b", names{
			"b", "B_JOBS", "B_SAMPLES", "B_RESULTS", "b_status", "b_reports",
			"b.v1.job.acme", "b.v1.sample.acme.j1", "b.v1.result.acme.j1.1", "b.v1.decided.acme.j1", "b.v1.decided.>",
		}},
	}
	for _, tt := range tests {
		if got := get(tt.ns); got != tt.want {
			t.Errorf("namespace %q:\n got  %+v\n want %+v", string(tt.ns), got, tt.want)
		}
	}
}

func TestNamespaceValidate(t *testing.T) {
	t.Parallel()
	valid := []bus.Namespace{"", bus.DefaultNamespace, "a", "run-1f2e3d4c", "a-", "x0", bus.Namespace(strings.Repeat("a", 32))}
	invalid := []bus.Namespace{
		"Maker", "MAKER", "1run", "-run", "run_1", "run.1", "run 1", "run*", "run>", "rün",
		bus.Namespace(strings.Repeat("a", 33)), "run\n",
	}
	for _, ns := range valid {
		if err := ns.Validate(); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", string(ns), err)
		}
	}
	for _, ns := range invalid {
		if err := ns.Validate(); err == nil {
			t.Errorf("Validate(%q) = nil, want an error", string(ns))
		}
	}
}

// TestEnsureNamespaces: two namespaces on one server each get their own
// streams, consumers and buckets; a subject of one lands in its own stream
// only; a bad namespace creates nothing.
func TestEnsureNamespaces(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	cfg := bus.Config{Storage: jetstream.MemoryStorage}
	topos := map[bus.Namespace]*bus.Topology{}
	for _, ns := range []bus.Namespace{"", "run-a"} {
		c := cfg
		c.Namespace = ns
		topo, err := bus.Ensure(ctx, js, c)
		if err != nil {
			t.Fatalf("Ensure(%q): %v", string(ns), err)
		}
		if topo.NS != ns {
			t.Errorf("Ensure(%q): topology namespace %q", string(ns), string(topo.NS))
		}
		topos[ns] = topo
	}
	want := []string{
		"KV_maker_apikeys", "KV_maker_batches", "KV_maker_jobs", "KV_maker_leases", "KV_maker_prices", "KV_maker_quotas", "KV_maker_reports", "KV_maker_status", "KV_maker_tasks",
		"KV_run_a_apikeys", "KV_run_a_batches", "KV_run_a_jobs", "KV_run_a_leases", "KV_run_a_prices", "KV_run_a_quotas", "KV_run_a_reports", "KV_run_a_status", "KV_run_a_tasks",
		"MAKER_BATCHES", "MAKER_DLQ", "MAKER_JOBS", "MAKER_JOURNAL", "MAKER_RESULTS", "MAKER_SAMPLES",
		"RUN_A_BATCHES", "RUN_A_DLQ", "RUN_A_JOBS", "RUN_A_JOURNAL", "RUN_A_RESULTS", "RUN_A_SAMPLES",
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
	if _, err := bus.Ensure(ctx, js, bad); err == nil {
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
	first := bus.Config{Storage: jetstream.MemoryStorage, MaxMsgSize: 64 << 10, SampleAckWait: 5 * time.Second, SampleMaxDeliver: 3}
	topo, err := bus.Ensure(ctx, js, first)
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
	for _, cfg := range []bus.Config{first, {Storage: jetstream.FileStorage, MaxMsgSize: 2 << 20, SampleAckWait: time.Minute, SampleMaxDeliver: 20}} {
		again, err := bus.Ensure(ctx, js, cfg)
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
		if _, err := bus.Ensure(ctx, js, bus.Config{Namespace: ns, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, bus.Namespace("run-a").JobSubject("acme"), []byte("job")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := bus.Teardown(ctx, js, "run-a"); err != nil {
			t.Fatalf("Teardown: %v", err)
		}
		want := []string{
			"KV_maker_apikeys", "KV_maker_batches", "KV_maker_jobs", "KV_maker_leases", "KV_maker_prices", "KV_maker_quotas", "KV_maker_reports", "KV_maker_status", "KV_maker_tasks",
			"KV_run_b_apikeys", "KV_run_b_batches", "KV_run_b_jobs", "KV_run_b_leases", "KV_run_b_prices", "KV_run_b_quotas", "KV_run_b_reports", "KV_run_b_status", "KV_run_b_tasks",
			"MAKER_BATCHES", "MAKER_DLQ", "MAKER_JOBS", "MAKER_JOURNAL", "MAKER_RESULTS", "MAKER_SAMPLES",
			"RUN_B_BATCHES", "RUN_B_DLQ", "RUN_B_JOBS", "RUN_B_JOURNAL", "RUN_B_RESULTS", "RUN_B_SAMPLES",
		}
		if got := names(t, js); !slices.Equal(got, want) {
			t.Errorf("streams after Teardown(run-a): %v, want %v", got, want)
		}
	}
	// The namespace can be set up again from scratch.
	topo, err := bus.Ensure(ctx, js, bus.Config{Namespace: "run-a", Storage: jetstream.MemoryStorage})
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
	_, err = bus.Ensure(opCtx(t), js, bus.Config{StartupWait: 400 * time.Millisecond})
	if err == nil || !bus.Transient(err) {
		t.Fatalf("Ensure without JetStream: err %v, want a transient error", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("Ensure gave up after %v, want it to retry for StartupWait", d)
	}

	done := make(chan error, 1)
	go func() {
		_, err := bus.Ensure(opCtx(t), js, bus.Config{StartupWait: 30 * time.Second})
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

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{fmt.Errorf("bus: create stream X: %w", &jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "error creating store for stream"}), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}, false},
		{&jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "replicas > 1 not supported in non-clustered mode"}, false},
		// The server reports a consumer store it could not create (under
		// load, while JetStream comes up) as 10012 with this text.
		{fmt.Errorf("bus: create consumer voters: %w", &jetstream.APIError{Code: 500, ErrorCode: 10012, Description: "error creating store for consumer"}), true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10012, Description: "consumer name already in use"}, false},
		{errors.New("bus: invalid config"), false},
		{jetstream.ErrStreamNotFound, false},
		{context.Canceled, false},
	} {
		if got := bus.Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		f, want string
		ok      bool
	}{
		{"maker.v1.result.*.*.*", "maker.v1.result.*.*.*", true},
		{"maker.v1.result.>", "maker.v1.result.*.*.*", true},
		{"maker.v1.result.*.*", "maker.v1.result.*.*.*", false},
		{"maker.v1.result.*.*.*", "maker.v1.result.>", false},
		{"maker.v1.result.acme.*.*", "maker.v1.result.*.*.*", false},
		{">", "a.b", true},
		{"a.b", "a.b", true},
		{"a.*", "a.b", true},
		{"a.b.c", "a.b", false},
	} {
		if got := bus.Covers(tc.f, tc.want); got != tc.ok {
			t.Errorf("covers(%q, %q) = %v, want %v", tc.f, tc.want, got, tc.ok)
		}
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
	_, err := bus.Ensure(ctx, js, bus.Config{})
	if !errors.Is(err, bus.ErrTopology) || !strings.Contains(err.Error(), "maker.v1.result.*.*.*") {
		t.Fatalf("Ensure over a stale results stream: %v, want ErrTopology naming the missing subject", err)
	}
}
