package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/lease"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Config configures a Coordinator.
type Config struct {
	// ID names this coordinator in leases and job status; it must be
	// unique in the fleet. Default host-pid.
	ID string
	// Tasks resolves job tasks (required).
	Tasks *task.Registry
	// MaxJobs is how many jobs this coordinator runs at once. Default 16.
	MaxJobs int
	// StatusInterval is how often a running job's status is published.
	// Default 250ms.
	StatusInterval time.Duration
	// LeaseTTL is how long a job stays owned by a coordinator that stopped
	// renewing (killed, paused, cut off); the lease is renewed every third
	// of it. A dead owner's job is taken over within LeaseTTL +
	// ScanInterval. Default 10s.
	LeaseTTL time.Duration
	// ScanInterval is how often the coordinator looks for jobs without a
	// live owner. Default 1s.
	ScanInterval time.Duration
	// CheckpointEvery is how many decided steps may pass between
	// checkpoints: a new owner reads at most this many journal entries to
	// resume. Default 1000.
	CheckpointEvery int
	// JobRetryDelay is the wait before a failed job is tried again; it
	// doubles with each failure, up to 5 minutes. After MaxJobAttempts
	// failures the job gets a failed report. Defaults 5s and 5.
	JobRetryDelay  time.Duration
	MaxJobAttempts int
	// Bus configures the streams when this coordinator creates them.
	Bus bus.Config
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger

	// CrashAt is a fault-injection hook for the fault suite: the process
	// exits at once (as if killed) when a job reaches the named point; see
	// crash.go. Empty in production.
	CrashAt string
}

