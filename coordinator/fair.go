package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// Fair sharing among tenants: which open job a coordinator takes next,
// each tenant's running-job quota, and time slicing (schedule.go calls
// these); admission of sample requests is admit.go.

// fairness is how the coordinator shares the fleet among tenants: their
// quota records (a watch-fed cache), the limiter's counters in Redis, and
// the jobs running here with when each started.
type fairness struct {
	quotas  *quota.Store
	limiter *store.Limiter
	// lifetime of an admitted request's place in flight unless refreshed
	// (3 × LeaseTTL: a dead coordinator's places lapse), wait of a
	// refusal's waiting entry (10 × AdmitRetry, at least 250ms).
	lifetime, wait time.Duration

	mu        sync.Mutex
	slots     map[string]*slot     // jobs running here, by registry key
	served    map[string]time.Time // when a job of each tenant last started here
	nextSlice time.Time            // slicing looks again no sooner (it reads leases)
}

// slot is a job running on this coordinator.
type slot struct {
	tenant  string
	started time.Time
	runSlot bool        // holds one of the tenant's running-job slots in Redis
	yield   atomic.Bool // hand the job back at its next step boundary
}

func newFairness(st *store.Store, cfg Config) *fairness {
	return &fairness{
		limiter:  store.NewLimiter(st.Client(), st.Prefix()),
		quotas:   quota.NewKV(nil),
		lifetime: 3 * cfg.LeaseTTL,
		wait:     max(10*cfg.AdmitRetry, 250*time.Millisecond),
		slots:    map[string]*slot{},
		served:   map[string]time.Time{},
	}
}

// startFair binds the quota and price buckets, loads the limiter's
// scripts and starts both watches; stop ends them and waits for them.
func (c *Coordinator) startFair(ctx context.Context, topo *topology.Topology) (stop func(), err error) {
	c.fair.quotas = quota.New(topo)
	c.prices = pricetable.NewCache(topo.Prices)
	if err := c.fair.limiter.Load(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stop = func() {
		cancel()
		c.fair.quotas.Wait()
		c.prices.Wait()
	}
	if err := c.fair.quotas.Start(wctx); err != nil {
		stop()
		return nil, fmt.Errorf("coordinator: quotas: %w", err)
	}
	if err := c.prices.Start(wctx); err != nil {
		stop()
		return nil, fmt.Errorf("coordinator: prices: %w", err)
	}
	return stop, nil
}

// tenantQuota is the tenant's quota record (from the watch-fed cache).
func (c *Coordinator) tenantQuota(ctx context.Context, tenant string) (schemas.TenantQuota, error) {
	return c.fair.quotas.Get(ctx, tenant)
}

func (f *fairness) slotOf(key string) *slot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slots[key]
}

func (f *fairness) add(key, tenant string, runSlot bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.slots[key] = &slot{tenant: tenant, started: now, runSlot: runSlot}
	f.served[tenant] = now
}

// remove forgets a job that stopped here and, with giveBack, gives its
// running-job slot back (without: the job's lease was lost, and the slot,
// named by the job, is its new owner's; at worst it lapses).
func (f *fairness) remove(ctx context.Context, key, tenant, job string, giveBack bool, log *slog.Logger) {
	f.mu.Lock()
	s := f.slots[key]
	delete(f.slots, key)
	f.mu.Unlock()
	if giveBack && s != nil && s.runSlot {
		f.releaseRun(ctx, tenant, job, log)
	}
}

// Outcomes of acquireRun.
const (
	slotNone    = iota // the tenant has no running-job quota: nothing taken
	slotHeld           // one of its slots is taken (or kept: a previous owner's)
	slotRefused        // it runs its quota of jobs already
)

// full reports whether the tenant plainly runs its quota of jobs
// fleet-wide already (no round trip when it has no quota; an error says
// no: acquireRun decides).
func (f *fairness) full(ctx context.Context, tenant string) bool {
	q, _ := f.quotas.Cached(tenant)
	if q.MaxRunningJobs == 0 {
		return false
	}
	n, err := f.limiter.Running(ctx, tenant)
	return err == nil && n >= q.MaxRunningJobs
}

