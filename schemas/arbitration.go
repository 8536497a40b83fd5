package schemas

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Arbitration: a voting step that reached no consensus on every voting
// rung of its job's ladder is put to the judge's panel as an
// ArbitrationRequest; the judge stores an ArbitrationResponse under the
// request id, and the step records the ArbiterDecision inside it.
const (
	KindArbitrationRequest  = "arbitration_request"
	KindArbitrationResponse = "arbitration_response"
)

// Limits on an arbitration request. A request on the bus may be forged,
// and every byte of it reaches a model's prompt.
const (
	// MaxArbitrationCandidates bounds the candidates put to a panel.
	MaxArbitrationCandidates = 64
	// MaxVoteKeyBytes bounds one candidate's vote key.
	MaxVoteKeyBytes = 8 << 10
	// MaxArbitrationStateBytes bounds the step's state.
	MaxArbitrationStateBytes = 64 << 10
)

// ArbitrationIDPrefix starts every arbitration request id. A break-glass
// request id may not start with it, so the two kinds never share a key in
// the judge's buckets.
const ArbitrationIDPrefix = "arbitration-"

// ArbitrationRequestID returns the request id of step of a tenant's job: a
// hash of the three, so asking again for the same step reads the answer
// stored under it instead of calling the panel twice.
func ArbitrationRequestID(tenant, jobID string, step int64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", tenant, jobID, step))
	return ArbitrationIDPrefix + hex.EncodeToString(sum[:16])
}

// MergeRungs returns what an escalated step's rungs found together: every
// vote key with its votes summed over the rungs, most votes first (ties by
// key), and the samples the rungs counted.
func MergeRungs(rungs []RungTally) (candidates []TallyEntry, samples int) {
	votes := make(map[string]int)
	for _, r := range rungs {
		samples += r.Counted
		for _, t := range r.Tally {
			votes[t.VoteKey] += t.Votes
		}
	}
	candidates = make([]TallyEntry, 0, len(votes))
	for key, n := range votes {
		candidates = append(candidates, TallyEntry{VoteKey: key, Votes: n})
	}
	slices.SortFunc(candidates, func(a, b TallyEntry) int {
		return cmp.Or(cmp.Compare(b.Votes, a.Votes), strings.Compare(a.VoteKey, b.VoteKey))
	})
	return candidates, samples
}

// ArbitrationRequest asks the judge's panel to choose among the candidates
// of a voting step that no rung could decide. The coordinator publishes it
// on the arbitration subject of its tenant; its Nats-Msg-Id is the request
// id.
type ArbitrationRequest struct {
	Header
	// RequestID is ArbitrationRequestID(Tenant, JobID, Step); the answer is
	// stored under it.
	RequestID string `json:"request_id"`
	// Tenant, JobID and Step name the step; Task is the job's task.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	Step   int64  `json:"step"`
	Task   string `json:"task"`
	// State is the task state the step starts from, as JSON text (a
	// string, like vote keys), at most 64 KiB.
	State string `json:"state"`
	// K is the job's voting margin.
	K int `json:"k"`
	// Samples is what the rungs counted together.
	Samples int `json:"samples"`
	// Candidates are every vote key the rungs found, with their votes summed
	// over the rungs, most votes first (MergeRungs): 1 to 64, each key 1 to
	// 8192 bytes without control characters. The judge chooses one.
	Candidates []TallyEntry `json:"candidates"`
	// Rungs are what each voting rung drew: own_model, then stronger_model
	// when the job has one.
	Rungs []RungTally `json:"rungs"`
	// MinConfidence is the least judge confidence that decides the step
	// (the job's escalation policy), in (0, 1].
	MinConfidence float64 `json:"min_confidence"`
	// BudgetUSD is the most the job pays for this arbitration: what its
	// coordinator reserved for it on the job's budget and the tenant's
	// spend for the day (0: the job holds no reservation, the judge's own
	// budget alone applies). The judge caps the call's budget at it, and
	// refuses a call whose estimate is over it.
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// SubmittedAt is when the request was sent.
	SubmittedAt time.Time `json:"submitted_at"`
}

