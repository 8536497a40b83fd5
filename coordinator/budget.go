package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Budgets, reserve then dispatch (internal/quota: budget.go). Before a
// wave of sample requests is published, the job reserves an upper bound
// of what they can cost on its budget and on its tenant's spend for the
// day, in Redis, both or neither: every prompt token at most one per byte
// plus the chat format's overhead, every reply max_output_tokens, priced
// at the fleet's price of the model each request names (internal/core/step/pricing.go; never
// the job's own pricing). When results are handled, the reservations of
// the samples answered are released and the job's cost so far (its
// figures: every answer priced as it was counted, and the judge's
// arbitrations) is spent. So what a job spends, and what its report says
// it cost, never exceeds a budget: every token it counts was reserved
// first, whichever coordinators run the tenant's jobs. An arbitration
// reserves Config.ArbitrationReserveUSD before the judge is asked, and the
// judge caps the call at it (arbitrate.go).
//
// A job under a limit runs only work the fleet's price table prices: a
// request naming a model the table does not price (or the voters' own,
// without a default record) is never published; the job pauses as
// budget_exhausted, saying which model (a price removed mid-job does the
// same). Nothing under a limit runs unpriced.
//
// Every run claims its budget first (openBudget), before anything else:
// what an earlier owner left reserved (a coordinator killed with requests
// out) is released, whether or not this run publishes anything, and older
// owners are fenced out. A job with no budget of its own whose tenant has
// no spend per day reserves nothing: its cost is spent about once a second
// and at the end (the day's and the job's spent figures stay current), and
// it starts reserving once a limit appears (its cost so far spent first).
//
// A reservation refused because reservations in flight stand in the way
// (they may settle for less) waits: the requests are not published yet
// (errBudgetBusy). A job waiting on its tenant's other jobs, holding
// nothing itself, waits at most twice its sample timeout, then pauses as
// budget_exhausted (a job never waits silently on reservations that may
// never settle). One refused for good pauses the job as
// budget_exhausted, checkpointed and with its lease released (like a
// pause), with what finishing is expected to cost in its status; maker
// budget set (or the API) raises its budget, maker resume goes on.
// Reservations of answers that never came are kept until the job pauses
// or ends (a late answer may still be paid for), then released; a new
// owner releases what an earlier one left and fences it out.

// errBudgetBusy: the reservation must wait for reservations in flight to
// settle; nothing was reserved, and the requests are not to be published
// yet.
var errBudgetBusy = errors.New("coordinator: budget busy")

// errBudgetExhausted: the job paused as budget_exhausted. It wraps
// errPaused: the job's owner releases the lease as for a pause.
var errBudgetExhausted = fmt.Errorf("%w: budget exhausted", errPaused)

// errNoArbitration: the job's budget or its tenant's day cannot hold what
// an arbitration may cost; a person decides the step instead.
var errNoArbitration = errors.New("coordinator: no room for an arbitration")

// jobBudget is a job's side of the budgets while this coordinator runs it.
type jobBudget struct {
	budgets Budgets
	// claimed is set once this owner claimed the job's budget (releasing
	// what earlier owners held); took once it reserved something since
	// (released again at a pause or the end).
	claimed, took bool
	token         int64 // the lease token this run holds
	seq           int64
	// live: the job reserves before publishing (a budget of its own or
	// its tenant's spend per day applies). Until then its cost is spent
	// every spendEvery, and its limit in Redis read every lookEvery
	// (maker budget set may give it one).
	live                bool
	jobLimit            pricing.Nano // the job's limit in Redis, as last read
	nextLook, nextSpend time.Time
	// busySince is when the job began waiting on its tenant's other
	// jobs' reservations, holding none itself (zero: it is not).
	busySince time.Time
	// holds are the reservations of published requests not answered yet,
	// by sample id.
	holds map[string]hold
	// the last figures Redis returned
	figs store.Figures
}

// id names the next reservation or settlement: unique per owner (its
// lease token) and call, so a retried script call is recognised.
func (b *jobBudget) id() string {
	b.seq++
	return strconv.FormatInt(b.token, 10) + "." + strconv.FormatInt(b.seq, 10)
}

