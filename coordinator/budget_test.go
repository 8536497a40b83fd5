package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// budgetPricing prices a token at a dollar per million, in and out: the
// fleet's default price in these tests (priceFleet).
var budgetPricing = &schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 1}

// priceFleet sets budgetPricing as the fleet's default price: what the
// voters' own model's samples cost.
func priceFleet(env *fleettest.Env) { env.SetPrice("", *budgetPricing) }

// sampleBound is the budgets' upper bound of one sample of a hanoi job
// with disks disks, at budgetPricing, in dollars.
func sampleBound(t *testing.T, env *fleettest.Env, disks int) float64 {
	t.Helper()
	inst, err := env.Tasks.Bind("hanoi", json.RawMessage(fmt.Sprintf(`{"disks":%d}`, disks)))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := inst.Prompt(inst.Initial())
	if err != nil {
		t.Fatal(err)
	}
	return pricing.SampleBound(budgetPricing, msgs, schemas.DefaultMaxOutputTokens).USD()
}

// outcome is where a job stopped: its report (solved or another end), or
// its status when it paused as budget_exhausted.
type budgetOutcome struct {
	rep    *schemas.JobReport
	status schemas.JobStatus
}

// awaitBudgetEnd waits until spec has a report, or is paused as
// budget_exhausted (registry and status), polling with a deadline.
func awaitBudgetEnd(t *testing.T, env *fleettest.Env, spec schemas.JobSpec) budgetOutcome {
	t.Helper()
	var out budgetOutcome
	fleettest.Eventually(t, fleettest.JobTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if rep, err := jobs.Result(ctx, env.Topo, spec.Tenant, spec.JobID); err == nil {
			out.rep = &rep
			return true
		}
		rec, _, err := jobs.Get(ctx, env.Topo, spec.Tenant, spec.JobID)
		if err != nil || rec.State != schemas.StateBudgetExhausted {
			return false
		}
		out.status, err = jobs.Status(ctx, env.Topo, spec.Tenant, spec.JobID)
		return err == nil && out.status.State == schemas.StateBudgetExhausted && rec.Control == schemas.ControlPause
	}, "job %s neither ended nor paused as budget_exhausted", spec.JobID)
	return out
}

// awaitUnderWay waits until spec has decided two steps.
func awaitUnderWay(t *testing.T, env *fleettest.Env, spec schemas.JobSpec) {
	t.Helper()
	fleettest.Eventually(t, fleettest.JobTimeout, func() bool {
		st, err := jobs.Status(context.Background(), env.Topo, spec.Tenant, spec.JobID)
		return err == nil && st.Steps >= 2
	}, "the job is under way")
}

