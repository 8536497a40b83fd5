package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
)

// Budgets keep money in Redis, in integer nano-dollars, under the tenant's
// hash tag (a tenant's budget keys share one Redis Cluster slot, so one
// script changes a job's budget and its tenant's day at once). With the
// default prefix "maker":
//
//	maker:{tenant}:budget:<job>        hash  limit, spent, reserved, gen (the
//	                                         owner's lease token), last, ls
//	                                         (ids of the last reserve and
//	                                         settle), r:<day> (reserved
//	                                         against that day)
//	maker:{tenant}:spend:<YYYY-MM-DD>  hash  limit (the quota's spend per
//	                                         day), spent, reserved; 48h TTL
//
// Each atomic operation is one script: budget_reserve.lua (a wave's
// upper-bound cost, on both or neither), budget_settle.lua (answered
// samples: reservation released, actual cost spent) and budget_claim.lua
// (a new owner, or the owner at a pause or the end, releases everything
// the job holds; older owners are fenced out by their lease token).

var (
	//go:embed budget_reserve.lua
	reserveLua string
	//go:embed budget_settle.lua
	settleLua string
	//go:embed budget_claim.lua
	claimLua string

	reserveScript = redis.NewScript(reserveLua)
	settleScript  = redis.NewScript(settleLua)
	claimScript   = redis.NewScript(claimLua)
)

// Budget errors.
var (
	// ErrBudgetExhausted: the job's budget, or its tenant's spend for the
	// day, cannot pay for what was asked even once every reservation in
	// flight is settled. The job pauses as budget_exhausted.
	ErrBudgetExhausted = errors.New("quota: budget exhausted")
	// ErrBudgetBusy: only reservations in flight stand in the way; they
	// may settle for less than they hold. Ask again later.
	ErrBudgetBusy = errors.New("quota: budget busy")
	// ErrStale: another owner (a later lease token) holds the job's budget.
	ErrStale = errors.New("quota: budget held by a later owner")
	// ErrNoJob: the job has no budget record in Redis (never run, or
	// expired).
	ErrNoJob = errors.New("quota: no budget record for the job")
)

// Day is the UTC day of t as the budget keys name it (YYYY-MM-DD).
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// BudgetConfig configures Budgets.
type BudgetConfig struct {
	// KeyPrefix starts every key: the tally store's (Store.Prefix),
	// so a namespace's keys go together. Default "maker".
	KeyPrefix string
	// JobTTL is how long a job's budget record lives after its last
	// change (a job paused longer starts again from its spec's budget and
	// nothing spent). Default 30 days.
	JobTTL time.Duration
	// DayTTL is how long a tenant's day record lives after its last
	// change. Default 48h.
	DayTTL time.Duration
}

// Budgets reserves, settles and reads budgets in Redis. Safe for
// concurrent use.
type Budgets struct {
	rdb            redis.UniversalClient
	prefix         string
	jobTTL, dayTTL string // in milliseconds, as the scripts take them
	jobExpiry      time.Duration
}

// NewBudgets returns Budgets on rdb.
func NewBudgets(rdb redis.UniversalClient, cfg BudgetConfig) (*Budgets, error) {
	if rdb == nil {
		return nil, errors.New("quota: nil redis client")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}: \t\r\n") {
		return nil, fmt.Errorf("quota: KeyPrefix %q may not hold braces, colons or spaces", cfg.KeyPrefix)
	}
	if cfg.JobTTL == 0 {
		cfg.JobTTL = 30 * 24 * time.Hour
	}
	if cfg.DayTTL == 0 {
		cfg.DayTTL = 48 * time.Hour
	}
	if cfg.JobTTL < time.Second || cfg.DayTTL < time.Second {
		return nil, fmt.Errorf("quota: JobTTL %v and DayTTL %v must be at least a second", cfg.JobTTL, cfg.DayTTL)
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	return &Budgets{rdb: rdb, prefix: cfg.KeyPrefix, jobTTL: ms(cfg.JobTTL), dayTTL: ms(cfg.DayTTL), jobExpiry: cfg.JobTTL}, nil
}

// Load loads the scripts into Redis ahead of use (they are reloaded on
// demand after a SCRIPT FLUSH).
func (b *Budgets) Load(ctx context.Context) error {
	for _, sc := range []*redis.Script{reserveScript, settleScript, claimScript} {
		if err := sc.Load(ctx, b.rdb).Err(); err != nil {
			return fmt.Errorf("quota: load budget script: %w", err)
		}
	}
	return nil
}

func (b *Budgets) jobKey(job JobRef) string {
	return b.prefix + ":{" + job.Tenant + "}:budget:" + job.JobID
}

func (b *Budgets) dayKey(tenant, day string) string {
	return b.prefix + ":{" + tenant + "}:spend:" + day
}

// Account is one budget's figures: a job's, or a tenant's for a day.
type Account struct {
	// Limit is what may be spent (0: no limit); Spent what the settled
	// samples cost; Reserved what the samples in flight may still cost.
	Limit, Spent, Reserved pricing.Nano
}