func (c *Config) defaults() error {
	if c.Tasks == nil {
		return fmt.Errorf("%w: Tasks is required", ErrConfig)
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("coordinator-%s-%d", host, os.Getpid())
	}
	if c.MaxJobs == 0 {
		c.MaxJobs = 16
	}
	if c.MaxJobs < 1 {
		return fmt.Errorf("%w: MaxJobs must be >= 1", ErrConfig)
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = 250 * time.Millisecond
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = time.Second
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = 1000
	}
	if c.JobRetryDelay == 0 {
		c.JobRetryDelay = 5 * time.Second
	}
	if c.MaxJobAttempts == 0 {
		c.MaxJobAttempts = 5
	}
	if c.JobRetryDelay < 0 || c.MaxJobAttempts < 1 {
		return fmt.Errorf("%w: JobRetryDelay must be >= 0 and MaxJobAttempts >= 1", ErrConfig)
	}
	if c.StatusInterval < 10*time.Millisecond {
		return fmt.Errorf("%w: StatusInterval must be >= 10ms", ErrConfig)
	}
	if c.LeaseTTL < 300*time.Millisecond || c.ScanInterval < 10*time.Millisecond || c.CheckpointEvery < 1 {
		return fmt.Errorf("%w: LeaseTTL must be >= 300ms, ScanInterval >= 10ms, CheckpointEvery >= 1", ErrConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Coordinator takes jobs from the job stream into the job registry, and
// runs the registered jobs it holds the lease of.
type Coordinator struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *store.Store
	log    *slog.Logger
	leases *lease.Manager

	mu      sync.Mutex
	running map[string]bool // registry keys of the jobs this coordinator runs
}

// New returns a Coordinator using nc for NATS and st for the tally.
func New(nc *nats.Conn, st *store.Store, cfg Config) (*Coordinator, error) {
	if nc == nil || st == nil {
		return nil, fmt.Errorf("%w: nil NATS connection or store", ErrConfig)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("coordinator: jetstream: %w", err)
	}
	return &Coordinator{cfg: cfg, nc: nc, js: js, store: st, log: cfg.Logger.With("coordinator", cfg.ID), running: map[string]bool{}}, nil
}

// Run takes and runs jobs until ctx is done. On return every job it ran
// has stopped at a step boundary and its lease is released, so another
// coordinator resumes it at once.
func (c *Coordinator) Run(ctx context.Context) error {
	topo, err := bus.Ensure(ctx, c.js, c.cfg.Bus)
	if err != nil {
		return err
	}
	if c.leases, err = lease.NewManager(topo.Leases, c.cfg.ID, c.cfg.LeaseTTL); err != nil {
		return err
	}
	if err := c.store.Load(ctx); err != nil {
		return err
	}
	cons, err := c.js.Consumer(ctx, topo.NS.JobsStream(), bus.ConsumerCoordinators)
	if err != nil {
		return fmt.Errorf("coordinator: job consumer: %w", err)
	}
	c.log.Info("coordinator started", "max_jobs", c.cfg.MaxJobs, "lease_ttl", c.cfg.LeaseTTL)

	// Subscribed before anything runs, so no advisory goes unheard.
	events := make(chan *nats.Msg, 256)
	advisories, err := c.nc.ChanQueueSubscribe(bus.MaxDeliveriesAdvisory(topo.NS.SamplesStream(), bus.ConsumerVoters), "coordinators", events)
	if err != nil {
		return fmt.Errorf("coordinator: subscribe to max-deliveries advisories: %w", err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	poke := make(chan struct{}, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.intake(ctx, topo, cons, poke)
	}()
	go func() {
		defer wg.Done()
		c.deadLetters(ctx, topo, advisories, events)
	}()
	c.schedule(ctx, topo, poke, &wg)
	return nil
}

// jobPullWait bounds one fetch of a job: an idle coordinator asks again
// this often, and a stopping one waits at most this long.
const jobPullWait = 250 * time.Millisecond

// intake moves submitted jobs from the job stream into the registry, where
// every coordinator can see them; a message is acked once its job is
// registered (or found registered already). It pulls through a bus.Worker
// until ctx is done.
func (c *Coordinator) intake(ctx context.Context, topo *bus.Topology, cons jetstream.Consumer, poke chan<- struct{}) {
	w, err := bus.NewWorker(c.js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if err := c.register(ctx, topo, msg); err != nil {
			c.log.Warn("register job; will retry", "err", err)
			return bus.Retry(err, time.Second)
		}
		select {
		case poke <- struct{}{}:
		default:
		}
		return bus.ErrSettled // register acked or terminated it
	}, bus.WorkerConfig{
		// Gone (reset by an operator, lost by a server): create it again,
		// so intake resumes on its own.
		Recreate: func(ctx context.Context) (jetstream.Consumer, error) {
			if _, err := bus.Ensure(ctx, c.js, c.cfg.Bus); err != nil {
				return nil, err
			}
			return c.js.Consumer(ctx, topo.NS.JobsStream(), bus.ConsumerCoordinators)
		},
		FetchWait: jobPullWait,
		// A registration takes milliseconds: one in hand at shutdown gets
		// a second, then is handed back.
		SoftStop: time.Second,
		Logger:   c.log,
	})
	if err != nil {
		c.log.Error("job intake", "err", err)
		return
	}
	_ = w.Run(ctx)
}

// register settles one job message: a valid new job is registered, a
// resubmission of a registered job is dropped, and a job the registry or
// the task refuses is terminated (with a failed report when it has a
// readable id).
func (c *Coordinator) register(ctx context.Context, topo *bus.Topology, msg jetstream.Msg) error {
	var spec schemas.JobSpec
	if err := schemas.Decode(msg.Data(), &spec); err != nil {
		c.log.Error("dropping malformed job message", "err", err)
		_ = msg.TermWithReason("malformed job spec")
		return nil
	}
	log := c.log.With("tenant", spec.Tenant, "job", spec.JobID)
	rec := schemas.JobRecord{
		Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: spec.Tenant, JobID: spec.JobID, Spec: spec,
		Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: time.Now().UTC(),
	}
	var reason string
	if _, err := c.cfg.Tasks.Bind(spec.Task, spec.Params); err != nil {
		reason = err.Error()
		rec.Finished, rec.State = true, schemas.StateFailed
	}
	if err := jobs.Register(ctx, topo, &rec); err != nil {
		if errors.Is(err, jobs.ErrConflict) {
			log.Error("job id already taken by a different job; dropping the submission", "err", err)
			_ = msg.TermWithReason("job id taken by a different job")
			return nil
		}
		if !errors.Is(err, jobs.ErrExists) {
			return err
		}
		log.Debug("job already registered")
	} else if reason != "" {
		log.Error("job refused", "err", reason)
		c.failJob(ctx, topo, spec, reason)
	}
	_ = msg.Ack()
	return nil
}

// schedule watches the registry and, every ScanInterval (or when poked),
// takes the lease of each unfinished, unpaused job that has no live owner,
// while it has room, and runs the job.
func (c *Coordinator) schedule(ctx context.Context, topo *bus.Topology, poke <-chan struct{}, wg *sync.WaitGroup) {
	open := map[string]schemas.JobRecord{} // unfinished jobs, by registry key
	var updates <-chan jetstream.KeyValueEntry
	var watcher jetstream.KeyWatcher
	defer func() {
		if watcher != nil {
			_ = watcher.Stop()
		}
	}()
	tick := time.NewTicker(c.cfg.ScanInterval)
	defer tick.Stop()
	for {
		if watcher == nil {
			w, err := topo.Jobs.WatchAll(ctx)
			if err != nil {
				c.log.Warn("watch the job registry", "err", err)
			} else {
				watcher, updates = w, w.Updates()
				clear(open)
			}
		}
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				watcher, updates = nil, nil
				continue
			}
			if e == nil {
				continue // initial values done
			}
			key := e.Key()
			var rec schemas.JobRecord
			if e.Operation() != jetstream.KeyValuePut || schemas.Decode(e.Value(), &rec) != nil || rec.Finished {
				delete(open, key)
				continue
			}
			open[key] = rec
			continue
		case <-poke:
		case <-tick.C:
		}
		for key, rec := range open {
			if rec.Control == schemas.ControlPause || c.isRunning(key) || !c.hasRoom() {
				continue
			}
			l, err := c.leases.Acquire(ctx, rec.Tenant, rec.JobID)
			if err != nil {
				if !errors.Is(err, lease.ErrHeld) && ctx.Err() == nil {
					c.log.Warn("take job lease", "key", key, "err", err)
				}
				continue
			}
			// The watch may lag (a server restart, say): the registry
			// itself has the last word on whether the job still needs us.
			cur, _, err := jobs.Get(ctx, topo, rec.Tenant, rec.JobID)
			if err != nil || cur.Finished || cur.Control == schemas.ControlPause {
				if err == nil {
					if cur.Finished {
						delete(open, key)
					} else {
						open[key] = cur
					}
				}
				c.release(ctx, l, 0, c.log)
				continue
			}
			rec = cur
			c.setRunning(key, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.setRunning(key, false)
				c.own(ctx, topo, l, rec)
			}()
		}
	}
}

func (c *Coordinator) isRunning(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[key]
}

func (c *Coordinator) hasRoom() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.running) < c.cfg.MaxJobs
}