// hold is one request's reservation.
type hold struct {
	day    string
	amount pricing.Nano
	due    time.Time // its answer is overdue from then (it may still come)
}

// jobBudget returns the job's budget state, creating it on first use.
func (r *jobRun) budget() (*jobBudget, error) {
	if r.bud != nil {
		return r.bud, nil
	}
	r.bud = &jobBudget{budgets: r.c.budgets, token: r.token, holds: map[string]hold{}}
	return r.bud, nil
}

// Unlimited jobs (no budget, no spend per day) spend their cost about
// once per spendEvery and read their limit in Redis once per lookEvery.
const (
	spendEvery = time.Second
	lookEvery  = time.Second
)

// openBudget claims the job's budget at the start of a run, before
// anything else: what earlier owners left reserved is released even when
// this run never publishes (the job ends, is cancelled, or waits for a
// person), so another job of the tenant never waits on it.
func (r *jobRun) openBudget(ctx context.Context) error {
	b, err := r.budget()
	if err != nil {
		return err
	}
	return r.claim(ctx, b)
}

// claim makes this owner the holder of the job's budget once: what
// earlier owners reserved is released (their answers can no longer
// count) and they are fenced out.
func (r *jobRun) claim(ctx context.Context, b *jobBudget) error {
	if b.claimed {
		return nil
	}
	a, err := b.budgets.Claim(ctx, r.ref, r.token, pricing.USD(r.spec.BudgetUSD))
	if errors.Is(err, store.ErrStale) {
		return fmt.Errorf("%w: %v", errLeaseLost, err)
	}
	if err != nil {
		return err
	}
	b.claimed, b.figs.Job, b.jobLimit = true, a, a.Limit
	now := time.Now()
	b.nextLook, b.nextSpend = now.Add(lookEvery), now.Add(spendEvery)
	return nil
}

// limited reports whether a limit applies to the job now: a budget of
// its own (in Redis: its spec's, or one set since, read again every
// lookEvery) or its tenant's spend per day.
func (r *jobRun) limited(ctx context.Context, b *jobBudget, dayLimit pricing.Nano, now time.Time) (bool, error) {
	if dayLimit > 0 || b.jobLimit > 0 {
		return true, nil
	}
	if now.Before(b.nextLook) {
		return false, nil
	}
	b.nextLook = now.Add(lookEvery)
	a, err := b.budgets.Job(ctx, r.ref)
	if err != nil && !errors.Is(err, store.ErrNoJob) {
		return false, err
	}
	b.jobLimit = a.Limit
	return b.jobLimit > 0, nil
}

// dayLimit is the tenant's spend per day now (0: none), from the quota
// store's watch-fed cache.
func (r *jobRun) dayLimit(ctx context.Context) (pricing.Nano, error) {
	q, err := r.c.tenantQuota(ctx, r.spec.Tenant)
	if err != nil {
		return 0, err
	}
	return pricing.USD(q.SpendPerDayUSD), nil
}

// reserve reserves the cost bound of reqs, about to be published, on the
// job's budget and its tenant's day: all or none. nil: publish them.
// errBudgetBusy: publish none yet, ask again later (results settling
// free room). An error wrapping errBudgetExhausted: the job has paused as
// budget_exhausted (checkpointed, status and registry written); the
// caller returns it. Any other error fails the job's run.
func (r *jobRun) reserve(ctx context.Context, reqs []*schemas.SampleRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	b, limit, now, err := r.goLive(ctx)
	if err != nil || !b.live {
		return err // nil: nothing to hold the cost to, publish
	}
	amounts := make([]pricing.Nano, len(reqs))
	var total pricing.Nano
	for i, req := range reqs {
		amount, priced, err := r.bound(req)
		if err != nil {
			return err
		}
		if !priced {
			return r.exhausted(ctx, pricing.Unpriced([]string{pricing.Name(req.Model)}, r.under(b, limit)))
		}
		amounts[i] = amount
		total += amount
	}
	if total <= 0 {
		return nil // free prices
	}
	day := store.Day(now)
	refusal, err := r.take(ctx, b, day, total, limit)
	switch {
	case err != nil:
		return err
	case refusal == nil:
		for i, req := range reqs {
			b.holds[req.SampleID] = hold{day: day, amount: amounts[i], due: now.Add(r.m.Timeout(req.Attempt))}
		}
		return nil
	}
	if refusal.Busy {
		waiting := !b.busySince.IsZero()
		if b.waitFor(refusal.Scope, now, 2*r.m.Timeout(0)) {
			if !waiting && !b.busySince.IsZero() {
				r.log.Info("waiting for the tenant's other jobs' reservations to settle", "why", refusal.Error())
			}
			return fmt.Errorf("%w: %v", errBudgetBusy, refusal)
		}
	}
	return r.exhausted(ctx, refusal)
}

