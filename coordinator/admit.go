package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/step"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
)

// Admission: a job's sample requests leave through admit, which holds
// them to the tenant's quotas and the fleet's in-flight capacity
// (internal/quota) before the budget reserves their cost (budget.go).
//
// Requests refused for now are deferred in the job's own queue, never
// waited for: the loop goes on reading results (its own answers free its
// places) and tries the queue again every Config.AdmitRetry. A deferred
// request's timeout counts from when it is actually published; a deferred
// attempt is dropped when a newer attempt of its index is queued, or when
// its step is decided or reopened meanwhile.
//
// With no limit on the tenant and no fleet capacity set, admission asks
// Redis nothing: requests go straight out.

// errYield: the job was handed back at a step boundary, checkpointed, so
// a job of a tenant below its share can run (time slicing, schedule.go).
// Not a failure: the job waits for the next free coordinator.
var errYield = errors.New("coordinator: job handed back for another tenant's")

// notYet is a sentAt in the far future: a deferred request does not time
// out while it waits to be published.
var notYet = time.Unix(1<<40, 0)

// admission is a job run's part of admission: the deferred queue, the
// requests it holds in flight in Redis, and a hand-back in progress.
type admission struct {
	deferred []*schemas.SampleRequest
	// held maps the quota member of each request in flight in Redis to
	// its step, epoch and index.
	held        map[string]heldReq
	nextTry     time.Time // when to try the deferred queue again
	nextRefresh time.Time // when to move the held requests' expiry on
	reqs        []*schemas.SampleRequest
	// slot is the job's place on this coordinator (schedule.go); its
	// yield flag asks for a hand-back. yieldStep is the step the job was
	// at when the hand-back was seen (-1: none): requests of later steps
	// are held back, and the job stops once it gets there.
	slot      *slot
	yieldStep int64
}

type heldReq struct {
	step, epoch int64
	index       int
}

// initAdmission readies the run's admission.
func (r *jobRun) initAdmission() {
	r.adm.held = map[string]heldReq{}
	r.adm.yieldStep = -1
	r.adm.slot = r.c.fair.slotOf(r.key())
}

func (r *jobRun) key() string { return bus.JobKey(r.spec.Tenant, r.spec.JobID) }

// limits returns the tenant's and the fleet's quota records, from the
// watch-fed cache (no round trip).
func (r *jobRun) limits() (q, fleet schemas.TenantQuota, limited bool) {
	q, _ = r.c.fair.quotas.Cached(r.spec.Tenant)
	fleet, _ = r.c.fair.quotas.Cached(schemas.FleetQuotaKey)
	return q, fleet, store.Limited(q, fleet)
}

// admit publishes reqs (one wave) as far as the limits allow and defers
// the rest.
func (r *jobRun) admit(ctx context.Context, reqs []*schemas.SampleRequest) error {
	a := &r.adm
	_, _, limited := r.limits()
	if !limited && len(a.deferred) == 0 && a.yieldStep < 0 {
		err := r.send(ctx, reqs, false)
		if !errors.Is(err, errBudgetBusy) {
			return err
		}
		// The budget waits for answers to settle: so do the requests.
		a.deferred = append(a.deferred, reqs...)
		a.nextTry = time.Now().Add(r.c.cfg.AdmitRetry)
		r.holdBack(a.deferred)
		return nil
	}
	for _, req := range reqs {
		// A newer attempt of an index replaces a deferred older one.
		kept := a.deferred[:0]
		for _, d := range a.deferred {
			if d.Step != req.Step || d.Epoch != req.Epoch || d.Index != req.Index {
				kept = append(kept, d)
			}
		}
		a.deferred = append(kept, req)
	}
	return r.flushDeferred(ctx, time.Now())
}

// admitAhead publishes requests of steps ahead (speculation) only when
// nothing would hold them back: no quota or fleet capacity applies, no
// request waits, no hand-back is due and no budget holds the job's cost.
// Otherwise none is sent and the machine forgets their steps: a step
// ahead is a bet on spare room, never a claim on it, and never the reason
// a job waits or pauses.
func (r *jobRun) admitAhead(ctx context.Context, reqs []*schemas.SampleRequest) error {
	a := &r.adm
	_, _, limited := r.limits()
	if limited || len(a.deferred) > 0 || a.yieldStep >= 0 || r.bud == nil || r.bud.live {
		r.m.Unsent(reqs)
		return nil
	}
	err := r.send(ctx, reqs, false)
	if errors.Is(err, errBudgetBusy) {
		r.m.Unsent(reqs)
		return nil
	}
	return err
}

