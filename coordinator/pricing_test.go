package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// submitIntake queues spec as a tenant's client does (maker submit on a
// tenant identity): only on the job stream, for a coordinator's intake to
// take in.
func submitIntake(t *testing.T, env *fleettest.Env, spec *schemas.JobSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := jobs.Submit(ctx, env.JS, env.Bus, spec, env.Tasks, jobs.IntakeOnly()); err != nil {
		t.Fatal(err)
	}
}

// spentOf returns what Redis holds as spent by the job and by its tenant
// today, once nothing is reserved any more.
func spentOf(t *testing.T, env *fleettest.Env, spec schemas.JobSpec, day string) (job, tenant store.Account) {
	t.Helper()
	ctx := context.Background()
	b := budgetsOf(t, env)
	fleettest.Eventually(t, 10*time.Second, func() bool {
		var err error
		job, err = b.Job(ctx, store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID})
		if err != nil && !errors.Is(err, store.ErrNoJob) {
			return false
		}
		tenant, err = b.TenantDay(ctx, spec.Tenant, day)
		return err == nil && job.Reserved == 0 && tenant.Reserved == 0
	}, "reservations of %s still held: job %+v, tenant %+v", spec.JobID, job, tenant)
	return job, tenant
}

// TestPricingQuotaRefusesUnpriced: a tenant with a spend quota cannot run
// work the fleet does not price, whatever the job claims: issue 19's jobs
// (no pricing, and pricing 0, under a $0.001/day quota) are refused at the
// coordinators' intake, and a job registered past it (as maker serve
// registers) pauses as budget_exhausted before its first sample, saying
// which model is unpriced. With the fleet's price set, the same job is
// charged at it: its tenant's day spends it, and the $0.001 quota stops
// it long before it ends.
func TestPricingQuotaRefusesUnpriced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := fleettest.New(t)
	const tenant = "cheap"
	setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: 0.001})
	env.StartCoordinator(coordinator.Config{})
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 2})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 8})

	for _, claim := range []*schemas.Pricing{nil, {}} {
		spec := fleettest.HanoiSpec(6, 2, 5)
		spec.Tenant, spec.JobID, spec.Pricing = tenant, fmt.Sprintf("claim-%v", claim != nil), claim
		submitIntake(t, env, &spec)
		rep := env.Wait(spec)
		if rep.State != schemas.StateFailed || !strings.Contains(rep.Reason, `refused:`) ||
			!strings.Contains(rep.Reason, `prices no model "default"`) || !strings.Contains(rep.Reason, "spend quota of $0.001 a day") {
			t.Errorf("job %s: %s %q; want refused, naming the unpriced model and the quota", spec.JobID, rep.State, rep.Reason)
		}
		if rep.Samples != 0 || rep.PromptTokens != 0 {
			t.Errorf("job %s ran %d samples", spec.JobID, rep.Samples)
		}
	}
	if n := sim.Stats().Requests; n != 0 {
		t.Errorf("the model was called %d times for refused jobs", n)
	}

	// Registered past the intake (the registry written directly, as maker
	// serve does): the run pauses it before anything is published.
	direct := fleettest.HanoiSpec(6, 2, 5)
	direct.Tenant, direct.JobID, direct.Pricing = tenant, "direct", &schemas.Pricing{}
	env.Submit(&direct)
	out := awaitBudgetEnd(t, env, direct)
	if out.rep != nil || !strings.Contains(out.status.Reason, `prices no model "default"`) {
		t.Fatalf("a registered unpriced job: report %v, status %+v; want budget_exhausted naming the model", out.rep, out.status)
	}
	if n := sim.Stats().Requests; n != 0 || out.status.Samples != 0 {
		t.Errorf("the model was called %d times, %d samples counted", n, out.status.Samples)
	}

	// Priced by the fleet: the same job is charged at the fleet's price
	// (not its claim of 0), and the quota stops it. (At a tenth of a
	// dollar per million tokens a few samples fit in $0.001.)
	env.SetPrice("", schemas.Pricing{InputUSDPerMTok: 0.1, OutputUSDPerMTok: 0.1})
	day := store.Day(time.Now())
	priced := fleettest.HanoiSpec(6, 2, 5)
	priced.Tenant, priced.JobID, priced.Pricing = tenant, "priced", &schemas.Pricing{}
	submitIntake(t, env, &priced)
	out = awaitBudgetEnd(t, env, priced)
	if out.rep != nil {
		t.Fatalf("a 63-step job ended %s under a $0.001/day quota", out.rep.State)
	}
	if !strings.Contains(out.status.Reason, "spend for the day") || out.status.SpentUSD <= 0 {
		t.Errorf("status %+v: want paused by the tenant's day, having spent something", out.status)
	}
	job, day1 := spentOf(t, env, priced, day)
	if store.Day(time.Now()) == day && (day1.Spent <= 0 || day1.Spent > pricing.USD(0.001) || job.Spent != day1.Spent) {
		t.Errorf("the tenant's day spent %v (job %v), want more than 0 and at most $0.001", day1.Spent, job.Spent)
	}
	// Resumed once the operator removes the price: it pauses again, for
	// the unpriced model, before it publishes.
	env.UnsetPrice("")
	setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: 100})
	before := sim.Stats().Requests
	if _, err := jobs.Control(ctx, env.Topo, tenant, priced.JobID, schemas.ControlRun); err != nil {
		t.Fatal(err)
	}
	out = awaitBudgetEnd(t, env, priced)
	if out.rep != nil || !strings.Contains(out.status.Reason, `prices no model "default"`) {
		t.Fatalf("resumed without a price: report %v, status %+v", out.rep, out.status)
	}
	if n := sim.Stats().Requests; n != before {
		t.Errorf("the model was called %d times without a price", n-before)
	}
}