// goLive readies the job's budget for a reservation: claimed, with the
// tenant's spend per day now (limit). Once a limit applies (live), the job
// reserves before it publishes: what it counted without reserving is
// spent first, so the limits see it, and a job whose models the fleet's
// table does not all price pauses as budget_exhausted (an error wrapping
// errBudgetExhausted) before anything more is published.
func (r *jobRun) goLive(ctx context.Context) (b *jobBudget, limit pricing.Nano, now time.Time, err error) {
	if b, err = r.budget(); err != nil {
		return nil, 0, now, err
	}
	if err := r.claim(ctx, b); err != nil {
		return nil, 0, now, err
	}
	if limit, err = r.dayLimit(ctx); err != nil {
		return nil, 0, now, err
	}
	now = time.Now()
	if b.live {
		return b, limit, now, nil
	}
	switch on, err := r.limited(ctx, b, limit, now); {
	case err != nil:
		return nil, 0, now, err
	case !on:
		return b, limit, now, nil
	}
	table, _ := r.c.prices.Table()
	if missing := pricing.Missing(table, &r.spec); len(missing) > 0 {
		return nil, 0, now, r.exhausted(ctx, pricing.Unpriced(missing, r.under(b, limit)))
	}
	if err := r.settleIDs(ctx, nil); err != nil {
		return nil, 0, now, err
	}
	b.live = true
	return b, limit, now, nil
}

// under names the limits the job is under now: its budget (its spec's, or
// one set in Redis since) and its tenant's spend per day.
func (r *jobRun) under(b *jobBudget, dayLimit pricing.Nano) string {
	budget := max(b.jobLimit, pricing.USD(r.spec.BudgetUSD))
	return pricing.Under(r.spec.Tenant, budget.USD(), dayLimit.USD())
}

// arbitrationHold names the hold of step's arbitration among the job's
// reservations.
func arbitrationHold(step int64) string { return "arbitration/" + strconv.FormatInt(step, 10) }

// reserveArbitration reserves what an arbitration of step may cost
// (Config.ArbitrationReserveUSD) on the job's budget and its tenant's day,
// when a limit applies, and returns it: the judge is told to spend no
// more. 0: no limit applies and nothing is reserved (the arbitration's
// cost is spent once the judge reports it). An error wrapping
// errNoArbitration, saying why, when the budget or the day cannot hold
// it: the step gets no arbitration, a person decides it.
func (r *jobRun) reserveArbitration(ctx context.Context, step int64) (pricing.Nano, error) {
	b, limit, now, err := r.goLive(ctx)
	if err != nil || !b.live {
		return 0, err
	}
	id := arbitrationHold(step)
	if h, ok := b.holds[id]; ok {
		return h.amount, nil // asked again (a pause, a takeover): held already
	}
	amount, day := pricing.USD(r.c.cfg.ArbitrationReserveUSD), store.Day(now)
	switch refusal, err := r.take(ctx, b, day, amount, limit); {
	case err != nil:
		return 0, err
	case refusal != nil:
		return 0, fmt.Errorf("%w: an arbitration may cost up to %v, and %v", errNoArbitration, amount, refusal)
	}
	b.holds[id] = hold{day: day, amount: amount, due: now.Add(arbitrationWait)}
	return amount, nil
}

