package topology_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestLimitsPerTenant: the server itself bounds what one tenant (or one
// voter) can put in the shared streams: a tenant's queued jobs stop at
// QueuedJobsPerTenant while another tenant's still go in; a job's dead
// letters keep the newest DeadLettersPerJob; the batch lines stop at
// BatchesBytes, refused rather than dropped; a flood of results keeps the
// newest within ResultsBytes.
func TestLimitsPerTenant(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	cfg := topology.Config{Storage: jetstream.MemoryStorage, Limits: topology.Limits{
		QueuedJobsPerTenant: 3, DeadLettersPerJob: 2, BatchesBytes: 64 << 10, ResultsBytes: 64 << 10,
	}}
	topo, err := topology.Ensure(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := topo.NS
	for i := range 3 {
		if _, err := js.Publish(ctx, ns.JobSubject("beta"), []byte(`{}`), jetstream.WithMsgID(fmt.Sprint("b", i))); err != nil {
			t.Fatalf("beta's job %d: %v", i, err)
		}
	}
	if _, err := js.Publish(ctx, ns.JobSubject("beta"), []byte(`{}`), jetstream.WithMsgID("b3")); err == nil ||
		!strings.Contains(err.Error(), "maximum messages per subject") {
		t.Fatalf("beta's 4th queued job: %v, want refused by the per-subject limit", err)
	}
	if _, err := js.Publish(ctx, ns.JobSubject("alpha"), []byte(`{}`), jetstream.WithMsgID("a0")); err != nil {
		t.Fatalf("alpha's job beside beta's full queue: %v", err)
	}

	for i := range 5 {
		if _, err := js.Publish(ctx, ns.DLQSubject("alpha", "j1"), fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	dlq, err := js.Stream(ctx, ns.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(ns.DLQSubject("alpha", "j1")))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[ns.DLQSubject("alpha", "j1")]; n != 2 {
		t.Errorf("a job's dead letters: %d kept, want the newest 2", n)
	}
	last, err := dlq.GetLastMsgForSubject(ctx, ns.DLQSubject("alpha", "j1"))
	if err != nil || string(last.Data) != `{"n":4}` {
		t.Errorf("newest dead letter %v %v, want n 4", last, err)
	}

	line := make([]byte, 8<<10)
	var refused error
	for i := range 20 {
		if _, err := js.Publish(ctx, ns.BatchSubject("beta", "batch_1"), line); err != nil {
			refused = err
			if i < 5 {
				t.Fatalf("batch line %d refused early: %v", i, err)
			}
			break
		}
	}
	if !errors.Is(refused, jetstream.ErrMaxBytesExceeded) && (refused == nil || !strings.Contains(refused.Error(), "maximum bytes")) {
		t.Errorf("batch lines past the limit: %v, want refused (maximum bytes exceeded)", refused)
	}

	for i := range 40 {
		if _, err := js.Publish(ctx, ns.ResultSubject("alpha", "j1", 1), line); err != nil {
			t.Fatalf("result %d: %v (a full results stream drops its oldest, never refuses)", i, err)
		}
	}
	rs, err := js.Stream(ctx, ns.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	ri, err := rs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ri.State.Bytes > 64<<10 {
		t.Errorf("results stream holds %d bytes, over its 64 KiB limit", ri.State.Bytes)
	}
}

// TestLimitsOnExistingStreams: a stream an older release made without
// limits gets them from Ensure; a limit an operator set stays.
func TestLimitsOnExistingStreams(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	ns := bus.Namespace("old")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: ns.DLQStream(), Subjects: []string{ns.DLQWildcard()},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: ns.BatchesStream(), Subjects: []string{ns.BatchSubject("*", "*")},
		Storage: jetstream.MemoryStorage, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Ensure(ctx, js, topology.Config{Namespace: ns, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	cfgOf := func(name string) jetstream.StreamConfig {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config
	}
	if c := cfgOf(ns.DLQStream()); c.MaxBytes != topology.MemoryStreamBytes || c.MaxMsgsPerSubject != 1000 || c.Discard != jetstream.DiscardOld {
		t.Errorf("old dead-letter stream: max_bytes %d, per subject %d, discard %v; want the defaults set", c.MaxBytes, c.MaxMsgsPerSubject, c.Discard)
	}
	if c := cfgOf(ns.BatchesStream()); c.MaxBytes != 1<<20 {
		t.Errorf("the operator's batch limit became %d, want 1 MiB kept", c.MaxBytes)
	}
	if c := cfgOf(ns.JobsStream()); c.MaxMsgsPerSubject != 10_000 || !c.DiscardNewPerSubject || c.MaxBytes != topology.MemoryStreamBytes {
		t.Errorf("new jobs stream: %+v", c)
	}
}

// TestLimitReached tells a publish the limits refused from others.
func TestLimitReached(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage, Limits: topology.Limits{QueuedJobsPerTenant: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, topo.NS.JobSubject("a"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	_, err = js.Publish(ctx, topo.NS.JobSubject("a"), []byte(`{}`))
	if !bus.LimitReached(err) {
		t.Errorf("LimitReached(%v) = false", err)
	}
	for _, other := range []error{nil, context.DeadlineExceeded, jetstream.ErrNoStreamResponse, errors.New("maximum")} {
		if bus.LimitReached(other) {
			t.Errorf("LimitReached(%v) = true", other)
		}
	}
}
