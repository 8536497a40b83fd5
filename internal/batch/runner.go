package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/lease"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/throttle"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// RunnerConfig configures a Runner. Zero fields take the defaults.
type RunnerConfig struct {
	// Owner names this runner in batch leases: the coordinator's id
	// (required, unique in the fleet).
	Owner string
	// LeaseTTL is how long a batch stays with a runner that stopped
	// renewing its lease (renewed every third of it): a dead runner's
	// batches are taken over within LeaseTTL + ScanInterval. Default 10s.
	LeaseTTL time.Duration
	// ScanInterval is how often the runner looks for batches without a
	// live runner. Default 1s.
	ScanInterval time.Duration
	// CheckInterval is how often a batch's runner reads the reports of
	// its pending jobs itself, besides watching for them (a safety net
	// for a missed update, and how a job that ended without a report is
	// found). Default 10s.
	CheckInterval time.Duration
	// MaxBatches is how many batches this runner feeds at once. Default 8.
	MaxBatches int
	// RefusedLogEvery spaces the log lines of refused records (owner.go):
	// each is counted, and logged at most this often. Default 10s.
	RefusedLogEvery time.Duration
	// Metrics counts refused records (maker_records_refused_total). Nil:
	// not counted there (Runner.Refused still counts them).
	Metrics *metrics.Coordinator
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
}

func (c *RunnerConfig) defaults() error {
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = time.Second
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = 10 * time.Second
	}
	if c.MaxBatches == 0 {
		c.MaxBatches = 8
	}
	if c.RefusedLogEvery == 0 {
		c.RefusedLogEvery = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Owner == "" || c.LeaseTTL < 300*time.Millisecond || c.ScanInterval < 10*time.Millisecond ||
		c.CheckInterval < 10*time.Millisecond || c.MaxBatches < 1 {
		return fmt.Errorf("batch: runner needs an owner, LeaseTTL >= 300ms, ScanInterval and CheckInterval >= 10ms, MaxBatches >= 1")
	}
	return nil
}

// Runner feeds batches' jobs into the fleet: one per coordinator, each
// batch fed by the one runner holding its lease.
type Runner struct {
	topo   *topology.Topology
	cfg    RunnerConfig
	log    *slog.Logger
	leases *lease.Manager
	// inputs keeps lines' big params by reference (jobs.Externalize).
	inputs *inputs.Store

	mu      sync.Mutex
	running map[string]*fedBatch // the batches this runner feeds, by record key
	refused map[string]uint64    // record keys refused (owner.go), with the revision refused

	refusedN   atomic.Int64
	refusedLog throttle.Every
}

// openBatch is a batch not ended, as the runner's watch last saw it.
type openBatch struct {
	rec    schemas.BatchRecord
	tenant string // the key's, which rec agrees with
	id     string
	rev    uint64
	// created is when the server stored the first revision of the record
	// this runner saw: the batch's age for the fair choice (fair.go), which
	// the record's own created_at, written by whoever wrote it, is not.
	created time.Time
}