// Left is what can still be reserved (meaningless without a limit).
func (a Account) Left() pricing.Nano { return max(a.Limit-a.Spent-a.Reserved, 0) }

// Figures are a job's account and its tenant's for the day, as a script
// left them.
type Figures struct {
	Job, Day Account
}

// Reservation is what Reserve asks for.
type Reservation struct {
	Job JobRef
	// Token is the caller's lease token; ID names this reservation within
	// the job (a retried call with the same ID changes nothing).
	Token int64
	ID    string
	// Day is the UTC day (Day) the reservation counts against.
	Day string
	// Amount is the upper bound of what the wave can cost (> 0).
	Amount pricing.Nano
	// JobLimit is the job's budget when Redis has none yet (its spec's;
	// SetJobLimit overrides it); DayLimit is the tenant's spend per day
	// now. 0: no limit.
	JobLimit, DayLimit pricing.Nano
}

// Refusal is the error of a reservation refused: which budget stood in
// the way, and whether for good (ErrBudgetExhausted) or for now
// (ErrBudgetBusy).
type Refusal struct {
	// Scope is "job" or "tenant".
	Scope string
	// Busy: only reservations in flight stand in the way.
	Busy    bool
	Amount  pricing.Nano
	Figures Figures
}

func (r *Refusal) Error() string {
	a := r.Figures.Job
	what := "the job's budget"
	if r.Scope == "tenant" {
		a, what = r.Figures.Day, "the tenant's spend for the day"
	}
	if r.Busy {
		return fmt.Sprintf("quota: %s is busy: %v more would go over %v while %v is reserved in flight (%v spent)",
			what, r.Amount, a.Limit, a.Reserved, a.Spent)
	}
	return fmt.Sprintf("quota: %s is exhausted: %v spent of %v, the next samples may cost up to %v", what, a.Spent, a.Limit, r.Amount)
}

// Unwrap returns ErrBudgetBusy or ErrBudgetExhausted.
func (r *Refusal) Unwrap() error {
	if r.Busy {
		return ErrBudgetBusy
	}
	return ErrBudgetExhausted
}

// Reserve reserves rv.Amount on the job's budget and its tenant's day, or
// on neither: a *Refusal (wrapping ErrBudgetExhausted or ErrBudgetBusy)
// says why not; ErrStale means a later owner holds the job.
func (b *Budgets) Reserve(ctx context.Context, rv Reservation) (Figures, error) {
	if rv.Amount <= 0 {
		return Figures{}, fmt.Errorf("quota: reserve %v: the amount must be positive", rv.Amount)
	}
	keys := []string{b.jobKey(rv.Job), b.dayKey(rv.Job.Tenant, rv.Day)}
	res, err := reserveScript.Run(ctx, b.rdb, keys, int64(rv.Amount), int64(max(rv.JobLimit, 0)), int64(max(rv.DayLimit, 0)),
		rv.Token, rv.Day, rv.ID, b.jobTTL, b.dayTTL).Int64Slice()
	if err != nil {
		return Figures{}, fmt.Errorf("quota: reserve for %s/%s: %w", rv.Job.Tenant, rv.Job.JobID, err)
	}
	code, f, err := figures(res)
	if err != nil {
		return f, err
	}
	switch code {
	case 0, 1:
		return f, nil
	case -1, -2:
		return f, &Refusal{Scope: "job", Busy: code == -2, Amount: rv.Amount, Figures: f}
	case -3, -4:
		return f, &Refusal{Scope: "tenant", Busy: code == -4, Amount: rv.Amount, Figures: f}
	case -5:
		return f, fmt.Errorf("%w: %s/%s", ErrStale, rv.Job.Tenant, rv.Job.JobID)
	}
	return f, fmt.Errorf("quota: budget_reserve returned code %d", code)
}

// Settlement is what Settle does: release Reserved (taken against Day),
// and spend what Total is above what the job spent already.
type Settlement struct {
	Job JobRef
	// Token is the caller's lease token; ID names this settlement within
	// the job (a retried call with the same ID changes nothing).
	Token int64
	ID    string
	Day   string
	// Reserved is what the answered samples held; Total is the job's cost
	// so far, its counted tokens priced (0: spend nothing).
	Reserved, Total pricing.Nano
}

