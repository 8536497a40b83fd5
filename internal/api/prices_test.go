package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestPricesRoutes: any key reads the fleet's price table (a tenant sees
// what its work costs); only admin keys set and remove prices; hostile
// model names and prices are refused with the field that fails.
func TestPricesRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	var list schemas.PriceList
	e.json(http.MethodGet, "/v1/prices", e.key[alpha], nil).decode(t, http.StatusOK, &list)
	if len(list.Prices) != 0 {
		t.Fatalf("a new fleet's prices: %+v", list)
	}
	e.json(http.MethodPut, "/v1/prices/default", e.key[alpha], `{"input_usd_per_mtok":0,"output_usd_per_mtok":0}`).problem(t, http.StatusForbidden, api.TypeForbidden)

	gpt := e.price("openai/gpt-5.5", 5, 20)
	if gpt.Model != "openai/gpt-5.5" || gpt.Default || gpt.UpdatedAt.IsZero() {
		t.Errorf("set %+v", gpt)
	}
	def := e.price("default", 0.15, 0.6)
	if !def.Default || def.Model != "" {
		t.Errorf("the default record: %+v", def)
	}
	r := e.json(http.MethodGet, "/v1/prices", e.key[beta], nil)
	checkBody(t, "PriceList", r.body)
	r.decode(t, http.StatusOK, &list)
	if len(list.Prices) != 2 || !list.Prices[0].Default || list.Prices[1].Model != "openai/gpt-5.5" || list.Prices[1].OutputUSDPerMTok != 20 {
		t.Errorf("prices %+v: want the default record first, then the model", list.Prices)
	}

	for _, tc := range []struct {
		model, body string
		status      int
		typ, path   string
	}{
		{"m", `{"input_usd_per_mtok":-1,"output_usd_per_mtok":1}`, 422, api.TypeInvalid, "/input_usd_per_mtok"},
		{"m", `{"input_usd_per_mtok":1,"output_usd_per_mtok":1e9}`, 422, api.TypeInvalid, "/output_usd_per_mtok"},
		{"m", `{"input_usd_per_mtok":"cheap","output_usd_per_mtok":1}`, 422, api.TypeInvalid, "/input_usd_per_mtok"},
		{"m", `{"input_usd_per_mtok":1,"output_usd_per_mtok":1,"model":"other"}`, 422, api.TypeInvalid, "/model"},
		{"m", `{"input_usd_per_mtok":1,"output_usd_per_mtok":1,"default":true}`, 422, api.TypeInvalid, "/default"},
		{"m", `{"input_usd_per_mtok":1,"output_usd_per_mtok":1,"kind":"tenant_quota"}`, 422, api.TypeInvalid, "/kind"},
		{"m", `{"input_usd_per_mtok":1,"output_usd_per_mtok":1,"free":true}`, 422, api.TypeInvalid, "/free"},
		{"a\nb", `{"input_usd_per_mtok":1,"output_usd_per_mtok":1}`, 404, api.TypeNotFound, ""},
		{" m", `{"input_usd_per_mtok":1,"output_usd_per_mtok":1}`, 404, api.TypeNotFound, ""},
		{strings.Repeat("x", 201), `{"input_usd_per_mtok":1,"output_usd_per_mtok":1}`, 404, api.TypeNotFound, ""},
	} {
		p := e.json(http.MethodPut, "/v1/prices/"+url.PathEscape(tc.model), e.admin, tc.body).problem(t, tc.status, tc.typ)
		if tc.path != "" && (len(p.Errors) != 1 || p.Errors[0].Path != tc.path) {
			t.Errorf("PUT %q %s: errors %+v, want %s", tc.model, tc.body, p.Errors, tc.path)
		}
	}
	e.json(http.MethodGet, "/v1/prices", e.key[alpha], nil).decode(t, http.StatusOK, &list)
	if len(list.Prices) != 2 {
		t.Errorf("refused prices were stored: %+v", list.Prices)
	}

	e.do(http.MethodDelete, "/v1/prices/"+url.PathEscape("openai/gpt-5.5"), e.key[alpha], "", nil).problem(t, http.StatusForbidden, api.TypeForbidden)
	if r := e.do(http.MethodDelete, "/v1/prices/"+url.PathEscape("openai/gpt-5.5"), e.admin, "", nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	e.do(http.MethodDelete, "/v1/prices/"+url.PathEscape("openai/gpt-5.5"), e.admin, "", nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/prices", e.key[alpha], nil).decode(t, http.StatusOK, &list)
	if len(list.Prices) != 1 || !list.Prices[0].Default {
		t.Errorf("after DELETE: %+v", list.Prices)
	}
}

// TestSubmitUnpriced (issue 19, finding 6): a tenant with a spend quota of
// $0.001 a day submits a job without pricing and one priced at 0: both are
// refused (422 unpriced, naming the model), and nothing is enqueued. A job
// with a budget and a stronger model the fleet does not price is refused
// too. With the fleet's price set, the same job runs, charged at the
// fleet's price: /v1/usage shows the spend, and the quota stops the job
// (budget_exhausted, saying why) within its $0.001.
func TestSubmitUnpriced(t *testing.T) {
	t.Parallel()
	const perDay = 0.001
	e := newEnv(t, options{run: true, setup: func(e *apiEnv) {
		e.json(http.MethodPut, "/v1/quotas/alpha", e.admin, fmt.Sprintf(`{"spend_per_day_usd":%g}`, perDay)).decode(e.t, http.StatusOK, &schemas.TenantQuota{})
	}})
	before, seq := e.enqueued()
	job := func(pricing *schemas.Pricing) schemas.JobRequest {
		r := hanoi(6)
		r.Pricing = pricing
		return r
	}
	for _, claim := range []*schemas.Pricing{nil, {}} {
		p := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], job(claim)).problem(t, http.StatusUnprocessableEntity, api.TypeUnpriced)
		if !strings.Contains(p.Detail, `prices no model "default"`) || !strings.Contains(p.Detail, "spend quota of $0.001 a day") {
			t.Errorf("pricing %+v: %q", claim, p.Detail)
		}
	}
	e.price("default", 0.1, 0.1)
	strong := job(nil)
	strong.BudgetUSD = 1
	strong.Escalation = &schemas.EscalationPolicy{StrongerModel: "big", StrongerSamples: 4, StrongerPricing: &schemas.Pricing{}}
	if p := e.json(http.MethodPost, "/v1/jobs", e.key[beta], strong).problem(t, http.StatusUnprocessableEntity, api.TypeUnpriced); !strings.Contains(p.Detail, `"big"`) {
		t.Errorf("an unpriced stronger model: %q", p.Detail)
	}
	if after, seq2 := e.enqueued(); after != before || seq2 != seq {
		t.Fatalf("refused jobs were enqueued: %d registered (was %d), seq %d (was %d)", after, before, seq2, seq)
	}

	c := e.submit(alpha, job(&schemas.Pricing{}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if st := e.end(ctx, alpha, c.ID, false); st != schemas.StateBudgetExhausted {
		t.Fatalf("a 63-step job under a $0.001 quota ended %s", st)
	}
	var v schemas.JobView
	e.json(http.MethodGet, "/v1/jobs/"+c.ID, e.key[alpha], nil).decode(t, http.StatusOK, &v)
	if !strings.Contains(v.Reason, "spend for the day") {
		t.Errorf("job %+v: want the reason it stopped", v)
	}
	var u schemas.Usage
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.json(http.MethodGet, "/v1/usage", e.key[alpha], nil).decode(t, http.StatusOK, &u)
		if u.ReservedTodayUSD == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if u.SpentTodayUSD <= 0 || u.SpentTodayUSD > perDay+1e-12 || u.ReservedTodayUSD != 0 {
		t.Errorf("usage %+v: want what the job spent at the fleet's price, within $%g", u, perDay)
	}
}