// TestPricingPriceRemovedMidJob: a job under a spend quota whose price is
// removed while it runs pauses as budget_exhausted, saying which model,
// rather than run unpriced; priced again and resumed, it solves, and every
// answer it counted is paid for.
func TestPricingPriceRemovedMidJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 1, Seed: 6, Latency: 20 * time.Millisecond}, llm.Config{}, voter.Config{Concurrency: 8})
	const tenant = "metered"
	setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: 100})
	priceFleet(env)
	day := store.Day(time.Now())
	spec := fleettest.HanoiSpec(6, 2, 4)
	spec.Tenant = tenant
	env.Submit(&spec)
	awaitUnderWay(t, env, spec)
	env.UnsetPrice("")
	out := awaitBudgetEnd(t, env, spec)
	if out.rep != nil || !strings.Contains(out.status.Reason, `prices no model "default"`) {
		t.Fatalf("price removed mid-job: report %v, status %+v; want budget_exhausted naming the model", out.rep, out.status)
	}
	priceFleet(env)
	if _, err := jobs.Control(ctx, env.Topo, tenant, spec.JobID, schemas.ControlRun); err != nil {
		t.Fatal(err)
	}
	rep := env.Wait(spec)
	checkSolved(t, rep, 6)
	job, tday := spentOf(t, env, spec, day)
	if rep.UnverifiedCostUSD != 0 || math.Abs(job.Spent.USD()-rep.CostUSD) > 1e-9 || store.Day(time.Now()) == day && tday.Spent != job.Spent {
		t.Errorf("report cost %v (unverified %v), job spent %v, tenant's day %v", rep.CostUSD, rep.UnverifiedCostUSD, job.Spent, tday.Spent)
	}
}

