package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/step"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/schemas"
)

// arbitrationWait bounds how long a step waits for the judge (an answer
// held for a person's approval included); past it the job pauses for a
// person, as when the judge is not confident enough.
const arbitrationWait = 15 * time.Minute

// arbitrate puts req to the judge's panel and hands the machine its
// decision. A pause, a cancel or a person's answer for the step is acted on
// at once, not after the wait; a refusal, an unconfident answer or no
// answer in time pauses the job for a person; a failing bus fails the job
// (it is retried and resumes the arbitration, whose climb is journaled).
func (r *jobRun) arbitrate(ctx context.Context, req *schemas.ArbitrationRequest) error {
	m := r.m
	// What it may cost is held on the job's budget and its tenant's day
	// first (budget.go), and the judge spends no more: an arbitration
	// the limits cannot hold is not asked for, a person decides.
	held, err := r.reserveArbitration(ctx, req.Step)
	switch {
	case errors.Is(err, errNoArbitration):
		return r.do(ctx, m.NeedsHuman(fmt.Sprintf("the step gets no arbitration: %v; raise the job's budget or the tenant's spend per day and resume the job to ask the panel", err)))
	case err != nil:
		return err
	}
	req.BudgetUSD, m.ArbCap = held.USD(), held.USD()
	actx, cancel := context.WithCancelCause(ctx)
	stop := r.cancelOnControl(actx, cancel, m.Step)
	tctx, tcancel := context.WithTimeout(actx, arbitrationWait)
	d, err := judgeclient.Arbitrate(tctx, r.c.js, r.topo.NS, req)
	timedOut := errors.Is(tctx.Err(), context.DeadlineExceeded) && actx.Err() == nil
	tcancel()
	stop()
	controlled := errors.Is(context.Cause(actx), errControlled)
	cancel(nil)
	switch {
	case err == nil:
		r.sync()
		acts, aerr := m.Arbitrated(time.Now(), d)
		// What it cost is in the figures now: spent, and its hold
		// released, before the next step's wave reserves.
		if err := r.settleArbitration(ctx, req.Step); err != nil {
			return err
		}
		if err := r.do(ctx, acts); err != nil {
			return err
		}
		return aerr
	case ctx.Err() != nil:
		return ctx.Err()
	case controlled:
		return r.interrupted(ctx)
	case errors.Is(err, schemas.ErrInvalid):
		// The judge would refuse what we would send: a person decides.
		return r.do(ctx, m.NeedsHuman(fmt.Sprintf("the step cannot be put to the judge: %v", err)))
	case !timedOut:
		return fmt.Errorf("coordinator: arbitration of step %d: %w", m.Step, err)
	default:
		return r.do(ctx, m.NeedsHuman(fmt.Sprintf("no arbitration within %s: %v", arbitrationWait, err)))
	}
}

// interrupted goes on after an arbitration was cut short by a pause, a
// cancel or a person's answer for the step. A paused job's checkpoint
// keeps the step on the panel's rung, and the resumed job asks again (the
// stored answer, if any, is read); a job resumed before the pause was
// acted on asks again at once.
func (r *jobRun) interrupted(ctx context.Context) error {
	m := r.m
	r.sync()
	if err := r.do(ctx, m.ObeyControl()); err != nil || m.Halted() {
		return err
	}
	at := m.Step
	if err := r.personDecision(ctx); err != nil || m.Halted() {
		return err
	}
	if m.Step == at {
		return r.do(ctx, m.Arbitrate())
	}
	// A person decided the step; no script opened the next one.
	if err := r.do(ctx, []step.Action{m.Open()}); err != nil {
		return err
	}
	return r.event(ctx, m.MoveOn)
}

// cancelOnControl cancels ctx with errControlled as soon as the job is
// asked to pause or cancel, or a person answers step, for waits longer
// than a step (an arbitration may wait for a person's approval). stop ends
// the watch.
func (r *jobRun) cancelOnControl(ctx context.Context, cancel context.CancelCauseFunc, step int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if c := r.control.Load().(string); c == schemas.ControlPause || c == schemas.ControlCancel || r.personAt.Load() == step {
				cancel(errControlled)
				return
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-r.controlled:
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
