package step

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// The escalation ladder of a step that spent its rung's samples without a
// decision, by the job's policy: the stronger model votes on the step
// afresh (under a new epoch, with its own cap); then, if the policy opts
// in, the judge's panel arbitrates among the candidates the rungs found;
// then a person (the job pauses). Without a policy the job ends
// no_consensus. Each climb is journaled, so a new owner resumes the step on
// its rung instead of paying for the rungs below again.

// nextRung is where a step goes after its rung spent its samples: the
// stronger model unless it already voted, then the panel, then nothing.
func nextRung(p schemas.EscalationPolicy, strongerDone bool) string {
	switch {
	case !strongerDone && p.StrongerModel != "":
		return schemas.RungStrongerModel
	case p.Panel:
		return schemas.RungPanel
	default:
		return rungNone
	}
}

// policy is the job's escalation policy with its defaults.
func (m *Machine) policy() schemas.EscalationPolicy {
	if m.spec.Escalation == nil {
		return schemas.EscalationPolicy{}
	}
	return m.spec.Escalation.WithDefaults()
}

// climb puts the open step on rung ("": the job's own model), above the
// rungs in prior, with that rung's sample cap.
func (m *Machine) climb(rung string, prior []schemas.RungTally) {
	m.Rung, m.prior, m.capN = rung, prior, m.spec.MaxSamplesPerStep
	if rung == schemas.RungStrongerModel {
		m.capN = m.policy().StrongerSamples
	}
}

// escalate closes the spent rung's tally in Redis (the last action; the
// shell calls Closed with it), to climb or to end without consensus.
func (m *Machine) escalate() ([]Action, error) {
	m.closing = nextRung(m.policy(), m.Rung == schemas.RungStrongerModel)
	return []Action{{Kind: ActCloseStep}}, nil
}

// Closed goes on with the spent rung's closed tally: the job ends
// no_consensus, or the climb is journaled (fenced) before the next rung
// starts.
func (m *Machine) Closed(now time.Time, tally []schemas.TallyEntry) ([]Action, error) {
	rt := m.rungTally(tally)
	if m.closing == rungNone {
		return m.noConsensus(rt, tally), nil
	}
	prior := append(slices.Clone(m.prior), rt)
	e := m.Entry(now, schemas.EntryEscalation)
	e.Rung, e.Prior = m.closing, prior
	e.Work = m.Acct.Delta()
	acts := []Action{{Kind: ActJournal, Entry: &e, Wait: true}}
	m.SinceCkpt++
	m.climb(m.closing, prior)
	acts = append(acts, Action{Kind: ActStatus})
	if m.Rung == schemas.RungStrongerModel {
		m.log.Warn("no consensus: the stronger model votes on the step", "step", m.Step, "model", m.policy().StrongerModel,
			"samples", rt.Counted, "tally", tallyText(tally))
		more, err := m.Reopen(now, "escalated to the stronger model "+m.policy().StrongerModel)
		return append(acts, more...), err
	}
	return append(acts, m.Arbitrate()...), nil
}

// rungTally is what the open step's rung counted (tally is its closed
// tally). Answers recorded past the counted ones were drawn for nothing:
// they go to the late samples.
func (m *Machine) rungTally(tally []schemas.TallyEntry) schemas.RungTally {
	rt := schemas.RungTally{
		Rung: schemas.RungOwnModel, Counted: m.counters.Next, Valid: m.counters.Valid, RedFlagged: m.counters.RedFlagged,
		RedFlags: m.redFlags(m.counters.Next), Tally: tally,
	}
	if m.Rung != "" {
		rt.Rung = m.Rung
	}
	m.Acct.LateSamples += int64(max(0, len(m.seen)-m.counters.Next))
	return rt
}