// NewRunner returns a Runner feeding topo's batches.
func NewRunner(topo *topology.Topology, cfg RunnerConfig) (*Runner, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if topo == nil || topo.Batches == nil {
		return nil, fmt.Errorf("batch: runner needs a topology with a batches bucket")
	}
	m, err := lease.NewManager(topo.Batches, cfg.Owner, cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	return &Runner{topo: topo, cfg: cfg, log: cfg.Logger.With("runner", cfg.Owner), leases: m, inputs: inputs.New(topo.JS, topo.NS, inputs.Config{}), running: map[string]*fedBatch{},
		refused: map[string]uint64{}, refusedLog: throttle.Every{Interval: cfg.RefusedLogEvery}}, nil
}

// Refused is how many batch records (and stored lines) this runner
// refused because they disagree with where they are stored (owner.go);
// each record revision is counted once.
func (r *Runner) Refused() int64 { return r.refusedN.Load() }

// refuse counts and logs (at most every RefusedLogEvery) a refused
// record, once per revision of its key; tenant is the key's.
func (r *Runner) refuse(key, tenant string, ref *refusal) {
	r.mu.Lock()
	if rev, seen := r.refused[key]; seen && rev == ref.rev {
		r.mu.Unlock()
		return
	}
	r.refused[key] = ref.rev
	r.mu.Unlock()
	r.countRefused(tenant, ref)
	if r.refusedLog.Allow() {
		r.log.Warn("batch record refused: it disagrees with where it is stored; it is not fed",
			"key", key, "reason", ref.reason, "why", ref.detail, "refused_so_far", r.refusedN.Load())
	}
}

// countRefused counts a refusal without remembering its key (a stored
// line's, counted failed in its own batch).
func (r *Runner) countRefused(tenant string, ref *refusal) {
	if tenant == "" {
		tenant = "unknown"
	}
	r.refusedN.Add(1)
	r.cfg.Metrics.RecordRefused(tenant, ref.reason)
}

// forget drops what the runner remembers of a refused key (deleted).
func (r *Runner) forget(key string) {
	r.mu.Lock()
	delete(r.refused, key)
	r.mu.Unlock()
}

// Run feeds batches until ctx is done, then stops every batch it feeds
// (between two jobs) and releases their leases, so another runner resumes
// them at once. It returns when all have stopped.
func (r *Runner) Run(ctx context.Context) error {
	open := map[string]openBatch{}       // batches not ended, by record key
	leases := map[string]schemas.Lease{} // their leases, by record key
	waitSince := map[string]time.Time{}  // when each was first seen waiting
	var wg sync.WaitGroup
	defer wg.Wait()
	var (
		watcher  jetstream.KeyWatcher
		updates  <-chan jetstream.KeyValueEntry
		replayed bool // every record was seen since the watch started: choices see them all
	)
	defer func() {
		if watcher != nil {
			_ = watcher.Stop()
		}
	}()
	tick := time.NewTicker(r.cfg.ScanInterval)
	defer tick.Stop()
	for {
		if watcher == nil {
			w, err := r.topo.Batches.WatchAll(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				r.log.Warn("watch the batches", "err", err)
			default:
				watcher, updates, replayed = w, w.Updates(), false
				clear(open)
				clear(leases)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-updates:
			if !ok {
				watcher, updates = nil, nil
				continue
			}
			if e == nil {
				replayed = true
				break // every current record seen: look now
			}
			key := e.Key()
			if rk, ok := strings.CutSuffix(key, leaseSuffix); ok {
				var l schemas.Lease
				if e.Operation() == jetstream.KeyValuePut && schemas.Decode(e.Value(), &l) == nil {
					leases[rk] = l
				} else {
					delete(leases, rk)
				}
				continue
			}
			b, ok := r.opened(e)
			if !ok {
				delete(open, key)
				continue
			}
			prev, known := open[key]
			if known {
				b.created = prev.created
			}
			open[key] = b
			if known {
				continue
			}
			// A new batch: look now.
		case <-tick.C:
		}
		if replayed {
			r.look(ctx, &wg, open, leases, waitSince)
		}
	}
}

// opened reads a record update: the open batch it holds, or false (a
// deleted, unreadable or ended record, or one refused: owner.go). The
// batch's tenant and id are the key's; a body naming others is refused.
func (r *Runner) opened(e jetstream.KeyValueEntry) (openBatch, bool) {
	key := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		r.forget(key)
		return openBatch{}, false
	}
	var rec schemas.BatchRecord
	if schemas.Decode(e.Value(), &rec) != nil {
		return openBatch{}, false
	}
	tenant, id, ok := recordRef(key)
	if !ok {
		r.refuse(key, tenant, &refusal{reason: refusedKey, rev: e.Revision(), detail: fmt.Sprintf("key %q names no batch (<tenant>.<batch>)", key)})
		return openBatch{}, false
	}
	if ref := foreign(tenant, id, &rec, e.Revision()); ref != nil {
		r.refuse(key, tenant, ref)
		return openBatch{}, false
	}
	if schemas.BatchTerminal(rec.State) {
		return openBatch{}, false
	}
	return openBatch{rec: rec, tenant: tenant, id: id, rev: e.Revision(), created: e.Created()}, true
}

// look chooses (fair.go) which waiting batches to take and which fed ones
// to hand back, hands those back and starts feeding these. A batch waits
// when it is open and no runner holds its lease (this runner feeds none of
// its own leftovers either).
func (r *Runner) look(ctx context.Context, wg *sync.WaitGroup, open map[string]openBatch,
	leases map[string]schemas.Lease, waitSince map[string]time.Time) {
	now := time.Now()
	// An expired (or released) lease is no lease: forget it, so the map
	// holds the live leases only.
	maps.DeleteFunc(leases, func(_ string, l schemas.Lease) bool { return !now.Before(l.ExpiresAt) })
	tenants := map[string]bool{}
	v := slotView{max: r.cfg.MaxBatches, leaving: map[string]bool{}, patient: map[string]bool{}}
	r.mu.Lock()
	for key, b := range open {
		if got, ok := r.refused[key]; ok && got == b.rev {
			continue // its lines disagree with it (checked when first fed)
		}
		tenants[b.tenant] = true
		if r.running[key] != nil {
			continue
		}
		if l, ok := leases[key]; ok && l.Owner != r.cfg.Owner {
			continue
		}
		v.waiting = append(v.waiting, batchRef{key: key, tenant: b.tenant, created: b.created})
	}
	v.tenants = len(tenants)
	for key, b := range r.running {
		v.fed = append(v.fed, b.batchRef)
		if b.leaving {
			v.leaving[key] = true
		}
	}
	// Patient: waiting for a scan interval at least, so a runner with room
	// has taken it if there is one.
	seen := map[string]bool{}
	for _, b := range v.waiting {
		seen[b.key] = true
		if since, ok := waitSince[b.key]; !ok {
			waitSince[b.key] = now
		} else if now.Sub(since) >= r.cfg.ScanInterval {
			v.patient[b.key] = true
		}
	}
	maps.DeleteFunc(waitSince, func(key string, _ time.Time) bool { return !seen[key] })
	p := choose(v)
	for _, b := range p.handBack {
		fb := r.running[b.key]
		fb.leaving = true
		if fb.stop != nil {
			fb.stop(errHandBack)
		}
	}
	for _, b := range p.take {
		r.running[b.key] = &fedBatch{batchRef: b}
	}
	r.mu.Unlock()
	for _, b := range p.handBack {
		r.log.Info("handing a batch back: its tenant has more than its share of this runner while another tenant's batch waits",
			"key", b.key, "share", v.share())
	}
	for _, b := range p.take {
		ob := open[b.key]
		l, err := r.leases.Acquire(ctx, ob.tenant, ob.id+leaseSuffix)
		if err != nil {
			r.done(b.key)
			if !errors.Is(err, lease.ErrHeld) && ctx.Err() == nil {
				r.log.Warn("take batch lease", "key", b.key, "err", err)
			}
			continue
		}
		delete(waitSince, b.key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.done(b.key)
			r.own(ctx, l, b.key, ob.tenant, ob.id)
		}()
	}
}

// fedBatch is a batch this runner feeds.
type fedBatch struct {
	batchRef
	leaving bool                    // handed back, stopping
	stop    context.CancelCauseFunc // stops its feeding, once it runs
}

// feeding registers stop as the way to stop key's feeding; false if the
// batch was handed back meanwhile.
func (r *Runner) feeding(key string, stop context.CancelCauseFunc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fb := r.running[key]
	if fb == nil || fb.leaving {
		return false
	}
	fb.stop = stop
	return true
}

func (r *Runner) done(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, key)
}

