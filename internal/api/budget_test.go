package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestAdmission: a job's forecast comes with its id; a budget below the
// forecast's lowest cost is refused (422 over-budget at /budget_usd) and
// nothing is enqueued; a job's budget is read and raised through the API.
func TestAdmission(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{forecast: pricing.Forecast})
	// Without a price table the forecast has no cost.
	if nc := e.submit(alpha, hanoi(4)); nc.Forecast == nil || nc.Forecast.CostUSD != 0 || nc.Forecast.Steps != 15 {
		t.Errorf("unpriced forecast %+v", nc.Forecast)
	}
	e.price("default", 1, 4)
	priced := func(budget float64) schemas.JobRequest {
		r := hanoi(3)
		r.BudgetUSD = budget
		return r
	}
	before, seq := e.enqueued()
	p := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], priced(0.000001)).problem(t, http.StatusUnprocessableEntity, api.TypeOverBudget)
	if len(p.Errors) != 1 || p.Errors[0].Path != "/budget_usd" {
		t.Errorf("errors %+v", p.Errors)
	}
	if after, seq2 := e.enqueued(); after != before || seq2 != seq {
		t.Error("an over-budget job was enqueued")
	}
	c := e.submit(alpha, priced(10))
	f := c.Forecast
	if f == nil || f.Steps != 7 || f.SamplesExpected < 14 || !(0 < f.CostLowUSD && f.CostLowUSD <= f.CostUSD && f.CostUSD <= f.CostHighUSD) || f.Basis == "" {
		t.Fatalf("forecast %+v", f)
	}
	// The fleet's price, whatever the job claims.
	claim := hanoi(4)
	claim.Pricing = &schemas.Pricing{}
	if nc := e.submit(alpha, claim); nc.Forecast == nil || nc.Forecast.CostUSD <= 0 || !strings.Contains(nc.Forecast.Basis, "fleet's price") {
		t.Errorf("forecast of a job claiming a price of 0: %+v", nc.Forecast)
	}

	var b schemas.JobBudget
	e.json(http.MethodGet, "/v1/jobs/"+c.ID+"/budget", e.key[alpha], nil).decode(t, http.StatusOK, &b)
	if b.LimitUSD != 10 || b.SpentUSD != 0 || b.ID != c.ID {
		t.Errorf("budget %+v", b)
	}
	r := e.json(http.MethodPut, "/v1/jobs/"+c.ID+"/budget", e.key[alpha], schemas.BudgetBody{BudgetUSD: 25})
	checkBody(t, "JobBudget", r.body)
	r.decode(t, http.StatusOK, &b)
	if b.LimitUSD != 25 {
		t.Errorf("raised budget %+v", b)
	}
	for _, body := range []string{`{"budget_usd":-1}`, `{"budget_usd":"x"}`, `{"usd":1}`} {
		pe := e.json(http.MethodPut, "/v1/jobs/"+c.ID+"/budget", e.key[alpha], body).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
		if len(pe.Errors) != 1 {
			t.Errorf("%s: %+v", body, pe)
		}
	}
	// A budget holds a job to the fleet's prices: one whose stronger model
	// the fleet does not price gets none.
	unpricedReq := hanoi(3)
	unpricedReq.Escalation = &schemas.EscalationPolicy{StrongerModel: "big", StrongerSamples: 4}
	unpriced := e.submit(beta, unpricedReq)
	if p := e.json(http.MethodPut, "/v1/jobs/"+unpriced.ID+"/budget", e.key[beta], `{"budget_usd":1}`).problem(t, http.StatusUnprocessableEntity, api.TypeUnpriced); !strings.Contains(p.Detail, `"big"`) {
		t.Errorf("budget of a job asking an unpriced model: %q", p.Detail)
	}
	e.json(http.MethodPut, "/v1/jobs/"+unpriced.ID+"/budget", e.key[alpha], `{"budget_usd":1}`).problem(t, http.StatusNotFound, api.TypeNotFound)

	// The usage shows the tenant's jobs and quota.
	var u schemas.Usage
	r = e.json(http.MethodGet, "/v1/usage", e.key[alpha], nil)
	checkBody(t, "Usage", r.body)
	r.decode(t, http.StatusOK, &u)
	if u.Tenant != alpha || u.Jobs[schemas.StateQueued] != 3 || u.Day == "" || u.Quota.Tenant != alpha {
		t.Errorf("usage %+v", u)
	}
}

// TestQuotas: an admin key reads and sets any tenant's quota and the
// fleet's; the usage shows the tenant's; a bad quota is a 422 at its field.
func TestQuotas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	var q schemas.TenantQuota
	e.json(http.MethodGet, "/v1/quotas/beta", e.admin, nil).decode(t, http.StatusOK, &q)
	if q.Tenant != beta || q.MaxRunningJobs != 0 {
		t.Errorf("unset quota %+v", q)
	}
	r := e.json(http.MethodPut, "/v1/quotas/beta", e.admin, `{"max_running_jobs":2,"samples_per_second":50,"spend_per_day_usd":3}`)
	checkBody(t, "TenantQuota", r.body)
	r.decode(t, http.StatusOK, &q)
	if q.Tenant != beta || q.MaxRunningJobs != 2 || q.SamplesPerSecond != 50 || q.UpdatedAt.IsZero() {
		t.Errorf("set quota %+v", q)
	}
	q = schemas.TenantQuota{}
	e.json(http.MethodPut, "/v1/quotas/_fleet", e.admin, `{"max_inflight_samples":100}`).decode(t, http.StatusOK, &q)
	if q.Tenant != "" || q.MaxInflightSamples != 100 {
		t.Errorf("fleet quota %+v", q)
	}
	q = schemas.TenantQuota{}
	e.json(http.MethodGet, "/v1/quotas/_fleet", e.admin, nil).decode(t, http.StatusOK, &q)
	if q.MaxInflightSamples != 100 {
		t.Errorf("fleet quota read %+v", q)
	}
	// The store's watch brings the change to the usage.
	testkit.Eventually(t, 10*time.Second, func() bool {
		var u schemas.Usage
		e.json(http.MethodGet, "/v1/usage", e.key[beta], nil).decode(t, http.StatusOK, &u)
		return u.Quota.MaxRunningJobs == 2
	}, "the usage never shows the quota set")
	for body, path := range map[string]string{
		`{"max_running_jobs":-1}`:         "/max_running_jobs",
		`{"burst":-1}`:                    "/burst",
		`{"weight":5000}`:                 "/weight",
		`{"tenant":"alpha"}`:              "/tenant",
		`{"spend_per_day_usd":"lots"}`:    "/spend_per_day_usd",
		`{"max_inflight_samples":1.5}`:    "/max_inflight_samples",
		`{"samples_per_second":-0.5}`:     "/samples_per_second",
		`{"kind":"job_spec","version":1}`: "/kind",
	} {
		pe := e.json(http.MethodPut, "/v1/quotas/beta", e.admin, body).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
		if len(pe.Errors) != 1 || pe.Errors[0].Path != path {
			t.Errorf("%s: errors %+v, want %s", body, pe.Errors, path)
		}
	}
	e.json(http.MethodGet, "/v1/quotas/Not_A_Tenant", e.admin, nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/quotas/beta", e.key[beta], nil).problem(t, http.StatusForbidden, api.TypeForbidden)
}
