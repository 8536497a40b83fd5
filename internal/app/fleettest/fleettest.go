// Package fleettest runs a whole MAKER fleet inside a test: the shared
// assembly of internal/app/fleet on a real in-process nats-server and a real
// redis-server (package testkit), with coordinators and voters started on
// demand. It also has a scriptable fake model (FakeModel) and the golden
// Hanoi trace, for the coordinator and voter integration tests.
//
// Shutdown order: the fleet closes first (its roles, then its clients),
// then the servers, and the test log last, so no role logs into a finished
// test.
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
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// JobTimeout bounds how long Run waits for a job's report.
const JobTimeout = 60 * time.Second

// LogEnv, when set to debug, info, warn or error, sets the level of the
// roles' logs, written to the test log. Default warn.
const LogEnv = "MAKER_TEST_LOG"

// Env is one test's fleet (internal/app/fleet) on a real nats-server and a
// real redis-server the test kit started: its connection and topology are
// the test's own (submitting jobs, watching subjects).
type Env struct {
	TB    testing.TB
	NATS  *testkit.NATS
	Bus   topology.Config
	Tasks *task.Registry
	Fleet *fleet.Fleet
	NC    *nats.Conn
	JS    jetstream.JetStream
	Topo  *topology.Topology
	Log   *slog.Logger

	redis    *testkit.Redis
	redisURL string
}

// New starts nats-server and redis-server, and a fleet without roles on
// them. Streams and buckets are in memory: tests need no durability.
func New(tb testing.TB) *Env {
	tb.Helper()
	return NewWith(tb, Backends{})
}

// Backends are servers a test started itself (a cluster, a TLS Redis),
// for NewWith; zero fields are started as New does.
type Backends struct {
	// NATS is the nats-server; its URL may list a cluster's servers.
	NATS *testkit.NATS
	// RedisURL is any --redis URL (store.ParseRedisURL): TLS, ACL user,
	// Cluster, Sentinel. Env.Redis is then nil.
	RedisURL string
	// Bus is the topology's configuration (e.g. Replicas 3 on a
	// cluster). Default: memory storage, one replica.
	Bus *topology.Config
}

// NewWith is New on the given servers.
func NewWith(tb testing.TB, b Backends) *Env {
	tb.Helper()
	log := testLogger(tb)
	e := &Env{
		TB:       tb,
		NATS:     b.NATS,
		redisURL: b.RedisURL,
		Bus:      topology.Config{Storage: jetstream.MemoryStorage},
		Tasks:    builtin.Registry(),
		Log:      log,
	}
	if e.NATS == nil {
		e.NATS = testkit.StartNATS(tb)
	}
	if e.redisURL == "" {
		e.redis = testkit.StartRedis(tb)
		e.redisURL = e.redis.URL()
	}
	if b.Bus != nil {
		e.Bus = *b.Bus
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := fleet.Start(ctx, fleet.Options{
		NATSURL: e.NATS.URL, RedisURL: e.redisURL, Bus: e.Bus, Tasks: e.Tasks, Logger: log,
	})
	if err != nil {
		tb.Fatal(err)
	}
	e.Fleet, e.NC, e.JS, e.Topo = f, f.NC, f.JS, f.Topo
	tb.Cleanup(func() {
		f.Close()
		for _, r := range e.roles() {
			if err := r.Err(); err != nil && !r.Killed() {
				tb.Errorf("%s stopped with: %v", r.Name, err)
			}
		}
	})
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

// Redis returns the fleet's redis-server; nil when NewWith was given a
// Redis URL.
func (e *Env) Redis() *testkit.Redis { return e.redis }

// Store returns a store on the fleet's Redis, with its own client.
func (e *Env) Store() *store.Store {
	e.TB.Helper()
	rdb, _, err := store.NewRedisClient(e.redisURL)
	if err != nil {
		e.TB.Fatal(err)
	}
	e.TB.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		e.TB.Fatal(err)
	}
	return st
}

// Coordinator is a running coordinator.
type Coordinator struct {
	*coordinator.Coordinator
	*fleet.Role
}

// StartCoordinator starts a coordinator on its own connection and store.
// Zero cfg fields take test defaults (e.Tasks, bus config, logger, id
// "coordinator-test").
func (e *Env) StartCoordinator(cfg coordinator.Config) *Coordinator {
	e.TB.Helper()
	if cfg.ID == "" {
		cfg.ID = "coordinator-test"
	}
	if cfg.Tasks == nil {
		cfg.Tasks = e.Tasks
	}
	r, err := e.Fleet.AddCoordinator(cfg)
	if err != nil {
		e.TB.Fatal(err)
	}
	return &Coordinator{Coordinator: r.Coordinator, Role: r}
}

// Voter is a running voter.
type Voter struct {
	*voter.Voter
	*fleet.Role
}

// StartVoter starts a voter calling m on its own connection. Zero cfg
// fields take test defaults (tasks, bus config, logger, id "voter-test",
// a 5s drain, a 20ms model error delay, any model allowed).
func (e *Env) StartVoter(m voter.Model, cfg voter.Config) *Voter {
	e.TB.Helper()
	if cfg.ID == "" {
		cfg.ID = "voter-test"
	}
	if cfg.Tasks == nil {
		cfg.Tasks = e.Tasks
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 5 * time.Second
	}
	if cfg.ModelErrorDelay == 0 {
		cfg.ModelErrorDelay = 20 * time.Millisecond
	}
	if cfg.Policy.AllowModels == nil {
		// Test models serve every name (a job's stronger model too); a
		// test of the voter's model policy sets its own.
		cfg.Policy.AllowModels = []string{voter.AnyModel}
	}
	r, err := e.Fleet.AddVoter(m, cfg)
	if err != nil {
		e.TB.Fatal(err)
	}
	return &Voter{Voter: r.Voter, Role: r}
}

func (e *Env) roles() []*fleet.Role { return e.Fleet.Roles() }

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
	if _, err := jobs.Submit(ctx, e.JS, e.Bus, spec, e.Tasks, jobs.Compile(taskspec.CompileSpec)); err != nil {
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
	case err := <-e.Fleet.Failed():
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
	testkit.Eventually(tb, timeout, cond, format, args...)
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
	return testkit.Terminations(e.TB, e.NC, stream, consumer)
}

// ErrFake is returned by scripts that fail a call on purpose.
var ErrFake = errors.New("fleettest: scripted model failure")
