// Package fleet assembles a MAKER fleet inside one process: the servers
// (the ones named by URL, else development servers from internal/app/devserver),
// the model (a real OpenAI-compatible endpoint, or the simulated model in
// memory or on a loopback port), the topology, and any number of
// coordinators and voters, each on a NATS connection and Redis client of
// its own. maker run, maker bench and the test kits all build their fleets
// here, so there is one way to start and to stop one.
//
// Shutdown order (Close): roles first, newest first (a coordinator hands its
// jobs back, a voter drains), then what they ran on, in the reverse order
// it was started: model client, Redis and NATS clients, the run's namespace
// (when it was private on shared servers), the simulated model, Redis and
// nats-server.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/devserver"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// Options say which servers, model and roles a fleet has. Zero fields take
// the documented defaults.
type Options struct {
	// NATSURL is the NATS server to use. Default: a nats-server started in
	// this process, its store in DataDir.
	NATSURL string
	// DataDir holds the started nats-server's files. Default: a temporary
	// directory, on tmpfs when the machine has one, removed at Close.
	DataDir string
	// RedisURL is the Redis to use. Default: a redis-server process on a
	// free port when RedisServer is set and redis-server is installed,
	// otherwise the embedded miniredis.
	RedisURL    string
	RedisServer bool
	// LLMBaseURL, APIKey and Model name the voters' model. Default: the
	// simulated model (Sim), called in memory through the same client, or
	// on a loopback port with SimHTTP. Model defaults to simllm.DefaultModel
	// with the simulated model and is required with LLMBaseURL.
	LLMBaseURL string
	APIKey     string
	Model      string
	Sim        simllm.Config
	SimHTTP    bool
	// LLM configures the voters' model client beyond its URL, key and
	// model (retries, timeouts).
	LLM llm.Config
	// Bus is the topology's configuration. With Private set and no
	// namespace, the fleet gets a namespace of its own (run-<random>) for
	// NATS and Redis alike, removed at Close from servers it did not start.
	Bus     topology.Config
	Private bool
	// Tasks resolves tasks. Default builtin.Registry().
	Tasks *task.Registry
	// Coordinators and Voters are how many of each Start runs, configured
	// by Coordinator and Voter (zero fields take the role's defaults; the
	// fleet fills tasks, bus, logger and ids). Default 0 each: add them
	// with AddCoordinator and AddVoter.
	Coordinators int
	Voters       int
	Coordinator  coordinator.Config
	Voter        voter.Config
	// Prices are set in the fleet's price table (internal/pricetable) before
	// any role starts: a private fleet's prices are its operator's own
	// (maker run takes them from its price flags). Default: none.
	Prices []schemas.ModelPrice
	// Logger receives every role's logs. Default slog.Default().
	Logger *slog.Logger
}

// Fleet is a running fleet. Its exported fields are for the code that
// started it (submitting jobs, watching subjects); Close ends it all.
type Fleet struct {
	// Bus is the topology's configuration, its namespace settled.
	Bus topology.Config
	// NATSURL and RedisURL are where the servers are; RedisKind says which
	// Redis: external, redis-server or miniredis.
	NATSURL   string
	RedisURL  string
	RedisKind string
	// ModelURL is the voters' model endpoint; Model its client, shared by
	// the voters AddVoter starts without a model of their own.
	ModelURL string
	Model    *llm.Client
	// Tasks are the built-in tasks; Registry adds the task specs
	// registered in the fleet's task registry.
	Tasks    *task.Registry
	Registry *taskreg.Registry
	// Inputs is the fleet's inputs store (jobs' params by reference).
	Inputs *inputs.Store
	// NC, JS and Topo are the fleet's own client connection and topology.
	NC   *nats.Conn
	JS   jetstream.JetStream
	Topo *topology.Topology

	log       *slog.Logger
	modelName string
	simHints  bool // the voters' model is the simulated one
	errs      chan error

	mu      sync.Mutex
	roles   []*Role
	closers []func() // undone in reverse order by Close
	closed  bool
	seq     int
}

