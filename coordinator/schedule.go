package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/lease"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// schedule watches the registry and, every ScanInterval (or when poked),
// takes the lease of unfinished, unpaused jobs that have no live owner,
// while it has room, in fair order (fair.go), and runs them.
func (c *Coordinator) schedule(ctx context.Context, topo *topology.Topology, poke <-chan struct{}, wg *sync.WaitGroup) {
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
		c.take(ctx, topo, open, wg)
	}
}

// take starts the open jobs this coordinator has room for, in fair order
// (fair.go), within each tenant's running-job quota; when it is
// full and a job of a tenant below its share waits, it asks the job most
// over its share to hand itself back (time slicing).
func (c *Coordinator) take(ctx context.Context, topo *topology.Topology, open map[string]schemas.JobRecord, wg *sync.WaitGroup) {
	q := c.fair.queue(open, c.isRunning)
	for c.hasRoom() {
		key, rec, ok := q.next()
		if !ok {
			return
		}
		started, refused := c.start(ctx, topo, open, key, rec, wg)
		switch {
		case refused:
			q.drop(rec.Tenant) // at its running-job quota: none of its jobs now
		case started:
			q.started(rec.Tenant)
		}
	}
	c.fair.slice(ctx, topo, q, c.cfg.Slice, c.log)
}

// start takes the lease of one open job and runs it. refused says the
// tenant is at its running-job quota. The running-job slot is taken under
// the lease (only the job's lease holder takes or gives back its slot),
// after a cheap look at the tenant's count spares a lease write when the
// tenant is plainly full.
func (c *Coordinator) start(ctx context.Context, topo *topology.Topology, open map[string]schemas.JobRecord, key string, rec schemas.JobRecord, wg *sync.WaitGroup) (started, refused bool) {
	if c.fair.full(ctx, rec.Tenant) {
		return false, true
	}
	l, err := c.leases.Acquire(ctx, rec.Tenant, rec.JobID)
	if err != nil {
		if !errors.Is(err, lease.ErrHeld) && ctx.Err() == nil {
			c.log.Warn("take job lease", "key", key, "err", err)
		}
		return false, false
	}
	// The watch may lag (a server restart, say): the registry itself has
	// the last word on whether the job still needs us.
	cur, _, err := c.registry.Get(ctx, rec.Tenant, rec.JobID)
	if err != nil || cur.Finished || cur.Control == schemas.ControlPause {
		if err == nil {
			if cur.Finished {
				delete(open, key)
			} else {
				open[key] = cur
			}
		}
		c.release(ctx, l, 0, c.log)
		return false, false
	}
	runSlot, err := c.fair.acquireRun(ctx, rec.Tenant, rec.JobID, c.cfg.LeaseTTL)
	if err != nil || runSlot == slotRefused {
		if err != nil && ctx.Err() == nil {
			c.log.Warn("take a running-job slot", "key", key, "err", err)
		}
		c.release(ctx, l, 0, c.log)
		return false, runSlot == slotRefused
	}
	rec = cur
	c.setRunning(key, true)
	c.fair.add(key, rec.Tenant, runSlot == slotHeld)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			// A job wound down by the coordinator's stop stays
			// counted until Run returns: the stop's log line says
			// how many it hands back, however fast they go.
			if ctx.Err() == nil {
				c.setRunning(key, false)
			}
		}()
		c.own(ctx, topo, l, rec)
	}()
	return true, false
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
		delete(c.waiting, key)
		delete(c.present, key)
	}
}

// setWaiting records why a running job waits on the fleet ("": it does
// not), for maker_jobs_waiting.
func (c *Coordinator) setWaiting(key, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if reason == "" || !c.running[key] {
		delete(c.waiting, key)
		return
	}
	c.waiting[key] = reason
}

// own runs a job this coordinator holds the lease of, renewing the lease
// meanwhile, and settles the lease and registry by how the run ended.
func (c *Coordinator) own(ctx context.Context, topo *topology.Topology, l *lease.Lease, rec schemas.JobRecord) {
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
	// Its running-job slot is given back (the last step, after the
	// lease's, so the slot is never free while the job runs), unless the
	// lease was lost: the slot is the job's, so the new owner holds it now.
	lost := false
	defer func() {
		c.fair.remove(sctx, bus.JobKey(spec.Tenant, spec.JobID), spec.Tenant, spec.JobID, !lost, log)
	}()

	switch {
	case errors.Is(err, errLeaseLost):
		lost = true
		log.Warn("lost the job's lease; another coordinator runs it now", "err", err)
	case err == nil:
		log.Info("job finished", "state", rep.State, "steps", rep.Steps, "errors", rep.Errors,
			"samples_per_step", rep.SamplesPerStep, "wall_seconds", rep.WallSeconds)
		if err := c.registry.MarkFinished(sctx, spec.Tenant, spec.JobID, rep.State); err != nil {
			log.Error("mark the job finished", "err", err)
		}
		c.cfg.Metrics.JobFinished(spec.Tenant, rep.State)
		c.release(sctx, l, 0, log)
	case errors.Is(err, errPaused):
		log.Info("job paused", "steps", rep.Steps)
		c.release(sctx, l, 0, log)
	case errors.Is(err, errYield):
		log.Info("job handed back for another tenant's; it resumes when a coordinator has room", "steps", rep.Steps)
		c.release(sctx, l, 0, log)
	case errors.Is(err, ErrInvalidJob):
		log.Error("job refused", "err", err)
		if err := c.registry.MarkFinished(sctx, spec.Tenant, spec.JobID, schemas.StateFailed); err != nil {
			log.Error("mark the job finished", "err", err)
		}
		c.cfg.Metrics.JobFinished(spec.Tenant, schemas.StateFailed)
		c.release(sctx, l, 0, log)
	case ctx.Err() != nil:
		log.Info("job handed back at shutdown", "steps", rep.Steps)
		c.release(sctx, l, 0, log)
	case c.leases.Renew(sctx, l) != nil:
		// Not ours any more (or not provably): a failure seen by a
		// coordinator that lost the job is not the job's.
		lost = true
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
			if err := c.registry.MarkFinished(sctx, spec.Tenant, spec.JobID, schemas.StateFailed); err != nil {
				log.Error("mark the job finished", "err", err)
			}
			c.failJob(sctx, topo, spec, fmt.Sprintf("failed %d times; last error: %v", n, err))
			c.cfg.Metrics.JobFinished(spec.Tenant, schemas.StateFailed)
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
			c.fair.refreshRun(ctx, l.Tenant, l.JobID, c.cfg.LeaseTTL, log)
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
func (c *Coordinator) runJobSafely(ctx context.Context, topo *topology.Topology, token int64, rec schemas.JobRecord) (rep schemas.JobReport, err error) {
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
