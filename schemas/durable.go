package schemas

import (
	"encoding/json"
	"strings"
	"time"
)

// Job controls: what a person asked of a job through the lifecycle commands.
const (
	ControlRun    = "run"
	ControlPause  = "pause"
	ControlCancel = "cancel"
)

// JobRecord is a job's entry in the job registry, written when a
// coordinator takes the job from the intake stream. The registry outlives
// every process: it is how any coordinator finds the jobs that need an
// owner, and where pause, resume and cancel are asked.
type JobRecord struct {
	Header
	// Tenant and JobID name the job.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// Spec is the job as submitted (defaults applied).
	Spec JobSpec `json:"spec"`
	// Control is run, pause or cancel; the job's owner obeys it at the next
	// step boundary.
	Control string `json:"control" jsonschema:"enum=run,enum=pause,enum=cancel"`
	// Finished is set once the job has a report; no coordinator takes it
	// again.
	Finished bool `json:"finished"`
	// State is the last state the job was left in: queued, running,
	// paused, or a final state.
	State string `json:"state" jsonschema:"enum=queued,enum=running,enum=paused,enum=budget_exhausted,enum=solved,enum=unsolved,enum=no_consensus,enum=failed,enum=cancelled"`
	// Decision is a person's answer for a step the fleet could not settle
	// (`maker decide`); the job's owner journals it when it reaches that
	// step.
	Decision *PersonDecision `json:"decision,omitempty"`
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// PersonDecision is a person's answer for one step.
type PersonDecision struct {
	// Step is the step; VoteKey its answer, as the task's canonical key.
	Step    int64  `json:"step"`
	VoteKey string `json:"vote_key"`
	// By names the person; At is when they decided.
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// MessageKind implements Message.
func (*JobRecord) MessageKind() string { return KindJobRecord }

// Validate implements Message.
func (r *JobRecord) Validate() error {
	const k = KindJobRecord
	if err := r.Header.checkJob(k, r.Tenant, r.JobID); err != nil {
		return err
	}
	if r.Spec.Tenant != r.Tenant || r.Spec.JobID != r.JobID {
		return invalid(k, "spec is job %s/%s, not %s/%s", r.Spec.Tenant, r.Spec.JobID, r.Tenant, r.JobID)
	}
	if err := r.Spec.Validate(); err != nil {
		return err
	}
	switch r.Control {
	case ControlRun, ControlPause, ControlCancel:
	default:
		return invalid(k, "unknown control %q", r.Control)
	}
	if !knownState(r.State) {
		return invalid(k, "unknown state %q", r.State)
	}
	if d := r.Decision; d != nil && (d.Step < 0 || d.VoteKey == "" || d.By == "") {
		return invalid(k, "a person's decision needs a step >= 0, a vote_key and who made it")
	}
	return nil
}

// Lease says which coordinator owns a job, until when. Token grows by one
// with every new owner: it fences the journal (a takeover entry carries it)
// and Redis (the owner's epochs are built from it), so an owner that lost
// its lease cannot write anything that counts.
type Lease struct {
	Header
	// Tenant and JobID name the job.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// Owner names the coordinator holding the lease.
	Owner string `json:"owner"`
	// Token is the lease generation, from 1.
	Token int64 `json:"token"`
	// ExpiresAt: after it any coordinator may take the job. A released
	// lease has it in the past.
	ExpiresAt time.Time `json:"expires_at"`
	// HoldOff marks a lease released with a delay (a failed job waiting
	// to be retried): until ExpiresAt no coordinator takes it, its last
	// owner included.
	HoldOff bool `json:"hold_off,omitempty"`
}

// MessageKind implements Message.
func (*Lease) MessageKind() string { return KindLease }

// Validate implements Message.
func (l *Lease) Validate() error {
	const k = KindLease
	if err := l.Header.checkJob(k, l.Tenant, l.JobID); err != nil {
		return err
	}
	if l.Owner == "" {
		return invalid(k, "a lease needs an owner")
	}
	if l.Token < 1 || l.Token >= MaxLeaseToken {
		return invalid(k, "token must be between 1 and %d, got %d", MaxLeaseToken-1, l.Token)
	}
	return nil
}

// EpochsPerLease is how many epochs one lease generation may use: an
// owner's epochs are Token·EpochsPerLease + n, so every epoch of a newer
// owner is above every epoch of an older one.
const EpochsPerLease = 1_000_000

// MaxLeaseToken keeps epochs within int64 with room to spare.
const MaxLeaseToken = 1 << 40

// EpochGen returns the lease generation an epoch belongs to.
func EpochGen(epoch int64) int64 { return epoch / EpochsPerLease }

// Journal entry types.
const (
	// EntryDecision: a step decided by first-to-ahead-by-k voting.
	EntryDecision = "decision"
	// EntryTakeover: a coordinator took the job under a new lease token.
	// Written before it decides anything, it fences older owners out.
	EntryTakeover = "takeover"
	// EntryArbiter: a step the judge's panel settled after voting reached
	// no consensus (Arbiter holds its decision; no votes decided it).
	EntryArbiter = "arbiter"
	// EntryEnd: the job ended (State, Reason); written, fenced, before
	// the report, so only the job's owner can end it.
	EntryEnd = "end"
	// EntryEscalation: the open step climbed to the next rung (Rung, the
	// stronger model or the panel) after the rungs in Prior spent their
	// samples. A new owner resumes the step at that rung, not at the
	// bottom of the ladder.
	EntryEscalation = "escalation"
)

// Rungs of a step's escalation ladder, as journal entries, checkpoints and
// reports name them.
const (
	// RungOwnModel: the job's own model voting (the bottom rung).
	RungOwnModel = "own_model"
	// RungStrongerModel: the job's stronger model voting on the step.
	RungStrongerModel = "stronger_model"
	// RungPanel: the judge's panel arbitrating among the candidates.
	RungPanel = "panel"
	// RungPerson: a person's answer (maker decide).
	RungPerson = "person"
)

// validPrior checks the tallies of an escalated step's lower rungs.
func validPrior(k string, prior []RungTally) error {
	for i, p := range prior {
		if p.Rung != RungOwnModel && p.Rung != RungStrongerModel {
			return invalid(k, "prior rung %d is %s or %s, got %q", i, RungOwnModel, RungStrongerModel, p.Rung)
		}
		if p.Counted != p.Valid+p.RedFlagged || p.Valid < 0 || p.RedFlagged < 0 {
			return invalid(k, "prior rung %s: counted (%d) must be valid (%d) plus red_flagged (%d)", p.Rung, p.Counted, p.Valid, p.RedFlagged)
		}
		if err := checkTally(k, p.Tally); err != nil {
			return err
		}
	}
	return nil
}

// RungTally is what one rung of an escalated step drew before the next
// rung took over.
type RungTally struct {
	// Rung is "own_model" or "stronger_model".
	Rung string `json:"rung"`
	// Counted, Valid and RedFlagged are the rung's counted samples.
	Counted    int `json:"counted"`
	Valid      int `json:"valid"`
	RedFlagged int `json:"red_flagged"`
	// RedFlags breaks RedFlagged down by reason.
	RedFlags map[string]int `json:"red_flags,omitempty"`
	// Tally lists the rung's candidates, most votes first.
	Tally []TallyEntry `json:"tally,omitempty"`
}

// JournalEntry is one record of a job's decision journal, a JetStream
// subject appended with an expected last sequence, so two owners can never
// both append after the same entry.
type JournalEntry struct {
	Header
	// Tenant and JobID name the job.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// Type is decision, takeover, arbiter, escalation or end.
	Type string `json:"type" jsonschema:"enum=decision,enum=takeover,enum=arbiter,enum=escalation,enum=end"`
	// Token is the writer's lease token; Owner names it.
	Token int64  `json:"token"`
	Owner string `json:"owner"`
	// Step is the decided step (decision, arbiter), the escalated step
	// (escalation), or the first step the new owner works on (takeover).
	Step int64 `json:"step"`
	// Epoch is the tally epoch the decision was counted under.
	Epoch int64 `json:"epoch,omitempty"`
	// VoteKey is the winner; Votes its valid votes, Lead its margin.
	VoteKey string `json:"vote_key,omitempty"`
	Votes   int    `json:"votes,omitempty"`
	Lead    int    `json:"lead,omitempty"`
	// Counted, Valid and RedFlagged are the step's counted samples.
	Counted    int `json:"counted,omitempty"`
	Valid      int `json:"valid,omitempty"`
	RedFlagged int `json:"red_flagged,omitempty"`
	// RedFlags breaks RedFlagged down by reason.
	RedFlags map[string]int `json:"red_flags,omitempty"`
	// Tally lists every candidate, most votes first.
	Tally []TallyEntry `json:"tally,omitempty"`
	// Rung is who decided: "" (the job's own model), stronger_model,
	// panel or person (an arbiter entry); for an escalation entry, the
	// rung the step climbed to.
	Rung string `json:"rung,omitempty" jsonschema:"enum=,enum=stronger_model,enum=panel,enum=person"`
	// Prior holds the rungs below the deciding one (or below the one
	// climbed to), for an escalated step.
	Prior []RungTally `json:"prior,omitempty"`
	// Arbiter is the judge's decision (arbiter entries).
	Arbiter *ArbiterDecision `json:"arbiter,omitempty"`
	// K is the margin the step was sampled at (decision and arbiter
	// entries), so a new owner rebuilds the k schedule of an adaptive-k
	// job exactly; absent from entries of older releases.
	K int `json:"k,omitempty"`
	// State, Reason and NoConsensus are the job's end (end entries).
	State       string       `json:"state,omitempty" jsonschema:"enum=,enum=solved,enum=unsolved,enum=no_consensus,enum=failed,enum=cancelled"`
	Reason      string       `json:"reason,omitempty"`
	NoConsensus *NoConsensus `json:"no_consensus,omitempty"`
	// Work is how the job's figures changed since the previous entry (or
	// checkpoint), this entry's own step included: a new owner adds them up
	// to rebuild the report exactly.
	Work Delta `json:"work"`
	// At is when the entry was written.
	At time.Time `json:"at"`
}

// MessageKind implements Message.
func (*JournalEntry) MessageKind() string { return KindJournalEntry }

// Validate implements Message.
func (e *JournalEntry) Validate() error {
	const k = KindJournalEntry
	if err := e.Header.checkJob(k, e.Tenant, e.JobID); err != nil {
		return err
	}
	if e.Token < 1 || e.Owner == "" {
		return invalid(k, "an entry needs its writer's token (>= 1) and owner")
	}
	if err := nonNegative(k, count{"step", e.Step}, count{"epoch", e.Epoch}); err != nil {
		return err
	}
	if e.K < 0 || e.K > MaxK {
		return invalid(k, "k must be between 1 and %d (0: not recorded), got %d", MaxK, e.K)
	}
	if err := e.Work.check(k, "work."); err != nil {
		return err
	}
	if err := validPrior(k, e.Prior); err != nil {
		return err
	}
	switch e.Type {
	case EntryTakeover:
		return nil
	case EntryEnd:
		if !Terminal(e.State) {
			return invalid(k, "an end entry needs a final state, got %q", e.State)
		}
		if e.Counted != e.Valid+e.RedFlagged || e.Valid < 0 || e.RedFlagged < 0 {
			return invalid(k, "counted (%d) must be valid (%d) plus red_flagged (%d)", e.Counted, e.Valid, e.RedFlagged)
		}
		return nil
	case EntryArbiter:
		if e.VoteKey == "" || e.Arbiter == nil || e.Arbiter.Outcome != ArbiterDecided || e.Arbiter.VoteKey != e.VoteKey {
			return invalid(k, "an arbiter entry needs the judge's decided vote_key")
		}
		if e.Counted != e.Valid+e.RedFlagged || e.Valid < 0 || e.RedFlagged < 0 {
			return invalid(k, "counted (%d) must be valid (%d) plus red_flagged (%d)", e.Counted, e.Valid, e.RedFlagged)
		}
		return nil
	case EntryEscalation:
		if e.Rung != RungStrongerModel && e.Rung != RungPanel {
			return invalid(k, "an escalation entry climbs to %s or %s, got %q", RungStrongerModel, RungPanel, e.Rung)
		}
		if len(e.Prior) == 0 {
			return invalid(k, "an escalation entry needs the tallies of the rungs below (prior)")
		}
		return nil
	case EntryDecision:
	default:
		return invalid(k, "unknown type %q", e.Type)
	}
	if e.VoteKey == "" {
		return invalid(k, "a decision needs a vote_key")
	}
	if e.Votes < 1 || e.Lead < 1 || e.Lead > e.Votes {
		return invalid(k, "a decision needs votes >= lead >= 1, got votes %d lead %d", e.Votes, e.Lead)
	}
	if e.Valid < e.Votes || e.Counted != e.Valid+e.RedFlagged || e.RedFlagged < 0 {
		return invalid(k, "counted (%d) must be valid (%d, >= votes %d) plus red_flagged (%d)", e.Counted, e.Valid, e.Votes, e.RedFlagged)
	}
	n := 0
	for why, c := range e.RedFlags {
		if c < 0 || why == "" {
			return invalid(k, "red_flags[%q] = %d", why, c)
		}
		n += c
	}
	if n != e.RedFlagged {
		return invalid(k, "red_flags add up to %d, not red_flagged %d", n, e.RedFlagged)
	}
	return checkTally(k, e.Tally)
}

// Checkpoint is a job's compact cursor: everything needed to resume after
// the journal entry at JournalSeq without reading the entries before it.
type Checkpoint struct {
	Header
	// Tenant and JobID name the job.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// Token is the writer's lease token.
	Token int64 `json:"token"`
	// JournalSeq is the stream sequence of the last journal entry folded
	// into this checkpoint.
	JournalSeq uint64 `json:"journal_seq"`
	// Step is the next step to decide; State the task state it starts
	// from.
	Step  int64           `json:"step"`
	State json.RawMessage `json:"state"`
	// Trace is the running sha256 of the decided vote keys (its binary
	// state, so hashing resumes where it stopped).
	Trace []byte `json:"trace"`
	// Progress holds the report's running figures so far.
	Progress Progress `json:"progress"`
	// Rung and Prior are the open step's escalation, as in an escalation
	// entry: empty while the job's own model samples it.
	Rung  string      `json:"rung,omitempty" jsonschema:"enum=,enum=stronger_model,enum=panel"`
	Prior []RungTally `json:"prior,omitempty"`
	// PanelBilled is the arbitration request of the open step whose cost
	// Progress holds already, though it decided nothing (the job paused
	// for a person): asked again, the judge gives the same stored answer,
	// which is not billed twice.
	PanelBilled string `json:"panel_billed,omitempty"`
	// Receipt is the job's running reliability receipt (the estimate of p,
	// the k schedule, the histograms), which the entries after JournalSeq
	// go on from; absent from checkpoints of older releases.
	Receipt *Receipt `json:"receipt,omitempty"`
	// At is when the checkpoint was written.
	At time.Time `json:"at"`
}

// MessageKind implements Message.
func (*Checkpoint) MessageKind() string { return KindCheckpoint }

// Validate implements Message. The embedded report is a running one, not a
// final one, so only its counts are checked.
func (c *Checkpoint) Validate() error {
	const k = KindCheckpoint
	if err := c.Header.checkJob(k, c.Tenant, c.JobID); err != nil {
		return err
	}
	if c.Token < 1 {
		return invalid(k, "token must be >= 1")
	}
	if !json.Valid(c.State) || len(c.Trace) == 0 {
		return invalid(k, "a checkpoint needs a JSON state and a trace")
	}
	p := &c.Progress
	if err := nonNegative(k, count{"step", c.Step}); err != nil {
		return err
	}
	if err := p.check(k, "progress."); err != nil {
		return err
	}
	if p.StrongerPromptTokens > p.PromptTokens || p.StrongerCompletionTokens > p.CompletionTokens {
		return invalid(k, "the stronger model's tokens (%d, %d) are part of progress.prompt_tokens (%d) and progress.completion_tokens (%d)",
			p.StrongerPromptTokens, p.StrongerCompletionTokens, p.PromptTokens, p.CompletionTokens)
	}
	switch {
	case c.Rung == "" && len(c.Prior) > 0:
		return invalid(k, "prior rungs without the rung above them")
	case c.Rung != "" && c.Rung != RungStrongerModel && c.Rung != RungPanel:
		return invalid(k, "the open step's rung is %s or %s, got %q", RungStrongerModel, RungPanel, c.Rung)
	case c.Rung != "" && len(c.Prior) == 0:
		return invalid(k, "the open step on rung %s needs the tallies of the rungs below (prior)", c.Rung)
	case c.PanelBilled != "" && (!strings.HasPrefix(c.PanelBilled, ArbitrationIDPrefix) || len(c.PanelBilled) > 100):
		return invalid(k, "panel_billed %q is not an arbitration request id", c.PanelBilled)
	}
	if c.Receipt != nil {
		if err := c.Receipt.check(k, "receipt."); err != nil {
			return err
		}
	}
	return validPrior(k, c.Prior)
}

// Progress is a running job's figures, as a checkpoint keeps them.
type Progress struct {
	Figures
	// StartedAt is when the job first started (its first owner's start).
	StartedAt time.Time `json:"started_at"`
}

// DeadLetter is a message the fleet gave up on, kept with why.
type DeadLetter struct {
	Header
	// Stream and Seq locate the original; Subject is where it was
	// published, Consumer who gave up on it.
	Stream   string `json:"stream"`
	Seq      uint64 `json:"seq"`
	Subject  string `json:"subject"`
	Consumer string `json:"consumer"`
	// Reason says why: max_deliveries, or the reason a voter terminated it
	// with.
	Reason string `json:"reason"`
	// Deliveries is how often it was delivered.
	Deliveries uint64 `json:"deliveries"`
	// Data is the original payload, byte for byte; only its first bytes
	// when Truncated.
	Data []byte `json:"data"`
	// Truncated says the original was too large to keep whole (the dead
	// letter would exceed the server's or the stream's size limit): Data
	// holds its head, and Size and SHA256 identify the whole, which a
	// replay reads from Stream at Seq while it is still there.
	Truncated bool `json:"truncated,omitempty"`
	// Size is the original payload's length in bytes; SHA256 its SHA-256,
	// hex. Set on every dead letter stored by this release.
	Size   int    `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// At is when it was dead-lettered.
	At time.Time `json:"at"`
}

// MessageKind implements Message.
func (*DeadLetter) MessageKind() string { return KindDeadLetter }

// StoredDeadLetter is a dead letter as the dead-letter stream holds it:
// its sequence there (what maker dlq replay names) and the dead letter.
type StoredDeadLetter struct {
	DLQSeq uint64 `json:"dlq_seq"`
	DeadLetter
}

// Validate implements Message.
func (d *DeadLetter) Validate() error {
	const k = KindDeadLetter
	if err := d.Header.check(k); err != nil {
		return err
	}
	switch {
	case d.Stream == "" || d.Subject == "" || d.Reason == "":
		return invalid(k, "a dead letter needs its stream, subject and reason")
	case d.Size < 0 || d.Size > 0 && d.Size < len(d.Data): // 0: stored by an older release
		return invalid(k, "size %d is less than the %d bytes of data kept", d.Size, len(d.Data))
	case d.SHA256 != "" && !sha256Hex(d.SHA256):
		return invalid(k, "sha256 must be 64 lowercase hex digits")
	case d.Truncated && (d.SHA256 == "" || d.Seq == 0 || d.Size == len(d.Data)):
		return invalid(k, "a truncated dead letter needs the original's sequence, size and sha256")
	}
	return nil
}

// sha256Hex reports whether s is a SHA-256 in lowercase hex.
func sha256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// knownState reports whether s is a job state.
func knownState(s string) bool {
	switch s {
	case StateQueued, StateRunning, StatePaused, StateBudgetExhausted:
		return true
	}
	return Terminal(s)
}
