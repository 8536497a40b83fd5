package step

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Incoming is a result message as the shell read it.
type Incoming struct {
	Data    []byte
	Subject string
}

// Received is a result the machine sent to Redis, and its message.
type Received struct {
	msg int
	Res schemas.SampleResult
	// ahead: an answer held for the step after the open one, sent guarded
	// (sendAhead)
	ahead bool
}

// naked is the delay before a result Redis did not take comes back.
const NakDelay = 250 * time.Millisecond

// OnResults screens a batch of result messages: it settles the ones that
// cannot count (unreadable, forged, another step's, an index never
// published, a vote the task cannot read, a skip), and asks for the rest
// to be recorded in one Redis round trip (the last action; the shell
// calls Recorded with the outcomes). Before anything else reads a result,
// its token is checked (capability.go) and its token counts bounded
// (claims.go).
//
// A message may hold several answers (SampleResult.Also): each is
// checked and counted on its own, as if it came alone, and the message is
// settled once all are (collapse). The adopted step's held answers, when
// due (FeedDue), are recorded first in the same round trip.
func (m *Machine) OnResults(now time.Time, batch []Incoming) []Action {
	var acts []Action
	m.Batch = m.Batch[:0]
	m.Verified = slices.Grow(m.Verified[:0], len(batch))[:len(batch)]
	m.parts = slices.Grow(m.parts[:0], len(batch))[:len(batch)]
	m.left = slices.Grow(m.left[:0], len(batch))[:len(batch)]
	m.fates = slices.Grow(m.fates[:0], len(batch))[:len(batch)]
	var samples []vote.Sample
	if m.FeedDue(now) {
		// The adopted step's held answers go in the same round trip.
		var stop bool
		if acts, samples, stop = m.feedInto(acts, samples); stop {
			return m.collapse(acts)
		}
	}
	for i, in := range batch {
		m.Verified[i], m.parts[i], m.left[i], m.fates[i] = m.Verified[i][:0], 1, 1, Action{}
		var msg schemas.SampleResult
		if err := schemas.Decode(in.Data, &msg); err != nil || msg.Tenant != m.spec.Tenant || msg.JobID != m.spec.JobID {
			m.Acct.MalformedMessages++
			m.log.Warn("dropping malformed result", "err", err, "subject", in.Subject)
			acts = append(acts, settle(i, FateTerm, "malformed result"))
			continue
		}
		m.split = msg.AppendParts(m.split[:0])
		m.parts[i], m.left[i] = len(m.split), len(m.split)
		for _, res := range m.split {
			held := len(m.Batch)
			var stop bool
			if acts, stop = m.screen(now, acts, i, in.Subject, res); stop {
				return m.collapse(acts)
			}
			if len(m.Batch) > held { // as screened: an overclaim is a red flag now
				samples = append(samples, sampleOf(m.Batch[held].Res))
			}
		}
	}
	if len(samples) > 0 {
		acts = append(acts, Action{Kind: ActRecord, Samples: m.sendAhead(samples)})
	}
	return m.collapse(acts)
}

// screen checks one answer of message i and settles it, or adds it to
// the batch for Redis (m.Batch); it appends its actions to acts, and says
// true when the job ends (the task failed).
func (m *Machine) screen(now time.Time, acts []Action, i int, subject string, res schemas.SampleResult) ([]Action, bool) {
	if !m.caps.verify(res.SampleID, res.Token) {
		m.forged(now, &res, subject)
		return append(acts, settle(i, FateTerm, "forged result: not its sample's token")), false
	}
	m.Verified[i] = append(m.Verified[i], res.SampleID)
	if res.Outcome == schemas.OutcomeUnserved {
		// Not an answer: the sample stays open (handed back); the
		// notice only says why the job waits.
		if res.Step == m.Step && res.Epoch == m.Epoch {
			m.Unserved = &Unserved{Model: clip(res.Model, 200), Error: clip(res.Detail, schemas.MaxUnservedDetail), At: now, Voter: clip(res.VoterID, 100), Step: res.Step,
				Task: res.Cause == schemas.UnservedTask}
		}
		return append(acts, settle(i, FateAck, "")), false
	}
	m.bounded(now, &res)
	if m.takeAhead(res) {
		return append(acts, settle(i, FateAck, "")), false
	}
	if m.isLost(res.Branch) || res.Step == m.Step && res.Epoch == m.Epoch && m.lostBranch(res) {
		// A guess that lost: its samples are counted as wasted already.
		m.addTokens(&res, 1)
		return append(acts, settle(i, FateAck, "")), false
	}
	if res.Step != m.Step || res.Epoch != m.Epoch {
		m.countLate(res, false)
		return append(acts, settle(i, FateAck, "")), false
	}
	if res.Index >= m.dispatched {
		m.addTokens(&res, 1)
		m.Acct.MalformedMessages++
		m.log.Warn("dropping result for an index never published", "step", res.Step, "index", res.Index)
		return append(acts, settle(i, FateTerm, "index never published")), false
	}
	if res.Outcome == schemas.OutcomeVote {
		// A voter's key is counted only if the task could move on from
		// it: a rogue or broken voter cannot win a step with garbage.
		if _, err := m.Inst.Next(m.State, task.Vote{Key: res.VoteKey}); errors.Is(err, task.ErrEval) {
			// Not the vote's fault: the task cannot move on from a
			// readable answer (a spec's next expression failing).
			return append(acts, m.failEval(err)...), true
		} else if err != nil {
			m.addTokens(&res, 1)
			m.Acct.MalformedMessages++
			m.log.Warn("dropping a vote the task cannot read", "voter", res.VoterID, "step", res.Step, "index", res.Index, "err", err)
			return append(acts, settle(i, FateTerm, "vote key the task cannot read")), false
		}
	}
	if res.Outcome == schemas.OutcomeSkipped || res.Outcome == schemas.OutcomeCancelled {
		// A voter thought this step decided (an old event); ask again.
		m.countLate(res, false)
		m.answered++
		acts = append(acts, settle(i, FateAck, ""))
		if p, ok := m.Pending[res.Index]; ok && p.Attempt == res.Attempt {
			if p.skips++; p.skips <= maxSkips {
				skips := p.skips
				acts = append(acts, m.publish(now, res.Index, p.Attempt+1))
				m.Pending[res.Index].skips = skips
			}
		}
		return acts, false
	}
	m.Batch = append(m.Batch, Received{msg: i, Res: res})
	if res.Outcome == schemas.OutcomeRedFlag {
		m.lastFlag = [2]string{res.RedFlag, clip(res.Detail, maxFlagDetail)}
	}
	m.Stalled, m.Unserved = time.Time{}, nil // the open step is answered
	return acts, false
}