// Settle releases s.Reserved on the job's budget and its tenant's day,
// and spends there what s.Total is above the job's spent (the job's spent
// becomes s.Total). ErrStale means a later owner holds the job (and
// released these reservations already).
func (b *Budgets) Settle(ctx context.Context, s Settlement) (Figures, error) {
	keys := []string{b.jobKey(s.Job), b.dayKey(s.Job.Tenant, s.Day)}
	res, err := settleScript.Run(ctx, b.rdb, keys, int64(max(s.Reserved, 0)), int64(max(s.Total, 0)),
		s.Token, s.Day, s.ID, b.jobTTL, b.dayTTL).Int64Slice()
	if err != nil {
		return Figures{}, fmt.Errorf("quota: settle for %s/%s: %w", s.Job.Tenant, s.Job.JobID, err)
	}
	code, f, err := figures(res)
	if err != nil {
		return f, err
	}
	switch code {
	case 0, 1:
		return f, nil
	case -5:
		return f, fmt.Errorf("%w: %s/%s", ErrStale, s.Job.Tenant, s.Job.JobID)
	}
	return f, fmt.Errorf("quota: budget_settle returned code %d", code)
}

func figures(res []int64) (int64, Figures, error) {
	if len(res) != 7 {
		return 0, Figures{}, fmt.Errorf("%w: budget script returned %d values", ErrReply, len(res))
	}
	return res[0], Figures{
		Job: Account{Limit: pricing.Nano(res[1]), Spent: pricing.Nano(res[2]), Reserved: pricing.Nano(res[3])},
		Day: Account{Limit: pricing.Nano(res[4]), Spent: pricing.Nano(res[5]), Reserved: pricing.Nano(res[6])},
	}, nil
}

// Claim makes the caller (lease token) the owner of the job's budget and
// releases every reservation the job holds: at a new owner's start (an
// earlier owner's samples can no longer count), and at the owner's pause
// or end (answers that never came). jobLimit is the job's budget when
// Redis has none yet. ErrStale means a later owner holds the job.
func (b *Budgets) Claim(ctx context.Context, job JobRef, token int64, jobLimit pricing.Nano) (Account, error) {
	key := b.jobKey(job)
	fields, err := b.rdb.HKeys(ctx, key).Result()
	if err != nil {
		return Account{}, fmt.Errorf("quota: claim budget of %s/%s: %w", job.Tenant, job.JobID, err)
	}
	keys := []string{key}
	args := []any{token, int64(max(jobLimit, 0)), b.jobTTL}
	for _, f := range fields {
		if day, ok := strings.CutPrefix(f, "r:"); ok {
			keys = append(keys, b.dayKey(job.Tenant, day))
			args = append(args, day)
		}
	}
	res, err := claimScript.Run(ctx, b.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Account{}, fmt.Errorf("quota: claim budget of %s/%s: %w", job.Tenant, job.JobID, err)
	}
	if len(res) != 4 {
		return Account{}, fmt.Errorf("%w: budget_claim returned %d values", ErrReply, len(res))
	}
	a := Account{Limit: pricing.Nano(res[1]), Spent: pricing.Nano(res[2]), Reserved: pricing.Nano(res[3])}
	if res[0] == -5 {
		return a, fmt.Errorf("%w: %s/%s", ErrStale, job.Tenant, job.JobID)
	}
	return a, nil
}

// SetJobLimit sets the job's budget (0: no limit of its own), in Redis,
// where every reservation reads it: raising it lets a budget_exhausted job
// go on once resumed. The job's spec keeps the budget it was submitted
// with.
func (b *Budgets) SetJobLimit(ctx context.Context, job JobRef, limit pricing.Nano) error {
	if limit < 0 {
		return fmt.Errorf("quota: a budget cannot be negative, got %v", limit)
	}
	key := b.jobKey(job)
	pipe := b.rdb.TxPipeline()
	pipe.HSet(ctx, key, "limit", int64(limit))
	pipe.HSetNX(ctx, key, "spent", 0)
	pipe.HSetNX(ctx, key, "reserved", 0)
	pipe.Expire(ctx, key, b.jobExpiry)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("quota: set budget of %s/%s: %w", job.Tenant, job.JobID, err)
	}
	return nil
}

// Job returns the job's budget figures; ErrNoJob when Redis has none.
func (b *Budgets) Job(ctx context.Context, job JobRef) (Account, error) {
	a, found, err := b.account(ctx, b.jobKey(job))
	if err == nil && !found {
		err = fmt.Errorf("%w: %s/%s", ErrNoJob, job.Tenant, job.JobID)
	}
	return a, err
}

// TenantDay returns the tenant's figures for day (Day); the zero Account
// when nothing was reserved that day.
func (b *Budgets) TenantDay(ctx context.Context, tenant, day string) (Account, error) {
	a, _, err := b.account(ctx, b.dayKey(tenant, day))
	return a, err
}

func (b *Budgets) account(ctx context.Context, key string) (a Account, found bool, err error) {
	vals, err := b.rdb.HMGet(ctx, key, "limit", "spent", "reserved").Result()
	if err != nil {
		return Account{}, false, fmt.Errorf("quota: read %s: %w", key, err)
	}
	var out [3]pricing.Nano
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Account{}, false, fmt.Errorf("%w: %s: %q is not an integer", ErrReply, key, s)
		}
		out[i], found = pricing.Nano(n), true
	}
	return Account{Limit: out[0], Spent: out[1], Reserved: out[2]}, found, nil
}
