package store

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/schemas"
)

var (
	//go:embed admit.lua
	admitLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed run_acquire.lua
	runAcquireLua string

	admitScript      = redis.NewScript(admitLua)
	refreshScript    = redis.NewScript(refreshLua)
	runAcquireScript = redis.NewScript(runAcquireLua)
)

// The limiter's keys share one hash tag, {quota}: a fleet-wide capacity is
// one figure that every tenant's admission reads and changes atomically,
// so on a Redis Cluster they live in one slot. With the prefix "maker":
//
//	maker:{quota}:inflight            zset  "<tenant>/<member>" -> expiry (ms): the fleet's requests in flight
//	maker:{quota}:inflight:<tenant>   zset  member -> expiry (ms): the tenant's
//	maker:{quota}:bucket:<tenant>     hash  tokens, ts: the tenant's token bucket
//	maker:{quota}:demand              zset  tenant -> expiry (ms): tenants refused lately (waiting)
//	maker:{quota}:weights             hash  tenant -> weight
//	maker:{quota}:waiting:<tenant>    zset  job -> expiry (ms): the tenant's jobs refused lately
//	maker:{quota}:prio:<tenant>       hash  job -> priority, of those
//	maker:{quota}:running:<tenant>    zset  job -> expiry (ms): the tenant's running jobs
type limitKeys struct{ p string }

func (k limitKeys) fleetInflight() string         { return k.p + "inflight" }
func (k limitKeys) inflight(tenant string) string { return k.p + "inflight:" + tenant }
func (k limitKeys) bucket(tenant string) string   { return k.p + "bucket:" + tenant }
func (k limitKeys) demand() string                { return k.p + "demand" }
func (k limitKeys) weights() string               { return k.p + "weights" }
func (k limitKeys) waiting(tenant string) string  { return k.p + "waiting:" + tenant }
func (k limitKeys) prio(tenant string) string     { return k.p + "prio:" + tenant }
func (k limitKeys) running(tenant string) string  { return k.p + "running:" + tenant }
func (k limitKeys) admit(tenant string) []string {
	return []string{k.fleetInflight(), k.inflight(tenant), k.bucket(tenant), k.demand(), k.weights(), k.waiting(tenant), k.prio(tenant)}
}

// Reason says why an admission was cut short.
type Reason int

// Reasons, as admit.lua returns them.
const (
	// Granted: every request was admitted.
	Granted Reason = iota
	// Priority: a higher-priority job of the same tenant waits.
	Priority
	// TenantInflight: the tenant's in-flight cap.
	TenantInflight
	// FairShare: the tenant holds its weighted share of a contended fleet.
	FairShare
	// FleetFull: the fleet's in-flight capacity is taken.
	FleetFull
	// Rate: the tenant's token bucket is empty.
	Rate
)

func (r Reason) String() string {
	switch r {
	case Granted:
		return "granted"
	case Priority:
		return "a higher-priority job of the tenant waits"
	case TenantInflight:
		return "tenant in-flight cap"
	case FairShare:
		return "weighted share of the fleet"
	case FleetFull:
		return "fleet at capacity"
	case Rate:
		return "tenant rate"
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Limiter keeps the counters every coordinator shares in Redis: token
// buckets, requests in flight, waiting tenants and jobs, running jobs. It
// is safe for concurrent use.
type Limiter struct {
	rdb redis.UniversalClient
	k   limitKeys
}

// NewLimiter returns the limiter on rdb, its limitKeys under prefix (the
// store's, DefaultKeyPrefix by default).
func NewLimiter(rdb redis.UniversalClient, prefix string) *Limiter {
	return &Limiter{rdb: rdb, k: limitKeys{p: prefix + ":{quota}:"}}
}

// Load loads the scripts ahead of use.
func (l *Limiter) Load(ctx context.Context) error {
	for _, sc := range []*redis.Script{admitScript, refreshScript, runAcquireScript} {
		if err := sc.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("quota: load script: %w", err)
		}
	}
	return nil
}

// Limited reports whether q's tenant has a sample limit the limiter holds
// it to (in flight, rate) or the fleet has an in-flight capacity: without
// either, admission needs no Redis at all.
func Limited(q, fleet schemas.TenantQuota) bool {
	return q.MaxInflightSamples > 0 || q.SamplesPerSecond > 0 || fleet.MaxInflightSamples > 0
}

// AdmitRequest is a job's sample requests asking to be published.
type AdmitRequest struct {
	Tenant   string
	Job      string
	Priority int
	// Quota is the tenant's; Fleet the fleet's record.
	Quota, Fleet schemas.TenantQuota
	// Members name the requests, in order: one per sample index (an index
	// published again keeps its member, so it holds one place).
	Members []string
	// Lifetime is how long an admitted request counts as in flight
	// unless refreshed (Refresh) or released (Release). Default 30s.
	Lifetime time.Duration
	// Wait is how long a refusal marks the tenant and job as waiting.
	// Default 250ms.
	Wait time.Duration
}

// Admission is what Admit granted: the first Granted members.
type Admission struct {
	Granted int
	// Reason says what stopped the rest.
	Reason Reason
	// RetryAfter, for Rate, is when the next token is due.
	RetryAfter time.Duration
}

// Admit admits the first requests of req that fit the limits (admit.lua).
func (l *Limiter) Admit(ctx context.Context, req AdmitRequest) (Admission, error) {
	if req.Lifetime <= 0 {
		req.Lifetime = 30 * time.Second
	}
	if req.Wait <= 0 {
		req.Wait = 250 * time.Millisecond
	}
	args := make([]any, 0, 10+len(req.Members))
	args = append(args, req.Tenant, req.Quota.EffectiveWeight(), req.Quota.MaxInflightSamples, req.Fleet.MaxInflightSamples,
		req.Quota.SamplesPerSecond, req.Quota.EffectiveBurst(), req.Job, req.Priority,
		req.Lifetime.Milliseconds(), max(req.Wait.Milliseconds(), 1))
	for _, m := range req.Members {
		args = append(args, m)
	}
	res, err := admitScript.Run(ctx, l.rdb, l.k.admit(req.Tenant), args...).Int64Slice()
	if err != nil {
		return Admission{}, fmt.Errorf("quota: admit %s/%s: %w", req.Tenant, req.Job, err)
	}
	if len(res) != 3 {
		return Admission{}, fmt.Errorf("%w: admit returned %d values", ErrReply, len(res))
	}
	return Admission{Granted: int(res[0]), Reason: Reason(res[1]), RetryAfter: time.Duration(res[2]) * time.Millisecond}, nil
}

// Release ends members' time in flight (answered, or given up).
func (l *Limiter) Release(ctx context.Context, tenant string, members []string) error {
	if len(members) == 0 {
		return nil
	}
	full := make([]any, len(members))
	own := make([]any, len(members))
	for i, m := range members {
		own[i] = m
		full[i] = tenant + "/" + m
	}
	pipe := l.rdb.TxPipeline()
	pipe.ZRem(ctx, l.k.inflight(tenant), own...)
	pipe.ZRem(ctx, l.k.fleetInflight(), full...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("quota: release %d in flight of %s: %w", len(members), tenant, err)
	}
	return nil
}

// Refresh moves on the expiry of members still in flight and returns how
// many are still held.
func (l *Limiter) Refresh(ctx context.Context, tenant string, members []string, lifetime time.Duration) (int, error) {
	if len(members) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2+len(members))
	args = append(args, tenant, max(lifetime.Milliseconds(), 1))
	for _, m := range members {
		args = append(args, m)
	}
	n, err := refreshScript.Run(ctx, l.rdb, []string{l.k.fleetInflight(), l.k.inflight(tenant)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("quota: refresh in flight of %s: %w", tenant, err)
	}
	return n, nil
}

// Unwait forgets that job waits (it ended, or stopped asking).
func (l *Limiter) Unwait(ctx context.Context, tenant, job string) error {
	pipe := l.rdb.TxPipeline()
	pipe.ZRem(ctx, l.k.waiting(tenant), job)
	pipe.HDel(ctx, l.k.prio(tenant), job)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("quota: unwait %s/%s: %w", tenant, job, err)
	}
	return nil
}

