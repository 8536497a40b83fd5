package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// topUp publishes the samples the step needs now: up to k − lead valid
// votes beyond the ones still uncounted, within the rung's sample cap. No
// candidate can win before k − lead more valid votes, so a wave never
// overshoots the sequential rule, and a red-flagged sample (counted for
// nobody) is replaced by the next top-up. When the cap is spent and every
// sample is counted, the step climbs its escalation ladder.
func (m *machine) topUp(now time.Time) ([]action, error) {
	var acts []action
	if m.dispatched == 0 {
		// The step's prompt is the voters' to build; one that the task
		// cannot build (a spec's template failing for this state) would
		// have every sample dead-lettered: the job fails here instead.
		if err := m.prompt(promptKey{m.step, m.epoch, 0}, m.state).err; errors.Is(err, task.ErrEval) {
			return m.failEval(err), nil
		}
		acts = m.adopt(now)
	}
	uncounted := m.dispatched - m.counters.Next
	need := m.k() - m.counters.Lead - uncounted
	if room := m.capN - m.dispatched; need > room {
		need = room
	}
	for i := 0; i < need; i++ {
		if i == need/2 && need >= 2 {
			acts = m.crash(acts, CrashMidWave, m.step)
		}
		acts = append(acts, m.publish(now, m.dispatched, 0))
		m.dispatched++
	}
	if m.dispatched >= m.capN && m.counters.Next >= m.dispatched {
		more, err := m.escalate()
		return append(acts, more...), err
	}
	return append(acts, m.speculate(now)...), nil
}

// publish is the request for index at attempt of the open step, noted
// as pending.
func (m *machine) publish(now time.Time, index, attempt int) action {
	req := m.request(now, m.step, m.state, index, attempt, 0)
	m.published++
	if attempt > 0 {
		m.acct.Resampled++
	}
	m.pending[index] = &pending{attempt: attempt, sentAt: now}
	m.decorrelate(req)
	m.noteSent(req)  // claims.go: what its answer may claim
	m.noteAsked(req) // pricing.go: the model it names
	return action{kind: actPublish, req: req}
}

// request asks for sample index at attempt of step from state (on
// branch, for a step sampled ahead; 0 for the open step): index 0 at the
// job's first temperature, every other index at the rest temperature; the
// model seed is a function of the job seed, the step and the index, so a
// re-sample (or a speculative sample, speculate.go) asks the same
// question. Its token is its sample id's capability (capability.go).
func (m *machine) request(now time.Time, step int64, state task.State, index, attempt int, branch int64) *schemas.SampleRequest {
	temp := m.spec.Rest()
	if index == 0 {
		temp = m.spec.TemperatureFirst
	}
	id := schemas.BranchSampleID(m.spec.Tenant, m.spec.JobID, step, m.epoch, index, attempt, branch)
	req := &schemas.SampleRequest{
		Header:          schemas.NewHeader(schemas.KindSampleRequest),
		Tenant:          m.spec.Tenant,
		JobID:           m.spec.JobID,
		SampleID:        id,
		Step:            step,
		Epoch:           m.epoch,
		Index:           index,
		Attempt:         attempt,
		Branch:          branch,
		Task:            m.spec.Task,
		TaskVersion:     m.spec.TaskVersion,
		TaskHash:        m.spec.TaskHash,
		Params:          m.params,
		State:           state,
		Temperature:     temp,
		Seed:            SampleSeed(m.spec.Seed, step, index),
		MaxOutputTokens: m.spec.MaxOutputTokens,
		Token:           m.caps.token(id),
		IssuedAt:        now.UTC(),
	}
	if m.rung == schemas.RungStrongerModel && step == m.step {
		req.Model = m.spec.Escalation.StrongerModel
	}
	return req
}

// timeout is how long a sample may go unanswered before it is published
// again: the job's sample timeout, doubled for each attempt so far, up to
// 16 timeouts.
func (m *machine) timeout(attempt int) time.Duration {
	return time.Duration(m.spec.SampleTimeoutMS) * time.Millisecond << min(attempt, 4)
}

// onTick re-publishes samples whose answer is overdue. Each attempt waits
// twice as long as the one before: an answer that is only slow (a backlog,
// a rate-limited model retrying) is not paid for again and again, and the
// fleet is not flooded when it is already behind. A job never gives up on
// an index (the model may come back); voters log why it does not answer.
func (m *machine) onTick(now time.Time) []action {
	if m.halted() {
		return nil
	}
	var acts []action
	for idx, p := range m.pending {
		if now.Sub(p.sentAt) < m.timeout(p.attempt) {
			continue
		}
		lvl := slog.LevelDebug
		if p.attempt >= 2 {
			lvl = slog.LevelWarn
		}
		m.log.Log(context.Background(), lvl, "sample still unanswered; re-publishing (is the model reachable? see the voters' logs)",
			"step", m.step, "index", idx, "attempt", p.attempt+1)
		acts = append(acts, m.publish(now, idx, p.attempt+1))
	}
	return acts
}

// reopen starts the open step again under a new epoch, sampling it from
// scratch: answers of the old epoch are stale from then on.
func (m *machine) reopen(now time.Time, why string) ([]action, error) {
	if m.epoch+1 >= (m.token+1)*schemas.EpochsPerLease {
		return nil, fmt.Errorf("coordinator: step %d: out of epochs under lease %d", m.step, m.token)
	}
	m.epoch++
	m.log.Warn("re-sampling the open step under a new epoch", "step", m.step, "epoch", m.epoch, "why", why)
	acts := []action{m.open()}
	m.resetStep()
	more, err := m.topUp(now)
	return append(acts, more...), err
}

// open is the action that opens the step under the current epoch in
// Redis, noting whether the stronger model samples it.
func (m *machine) open() action {
	if m.rung == schemas.RungStrongerModel {
		m.strongerAt[[2]int64{m.step, m.epoch}] = true
	}
	return action{kind: actOpenStep}
}

// SampleSeed derives a sample's model seed from the job seed, the step and
// the index (splitmix64), so a re-sample of an index asks the same
// question. It stays below 2^31 for servers that read seeds as int32.
func SampleSeed(jobSeed, step int64, index int) int64 {
	x := uint64(jobSeed) ^ uint64(step)*0x9E3779B97F4A7C15 ^ uint64(index+1)*0xC2B2AE3D27D4EB4F
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return int64(x & 0x7FFFFFFF)
}