func (c *Coordinator) setRunning(key string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.running[key] = true
	} else {
		delete(c.running, key)
	}
}

// own runs a job this coordinator holds the lease of, renewing the lease
// meanwhile, and settles the lease and registry by how the run ended.
func (c *Coordinator) own(ctx context.Context, topo *bus.Topology, l *lease.Lease, rec schemas.JobRecord) {
	spec := rec.Spec
	// The renewer owns l from here on: take what the job needs by value.
	token, expires := l.Token, l.ExpiresAt
	log := c.log.With("tenant", spec.Tenant, "job", spec.JobID, "token", token)
	jobCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var hb sync.WaitGroup
	hb.Add(1)
	go func() {
		defer hb.Done()
		c.renew(jobCtx, cancel, l, log)
	}()
	log.Info("running job", "lease_expires", expires)
	rep, err := c.runJobSafely(jobCtx, topo, token, rec)
	cancel(nil)
	hb.Wait()
	ref := store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID}
	// Settling uses a context of its own: at shutdown the lease must still
	// be released, so another coordinator resumes the job at once.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer scancel()

	switch {
	case errors.Is(err, errLeaseLost):
		log.Warn("lost the job's lease; another coordinator runs it now", "err", err)
	case err == nil:
		log.Info("job finished", "state", rep.State, "steps", rep.Steps, "errors", rep.Errors,
			"samples_per_step", rep.SamplesPerStep, "wall_seconds", rep.WallSeconds)
		if err := jobs.MarkFinished(sctx, topo, spec.Tenant, spec.JobID, rep.State); err != nil {
			log.Error("mark the job finished", "err", err)
		}
		c.release(sctx, l, 0, log)
	case errors.Is(err, errPaused):
		log.Info("job paused", "steps", rep.Steps)
		c.release(sctx, l, 0, log)
	case errors.Is(err, ErrInvalidJob):
		log.Error("job refused", "err", err)
		if err := jobs.MarkFinished(sctx, topo, spec.Tenant, spec.JobID, schemas.StateFailed); err != nil {
			log.Error("mark the job finished", "err", err)
		}
		c.release(sctx, l, 0, log)
	case ctx.Err() != nil:
		log.Info("job handed back at shutdown", "steps", rep.Steps)
		c.release(sctx, l, 0, log)
	case c.leases.Renew(sctx, l) != nil:
		// Not ours any more (or not provably): a failure seen by a
		// coordinator that lost the job is not the job's.
		log.Warn("job stopped with an error after its lease was lost; leaving it to its owner", "err", err)
	default:
		// Failures are counted in Redis: a job handed back at shutdown has
		// not failed. Without Redis nothing can be counted, and the job is
		// simply retried.
		n, cerr := c.store.AddFailure(sctx, ref)
		if cerr == nil && n >= int64(c.cfg.MaxJobAttempts) {
			log.Error("job failed on every attempt; giving up", "attempts", n, "err", err)
			if err := c.store.ClearFailures(sctx, ref); err != nil {
				log.Warn("clear failure count", "err", err)
			}
			if err := jobs.MarkFinished(sctx, topo, spec.Tenant, spec.JobID, schemas.StateFailed); err != nil {
				log.Error("mark the job finished", "err", err)
			}
			c.failJob(sctx, topo, spec, fmt.Sprintf("failed %d times; last error: %v", n, err))
			c.release(sctx, l, 0, log)
			return
		}
		delay := min(c.cfg.JobRetryDelay<<min(max(n-1, 0), 6), 5*time.Minute)
		log.Error("job failed; will be retried", "err", err, "attempt", n, "retry_in", delay)
		// Hold the lease through the delay, so no coordinator retries
		// sooner.
		c.release(sctx, l, delay, log)
	}
}

