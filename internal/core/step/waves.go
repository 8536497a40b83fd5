package step

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// TopUp publishes the samples the step needs now: up to k − lead valid
// votes beyond the ones still uncounted, within the rung's sample cap. No
// candidate can win before k − lead more valid votes, so a wave never
// overshoots the sequential rule, and a red-flagged sample (counted for
// nobody) is replaced by the next top-up. When the cap is spent and every
// sample is counted, the step climbs its escalation ladder.
func (m *Machine) TopUp(now time.Time) ([]Action, error) {
	var acts []Action
	if m.dispatched == 0 {
		// The step's prompt is the voters' to build; one that the task
		// cannot build (a spec's template failing for this state) would
		// have every sample dead-lettered: the job fails here instead.
		if err := m.prompt(promptKey{m.Step, m.Epoch, 0}, m.State).err; errors.Is(err, task.ErrEval) {
			return m.failEval(err), nil
		}
		acts = m.adopt(now)
	}
	uncounted := m.dispatched - m.counters.Next
	need := m.K() - m.counters.Lead - uncounted
	if room := m.capN - m.dispatched; need > room {
		need = room
	}
	for i := 0; i < need; i++ {
		if i == need/2 && need >= 2 {
			acts = m.crash(acts, CrashMidWave, m.Step)
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
func (m *Machine) publish(now time.Time, index, attempt int) Action {
	req := m.request(now, m.Step, m.State, index, attempt, 0)
	m.published++
	if attempt > 0 {
		m.Acct.Resampled++
	}
	m.Pending[index] = &pending{Attempt: attempt, SentAt: now}
	m.decorrelate(req)
	m.noteSent(req)  // claims.go: what its answer may claim
	m.noteAsked(req) // pricing.go: the model it names
	return Action{Kind: ActPublish, Req: req}
}

// request asks for sample index at attempt of step from state (on
// branch, for a step sampled ahead; 0 for the open step): index 0 at the
// job's first temperature, every other index at the rest temperature; the
// model seed is a function of the job seed, the step and the index, so a
// re-sample (or a speculative sample, speculate.go) asks the same
// question. Its token is its sample id's capability (capability.go).
func (m *Machine) request(now time.Time, step int64, state task.State, index, attempt int, branch int64) *schemas.SampleRequest {
	temp := m.spec.Rest()
	if index == 0 {
		temp = m.spec.TemperatureFirst
	}
	id := schemas.BranchSampleID(m.spec.Tenant, m.spec.JobID, step, m.Epoch, index, attempt, branch)
	req := &schemas.SampleRequest{
		Header:          schemas.NewHeader(schemas.KindSampleRequest),
		Tenant:          m.spec.Tenant,
		JobID:           m.spec.JobID,
		SampleID:        id,
		Step:            step,
		Epoch:           m.Epoch,
		Index:           index,
		Attempt:         attempt,
		Branch:          branch,
		Task:            m.spec.Task,
		TaskVersion:     m.spec.TaskVersion,
		TaskHash:        m.spec.TaskHash,
		Params:          m.Params,
		ParamsRef:       m.ParamsRef,
		State:           state,
		Temperature:     temp,
		Seed:            SampleSeed(m.spec.Seed, step, index),
		MaxOutputTokens: m.spec.MaxOutputTokens,
		Token:           m.caps.token(id),
		IssuedAt:        now.UTC(),
	}
	if m.Rung == schemas.RungStrongerModel && step == m.Step {
		req.Model = m.spec.Escalation.StrongerModel
	}
	return req
}

// Timeout is how long a sample may go unanswered before it is published
// again: the job's sample timeout, doubled for each attempt so far, up to
// 16 timeouts.
func (m *Machine) Timeout(attempt int) time.Duration {
	return time.Duration(m.spec.SampleTimeoutMS) * time.Millisecond << min(attempt, 4)
}

// OnTick re-publishes samples whose answer is overdue. Each attempt waits
// twice as long as the one before: an answer that is only slow (a backlog,
// a rate-limited model retrying) is not paid for again and again, and the
// fleet is not flooded when it is already behind. A job never gives up on
// an index (the model may come back); voters log why it does not answer,
// and Stalled says since when the open step waits for one.
func (m *Machine) OnTick(now time.Time) []Action {
	if m.Halted() {
		return nil
	}
	var acts []Action
	for idx, p := range m.Pending {
		if now.Sub(p.SentAt) < m.Timeout(p.Attempt) {
			continue
		}
		lvl := slog.LevelDebug
		if p.Attempt >= 2 {
			lvl = slog.LevelWarn
		}
		m.log.Log(context.Background(), lvl, "sample still unanswered; re-publishing (is the model reachable? see the voters' logs)",
			"step", m.Step, "index", idx, "attempt", p.Attempt+1)
		acts = append(acts, m.publish(now, idx, p.Attempt+1))
		if m.Stalled.IsZero() {
			m.Stalled = now
		}
	}
	return acts
}

// Reopen starts the open step again under a new epoch, sampling it from
// scratch: answers of the old epoch are stale from then on.
func (m *Machine) Reopen(now time.Time, why string) ([]Action, error) {
	if m.Epoch+1 >= (m.token+1)*schemas.EpochsPerLease {
		return nil, fmt.Errorf("coordinator: step %d: out of epochs under lease %d", m.Step, m.token)
	}
	m.Epoch++
	m.log.Warn("re-sampling the open step under a new epoch", "step", m.Step, "epoch", m.Epoch, "why", why)
	acts := []Action{m.Open()}
	m.resetStep()
	more, err := m.TopUp(now)
	return append(acts, more...), err
}

// Open is the action that opens the step under the current epoch in
// Redis, noting whether the stronger model samples it.
func (m *Machine) Open() Action {
	if m.Rung == schemas.RungStrongerModel {
		m.strongerAt[[2]int64{m.Step, m.Epoch}] = true
	}
	return Action{Kind: ActOpenStep}
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