// take reserves amount on the job's budget and its tenant's day (limit:
// its spend per day now), both or neither: a refusal (the figures kept)
// says why not; an error wrapping errLeaseLost means a later owner holds
// the job. The caller files the hold.
func (r *jobRun) take(ctx context.Context, b *jobBudget, day string, amount, limit pricing.Nano) (*store.Refusal, error) {
	b.took = true // also when the reply is lost: the end releases it
	f, err := b.budgets.Reserve(ctx, store.Reservation{
		Job: r.ref, Token: r.token, ID: b.id(), Day: day, Amount: amount,
		JobLimit: pricing.USD(r.spec.BudgetUSD), DayLimit: limit,
	})
	var refusal *store.Refusal
	switch {
	case err == nil:
		b.figs, b.busySince = f, time.Time{}
		return nil, nil
	case errors.Is(err, store.ErrStale):
		return nil, fmt.Errorf("%w: %v", errLeaseLost, err)
	case errors.As(err, &refusal):
		b.figs = refusal.Figures
		return refusal, nil
	}
	return nil, err
}

// settleArbitration releases step's arbitration hold and spends the job's
// cost so far, which holds what the arbitration cost.
func (r *jobRun) settleArbitration(ctx context.Context, step int64) error {
	if r.bud == nil {
		return nil
	}
	return r.settleIDs(ctx, []string{arbitrationHold(step)})
}

// waitFor reports whether a busy refusal is worth waiting on: the job's
// own budget waits for its answers due to come; the tenant's day waits
// for other jobs' answers, for patience at most while this job holds
// none (another job's reservations may never settle: a coordinator died
// with them, the job is paused), and not at all while it holds only
// overdue answers (each job that does gives way, so two jobs waiting on
// each other's lost answers cannot wait forever).
func (b *jobBudget) waitFor(scope string, now time.Time, patience time.Duration) bool {
	for _, h := range b.holds {
		if now.Before(h.due) {
			b.busySince = time.Time{}
			return true
		}
	}
	if scope != "tenant" || len(b.holds) > 0 {
		return false
	}
	if b.busySince.IsZero() {
		b.busySince = now
	}
	return now.Sub(b.busySince) < patience
}

// bound is the cost bound of req at the fleet's price of the model it
// names: the bound of the prompt the voter builds for it (claims.go: the
// same bound its answer's claims are held to) and max_output_tokens out.
// priced is false when the fleet's table does not price that model.
func (r *jobRun) bound(req *schemas.SampleRequest) (amount pricing.Nano, priced bool, err error) {
	prompt, err := r.m.PromptBound(req)
	if err != nil {
		return 0, false, fmt.Errorf("coordinator: the prompt of step %d, to bound its cost: %w", req.Step, err)
	}
	p, ok := r.fleetPrice(req.Model)
	if !ok {
		return 0, false, nil
	}
	return pricing.Cost(&p, prompt, int64(req.MaxOutputTokens)), true, nil
}

// fleetPrice is the fleet's price of a sample whose request names model
// ("": the voters' own, the default record), from its table now.
func (r *jobRun) fleetPrice(model string) (schemas.Pricing, bool) {
	t, _ := r.c.prices.Table()
	return t.Price(model)
}

// priceOf prices the job's answers for its machine (pricing.Of on the
// fleet's table now).
func (r *jobRun) priceOf(model string, stronger bool) (schemas.Pricing, pricing.Source) {
	t, _ := r.c.prices.Table()
	return pricing.Of(t, &r.spec, model, stronger)
}

// cost is what the job's figures cost so far at the fleet's prices, in
// whole nano-dollars: its answers, each priced as it was counted, and the
// judge's arbitrations (rounded up). What its report says it cost.
func (r *jobRun) cost() pricing.Nano {
	if r.m == nil {
		return 0 // the run failed before its machine was made
	}
	f := &r.m.Acct.Figures
	return pricing.Nano(f.SampleCostNanoUSD) + pricing.USDUp(f.ArbiterCostUSD)
}

