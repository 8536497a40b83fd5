// Package fleettest starts a whole MAKER fleet inside a test: a real
// in-process nats-server, a real redis-server (through testutil), the
// simulated model, coordinators and voters, each with its cleanup
// registered on the test. It also has a scriptable fake model
// (FakeModel) and the golden Hanoi trace, for the coordinator and voter
// integration tests.
//
// Shutdown order follows t.Cleanup's last-in-first-out rule: everything
// stops before what it was started on. A role (coordinator or voter) stops
// before its connection, store and model client, those before Redis, the
// simulated model and NATS, and the test log closes last, so no role logs
// into a finished test.
package fleettest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testutil"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/voter"
)

// JobTimeout bounds how long Run waits for a job's report.
const JobTimeout = 60 * time.Second

// LogEnv, when set to debug, info, warn or error, sets the level of the
// roles' logs, written to the test log. Default warn.
const LogEnv = "MAKER_TEST_LOG"

// Env is one fleet's services: NATS (always) and Redis (on first use), a
// connection and the topology for the test itself.
type Env struct {
	TB    testing.TB
	NATS  *testutil.NATS
	Bus   bus.Config
	Tasks *task.Registry
	// NC, JS and Topo belong to the test (submitting jobs, watching
	// subjects).
	NC   *nats.Conn
	JS   jetstream.JetStream
	Topo *bus.Topology
	Log  *slog.Logger

	redisOnce sync.Once
	redis     *testutil.Redis

	failed chan error // a role that stopped with an error
}

// New starts nats-server and creates the fleet's topology. Streams and
// buckets are in memory: tests need no durability.
func New(tb testing.TB) *Env {
	tb.Helper()
	log := testLogger(tb)
	e := &Env{
		TB:     tb,
		NATS:   testutil.StartNATS(tb),
		Bus:    bus.Config{Storage: jetstream.MemoryStorage},
		Tasks:  builtin.Registry(),
		Log:    log,
		failed: make(chan error, 16),
	}
	e.NC = e.Connect("test")
	js, err := jetstream.New(e.NC)
	if err != nil {
		tb.Fatal(err)
	}
	e.JS = js
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e.Topo, err = bus.Ensure(ctx, js, e.Bus); err != nil {
		tb.Fatal(err)
	}
	return e
}

// Connect returns a new NATS connection, closed at cleanup.
func (e *Env) Connect(name string) *nats.Conn {
	e.TB.Helper()
	nc, err := nats.Connect(e.NATS.URL, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		e.TB.Fatal(err)
	}
	e.TB.Cleanup(nc.Close)
	return nc
}

// Redis returns the fleet's redis-server, starting it on first use.
func (e *Env) Redis() *testutil.Redis {
	e.redisOnce.Do(func() { e.redis = testutil.StartRedis(e.TB) })
	return e.redis
}

// Store returns a store on the fleet's Redis, with its own client.
func (e *Env) Store() *store.Store {
	e.TB.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: e.Redis().Addr})
	e.TB.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		e.TB.Fatal(err)
	}
	return st
}

// Role is a running coordinator or voter.
type Role struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	killed atomic.Bool
}

// Cancel stops the role's Run without waiting.
func (r *Role) Cancel() { r.cancel() }

// Done is closed when Run has returned.
func (r *Role) Done() <-chan struct{} { return r.done }

// Err is Run's error; read it after Done.
func (r *Role) Err() error { return r.err }

// Stop cancels Run and waits for it to return.
func (r *Role) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}

func (e *Env) start(name string, run func(context.Context) error) *Role {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Role{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx)
		if r.err != nil && ctx.Err() == nil && !r.killed.Load() {
			select {
			case e.failed <- fmt.Errorf("%s: %w", name, r.err):
			default:
			}
		}
	}()
	e.TB.Cleanup(func() {
		if err := r.Stop(); err != nil && !r.killed.Load() {
			e.TB.Errorf("%s stopped with: %v", name, err)
		}
	})
	return r
}

// Coordinator is a running coordinator.
type Coordinator struct {
	*coordinator.Coordinator
	*Role
	nc *nats.Conn
}