// Start brings the servers, the model and the topology up, then the roles
// Options asks for. On error everything started so far is closed again.
func Start(ctx context.Context, o Options) (_ *Fleet, err error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tasks == nil {
		o.Tasks = builtin.Registry()
	}
	if o.LLMBaseURL != "" && o.Model == "" {
		return nil, fmt.Errorf("%w: a model name is required with a model URL", ErrOptions)
	}
	if o.Private && o.Bus.Namespace == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.Bus.Namespace = bus.Namespace("run-" + hex.EncodeToString(b[:]))
	}
	if err := o.Bus.Namespace.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	f := &Fleet{Bus: o.Bus, Tasks: o.Tasks, log: o.Logger, errs: make(chan error, 16)}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := f.startNATS(o); err != nil {
		return nil, err
	}
	rdb, err := f.startRedis(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := f.startModel(ctx, o); err != nil {
		return nil, err
	}
	if f.NC, err = bus.Connect(f.NATSURL, "maker-fleet", bus.AuthFromContext(ctx)); err != nil {
		return nil, err
	}
	f.defer1(func() { _ = f.NC.Drain() })
	if o.Private && o.NATSURL != "" {
		// A private namespace on a server someone else runs: leave nothing
		// of it behind.
		f.defer1(func() { f.teardownNATS(o.Bus.Namespace) })
	}
	if o.Private && o.RedisURL != "" {
		f.defer1(func() { f.teardownRedis(rdb, o.Bus.Namespace.String()) })
	}
	if f.JS, err = jetstream.New(f.NC); err != nil {
		return nil, err
	}
	if f.Topo, err = topology.Ensure(ctx, f.JS, f.Bus); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.Registry = taskreg.New(f.Topo.Tasks, f.Tasks, taskspec.CompileSpec)
	f.Inputs = inputs.New(f.JS, f.Topo.NS, inputs.Config{})
	f.mu.Unlock()
	for _, p := range o.Prices {
		if _, err := pricetable.Set(ctx, f.Topo.Prices, p); err != nil {
			return nil, err
		}
	}
	for range o.Coordinators {
		if _, err := f.AddCoordinator(o.Coordinator); err != nil {
			return nil, err
		}
	}
	for range o.Voters {
		if _, err := f.AddVoter(nil, o.Voter); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// ErrOptions marks options the fleet cannot start with.
var ErrOptions = errors.New("fleet: invalid options")

// defer1 registers fn to run at Close, after everything registered later.
func (f *Fleet) defer1(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closers = append(f.closers, fn)
}

func (f *Fleet) startNATS(o Options) error {
	if f.NATSURL = o.NATSURL; f.NATSURL != "" {
		return nil
	}
	dir := o.DataDir
	if dir == "" {
		// A throwaway store: in memory (tmpfs) when the machine has one,
		// which spares the file store's create/unlink per emptied block on
		// a real disk.
		scratch := scratchDir()
		removeStaleStores(scratch)
		var err error
		if dir, err = os.MkdirTemp(scratch, fmt.Sprintf("%s%d-", storePrefix, os.Getpid())); err != nil {
			return err
		}
		f.defer1(func() { _ = os.RemoveAll(dir) })
	}
	ns, err := devserver.RunNATS(devserver.NATSOptions{StoreDir: dir})
	if err != nil {
		return err
	}
	f.defer1(func() { ns.Shutdown(); ns.WaitForShutdown() })
	f.NATSURL = ns.ClientURL()
	return nil
}

func (f *Fleet) startRedis(ctx context.Context, o Options) (redis.UniversalClient, error) {
	f.RedisURL = o.RedisURL
	switch {
	case f.RedisURL != "":
		f.RedisKind = "external"
	case o.RedisServer:
		p, err := devserver.StartRedis(ctx)
		if err == nil {
			f.defer1(p.Close)
			f.RedisURL, f.RedisKind = "redis://"+p.Addr, "redis-server"
			break
		}
		f.log.Warn("no redis-server to start; using the embedded miniredis", "err", err)
		fallthrough
	default:
		m, err := devserver.RunMiniredis()
		if err != nil {
			return nil, err
		}
		f.defer1(m.Close)
		f.RedisURL, f.RedisKind = "redis://"+m.Addr(), "miniredis"
	}
	rdb, err := f.redisClient()
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", store.RedactURL(f.RedisURL), err)
	}
	return rdb, nil
}

// redisClient returns a new client on the fleet's Redis, closed at Close.
func (f *Fleet) redisClient() (redis.UniversalClient, error) {
	// One parser for every --redis: a server, TLS, Cluster or Sentinel.
	rdb, _, err := store.NewRedisClient(f.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err) // the URL redacted
	}
	f.defer1(func() { _ = rdb.Close() })
	return rdb, nil
}