func budgetsOf(t *testing.T, env *fleettest.Env) *store.Budgets {
	t.Helper()
	b, err := store.NewBudgets(env.Store().Client(), store.BudgetConfig{KeyPrefix: bus.DefaultNamespace.String()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBudgetsHoldUnderConcurrency: many jobs of one tenant, each with its
// own budget, under a spend-per-day limit, run at once on two
// coordinators. Every job ends solved or pauses as budget_exhausted (with
// what finishing would cost); what each job spent, and what its report
// says it cost, stays within its budget; what the tenant spent stays
// within its day's limit; and nothing stays reserved. Also with the
// tenant's rate and in-flight limits on (requests deferred by the limiter
// before their budget is reserved).
func TestBudgetsHoldUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, limits := range []schemas.TenantQuota{
		{},
		{SamplesPerSecond: 500, Burst: 20, MaxInflightSamples: 12},
	} {
		t.Run(fmt.Sprintf("rate=%v,inflight=%d", limits.SamplesPerSecond, limits.MaxInflightSamples), func(t *testing.T) {
			t.Parallel()
			budgetsUnderConcurrency(t, limits)
		})
	}
}

func budgetsUnderConcurrency(t *testing.T, limits schemas.TenantQuota) {
	ctx := context.Background()
	env := fleettest.New(t)
	const tenant = "acme"
	bound3, bound4 := sampleBound(t, env, 3), sampleBound(t, env, 4)
	// Samples of the simulated model cost a fraction of their bound; the
	// budgets below are such that the small jobs solve, the tight ones
	// run out of their own budget, and the large ones share what is left
	// of the tenant's day.
	dayLimit := 40 * bound4
	limits.Tenant, limits.SpendPerDayUSD = tenant, dayLimit
	if _, err := quota.New(env.Topo).Set(ctx, limits); err != nil {
		t.Fatal(err)
	}
	priceFleet(env)
	env.StartCoordinator(coordinator.Config{ID: "coordinator-1"})
	env.StartCoordinator(coordinator.Config{ID: "coordinator-2"})
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.95, Seed: 3})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 32})

	type job struct {
		spec  schemas.JobSpec
		disks int
	}
	var all []job
	for i := range 12 {
		disks, budget := 4, 100*bound4 // large: held by the tenant's day
		switch i % 3 {
		case 0:
			disks, budget = 3, 100*bound3 // small: solves
		case 1:
			budget = 3 * bound4 // tight: its own budget runs out
		}
		spec := fleettest.HanoiSpec(disks, 2, int64(50+i))
		spec.Tenant, spec.JobID = tenant, fmt.Sprintf("budget-%02d", i)
		spec.BudgetUSD = budget
		all = append(all, job{spec, disks})
	}
	day := store.Day(time.Now())
	for i := range all {
		env.Submit(&all[i].spec)
	}
	outs := make([]budgetOutcome, len(all))
	var wg sync.WaitGroup
	for i := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = awaitBudgetEnd(t, env, all[i].spec)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	b := budgetsOf(t, env)
	var solved, exhausted int
	var jobsSpent pricing.Nano
	for i, j := range all {
		ref := store.JobRef{Tenant: tenant, JobID: j.spec.JobID}
		var a store.Account
		fleettest.Eventually(t, 10*time.Second, func() bool {
			var err error
			a, err = b.Job(ctx, ref)
			return err == nil && a.Reserved == 0
		}, "job %s still holds reservations: %+v", j.spec.JobID, a)
		if a.Spent > pricing.USD(j.spec.BudgetUSD) {
			t.Errorf("job %s spent %v, over its budget %v", j.spec.JobID, a.Spent, pricing.USD(j.spec.BudgetUSD))
		}
		jobsSpent += a.Spent
		switch o := outs[i]; {
		case o.rep != nil:
			checkSolved(t, *o.rep, j.disks)
			solved++
			if o.rep.CostUSD > j.spec.BudgetUSD || o.rep.CostUSD > a.Spent.USD()+1e-12 {
				t.Errorf("job %s: report cost %v, budget %v, spent %v: the cost must be within both", j.spec.JobID, o.rep.CostUSD, j.spec.BudgetUSD, a.Spent.USD())
			}
		default:
			exhausted++
			if o.status.FinishCostUSD <= 0 || o.status.SpentUSD <= 0 || o.status.Coordinator != "" {
				t.Errorf("job %s budget_exhausted with status %+v: want what it spent and what finishing costs, and no owner", j.spec.JobID, o.status)
			}
			if i%3 == 0 {
				t.Errorf("small job %s ran out of budget (spent %v): the test's budgets are off", j.spec.JobID, a.Spent)
			}
		}
	}
	var d store.Account
	fleettest.Eventually(t, 10*time.Second, func() bool {
		var err error
		d, err = b.TenantDay(ctx, tenant, day)
		return err == nil && d.Reserved == 0
	}, "the tenant's day still holds reservations: %+v", d)
	t.Logf("%d solved, %d budget_exhausted; the tenant spent %v of %v (jobs: %v); bounds: a sample of 3 disks %v, of 4 disks %v",
		solved, exhausted, d.Spent, pricing.USD(dayLimit), jobsSpent, bound3, bound4)
	if d.Spent > pricing.USD(dayLimit) {
		t.Errorf("the tenant spent %v, over its day's limit %v", d.Spent, pricing.USD(dayLimit))
	}
	if store.Day(time.Now()) == day && jobsSpent != d.Spent {
		t.Errorf("the jobs spent %v in all, the tenant's day says %v", jobsSpent, d.Spent)
	}
	if solved == 0 || exhausted == 0 {
		t.Errorf("%d solved, %d budget_exhausted: want both outcomes", solved, exhausted)
	}
}

