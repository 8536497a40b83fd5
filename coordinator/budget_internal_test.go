package coordinator

import (
	"slices"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
)

// TestBudgetWaitFor: a busy refusal waits while the job holds answers due
// to come; a job holding only overdue ones gives way (it pauses), so jobs
// waiting on each other's lost answers cannot wait forever; a job holding
// nothing waits for the tenant's other jobs, but not longer than its
// patience (their reservations may never settle).
func TestBudgetWaitFor(t *testing.T) {
	t.Parallel()
	now := time.Now()
	const patience = 2 * time.Second
	due, overdue := hold{due: now.Add(time.Second)}, hold{due: now.Add(-time.Second)}
	for _, tc := range []struct {
		name      string
		scope     string
		holds     []hold
		busySince time.Duration // before now; 0: not waiting yet
		wait      bool
	}{
		{"job: an answer due", "job", []hold{overdue, due}, 0, true},
		{"job: only overdue answers", "job", []hold{overdue, overdue}, 0, false},
		{"job: nothing held", "job", nil, 0, false},
		{"tenant: an answer due", "tenant", []hold{due}, 0, true},
		{"tenant: an answer due, waited long", "tenant", []hold{due}, time.Hour, true},
		{"tenant: only overdue answers", "tenant", []hold{overdue}, 0, false},
		{"tenant: nothing held, others' answers", "tenant", nil, 0, true},
		{"tenant: nothing held, waited less than the patience", "tenant", nil, patience - time.Millisecond, true},
		{"tenant: nothing held, waited the patience", "tenant", nil, patience, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &jobBudget{holds: map[string]hold{}}
			if tc.busySince > 0 {
				b.busySince = now.Add(-tc.busySince)
			}
			for i, h := range tc.holds {
				b.holds[string(rune('a'+i))] = h
			}
			if got := b.waitFor(tc.scope, now, patience); got != tc.wait {
				t.Errorf("waitFor = %v, want %v", got, tc.wait)
			}
		})
	}
}

// TestBudgetWaitStartsOnce: the patience counts from the first busy
// refusal, not from each.
func TestBudgetWaitStartsOnce(t *testing.T) {
	t.Parallel()
	b := &jobBudget{holds: map[string]hold{}}
	t0 := time.Now()
	for i := range 5 {
		if !b.waitFor("tenant", t0.Add(time.Duration(i)*time.Second), 10*time.Second) {
			t.Fatalf("refusal %d: gave up within the patience", i)
		}
	}
	if b.waitFor("tenant", t0.Add(10*time.Second), 10*time.Second) {
		t.Fatal("still waiting 10s after the first refusal, with a patience of 10s")
	}
}

// TestSpendPlan: the cost of answers is spent on the days their holds were
// reserved against, each at most what was released there, so a day's
// limit holds across UTC midnight; only what no hold covers goes on today.
func TestSpendPlan(t *testing.T) {
	t.Parallel()
	const d1, d2, d3 = "2026-12-01", "2026-12-02", "2026-12-03"
	type N = pricing.Nano
	for _, tc := range []struct {
		name        string
		spent, cost N
		released    map[string]N
		today       string
		want        []dayShare
	}{
		{"nothing", 100, 100, nil, d2, []dayShare{}},
		{"today's holds", 100, 160, map[string]N{d2: 80}, d2, []dayShare{{d2, 80, 160}}},
		{"only spend, no holds: today", 100, 130, nil, d2, []dayShare{{d2, 0, 130}}},
		{"yesterday's hold answered after midnight: spent on yesterday", 0, 600, map[string]N{d1: 600}, d2,
			[]dayShare{{d1, 600, 600}}},
		{"yesterday's hold covers part: the rest on today", 0, 700, map[string]N{d1: 600}, d2,
			[]dayShare{{d1, 600, 600}, {d2, 0, 700}}},
		{"holds on both days", 50, 450, map[string]N{d1: 300, d2: 300}, d2,
			[]dayShare{{d1, 300, 350}, {d2, 300, 450}}},
		{"oldest day first", 0, 500, map[string]N{d2: 300, d1: 300, d3: 100}, d3,
			[]dayShare{{d1, 300, 300}, {d2, 300, 500}, {d3, 100, 500}}},
		{"a cost below what was spent spends nothing", 500, 300, map[string]N{d1: 100, d2: 100}, d2,
			[]dayShare{{d1, 100, 500}, {d2, 100, 500}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spendPlan(tc.spent, tc.cost, tc.released, tc.today)
			if !slices.Equal(got, tc.want) {
				t.Errorf("spendPlan = %+v, want %+v", got, tc.want)
			}
			// No day gets more new spend than was released there, but
			// today (what no hold covers).
			prev := tc.spent
			for _, s := range got {
				if s.day != tc.today && s.total-prev > s.reserved {
					t.Errorf("day %s spends %d with %d released", s.day, s.total-prev, s.reserved)
				}
				prev = max(prev, s.total)
			}
		})
	}
}
