// Package service is how a makerfleet process runs its parts and stops
// them: each part is a Service, and Run starts them in order and stops
// them in reverse order, one after the other, so a part stops only once
// every part started after it (which may use it) has stopped.
//
// A coordinator, for instance, runs its quota caches, then its control
// service, then its work (intake, dead letters, batches, retention, the
// job scheduler, as one Group); on shutdown the work winds down first
// (jobs checkpoint and hand their leases back), the control service
// answers until then, and the caches go last.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
)

// A Service is one long-running part of a process.
type Service interface {
	// Name names the service in errors and logs.
	Name() string
	// Run runs the service until ctx ends, then returns nil; an error
	// stops every service of the Run. Run calls ready once the service
	// is in place (subscribed, its caches filled): the next service
	// starts only then. A Run that returns without calling ready counts
	// as ready.
	Run(ctx context.Context, ready func()) error
}

// ErrStopped is what a service that ended on its own, before its context
// did, is taken to have returned: a service runs until it is stopped.
var ErrStopped = errors.New("service: stopped on its own")

// Func is a Service of a name and a function that is ready as soon as it
// starts.
func Func(name string, run func(ctx context.Context) error) Service {
	return funcService{name: name, run: func(ctx context.Context, ready func()) error { ready(); return run(ctx) }}
}

// Ready is a Service of a name and a function that says itself when it is
// ready.
func Ready(name string, run func(ctx context.Context, ready func()) error) Service {
	return funcService{name: name, run: run}
}

// Started is a Service of something that runs in the background once
// start returns (a subscription, a watch-fed cache): ready when start
// returns, stopped by the stop it returned.
func Started(name string, start func(ctx context.Context) (stop func(), err error)) Service {
	return Ready(name, func(ctx context.Context, ready func()) error {
		stop, err := start(ctx)
		if err != nil {
			return err
		}
		defer stop()
		ready()
		<-ctx.Done()
		return nil
	})
}

type funcService struct {
	name string
	run  func(ctx context.Context, ready func()) error
}

func (f funcService) Name() string                                { return f.name }
func (f funcService) Run(ctx context.Context, ready func()) error { return f.run(ctx, ready) }

// Run starts svcs in order, each once the one before it is ready, and runs
// them until ctx ends or one of them fails (or returns while its context
// is live: ErrStopped). Then it stops them in reverse order, waiting for
// each to return before it stops the one before. It returns the error
// that came first (the cause; one a service returns while it is being
// stopped comes after it), wrapped with the service's name, or nil when
// ctx ended the run and every service stopped cleanly.
// Every goroutine it starts has returned when it returns.
//
// A panic in a service is not recovered: it ends the process, as it would
// in the service's own goroutine (a recovered panic would leave the other
// services running on broken state).
func Run(ctx context.Context, svcs ...Service) error {
	type running struct {
		cancel context.CancelFunc
		done   chan struct{} // closed once Run returned and err is set
		err    error
	}
	ended := make(chan struct{}, len(svcs)) // a send per service that returned
	var (
		started []*running
		mu      sync.Mutex
		first   error // the error that came first in time: the cause
	)
	for _, s := range svcs {
		// Stopped by this Run, in order, not by ctx directly.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &running{cancel: cancel, done: make(chan struct{})}
		started = append(started, r)
		ready := make(chan struct{})
		go func() {
			defer func() { ended <- struct{}{} }()
			defer close(r.done)
			r.err = named(s, sctx, s.Run(sctx, sync.OnceFunc(func() { close(ready) })))
			if r.err != nil {
				mu.Lock()
				first = cmp.Or(first, r.err)
				mu.Unlock()
			}
		}()
		select {
		case <-ready:
		case <-r.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || isClosed(r.done) {
			break // stop what started
		}
	}
	select {
	case <-ctx.Done():
	case <-ended:
	}
	for i := len(started) - 1; i >= 0; i-- {
		started[i].cancel()
		<-started[i].done
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}

// named is the error a service's Run returned as this package reports it:
// nil for a service that returned because it was stopped, ErrStopped for
// one that returned nil on its own, else err with the service's name.
func named(s Service, ctx context.Context, err error) error {
	stopped := ctx.Err() != nil
	switch {
	case err == nil && !stopped:
		err = ErrStopped
	case err == nil, stopped && errors.Is(err, context.Canceled):
		return nil
	}
	return fmt.Errorf("%s: %w", s.Name(), err)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Group is a Service of services that run side by side: they start in
// order, each once the one before is ready, and the group is ready once
// they all are; when it stops, they stop together (not one by one), and
// it returns when the last has. One failing stops the others.
func Group(name string, svcs ...Service) Service {
	return Ready(name, func(ctx context.Context, ready func()) error {
		gctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		var wg sync.WaitGroup
		errs := make([]error, len(svcs))
		for i, s := range svcs {
			readyCh := make(chan struct{})
			done := make(chan struct{})
			wg.Go(func() {
				defer close(done)
				if errs[i] = named(s, gctx, s.Run(gctx, sync.OnceFunc(func() { close(readyCh) }))); errs[i] != nil {
					cancel(errs[i])
				}
			})
			select {
			case <-readyCh:
			case <-done:
			case <-gctx.Done():
			}
			if gctx.Err() != nil {
				break
			}
		}
		if gctx.Err() == nil {
			ready()
		}
		<-gctx.Done()
		wg.Wait()
		return errors.Join(errs...)
	})
}
