package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
