package batch

import (
	"context"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestOpenedAgeIsTheServers (issue 19, item 4): a batch's age for the fair
// choice is when the server stored its record, never the created_at its
// body claims (1970 or 2100); the tenant and batch are the key's.
func TestOpenedAgeIsTheServers(t *testing.T) {
	t.Parallel()
	_, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := NewRunner(topo, RunnerConfig{Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Minute)
	for _, claimed := range []time.Time{time.Unix(0, 0).UTC(), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)} {
		rec := schemas.BatchRecord{Header: schemas.NewHeader(schemas.KindBatchRecord), ID: "batch_x1", Tenant: "beta",
			State: schemas.BatchQueued, Window: 1, Counts: schemas.BatchCounts{Total: 1, Valid: 1}, CreatedAt: claimed, UpdatedAt: claimed}
		data, err := schemas.Encode(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topo.Batches.Put(ctx, "beta.batch_x1", data); err != nil {
			t.Fatal(err)
		}
		e, err := topo.Batches.Get(ctx, "beta.batch_x1")
		if err != nil {
			t.Fatal(err)
		}
		b, ok := r.opened(e)
		if !ok || !b.created.Equal(e.Created()) || b.created.Before(before) || b.created.After(time.Now()) ||
			b.tenant != "beta" || b.id != "batch_x1" || b.rev != e.Revision() {
			t.Errorf("created_at %v: opened %+v (%v); want the server's time %v, beta/batch_x1", claimed, b, ok, e.Created())
		}
	}
}
