package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestOverclaimedResultsBounded: a priced job with a budget, of a tenant
// with a spend per day; at two steps a voter that holds the request of
// index 0 answers it first with the right vote and a claim of 5e10 prompt
// and 5e10 completion tokens (1e11 in all, $100,000 at $1 per million).
// Each claim is counted as the red flag overclaim and charged at the
// bound: the job solves with the golden trace (each of those steps draws
// one more sample), it is never paused as budget_exhausted, what it cost
// and what the tenant's day spent stay within their limits and within
// the bounds of the samples drawn, and the report counts the overclaims.
func TestOverclaimedResultsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const disks, k, jobSeed, tenant = 3, 2, 37, "acme"
	const steps = 1<<disks - 1
	const claim = 50_000_000_000
	rogueSteps := map[int64]bool{1: true, 4: true}
	env := fleettest.New(t)
	bound := sampleBound(t, env, disks)
	dayLimit := 60 * bound
	if _, err := quota.New(env.Topo).Set(ctx, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: dayLimit}); err != nil {
		t.Fatal(err)
	}
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, steps, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if rogueSteps[c.Step] && c.Index == 0 && c.Seq == 0 {
			<-ctx.Done() // the rogue answers this one
			return llm.Response{}, ctx.Err()
		}
		return fleettest.Right(c), nil
	})
	priceFleet(env)
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(model, voter.Config{Concurrency: 8})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.Tenant = tenant
	spec.BudgetUSD = 40 * bound
	day := store.Day(time.Now())

	keys, _ := fleettest.Golden(disks)
	claimed := env.AnswerFirst(spec, func(req *schemas.SampleRequest) (schemas.SampleResult, bool) {
		return schemas.SampleResult{Outcome: schemas.OutcomeVote, VoteKey: keys[req.Step], PromptTokens: claim, CompletionTokens: claim},
			rogueSteps[req.Step] && req.Index == 0 && req.Attempt == 0
	})
	env.Submit(&spec)
	out := awaitBudgetEnd(t, env, spec)
	if out.rep == nil {
		t.Fatalf("the job paused as %s (status %+v): the claims were billed", out.status.State, out.status)
	}
	rep := *out.rep
	checkSolved(t, rep, disks)
	n := claimed.Load()
	if n != int64(len(rogueSteps)) || rep.OverclaimedResults != n || rep.RedFlags[schemas.RedFlagOverclaim] != n {
		t.Errorf("%d claims made, overclaimed_results %d, red_flags.overclaim %d: want each counted once as the red flag",
			n, rep.OverclaimedResults, rep.RedFlags[schemas.RedFlagOverclaim])
	}
	if want := int64(steps*k) + n; rep.Samples != want || rep.Votes != steps*k {
		t.Errorf("samples %d, votes %d: want %d honest votes and the %d overclaims as red flags", rep.Samples, rep.Votes, steps*k, n)
	}
	drawn := rep.Samples + rep.WastedSamples
	if limit := float64(drawn) * bound; rep.CostUSD > limit || rep.CostUSD > spec.BudgetUSD {
		t.Errorf("the job cost $%v: over the bound of its %d samples ($%v) or its budget ($%v)", rep.CostUSD, drawn, limit, spec.BudgetUSD)
	}
	b := budgetsOf(t, env)
	var job, d store.Account
	fleettest.Eventually(t, 10*time.Second, func() bool {
		var err error
		if job, err = b.Job(ctx, store.JobRef{Tenant: tenant, JobID: spec.JobID}); err != nil || job.Reserved != 0 {
			return false
		}
		d, err = b.TenantDay(ctx, tenant, day)
		return err == nil && d.Reserved == 0
	}, "reservations left: job %+v, day %+v", job, d)
	if job.Spent > pricing.USD(spec.BudgetUSD) || d.Spent > pricing.USD(dayLimit) || job.Spent.USD() < rep.CostUSD-1e-9 {
		t.Errorf("the job spent %v (budget %v, report $%v), the tenant's day %v (limit %v)",
			job.Spent, pricing.USD(spec.BudgetUSD), rep.CostUSD, d.Spent, pricing.USD(dayLimit))
	}
	if store.Day(time.Now()) == day && d.Spent != job.Spent {
		t.Errorf("the tenant's day spent %v, its one job %v", d.Spent, job.Spent)
	}
}