// MessageKind implements Message.
func (*ArbitrationRequest) MessageKind() string { return KindArbitrationRequest }

// Validate implements Message. Beyond each field's shape it ties the
// request together: the id is the step's, the candidates and samples are
// the rungs' merged, so a forged request cannot reuse another step's id or
// put candidates to the panel that no rung drew.
func (r *ArbitrationRequest) Validate() error {
	const k = KindArbitrationRequest
	if err := r.Header.checkJob(k, r.Tenant, r.JobID); err != nil {
		return err
	}
	if err := nonNegative(k, count{"step", r.Step}, count{"samples", int64(r.Samples)}); err != nil {
		return err
	}
	if want := ArbitrationRequestID(r.Tenant, r.JobID, r.Step); r.RequestID != want {
		return invalid(k, "request_id %q is not the step's: want %q (a hash of tenant, job_id and step)", r.RequestID, want)
	}
	if !taskRE.MatchString(r.Task) {
		return invalid(k, "task %q is not a task name", r.Task)
	}
	if r.K < 1 || r.K > MaxK {
		return invalid(k, "k must be between 1 and %d, got %d", MaxK, r.K)
	}
	if len(r.State) > MaxArbitrationStateBytes {
		return invalid(k, "state is %d bytes, over the %d-byte limit", len(r.State), MaxArbitrationStateBytes)
	}
	if !json.Valid([]byte(r.State)) {
		return invalid(k, "state must be JSON text")
	}
	if !(r.MinConfidence > 0 && r.MinConfidence <= 1) {
		return invalid(k, "min_confidence must be in (0, 1], got %v", r.MinConfidence)
	}
	if !inRange(r.BudgetUSD, 0, MaxBudgetUSD) {
		return invalid(k, "budget_usd must be between 0 and %d, got %v", MaxBudgetUSD, r.BudgetUSD)
	}
	if n := len(r.Candidates); n < 1 || n > MaxArbitrationCandidates {
		return invalid(k, "candidates holds %d entries, want 1 to %d", n, MaxArbitrationCandidates)
	}
	for i, c := range r.Candidates {
		if err := checkVoteKey(k, fmt.Sprintf("candidates[%d].vote_key", i), c.VoteKey); err != nil {
			return err
		}
	}
	if err := checkTally(k, r.Candidates); err != nil {
		return err
	}
	if err := checkRungs(k, r.Rungs); err != nil {
		return err
	}
	cands, samples := MergeRungs(r.Rungs)
	if samples != r.Samples {
		return invalid(k, "samples (%d) must be what the rungs counted (%d)", r.Samples, samples)
	}
	if !slices.Equal(cands, r.Candidates) {
		return invalid(k, "candidates must be the rungs' tallies merged, most votes first (schemas.MergeRungs)")
	}
	return nil
}

// checkVoteKey checks a candidate's key: canonical vote keys are JSON
// text, so a raw control character (a line break that could pose as
// another candidate in a prompt) marks a forged one.
func checkVoteKey(k, name, key string) error {
	switch {
	case key == "":
		return invalid(k, "%s is empty", name)
	case len(key) > MaxVoteKeyBytes:
		return invalid(k, "%s is %d bytes, over the %d-byte limit", name, len(key), MaxVoteKeyBytes)
	case !utf8.ValidString(key):
		return invalid(k, "%s is not UTF-8", name)
	case strings.ContainsFunc(key, unicode.IsControl):
		return invalid(k, "%s holds a control character", name)
	}
	return nil
}

