package step

import (
	"math"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Reliability: each step's margin k (fixed, or adaptive against the job's
// reliability target), the correlation test and decorrelation of a step's
// remaining samples, and the reliability receipt. The state is the running
// receipt: a decided step folds into it (live through countDecision,
// replayed from its journal entry), a checkpoint carries it, and
// everything else (the open step's k and correlation threshold, the
// report's figures) is a function of it and the step, so a new owner
// chooses the same k an uninterrupted run would. The rules and their
// assumptions: docs/statistics.md.

// reliability is a machine's reliability state.
type reliability struct {
	// rec accumulates the decided steps: the votes behind p̂, the k
	// schedule, the histograms, the exceptional steps.
	rec schemas.Receipt
	// The open step's margin and correlation threshold (samples it may
	// count before it fails the test; 0: no test), and p_low when they
	// were chosen, for step at (-1: not chosen yet).
	at   int64
	k, q int
	pLow float64
	// qKey and qVal cache the last threshold computed.
	qKey [4]float64
	qVal int
	// unreachedAt is the step the target was last found out of reach
	// (logged once per run of such steps); noisyAt the step whose first
	// decorrelated sample was logged.
	unreachedAt, noisyAt int64
}

// fullRecord is where a receipt says every step's figures are.
const fullRecord = "the job's decision journal (stream MAKER_JOURNAL): one entry per step with its votes, tally, red flags and k; GET /v1/jobs/{id}/steps streams it"

// initReliability readies the state of a new machine.
func (m *Machine) initReliability() {
	m.rel = reliability{at: -1, unreachedAt: -2, noisyAt: -1}
}

// K is the open step's margin: the job's K, or with a reliability target
// the adaptive one (chooseMargin).
func (m *Machine) K() int {
	m.openReliability()
	return m.rel.k
}

// fixedMargin reports whether every step's margin is the job's k (no
// adaptive k): a step's margin is known before the step before it is
// decided.
func (m *Machine) fixedMargin() bool { return m.spec.ReliabilityTarget == 0 }

// openReliability chooses the open step's margin and correlation
// threshold, once per step, from the decided steps.
func (m *Machine) openReliability() {
	r := &m.rel
	if r.at == m.Step {
		return
	}
	_, lo, _ := m.estimate()
	r.at, r.pLow = m.Step, lo
	r.k = m.chooseMargin(lo)
	r.q = m.threshold(r.k, lo)
}

// estimate is p̂ with its Wilson interval at relConfidence: the decided
// steps' votes, the job's p_estimate as priorWeight votes.
func (m *Machine) estimate() (est, lo, hi float64) {
	right, n := float64(m.rel.rec.RightVotes), float64(m.rel.rec.RightVotes+m.rel.rec.WrongVotes)
	if p0 := m.spec.PEstimate; p0 > 0 {
		right += priorWeight * p0
		n += priorWeight
	}
	return plan.Wilson(right, n, relZ)
}

// totalSteps is how many steps the job is planned for: the task's
// (task.PlannedSteps: its expected steps when it says), or its step limit.
func (m *Machine) totalSteps() int64 {
	total := task.PlannedSteps(m.Inst)
	if l := m.spec.StepLimit; l > 0 && l < total {
		total = l
	}
	return total
}

// kCeil is the largest margin adaptive k may choose at the lower bound
// pLow of p: within k's limit and the samples a rung may draw, and where
// the votes a step would need at pLow, about k/(2p_low−1), are at most
// half the sample cap, so that a step rarely reaches the cap even if p
// is as low as its bound; never below the job's K (its submitter chose
// a cap that holds it). While the evidence is thin (p_low near 0.5) this
// keeps k near K instead of leaping to the margin a loose bound asks for.
func (m *Machine) kCeil(pLow float64) int {
	limit := m.spec.MaxSamplesPerStep
	if e := m.spec.Escalation; e != nil && e.StrongerModel != "" {
		limit = min(limit, m.policy().StrongerSamples)
	}
	hi := m.spec.K
	if pLow > 0.5 {
		hi = max(hi, int(float64(limit)*(2*pLow-1)/2))
	}
	return max(min(hi, schemas.MaxK, limit), 1)
}

// chooseMargin is the open step's margin at the lower bound pLow of p.
// Without a reliability target it is the job's K. With one: the smallest
// k in [KFloor, kCeil] that keeps Π p_vote(pLow, k_i) over the steps the
// bound covers times p_vote(pLow, k)^(steps left) at or above the target
// (chooseK); K while the votes cannot bound p above 0.5.
func (m *Machine) chooseMargin(pLow float64) int {
	s := &m.spec
	if s.ReliabilityTarget == 0 {
		return s.K
	}
	hi := m.kCeil(pLow)
	lo := min(s.Floor(), hi)
	if !(pLow > 0.5) {
		return min(max(s.K, lo), hi)
	}
	var logPast float64
	for _, c := range m.rel.rec.KSteps {
		logPast += float64(c.Steps) * plan.LogPVote(pLow, c.K)
	}
	left := max(m.totalSteps()-m.Step, 1)
	k, reached := plan.ChooseK(pLow, logPast, left, s.ReliabilityTarget, lo, hi)
	if !reached && m.rel.unreachedAt != m.Step-1 {
		m.log.Warn("reliability target out of reach at the current estimate of p: holding the steps left to the target on their own",
			"step", m.Step, "target", s.ReliabilityTarget, "p_low", pLow, "k", k, "k_ceiling", hi)
	}
	if !reached {
		m.rel.unreachedAt = m.Step
	}
	return k
}

// threshold is the correlation test's threshold for a step of margin k
// at pLow: the samples after which a step with independent votes is still
// undecided with chance at most falseAlarm (raceQuantile, the valid
// fraction at its lower bound). 0: no test (p not bounded above 0.5, or
// no threshold below the sample cap).
func (m *Machine) threshold(k int, pLow float64) int {
	if !(pLow > 0.5) {
		return 0
	}
	rec := &m.rel.rec
	v0 := m.spec.ValidFraction
	if !(v0 > 0 && v0 <= 1) {
		v0 = 1
	}
	_, vLow, _ := plan.Wilson(float64(rec.Valid)+priorWeight*v0, float64(rec.Samples)+priorWeight, relZ)
	limit := m.spec.MaxSamplesPerStep
	key := [4]float64{float64(k), plan.QuantP(pLow), plan.QuantV(vLow), float64(limit)}
	if key != m.rel.qKey {
		m.rel.qKey, m.rel.qVal = key, plan.RaceQuantile(k, key[1], key[2], falseAlarm, limit)
	}
	if m.rel.qVal >= limit {
		return 0
	}
	return m.rel.qVal
}

// decorrelate changes a request of a correlated step: the open step's
// own-model samples from the threshold on are drawn with a paraphrased
// prompt (variants in turn), at the job's decorrelation temperature and
// from the job's models in turn. The decision depends on the index alone,
// so answers arriving in any order give the same requests.
func (m *Machine) decorrelate(req *schemas.SampleRequest) {
	if req.Step != m.Step || m.Rung != "" || !m.spec.Decorrelating() {
		return
	}
	m.openReliability()
	q := m.rel.q
	if q == 0 || req.Index < q {
		return
	}
	n := req.Index - q
	req.PromptVariant = 1 + n%schemas.MaxPromptVariant
	if t := m.spec.DecorrelateTemperature; t > 0 {
		req.Temperature = t
	}
	if ms := m.spec.Models; len(ms) > 0 {
		req.Model = ms[n%len(ms)]
	}
	if m.rel.noisyAt != m.Step {
		m.rel.noisyAt = m.Step
		m.log.Warn("correlated errors? the step runs past what p predicts: decorrelating its remaining samples",
			"step", m.Step, "k", m.rel.k, "threshold", q, "p_low", m.rel.pLow)
	}
}

// noteDecision folds the decided open step (its entry e) into the
// reliability state: the k it was sampled at (set on e when live; a
// replayed entry's own), its votes as evidence about p, the correlation
// test, the histograms and the exceptional steps. live adds the
// correlated counts to the figures (a replay has them from the entries'
// changes).
func (m *Machine) noteDecision(e *schemas.JournalEntry, live bool) {
	m.openReliability()
	r := &m.rel
	k, q := r.k, r.q
	if live {
		e.K = k
	} else if e.K > 0 && e.K != k {
		k, q = e.K, m.threshold(e.K, r.pLow)
	}
	rec := &r.rec
	own := e.Type == schemas.EntryDecision && e.Rung == ""
	st := schemas.ReceiptStep{Step: e.Step, K: k, Rung: e.Rung, Candidates: len(e.Tally)}
	switch {
	case own:
		st.Counted, st.Valid, st.RedFlagged, st.Votes, st.Lead = e.Counted, e.Valid, e.RedFlagged, e.Votes, e.Lead
	case len(e.Prior) > 0 && e.Prior[0].Rung == schemas.RungOwnModel:
		p := e.Prior[0]
		st.Counted, st.Valid, st.RedFlagged = p.Counted, p.Valid, p.RedFlagged
	}
	st.Correlated = q > 0 && st.Counted > q
	// A correlated step failed the test of independent votes the estimate
	// and the bound rest on: it is listed, outside both.
	if own && !st.Correlated {
		if k >= 2 { // at k = 1 the only vote counted is the winner's
			rec.RightVotes += int64(e.Votes)
			rec.WrongVotes += int64(e.Valid - e.Votes)
			rec.EvidenceSteps++
		}
		rec.Samples += int64(e.Counted)
		rec.Valid += int64(e.Valid)
		rec.KSteps = addKCount(rec.KSteps, k)
		rec.BoundSteps++
	} else {
		rec.OtherSteps++
	}
	if e.Type == schemas.EntryDecision {
		rec.VotesHistogram = addBucket(rec.VotesHistogram, e.Valid)
		rec.DissentHistogram = addBucket(rec.DissentHistogram, e.Valid-e.Votes)
		rec.RedFlagHistogram = addBucket(rec.RedFlagHistogram, e.RedFlagged)
	}
	rec.KSchedule, rec.KRunsUnlisted = addRun(rec.KSchedule, rec.KRunsUnlisted, e.Step, k)
	if st.Correlated {
		if m.spec.Decorrelating() {
			st.Decorrelated = st.Counted - q
		}
		if live {
			m.Acct.CorrelatedSteps++
			m.Acct.DecorrelatedSamples += int64(st.Decorrelated)
			m.log.Warn("correlated step: many more samples than p predicts before consensus",
				"step", e.Step, "samples", st.Counted, "threshold", q, "k", k, "candidates", st.Candidates, "decorrelated", st.Decorrelated)
		}
	}
	if st.Correlated || e.Rung != "" || e.Type != schemas.EntryDecision {
		if len(rec.Steps) < schemas.MaxListedSteps {
			rec.Steps = append(rec.Steps, st)
		} else {
			rec.StepsUnlisted++
		}
	}
	r.at = -1 // the next step chooses from the evidence with this one
}

// restoreReliability goes on from a checkpoint's receipt (nil: a
// checkpoint of an older release; the evidence starts again).
func (m *Machine) restoreReliability(rec *schemas.Receipt) {
	m.initReliability()
	if rec != nil {
		m.rel.rec = *rec.Clone()
	}
}

// receipt is the job's reliability receipt as the decided steps stand.
func (m *Machine) receipt() *schemas.Receipt {
	rec := m.rel.rec.Clone()
	if p0 := m.spec.PEstimate; p0 > 0 {
		rec.PriorP, rec.PriorWeight = p0, priorWeight
	} else {
		rec.PriorP, rec.PriorWeight = 0, 0
	}
	rec.PHat, rec.PLow, rec.PHigh = m.estimate()
	rec.Confidence = relConfidence
	rec.Target, rec.KFloor = m.spec.ReliabilityTarget, 0
	if rec.Target > 0 {
		rec.KFloor = m.spec.Floor()
	}
	rec.BoundAchieved = boundAt(rec.PLow, rec.KSteps)
	rec.CorrelatedSteps, rec.DecorrelatedSamples = m.Acct.CorrelatedSteps, m.Acct.DecorrelatedSamples
	rec.FalseAlarmRate = falseAlarm
	rec.FullRecord = fullRecord
	for _, s := range []*[]schemas.Bucket{&rec.VotesHistogram, &rec.DissentHistogram, &rec.RedFlagHistogram} {
		if *s == nil {
			*s = []schemas.Bucket{}
		}
	}
	if rec.KSchedule == nil {
		rec.KSchedule = []schemas.KRun{}
	}
	if rec.KSteps == nil {
		rec.KSteps = []schemas.KCount{}
	}
	return rec
}

// boundAt is Π p_vote(p, k)^steps over ks: the chance every step of them
// is right when each valid vote is right with chance p (1 for none).
func boundAt(p float64, ks []schemas.KCount) float64 {
	var steps int64
	for _, c := range ks {
		steps += c.Steps
	}
	switch {
	case steps == 0:
		return 1
	case !(p > 0):
		return 0
	case p >= 1:
		return 1
	}
	var lg float64
	for _, c := range ks {
		lg += float64(c.Steps) * plan.LogPVote(p, c.K)
	}
	return min(max(math.Exp(lg), 0), 1)
}
