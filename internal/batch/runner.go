package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	running map[string]bool // record keys of the batches this runner feeds
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
	return &Runner{topo: topo, cfg: cfg, log: cfg.Logger.With("runner", cfg.Owner), leases: m, running: map[string]bool{}}, nil
}

// Run feeds batches until ctx is done, then stops every batch it feeds
// (between two jobs) and releases their leases, so another runner resumes
// them at once. It returns when all have stopped.
func (r *Runner) Run(ctx context.Context) error {
	open := map[string]schemas.BatchRecord{} // batches not ended, by record key
	var wg sync.WaitGroup
	defer wg.Wait()
	var (
		watcher jetstream.KeyWatcher
		updates <-chan jetstream.KeyValueEntry
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
				watcher, updates = w, w.Updates()
				clear(open)
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
				break // every current record seen: look now
			}
			key := e.Key()
			var rec schemas.BatchRecord
			if strings.HasSuffix(key, leaseSuffix) {
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
		for key, rec := range open {
			if !r.take(key) {
				continue
			}
			l, err := r.leases.Acquire(ctx, rec.Tenant, rec.ID+leaseSuffix)
			if err != nil {
				r.done(key)
				if !errors.Is(err, lease.ErrHeld) && ctx.Err() == nil {
					r.log.Warn("take batch lease", "key", key, "err", err)
				}
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer r.done(key)
				r.own(ctx, l, rec.Tenant, rec.ID)
			}()
		}
	}
}

// take marks key as fed by this runner if it has room and does not feed it
// already.
func (r *Runner) take(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[key] || len(r.running) >= r.cfg.MaxBatches {
		return false
	}
	r.running[key] = true
	return true
}

func (r *Runner) done(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, key)
}

// errLeaseLost stops a batch whose lease another runner may hold now.
var errLeaseLost = errors.New("batch lease lost")

// own feeds a batch this runner holds the lease of, renewing the lease
// meanwhile, and releases it at the end.
func (r *Runner) own(ctx context.Context, l *lease.Lease, tenant, id string) {
	log := r.log.With("tenant", tenant, "batch", id, "token", l.Token)
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
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
