package batch_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// forge stores body under key of the batches bucket, as a tenant's own
// identity may (its keys <tenant>.>), and returns its revision.
func forge(t *testing.T, topo *topology.Topology, key string, rec *schemas.BatchRecord) {
	t.Helper()
	data, err := schemas.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Batches.Put(ctxFor(t), key, data); err != nil {
		t.Fatal(err)
	}
}

// forgedRecord is a queued record of tenant's batch id, one line, dated
// 1970.
func forgedRecord(tenant, id string, lines int64) *schemas.BatchRecord {
	old := time.Unix(0, 0).UTC()
	return &schemas.BatchRecord{Header: schemas.NewHeader(schemas.KindBatchRecord), ID: id, Tenant: tenant,
		State: schemas.BatchQueued, Window: 1, Counts: schemas.BatchCounts{Total: lines, Valid: lines},
		CreatedAt: old, UpdatedAt: old}
}

// TestRunnerRecordsOwnedByKey (issue 19, item 4): records beta wrote under
// its own keys whose body names alpha (dated 1970), another batch, or more
// lines than are stored, and a key naming no batch, are refused: alpha's
// real batch is fed at once, nothing is written under alpha's keys for
// them (no lease, no record, no job), each is counted once however long
// the runner looks, and logged at most once per RefusedLogEvery. beta's
// own reads do not see them either.
func TestRunnerRecordsOwnedByKey(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	ctx := ctxFor(t)
	forged := []struct {
		key string
		rec *schemas.BatchRecord
	}{
		{"beta.batch_f1", forgedRecord("alpha", "batch_f1", 1)},
		{"beta.batch_f2", forgedRecord("alpha", "batch_f2", 1)},
		{"beta.batch_f3", forgedRecord("alpha", "batch_f3", 1)},
		{"beta.batch_f4", forgedRecord("alpha", "batch_f4", 1)},
		{"beta.batch_f5", forgedRecord("alpha", "batch_f5", 1)},
		{"beta.batch_g1", forgedRecord("beta", "batch_other", 1)},
		{"beta.batch_h1", forgedRecord("beta", "batch_h1", 50_000)}, // no line stored
		{"beta.junk", forgedRecord("beta", "batch_j1", 1)},
	}
	for _, f := range forged {
		forge(t, topo, f.key, f.rec)
	}
	logs := &testkit.SyncBuffer{}
	reg := metrics.NewRegistry("coordinator", "test")
	r := runRunner(t, topo, batch.RunnerConfig{
		Owner: "runner-1", MaxBatches: 2, LeaseTTL: 3 * time.Second, ScanInterval: 20 * time.Millisecond,
		Metrics: metrics.NewCoordinator(reg), Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})

	start := time.Now()
	a1 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	fedBatch(t, s, "alpha", a1.ID)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("alpha's batch was fed after %v, want at once", took)
	}
	// Many more looks: a second real batch of alpha's, fed too.
	a2 := create(t, s, "alpha", batch.CreateOptions{Window: 1})
	fedBatch(t, s, "alpha", a2.ID)

	for _, f := range forged {
		if f.rec.Tenant == "beta" {
			continue // beta's own keys: its own business
		}
		for _, key := range []string{bus.JobKey(f.rec.Tenant, f.rec.ID), bus.JobKey(f.rec.Tenant, f.rec.ID+"-lease")} {
			if _, err := topo.Batches.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("%s was written for the record forged under %s (err %v)", key, f.key, err)
			}
		}
	}
	if recs, err := jobs.List(ctx, topo, "alpha"); err != nil || len(recs) != 2 {
		t.Errorf("alpha has %d jobs (err %v), want its two batches' only", len(recs), err)
	}
	if got := r.Refused(); got != int64(len(forged)) {
		t.Errorf("refused %d records, want each of the %d counted once", got, len(forged))
	}
	if n := strings.Count(logs.String(), "batch record refused"); n < 1 || n > 2 {
		t.Errorf("%d log lines about refused records, want one (at most one per RefusedLogEvery)\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "feeding the batch stopped"); n != 0 {
		t.Errorf("%d log lines of feeding errors, want none", n)
	}
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]float64{}
	for _, fam := range fams {
		if fam.GetName() != "maker_records_refused_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tenant"] != "beta" {
				t.Errorf("a refusal counted for tenant %q, want the key's (beta)", labels["tenant"])
			}
			counted[labels["reason"]] += m.GetCounter().GetValue()
		}
	}
	if want := map[string]float64{"tenant": 5, "batch_id": 1, "lines": 1, "key": 1}; len(counted) != len(want) ||
		counted["tenant"] != 5 || counted["batch_id"] != 1 || counted["lines"] != 1 || counted["key"] != 1 {
		t.Errorf("maker_records_refused_total by reason %v, want %v", counted, want)
	}
	// beta's own reads: none of them is a batch of beta's.
	for _, id := range []string{"batch_f1", "batch_g1"} {
		if _, err := s.Get(ctx, "beta", id); !errors.Is(err, batch.ErrNotFound) {
			t.Errorf("Get(beta, %s) = %v, want ErrNotFound", id, err)
		}
	}
	if list, err := s.List(ctx, "beta"); err != nil || len(list) != 1 || list[0].ID != "batch_h1" {
		t.Errorf("List(beta) = %+v, %v; want only the record that is its own (batch_h1)", list, err)
	}
}