// RecordFailed goes on after Redis did not record the batch: a step whose
// tally is gone is sampled again under a new epoch; otherwise the results
// come back after a delay and are recorded (and accounted) then, as
// recording is idempotent.
func (m *Machine) RecordFailed(now time.Time, err error) ([]Action, error) {
	batch := m.Batch
	m.Batch = nil
	var acts []Action
	if errors.Is(err, vote.ErrNoStep) {
		for _, it := range batch {
			if it.msg >= 0 {
				m.addTokens(&it.Res, 1)
			}
			m.answered++
			acts = append(acts, settle(it.msg, FateAck, ""))
		}
		more, err := m.Reopen(now, "the step's tally is gone from Redis")
		return m.collapse(append(acts, more...)), err
	}
	m.log.Warn("record samples", "err", err)
	for _, it := range batch {
		if it.ahead {
			m.unmarkAhead(it.Res) // still held by its step ahead
			continue
		}
		if it.msg >= 0 && m.parts[it.msg] > 1 {
			// One answer of several in a message: the message is acked
			// and the answer held, like one taken ahead. A nak would
			// bring back its others, already counted, to be counted
			// (and their tokens billed) twice.
			m.addTokens(&it.Res, 1)
			acts = append(acts, settle(it.msg, FateAck, ""))
			it.msg = -1
		}
		if it.msg < 0 { // held, not redelivered: recorded again from the feed
			m.Ahead.Feed = append(m.Ahead.Feed, it.Res)
			m.Ahead.FeedAt = now.Add(NakDelay)
			continue
		}
		acts = append(acts, Action{Kind: ActSettle, Msg: it.msg, Fate: fateNak, Delay: NakDelay})
	}
	return m.collapse(acts), nil
}

// Recorded acts on what Redis did with each sample of the batch, in
// order, then tops the step up. Each answer's tokens are counted as it is
// settled here, so an answer settled after a decision (a copy of one it
// counted) is accounted on the right side of that decision's entry.
func (m *Machine) Recorded(now time.Time, outs []vote.RecordResult) ([]Action, error) {
	acts, err := m.recorded(now, outs)
	return m.collapse(acts), err
}

