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
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Config configures a Coordinator.
type Config struct {
	// ID names this coordinator in job status. Default host-pid.
	ID string
	// Tasks resolves job tasks (required).
	Tasks *task.Registry
	// MaxJobs is how many jobs this coordinator runs at once. Default 16.
	MaxJobs int
	// StatusInterval is how often a running job's status is published.
	// Default 250ms.
	StatusInterval time.Duration
	// JobRetryDelay is the wait before a failed job is tried again; it
	// doubles with each failure, up to 5 minutes. After MaxJobAttempts
	// failures the job gets a failed report. Defaults 5s and 5.
	JobRetryDelay  time.Duration
	MaxJobAttempts int
	// Bus configures the streams when this coordinator creates them.
	Bus bus.Config
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Coordinator takes jobs from the job stream and runs them.
type Coordinator struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	store *store.Store
	log   *slog.Logger
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
	return &Coordinator{cfg: cfg, nc: nc, js: js, store: st, log: cfg.Logger.With("coordinator", cfg.ID)}, nil
}

// Run takes jobs until ctx is done, running up to MaxJobs at once. On
// return every job it started has stopped; a job stopped before its end is
// handed back (nak) for another coordinator to run.
func (c *Coordinator) Run(ctx context.Context) error {
	topo, err := bus.Ensure(ctx, c.js, c.cfg.Bus)
	if err != nil {
		return err
	}
	if err := c.store.Load(ctx); err != nil {
		return err
	}
	cons, err := c.js.Consumer(ctx, topo.NS.JobsStream(), bus.ConsumerCoordinators)
	if err != nil {
		return fmt.Errorf("coordinator: job consumer: %w", err)
	}
	c.log.Info("coordinator started", "max_jobs", c.cfg.MaxJobs)

	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, c.cfg.MaxJobs)
	for {
		// Reserve a slot before pulling a job, so jobs wait in the stream
		// for a coordinator with room rather than in our buffer.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := fetchOne(ctx, cons)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("fetch job", "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		if msg == nil {
			<-slots
			continue
		}
		if ctx.Err() != nil {
			_ = msg.Nak() // arrived as we stop: straight back for another coordinator
			<-slots
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			c.handleJob(ctx, topo, msg)
		}()
	}
}

// jobPullWait bounds one fetch of a job: an idle coordinator asks again
// this often, and a stopping one waits at most this long.
const jobPullWait = 250 * time.Millisecond

// fetchOne waits up to jobPullWait for one job message; nil if none. The
// wait is not cut short at shutdown: a pull cancelled only on our side stays
// open at the server, and a job delivered into it would sit unseen until its
// ack wait ran out. Run hands back what it brings at shutdown.
func fetchOne(ctx context.Context, cons jetstream.Consumer) (jetstream.Msg, error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jobPullWait)
	defer cancel()
	batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		if fctx.Err() != nil {
			return nil, nil // no job within the wait
		}
		return nil, err
	}
	for msg := range batch.Messages() {
		return msg, nil
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		return nil, err
	}
	return nil, nil
}

// handleJob runs one job message to its end and settles the message.
func (c *Coordinator) handleJob(ctx context.Context, topo *bus.Topology, msg jetstream.Msg) {
	var spec schemas.JobSpec
	if err := schemas.Decode(msg.Data(), &spec); err != nil {
		c.log.Error("dropping malformed job message", "err", err)
		_ = msg.TermWithReason("malformed job spec")
		return
	}
	log := c.log.With("tenant", spec.Tenant, "job", spec.JobID)
	key := bus.JobKey(spec.Tenant, spec.JobID)
	if e, err := topo.Reports.Get(ctx, key); err == nil && e != nil {
		log.Info("job already has a report; not running it again")
		_ = msg.Ack()
		return
	}

	// Keep the job ours while it runs: AckWait is far shorter than a job.
	hbCtx, stopHB := context.WithCancel(ctx)
	var hb sync.WaitGroup
	hb.Add(1)
	go func() {
		defer hb.Done()
		t := time.NewTicker(topo.Config.JobAckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = msg.InProgress()
			case <-hbCtx.Done():
				return
			}
		}
	}()
	rep, err := c.runJobSafely(ctx, topo, spec)
	stopHB()
	hb.Wait()
	ref := store.JobRef{Tenant: spec.Tenant, JobID: spec.JobID}

	switch {
	case err == nil:
		log.Info("job finished", "state", rep.State, "steps", rep.Steps, "errors", rep.Errors,
			"samples_per_step", rep.SamplesPerStep, "wall_seconds", rep.WallSeconds)
		_ = c.store.ClearFailures(ctx, ref)
		_ = msg.Ack()
	case errors.Is(err, ErrInvalidJob):
		log.Error("job refused", "err", err)
		_ = msg.TermWithReason("invalid job")
	case ctx.Err() != nil:
		log.Info("job handed back at shutdown", "steps", rep.Steps)
		_ = msg.Nak()
	default:
		// Failures are counted in Redis, not by deliveries: a job handed
		// back at shutdown has not failed. Without Redis nothing can be
		// counted, and the job is simply retried.
		n, cerr := c.store.AddFailure(ctx, ref)
		if cerr == nil && n >= int64(c.cfg.MaxJobAttempts) {
			log.Error("job failed on every attempt; giving up", "attempts", n, "err", err)
			c.failJob(ctx, topo, spec, fmt.Sprintf("failed %d times; last error: %v", n, err))
			_ = c.store.ClearFailures(ctx, ref)
			_ = msg.TermWithReason("failed too often")
			return
		}
		delay := min(c.cfg.JobRetryDelay<<min(max(n-1, 0), 6), 5*time.Minute)
		log.Error("job failed; will be retried", "err", err, "attempt", n, "retry_in", delay)
		_ = msg.NakWithDelay(delay)
	}
}

// runJobSafely runs the job, turning a panic (a task's bug, say) into an
// error, so one job cannot take down the others on this coordinator.
func (c *Coordinator) runJobSafely(ctx context.Context, topo *bus.Topology, spec schemas.JobSpec) (rep schemas.JobReport, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("coordinator: panic running job: %v", p)
		}
	}()
	return c.RunJob(ctx, topo, spec)
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
