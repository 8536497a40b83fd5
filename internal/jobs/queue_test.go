package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestQueuedReason: a queued job's reason follows the leases: none live is
// no coordinator; live leases of other jobs are busy coordinators; its own
// lease held off is a retry waiting, its own live lease a coordinator
// taking it.
func TestQueuedReason(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	now := time.Now().UTC()
	lease := func(job, owner string, expires time.Time, holdOff bool) {
		t.Helper()
		l := schemas.Lease{Header: schemas.NewHeader(schemas.KindLease), Tenant: "acme", JobID: job, Owner: owner,
			Token: 1, ExpiresAt: expires, HoldOff: holdOff}
		data, err := schemas.Encode(&l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.topo.Leases.Put(ctxT(t), bus.JobKey("acme", job), data); err != nil {
			t.Fatal(err)
		}
	}
	reason := func() string {
		t.Helper()
		why, err := jobs.QueuedReason(ctxT(t), r.topo, "acme", "q")
		if err != nil {
			t.Fatal(err)
		}
		return why
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"no leases", func() {}, "no coordinator has taken it yet"},
		{"released and expired leases", func() {
			lease("old-1", "c1", time.Unix(0, 0), false)
			lease("old-2", "c2", now.Add(-time.Minute), false)
		}, "no coordinator has taken it yet"},
		{"another job held off", func() { lease("failing", "c1", now.Add(time.Minute), true) }, "no coordinator has taken it yet"},
		{"one coordinator busy", func() {
			lease("a", "c1", now.Add(10*time.Second), false)
			lease("b", "c1", now.Add(10*time.Second), false)
		}, "waiting for a free coordinator slot (1 coordinator is running 2 jobs)"},
		{"two coordinators busy", func() { lease("c", "c2", now.Add(10*time.Second), false) },
			"waiting for a free coordinator slot (2 coordinators are running 3 jobs)"},
		{"its own lease held off", func() { lease("q", "c2", now.Add(time.Minute), true) }, "held off after a failed attempt until "},
		{"its own lease taken", func() { lease("q", "c2", now.Add(10*time.Second), false) }, "c2 is taking it"},
	}
	for _, s := range steps {
		s.do()
		if got := reason(); !strings.HasPrefix(got, s.want) {
			t.Errorf("%s: reason %q, want %q", s.name, got, s.want)
		}
	}
}