func (m *Machine) recorded(now time.Time, outs []vote.RecordResult) ([]Action, error) {
	batch := m.Batch
	m.Batch = nil
	if len(outs) != len(batch) {
		return nil, fmt.Errorf("coordinator: %d outcomes for %d samples", len(outs), len(batch))
	}
	var acts []Action
	for i, out := range outs {
		it := batch[i]
		if it.ahead {
			m.unmarkAhead(it.Res)
			if m.Halted() || it.Res.Branch != m.Ahead.open || it.Res.Step != m.Step || it.Res.Epoch != m.Epoch {
				// Its step was not adopted in this round trip: the answer
				// is still held there, or went with a guess that lost.
				continue
			}
			if out.Outcome == vote.NotYet {
				m.Ahead.Feed = append(m.Ahead.Feed, it.Res) // recorded again, unguarded
				continue
			}
			// Adopted in this round trip, and recorded right after the
			// decision: counted as the open step's, like a fed answer.
		}
		if m.Halted() || it.Res.Step != m.Step || it.Res.Epoch != m.Epoch {
			// An earlier sample of this batch decided the step (or ended
			// the job): this one came too late to count.
			m.countLate(it.Res, it.msg < 0)
			acts = append(acts, settle(it.msg, FateAck, ""))
			continue
		}
		if it.msg >= 0 { // a held answer's tokens were counted when it came
			m.addTokens(&it.Res, 1)
		}
		m.answered++
		switch out.Outcome {
		case vote.Duplicate:
			if _, ok := m.seen[it.Res.Index]; ok {
				m.countDuplicate(it.Res)
			} else {
				// Ours: a call that ran but whose reply was lost (go-redis
				// retried it, or we nak'ed it) recorded this index.
				m.recordedAnswer(it.Res)
			}
			delete(m.Pending, it.Res.Index)
			m.counters = out.Counters
		case vote.Stale:
			// Redis holds another step or epoch than ours: sample this
			// step again under a new epoch rather than wait for votes that
			// never count.
			acts = append(acts, settle(it.msg, FateAck, ""))
			m.countLate(it.Res, true)
			more, err := m.Reopen(now, fmt.Sprintf("Redis has step %d epoch %d open", out.Counters.Step, out.Counters.Epoch))
			acts = append(acts, more...)
			if err != nil {
				return acts, err
			}
			continue
		case vote.Recorded:
			m.recordedAnswer(it.Res)
			m.counters = out.Counters
		case vote.Decided, vote.Replayed:
			if _, ok := m.seen[it.Res.Index]; ok {
				m.countDuplicate(it.Res)
			} else {
				m.recordedAnswer(it.Res) // for Replayed: the deciding call's reply was lost
			}
			if d := out.Decision; d.Step == m.Step && d.Epoch == m.Epoch {
				more, err := m.decide(now, d)
				acts = append(acts, more...)
				if err != nil {
					return acts, err
				}
			}
		}
		acts = append(acts, settle(it.msg, FateAck, ""))
	}
	if m.Halted() {
		return acts, nil
	}
	more, err := m.TopUp(now)
	return append(acts, more...), err
}

// recordedAnswer notes an answer the tally now holds for the open step.
func (m *Machine) recordedAnswer(res schemas.SampleResult) {
	m.noteVote(res)
	m.seen[res.Index] = res.RedFlag
	m.seenID[res.Index] = res.SampleID
	delete(m.Pending, res.Index)
}

// countDuplicate counts an answer for an index the tally already holds,
// its tokens already counted. One of another attempt (a re-sample the job
// asked for when the first was late) is waste, paid for. The very sample
// the tally counted, answered again (a second delivery, a copy of its
// request, or a voter publishing it again under another message id), is
// no call the job asked for: its tokens are taken back out, so no number
// of answers to one sample bills a job more than once.
func (m *Machine) countDuplicate(res schemas.SampleResult) {
	m.Acct.DuplicateResults++
	if m.seenID[res.Index] == res.SampleID {
		m.addTokens(&res, -1)
	}
}

// sampleOf is what Redis records of res.
func sampleOf(res schemas.SampleResult) vote.Sample {
	return vote.Sample{Step: res.Step, Epoch: res.Epoch, Index: res.Index, VoteKey: res.VoteKey, RedFlag: res.RedFlag}
}

// collapse turns the settling of each answer into the settling of its
// message, once its last answer is settled: acked if any answer was (a
// forged or unreadable answer beside honest ones is settled alone, by
// counting nothing), terminated if all were (with the first's reason),
// nak'ed only as a message of one answer (RecordFailed holds the others).
// It filters acts in place.
func (m *Machine) collapse(acts []Action) []Action {
	out := acts[:0]
	for _, a := range acts {
		if a.Kind != ActSettle || a.Msg < 0 || a.Msg >= len(m.left) {
			out = append(out, a)
			continue
		}
		i := a.Msg
		if m.left[i] <= 0 {
			continue // settled already: not twice
		}
		m.left[i]--
		if c := &m.fates[i]; c.Kind == 0 || fateRank(a.Fate) > fateRank(c.Fate) {
			*c = a
		}
		if m.left[i] == 0 {
			out = append(out, m.fates[i])
		}
	}
	return out
}

// fateRank orders a message's fates: one answer acked acks it, a nak
// (of a message of one answer) brings it back.
func fateRank(fate int) int {
	switch fate {
	case FateTerm:
		return 1
	case FateAck:
		return 2
	}
	return 3
}

// settle is the action settling message msg of the batch (none for -1: a
// result held while its step was ahead, settled then).
func settle(msg, fate int, reason string) Action {
	return Action{Kind: ActSettle, Msg: msg, Fate: fate, Reason: reason}
}

// NewerAttemptOut reports whether the job still waits on an attempt of
// res's index newer than res's: the index's place in flight is that
// attempt's now.
func (m *Machine) NewerAttemptOut(res schemas.SampleResult) bool {
	p, ok := m.Pending[res.Index]
	return ok && res.Step == m.Step && res.Epoch == m.Epoch && p.Attempt > res.Attempt
}

// clip bounds s to n bytes (a notice's text goes into the job's status).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
