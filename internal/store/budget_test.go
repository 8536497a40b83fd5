package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

func newBudgets(t *testing.T) *store.Budgets {
	t.Helper()
	r := testkit.StartRedis(t)
	b, err := store.NewBudgets(r.Client(t), store.BudgetConfig{KeyPrefix: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNanoAndBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		usd  float64
		want pricing.Nano
	}{{0, 0}, {-1, 0}, {0.1, 100_000_000}, {0.29, 290_000_000}, {1, 1_000_000_000}, {1e6, 1e15}} {
		if got := pricing.USD(tc.usd); got != tc.want {
			t.Errorf("pricing.USD(%v) = %d, want %d", tc.usd, got, tc.want)
		}
	}
	p := &schemas.Pricing{InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}
	for _, tc := range []struct {
		prompt, completion int64
		want               pricing.Nano
	}{{0, 0, 0}, {1, 0, 400}, {0, 1, 1600}, {600, 300, 600*400 + 300*1600}} {
		if got := pricing.Cost(p, tc.prompt, tc.completion); got != tc.want {
			t.Errorf("pricing.Cost(%d, %d) = %d, want %d", tc.prompt, tc.completion, got, tc.want)
		}
	}
	if got := pricing.Cost(nil, 100, 100); got != 0 {
		t.Errorf("pricing.Cost without pricing = %d, want 0", got)
	}
	// Rounding goes up: a third of a nano-dollar costs one.
	if got := pricing.Cost(&schemas.Pricing{InputUSDPerMTok: 1.0 / 3}, 1, 0); got != 334 {
		t.Errorf("pricing.Cost rounds to %d, want 334 (up)", got)
	}
	msgs := []task.Message{{Role: "system", Content: "abc"}, {Role: "user", Content: "hello"}}
	want := int64(pricing.TokensPerReply + 6 + 3 + pricing.TokensPerMessage + 4 + 5 + pricing.TokensPerMessage)
	if got := pricing.PromptTokensBound(msgs); got != want {
		t.Errorf("PromptTokensBound = %d, want %d", got, want)
	}
	if got, want := pricing.SampleBound(p, msgs, 750), pricing.Cost(p, want, 750); got != want {
		t.Errorf("pricing.SampleBound = %d, want %d", got, want)
	}
}

// TestBudgetScripts drives the three scripts through a job's life against
// a real redis-server.
func TestBudgetScripts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBudgets(t)
	job := store.JobRef{Tenant: "acme", JobID: "j1"}
	const day, day2 = "2026-12-01", "2026-12-02"
	reserve := func(token int64, id, d string, amount, jobLimit, dayLimit pricing.Nano) (store.Figures, error) {
		return b.Reserve(ctx, store.Reservation{Job: job, Token: token, ID: id, Day: d, Amount: amount, JobLimit: jobLimit, DayLimit: dayLimit})
	}
	if _, err := b.Claim(ctx, job, 1, 1000); err != nil {
		t.Fatal(err)
	}

	// Within both limits: reserved on both.
	f, err := reserve(1, "1:1", day, 400, 1000, 700)
	if err != nil {
		t.Fatal(err)
	}
	if f.Job != (store.Account{Limit: 1000, Reserved: 400}) || f.Day != (store.Account{Limit: 700, Reserved: 400}) {
		t.Fatalf("after a reservation: %+v", f)
	}
	// A retry of the same reservation changes nothing.
	if f, err = reserve(1, "1:1", day, 400, 1000, 700); err != nil || f.Job.Reserved != 400 || f.Day.Reserved != 400 {
		t.Fatalf("retried reservation: %+v, %v", f, err)
	}
	// The tenant's day: 400 reserved + 400 > 700, but 0 spent + 400 fits:
	// busy, not exhausted.
	_, err = reserve(1, "1:2", day, 400, 1000, 700)
	var ref *store.Refusal
	if !errors.As(err, &ref) || ref.Scope != "tenant" || !errors.Is(err, store.ErrBudgetBusy) {
		t.Fatalf("over the day with reservations in flight: %v, want the tenant's day busy", err)
	}
	// Settle for less than reserved: 250 spent, nothing reserved.
	if f, err = b.Settle(ctx, store.Settlement{Job: job, Token: 1, ID: "s1", Day: day, Reserved: 400, Total: 250}); err != nil {
		t.Fatal(err)
	}
	if f.Job != (store.Account{Limit: 1000, Spent: 250}) || f.Day != (store.Account{Limit: 700, Spent: 250}) {
		t.Fatalf("after settling: %+v", f)
	}
	// A retried settle changes nothing.
	if f, err = b.Settle(ctx, store.Settlement{Job: job, Token: 1, ID: "s1", Day: day, Reserved: 400, Total: 250}); err != nil || f.Job.Spent != 250 {
		t.Fatalf("retried settle: %+v, %v", f, err)
	}
	// 250 spent + 500 > 700: the day is exhausted.
	if _, err = reserve(1, "1:3", day, 500, 1000, 700); !errors.Is(err, store.ErrBudgetExhausted) || !errors.As(err, &ref) || ref.Scope != "tenant" {
		t.Fatalf("over the day's limit: %v, want the tenant's day exhausted", err)
	}
	// Nothing was taken by the refusals.
	if a, err := b.TenantDay(ctx, "acme", day); err != nil || a != (store.Account{Limit: 700, Spent: 250}) {
		t.Fatalf("day after refusals: %+v, %v", a, err)
	}
	// The next day has room; the job's own budget is the limit now.
	if _, err = reserve(1, "1:4", day2, 600, 1000, 700); err != nil {
		t.Fatal(err)
	}
	// 250 spent + 600 reserved + 200 > 1000 but 250 + 200 fits: busy.
	if _, err = reserve(1, "1:5", day2, 200, 1000, 700); !errors.Is(err, store.ErrBudgetBusy) || !errors.As(err, &ref) || ref.Scope != "job" {
		t.Fatalf("over the job's budget with reservations in flight: %v, want the job busy", err)
	}
	// 250 + 800 > 1000: exhausted.
	if _, err = reserve(1, "1:6", day2, 800, 1000, 0); !errors.Is(err, store.ErrBudgetExhausted) || !errors.As(err, &ref) || ref.Scope != "job" {
		t.Fatalf("over the job's budget: %v, want the job exhausted", err)
	}

	// A new owner (token 2) claims: the 600 still reserved against day2
	// (the old owner's answers never came) are released there too.
	a, err := b.Claim(ctx, job, 2, 1000)
	if err != nil || a != (store.Account{Limit: 1000, Spent: 250}) {
		t.Fatalf("claim: %+v, %v", a, err)
	}
	if d, _ := b.TenantDay(ctx, "acme", day2); d.Reserved != 0 {
		t.Fatalf("day2 after the claim: %+v, want nothing reserved", d)
	}
	// The old owner is fenced out of reserving and settling.
	if _, err = reserve(1, "1:7", day2, 10, 1000, 0); !errors.Is(err, store.ErrStale) {
		t.Fatalf("old owner's reserve: %v, want ErrStale", err)
	}
	if _, err = b.Settle(ctx, store.Settlement{Job: job, Token: 1, ID: "s2", Day: day2, Reserved: 600, Total: 900}); !errors.Is(err, store.ErrStale) {
		t.Fatalf("old owner's settle: %v, want ErrStale", err)
	}
	if _, err = b.Claim(ctx, job, 1, 1000); !errors.Is(err, store.ErrStale) {
		t.Fatalf("old owner's claim: %v, want ErrStale", err)
	}
	// A settle never releases more than the job holds against the day:
	// another job's reservation on the same day stays.
	other := store.JobRef{Tenant: "acme", JobID: "j2"}
	if _, err := b.Reserve(ctx, store.Reservation{Job: other, Token: 5, ID: "x", Day: day2, Amount: 300}); err != nil {
		t.Fatal(err)
	}
	if _, err = reserve(2, "2:1", day2, 100, 1000, 0); err != nil {
		t.Fatal(err)
	}
	if f, err = b.Settle(ctx, store.Settlement{Job: job, Token: 2, ID: "s3", Day: day2, Reserved: 5000, Total: 300}); err != nil {
		t.Fatal(err)
	}
	if f.Job.Reserved != 0 || f.Job.Spent != 300 || f.Day.Reserved != 300 || f.Day.Spent != 50 {
		t.Fatalf("over-release: %+v, want the other job's 300 still reserved on the day", f)
	}
	// A cost below what was spent (a new owner without an earlier one's
	// unjournaled counts) spends nothing.
	if f, err = b.Settle(ctx, store.Settlement{Job: job, Token: 2, ID: "s4", Day: day2, Total: 120}); err != nil || f.Job.Spent != 300 || f.Day.Spent != 50 {
		t.Fatalf("a lower total: %+v, %v, want nothing more spent", f, err)
	}

	// Raising the budget lets the job go on.
	if _, err = reserve(2, "2:2", day2, 800, 1000, 0); !errors.Is(err, store.ErrBudgetExhausted) {
		t.Fatalf("before raising: %v", err)
	}
	if err := b.SetJobLimit(ctx, job, 2000); err != nil {
		t.Fatal(err)
	}
	if f, err = reserve(2, "2:3", day2, 800, 1000, 0); err != nil || f.Job.Limit != 2000 {
		t.Fatalf("after raising the budget to 2000: %+v, %v", f, err)
	}
	// Claiming again under the same token releases again (the end).
	if a, err = b.Claim(ctx, job, 2, 1000); err != nil || a.Reserved != 0 || a.Limit != 2000 {
		t.Fatalf("release at the end: %+v, %v", a, err)
	}
	if a, err = b.Job(ctx, job); err != nil || a != (store.Account{Limit: 2000, Spent: 300}) {
		t.Fatalf("Job: %+v, %v", a, err)
	}
	if _, err = b.Job(ctx, store.JobRef{Tenant: "acme", JobID: "nope"}); !errors.Is(err, store.ErrNoJob) {
		t.Fatalf("Job of an unknown job: %v, want ErrNoJob", err)
	}
	// A new owner's ids are its own: one equal to an id of the last
	// owner's is a new reservation, not a retry.
	j3 := store.JobRef{Tenant: "acme", JobID: "j3"}
	if _, err := b.Reserve(ctx, store.Reservation{Job: j3, Token: 1, ID: "7", Day: day2, Amount: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, j3, 2, 0); err != nil {
		t.Fatal(err)
	}
	if f, err := b.Reserve(ctx, store.Reservation{Job: j3, Token: 2, ID: "7", Day: day2, Amount: 5}); err != nil || f.Job.Reserved != 5 {
		t.Fatalf("the new owner's first reservation: %+v, %v, want 5 reserved", f, err)
	}
	// A job without a budget of its own is held only by its tenant's.
	free := store.JobRef{Tenant: "acme", JobID: "free"}
	if _, err := b.Reserve(ctx, store.Reservation{Job: free, Token: 1, ID: "1", Day: day, Amount: 449, DayLimit: 700}); err != nil {
		t.Fatalf("a job without a budget, within its tenant's day: %v", err)
	}
	if _, err := b.Reserve(ctx, store.Reservation{Job: free, Token: 1, ID: "2", Day: day, Amount: 2, DayLimit: 700}); !errors.Is(err, store.ErrBudgetBusy) {
		t.Fatalf("a job without a budget, over its tenant's day: %v, want busy", err)
	}
}

// TestBudgetsConcurrent has many jobs of one tenant, each on its own
// goroutine like a job on its coordinator, reserve and settle at once
// against per-job budgets and the tenant's day: nothing ever spends over
// a limit, and every reservation is released in the end.
func TestBudgetsConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBudgets(t)
	const (
		jobs     = 24
		day      = "2026-12-01"
		dayLimit = pricing.Nano(50_000)
		jobLimit = pricing.Nano(4_000)
	)
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	for j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job := store.JobRef{Tenant: "acme", JobID: fmt.Sprintf("j%d", j)}
			rng := rand.New(rand.NewPCG(uint64(j), 7))
			if _, err := b.Claim(ctx, job, 1, jobLimit); err != nil {
				errs <- err
				return
			}
			var held []pricing.Nano
			var total pricing.Nano
			for i := 0; ; i++ {
				amount := pricing.Nano(50 + rng.IntN(200))
				_, err := b.Reserve(ctx, store.Reservation{Job: job, Token: 1, ID: fmt.Sprint(i), Day: day, Amount: amount, JobLimit: jobLimit, DayLimit: dayLimit})
				switch {
				case err == nil:
					held = append(held, amount)
				case errors.Is(err, store.ErrBudgetExhausted):
					_, err := b.Claim(ctx, job, 1, jobLimit) // paused: release what is held
					errs <- err
					return
				case !errors.Is(err, store.ErrBudgetBusy):
					errs <- err
					return
				}
				// Settle the oldest reservation for at most what it held.
				if len(held) > 3 || err != nil && len(held) > 0 {
					total += held[0] - pricing.Nano(rng.IntN(int(held[0])/2))
					f, err := b.Settle(ctx, store.Settlement{Job: job, Token: 1, ID: fmt.Sprint("s", i), Day: day, Reserved: held[0], Total: total})
					if err != nil {
						errs <- err
						return
					}
					if f.Job.Spent > jobLimit || f.Day.Spent > dayLimit {
						errs <- fmt.Errorf("spent over a limit: %+v", f)
						return
					}
					held = held[1:]
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	d, err := b.TenantDay(ctx, "acme", day)
	if err != nil {
		t.Fatal(err)
	}
	if d.Spent > dayLimit || d.Reserved != 0 {
		t.Fatalf("the day: %+v, want spent within %v and nothing reserved", d, dayLimit)
	}
	var sum pricing.Nano
	for j := range jobs {
		a, err := b.Job(ctx, store.JobRef{Tenant: "acme", JobID: fmt.Sprintf("j%d", j)})
		if err != nil {
			t.Fatal(err)
		}
		if a.Spent > jobLimit || a.Reserved != 0 {
			t.Fatalf("job %d: %+v, want spent within %v and nothing reserved", j, a, jobLimit)
		}
		sum += a.Spent
	}
	if sum != d.Spent {
		t.Fatalf("the jobs spent %v, the day says %v", sum, d.Spent)
	}
	// The limits were the binding constraint: the day is nearly used up.
	if d.Spent < dayLimit-4*250 {
		t.Fatalf("the day spent only %v of %v: jobs stopped early", d.Spent, dayLimit)
	}
}