// release ends l after the given delay. A release that fails only costs
// time: the lease then lapses after its TTL.
func (c *Coordinator) release(ctx context.Context, l *lease.Lease, after time.Duration, log *slog.Logger) {
	if err := c.leases.Release(ctx, l, after); err != nil {
		log.Warn("release lease; it lapses after its TTL instead", "err", err)
	}
}

// renew keeps l alive every third of its TTL until ctx is done. If the
// lease is lost, or cannot be renewed before it would expire, the job is
// stopped: from then on another coordinator may own it.
func (c *Coordinator) renew(ctx context.Context, stop context.CancelCauseFunc, l *lease.Lease, log *slog.Logger) {
	t := time.NewTicker(c.cfg.LeaseTTL / 3)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/3)
		err := c.leases.Renew(rctx, l)
		cancel()
		switch {
		case err == nil:
			renewed = time.Now()
		case errors.Is(err, lease.ErrLost):
			stop(fmt.Errorf("%w: %v", errLeaseLost, err))
			return
		default:
			log.Warn("renew lease", "err", err)
			// Stop well before the lease could lapse: past that point a
			// write of ours might interleave with a new owner's.
			if time.Since(renewed) > c.cfg.LeaseTTL*2/3 {
				stop(fmt.Errorf("%w: not renewed for %v: %v", errLeaseLost, time.Since(renewed).Round(time.Millisecond), err))
				return
			}
		}
	}
}

// runJobSafely runs the job, turning a panic (a task's bug, say) into an
// error, so one job cannot take down the others on this coordinator.
func (c *Coordinator) runJobSafely(ctx context.Context, topo *bus.Topology, token int64, rec schemas.JobRecord) (rep schemas.JobReport, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("coordinator: panic running job: %v", p)
		}
	}()
	rep, err = c.runJob(ctx, topo, token, rec)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errLeaseLost) {
		err = cause
	}
	return rep, err
}

// failJob stores a failed report for spec.
func (c *Coordinator) failJob(ctx context.Context, topo *bus.Topology, spec schemas.JobSpec, reason string) {
	now := time.Now().UTC()
	rep := schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport),
		Tenant: spec.Tenant, JobID: spec.JobID, Task: spec.Task, Params: spec.Params, K: spec.K,
		State: schemas.StateFailed, Reason: reason, RedFlags: map[string]int64{},
		StartedAt: now, FinishedAt: now,
	}
	data, err := schemas.Encode(&rep)
	if err == nil {
		_, err = topo.Reports.Put(ctx, bus.JobKey(spec.Tenant, spec.JobID), data)
	}
	if err != nil {
		c.log.Error("store failed report", "tenant", spec.Tenant, "job", spec.JobID, "err", err)
	}
}
