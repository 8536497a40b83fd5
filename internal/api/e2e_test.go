package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// end follows a job's event stream until it ends or (unless
// untilReport) pauses as budget_exhausted, and returns that state.
func (e *apiEnv) end(ctx context.Context, tenant, id string, untilReport bool) string {
	e.t.Helper()
	for ev := range e.stream(ctx, "/v1/jobs/"+id+"/events", e.key[tenant]) {
		var st struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(ev.data), &st); err != nil {
			continue
		}
		if ev.name == "report" || !untilReport && st.State == schemas.StateBudgetExhausted {
			return st.State
		}
	}
	return "stream ended"
}

// TestBudgetsThroughAPI: two tenants' jobs submitted at once through the
// API; alpha has a spend per day and one job a small budget of its own.
// No budget is exceeded: every alpha job ends solved or pauses as
// budget_exhausted, each job's spend is within its budget and the
// tenant's within its day's; beta's job is not held back. Raising the
// budgets through the API and resuming finishes a paused job.
func TestBudgetsThroughAPI(t *testing.T) {
	t.Parallel()
	const dayLimit = 0.01
	e := newEnv(t, options{run: true, setup: func(e *apiEnv) {
		e.json(http.MethodPut, "/v1/quotas/alpha", e.admin, fmt.Sprintf(`{"spend_per_day_usd":%g}`, dayLimit)).decode(e.t, http.StatusOK, &schemas.TenantQuota{})
		e.price("default", 1, 1)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	priced := func(budget float64, seed int64) schemas.JobRequest {
		r := hanoi(3)
		r.Seed = seed
		// The job's own claim is no price: the fleet's is.
		r.Pricing = &schemas.Pricing{}
		r.BudgetUSD = budget
		return r
	}
	type job struct {
		tenant, id string
		budget     float64
	}
	reqs := []job{{alpha, "", 0.006}, {beta, "", 1}} // 0.006: above the forecast's low end ($0.0058), below the expected cost
	for i := range 5 {
		reqs = append(reqs, job{alpha, fmt.Sprint(i), 1})
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for i := range reqs {
		wg.Add(1)
		go func() { // ends with its request
			defer wg.Done()
			var c schemas.JobCreated
			r := e.json(http.MethodPost, "/v1/jobs", e.key[reqs[i].tenant], priced(reqs[i].budget, int64(i)))
			if r.status != http.StatusCreated || json.Unmarshal(r.body, &c) != nil {
				t.Errorf("submit %d: %d %s", i, r.status, r.body)
				return
			}
			mu.Lock()
			reqs[i].id = c.ID
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	states := make([]string, len(reqs))
	for i := range reqs {
		wg.Add(1)
		go func() { // ends with the job's stream
			defer wg.Done()
			states[i] = e.end(ctx, reqs[i].tenant, reqs[i].id, false)
		}()
	}
	wg.Wait()
	var alphaSpent float64
	exhausted := 0
	for i, j := range reqs {
		var b schemas.JobBudget
		e.json(http.MethodGet, "/v1/jobs/"+j.id+"/budget", e.key[j.tenant], nil).decode(t, http.StatusOK, &b)
		t.Logf("%s/%s budget %g: %s, spent %g (limit %g)", j.tenant, j.id, j.budget, states[i], b.SpentUSD, b.LimitUSD)
		if states[i] != schemas.StateSolved && states[i] != schemas.StateBudgetExhausted {
			t.Errorf("job %s ended %s", j.id, states[i])
		}
		if b.SpentUSD > j.budget {
			t.Errorf("job %s spent %g over its budget %g", j.id, b.SpentUSD, j.budget)
		}
		if j.tenant == alpha {
			alphaSpent += b.SpentUSD
			if states[i] == schemas.StateBudgetExhausted {
				exhausted++
			}
		} else if states[i] != schemas.StateSolved {
			t.Errorf("beta's job %s: %s", j.id, states[i])
		}
		if states[i] == schemas.StateSolved {
			var rep schemas.JobReport
			e.json(http.MethodGet, "/v1/jobs/"+j.id+"/result", e.key[j.tenant], nil).decode(t, http.StatusOK, &rep)
			if rep.CostUSD > j.budget {
				t.Errorf("job %s's report costs %g, over its budget %g", j.id, rep.CostUSD, j.budget)
			}
		}
	}
	var u schemas.Usage
	e.json(http.MethodGet, "/v1/usage", e.key[alpha], nil).decode(t, http.StatusOK, &u)
	if alphaSpent > dayLimit+1e-9 || u.SpentTodayUSD > dayLimit+1e-9 {
		t.Errorf("alpha spent %g (usage %g) over its day's %g", alphaSpent, u.SpentTodayUSD, dayLimit)
	}
	if exhausted == 0 {
		t.Errorf("no alpha job paused: the budgets never bit (spent %g)", alphaSpent)
	}
	// Raise the budgets, resume the small one: it finishes.
	small := reqs[0]
	if states[0] == schemas.StateBudgetExhausted {
		e.json(http.MethodPut, "/v1/quotas/alpha", e.admin, `{"spend_per_day_usd":100}`).decode(t, http.StatusOK, &schemas.TenantQuota{})
		e.json(http.MethodPut, "/v1/jobs/"+small.id+"/budget", e.key[alpha], `{"budget_usd":1}`).decode(t, http.StatusOK, &schemas.JobBudget{})
		var cr schemas.ControlResult
		e.json(http.MethodPost, "/v1/jobs/"+small.id+"/resume", e.key[alpha], nil).decode(t, http.StatusOK, &cr)
		if got := e.end(ctx, alpha, small.id, true); got != schemas.StateSolved {
			t.Errorf("resumed job: %s", got)
		}
	}
}
