package step

import (
	"bytes"
	"errors"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Speculative step pipelining. A step cannot be sampled before the state
// it starts from is known, and that state is the winner of the step
// before: without speculation every step waits a whole model call after
// the one before is decided. With JobSpec.SpeculationDepth D the machine
// guesses the open step's winner (its leader once it leads by one vote,
// else the task's reference answer when the task has one) and samples the
// next step's first wave from the guess's next state, and so on up to D
// steps ahead. Those samples are held here, not counted. When the real
// chain reaches a step whose guessed state is the state its winner gave,
// the step adopts them: its first wave is already out, or in, and its
// answers are recorded in Redis in index order like any others. The
// questions are the same (same state, index, temperature and seed), so the
// trace, the votes of every decided step and the errors are those of a run
// without speculation; only time and the samples of guesses that lost
// differ. A guess that loses (another winner, another epoch, the job
// stopping) throws its step and every step after it away, counted in
// Figures.SpeculativeWasted.

// ahead is a step sampled before it is reached.
type ahead struct {
	step   int64
	epoch  int64
	parent string     // the guessed winner of the step before
	state  task.State // the state the guess leads to: this step's
	branch int64      // in the sample ids, unique within the run
	sent   int        // first-wave indices published (0 … sent-1)
	sentAt time.Time
	got    map[int]schemas.SampleResult // first answer per index
	redo   map[int]bool                 // indices a voter skipped
	// inRedis holds the indices of got sent guarded in the record in
	// flight (sendAhead): adoption leaves them to its outcome.
	inRedis map[int]bool
	// guess is the step's likely winner as last worked out, until an
	// answer comes in (guessed false)
	guess   string
	guessed bool
}

// speculation is the machine's steps ahead: slots[i] is step m.Step+1+i.
type speculation struct {
	slots  []*ahead
	branch int64 // the last branch id given out
	// open is the branch the open step adopted (0: none); answers of other
	// branches for it are from a guess that lost.
	open int64
	// Feed holds the adopted step's answers, to be recorded (OnFeed), not
	// before feedAt (Redis refused them: they wait as a nak'ed message).
	Feed   []schemas.SampleResult
	FeedAt time.Time
	// votes holds the open step's recorded votes by index, for its leader.
	votes map[int]string
	// lost holds the branches thrown away, by step, whose late answers
	// are accounted as that waste already.
	lost map[int64]int64
	// ref is the task's reference answer from the open step's state,
	// worked out once per step and epoch (refAt)
	ref   string
	refAt [2]int64
	// adopted are the last two steps adopted (-1: none), for the metrics
	// of their decisions (their first wave went out ahead).
	adopted [2]int64
}

// WasAdopted reports whether step, decided last or open now, was adopted.
func (sp *speculation) WasAdopted(step int64) bool {
	return step >= 0 && (sp.adopted[0] == step || sp.adopted[1] == step)
}

// maxLost is how many lost branches are remembered before those of steps
// more than lostSteps back are forgotten.
const (
	maxLost   = 1024
	lostSteps = 64
)

// speculating reports whether the job may sample ahead now: it asks for
// it, the open step is voted on by the job's own model, and the samples
// lost so far are within the job's bound (a grace of one depth's first
// waves, so a job starting with a lost guess is not stopped by it).
func (m *Machine) speculating() bool {
	d := m.spec.SpeculationDepth
	if d <= 0 || m.Halted() || m.Rung != "" {
		return false
	}
	f := &m.Acct.Figures
	allowed := m.spec.MaxWaste()*float64(f.Samples) + float64(d*m.K())
	return float64(f.SpeculativeWasted) <= allowed
}

// speculate brings the steps ahead in line with the current guesses: a
// step whose guess changed is thrown away with every step after it, and
// missing steps up to the depth get their first wave. It stops at a step
// with no guess, at the chain's end, and at a goal state.
func (m *Machine) speculate(now time.Time) []Action {
	if !m.speculating() {
		return nil
	}
	sp := &m.Ahead
	var acts []Action
	from, guess := m.State, m.guessOpen()
	for i := 0; i < m.spec.SpeculationDepth; i++ {
		step := m.Step + 1 + int64(i)
		if guess == "" || step >= m.lastStep() {
			break
		}
		if i < len(sp.slots) {
			s := sp.slots[i]
			if s.step == step && s.parent == guess && s.epoch == m.Epoch {
				from, guess = s.state, m.guessAhead(s)
				continue
			}
			m.DropAhead(i)
		}
		next, err := m.Inst.Next(from, task.Vote{Key: guess})
		if err != nil || m.Inst.Done(next) {
			break
		}
		s := &ahead{step: step, epoch: m.Epoch, parent: guess, state: next, sentAt: now,
			got: map[int]schemas.SampleResult{}}
		sp.branch++
		s.branch = sp.branch
		for idx := 0; idx < m.K(); idx++ {
			req := m.request(now, step, next, idx, 0, s.branch)
			m.noteSent(req)
			acts = append(acts, Action{Kind: ActPublish, Req: req})
		}
		s.sent = m.K()
		m.Acct.SpeculativeSamples += int64(s.sent)
		sp.slots = append(sp.slots, s)
		from, guess = next, m.guessAhead(s)
	}
	return acts
}

// lastStep is the step the chain cannot go past: the task's most steps or
// the job's step limit.
func (m *Machine) lastStep() int64 {
	last := m.Inst.TotalSteps()
	if m.spec.StepLimit > 0 && m.spec.StepLimit < last {
		last = m.spec.StepLimit
	}
	return last
}

// guessOpen is the open step's likely winner: its leader once it leads by
// a vote among the counted samples, else the task's reference answer
// ("" when there is neither).
func (m *Machine) guessOpen() string {
	if key := leader(m.Ahead.votes); key != "" {
		return key
	}
	// The reference is worked out once per step, not on every batch.
	if at := [2]int64{m.Step, m.Epoch}; m.Ahead.refAt != at {
		m.Ahead.ref, m.Ahead.refAt = m.reference(m.State), at
	}
	return m.Ahead.ref
}

// guessAhead is a step ahead's likely winner, from its answers so far.
func (m *Machine) guessAhead(s *ahead) string {
	if s.guessed {
		return s.guess
	}
	s.guess, s.guessed = m.guessFrom(s), true
	return s.guess
}

// guessFrom works out a step ahead's likely winner: the leader of its
// answers by a vote, else the task's reference answer.
func (m *Machine) guessFrom(s *ahead) string {
	var votes map[int]string
	for idx, res := range s.got {
		if res.Outcome == schemas.OutcomeVote {
			if votes == nil {
				votes = map[int]string{}
			}
			votes[idx] = res.VoteKey
		}
	}
	if key := leader(votes); key != "" {
		return key
	}
	return m.reference(s.state)
}

// reference is the task's right vote from s, "" when it has none.
func (m *Machine) reference(s task.State) string {
	ref, ok := m.Inst.(task.Referencer)
	if !ok {
		return ""
	}
	v, err := ref.ReferenceVote(s)
	if err != nil {
		return ""
	}
	return v.Key
}

// leader is the vote key ahead of every other by at least one vote (""
// for none, or a tie).
func leader(votes map[int]string) string {
	if len(votes) == 0 {
		return ""
	}
	n := make(map[string]int, len(votes))
	for _, k := range votes {
		n[k]++
	}
	best, top, second := "", 0, 0
	for k, c := range n {
		switch {
		case c > top:
			best, second, top = k, top, c
		case c > second:
			second = c
		}
	}
	if top-second < 1 {
		return ""
	}
	return best
}

// DropAhead throws away the steps ahead from slot i on: their guesses
// lost (or the job stops), and every sample they published is wasted.
func (m *Machine) DropAhead(i int) {
	sp := &m.Ahead
	for _, s := range sp.slots[i:] {
		// (a sample a voter skipped is counted as skipped already)
		m.Acct.SpeculativeWasted += int64(s.sent - len(s.redo))
		if len(sp.lost) >= maxLost {
			// Forget guesses lost long ago (a late answer of one then
			// counts as late besides): at most D per step are kept.
			for b, step := range sp.lost {
				if step < m.Step-lostSteps {
					delete(sp.lost, b)
				}
			}
		}
		if sp.lost == nil {
			sp.lost = map[int64]int64{}
		}
		sp.lost[s.branch] = s.step
	}
	clear(sp.slots[i:])
	sp.slots = sp.slots[:i]
}

// takeAhead holds res if it answers a step ahead, and says so. Its tokens
// are counted now: the call was made whether or not the guess wins. An
// answer of a branch thrown away is counted too (the waste was counted
// when the branch was) and taken.
func (m *Machine) takeAhead(res schemas.SampleResult) bool {
	if res.Branch == 0 || res.Step <= m.Step {
		return false
	}
	m.addTokens(&res, 1)
	for _, s := range m.Ahead.slots {
		if s.step != res.Step {
			continue
		}
		if s.branch != res.Branch || s.epoch != res.Epoch || res.Index >= s.sent {
			return true // a guess that lost, or not ours to count
		}
		switch {
		case res.Outcome == schemas.OutcomeSkipped || res.Outcome == schemas.OutcomeCancelled:
			if res.Outcome == schemas.OutcomeSkipped {
				m.Acct.SkippedSamples++
			} else {
				m.Acct.CancelledSamples++
			}
			if s.redo == nil {
				s.redo = map[int]bool{}
			}
			s.redo[res.Index] = true
		case hasKey(s.got, res.Index):
			m.Acct.DuplicateResults++
		default:
			s.got[res.Index] = res
			s.guessed = false
		}
		return true
	}
	return true
}

func hasKey(m map[int]schemas.SampleResult, k int) bool { _, ok := m[k]; return ok }

// lostBranch reports whether res, an answer for the open step, is from a
// guess that lost: a branch the step did not adopt.
func (m *Machine) lostBranch(res schemas.SampleResult) bool {
	return res.Branch != 0 && (res.Branch != m.Ahead.open || m.isLost(res.Branch))
}

// isLost reports whether branch was thrown away.
func (m *Machine) isLost(branch int64) bool {
	_, ok := m.Ahead.lost[branch]
	return branch != 0 && ok
}

// Unsent forgets the steps ahead whose requests (reqs) were not published
// (admitAhead): they and every step after them are taken back, not
// counted as drawn.
func (m *Machine) Unsent(reqs []*schemas.SampleRequest) {
	sp := &m.Ahead
	branches := make(map[int64]bool, len(reqs))
	for _, req := range reqs {
		branches[req.Branch] = true
	}
	for i, s := range sp.slots {
		if !branches[s.branch] {
			continue
		}
		for _, t := range sp.slots[i:] {
			if branches[t.branch] {
				m.Acct.SpeculativeSamples -= int64(t.sent)
				t.sent = 0
			}
		}
		m.DropAhead(i) // what is left of them was published: wasted
		return
	}
}

// adopt takes the first step ahead as the open step when its guess is the
// open step's state: its published indices count as dispatched, answers
// not in yet are pending, answers in are queued for recording (OnFeed),
// indices a voter skipped are asked again. Any other step ahead lost.
func (m *Machine) adopt(now time.Time) []Action {
	sp := &m.Ahead
	sp.open = 0
	if len(sp.slots) == 0 {
		return nil
	}
	s := sp.slots[0]
	if s.step != m.Step || s.epoch != m.Epoch || m.Rung != "" || !bytes.Equal(s.state, m.State) {
		m.DropAhead(0)
		return nil
	}
	copy(sp.slots, sp.slots[1:])
	sp.slots[len(sp.slots)-1] = nil
	sp.slots = sp.slots[:len(sp.slots)-1]
	sp.open = s.branch
	sp.adopted = [2]int64{sp.adopted[1], s.step}
	m.dispatched = s.sent
	m.published += s.sent
	var acts []Action
	for idx := 0; idx < s.sent; idx++ {
		switch res, ok := s.got[idx]; {
		case ok && s.inRedis[idx]:
			// In the record in flight, right after the decision that
			// adopted this step: its outcome counts it (recorded).
		case ok:
			sp.Feed = append(sp.Feed, res)
		case s.redo[idx]:
			acts = append(acts, m.publish(now, idx, 1))
		default:
			m.Pending[idx] = &pending{SentAt: s.sentAt}
		}
	}
	return acts
}

// OnFeed records the adopted step's answers that came in while it was
// ahead (Feed) in one Redis round trip. OnResults takes them too, with
// the messages it screens, when they are due.
func (m *Machine) OnFeed(now time.Time) []Action {
	m.Batch = m.Batch[:0]
	acts, samples, stop := m.feedInto(nil, nil)
	if !stop && len(samples) > 0 {
		acts = append(acts, Action{Kind: ActRecord, Samples: m.sendAhead(samples)})
	}
	return acts
}

// sendAhead adds to a record of the open step's samples the answers held
// for the step after it, each guarded by the guess its step was sampled
// from (vote.Sample.AfterWinner), and returns the samples. If the round
// trip decides the open step with that winner, Redis records them right
// after the decision and the step after can be decided in the same round
// trip, not one later; if not, nothing of them is recorded and they stay
// held, to be fed when their step is adopted. The guard is the adoption's
// rule (adopt): the next step, the open epoch, the guessed winner (which
// gives the guessed state). Only a job whose margin is the same at every
// step does it (fixedMargin).
func (m *Machine) sendAhead(samples []vote.Sample) []vote.Sample {
	sp := &m.Ahead
	if m.Rung != "" || len(sp.slots) == 0 || !m.fixedMargin() {
		// Adaptive k chooses the next step's margin only once this one
		// is decided: Redis would count its answers against this one's.
		return samples
	}
	s := sp.slots[0]
	if s.step != m.Step+1 || s.epoch != m.Epoch || len(s.got) == 0 {
		return samples
	}
	for idx := 0; idx < s.sent; idx++ {
		res, ok := s.got[idx]
		if !ok || s.inRedis[idx] {
			continue
		}
		if res.Outcome == schemas.OutcomeVote {
			if _, err := m.Inst.Next(s.state, task.Vote{Key: res.VoteKey}); err != nil {
				continue // the feed says why, once its step is adopted
			}
		}
		if s.inRedis == nil {
			s.inRedis = map[int]bool{}
		}
		s.inRedis[idx] = true
		m.Batch = append(m.Batch, Received{msg: -1, Res: res, ahead: true})
		smp := sampleOf(res)
		smp.AfterWinner = s.parent
		samples = append(samples, smp)
	}
	return samples
}

// unmarkAhead ends res's place in a record in flight (sendAhead).
func (m *Machine) unmarkAhead(res schemas.SampleResult) {
	for _, s := range m.Ahead.slots {
		if s.branch == res.Branch {
			delete(s.inRedis, res.Index)
			return
		}
	}
}

// FeedDue reports whether the adopted step's held answers are to be
// recorded now: there are some, and Redis did not just refuse them.
func (m *Machine) FeedDue(now time.Time) bool {
	return len(m.Ahead.Feed) > 0 && !now.Before(m.Ahead.FeedAt)
}

// feedInto empties the feed: the answers that can still count go to
// m.Batch and their samples to samples; stop says the job ends (the task
// failed on one).
func (m *Machine) feedInto(acts []Action, samples []vote.Sample) ([]Action, []vote.Sample, bool) {
	feed := m.Ahead.Feed
	m.Ahead.Feed = nil
	for _, res := range feed {
		if m.Halted() || res.Step != m.Step || res.Epoch != m.Epoch || res.Branch != m.Ahead.open {
			m.countLate(res, true)
			continue
		}
		if res.Outcome == schemas.OutcomeVote {
			if _, err := m.Inst.Next(m.State, task.Vote{Key: res.VoteKey}); errors.Is(err, task.ErrEval) {
				return append(acts, m.failEval(err)...), samples, true
			} else if err != nil {
				m.Acct.MalformedMessages++
				m.log.Warn("dropping a vote the task cannot read", "voter", res.VoterID, "step", res.Step, "index", res.Index, "err", err)
				continue
			}
		}
		m.Batch = append(m.Batch, Received{msg: -1, Res: res})
		samples = append(samples, sampleOf(res))
	}
	return acts, samples, false
}

// Awaits reports whether the job still waits for an answer to index of
// (step, epoch): a pending sample of the open step, or a first-wave sample
// of a step ahead not answered yet.
func (m *Machine) Awaits(step, epoch int64, index int) bool {
	if epoch != m.Epoch {
		return false
	}
	if step == m.Step {
		_, ok := m.Pending[index]
		return ok
	}
	for _, s := range m.Ahead.slots {
		if s.step == step {
			_, got := s.got[index]
			return index < s.sent && !got
		}
	}
	return false
}

// noteVote remembers a counted vote of the open step, for its leader.
func (m *Machine) noteVote(res schemas.SampleResult) {
	if m.spec.SpeculationDepth <= 0 || res.Outcome != schemas.OutcomeVote {
		return
	}
	if m.Ahead.votes == nil {
		m.Ahead.votes = map[int]string{}
	}
	m.Ahead.votes[res.Index] = res.VoteKey
}