// settleBatch is called once a batch of result messages is handled, with
// which of them were settled (acked or terminated; a nak'ed one comes
// back): the reservations of every answer settled are released (skipped,
// late and unreadable ones too), and, in the same atomic call, the job's
// cost so far, which counts their tokens, is spent. Never release a
// reservation before its answer's tokens are spent: another job could
// reserve the room they take.
//
// A job that reserves nothing (no limit applies) spends its cost about
// once per spendEvery instead.
func (r *jobRun) settleBatch(ctx context.Context, msgs []jetstream.Msg, settled []bool) error {
	if r.bud == nil {
		return nil
	}
	if b := r.bud; !b.live {
		if now := time.Now(); now.After(b.nextSpend) {
			b.nextSpend = now.Add(spendEvery)
			return r.settleIDs(ctx, nil)
		}
		return nil
	}
	// The sample ids the machine verified (internal/core/step/capability.go): a forged
	// result releases no reservation of the sample it names.
	ids := make([]string, 0, len(msgs))
	for i := range msgs {
		if i < len(settled) && settled[i] && i < len(r.m.Verified) {
			ids = append(ids, r.m.Verified[i]...)
		}
	}
	return r.settleIDs(ctx, ids)
}

// settleIDs releases the reservations of the answered sample ids and
// spends the job's cost so far, on the days the reservations were taken
// against (spendPlan). It asks Redis nothing when there is nothing to
// release or spend.
func (r *jobRun) settleIDs(ctx context.Context, answered []string) error {
	b := r.bud
	if !b.claimed {
		return nil // nothing reserved under this owner
	}
	released := map[string]pricing.Nano{}
	for _, id := range answered {
		if h, ok := b.holds[id]; ok {
			released[h.day] += h.amount
			delete(b.holds, id)
		}
	}
	cost := r.cost()
	if len(released) == 0 && cost <= b.figs.Job.Spent {
		return nil
	}
	for _, s := range spendPlan(b.figs.Job.Spent, cost, released, store.Day(time.Now())) {
		f, err := b.budgets.Settle(ctx, store.Settlement{
			Job: r.ref, Token: r.token, ID: b.id(), Day: s.day, Reserved: s.reserved, Total: s.total,
		})
		if errors.Is(err, store.ErrStale) {
			return fmt.Errorf("%w: %v", errLeaseLost, err)
		}
		if err != nil {
			return err
		}
		b.figs = f
	}
	return nil
}

// dayShare is one settle call of spendPlan: release reserved on day, and
// spend there what total is above the job's spent.
type dayShare struct {
	day             string
	reserved, total pricing.Nano
}

// spendPlan settles holds released (what each day's holds reserved) and
// the job's cost so far (the job spent spent until now) over the days:
// the new cost goes on the days the holds were reserved against, oldest
// first, each at most what was released there (a hold bounds its answer's
// cost, so no day goes over its limit across midnight), and what no hold
// covers on today. A day with nothing to release or spend is left out.
func spendPlan(spent, cost pricing.Nano, released map[string]pricing.Nano, today string) []dayShare {
	days := make([]string, 0, len(released))
	for d := range released {
		if d != today {
			days = append(days, d)
		}
	}
	slices.Sort(days)
	left, total := max(cost-spent, 0), spent
	plan := make([]dayShare, 0, len(days)+1)
	for _, d := range days {
		take := min(left, released[d])
		left, total = left-take, total+take
		plan = append(plan, dayShare{day: d, reserved: released[d], total: total})
	}
	if released[today] > 0 || left > 0 {
		plan = append(plan, dayShare{day: today, reserved: released[today], total: max(cost, total)})
	}
	return plan
}