// TestBudgetExhaustedResume: a job whose budget cannot pay for its next
// wave pauses as budget_exhausted, checkpointed, with what finishing would
// cost; raising its budget (maker budget set) and resuming it lets it
// solve, within the new budget.
func TestBudgetExhaustedResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const disks = 4
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 0.95, Seed: 8}, llm.Config{}, voter.Config{Concurrency: 8})
	priceFleet(env)
	bound := sampleBound(t, env, disks)
	spec := fleettest.HanoiSpec(disks, 2, 77)
	spec.BudgetUSD = 4 * bound
	env.Submit(&spec)
	out := awaitBudgetEnd(t, env, spec)
	if out.rep != nil {
		t.Fatalf("the job ended %s on a budget of 4 samples' bound", out.rep.State)
	}
	if out.status.Steps >= 1<<disks-1 || out.status.FinishCostUSD <= 0 {
		t.Fatalf("status %+v: want a part of the steps and a finish cost", out.status)
	}
	b := budgetsOf(t, env)
	ref := store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID}
	a, err := b.Job(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if a.Spent > pricing.USD(spec.BudgetUSD) || a.Spent.USD() != out.status.SpentUSD {
		t.Fatalf("spent %v (status says %v), budget %v", a.Spent, out.status.SpentUSD, spec.BudgetUSD)
	}

	// Resuming without more budget pauses it again at once.
	if _, err := jobs.Control(ctx, env.Topo, spec.Tenant, spec.JobID, schemas.ControlRun); err != nil {
		t.Fatal(err)
	}
	if again := awaitBudgetEnd(t, env, spec); again.rep != nil {
		t.Fatalf("resumed without more budget, the job ended %s", again.rep.State)
	}

	raised := 200 * bound
	if err := b.SetJobLimit(ctx, ref, pricing.USD(raised)); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Control(ctx, env.Topo, spec.Tenant, spec.JobID, schemas.ControlRun); err != nil {
		t.Fatal(err)
	}
	rep := env.Wait(spec)
	checkSolved(t, rep, disks)
	if a, err = b.Job(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if rep.CostUSD > raised || rep.CostUSD > a.Spent.USD()+1e-12 || a.Spent > pricing.USD(raised) {
		t.Errorf("report cost %v, spent %v, raised budget %v", rep.CostUSD, a.Spent, raised)
	}
	if _, err := b.Job(ctx, store.JobRef{Tenant: spec.Tenant, JobID: "none"}); !errors.Is(err, store.ErrNoJob) {
		t.Errorf("an unknown job's budget: %v", err)
	}
}

// TestBudgetDeadOwnerReservationReleased: a coordinator killed right after
// reserving a wave leaves the reservation in Redis. The job's next run
// releases it at its start, even when that run publishes nothing (the job
// was cancelled while no coordinator ran it), so another job of the
// tenant, held by the day's limit, is not kept waiting on it.
func TestBudgetDeadOwnerReservationReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := fleettest.New(t)
	const tenant = "leak"
	bound3 := sampleBound(t, env, 3)
	dayLimit := 30 * bound3
	setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: dayLimit})
	priceFleet(env)
	dead := fleettest.HanoiSpec(3, 2, 1)
	dead.Tenant, dead.JobID, dead.BudgetUSD = tenant, "dead", 100*bound3
	env.Submit(&dead)
	// What a coordinator SIGKILLed right after reserving a wave leaves
	// (lease token 1): 29 sample bounds on the tenant's day.
	b := budgetsOf(t, env)
	day := store.Day(time.Now())
	deadRef := store.JobRef{Tenant: tenant, JobID: "dead"}
	if _, err := b.Reserve(ctx, store.Reservation{
		Job: deadRef, Token: 1, ID: "1.1", Day: day,
		Amount: pricing.USD(dayLimit) - pricing.USD(bound3), JobLimit: pricing.USD(dead.BudgetUSD), DayLimit: pricing.USD(dayLimit),
	}); err != nil {
		t.Fatal(err)
	}
	// The tenant cancels it while no coordinator runs it.
	if _, err := jobs.Control(ctx, env.Topo, tenant, "dead", schemas.ControlCancel); err != nil {
		t.Fatal(err)
	}
	env.StartCoordinator(coordinator.Config{ID: "coordinator-1"})
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 3})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 8})
	if rep := env.Wait(dead); rep.State != schemas.StateCancelled {
		t.Fatalf("the dead owner's job ended %s, want cancelled", rep.State)
	}
	a, _ := b.Job(ctx, deadRef)
	d, _ := b.TenantDay(ctx, tenant, day)
	if a.Reserved != 0 || d.Reserved != 0 {
		t.Errorf("the ended job still holds %v, the tenant's day %v reserved", a.Reserved, d.Reserved)
	}

	next := fleettest.HanoiSpec(3, 2, 2)
	next.Tenant, next.JobID, next.BudgetUSD = tenant, "next", 100*bound3
	env.Submit(&next)
	out := awaitBudgetEnd(t, env, next)
	if out.rep == nil {
		t.Fatalf("the next job paused %+v, want solved", out.status)
	}
	checkSolved(t, *out.rep, 3)
}