// acquireRun takes one of the tenant's running-job slots for a job whose
// lease this coordinator holds, when the tenant has a quota (no round trip
// when it has none).
func (f *fairness) acquireRun(ctx context.Context, tenant, job string, life time.Duration) (int, error) {
	q, _ := f.quotas.Cached(tenant)
	if q.MaxRunningJobs == 0 {
		return slotNone, nil
	}
	ok, _, err := f.limiter.AcquireRun(ctx, tenant, job, q.MaxRunningJobs, life)
	switch {
	case err != nil:
		return slotNone, err
	case !ok:
		return slotRefused, nil
	}
	return slotHeld, nil
}

func (f *fairness) releaseRun(ctx context.Context, tenant, job string, log *slog.Logger) {
	if err := f.limiter.ReleaseRun(ctx, tenant, job); err != nil {
		log.Warn("release the job's running slot; it lapses instead", "err", err)
	}
}

// refreshRun keeps a running job's slot alive with its lease (and takes
// one for a job that started before its tenant had a quota: it runs, so
// it counts).
func (f *fairness) refreshRun(ctx context.Context, tenant, job string, life time.Duration, log *slog.Logger) {
	key := bus.JobKey(tenant, job)
	f.mu.Lock()
	s := f.slots[key]
	f.mu.Unlock()
	q, _ := f.quotas.Cached(tenant)
	if s == nil || !s.runSlot && q.MaxRunningJobs == 0 {
		return
	}
	if _, _, err := f.limiter.AcquireRun(ctx, tenant, job, 0, life); err != nil {
		log.Warn("refresh the job's running slot", "err", err)
		return
	}
	f.mu.Lock()
	s.runSlot = true
	f.mu.Unlock()
}

// fairQueue is the order open jobs are taken in: the tenant with the
// fewest jobs running here relative to its weight first (ties: the one
// served longest ago), and within a tenant the highest priority, then the
// earliest submitted.
type fairQueue struct {
	f       *fairness
	tenants map[string]*tenantQueue
}

type tenantQueue struct {
	weight  float64
	running int
	served  time.Time
	jobs    []schemas.JobRecord // best first
}

// queue orders the open jobs that are neither paused nor running here.
func (f *fairness) queue(open map[string]schemas.JobRecord, running func(string) bool) *fairQueue {
	q := &fairQueue{f: f, tenants: map[string]*tenantQueue{}}
	f.mu.Lock()
	for _, s := range f.slots {
		q.tenant(s.tenant).running++
	}
	for t, tq := range q.tenants {
		tq.served = f.served[t]
	}
	f.mu.Unlock()
	for key, rec := range open {
		if rec.Control == schemas.ControlPause || running(key) {
			continue
		}
		tq := q.tenant(rec.Tenant)
		tq.jobs = append(tq.jobs, rec)
	}
	f.mu.Lock()
	for t, tq := range q.tenants {
		tq.served = f.served[t]
		slices.SortFunc(tq.jobs, func(a, b schemas.JobRecord) int {
			if a.Spec.Priority != b.Spec.Priority {
				return b.Spec.Priority - a.Spec.Priority
			}
			if c := a.Spec.SubmittedAt.Compare(b.Spec.SubmittedAt); c != 0 {
				return c
			}
			return strings.Compare(a.JobID, b.JobID)
		})
	}
	f.mu.Unlock()
	return q
}

func (q *fairQueue) tenant(t string) *tenantQueue {
	tq := q.tenants[t]
	if tq == nil {
		qt, _ := q.f.quotas.Cached(t)
		tq = &tenantQueue{weight: qt.EffectiveWeight()}
		q.tenants[t] = tq
	}
	return tq
}

