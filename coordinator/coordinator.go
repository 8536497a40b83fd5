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

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/lease"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/presence"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/service"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// Config configures a Coordinator.
type Config struct {
	// ID names this coordinator in leases and job status; it must be
	// unique in the fleet. Default host-pid.
	ID string
	// Tasks are the built-in tasks (required); the task specs jobs name
	// come from the fleet's task registry.
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
	// Slice is how long a job runs at least before this coordinator, full,
	// hands it back (at a step boundary, checkpointed) for a waiting job of
	// a tenant that runs fewer jobs here relative to its weight: time
	// slicing, so one tenant's long job cannot starve another's. Negative:
	// never. Default 30s.
	Slice time.Duration
	// AdmitRetry is how often a job tries again to publish the sample
	// requests its quotas deferred (a token bucket's next token may come
	// later). Default 10ms.
	AdmitRetry time.Duration
	// SamplesPerCall is how many samples of one wave may go out as one
	// request (schemas.SampleRequest.Also): one message, one delivery and
	// one ack for the wave instead of one a sample. Each is drawn at its
	// own temperature (the step's first at 0); a voter whose model answers
	// n > 1 draws those of one temperature above 0 in one call, the prompt
	// paid once; any other draws each alone, exactly as if they had come
	// apart, and a voter never has more than its concurrency of model
	// calls in flight; the answers come back in one message too
	// (schemas.SampleResult.Also). Default schemas.MaxSamplesPerCall (a
	// whole wave, in practice); 1 sends each sample as its own request.
	SamplesPerCall int
	// ArbitrationReserveUSD is what a job under a limit (its budget, or
	// its tenant's spend per day) holds on it before asking the judge's
	// panel to arbitrate a step, in US dollars: the judge is told to
	// spend no more, and a job whose limits cannot hold it gets no
	// arbitration (a person decides the step). Default 1.00, the judge's
	// default arbitration budget; at most schemas.MaxBudgetUSD.
	ArbitrationReserveUSD float64
	// RetentionInterval is how often the coordinator sweeps finished work
	// past its retention policy (internal/retention; coordinators share
	// one lease). Negative: never. Default 10m.
	RetentionInterval time.Duration
	// Bus configures the streams when this coordinator creates them.
	Bus topology.Config
	// Storage names the adapters of the jobs' tally, budgets, journals
	// and registry (ports.go); the zero value is the fleet's: Redis
	// through the store given to New, the namespace's journal stream and
	// registry bucket.
	Storage Storage
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the coordinator's metrics (internal/metrics). Nil:
	// none are kept. One Coordinator per Metrics (maker_jobs_running is
	// its own).
	Metrics *metrics.Coordinator
	// Presence configures the coordinator's presence record
	// (schemas.CoordinatorPresence, internal/presence): renewed every
	// Presence.Interval (default 5s) while it runs, deleted when it
	// stops. Its namespace is Bus.Namespace. NoPresence: none.
	Presence   presence.Config
	NoPresence bool
	// Build is the release the presence record names (maker --version).
	Build string

	// CrashAt and Crash are the fault suite's injection point: when a job
	// reaches the point CrashAt names ("<point>:<step>", see crash.go) the
	// coordinator calls Crash, which the CLI (maker coordinator --crash-at)
	// makes exit the process at once, as a SIGKILL would. Crash is not
	// expected to return; if it does, the job goes on. Crash nil (the
	// default, production): no crash points, CrashAt is ignored.
	CrashAt string
	Crash   func(point string)
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
	if c.Slice == 0 {
		c.Slice = 30 * time.Second
	}
	if c.SamplesPerCall == 0 {
		c.SamplesPerCall = schemas.MaxSamplesPerCall
	}
	if c.SamplesPerCall < 1 || c.SamplesPerCall > schemas.MaxSamplesPerCall {
		return fmt.Errorf("coordinator: SamplesPerCall %d: want 1 to %d", c.SamplesPerCall, schemas.MaxSamplesPerCall)
	}
	if c.AdmitRetry == 0 {
		c.AdmitRetry = 10 * time.Millisecond
	}
	if c.AdmitRetry < time.Millisecond {
		return fmt.Errorf("%w: AdmitRetry must be >= 1ms", ErrConfig)
	}
	if c.ArbitrationReserveUSD == 0 {
		c.ArbitrationReserveUSD = 1
	}
	if !(c.ArbitrationReserveUSD > 0 && c.ArbitrationReserveUSD <= schemas.MaxBudgetUSD) {
		return fmt.Errorf("%w: ArbitrationReserveUSD must be in (0, %d], got %v", ErrConfig, schemas.MaxBudgetUSD, c.ArbitrationReserveUSD)
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
	tasks  *taskreg.Registry // built-ins and the fleet's task specs; set by Run
	inputs *inputs.Store     // jobs' params kept by reference; set by Run
	fair   *fairness         // quotas, limits and fair shares (schedule.go, admit.go)
	prices *pricetable.Cache // the fleet's price table (internal/core/pricing); set by Run

	// the ports (ports.go), Config.Storage's or the fleet's; the journals
	// and registry set by Run
	tally    Tally
	budgets  Budgets
	journals Journals
	registry Registry

	mu      sync.Mutex
	running map[string]bool   // registry keys of the jobs this coordinator runs
	waiting map[string]string // of those, the ones waiting on the fleet: why (schemas.JobWaiting)
	// present: of the jobs it runs, where each stands (presence.go)
	present map[string]schemas.PresenceJob
	started time.Time

	// sampleKey is the fleet's key of sample capabilities
	// (store.SampleKey); set by Run, before any job runs.
	sampleKey []byte
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
	c := &Coordinator{cfg: cfg, nc: nc, js: js, store: st, log: cfg.Logger.With("coordinator", cfg.ID), running: map[string]bool{}, waiting: map[string]string{},
		present: map[string]schemas.PresenceJob{}, started: time.Now().UTC(),
		fair: newFairness(st, cfg), prices: pricetable.NewCache(nil),
		tally: cfg.Storage.Tally, budgets: cfg.Storage.Budgets, journals: cfg.Storage.Journals, registry: cfg.Storage.Registry}
	if c.tally == nil {
		c.tally = st
	}
	if c.budgets == nil {
		b, err := store.NewBudgets(st.Client(), store.BudgetConfig{KeyPrefix: st.Prefix()})
		if err != nil {
			return nil, err
		}
		c.budgets = b
	}
	cfg.Metrics.JobsRunning(func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.running)
	})
	cfg.Metrics.JobsWaiting([]string{schemas.WaitProviderUnavailable, schemas.WaitTaskRefused, schemas.WaitUnanswered}, func(reason string) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, r := range c.waiting {
			if r == reason {
				n++
			}
		}
		return n
	})
	return c, nil
}

