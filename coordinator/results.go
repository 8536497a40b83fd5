package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// incoming is a result message as the shell read it.
type incoming struct {
	data    []byte
	subject string
}

// received is a result the machine sent to Redis, and its message.
type received struct {
	msg int
	res schemas.SampleResult
}

// naked is the delay before a result Redis did not take comes back.
const nakDelay = 250 * time.Millisecond

// onResults screens a batch of result messages: it settles the ones that
// cannot count (unreadable, forged, another step's, an index never
// published, a vote the task cannot read, a skip), and asks for the rest
// to be recorded in one Redis round trip (the last action; the shell
// calls recorded with the outcomes). Before anything else reads a result,
// its token is checked (capability.go) and its token counts bounded
// (claims.go).
func (m *machine) onResults(now time.Time, batch []incoming) []action {
	var acts []action
	m.batch = m.batch[:0]
	m.verified = slices.Grow(m.verified[:0], len(batch))[:len(batch)]
	clear(m.verified)
	var samples []vote.Sample
	for i, in := range batch {
		var res schemas.SampleResult
		if err := schemas.Decode(in.data, &res); err != nil || res.Tenant != m.spec.Tenant || res.JobID != m.spec.JobID {
			m.acct.MalformedMessages++
			m.log.Warn("dropping malformed result", "err", err, "subject", in.subject)
			acts = append(acts, settle(i, fateTerm, "malformed result"))
			continue
		}
		if !m.caps.verify(res.SampleID, res.Token) {
			m.forged(now, &res, in.subject)
			acts = append(acts, settle(i, fateTerm, "forged result: not its sample's token"))
			continue
		}
		m.verified[i] = res.SampleID
		m.bounded(now, &res)
		if m.takeAhead(res) {
			acts = append(acts, settle(i, fateAck, ""))
			continue
		}
		if m.isLost(res.Branch) || res.Step == m.step && res.Epoch == m.epoch && m.lostBranch(res) {
			// A guess that lost: its samples are counted as wasted already.
			m.addTokens(&res, 1)
			acts = append(acts, settle(i, fateAck, ""))
			continue
		}
		if res.Step != m.step || res.Epoch != m.epoch {
			m.countLate(res, false)
			acts = append(acts, settle(i, fateAck, ""))
			continue
		}
		if res.Index >= m.dispatched {
			m.addTokens(&res, 1)
			m.acct.MalformedMessages++
			m.log.Warn("dropping result for an index never published", "step", res.Step, "index", res.Index)
			acts = append(acts, settle(i, fateTerm, "index never published"))
			continue
		}
		if res.Outcome == schemas.OutcomeVote {
			// A voter's key is counted only if the task could move on from
			// it: a rogue or broken voter cannot win a step with garbage.
			if _, err := m.inst.Next(m.state, task.Vote{Key: res.VoteKey}); errors.Is(err, task.ErrEval) {
				// Not the vote's fault: the task cannot move on from a
				// readable answer (a spec's next expression failing).
				return append(acts, m.failEval(err)...)
			} else if err != nil {
				m.addTokens(&res, 1)
				m.acct.MalformedMessages++
				m.log.Warn("dropping a vote the task cannot read", "voter", res.VoterID, "step", res.Step, "index", res.Index, "err", err)
				acts = append(acts, settle(i, fateTerm, "vote key the task cannot read"))
				continue
			}
		}
		if res.Outcome == schemas.OutcomeSkipped || res.Outcome == schemas.OutcomeCancelled {
			// A voter thought this step decided (an old event); ask again.
			m.countLate(res, false)
			m.answered++
			acts = append(acts, settle(i, fateAck, ""))
			if p, ok := m.pending[res.Index]; ok && p.attempt == res.Attempt {
				if p.skips++; p.skips <= maxSkips {
					skips := p.skips
					acts = append(acts, m.publish(now, res.Index, p.attempt+1))
					m.pending[res.Index].skips = skips
				}
			}
			continue
		}
		m.batch = append(m.batch, received{msg: i, res: res})
		samples = append(samples, sampleOf(res))
	}
	if len(samples) > 0 {
		acts = append(acts, action{kind: actRecord, samples: samples})
	}
	return acts
}