// checkRungs checks the rungs below an arbitration: own_model, then
// stronger_model if the job has one, each with a bounded tally of
// distinct keys.
func checkRungs(k string, rungs []RungTally) error {
	switch {
	case len(rungs) == 0 || rungs[0].Rung != RungOwnModel:
		return invalid(k, "rungs must start with %s", RungOwnModel)
	case len(rungs) > 2 || len(rungs) == 2 && rungs[1].Rung != RungStrongerModel:
		return invalid(k, "rungs are %s, then %s at most", RungOwnModel, RungStrongerModel)
	}
	if err := validPrior(k, rungs); err != nil {
		return err
	}
	for _, r := range rungs {
		if r.Counted > MaxSamplesLimit {
			return invalid(k, "rung %s counted %d samples, over %d", r.Rung, r.Counted, MaxSamplesLimit)
		}
		if len(r.Tally) > MaxArbitrationCandidates {
			return invalid(k, "rung %s's tally holds %d entries, over %d", r.Rung, len(r.Tally), MaxArbitrationCandidates)
		}
		seen := make(map[string]bool, len(r.Tally))
		for _, t := range r.Tally {
			if t.Votes > MaxSamplesLimit {
				return invalid(k, "rung %s: %d votes for one key, over %d", r.Rung, t.Votes, MaxSamplesLimit)
			}
			if seen[t.VoteKey] {
				return invalid(k, "rung %s's tally names a vote key twice", r.Rung)
			}
			seen[t.VoteKey] = true
		}
		for why, n := range r.RedFlags {
			if n < 0 {
				return invalid(k, "rung %s: red_flags[%q] must be >= 0, got %d", r.Rung, why, n)
			}
		}
	}
	return nil
}

// ArbitrationResponse is the judge's answer to an arbitration request,
// stored in the answers bucket under <tenant>.<request id>: a held response while
// a person must approve the cost, then the final one, which carries the
// step's decision.
type ArbitrationResponse struct {
	Header
	// RequestID, Tenant, JobID and Step are the request's.
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	JobID     string `json:"job_id"`
	Step      int64  `json:"step"`
	// Outcome is what the judge did: answered (the panel and the judge
	// gave a valid answer), degraded, refused, held (not final: waiting for
	// a person's approval), denied or failed.
	Outcome string `json:"outcome" jsonschema:"enum=answered,enum=degraded,enum=refused,enum=held,enum=denied,enum=failed"`
	// Reason says why a held request waits; a final response's reason is
	// its decision's.
	Reason string `json:"reason,omitempty"`
	// Decision is the step's decision, set once final: decided only for
	// an answered outcome naming a candidate with at least the request's
	// min_confidence, needs_human otherwise.
	Decision *ArbiterDecision `json:"decision,omitempty"`
	// Cost is the estimate, the actual cost (the decision's cost_usd) and
	// the budget.
	Cost BreakGlassCost `json:"cost"`
	// Members are the individual model calls.
	Members []MemberResult `json:"members,omitempty"`
	// FailedMembers lists panel members that gave no answer.
	FailedMembers []string `json:"failed_members,omitempty"`
	// Approver is who approved a held request.
	Approver string `json:"approver,omitempty"`
	// AnsweredAt is when the judge wrote this response.
	AnsweredAt time.Time `json:"answered_at"`
}

// MessageKind implements Message.
func (*ArbitrationResponse) MessageKind() string { return KindArbitrationResponse }

// Validate implements Message.
func (r *ArbitrationResponse) Validate() error {
	const k = KindArbitrationResponse
	if err := r.Header.checkJob(k, r.Tenant, r.JobID); err != nil {
		return err
	}
	if err := nonNegative(k, count{"step", r.Step}); err != nil {
		return err
	}
	if want := ArbitrationRequestID(r.Tenant, r.JobID, r.Step); r.RequestID != want {
		return invalid(k, "request_id %q is not the step's: want %q", r.RequestID, want)
	}
	switch r.Outcome {
	case BreakGlassHeld:
		if strings.TrimSpace(r.Reason) == "" || r.Decision != nil {
			return invalid(k, "a held response has a reason and no decision yet")
		}
	case BreakGlassAnswered, BreakGlassDegraded, BreakGlassRefused, BreakGlassDenied, BreakGlassFailed:
		if err := r.checkDecision(k); err != nil {
			return err
		}
	default:
		return invalid(k, "unknown outcome %q", r.Outcome)
	}
	return checkCost(k, r.Cost, r.Members)
}

