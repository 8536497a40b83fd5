package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/judge/judgeclient"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// arbitrationWait bounds how long a step waits for the judge (an answer
// held for a person's approval included); past it the job pauses for a
// person, as when the judge is not confident enough.
const arbitrationWait = 15 * time.Minute

// escalate is where a rung that spent its samples without a decision goes
// next, by the job's policy (nextRung): the stronger model votes on
// the step afresh, under a new epoch; then, if the policy opts in, the
// judge's panel arbitrates among the candidates; else the job ends
// no_consensus.
func (r *jobRun) escalate(ctx context.Context) error {
	pol := r.policy()
	next := nextRung(pol, r.rung == schemas.RungStrongerModel)
	if next == rungNoConsensus {
		return r.noConsensus(ctx)
	}
	tally, _, err := r.c.store.CloseStep(ctx, r.ref, r.step, r.epoch)
	if errors.Is(err, store.ErrNoStep) {
		return r.reopen(ctx, "the step's tally is gone from Redis")
	}
	if err != nil {
		return err
	}
	rt := r.rungTally(tally)
	// Journaled (fenced) before the next rung starts: a new owner resumes
	// the step at that rung, with these tallies, instead of paying for
	// the rungs below again.
	prior := append(slices.Clone(r.prior), rt)
	e := schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
		Type: schemas.EntryEscalation, Token: r.token, Owner: r.c.cfg.ID, Step: r.step, Epoch: r.epoch,
		Rung: next, Prior: prior, At: time.Now().UTC(),
	}
	if err := r.appendNow(ctx, &e); err != nil {
		return err
	}
	r.sinceCkpt++
	r.climb(next, prior)
	r.publishStatus(ctx, schemas.StateRunning)
	if next == schemas.RungStrongerModel {
		r.log.Warn("no consensus: the stronger model votes on the step", "step", r.step, "model", pol.StrongerModel,
			"samples", rt.Counted, "tally", tally)
		return r.reopen(ctx, "escalated to the stronger model "+pol.StrongerModel)
	}
	return r.arbitrate(ctx, pol)
}

// rungNoConsensus: no rung is left; the job ends no_consensus.
const rungNoConsensus = "no_consensus"

// nextRung returns what a step that exhausted its samples does next, given
// the job's policy and whether the stronger model already voted (and also
// reached no consensus).
func nextRung(p schemas.EscalationPolicy, strongerDone bool) string {
	switch {
	case !strongerDone && p.StrongerModel != "":
		return schemas.RungStrongerModel
	case p.Panel:
		return schemas.RungPanel
	default:
		return rungNoConsensus
	}
}

// rungTally is what the open step's rung counted (tally is its closed
// tally). Answers recorded past the counted ones were drawn for nothing:
// they go to the report's late samples.
func (r *jobRun) rungTally(tally []schemas.TallyEntry) schemas.RungTally {
	rt := schemas.RungTally{
		Rung: schemas.RungOwnModel, Counted: r.counters.Next, Valid: r.counters.Valid, RedFlagged: r.counters.RedFlagged,
		RedFlags: r.redFlags(r.counters.Next), Tally: tally,
	}
	if r.rung != "" {
		rt.Rung = r.rung
	}
	r.rep.LateSamples += int64(max(0, len(r.seen)-r.counters.Next))
	return rt
}

// policy is the job's escalation policy with its defaults.
func (r *jobRun) policy() schemas.EscalationPolicy {
	if r.spec.Escalation == nil {
		return schemas.EscalationPolicy{}
	}
	return r.spec.Escalation.WithDefaults()
}

// climb puts the open step on rung ("": the job's own model), above the
// rungs in prior, with that rung's sample cap.
func (r *jobRun) climb(rung string, prior []schemas.RungTally) {
	r.rung, r.prior, r.capN = rung, prior, r.spec.MaxSamplesPerStep
	if rung == schemas.RungStrongerModel {
		r.capN = r.policy().StrongerSamples
	}
}

// arbitrate asks the judge's panel to settle the step among the candidates
// the rungs below found. Its choice is journaled as an arbiter entry (not
// votes); a refusal, a degraded or unconfident answer, or no answer in
// time pauses the job for a person.
func (r *jobRun) arbitrate(ctx context.Context, pol schemas.EscalationPolicy) error {
	cands, samples := schemas.MergeRungs(r.prior)
	if len(cands) == 0 {
		return r.needsHuman(ctx, "no rung found a valid candidate (every sample was red-flagged): nothing to arbitrate among")
	}
	req := &schemas.ArbitrationRequest{
		Tenant: r.spec.Tenant, JobID: r.spec.JobID, Step: r.step, Task: r.spec.Task, State: string(r.state),
		K: r.spec.K, Samples: samples, Candidates: cands, Rungs: r.prior, MinConfidence: pol.MinConfidence,
	}
	r.log.Warn("no consensus: asking the judge's panel to arbitrate", "step", r.step, "candidates", len(cands))
	actx, cancel := context.WithCancelCause(ctx)
	stop := r.cancelOnControl(actx, cancel, r.step)
	tctx, tcancel := context.WithTimeout(actx, arbitrationWait)
	d, err := judgeclient.Arbitrate(tctx, r.c.js, r.topo.NS, req)
	timedOut := errors.Is(tctx.Err(), context.DeadlineExceeded) && actx.Err() == nil
	tcancel()
	stop()
	controlled := errors.Is(context.Cause(actx), errControlled)
	cancel(nil)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ctx.Err()
	case controlled:
		return r.interrupted(ctx, pol)
	case errors.Is(err, schemas.ErrInvalid):
		// The judge would refuse what we would send: a person decides.
		return r.needsHuman(ctx, fmt.Sprintf("the step cannot be put to the judge: %v", err))
	case !timedOut:
		// The bus failed, not the judge: the job is retried, and resumes
		// the arbitration (the climb is journaled) without a person.
		return fmt.Errorf("coordinator: arbitration of step %d: %w", r.step, err)
	default:
		return r.needsHuman(ctx, fmt.Sprintf("no arbitration within %s: %v", arbitrationWait, err))
	}
	if d.Outcome != schemas.ArbiterDecided {
		return r.needsHuman(ctx, d.Reason)
	}
	if _, err := r.inst.Next(r.state, task.Vote{Key: d.VoteKey}); err != nil {
		return r.needsHuman(ctx, fmt.Sprintf("the judge's choice %q is not a move the task can take: %v", d.VoteKey, err))
	}
	r.log.Warn("arbiter decision", "step", r.step, "vote_key", d.VoteKey, "confidence", d.Confidence, "judge", d.JudgeModel)
	e := schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
		Type: schemas.EntryArbiter, Token: r.token, Owner: r.c.cfg.ID, Step: r.step, Epoch: r.epoch,
		VoteKey: d.VoteKey, Rung: schemas.RungPanel, Prior: r.prior, Arbiter: d, At: time.Now().UTC(),
	}
	// The last rung's answers, recorded under this epoch, stay known.
	return r.commit(ctx, &e, r.counters.Next)
}