// noConsensus ends the job at a step whose last rung spent its samples:
// the step's samples, this rung's and the rungs below's, are counted, and
// the report carries its tally.
func (m *Machine) noConsensus(rt schemas.RungTally, tally []schemas.TallyEntry) []Action {
	m.countStep(m.Step, rt.Counted, rt.Valid, rt.RedFlagged, rt.RedFlags, m.prior)
	nc := &schemas.NoConsensus{Step: m.Step, Samples: m.counters.Next, Tally: tally, Rung: schemas.RungOwnModel, Prior: m.prior}
	reason := fmt.Sprintf("step %d drew %d samples (the cap) without a candidate leading by k=%d", m.Step, m.counters.Next, m.K())
	if m.Rung != "" {
		nc.Rung = m.Rung
		n := m.counters.Next
		for _, p := range m.prior {
			n += p.Counted
		}
		reason = fmt.Sprintf("step %d drew %d samples on %d rungs (the stronger model's cap last) without a candidate leading by k=%d",
			m.Step, n, len(m.prior)+1, m.K())
	}
	reason += m.flagsText(rt)
	m.log.Warn("no consensus within the sample cap", "step", m.Step, "rung", nc.Rung, "samples", m.counters.Next, "tally", tallyText(tally),
		"red_flags", rt.RedFlags, "last_red_flag", m.lastFlag[1])
	return m.finish(schemas.StateNoConsensus, reason, nc)
}

// Arbitrate asks the judge's panel to settle the step among the
// candidates the rungs below found (the last action; the shell calls
// Arbitrated, or NeedsHuman). Without a candidate there is nothing to
// choose from: a person decides.
func (m *Machine) Arbitrate() []Action {
	cands, samples := schemas.MergeRungs(m.prior)
	if len(cands) == 0 {
		return m.NeedsHuman("no rung found a valid candidate (every sample was red-flagged): nothing to arbitrate among")
	}
	m.log.Warn("no consensus: asking the judge's panel to arbitrate", "step", m.Step, "candidates", len(cands))
	return []Action{{Kind: ActArbitrate, Arb: &schemas.ArbitrationRequest{
		Tenant: m.spec.Tenant, JobID: m.spec.JobID, Step: m.Step, Task: m.spec.Task, State: string(m.State),
		K: m.K(), Samples: samples, Candidates: cands, Rungs: m.prior, MinConfidence: m.policy().MinConfidence,
	}}}
}

// Arbitrated records the judge's decision d for the open step: its choice
// is journaled as an arbiter entry (not votes); a needs_human answer, or a
// choice the task cannot take, pauses the job for a person. A choice the
// task cannot evaluate (a spec's next expression failing) fails the job,
// as a vote's would.
func (m *Machine) Arbitrated(now time.Time, d *schemas.ArbiterDecision) ([]Action, error) {
	d = m.billable(d)
	if d.Outcome != schemas.ArbiterDecided {
		m.billPanel(d)
		return m.NeedsHuman(d.Reason), nil
	}
	if _, err := m.Inst.Next(m.State, task.Vote{Key: d.VoteKey}); errors.Is(err, task.ErrEval) {
		m.billPanel(d)
		return m.failEval(err), nil
	} else if err != nil {
		m.billPanel(d)
		return m.NeedsHuman(fmt.Sprintf("the judge's choice %q is not a move the task can take: %v", d.VoteKey, err)), nil
	}
	m.log.Warn("arbiter decision", "step", m.Step, "vote_key", d.VoteKey, "confidence", d.Confidence, "judge", d.JudgeModel)
	e := m.Entry(now, schemas.EntryArbiter)
	e.VoteKey, e.Rung, e.Prior, e.Arbiter = d.VoteKey, schemas.RungPanel, m.prior, d
	// The last rung's answers, recorded under this epoch, stay known.
	return m.commit(now, &e, m.counters.Next)
}

// billable is d as the job is billed for it: its cost at most what the
// shell reserved for the arbitration (the judge was told to spend no
// more; a job is never billed beyond its limits).
func (m *Machine) billable(d *schemas.ArbiterDecision) *schemas.ArbiterDecision {
	if m.ArbCap <= 0 || d.CostUSD <= m.ArbCap {
		return d
	}
	m.log.Warn("the judge reported more than the arbitration's budget: the job is billed its budget",
		"step", m.Step, "cost_usd", d.CostUSD, "budget_usd", m.ArbCap)
	c := *d
	c.CostUSD = m.ArbCap
	return &c
}

// billPanel adds what an arbitration that decides nothing cost to the
// figures, once: asked again after a pause or a takeover, the judge gives
// the same stored answer (its request id is the step's), which the
// figures hold already (panelBilled, kept by the checkpoint). A decided
// arbitration is billed by its journal entry instead (countDecision).
func (m *Machine) billPanel(d *schemas.ArbiterDecision) {
	if d.CostUSD <= 0 || d.RequestID == m.panelBilled {
		return
	}
	m.Acct.ArbiterCostUSD += d.CostUSD
	m.panelBilled = d.RequestID
}