// TestPricingFleetPriceNotClaim: with the fleet's price set, a job that
// claims a price of 0 is billed at the fleet's (report, job and tenant's
// day alike); on a fleet without a price table the job's own pricing is
// only reported, as unverified, and counted against nothing.
func TestPricingFleetPriceNotClaim(t *testing.T) {
	t.Parallel()
	env, _, _ := simFleet(t, simllm.Config{Accuracy: 1, Seed: 9}, llm.Config{}, voter.Config{Concurrency: 8})
	day := store.Day(time.Now())

	claimed := fleettest.HanoiSpec(4, 2, 3)
	claimed.Tenant, claimed.JobID, claimed.Pricing = "unpriced", "claimed", &schemas.Pricing{InputUSDPerMTok: 2, OutputUSDPerMTok: 8}
	rep := env.Run(&claimed)
	checkSolved(t, rep, 4)
	want := claimed.Pricing.Cost(rep.PromptTokens, rep.CompletionTokens)
	if rep.CostUSD != 0 || math.Abs(rep.UnverifiedCostUSD-want) > 1e-9*float64(rep.Samples+1) {
		t.Errorf("no price table: cost %v, unverified %v; want 0 and the claim's %v", rep.CostUSD, rep.UnverifiedCostUSD, want)
	}
	if job, tday := spentOf(t, env, claimed, day); job.Spent != 0 || tday.Spent != 0 {
		t.Errorf("the job's own pricing was spent: job %v, tenant's day %v", job.Spent, tday.Spent)
	}

	fleet := schemas.Pricing{InputUSDPerMTok: 3, OutputUSDPerMTok: 15}
	env.SetPrice("", fleet)
	zero := fleettest.HanoiSpec(4, 2, 3)
	zero.Tenant, zero.JobID, zero.Pricing = "priced", "zero", &schemas.Pricing{}
	rep = env.Run(&zero)
	checkSolved(t, rep, 4)
	want = fleet.Cost(rep.PromptTokens, rep.CompletionTokens)
	// Each answer is priced as it is counted, rounded up to a nano-dollar.
	if rep.CostUSD < want-1e-12 || rep.CostUSD > want+1e-9*float64(rep.Samples+rep.WastedSamples+1) || rep.UnverifiedCostUSD != 0 {
		t.Errorf("claiming 0: cost %v (unverified %v), want the fleet's %v", rep.CostUSD, rep.UnverifiedCostUSD, want)
	}
	// The last answers' settlements may land just after the report: wait
	// for the job's account to reach the report's cost.
	var job, tday store.Account
	fleettest.Eventually(t, 10*time.Second, func() bool {
		job, tday = spentOf(t, env, zero, day)
		return math.Abs(job.Spent.USD()-rep.CostUSD) <= 1e-9
	}, "job %s spent %v, its report's cost %v", zero.JobID, job.Spent, rep.CostUSD)
	if math.Abs(job.Spent.USD()-rep.CostUSD) > 1e-9 || store.Day(time.Now()) == day && tday.Spent != job.Spent {
		t.Errorf("report cost %v, job spent %v, tenant's day %v: want all three the same", rep.CostUSD, job.Spent, tday.Spent)
	}
}

// arbitrationFleet is a fleet whose jobs' step hard splits the votes of
// the voters' own model, so each job asks the judge's panel, and a judge
// with settings s.
func arbitrationFleet(t *testing.T, s judge.Settings, cfg coordinator.Config) (*fleettest.Env, *fleettest.FakeModel) {
	t.Helper()
	const disks, jobSeed, hard = 3, 47, 3
	env := fleettest.New(t)
	startJudge(t, env, s)
	env.StartCoordinator(cfg)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), splitAt(hard))
	env.StartVoter(model, voter.Config{Concurrency: 8})
	return env, model
}

// arbitrationJob is job id of tenant, which needs the panel at step 3.
func arbitrationJob(tenant, id string) schemas.JobSpec {
	spec := fleettest.HanoiSpec(3, 2, 47)
	spec.Tenant, spec.JobID, spec.MaxSamplesPerStep = tenant, id, 5
	spec.Escalation = &schemas.EscalationPolicy{Panel: true}
	return spec
}