// flushDeferred publishes what the limits admit of the deferred queue, in
// order; the rest stays queued until the next try.
func (r *jobRun) flushDeferred(ctx context.Context, now time.Time) error {
	a, m := &r.adm, r.m
	kept := a.deferred[:0]
	for _, d := range a.deferred {
		p, ok := m.Pending[d.Index]
		if d.Step == m.Step && d.Epoch == m.Epoch && ok && p.Attempt == d.Attempt {
			kept = append(kept, d)
		}
	}
	clear(a.deferred[len(kept):])
	a.deferred = kept
	ready := a.deferred
	if a.yieldStep >= 0 {
		for i, d := range ready {
			if d.Step > a.yieldStep {
				ready = ready[:i]
				break
			}
		}
	}
	if len(ready) == 0 {
		r.holdBack(a.deferred)
		return nil
	}
	q, fleet, limited := r.limits()
	n, retry := len(ready), time.Duration(0)
	if limited {
		members := make([]string, len(ready))
		for i, d := range ready {
			members[i] = store.Member(r.spec.JobID, d.Step, d.Epoch, d.Index)
		}
		adm, err := r.c.fair.limiter.Admit(ctx, store.AdmitRequest{
			Tenant: r.spec.Tenant, Job: r.spec.JobID, Priority: r.spec.Priority, Quota: q, Fleet: fleet,
			Members: members, Lifetime: r.c.fair.lifetime, Wait: r.c.fair.wait,
		})
		if err != nil {
			// Redis is away: the requests wait, as if refused.
			r.log.Warn("admit sample requests; will retry", "err", err)
			adm = store.Admission{}
		}
		n, retry = adm.Granted, adm.RetryAfter
	}
	if n > 0 {
		switch err := r.send(ctx, ready[:n], limited); {
		case errors.Is(err, errBudgetBusy):
			n = 0 // nothing published: the budget waits for answers to settle
		case err != nil:
			return err
		}
		a.deferred = a.deferred[n:]
	}
	if len(a.deferred) > 0 {
		a.nextTry = now.Add(max(retry, r.c.cfg.AdmitRetry))
	}
	r.holdBack(a.deferred)
	return nil
}

// holdBack keeps deferred requests from timing out while they wait.
func (r *jobRun) holdBack(reqs []*schemas.SampleRequest) {
	for _, d := range reqs {
		if p, ok := r.m.Pending[d.Index]; ok && p.Attempt == d.Attempt && d.Step == r.m.Step && d.Epoch == r.m.Epoch {
			p.SentAt = notYet
		}
	}
}

// send reserves the requests' cost (budget.go) and publishes them; held
// says they were admitted in Redis (their places are released as they are
// answered). A refused reservation publishes nothing and gives their
// places back.
func (r *jobRun) send(ctx context.Context, reqs []*schemas.SampleRequest, held bool) error {
	if err := r.reserve(ctx, reqs); err != nil {
		if held {
			members := make([]string, len(reqs))
			for i, req := range reqs {
				members[i] = store.Member(r.spec.JobID, req.Step, req.Epoch, req.Index)
			}
			r.release(ctx, members)
		}
		return err
	}
	for _, g := range groupSamples(reqs, r.c.cfg.SamplesPerCall) {
		if err := r.publish(ctx, g); err != nil {
			return err
		}
	}
	now := time.Now()
	for _, req := range reqs {
		if p, ok := r.m.Pending[req.Index]; ok && p.Attempt == req.Attempt && p.SentAt.After(now) {
			p.SentAt = now // it waited: its timeout counts from now
		}
		if held {
			r.adm.held[store.Member(r.spec.JobID, req.Step, req.Epoch, req.Index)] = heldReq{req.Step, req.Epoch, req.Index}
		}
	}
	r.noteSent(reqs)
	return nil
}

func (r *jobRun) release(ctx context.Context, members []string) {
	if len(members) == 0 {
		return
	}
	if err := r.c.fair.limiter.Release(ctx, r.spec.Tenant, members); err != nil {
		r.log.Warn("release sample requests in flight; they lapse instead", "err", err)
	}
}

// counted is called when results were recorded in the tally: their places
// in flight are free again, unless a newer attempt of the index is out
// (the place is the index's: it is freed when that attempt is answered,
// or once the job no longer waits for the index, admitTick). (The budget
// settles their cost once the batch is handled and its figures counted:
// settleBatch, from handle.)
func (r *jobRun) counted(ctx context.Context, results []step.Received) {
	if len(r.adm.held) == 0 {
		return
	}
	var members []string
	for _, it := range results {
		if r.m.NewerAttemptOut(it.Res) {
			continue
		}
		mb := store.Member(r.spec.JobID, it.Res.Step, it.Res.Epoch, it.Res.Index)
		if _, ok := r.adm.held[mb]; ok {
			delete(r.adm.held, mb)
			members = append(members, mb)
		}
	}
	r.release(ctx, members)
}