// InFlight counts the tenant's requests in flight ("" for the fleet's,
// counted only while the fleet has a capacity).
func (l *Limiter) InFlight(ctx context.Context, tenant string) (int, error) {
	key := l.k.fleetInflight()
	if tenant != "" {
		key = l.k.inflight(tenant)
	}
	return l.count(ctx, key)
}

// Running counts the tenant's running jobs.
func (l *Limiter) Running(ctx context.Context, tenant string) (int, error) {
	return l.count(ctx, l.k.running(tenant))
}

// count counts a ZSET's unexpired members (scores are expiries in ms of
// the server's clock).
func (l *Limiter) count(ctx context.Context, key string) (int, error) {
	t, err := l.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("quota: time: %w", err)
	}
	n, err := l.rdb.ZCount(ctx, key, "("+strconv.FormatInt(t.UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("quota: count %s: %w", key, err)
	}
	return int(n), nil
}

// Waiting lists the tenants refused lately (they want more of a contended
// fleet).
func (l *Limiter) Waiting(ctx context.Context) ([]string, error) {
	t, err := l.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("quota: time: %w", err)
	}
	out, err := l.rdb.ZRangeByScore(ctx, l.k.demand(), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(t.UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("quota: waiting tenants: %w", err)
	}
	return out, nil
}

// AcquireRun takes (or keeps, moving its expiry on) one of the tenant's
// running-job slots for job, fleet-wide. It is not ok when the tenant
// already runs maxJobs jobs (0: no cap); fresh says this call took the
// slot (false: the job held it already, perhaps through another
// coordinator, which a caller losing the job's lease must not release).
func (l *Limiter) AcquireRun(ctx context.Context, tenant, job string, maxJobs int, lifetime time.Duration) (ok, fresh bool, err error) {
	res, err := runAcquireScript.Run(ctx, l.rdb, []string{l.k.running(tenant)}, job, maxJobs, max(lifetime.Milliseconds(), 1)).Int64Slice()
	if err != nil {
		return false, false, fmt.Errorf("quota: running slot of %s/%s: %w", tenant, job, err)
	}
	if len(res) != 3 {
		return false, false, fmt.Errorf("%w: run_acquire returned %d values", ErrReply, len(res))
	}
	return res[0] == 1, res[2] == 1, nil
}

// ReleaseRun gives job's running slot back.
func (l *Limiter) ReleaseRun(ctx context.Context, tenant, job string) error {
	if err := l.rdb.ZRem(ctx, l.k.running(tenant), job).Err(); err != nil {
		return fmt.Errorf("quota: release running slot of %s/%s: %w", tenant, job, err)
	}
	return nil
}

// Member names a sample index of a job's open step: the same for every
// attempt at the index, so an index published again holds one place.
func Member(job string, step, epoch int64, index int) string {
	var b strings.Builder
	b.Grow(len(job) + 24)
	b.WriteString(job)
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(step, 10))
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(epoch, 10))
	b.WriteByte('/')
	b.WriteString(strconv.Itoa(index))
	return b.String()
}
