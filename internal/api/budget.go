package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
)

// budgetJob is the job a budget route names, checked: the tenant's,
// priced, not finished (for a change).
func (s *Server) budgetJob(r *http.Request, p apikey.Principal) (schemas.JobRecord, error) {
	if s.deps.Budgets == nil {
		return schemas.JobRecord{}, problem(TypeNotImplemented, "this server keeps no budgets (no Redis)")
	}
	tenant, id, err := jobRef(r, p)
	if err != nil {
		return schemas.JobRecord{}, err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	rec, _, err := jobs.Get(ctx, s.deps.Topo, tenant, id)
	return rec, err
}

// jobBudget answers the job's budget figures: from Redis once the job has
// run, else its spec's budget.
func (s *Server) jobBudget(w http.ResponseWriter, r *http.Request, rec schemas.JobRecord) error {
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	out := schemas.JobBudget{ID: rec.JobID, Tenant: rec.Tenant, LimitUSD: rec.Spec.BudgetUSD}
	a, err := s.deps.Budgets.Job(ctx, store.JobRef{Tenant: rec.Tenant, JobID: rec.JobID})
	switch {
	case errors.Is(err, store.ErrNoJob):
	case err != nil:
		return fmt.Errorf("%w: budget of %s/%s: %w", jobs.ErrUnavailable, rec.Tenant, rec.JobID, err)
	default:
		out.LimitUSD, out.SpentUSD, out.ReservedUSD = a.Limit.USD(), a.Spent.USD(), a.Reserved.USD()
	}
	return writeJSON(w, http.StatusOK, out)
}

// getBudget is GET /v1/jobs/{id}/budget.
func (s *Server) getBudget(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	rec, err := s.budgetJob(r, p)
	if err != nil {
		return err
	}
	return s.jobBudget(w, r, rec)
}

// putBudget is PUT /v1/jobs/{id}/budget: the job's new budget, where every
// reservation reads it; a budget_exhausted job goes on once resumed.
func (s *Server) putBudget(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	rec, err := s.budgetJob(r, p)
	if err != nil {
		return err
	}
	var body schemas.BudgetBody
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body); err != nil {
		return err
	}
	switch {
	case math.IsNaN(body.BudgetUSD) || body.BudgetUSD < 0 || body.BudgetUSD > schemas.MaxBudgetUSD:
		return invalidField("/budget_usd", "budget_usd must be between 0 and %d", schemas.MaxBudgetUSD)
	case rec.Finished:
		return problem(TypeFinished, "job %s has finished", rec.JobID)
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	if body.BudgetUSD > 0 {
		// A budget holds the job to the fleet's prices: every model it
		// may ask must have one.
		prices, err := s.priceTable(ctx)
		if err != nil {
			return err
		}
		spec := rec.Spec
		spec.BudgetUSD = body.BudgetUSD
		if err := checkPriced(prices, &spec, schemas.TenantQuota{}); err != nil {
			return err
		}
	}
	if err := s.deps.Budgets.SetJobLimit(ctx, store.JobRef{Tenant: rec.Tenant, JobID: rec.JobID}, pricing.USD(body.BudgetUSD)); err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	return s.jobBudget(w, r, rec)
}