// admitTick runs on each turn of the job's loop: it tries the deferred
// queue when due, frees the places of requests the job no longer waits for
// (their step was decided or reopened), keeps the rest alive, and hands
// the job back when asked to at a step boundary.
func (r *jobRun) admitTick(ctx context.Context, now time.Time) error {
	a, m := &r.adm, r.m
	if a.slot != nil && a.yieldStep < 0 && a.slot.yield.Load() {
		a.yieldStep = m.Step
		r.log.Info("handing the job back at the next step boundary, for another tenant's job", "step", m.Step)
	}
	if a.yieldStep >= 0 && m.Step > a.yieldStep && !m.Halted() {
		return r.handBack(ctx)
	}
	if len(a.deferred) > 0 && !now.Before(a.nextTry) {
		if err := r.flushDeferred(ctx, now); err != nil {
			return err
		}
	}
	if len(a.held) > 0 && !now.Before(a.nextRefresh) {
		var gone, live []string
		for mb, h := range a.held {
			if !m.Awaits(h.step, h.epoch, h.index) {
				gone = append(gone, mb)
				delete(a.held, mb)
			} else {
				live = append(live, mb)
			}
		}
		r.release(ctx, gone)
		if _, err := r.c.fair.limiter.Refresh(ctx, r.spec.Tenant, live, r.c.fair.lifetime); err != nil {
			r.log.Warn("refresh sample requests in flight", "err", err)
		}
		a.nextRefresh = now.Add(r.c.fair.lifetime / 6)
	}
	return nil
}

// wake is when the loop must wake for admission at the latest (zero: no
// need).
func (r *jobRun) admitWake() time.Time {
	if len(r.adm.deferred) > 0 {
		return r.adm.nextTry
	}
	return time.Time{}
}

// handBack stops the job at this step boundary for another tenant's:
// checkpointed (nothing of the new step was published), its lease
// released by the scheduler.
func (r *jobRun) handBack(ctx context.Context) error {
	r.m.DropAhead(0) // the next owner asks again
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	r.publishStatus(ctx, schemas.StateQueued)
	if err := r.c.registry.MarkState(ctx, r.spec.Tenant, r.spec.JobID, schemas.StateQueued); err != nil {
		r.log.Warn("mark the job queued in the registry", "err", err)
	}
	return fmt.Errorf("%w: at step %d", errYield, r.m.Step)
}

// admitDone gives back what the run holds in Redis as it stops, however
// it stops: its requests in flight, its waiting entry, and its budget
// reservations of answers that never came (budget.go).
func (r *jobRun) admitDone(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	r.releaseBudget(ctx)
	if len(r.adm.held) > 0 {
		members := make([]string, 0, len(r.adm.held))
		for mb := range r.adm.held {
			members = append(members, mb)
		}
		clear(r.adm.held)
		r.release(ctx, members)
	}
	if _, _, limited := r.limits(); limited {
		if err := r.c.fair.limiter.Unwait(ctx, r.spec.Tenant, r.spec.JobID); err != nil {
			r.log.Warn("forget the job's waiting entry", "err", err)
		}
	}
}

// groupSamples puts the requests that ask the same question (the same
// step, state, model, prompt and limits: a wave's samples) into requests
// of at most perCall samples each (schemas.SampleRequest.Also), in order,
// each member at its own temperature; a sample at temperature 0 joins no
// request (n copies of one greedy answer are not votes) but may head one.
// The machine's requests are not changed.
func groupSamples(reqs []*schemas.SampleRequest, perCall int) []*schemas.SampleRequest {
	if perCall <= 1 || len(reqs) < 2 {
		return reqs
	}
	out := make([]*schemas.SampleRequest, 0, len(reqs))
	var head *schemas.SampleRequest
	for _, req := range reqs {
		if head != nil && len(head.Also)+1 < perCall && req.Temperature > 0 && sameQuestion(head, req) {
			m := schemas.SampleMember{Index: req.Index, Seed: req.Seed, Token: req.Token}
			if req.Temperature != head.Temperature {
				m.Temperature = req.Temperature
			}
			head.Also = append(head.Also, m)
			continue
		}
		h := *req
		head = &h
		out = append(out, head)
	}
	return out
}

// sameQuestion reports whether b may be drawn in a's call.
func sameQuestion(a, b *schemas.SampleRequest) bool {
	return a.Step == b.Step && a.Epoch == b.Epoch && a.Branch == b.Branch && a.Attempt == b.Attempt &&
		a.Model == b.Model && a.PromptVariant == b.PromptVariant &&
		a.MaxOutputTokens == b.MaxOutputTokens && a.Task == b.Task && a.TaskVersion == b.TaskVersion && a.TaskHash == b.TaskHash &&
		bytes.Equal(a.State, b.State) && a.ParamsRef == b.ParamsRef && bytes.Equal(a.Params, b.Params)
}