// checkDecision checks a final response's decision: the request's step,
// decided only when answered, its cost the response's.
func (r *ArbitrationResponse) checkDecision(k string) error {
	d := r.Decision
	if d == nil || r.Reason != "" {
		return invalid(k, "a %s response has a decision, and its reason is the decision's", r.Outcome)
	}
	if err := d.Validate(); err != nil {
		return invalid(k, "decision: %v", err)
	}
	if d.Tenant != r.Tenant || d.JobID != r.JobID || d.Step != r.Step || d.RequestID != r.RequestID {
		return invalid(k, "the decision's tenant, job_id, step and request_id must be the response's")
	}
	if d.Outcome == ArbiterDecided && r.Outcome != BreakGlassAnswered {
		return invalid(k, "only an answered response decides the step, not a %s one", r.Outcome)
	}
	if d.CostUSD != r.Cost.ActualUSD {
		return invalid(k, "the decision's cost_usd (%v) must be cost.actual_usd (%v)", d.CostUSD, r.Cost.ActualUSD)
	}
	return nil
}

// ArbiterDecision records how the judge settled a voting step that reached
// no consensus. It is its own kind in the journal and the report: the
// chosen answer is not counted as votes.
type ArbiterDecision struct {
	Header
	// Tenant, JobID and Step name the step.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	Step   int64  `json:"step"`
	// RequestID is the arbitration request that produced the decision
	// ("person-<step>" for a person's answer).
	RequestID string `json:"request_id"`
	// Outcome is decided (VoteKey is the step's answer) or needs_human (the
	// job pauses for a person).
	Outcome string `json:"outcome" jsonschema:"enum=decided,enum=needs_human"`
	// VoteKey is the chosen candidate when decided.
	VoteKey string `json:"vote_key,omitempty"`
	// Confidence is the judge's, Threshold the least that decides.
	Confidence float64 `json:"confidence"`
	Threshold  float64 `json:"threshold"`
	// Reason explains the outcome.
	Reason string `json:"reason"`
	// JudgeModel and Panel are the models that decided.
	JudgeModel string   `json:"judge_model,omitempty"`
	Panel      []string `json:"panel,omitempty"`
	// CostUSD is the arbitration's actual cost.
	CostUSD float64 `json:"cost_usd"`
	// DecidedAt is when the decision was made.
	DecidedAt time.Time `json:"decided_at"`
}

// MessageKind implements Message.
func (*ArbiterDecision) MessageKind() string { return KindArbiterDecision }

// Validate implements Message.
func (d *ArbiterDecision) Validate() error {
	const k = KindArbiterDecision
	if err := d.Header.checkJob(k, d.Tenant, d.JobID); err != nil {
		return err
	}
	if !jobIDRE.MatchString(d.RequestID) {
		return invalid(k, "request_id %q is not a request id", d.RequestID)
	}
	if err := nonNegative(k, count{"step", d.Step}); err != nil {
		return err
	}
	if err := nonNegativeFigures(k, figure{"confidence", d.Confidence}, figure{"threshold", d.Threshold}, figure{"cost_usd", d.CostUSD}); err != nil {
		return err
	}
	if d.Confidence > 1 || d.Threshold > 1 {
		return invalid(k, "confidence and threshold must be <= 1")
	}
	switch d.Outcome {
	case ArbiterDecided:
		if d.VoteKey == "" {
			return invalid(k, "a decided arbiter decision needs a vote_key")
		}
	case ArbiterNeedsHuman:
		if d.VoteKey != "" {
			return invalid(k, "a needs_human decision has no vote_key")
		}
	default:
		return invalid(k, "unknown outcome %q", d.Outcome)
	}
	return nil
}
