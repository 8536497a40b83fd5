package batch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// lines is a batch of n valid lines.
func lines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"l%d","task":"hanoi","params":{"disks":3},"k":1}`+"\n", i)
	}
	return b.String()
}

// TestCreateMaxOpenBytes: a tenant's open batches hold at most
// MaxOpenBytes of lines in the stream every tenant shares: a batch that
// would go over is refused (ErrTooMany) and nothing of it is kept, as soon
// as it goes over; another tenant is not held back; a batch that ends
// frees its bytes.
func TestCreateMaxOpenBytes(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	ctx := ctxFor(t)
	first := create(t, s, "beta", batch.CreateOptions{})
	if first.StoredBytes <= 0 {
		t.Fatalf("a stored batch records %d bytes", first.StoredBytes)
	}
	per := first.StoredBytes // one line's stored size
	o := batch.CreateOptions{MaxOpenBytes: 10 * per}

	b, err := s.Create(ctx, "beta", strings.NewReader(lines(8)), o)
	if err != nil {
		t.Fatalf("9 lines' worth open: %v", err)
	}
	_, err = s.Create(ctx, "beta", strings.NewReader(lines(5)), o)
	if !errors.Is(err, batch.ErrTooMany) || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("a batch over the tenant's bytes: %v, want ErrTooMany naming the bytes", err)
	}
	// A single batch bigger than the whole allowance stops at the line
	// that goes over, and keeps nothing.
	before := streamMsgs(t, ctx, topo)
	if _, err := s.Create(ctx, "gamma", strings.NewReader(lines(50)), o); !errors.Is(err, batch.ErrTooMany) {
		t.Fatalf("a batch over the allowance alone: %v, want ErrTooMany", err)
	}
	if after := streamMsgs(t, ctx, topo); after != before {
		t.Errorf("a refused batch left %d lines stored", after-before)
	}
	// Another tenant is not held back by beta's bytes.
	if _, err := s.Create(ctx, "alpha", strings.NewReader(lines(8)), o); err != nil {
		t.Errorf("alpha beside beta's full allowance: %v", err)
	}
	// Beta's bytes are freed as its batches end.
	for _, id := range []string{first.ID, b.ID} {
		if _, err := s.Cancel(ctx, "beta", id); err != nil {
			t.Fatal(err)
		}
	}
	waitTerminal(t, s, "beta", first.ID, b.ID)
	if _, err := s.Create(ctx, "beta", strings.NewReader(lines(5)), o); err != nil {
		t.Errorf("beta after its batches ended: %v", err)
	}
}

// waitTerminal waits until tenant's batches ids have ended (a cancel with
// no runner ends at once or is completed by one; here there is none, so
// cancelling is enough: it counts as open until cancelled).
func waitTerminal(t *testing.T, s *batch.Store, tenant string, ids ...string) {
	t.Helper()
	ctx := ctxFor(t)
	for _, id := range ids {
		testkit.Eventually(t, 30*time.Second, func() bool {
			rec, err := s.Get(ctx, tenant, id)
			return err == nil && (rec.State == "cancelled" || rec.State == "completed")
		}, "batch %s did not end", id)
	}
}

// TestCreateStreamFull: when the batch stream every tenant shares is at
// its size limit (topology.Limits.BatchesBytes), a new batch is refused with
// ErrFull, and nothing of it is kept.
func TestCreateStreamFull(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(testkit.StartNATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage, Limits: topology.Limits{BatchesBytes: 16 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	s := batch.NewStore(topo, taskreg.New(topo.Tasks, builtin.Registry(), taskspec.CompileSpec))
	_, err = s.Create(ctx, "beta", strings.NewReader(lines(200)), batch.CreateOptions{})
	if !errors.Is(err, batch.ErrFull) {
		t.Fatalf("a batch over the stream's limit: %v, want ErrFull", err)
	}
	recs, err := s.List(ctx, "beta")
	if err != nil || len(recs) != 0 {
		t.Errorf("a refused batch was kept: %v, %v", recs, err)
	}
}