// TestBudgetTenantBusyWaitBounded: a job whose wave only fits the tenant's
// day once reservations in flight settle, and which holds none itself,
// waits for them twice its sample timeout at most: reservations that never
// settle (another job's owner died with them and that job is paused) make
// it pause as budget_exhausted rather than wait silently. Once they are
// gone, resuming it solves it.
func TestBudgetTenantBusyWaitBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 1, Seed: 5}, llm.Config{}, voter.Config{Concurrency: 8})
	const tenant = "stuck"
	bound3 := sampleBound(t, env, 3)
	dayLimit := 30 * bound3
	setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: dayLimit})
	priceFleet(env)
	b := budgetsOf(t, env)
	ghost := store.JobRef{Tenant: tenant, JobID: "ghost"}
	if _, err := b.Reserve(ctx, store.Reservation{
		Job: ghost, Token: 1, ID: "1.1", Day: store.Day(time.Now()),
		Amount: pricing.USD(dayLimit) - pricing.USD(bound3), DayLimit: pricing.USD(dayLimit),
	}); err != nil {
		t.Fatal(err)
	}
	spec := fleettest.HanoiSpec(3, 2, 3)
	spec.Tenant, spec.SampleTimeoutMS = tenant, 300
	env.Submit(&spec)
	out := awaitBudgetEnd(t, env, spec)
	if out.rep != nil {
		t.Fatalf("the job ended %s while the tenant's day was held by another job's reservations", out.rep.State)
	}
	if out.status.State != schemas.StateBudgetExhausted {
		t.Fatalf("status %+v, want budget_exhausted", out.status)
	}

	// The stuck reservations go (their job's next run releases them);
	// resumed, the job solves.
	if _, err := b.Claim(ctx, ghost, 2, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Control(ctx, env.Topo, spec.Tenant, spec.JobID, schemas.ControlRun); err != nil {
		t.Fatal(err)
	}
	checkSolved(t, env.Wait(spec), 3)
}

// evalCalls counts the scripts the fleet's Redis ran so far.
func evalCalls(t *testing.T, env *fleettest.Env) int {
	t.Helper()
	s, err := env.Store().Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`).FindAllStringSubmatch(s, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// TestBudgetUnlimitedNoScripts: a job the fleet prices but with no budget,
// whose tenant has no spend per day, reserves nothing: its budget costs a
// few Redis scripts per run (a claim at the start, a spend about once a
// second and at the end), not some per step; what it spent is still in
// Redis, on the job and on the tenant's day.
func TestBudgetUnlimitedNoScripts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 0.998, Seed: 1}, llm.Config{}, voter.Config{Concurrency: 16})
	spec := fleettest.HanoiSpec(5, 2, 1)
	env.Run(&spec) // warm-up: scripts loaded
	a := evalCalls(t, env)
	spec = fleettest.HanoiSpec(5, 2, 1)
	rep := env.Run(&spec)
	b := evalCalls(t, env)
	priceFleet(env)
	spec = fleettest.HanoiSpec(5, 2, 1)
	spec.JobID = "priced"
	day := store.Day(time.Now())
	priced := env.Run(&spec)
	c := evalCalls(t, env)
	extra, allowed := (c-b)-(b-a), 3+int(priced.WallSeconds)+1 // a spend a second
	t.Logf("steps %d: scripts without a price %d, with the fleet's price and no budget %d", rep.Steps, b-a, c-b)
	if extra > allowed {
		t.Errorf("a job without any budget ran %d more Redis scripts (%.1f a step) for its pricing, want at most %d",
			extra, float64(extra)/float64(rep.Steps), allowed)
	}
	acct, err := budgetsOf(t, env).Job(ctx, store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID})
	if err != nil {
		t.Fatal(err)
	}
	dayAcct, err := budgetsOf(t, env).TenantDay(ctx, spec.Tenant, day)
	if err != nil {
		t.Fatal(err)
	}
	if priced.CostUSD <= 0 || math.Abs(acct.Spent.USD()-priced.CostUSD) > 1e-6 || acct.Reserved != 0 ||
		store.Day(time.Now()) == day && dayAcct.Spent != acct.Spent {
		t.Errorf("report cost %v; job in Redis %+v, tenant's day %+v: want the cost spent on both, nothing reserved",
			priced.CostUSD, acct, dayAcct)
	}
}

// TestBudgetLimitSetLive: a job the fleet prices, without a budget,
// starts reserving when its tenant gets a spend per day while it runs: set
// below what it already spent, it pauses as budget_exhausted.
func TestBudgetLimitSetLive(t *testing.T) {
	t.Parallel()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 1, Seed: 6, Latency: 20 * time.Millisecond}, llm.Config{}, voter.Config{Concurrency: 8})
	const tenant = "later"
	priceFleet(env)
	spec := fleettest.HanoiSpec(6, 2, 4)
	spec.Tenant = tenant
	env.Submit(&spec)
	awaitUnderWay(t, env, spec)
	setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: sampleBound(t, env, 6) / 2})
	out := awaitBudgetEnd(t, env, spec)
	if out.rep != nil {
		t.Fatalf("the job ended %s: the spend per day set while it ran was not applied", out.rep.State)
	}
}