// releaseBudget spends what the job's figures cost and not yet spent,
// then releases every reservation it holds: at a pause and at the end
// (answers that never came can no longer count), however the run ends.
// When this run could not claim the budget at its start, it claims now
// (what earlier owners left is released); when it claimed and reserved
// nothing since, there is nothing to release. Failures are logged: the
// next run's claim releases what is left.
func (r *jobRun) releaseBudget(ctx context.Context) {
	b, err := r.budget()
	if err != nil {
		r.log.Warn("release the job's reservations; the next owner does", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if b.claimed {
		if err := r.settleIDs(ctx, nil); err != nil {
			r.log.Warn("spend the job's cost at its end", "err", err)
		}
		if !b.took {
			return
		}
	}
	a, err := b.budgets.Claim(ctx, r.ref, r.token, pricing.USD(r.spec.BudgetUSD))
	if err != nil {
		r.log.Warn("release the job's reservations; the next owner does", "err", err)
		return
	}
	clear(b.holds)
	b.claimed, b.took, b.figs.Job, b.jobLimit = true, false, a, a.Limit
}

// exhausted pauses the job as budget_exhausted for why (a refused
// reservation, or work the fleet does not price): its cost so far spent,
// checkpointed, its reservations released, its status saying why and what
// finishing is expected to cost, paused in the registry (so no coordinator
// takes it until it is resumed).
func (r *jobRun) exhausted(ctx context.Context, why error) error {
	r.m.DropAhead(0) // nothing ahead is kept across a pause
	if err := r.settleIDs(ctx, nil); err != nil {
		return err
	}
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	r.releaseBudget(ctx)
	finish := r.finishCost()
	if errors.Is(why, pricing.ErrUnpriced) {
		r.log.Warn("unpriced work: the job pauses until the fleet prices it and it is resumed", "why", why.Error())
	} else {
		r.log.Warn("budget exhausted: the job pauses until its budget is raised and it is resumed",
			"why", why.Error(), "finish_cost_usd", finish)
	}
	if _, err := jobs.Control(ctx, r.topo, r.spec.Tenant, r.spec.JobID, schemas.ControlPause); err != nil {
		if !errors.Is(err, jobs.ErrFinished) {
			return err
		}
		// Being cancelled: the next owner ends it so.
		return fmt.Errorf("%w: %v", errBudgetExhausted, why)
	}
	r.publishBudgetStatus(ctx, finish, why.Error())
	if err := r.c.registry.MarkState(ctx, r.spec.Tenant, r.spec.JobID, schemas.StateBudgetExhausted); err != nil {
		return err
	}
	return fmt.Errorf("%w: %v", errBudgetExhausted, why)
}

// finishCost is what finishing the job is expected to cost from here:
// the steps left × the samples a step is expected to take (MAKER's
// E[N]/v at the job's p, internal/plan) × what a sample cost so far on
// average (before any is counted: the bound of one).
func (r *jobRun) finishCost() float64 {
	m := r.m
	total := task.PlannedSteps(m.Inst)
	if r.spec.StepLimit > 0 && r.spec.StepLimit < total {
		total = r.spec.StepLimit
	}
	left := max(total-m.Step, 0)
	p := r.spec.PEstimate
	if !(p > 0.5 && p < 1) {
		p = pricing.DefaultP
	}
	v := r.spec.ValidFraction
	if !(v > 0 && v <= 1) {
		v = 1
	}
	perStep := plan.ExpectedVotes(p, m.K()) / v
	var perSample float64
	if n := m.Acct.Samples + m.Acct.LateSamples + m.Acct.SkippedSamples + m.Acct.CancelledSamples; n > 0 {
		perSample = pricing.Nano(m.Acct.SampleCostNanoUSD).USD() / float64(n)
	} else if p, ok := r.fleetPrice(""); ok {
		// No answer counted yet: the bound of the largest request sent.
		perSample = pricing.Cost(&p, m.Claims.TopPrompt, int64(r.spec.MaxOutputTokens)).USD()
	}
	return float64(left) * perStep * perSample
}

// publishBudgetStatus stores the job's status as budget_exhausted: no
// owner, what it spent, what finishing is expected to cost, and why.
func (r *jobRun) publishBudgetStatus(ctx context.Context, finish float64, why string) {
	st := r.status(schemas.StateBudgetExhausted)
	st.Coordinator, st.FinishCostUSD, st.Reason = "", finish, why
	r.putStatus(ctx, &st)
}

// money is the job's spent and reserved figures for its status, as Redis
// last returned them (zero before the job spent or reserved anything
// under this owner).
func (r *jobRun) money() (spent, reserved float64) {
	if b := r.bud; b != nil {
		return b.figs.Job.Spent.USD(), b.figs.Job.Reserved.USD()
	}
	return 0, 0
}