// Person records a person's answer (maker decide) for the open step, as
// an arbiter entry of rung "person", instead of sampling the step (the
// caller then opens the next step and moves on). An answer the task cannot
// take pauses the job again, saying why; one the task cannot evaluate (a
// spec's next or reference expression failing for the step's state) fails
// the job at the step, as a vote's would.
func (m *Machine) Person(now time.Time, d schemas.PersonDecision) ([]Action, bool) {
	if _, err := m.Inst.Next(m.State, task.Vote{Key: d.VoteKey}); errors.Is(err, task.ErrEval) {
		return m.failEval(err), false
	} else if err != nil {
		// Paused again: the next `maker decide` replaces the answer.
		return m.NeedsHuman(fmt.Sprintf("%s's answer %q for step %d is not a move the task can take: %v", d.By, d.VoteKey, d.Step, err)), false
	}
	m.log.Warn("a person decided the step", "step", m.Step, "vote_key", d.VoteKey, "by", d.By)
	e := m.Entry(now, schemas.EntryArbiter)
	e.VoteKey, e.Rung, e.Prior = d.VoteKey, schemas.RungPerson, m.prior
	e.Arbiter = &schemas.ArbiterDecision{
		Header: schemas.NewHeader(schemas.KindArbiterDecision), Tenant: m.spec.Tenant, JobID: m.spec.JobID,
		Step: m.Step, RequestID: fmt.Sprintf("person-%d", m.Step), Outcome: schemas.ArbiterDecided,
		VoteKey: d.VoteKey, Confidence: 1, Reason: "decided by " + d.By, JudgeModel: "person:" + d.By, DecidedAt: d.At,
	}
	m.decided.note(now, m.Step, m.Epoch, m.counters.Next, m.seen)
	if err := m.apply(&e, false); errors.Is(err, task.ErrEval) {
		return m.failEval(err), false
	} else if err != nil {
		return m.NeedsHuman(err.Error()), false
	}
	e.Work = m.Acct.Delta()
	return []Action{{Kind: ActJournal, Entry: &e, Wait: true}}, true
}

// NeedsHuman pauses the job at the open step for a person, saying why. The
// step stays on its rung: a plain resume asks the panel again (its stored
// answer, or the one a person approved meanwhile) rather than paying for
// the rungs below once more.
func (m *Machine) NeedsHuman(why string) []Action {
	m.log.Error("the step needs a person: pausing the job", "step", m.Step, "why", why)
	m.Paused = true
	return []Action{{Kind: ActNeedsHuman, Reason: why}}
}

// abandonLadder leaves the open step's escalation (the job is cancelled):
// the samples its rungs drew count as late samples, and the step is back
// on its first rung.
func (m *Machine) abandonLadder() {
	for _, p := range m.prior {
		m.Acct.LateSamples += int64(p.Counted)
	}
	m.climb("", nil)
}

// tallyText is a tally as text: "key×votes, ...".
func tallyText(t []schemas.TallyEntry) string {
	parts := make([]string, 0, len(t))
	for _, e := range t {
		parts = append(parts, fmt.Sprintf("%s×%d", e.VoteKey, e.Votes))
	}
	if len(parts) == 0 {
		return "(no valid votes)"
	}
	return strings.Join(parts, ", ")
}

// maxFlagDetail bounds the red flag detail a reason quotes.
const maxFlagDetail = 300

// flagsText says, for a step that ended without consensus, how many of
// its samples were votes and red flags by reason, and what the last red
// flag said: when every sample is a red flag the cause is in there (a
// model that cannot answer, a spec whose own reference its answer rules
// refuse).
func (m *Machine) flagsText(rt schemas.RungTally) string {
	if rt.RedFlagged == 0 {
		return ""
	}
	reasons := make([]string, 0, len(rt.RedFlags))
	for r := range rt.RedFlags {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	var b strings.Builder
	fmt.Fprintf(&b, ": %d valid votes, %d red flags (", rt.Valid, rt.RedFlagged)
	for i, r := range reasons {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", r, rt.RedFlags[r])
	}
	b.WriteString(")")
	if m.lastFlag[0] != "" && m.lastFlag[1] != "" {
		fmt.Fprintf(&b, "; the last, %s: %s", m.lastFlag[0], m.lastFlag[1])
	}
	return b.String()
}
