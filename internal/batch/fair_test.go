package batch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// oneLine is a one-line batch; no coordinator runs in these tests, so its
// job stays queued and the batch keeps its runner slot.
const oneLine = `{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":1}` + "\n"

// startRunner runs a batch runner (no coordinator) until the test ends.
func startRunner(t *testing.T, topo *topology.Topology, maxBatches int) {
	t.Helper()
	runRunner(t, topo, batch.RunnerConfig{
		Owner: "runner-1", MaxBatches: maxBatches, LeaseTTL: 3 * time.Second, ScanInterval: 50 * time.Millisecond,
	})
}

// runRunner runs a batch runner of cfg until the test ends.
func runRunner(t *testing.T, topo *topology.Topology, cfg batch.RunnerConfig) *batch.Runner {
	t.Helper()
	r, err := batch.NewRunner(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("runner: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// fedBatch waits until tenant's batch id has its job fed.
func fedBatch(t *testing.T, s *batch.Store, tenant, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Wait(ctx, tenant, id, func(r schemas.BatchRecord) {
		if r.State == schemas.BatchRunning && r.Counts.Submitted == r.Counts.Valid {
			cancel()
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("batch %s/%s was not fed: %v", tenant, id, err)
	}
}

func create(t *testing.T, s *batch.Store, tenant string, o batch.CreateOptions) schemas.BatchRecord {
	t.Helper()
	rec, err := s.Create(ctxFor(t), tenant, strings.NewReader(oneLine), o)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// readLease returns the lease on tenant's batch id, nil if it has none.
func readLease(t *testing.T, topo *topology.Topology, tenant, id string) *schemas.Lease {
	t.Helper()
	e, err := topo.Batches.Get(ctxFor(t), bus.JobKey(tenant, id+"-lease"))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var l schemas.Lease
	if err := schemas.Decode(e.Value(), &l); err != nil {
		t.Fatal(err)
	}
	return &l
}

// liveLeases names the batches whose lease is held now.
func liveLeases(t *testing.T, topo *topology.Topology, recs ...schemas.BatchRecord) map[string]bool {
	t.Helper()
	live := map[string]bool{}
	for _, rec := range recs {
		if l := readLease(t, topo, rec.Tenant, rec.ID); l != nil && time.Now().Before(l.ExpiresAt) {
			live[rec.ID] = true
		}
	}
	return live
}

// TestRunnerHandsBackForWaitingTenant: alpha's batches hold every slot of
// the runner; beta's batch then waits, so alpha's newest is handed back
// (its lease released) and beta's takes its slot.
func TestRunnerHandsBackForWaitingTenant(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	a1 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	a2 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	a3 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	startRunner(t, topo, 2)
	fedBatch(t, s, "alpha", a1.ID)
	fedBatch(t, s, "alpha", a2.ID)
	b1 := create(t, s, "beta", batch.CreateOptions{Window: 1})
	fedBatch(t, s, "beta", b1.ID)
	live := liveLeases(t, topo, a1, a2, a3, b1)
	if !live[a1.ID] || !live[b1.ID] || len(live) != 2 {
		t.Errorf("batches fed: %v; want alpha's oldest (%s) and beta's (%s)", live, a1.ID, b1.ID)
	}
	// The handed-back batch keeps its fed job and resumes from its cursor.
	if rec, err := s.Get(ctxFor(t), "alpha", a2.ID); err != nil || rec.Cursor != 1 || len(rec.Pending) != 1 {
		t.Errorf("handed-back batch: %+v, %v", rec, err)
	}
}

// TestRunnerTakesFairly: with more batches waiting than slots, a runner
// takes one of each tenant (the oldest) before a second of any.
func TestRunnerTakesFairly(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	a1 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	a2 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	a3 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	b1 := create(t, s, "beta", batch.CreateOptions{Window: 1})
	startRunner(t, topo, 2)
	fedBatch(t, s, "alpha", a1.ID)
	fedBatch(t, s, "beta", b1.ID)
	for _, rec := range []schemas.BatchRecord{a2, a3} {
		if l := readLease(t, topo, "alpha", rec.ID); l != nil {
			t.Errorf("alpha's %s was taken (lease %+v) before beta's only batch", rec.ID, l)
		}
	}
}

// streamMsgs counts the messages the batch stream holds.
func streamMsgs(t *testing.T, ctx context.Context, topo *topology.Topology) uint64 {
	t.Helper()
	st, err := topo.JS.Stream(ctx, topo.NS.BatchesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestCreateMaxOpen: a tenant with MaxOpen batches open is refused
// (ErrTooMany) before anything is stored; ended batches and other tenants'
// do not count.
func TestCreateMaxOpen(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	ctx := ctxFor(t)
	o := batch.CreateOptions{MaxOpen: 2}
	b1 := create(t, s, "acme", o)
	create(t, s, "acme", o)
	create(t, s, "other", o)
	before := streamMsgs(t, ctx, topo)
	if _, err := s.Create(ctx, "acme", strings.NewReader(oneLine), o); !errors.Is(err, batch.ErrTooMany) {
		t.Fatalf("a third open batch: %v, want ErrTooMany", err)
	}
	if after := streamMsgs(t, ctx, topo); after != before {
		t.Errorf("a refused batch stored %d lines", after-before)
	}
	if _, err := s.Cancel(ctx, "acme", b1.ID); err != nil {
		t.Fatal(err)
	}
	// A batch without a valid line is completed at once: it counts not.
	if rec, err := s.Create(ctx, "acme", strings.NewReader("not json\n"), o); err != nil || rec.State != schemas.BatchCompleted {
		t.Fatalf("invalid-only batch: %+v, %v", rec, err)
	}
	create(t, s, "acme", o)
	if _, err := s.Create(ctx, "acme", strings.NewReader(oneLine), o); !errors.Is(err, batch.ErrTooMany) {
		t.Fatalf("a third open batch after a cancel: %v, want ErrTooMany", err)
	}
	// The default is DefaultMaxOpen: acme has 2 open.
	for range batch.DefaultMaxOpen - 2 {
		create(t, s, "acme", batch.CreateOptions{})
	}
	if _, err := s.Create(ctx, "acme", strings.NewReader(oneLine), batch.CreateOptions{}); !errors.Is(err, batch.ErrTooMany) {
		t.Errorf("batch %d: %v, want ErrTooMany", batch.DefaultMaxOpen+1, err)
	}
	if _, err := s.Create(ctx, "acme", strings.NewReader(oneLine), batch.CreateOptions{MaxOpen: -1}); !errors.Is(err, batch.ErrInvalid) {
		t.Errorf("MaxOpen -1: %v, want ErrInvalid", err)
	}
}
