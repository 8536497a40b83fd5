package fleet

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/voter"
)

// Role is a running coordinator or voter: its Run in a goroutine the fleet
// owns, on a NATS connection of its own.
type Role struct {
	Name string
	// Coordinator or Voter is the role (the other is nil).
	Coordinator *coordinator.Coordinator
	Voter       *voter.Voter

	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	killed atomic.Bool
}

// Done is closed when the role's Run has returned; Err is its error then.
func (r *Role) Done() <-chan struct{} { return r.done }

// Err is Run's error; read it after Done.
func (r *Role) Err() error { return r.err }

// Cancel asks the role to stop (gracefully) without waiting.
func (r *Role) Cancel() { r.cancel() }

// Stop stops the role gracefully and waits for its Run to return.
func (r *Role) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// Kill stops the role the way kill -9 looks to the rest of the fleet: its
// NATS connection goes first, so it writes, journals and releases nothing
// more (a coordinator's leases lapse after their TTL).
func (r *Role) Kill() {
	r.killed.Store(true)
	r.nc.Close()
	r.cancel()
	<-r.done
}

// Killed reports whether the role was killed rather than stopped.
func (r *Role) Killed() bool { return r.killed.Load() }

// nextName numbers the fleet's roles, so each has a unique id.
func (f *Fleet) nextName(kind string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return fmt.Sprintf("%s-inproc-%d", kind, f.seq)
}

// connect opens a NATS connection for a role, closed at Close.
func (f *Fleet) connect(name string) (*nats.Conn, error) {
	nc, err := bus.Connect(f.NATSURL, name, bus.SameAuthAs(f.NC))
	if err != nil {
		return nil, err
	}
	f.defer1(nc.Close)
	return nc, nil
}

// AddCoordinator starts a coordinator on a connection and Redis client of
// its own. Zero cfg fields take the fleet's tasks, bus config and logger
// and a generated id; the store's key prefix is the namespace's.
func (f *Fleet) AddCoordinator(cfg coordinator.Config) (*Role, error) {
	if cfg.Tasks == nil {
		cfg.Tasks = f.Tasks
	}
	if cfg.Bus == (topology.Config{}) {
		cfg.Bus = f.Bus
	}
	if cfg.Logger == nil {
		cfg.Logger = f.log
	}
	if cfg.ID == "" {
		cfg.ID = f.nextName("coordinator")
	}
	nc, err := f.connect(cfg.ID)
	if err != nil {
		return nil, err
	}
	rdb, err := f.redisClient()
	if err != nil {
		return nil, err
	}
	st, err := store.New(rdb, store.Config{KeyPrefix: cfg.Bus.Namespace.String()})
	if err != nil {
		return nil, err
	}
	c, err := coordinator.New(nc, st, cfg)
	if err != nil {
		return nil, err
	}
	r := &Role{Name: cfg.ID, Coordinator: c, nc: nc}
	f.run(r, c.Run)
	return r, nil
}

// AddVoter starts a voter on a connection of its own, calling m (nil: the
// fleet's model). Zero cfg fields take the fleet's tasks, bus config,
// logger and model name, a generated id and a 2s drain.
func (f *Fleet) AddVoter(m voter.Model, cfg voter.Config) (*Role, error) {
	if m == nil {
		m = f.Model
	}
	if cfg.Tasks == nil {
		cfg.Tasks = f.Tasks
	}
	if cfg.Bus == (topology.Config{}) {
		cfg.Bus = f.Bus
	}
	if cfg.Logger == nil {
		cfg.Logger = f.log
	}
	if cfg.ID == "" {
		cfg.ID = f.nextName("voter")
	}
	if cfg.Model == "" {
		cfg.Model = f.modelName
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 2 * time.Second
	}
	if m == f.Model && f.simHints {
		cfg.SimHints = true
	}
	nc, err := f.connect(cfg.ID)
	if err != nil {
		return nil, err
	}
	v, err := voter.New(nc, m, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	r := &Role{Name: cfg.ID, Voter: v, nc: nc}
	f.run(r, v.Run)
	return r, nil
}

// run starts r's Run in a goroutine stopped by Close. A role that stops
// with an error on its own (not stopped, not killed) is reported on
// Failed.
func (f *Fleet) run(r *Role, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	f.mu.Lock()
	if f.closed { // started after Close: never runs
		f.mu.Unlock()
		cancel()
		close(r.done)
		return
	}
	f.roles = append(f.roles, r)
	f.mu.Unlock()
	go func() { // owned: Close stops every role and waits for it
		defer close(r.done)
		r.err = run(ctx)
		if r.err != nil && ctx.Err() == nil && !r.killed.Load() {
			select {
			case f.errs <- fmt.Errorf("%s: %w", r.Name, r.err):
			default:
			}
		}
	}()
}

// Roles lists the roles started so far, oldest first.
func (f *Fleet) Roles() []*Role {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Role(nil), f.roles...)
}