// Run takes and runs jobs until ctx is done. On return every job it ran
// has stopped at a step boundary and its lease is released, so another
// coordinator resumes it at once.
func (c *Coordinator) Run(ctx context.Context) error {
	topo, err := topology.Ensure(ctx, c.js, c.cfg.Bus)
	if err != nil {
		return err
	}
	c.tasks = taskreg.New(topo.Tasks, c.cfg.Tasks, taskspec.CompileSpec)
	c.inputs = inputs.New(topo.JS, topo.NS, inputs.Config{})
	if c.journals == nil {
		c.journals = streamJournals{js: c.js, topo: topo}
	}
	if c.registry == nil {
		c.registry = kvRegistry{topo: topo}
	}
	if c.leases, err = lease.NewManager(topo.Leases, c.cfg.ID, c.cfg.LeaseTTL); err != nil {
		return err
	}
	batches, err := batch.NewRunner(topo, batch.RunnerConfig{Owner: c.cfg.ID, LeaseTTL: c.cfg.LeaseTTL, ScanInterval: c.cfg.ScanInterval,
		Metrics: c.cfg.Metrics, Logger: c.log})
	if err != nil {
		return err
	}
	if err := c.store.Load(ctx); err != nil {
		return err
	}
	// The fleet's key of sample capabilities (internal/core/step/capability.go), made once by
	// the first coordinator and shared by all through Redis.
	if c.sampleKey, err = c.store.SampleKey(ctx); err != nil {
		return err
	}
	cons, err := c.js.Consumer(ctx, topo.NS.JobsStream(), bus.ConsumerCoordinators)
	if err != nil {
		return fmt.Errorf("coordinator: job consumer: %w", err)
	}

	// The coordinator's parts, started in this order and stopped in
	// reverse (internal/service). Shutdown order: ctx done → the work stops
	// together: the scheduler takes no more jobs and every running job
	// stops at a step boundary, checkpoints and releases its lease; intake,
	// the dead-letter mover, the batch runner (between two jobs, releasing
	// its batches' leases) and the retention sweeper end → the control
	// service stops (it answers until then: a pause asked meanwhile is
	// recorded for the next owner) → the quota and price caches stop → Run
	// returns.
	poke := make(chan struct{}, 1)
	err = service.Run(ctx,
		// The presence record (presence.go): first up, last down.
		service.Started("presence", c.startPresence),
		// Watch-fed caches of the quotas' and prices' buckets (fair.go).
		service.Started("quotas and prices", func(ctx context.Context) (func(), error) { return c.startFair(ctx, topo) }),
		// People's pause, resume, cancel and decide requests, answered by
		// one coordinator each (control.go).
		service.Started("control", func(ctx context.Context) (func(), error) { return c.serveControl(ctx, topo) }),
		service.Group("work",
			service.Ready("dead letters", func(ctx context.Context, ready func()) error {
				// Subscribed before anything runs, so no advisory goes
				// unheard (dlq.go).
				events := make(chan *nats.Msg, 256)
				advisories, err := c.nc.ChanQueueSubscribe(bus.MaxDeliveriesAdvisory(topo.NS.SamplesStream(), bus.ConsumerVoters), "coordinators", events)
				if err != nil {
					return fmt.Errorf("subscribe to max-deliveries advisories: %w", err)
				}
				ready()
				c.deadLetters(ctx, topo, advisories, events)
				return nil
			}),
			service.Func("intake", func(ctx context.Context) error { return c.intake(ctx, topo, cons, poke) }),
			// Batches are fed into the fleet by one coordinator's runner
			// each (internal/batch).
			service.Func("batches", batches.Run),
			service.Func("retention", func(ctx context.Context) error { c.runRetention(ctx, topo); return nil }),
			service.Func("scheduler", func(ctx context.Context) error {
				// Last to start: everything a job needs is in place.
				c.log.Info("coordinator started", "max_jobs", c.cfg.MaxJobs, "lease_ttl", c.cfg.LeaseTTL)
				var jobs sync.WaitGroup
				c.schedule(ctx, topo, poke, &jobs)
				c.mu.Lock()
				running := len(c.running)
				c.mu.Unlock()
				c.log.Info("coordinator stopping: handing its jobs back at a step boundary", "running_jobs", running)
				jobs.Wait()
				c.mu.Lock()
				clear(c.running) // the jobs wound down by the stop (see schedule)
				c.mu.Unlock()
				return nil
			}),
		),
	)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.log.Info("coordinator stopped")
	return nil
}