// interrupted goes on after an arbitration was cut short by a pause, a
// cancel or a person's answer for the step. A paused job's checkpoint
// keeps the step on the panel's rung, and the resumed job asks again (the
// stored answer, if any, is read); a job resumed before the pause was
// acted on asks again at once.
func (r *jobRun) interrupted(ctx context.Context, pol schemas.EscalationPolicy) error {
	if err := r.obeyControl(ctx); err != nil || r.done {
		return err
	}
	step := r.step
	if err := r.personDecision(ctx); err != nil {
		return err
	}
	if r.step == step {
		return r.arbitrate(ctx, pol)
	}
	// A person decided the step; no script opened the next one.
	if err := r.openStep(ctx); err != nil {
		return err
	}
	return r.moveOn(ctx)
}

// cancelOnControl cancels ctx with errControlled as soon as the job is
// asked to pause or cancel, or a person answers step, for waits longer
// than a step (an arbitration may wait for a person's approval). stop ends
// the watch.
func (r *jobRun) cancelOnControl(ctx context.Context, cancel context.CancelCauseFunc, step int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
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
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// abandonLadder leaves the open step's escalation: the samples its rungs
// drew count as late samples, and the step is back on its first rung.
func (r *jobRun) abandonLadder() {
	for _, p := range r.prior {
		r.rep.LateSamples += int64(p.Counted)
	}
	r.climb("", nil)
}

// needsHuman pauses the job at the open step for a person, saying why.
// The step stays on its rung: a plain resume asks the panel again (its
// stored answer, or the one a person approved meanwhile) rather than
// paying for the rungs below once more.
func (r *jobRun) needsHuman(ctx context.Context, why string) error {
	r.log.Error("the step needs a person: pausing the job", "step", r.step, "why", why)
	// Fenced first: an owner that lost the job must not pause it.
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	if _, err := jobs.Control(ctx, r.topo, r.spec.Tenant, r.spec.JobID, schemas.ControlPause); err != nil {
		if !errors.Is(err, jobs.ErrFinished) {
			return err
		}
		// Being cancelled: the cancel wins.
		r.control.Store(schemas.ControlCancel)
		return r.obeyControl(ctx)
	}
	// Paused here and now, not through r.control: the registry watch may
	// still deliver an older record saying run.
	return r.pause(ctx)
}

// personDecision journals a person's answer (maker decide) for the step the
// job resumes at, as an arbiter decision (rung "person"), instead of
// sampling the step. An answer the task cannot take pauses the job again,
// saying why.
func (r *jobRun) personDecision(ctx context.Context) error {
	rec, _, err := jobs.Get(ctx, r.topo, r.spec.Tenant, r.spec.JobID)
	if err != nil {
		return err
	}
	d := rec.Decision
	if d == nil || d.Step != r.step {
		return nil
	}
	if _, err := r.inst.Next(r.state, task.Vote{Key: d.VoteKey}); err != nil {
		// Paused again: the next `maker decide` replaces the answer.
		return r.needsHuman(ctx, fmt.Sprintf("%s's answer %q for step %d is not a move the task can take: %v", d.By, d.VoteKey, d.Step, err))
	}
	r.log.Warn("a person decided the step", "step", r.step, "vote_key", d.VoteKey, "by", d.By)
	e := schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
		Type: schemas.EntryArbiter, Token: r.token, Owner: r.c.cfg.ID, Step: r.step, Epoch: r.epoch,
		VoteKey: d.VoteKey, Rung: schemas.RungPerson, Prior: r.prior, At: time.Now().UTC(),
		Arbiter: &schemas.ArbiterDecision{
			Header: schemas.NewHeader(schemas.KindArbiterDecision), Tenant: r.spec.Tenant, JobID: r.spec.JobID,
			Step: r.step, RequestID: fmt.Sprintf("person-%d", r.step), Outcome: schemas.ArbiterDecided,
			VoteKey: d.VoteKey, Confidence: 1, Reason: "decided by " + d.By, JudgeModel: "person:" + d.By, DecidedAt: d.At,
		},
	}
	if err := r.appendNow(ctx, &e); err != nil {
		return err
	}
	r.notePrev(r.counters.Next)
	return r.apply(&e, false)
}
