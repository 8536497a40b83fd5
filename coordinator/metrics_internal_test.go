package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/step"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestMetricsCountedOnceStored: a journal entry's figures are counted once
// the entry is stored, never for an append that fails (the lease lost to
// a takeover): the next owner decides that step again and counts it then,
// so counting it here too would count it twice. Both ways of appending:
// waited for (Append) and in flight (Start, settled by the next flush).
func TestMetricsCountedOnceStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, topo := testkit.StartTopology(t)
	const tenant, job = "acme", "metrics-once"
	jr, _, err := journal.Open(ctx, js, topo.NS, tenant, job)
	if err != nil {
		t.Fatal(err)
	}
	reg := metrics.NewRegistry("coordinator", "test")
	cm := metrics.NewCoordinator(reg)
	r := &jobRun{jr: jr, spec: schemas.JobSpec{Tenant: tenant, JobID: job}}
	r.met.t, r.met.waveStep = cm.Tenant(tenant), -1
	decision := func(step int64) *schemas.JournalEntry {
		return &schemas.JournalEntry{
			Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: tenant, JobID: job,
			Type: schemas.EntryDecision, Token: 1, Owner: "c1", Step: step, At: time.Now().UTC(),
			VoteKey: "A", Votes: 2, Lead: 2, Counted: 2, Valid: 2,
			Work: schemas.Delta{Figures: schemas.Figures{Votes: 2}},
		}
	}
	decisions := func() float64 { return gathered(t, reg, "maker_decisions_total") }

	// Stored: counted, waited for or once flushed.
	if err := r.exec(ctx, step.Action{Kind: step.ActJournal, Entry: decision(0), Wait: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.exec(ctx, step.Action{Kind: step.ActJournal, Entry: decision(1)}); err != nil {
		t.Fatal(err)
	}
	if got := decisions(); got != 1 {
		t.Errorf("%v decisions counted with one in flight, want 1", got)
	}
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := decisions(); got != 2 {
		t.Fatalf("%v decisions counted after the flush, want 2", got)
	}

	// Another owner appends: this one's appends are fenced.
	other, _, err := journal.Open(ctx, js, topo.NS, tenant, job)
	if err != nil {
		t.Fatal(err)
	}
	e := decision(2)
	e.Token, e.Owner = 2, "c2"
	if _, err := other.Append(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := r.exec(ctx, step.Action{Kind: step.ActJournal, Entry: decision(2), Wait: true}); !errors.Is(err, errLeaseLost) {
		t.Fatalf("append after a takeover: %v, want %v", err, errLeaseLost)
	}
	if err := r.exec(ctx, step.Action{Kind: step.ActJournal, Entry: decision(3)}); err != nil {
		t.Fatalf("start after a takeover: %v (the fence shows at the flush)", err)
	}
	if err := r.flush(ctx); !errors.Is(err, errLeaseLost) {
		t.Fatalf("flush after a takeover: %v, want %v", err, errLeaseLost)
	}
	if got := decisions(); got != 2 {
		t.Errorf("%v decisions counted, want 2: the fenced appends counted nothing", got)
	}
	if got := gathered(t, reg, "maker_votes_total"); got != 4 {
		t.Errorf("%v votes counted, want 4", got)
	}
}

// gathered is the sum of the counter name's samples on reg.
func gathered(t *testing.T, reg *metrics.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, fam := range fams {
		if fam.GetName() == name {
			for _, m := range fam.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
