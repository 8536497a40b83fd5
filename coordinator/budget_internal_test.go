package coordinator

import (
	"testing"
	"time"
)

// TestBudgetWaitFor: a busy refusal waits while the job holds answers due
// to come; a job holding only overdue ones gives way (it pauses), so jobs
// waiting on each other's lost answers cannot wait forever; a job holding
// nothing waits for the tenant's other jobs.
func TestBudgetWaitFor(t *testing.T) {
	t.Parallel()
	now := time.Now()
	due, overdue := hold{due: now.Add(time.Second)}, hold{due: now.Add(-time.Second)}
	for _, tc := range []struct {
		name  string
		scope string
		holds []hold
		wait  bool
	}{
		{"job: an answer due", "job", []hold{overdue, due}, true},
		{"job: only overdue answers", "job", []hold{overdue, overdue}, false},
		{"job: nothing held", "job", nil, false},
		{"tenant: an answer due", "tenant", []hold{due}, true},
		{"tenant: only overdue answers", "tenant", []hold{overdue}, false},
		{"tenant: nothing held, others' answers", "tenant", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &jobBudget{holds: map[string]hold{}}
			for i, h := range tc.holds {
				b.holds[string(rune('a'+i))] = h
			}
			if got := b.waitFor(tc.scope, now); got != tc.wait {
				t.Errorf("waitFor = %v, want %v", got, tc.wait)
			}
		})
	}
}