// jobPullWait bounds one fetch of a job: an idle coordinator asks again
// this often, and a stopping one waits at most this long.
const jobPullWait = 250 * time.Millisecond

// intake moves submitted jobs from the job stream into the registry, where
// every coordinator can see them; a message is acked once its job is
// registered (or found registered already). It pulls through a bus.Worker
// until ctx is done.
func (c *Coordinator) intake(ctx context.Context, topo *topology.Topology, cons jetstream.Consumer, poke chan<- struct{}) error {
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
			if _, err := topology.Ensure(ctx, c.js, c.cfg.Bus); err != nil {
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
		return err
	}
	return w.Run(ctx)
}

// register settles one job message: a valid new job is registered, a
// resubmission of a registered job is dropped, and a job the registry or
// the task refuses is terminated (with a failed report when it has a
// readable id).
func (c *Coordinator) register(ctx context.Context, topo *topology.Topology, msg jetstream.Msg) error {
	var spec schemas.JobSpec
	if err := schemas.Decode(msg.Data(), &spec); err != nil {
		c.log.Error("dropping malformed job message", "err", err)
		_ = msg.TermWithReason("malformed job spec")
		return nil
	}
	log := c.log.With("tenant", spec.Tenant, "job", spec.JobID)
	// The subject proves the tenant: on a secured server only tenant T
	// (and the admin) may publish on T's job subject, but nobody checks
	// the body. A job naming another tenant is refused, and nothing is
	// written for the tenant it names (not even a failed report).
	if want := topo.NS.JobSubject(spec.Tenant); msg.Subject() != want {
		log.Error("refusing a job whose body names another tenant than its subject; it does not run",
			"subject", msg.Subject(), "want_subject", want)
		_ = msg.TermWithReason("job names another tenant than its subject")
		return nil
	}
	rec := schemas.JobRecord{
		Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: spec.Tenant, JobID: spec.JobID, Spec: spec,
		Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: time.Now().UTC(),
	}
	var reason string
	if _, err := jobs.Bind(ctx, c.tasks, c.inputs, spec); errors.Is(err, inputs.ErrUnavailable) {
		return err // the job message comes back: not the job's fault
	} else if err != nil {
		reason = err.Error()
		rec.Finished, rec.State = true, schemas.StateFailed
	} else if err := c.checkPriced(ctx, &spec); err != nil {
		// Refused as the HTTP API refuses it at submit: under a limit,
		// only work the fleet prices runs.
		reason = "refused: " + err.Error()
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

// checkPriced refuses a job under a limit (its budget, or its tenant's
// spend per day) that may ask a model the fleet's price table does not
// price (pricing.Check), at intake: nothing of it runs.
func (c *Coordinator) checkPriced(ctx context.Context, spec *schemas.JobSpec) error {
	q, err := c.tenantQuota(ctx, spec.Tenant)
	if err != nil {
		return nil // the run holds it to its limits all the same
	}
	t, err := c.prices.Current(ctx)
	if err != nil {
		return nil // likewise
	}
	return pricing.Check(t, spec, q.SpendPerDayUSD)
}

// failJob stores a failed report for spec.
func (c *Coordinator) failJob(ctx context.Context, topo *topology.Topology, spec schemas.JobSpec, reason string) {
	rep := failedReport(spec, reason)
	data, err := schemas.Encode(&rep)
	if err == nil {
		_, err = topo.Reports.Put(ctx, bus.JobKey(spec.Tenant, spec.JobID), data)
	}
	if err != nil {
		c.log.Error("store failed report", "tenant", spec.Tenant, "job", spec.JobID, "err", err)
		return
	}
	c.queueWebhook(ctx, topo, spec, rep)
}