// Kill stops the coordinator the way kill -9 looks to the rest of the
// fleet: its NATS connection goes first, so it journals, checkpoints and
// releases nothing more; its lease lapses after its TTL.
func (c *Coordinator) Kill() {
	c.killed.Store(true)
	c.nc.Close()
	c.cancel()
	<-c.done
}

// StartCoordinator starts a coordinator on its own connection and store.
// Zero cfg fields take test defaults (tasks, bus config, logger).
func (e *Env) StartCoordinator(cfg coordinator.Config) *Coordinator {
	e.TB.Helper()
	if cfg.Tasks == nil {
		cfg.Tasks = e.Tasks
	}
	if cfg.Bus == (bus.Config{}) {
		cfg.Bus = e.Bus
	}
	if cfg.Logger == nil {
		cfg.Logger = e.Log
	}
	if cfg.ID == "" {
		cfg.ID = "coordinator-test"
	}
	nc := e.Connect(cfg.ID)
	c, err := coordinator.New(nc, e.Store(), cfg)
	if err != nil {
		e.TB.Fatal(err)
	}
	return &Coordinator{Coordinator: c, Role: e.start(cfg.ID, c.Run), nc: nc}
}

// Voter is a running voter.
type Voter struct {
	*voter.Voter
	*Role
}

// StartVoter starts a voter calling m on its own connection. Zero cfg
// fields take test defaults (tasks, bus config, logger, a 5s drain).
func (e *Env) StartVoter(m voter.Model, cfg voter.Config) *Voter {
	e.TB.Helper()
	if cfg.Tasks == nil {
		cfg.Tasks = e.Tasks
	}
	if cfg.Bus == (bus.Config{}) {
		cfg.Bus = e.Bus
	}
	if cfg.Logger == nil {
		cfg.Logger = e.Log
	}
	if cfg.ID == "" {
		cfg.ID = "voter-test"
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 5 * time.Second
	}
	if cfg.ModelErrorDelay == 0 {
		cfg.ModelErrorDelay = 20 * time.Millisecond
	}
	v, err := voter.New(e.Connect(cfg.ID), m, cfg)
	if err != nil {
		e.TB.Fatal(err)
	}
	return &Voter{Voter: v, Role: e.start(cfg.ID, v.Run)}
}

// StartSim starts the simulated model, closed at cleanup.
func StartSim(tb testing.TB, cfg simllm.Config) *simllm.Running {
	tb.Helper()
	rn, err := simllm.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rn.Close(ctx); err != nil {
			tb.Errorf("close simulated model: %v", err)
		}
	})
	return rn
}

