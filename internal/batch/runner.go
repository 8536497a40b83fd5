package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/lease"
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
	topo   *bus.Topology
	cfg    RunnerConfig
	log    *slog.Logger
	leases *lease.Manager

	mu      sync.Mutex
	running map[string]*fedBatch // the batches this runner feeds, by record key
}

// NewRunner returns a Runner feeding topo's batches.
func NewRunner(topo *bus.Topology, cfg RunnerConfig) (*Runner, error) {
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
	return &Runner{topo: topo, cfg: cfg, log: cfg.Logger.With("runner", cfg.Owner), leases: m, running: map[string]*fedBatch{}}, nil
}

// Run feeds batches until ctx is done, then stops every batch it feeds
// (between two jobs) and releases their leases, so another runner resumes
// them at once. It returns when all have stopped.
func (r *Runner) Run(ctx context.Context) error {
	open := map[string]schemas.BatchRecord{} // batches not ended, by record key
	leases := map[string]schemas.Lease{}     // their leases, by record key
	waitSince := map[string]time.Time{}      // when each was first seen waiting
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
			var rec schemas.BatchRecord
			if rk, ok := strings.CutSuffix(key, leaseSuffix); ok {
				var l schemas.Lease
				if e.Operation() == jetstream.KeyValuePut && schemas.Decode(e.Value(), &l) == nil {
					leases[rk] = l
				} else {
					delete(leases, rk)
				}
				continue
			}
			if e.Operation() != jetstream.KeyValuePut || schemas.Decode(e.Value(), &rec) != nil || schemas.BatchTerminal(rec.State) {
				delete(open, key)
				continue
			}
			_, known := open[key]
			open[key] = rec
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

// look chooses (fair.go) which waiting batches to take and which fed ones
// to hand back, hands those back and starts feeding these. A batch waits
// when it is open and no runner holds its lease (this runner feeds none of
// its own leftovers either).
func (r *Runner) look(ctx context.Context, wg *sync.WaitGroup, open map[string]schemas.BatchRecord,
	leases map[string]schemas.Lease, waitSince map[string]time.Time) {
	now := time.Now()
	// An expired (or released) lease is no lease: forget it, so the map
	// holds the live leases only.
	maps.DeleteFunc(leases, func(_ string, l schemas.Lease) bool { return !now.Before(l.ExpiresAt) })
	tenants := map[string]bool{}
	v := slotView{max: r.cfg.MaxBatches, leaving: map[string]bool{}, patient: map[string]bool{}}
	r.mu.Lock()
	for key, rec := range open {
		tenants[rec.Tenant] = true
		if r.running[key] != nil {
			continue
		}
		if l, ok := leases[key]; ok && l.Owner != r.cfg.Owner {
			continue
		}
		v.waiting = append(v.waiting, batchRef{key: key, tenant: rec.Tenant, created: rec.CreatedAt})
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
		rec := open[b.key]
		l, err := r.leases.Acquire(ctx, rec.Tenant, rec.ID+leaseSuffix)
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
			r.own(ctx, l, b.key, rec.Tenant, rec.ID)
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
	switch {
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