// recordFailed goes on after Redis did not record the batch: a step whose
// tally is gone is sampled again under a new epoch; otherwise the results
// come back after a delay and are recorded (and accounted) then, as
// recording is idempotent.
func (m *machine) recordFailed(now time.Time, err error) ([]action, error) {
	batch := m.batch
	m.batch = nil
	var acts []action
	if errors.Is(err, store.ErrNoStep) {
		for _, it := range batch {
			if it.msg >= 0 {
				m.addTokens(&it.res, 1)
			}
			m.answered++
			acts = append(acts, settle(it.msg, fateAck, ""))
		}
		more, err := m.reopen(now, "the step's tally is gone from Redis")
		return append(acts, more...), err
	}
	m.log.Warn("record samples", "err", err)
	for _, it := range batch {
		if it.msg < 0 { // held, not redelivered: recorded again from the feed
			m.sp.feed = append(m.sp.feed, it.res)
			m.sp.feedAt = now.Add(nakDelay)
			continue
		}
		acts = append(acts, action{kind: actSettle, msg: it.msg, fate: fateNak, delay: nakDelay})
	}
	return acts, nil
}

// recorded acts on what Redis did with each sample of the batch, in
// order, then tops the step up. Each answer's tokens are counted as it is
// settled here, so an answer settled after a decision (a copy of one it
// counted) is accounted on the right side of that decision's entry.
func (m *machine) recorded(now time.Time, outs []vote.RecordResult) ([]action, error) {
	batch := m.batch
	m.batch = nil
	if len(outs) != len(batch) {
		return nil, fmt.Errorf("coordinator: %d outcomes for %d samples", len(outs), len(batch))
	}
	var acts []action
	for i, out := range outs {
		it := batch[i]
		if m.halted() || it.res.Step != m.step || it.res.Epoch != m.epoch {
			// An earlier sample of this batch decided the step (or ended
			// the job): this one came too late to count.
			m.countLate(it.res, it.msg < 0)
			acts = append(acts, settle(it.msg, fateAck, ""))
			continue
		}
		if it.msg >= 0 { // a held answer's tokens were counted when it came
			m.addTokens(&it.res, 1)
		}
		m.answered++
		switch out.Outcome {
		case vote.Duplicate:
			if _, ok := m.seen[it.res.Index]; ok {
				m.acct.DuplicateResults++
			} else {
				// Ours: a call that ran but whose reply was lost (go-redis
				// retried it, or we nak'ed it) recorded this index.
				m.recordedAnswer(it.res)
			}
			delete(m.pending, it.res.Index)
			m.counters = out.Counters
		case vote.Stale:
			// Redis holds another step or epoch than ours: sample this
			// step again under a new epoch rather than wait for votes that
			// never count.
			acts = append(acts, settle(it.msg, fateAck, ""))
			m.countLate(it.res, true)
			more, err := m.reopen(now, fmt.Sprintf("Redis has step %d epoch %d open", out.Counters.Step, out.Counters.Epoch))
			acts = append(acts, more...)
			if err != nil {
				return acts, err
			}
			continue
		case vote.Recorded:
			m.recordedAnswer(it.res)
			m.counters = out.Counters
		case vote.Decided, vote.Replayed:
			if _, ok := m.seen[it.res.Index]; ok {
				m.acct.DuplicateResults++
			} else {
				m.recordedAnswer(it.res) // for Replayed: the deciding call's reply was lost
			}
			if d := out.Decision; d.Step == m.step && d.Epoch == m.epoch {
				more, err := m.decide(now, d)
				acts = append(acts, more...)
				if err != nil {
					return acts, err
				}
			}
		}
		acts = append(acts, settle(it.msg, fateAck, ""))
	}
	if m.halted() {
		return acts, nil
	}
	more, err := m.topUp(now)
	return append(acts, more...), err
}

// recordedAnswer notes an answer the tally now holds for the open step.
func (m *machine) recordedAnswer(res schemas.SampleResult) {
	m.noteVote(res)
	m.seen[res.Index] = res.RedFlag
	delete(m.pending, res.Index)
}

// sampleOf is what Redis records of res.
func sampleOf(res schemas.SampleResult) vote.Sample {
	return vote.Sample{Step: res.Step, Epoch: res.Epoch, Index: res.Index, VoteKey: res.VoteKey, RedFlag: res.RedFlag}
}

// settle is the action settling message msg of the batch (none for -1: a
// result held while its step was ahead, settled then).
func settle(msg, fate int, reason string) action {
	return action{kind: actSettle, msg: msg, fate: fate, reason: reason}
}