// TestPricingArbitrationsInTheTenantWindow: the panel's arbitrations
// count against the tenant's break-glass window across its jobs: of five
// jobs that each need one, only the window's two get one (the rest pause
// for a person, and a person's answer finishes them); what the panel cost
// is in each job's cost and in the tenant's spend for the day.
func TestPricingArbitrationsInTheTenantWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		perDay  float64 // the tenant's spend quota: arbitrations reserved first
		reserve float64
	}{{"no quota", 0, 0}, {"spend quota", 50, 0.05}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// Two members side with the minority candidate (the right
			// one): the panel's majority decides.
			s := panelOf([]string{"m1@dissent", "m2@dissent", "m3"})
			s.TenantInvocations = 2
			const tenant = "panel"
			env := fleettest.New(t)
			if tc.perDay > 0 {
				setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: tc.perDay})
			}
			priceFleet(env)
			startJudge(t, env, s)
			env.StartCoordinator(coordinator.Config{ArbitrationReserveUSD: tc.reserve})
			model := fleettest.NewFakeModel(fleettest.SeedTable(47, 7, 64), splitAt(3))
			env.StartVoter(model, voter.Config{Concurrency: 8})
			day := store.Day(time.Now())
			var specs []schemas.JobSpec
			for i := range 5 {
				spec := arbitrationJob(tenant, fmt.Sprintf("arb-%d", i))
				env.Submit(&spec)
				specs = append(specs, spec)
			}
			// Each job either gets the panel's decision and solves, or
			// pauses for a person at the step: a person then decides it.
			var reps []schemas.JobReport
			for _, spec := range specs {
				var rep *schemas.JobReport
				fleettest.Eventually(t, fleettest.JobTimeout, func() bool {
					if r, err := jobs.Result(ctx, env.Topo, tenant, spec.JobID); err == nil {
						rep = &r
						return true
					}
					st, err := jobs.Status(ctx, env.Topo, tenant, spec.JobID)
					return err == nil && st.State == schemas.StatePaused && st.Steps == 3
				}, "job %s neither ended nor paused for a person", spec.JobID)
				if rep == nil {
					(&person{t: t, ctx: ctx, env: env, spec: spec, disks: 3}).decide(3)
					r := env.Wait(spec)
					rep = &r
				}
				if !rep.Solved || rep.TraceSHA256 != fleettest.GoldenTrace(3) {
					t.Errorf("job %s: %s, trace %s", spec.JobID, rep.State, rep.TraceSHA256)
				}
				reps = append(reps, *rep)
			}
			var panel int
			var jobsCost, arbiter float64
			for i, rep := range reps {
				if rep.ArbiterCostUSD > 0 {
					panel++
					arbiter += rep.ArbiterCostUSD
				}
				jobsCost += rep.CostUSD
				job, _ := spentOf(t, env, specs[i], day)
				if math.Abs(job.Spent.USD()-rep.CostUSD) > 1e-9 {
					t.Errorf("job %s: spent %v, report cost %v (arbiter %v)", rep.JobID, job.Spent, rep.CostUSD, rep.ArbiterCostUSD)
				}
			}
			if panel != 2 {
				t.Errorf("%d jobs got the panel, want the window's 2", panel)
			}
			_, tday := spentOf(t, env, specs[0], day)
			if store.Day(time.Now()) == day && (math.Abs(tday.Spent.USD()-jobsCost) > 1e-9*5 || arbiter <= 0) {
				t.Errorf("the tenant's day spent %v; its jobs cost %v, of it the panel %v", tday.Spent, jobsCost, arbiter)
			}
			if tc.reserve > 0 && arbiter > 2*tc.reserve {
				t.Errorf("the panel cost %v, over the %v the coordinator held for each", arbiter, tc.reserve)
			}
		})
	}
}