func (f *Fleet) startModel(ctx context.Context, o Options) error {
	f.ModelURL, f.modelName = o.LLMBaseURL, o.Model
	if f.modelName == "" {
		f.modelName = simllm.DefaultModel
	}
	var hc *http.Client
	// The simulated model answers task specs from the fleet's registry
	// (set once the topology is up; a request before that finds none).
	o.Sim.Tasks = registrySource{f}
	o.Sim.Inputs = inputsSource{f}
	f.simHints = f.ModelURL == ""
	switch {
	case f.ModelURL != "":
	case o.SimHTTP:
		sim, err := simllm.Start(ctx, "127.0.0.1:0", o.Sim)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrOptions, err)
		}
		f.defer1(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = sim.Close(cctx)
		})
		f.ModelURL = sim.URL()
	default:
		// The simulated model in this process, reached through the same
		// go-openai client, in memory rather than over a socket.
		sim, err := simllm.New(o.Sim)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrOptions, err)
		}
		f.ModelURL = "http://simllm.in-process/v1"
		hc = &http.Client{Transport: sim.Transport()}
	}
	cfg := o.LLM
	cfg.BaseURL, cfg.APIKey, cfg.Model, cfg.HTTPClient = f.ModelURL, o.APIKey, f.modelName, hc
	client, err := llm.New(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	f.defer1(client.Close)
	f.Model = client
	return nil
}

func (f *Fleet) teardownNATS(ns bus.Namespace) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if f.JS == nil {
		return
	}
	if err := topology.Teardown(ctx, f.JS, ns); err != nil {
		f.log.Warn("remove this run's streams", "namespace", ns, "err", err)
	}
}

func (f *Fleet) teardownRedis(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := store.DeletePrefix(ctx, rdb, prefix); err != nil {
		f.log.Warn("remove this run's Redis keys", "prefix", prefix, "err", err)
	}
}

// Failed delivers the error of a role that stopped with one on its own.
func (f *Fleet) Failed() <-chan error { return f.errs }

// Close stops every role, then everything the fleet started, in reverse
// order of start. It is safe to call more than once.
func (f *Fleet) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	roles := f.roles
	f.mu.Unlock()
	for i := len(roles) - 1; i >= 0; i-- {
		_ = roles[i].Stop()
	}
	f.mu.Lock()
	closers := f.closers
	f.closers = nil
	f.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// inputsSource reads the fleet's inputs store, once it exists.
type inputsSource struct{ f *Fleet }

func (s inputsSource) Get(ctx context.Context, ref string) ([]byte, error) {
	s.f.mu.Lock()
	in := s.f.Inputs
	s.f.mu.Unlock()
	if in == nil {
		return nil, fmt.Errorf("%w: the fleet is starting", inputs.ErrNoStore)
	}
	return in.Get(ctx, ref)
}

// registrySource finds tasks in the fleet's registry, once it exists.
type registrySource struct{ f *Fleet }

func (s registrySource) Task(ctx context.Context, ref task.Ref) (task.Task, error) {
	s.f.mu.Lock()
	reg := s.f.Registry
	s.f.mu.Unlock()
	if reg == nil {
		return nil, fmt.Errorf("%w %q: the fleet is starting", task.ErrUnknownTask, ref.String())
	}
	return reg.Task(ctx, ref)
}