// errHandBack stops a batch this runner hands back (fair.go).
var errHandBack = errors.New("batch handed back")

// errLeaseLost stops a batch whose lease another runner may hold now.
var errLeaseLost = errors.New("batch lease lost")

// own feeds a batch this runner holds the lease of, renewing the lease
// meanwhile, and releases it at the end.
func (r *Runner) own(ctx context.Context, l *lease.Lease, key, tenant, id string) {
	log := r.log.With("tenant", tenant, "batch", id, "token", l.Token)
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !r.feeding(key, cancel) {
		cancel(errHandBack)
	}
	var hb sync.WaitGroup
	hb.Add(1)
	go func() {
		defer hb.Done()
		r.renew(bctx, cancel, l, log)
	}()
	f := &feeder{r: r, tenant: tenant, id: id, log: log, recs: records(r.topo)}
	err := f.run(bctx)
	cancel(nil)
	hb.Wait()
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		// Not taken again until its record changes: counted once and
		// logged at most every RefusedLogEvery, not at every scan.
		r.refuse(key, tenant, ref)
	case errors.Is(context.Cause(bctx), errLeaseLost):
		log.Warn("lost the batch's lease; another runner feeds it now", "err", context.Cause(bctx))
		return
	case errors.Is(context.Cause(bctx), errHandBack):
		log.Info("handed the batch back; it is fed again from its cursor")
	case err != nil && ctx.Err() == nil:
		log.Error("feeding the batch stopped; it is taken up again", "err", err)
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	if err := r.leases.Release(sctx, l, 0); err != nil {
		log.Warn("release batch lease; it lapses after its TTL instead", "err", err)
	}
}

// renew keeps l alive every third of its TTL until ctx is done; a lost
// lease, or one not renewed for two thirds of its TTL, stops the batch.
func (r *Runner) renew(ctx context.Context, stop context.CancelCauseFunc, l *lease.Lease, log *slog.Logger) {
	t := time.NewTicker(r.cfg.LeaseTTL / 3)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL/3)
		err := r.leases.Renew(rctx, l)
		cancel()
		switch {
		case err == nil:
			renewed = time.Now()
		case errors.Is(err, lease.ErrLost):
			stop(fmt.Errorf("%w: %v", errLeaseLost, err))
			return
		default:
			log.Warn("renew batch lease", "err", err)
			if time.Since(renewed) > r.cfg.LeaseTTL*2/3 {
				stop(fmt.Errorf("%w: not renewed for %v: %v", errLeaseLost, time.Since(renewed).Round(time.Millisecond), err))
				return
			}
		}
	}
}