// TestPricingArbitrationOverTheDay: a step whose arbitration the tenant's
// spend for the day cannot hold gets none: the job pauses for a person
// before the judge is asked, and is never billed beyond the quota.
func TestPricingArbitrationOverTheDay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const tenant = "tight"
	env := fleettest.New(t)
	setQuota(t, env, schemas.TenantQuota{Tenant: tenant, SpendPerDayUSD: 0.5})
	priceFleet(env)
	jenv := judgetest.TestSettings()
	startJudge(t, env, jenv)
	env.StartCoordinator(coordinator.Config{}) // holds $1 for an arbitration
	model := fleettest.NewFakeModel(fleettest.SeedTable(47, 7, 64), splitAt(3))
	env.StartVoter(model, voter.Config{Concurrency: 8})
	day := store.Day(time.Now())
	spec := arbitrationJob(tenant, "over")
	env.Submit(&spec)
	p := &person{t: t, ctx: ctx, env: env, spec: spec, disks: 3}
	p.waitPaused()
	if st, _ := jobs.Status(ctx, env.Topo, tenant, spec.JobID); st.Steps != 3 {
		t.Fatalf("paused at step %d, want 3", st.Steps)
	}
	if recs, err := judge.ListAudit(ctx, env.JS, env.Bus.Namespace, tenant, ""); err != nil || len(recs) != 0 {
		t.Errorf("the judge was asked: %d audit records, %v", len(recs), err)
	}
	p.decide(3)
	rep := env.Wait(spec)
	if !rep.Solved || rep.ArbiterCostUSD != 0 {
		t.Errorf("%s, arbiter cost %v", rep.State, rep.ArbiterCostUSD)
	}
	if _, tday := spentOf(t, env, spec, day); tday.Spent > pricing.USD(0.5) {
		t.Errorf("the tenant's day spent %v, over its $0.5", tday.Spent)
	}
}

// TestPricingPanelBilledOnce: an arbitration that decides nothing (the
// judge unsure) still cost the panel's calls: they are billed when the
// answer comes, once, even when a resume asks the judge again and gets the
// same stored answer; a person's answer then finishes the job.
func TestPricingPanelBilledOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := judgetest.TestSettings()
	s.JudgeModel = "judge@lowconf"
	env, _ := arbitrationFleet(t, s, coordinator.Config{})
	spec := arbitrationJob(schemas.DefaultTenant, "unsure")
	env.Submit(&spec)
	p := &person{t: t, ctx: ctx, env: env, spec: spec, disks: 3}
	p.waitPaused()
	b := budgetsOf(t, env)
	ref := store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID}
	var first store.Account
	fleettest.Eventually(t, 10*time.Second, func() bool {
		var err error
		first, err = b.Job(ctx, ref)
		return err == nil && first.Spent > 0
	}, "the unsure arbitration's cost was not spent: %+v", first)

	p.control(schemas.ControlRun) // asks the panel again: the same stored answer
	fleettest.Eventually(t, 20*time.Second, func() bool {
		rec, _, err := jobs.Get(ctx, env.Topo, spec.Tenant, spec.JobID)
		return err == nil && rec.Control == schemas.ControlPause && rec.State == schemas.StatePaused && rec.UpdatedAt.After(time.Now().Add(-10*time.Second))
	}, "the resumed job did not pause again")
	again, err := b.Job(ctx, ref)
	if err != nil || again.Spent != first.Spent {
		t.Errorf("after asking again: spent %v, first %v (%v): billed twice", again.Spent, first.Spent, err)
	}
	p.decide(3)
	rep := env.Wait(spec)
	if !rep.Solved || rep.ArbiterCostUSD <= 0 || pricing.USDUp(rep.ArbiterCostUSD) != first.Spent {
		t.Errorf("%s, arbiter cost %v; the unsure arbitration's %v", rep.State, rep.ArbiterCostUSD, first.Spent)
	}
}