// share is how many jobs the tenant runs here per unit of weight.
func (tq *tenantQueue) share() float64 { return float64(tq.running) / tq.weight }

// order lists the tenants with jobs waiting, the first to serve first.
func (q *fairQueue) order() []string {
	var ts []string
	for t, tq := range q.tenants {
		if len(tq.jobs) > 0 {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b string) int {
		ta, tb := q.tenants[a], q.tenants[b]
		if sa, sb := ta.share(), tb.share(); sa != sb {
			if sa < sb {
				return -1
			}
			return 1
		}
		if c := ta.served.Compare(tb.served); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return ts
}

// next pops the job to try next.
func (q *fairQueue) next() (string, schemas.JobRecord, bool) {
	ts := q.order()
	if len(ts) == 0 {
		return "", schemas.JobRecord{}, false
	}
	tq := q.tenants[ts[0]]
	rec := tq.jobs[0]
	tq.jobs = tq.jobs[1:]
	return bus.JobKey(rec.Tenant, rec.JobID), rec, true
}

// started counts a job of tenant started.
func (q *fairQueue) started(tenant string) {
	tq := q.tenant(tenant)
	tq.running++
	tq.served = time.Now()
}

// drop leaves tenant's jobs out of this pass.
func (q *fairQueue) drop(tenant string) { q.tenant(tenant).jobs = nil }

// maxLeaseChecks bounds the lease reads of one slicing pass.
const maxLeaseChecks = 8

// slice hands back, at its next step boundary, the longest-running job of
// the tenant most over its share here, once it ran at least minRun, when
// a job of a tenant below that share waits for a coordinator (its lease
// is free): so one tenant's long job cannot starve another's, even with
// MaxJobs 1. One hand-back at a time.
func (f *fairness) slice(ctx context.Context, topo *topology.Topology, q *fairQueue, minRun time.Duration, log *slog.Logger) {
	waiting := q.order()
	if len(waiting) == 0 || minRun < 0 {
		return
	}
	f.mu.Lock()
	var victim *slot
	var victimKey string
	var top float64
	now := time.Now()
	if now.Before(f.nextSlice) {
		f.mu.Unlock()
		return
	}
	f.nextSlice = now.Add(min(minRun/4, 250*time.Millisecond))
	for _, s := range f.slots {
		if s.yield.Load() {
			f.mu.Unlock()
			return // one at a time
		}
	}
	for key, s := range f.slots {
		tq := q.tenant(s.tenant)
		if now.Sub(s.started) < minRun {
			continue
		}
		if sh := tq.share(); victim == nil || sh > top || sh == top && s.started.Before(victim.started) {
			victim, victimKey, top = s, key, sh
		}
	}
	f.mu.Unlock()
	if victim == nil {
		return
	}
	checks := 0
	for _, t := range waiting {
		tq := q.tenants[t]
		if t == victim.tenant || tq.share() >= top {
			continue
		}
		for _, rec := range tq.jobs {
			if checks++; checks > maxLeaseChecks {
				return
			}
			if leaseFree(ctx, topo, rec) {
				log.Info("time slice: handing a job back for another tenant's waiting job",
					"job", victimKey, "tenant", victim.tenant, "ran", now.Sub(victim.started).Round(time.Millisecond),
					"waiting_job", bus.JobKey(rec.Tenant, rec.JobID))
				victim.yield.Store(true)
				return
			}
		}
	}
}

// leaseFree reports whether nobody holds rec's job (it waits for a
// coordinator): no lease, or one expired or released, and not held off
// for a retry.
func leaseFree(ctx context.Context, topo *topology.Topology, rec schemas.JobRecord) bool {
	e, err := topo.Leases.Get(ctx, bus.JobKey(rec.Tenant, rec.JobID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return true
	}
	if err != nil {
		return false
	}
	var l schemas.Lease
	if schemas.Decode(e.Value(), &l) != nil {
		return false
	}
	return time.Now().After(l.ExpiresAt)
}