// SimClient returns a model client for sim. Zero cfg fields take test
// defaults: the sim's URL and model, short backoffs.
func SimClient(tb testing.TB, sim *simllm.Running, cfg llm.Config) *llm.Client {
	tb.Helper()
	if cfg.BaseURL == "" {
		cfg.BaseURL = sim.URL()
	}
	if cfg.Model == "" {
		cfg.Model = simllm.DefaultModel
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = 5 * time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = 50 * time.Millisecond
	}
	c, err := llm.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// HanoiSpec is a hanoi job with a fresh id; jobs.Submit fills the other
// defaults.
func HanoiSpec(disks, k int, seed int64) schemas.JobSpec {
	rest := schemas.DefaultTemperatureRest
	return schemas.JobSpec{
		Header: schemas.NewHeader(schemas.KindJobSpec),
		JobID:  jobs.NewJobID(),
		Tenant: schemas.DefaultTenant,
		Task:   "hanoi",
		Params: json.RawMessage(fmt.Sprintf(`{"disks":%d}`, disks)),
		K:      k, Seed: seed, TemperatureRest: &rest,
	}
}

// Submit submits spec (filling its defaults).
func (e *Env) Submit(spec *schemas.JobSpec) {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := jobs.Submit(ctx, e.JS, e.Bus, spec, e.Tasks); err != nil {
		e.TB.Fatal(err)
	}
}

// Wait waits up to JobTimeout for the job's report. It fails the test if a
// role stopped with an error or the time is up (reporting the last status).
func (e *Env) Wait(spec schemas.JobSpec) schemas.JobReport {
	e.TB.Helper()
	return e.WaitFor(spec, JobTimeout)
}

// WaitFor is Wait with another timeout.
func (e *Env) WaitFor(spec schemas.JobSpec, timeout time.Duration) schemas.JobReport {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type result struct {
		rep schemas.JobReport
		err error
	}
	var (
		mu   sync.Mutex
		last schemas.JobStatus
	)
	done := make(chan result, 1)
	go func() {
		rep, err := jobs.Wait(ctx, e.Topo, spec.Tenant, spec.JobID, func(st schemas.JobStatus) {
			mu.Lock()
			last = st
			mu.Unlock()
		})
		done <- result{rep, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			mu.Lock()
			defer mu.Unlock()
			e.TB.Fatalf("job %s: no report: %v (last status %+v)", spec.JobID, r.err, last)
		}
		return r.rep
	case err := <-e.failed:
		cancel()
		<-done
		e.TB.Fatalf("job %s: a role failed: %v", spec.JobID, err)
	}
	return schemas.JobReport{}
}

// Run submits spec and waits for its report.
func (e *Env) Run(spec *schemas.JobSpec) schemas.JobReport {
	e.TB.Helper()
	e.Submit(spec)
	return e.Wait(*spec)
}

// Eventually polls cond every few milliseconds until it holds, failing the
// test with msg after timeout.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Recorder collects the messages published on a subject (core
// subscription: it sees what a stream stores, without consuming it).
type Recorder[T any] struct {
	mu   sync.Mutex
	msgs []T
	bad  int
	sub  *nats.Subscription
}

// Capture subscribes to subject on e's test connection and decodes every
// message as T (strictly; undecodable ones are counted in Bad).
func Capture[T any, P interface {
	*T
	schemas.Message
}](e *Env, subject string) *Recorder[T] {
	e.TB.Helper()
	r := &Recorder[T]{}
	sub, err := e.NC.Subscribe(subject, func(m *nats.Msg) {
		var v T
		err := schemas.Decode(m.Data, P(&v))
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.bad++
			return
		}
		r.msgs = append(r.msgs, v)
	})
	if err != nil {
		e.TB.Fatal(err)
	}
	if err := e.NC.Flush(); err != nil {
		e.TB.Fatal(err)
	}
	r.sub = sub
	e.TB.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

// All returns a copy of the messages so far.
func (r *Recorder[T]) All() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.msgs...)
}

// Bad counts undecodable messages.
func (r *Recorder[T]) Bad() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

// testLogger writes the roles' logs to the test log until the test's
// cleanups are over.
func testLogger(tb testing.TB) *slog.Logger {
	level := slog.LevelWarn
	switch strings.ToLower(os.Getenv(LogEnv)) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "error":
		level = slog.LevelError
	}
	w := &tbWriter{tb: tb}
	// Registered before any role, so it runs after every role has stopped.
	tb.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type tbWriter struct {
	mu     sync.Mutex
	tb     testing.TB
	closed bool
}

var _ io.Writer = (*tbWriter)(nil)

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tbWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// Terminations collects the server's advisories for the messages
// terminated (Term or TermWithReason) on stream's consumer, "*" for any,
// from now on; the returned function lists those seen so far.
func Terminations(e *Env, stream, consumer string) func() []server.JSConsumerDeliveryTerminatedAdvisory {
	e.TB.Helper()
	var (
		mu  sync.Mutex
		got []server.JSConsumerDeliveryTerminatedAdvisory
	)
	sub, err := e.NC.Subscribe(server.JSAdvisoryConsumerMsgTerminatedPre+"."+stream+"."+consumer, func(m *nats.Msg) {
		var a server.JSConsumerDeliveryTerminatedAdvisory
		if err := json.Unmarshal(m.Data, &a); err != nil {
			return
		}
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
	})
	if err != nil {
		e.TB.Fatal(err)
	}
	if err := e.NC.Flush(); err != nil {
		e.TB.Fatal(err)
	}
	e.TB.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []server.JSConsumerDeliveryTerminatedAdvisory {
		mu.Lock()
		defer mu.Unlock()
		return append([]server.JSConsumerDeliveryTerminatedAdvisory(nil), got...)
	}
}

// ErrFake is returned by scripts that fail a call on purpose.
var ErrFake = errors.New("fleettest: scripted model failure")
