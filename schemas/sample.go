package schemas

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// SampleRequest asks a voter for one model sample of one step. The
// coordinator publishes it on the samples stream; any voter may take it.
type SampleRequest struct {
	Header
	// Tenant and JobID name the job.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// SampleID is unique per publish: tenant/job/step/epoch/index/attempt,
	// and /b<branch> for a speculative sample. As none is published twice,
	// the message carries no Nats-Msg-Id (the stream would only remember
	// it); a result's id is made from it (ResultMsgID).
	SampleID string `json:"sample_id"`
	// Step is the step number, from 0.
	Step int64 `json:"step"`
	// Epoch changes when a step's tally is rebuilt; votes of another epoch
	// are not counted.
	Epoch int64 `json:"epoch"`
	// Index is the sample's position in the step's vote order. Votes are
	// counted in index order, so a decision depends only on the answers.
	Index int `json:"index"`
	// Attempt counts re-publishes of the same index after a timeout; the
	// tally keeps the first answer that arrives for an index.
	Attempt int `json:"attempt"`
	// Branch, when not 0, marks a speculative sample: one drawn for a step
	// not reached yet, from a guess of the state it starts from. The
	// coordinator counts it only if the guess becomes the real state.
	Branch int64 `json:"branch,omitempty"`
	// Task and Params select and configure the task; TaskVersion and
	// TaskHash pin a registered task spec (empty for a built-in task).
	Task        string          `json:"task"`
	TaskVersion string          `json:"task_version,omitempty"`
	TaskHash    string          `json:"task_hash,omitempty"`
	Params      json.RawMessage `json:"params"`
	// ParamsRef, when set, names the job's params in the inputs store
	// instead (JobSpec.ParamsRef): Params is then empty.
	ParamsRef string `json:"params_ref,omitempty"`
	// State is the task state the step starts from, canonical JSON.
	State json.RawMessage `json:"state"`
	// Temperature for the model call: 0 for index 0, else the job's rest
	// temperature (0.1 by default).
	Temperature float64 `json:"temperature"`
	// Seed is the model's sampling seed, a function of the job's seed, the
	// step and the index, so re-samples of an index ask the same question.
	Seed int64 `json:"seed"`
	// MaxOutputTokens is the red-flag limit on the reply's length.
	MaxOutputTokens int `json:"max_output_tokens"`
	// Model, when set, is the model to ask instead of the voter's own: an
	// escalated step's stronger model, or one of the job's models for a
	// decorrelated sample.
	Model string `json:"model,omitempty"`
	// PromptVariant, from 1 to MaxPromptVariant, asks the voter to
	// paraphrase the task's prompt (task.Paraphrase): a correlated step's
	// decorrelated samples. 0 (the default) is the task's own prompt.
	PromptVariant int `json:"prompt_variant,omitempty"`
	// Token is the sample's capability: a keyed hash of SampleID that
	// only the coordinators can make (SampleTokenLen characters of
	// base64url). The voter echoes it in its result; a result whose token
	// is not the one issued for its sample id counts for nothing.
	Token string `json:"token"`
	// IssuedAt is when the coordinator published the request.
	IssuedAt time.Time `json:"issued_at"`
	// Also are more samples of the same question (the same step, state,
	// model, prompt and limits) to draw with this one: one message for a
	// wave instead of one a sample. A member may have its own temperature
	// (a wave's first sample is drawn at 0, the others at the job's rest
	// temperature); every member's is above 0. A voter whose model
	// answers n > 1 draws the members of one temperature in one call (the
	// prompt paid once), any other draws each alone with its own seed.
	// Each is answered with its own result, index, sample id and token.
	// At most MaxSamplesPerCall − 1.
	Also []SampleMember `json:"also,omitempty"`
}

// MaxSamplesPerCall bounds the samples one request asks for (itself and
// Also).
const MaxSamplesPerCall = 16

// SampleMember is one more sample of a request (SampleRequest.Also): its
// sample id is the request's with this index.
type SampleMember struct {
	// Index is the sample's position in the step's vote order.
	Index int `json:"index"`
	// Seed is its model seed (the choice's, when drawn alone).
	Seed int64 `json:"seed"`
	// Token is its capability, answered back with its result.
	Token string `json:"token"`
	// Temperature is its own temperature; 0: the request's.
	Temperature float64 `json:"temperature,omitempty"`
}

// Temp is the temperature member m of r is drawn at.
func (r *SampleRequest) Temp(m SampleMember) float64 {
	if m.Temperature > 0 {
		return m.Temperature
	}
	return r.Temperature
}

// Members returns the samples r asks for, r first, each a request of its
// own (no Also): what a voter answers.
func (r *SampleRequest) Members() []SampleRequest {
	out := make([]SampleRequest, 0, 1+len(r.Also))
	one := *r
	one.Also = nil
	out = append(out, one)
	for _, m := range r.Also {
		one.Index, one.Seed, one.Token, one.Temperature = m.Index, m.Seed, m.Token, r.Temp(m)
		one.SampleID = BranchSampleID(r.Tenant, r.JobID, r.Step, r.Epoch, m.Index, r.Attempt, r.Branch)
		out = append(out, one)
	}
	return out
}

// MessageKind implements Message.
func (*SampleRequest) MessageKind() string { return KindSampleRequest }

// Validate implements Message.
func (r *SampleRequest) Validate() error {
	const k = KindSampleRequest
	if err := r.Header.checkJob(k, r.Tenant, r.JobID); err != nil {
		return err
	}
	if err := checkPosition(k, r.Tenant, r.JobID, r.SampleID, r.Step, r.Epoch, r.Index, r.Attempt, r.Branch); err != nil {
		return err
	}
	if !taskRE.MatchString(r.Task) {
		return invalid(k, "task %q is not a task name", r.Task)
	}
	if err := checkTaskPin(k, r.TaskVersion, r.TaskHash); err != nil {
		return err
	}
	if err := checkParams(k, r.Params, r.ParamsRef, false); err != nil {
		return err
	}
	if r.ParamsRef == "" && !json.Valid(r.Params) || !json.Valid(r.State) {
		return invalid(k, "params and state must be JSON")
	}
	if !inRange(r.Temperature, 0, MaxTemperature) {
		return invalid(k, "temperature must be between 0 and %d, got %v", MaxTemperature, r.Temperature)
	}
	if r.MaxOutputTokens < 1 {
		return invalid(k, "max_output_tokens must be >= 1, got %d", r.MaxOutputTokens)
	}
	if len(r.Model) > maxModelName {
		return invalid(k, "model name longer than %d bytes", maxModelName)
	}
	if r.PromptVariant < 0 || r.PromptVariant > MaxPromptVariant {
		return invalid(k, "prompt_variant must be between 0 (the task's prompt) and %d, got %d", MaxPromptVariant, r.PromptVariant)
	}
	if !ValidSampleToken(r.Token) {
		return invalid(k, "token must be %d characters of A-Z, a-z, 0-9, '-' and '_' (got %d bytes)", SampleTokenLen, len(r.Token))
	}
	if len(r.Also) > 0 {
		if len(r.Also) >= MaxSamplesPerCall {
			return invalid(k, "also holds %d samples, at most %d", len(r.Also), MaxSamplesPerCall-1)
		}
		seen := map[int]bool{r.Index: true}
		for i, m := range r.Also {
			if m.Index < 0 || seen[m.Index] {
				return invalid(k, "also[%d]: index %d negative or given twice", i, m.Index)
			}
			// n copies of one greedy answer are not votes: a sample at 0
			// is drawn alone, as the request's own.
			if t := r.Temp(m); m.Temperature < 0 || !inRange(t, 0, MaxTemperature) || t == 0 {
				return invalid(k, "also[%d]: temperature must be above 0 and at most %d, got %v", i, MaxTemperature, t)
			}
			seen[m.Index] = true
			if !ValidSampleToken(m.Token) {
				return invalid(k, "also[%d]: token must be %d characters of A-Z, a-z, 0-9, '-' and '_'", i, SampleTokenLen)
			}
		}
	}
	return nil
}

// maxModelName bounds a model name on the wire.
const maxModelName = 200

// SampleTokenLen is the length of a sample token: 128 bits in base64url
// without padding.
const SampleTokenLen = 22

// SampleTokenPattern is ValidSampleToken's rule (a regexp), as the JSON
// Schema states it.
const SampleTokenPattern = `^[A-Za-z0-9_-]{22}$`

// ValidSampleToken reports whether s has the shape of a sample token
// (SampleRequest.Token). Only the coordinators can tell whether it is the
// right one.
func ValidSampleToken(s string) bool {
	if len(s) != SampleTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// ResultMsgID is the Nats-Msg-Id of a voter's result for a sample: the
// sample id, "/r/", the sample's token and the request's delivery count.
// A retried publish of one answer is dropped by the stream; a second
// delivery's answer is kept (and counted as a duplicate by the tally); and
// one who does not hold the token cannot publish under an honest answer's
// id first, to have the stream drop the honest answer as a duplicate.
func ResultMsgID(sampleID, token string, delivery uint64) string {
	return sampleID + "/r/" + token + "/" + strconv.FormatUint(delivery, 10)
}

// checkPosition checks the counts before the id they build, so a negative
// index is reported as such rather than as an id mismatch.
func checkPosition(k, tenant, job, sampleID string, step, epoch int64, index, attempt int, branch int64) error {
	if err := nonNegative(k, count{"step", step}, count{"epoch", epoch}, count{"index", int64(index)}, count{"attempt", int64(attempt)}, count{"branch", branch}); err != nil {
		return err
	}
	if want := BranchSampleID(tenant, job, step, epoch, index, attempt, branch); sampleID != want {
		return invalid(k, "sample_id %q does not match its fields (want %q)", sampleID, want)
	}
	return nil
}

// SampleID builds a sample id.
func SampleID(tenant, job string, step, epoch int64, index, attempt int) string {
	b := make([]byte, 0, len(tenant)+len(job)+48)
	b = append(b, tenant...)
	b = append(b, '/')
	b = append(b, job...)
	b = append(b, '/')
	b = strconv.AppendInt(b, step, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, epoch, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(attempt), 10)
	return string(b)
}

// BranchSampleID builds the id of a sample of branch (SampleID for 0).
func BranchSampleID(tenant, job string, step, epoch int64, index, attempt int, branch int64) string {
	id := SampleID(tenant, job, step, epoch, index, attempt)
	if branch == 0 {
		return id
	}
	return id + "/b" + strconv.FormatInt(branch, 10)
}

// Sample outcomes.
const (
	// OutcomeVote: the reply parsed; VoteKey holds the canonical answer.
	OutcomeVote = "vote"
	// OutcomeRedFlag: the reply was discarded; RedFlag says why.
	OutcomeRedFlag = "red_flag"
	// OutcomeSkipped: the step was decided before the voter started; the
	// model was not called.
	OutcomeSkipped = "skipped"
	// OutcomeCancelled: the step was decided during the model call, which
	// was cancelled.
	OutcomeCancelled = "cancelled"
	// OutcomeUnserved: no answer. The voter could not have the sample
	// served (the provider refuses its key or the model, every deployment
	// of the model is out) and handed it back for another try; this
	// notice tells the job why it waits (status: provider_unavailable,
	// the model, the error in Detail). It never counts as a sample.
	// Cause says whose fault: the provider's (UnservedProvider, the
	// default) or the request's own (UnservedTask: the voter cannot run
	// the task, its params or its state; status: task_refused).
	OutcomeUnserved = "unserved"
	// UnservedProvider and UnservedTask are an unserved notice's causes.
	UnservedProvider = "provider"
	UnservedTask     = "task"
	// MaxUnservedDetail bounds what a job keeps of an unserved notice's
	// Detail (its status shows it).
	MaxUnservedDetail = 300
	// MaxResultDetail bounds a result's Detail on the wire.
	MaxResultDetail = 1024
)

// Red-flag reasons.
const (
	// RedFlagLength: the model stopped at the token limit (finish_reason
	// "length"), even if the text parses.
	RedFlagLength = "length"
	// RedFlagTooLong: the reply used more output tokens than allowed.
	RedFlagTooLong = "too_long"
	// RedFlagParse: the task's strict parser rejected the reply.
	RedFlagParse = "parse"
	// RedFlagEmpty: the response had no choice or no content.
	RedFlagEmpty = "empty"
	// RedFlagRefused: the model refused the request for good (a 4xx such
	// as an unknown model or a bad key): no answer will come for it, so it
	// counts as a discarded sample and the step draws another.
	RedFlagRefused = "refused"
	// RedFlagPolicy: the voter refused the request without calling the
	// model: it asks for a model, max_output_tokens or temperature outside
	// the voter's own policy. Counted like any red flag, so a step no voter
	// may answer reaches its sample cap rather than waiting.
	RedFlagPolicy = "policy"
	// RedFlagOverclaim: set by the coordinator, not a voter: the result
	// claims more tokens than its request allows (more prompt tokens than
	// the prompt can make, more completion tokens than max_output_tokens).
	// Its vote is not counted and its tokens are charged at the bound.
	RedFlagOverclaim = "overclaim"
)

// SampleResult is a voter's answer to a SampleRequest.
type SampleResult struct {
	Header
	// Tenant, JobID, SampleID, Step, Epoch, Index, Attempt and Branch
	// echo the request.
	Tenant   string `json:"tenant"`
	JobID    string `json:"job_id"`
	SampleID string `json:"sample_id"`
	Step     int64  `json:"step"`
	Epoch    int64  `json:"epoch"`
	Index    int    `json:"index"`
	Attempt  int    `json:"attempt"`
	Branch   int64  `json:"branch,omitempty"`
	// Outcome is vote, red_flag, skipped, cancelled or unserved.
	Outcome string `json:"outcome" jsonschema:"enum=vote,enum=red_flag,enum=skipped,enum=cancelled,enum=unserved"`
	// VoteKey is the canonical parsed answer (outcome vote only).
	VoteKey string `json:"vote_key,omitempty"`
	// RedFlag is the red-flag reason (outcome red_flag only): length,
	// too_long, parse, empty, refused, policy, or a task spec's own red
	// flag name (the coordinator makes a result that claims more tokens
	// than its request allows the red flag overclaim).
	RedFlag string `json:"red_flag,omitempty"`
	// Detail explains a red flag (or an unserved notice), briefly: at
	// most MaxResultDetail bytes.
	Detail string `json:"detail,omitempty"`
	// Cause is an unserved notice's cause: provider (the default) or
	// task.
	Cause string `json:"cause,omitempty" jsonschema:"enum=,enum=provider,enum=task"`
	// FinishReason is the model's finish_reason.
	FinishReason string `json:"finish_reason,omitempty"`
	// PromptTokens and CompletionTokens are the model's usage figures.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// CachedPromptTokens is the part of PromptTokens the provider served
	// from its prompt cache (at most PromptTokens).
	CachedPromptTokens int `json:"cached_prompt_tokens,omitempty"`
	// LatencyMS is the model call's wall time, retries included.
	LatencyMS float64 `json:"latency_ms"`
	// Model is the model that answered.
	Model string `json:"model,omitempty"`
	// VoterID names the voter process.
	VoterID string `json:"voter_id"`
	// Token echoes the request's token (SampleRequest.Token). A result
	// without it, or with another sample's, is dropped as forged.
	Token string `json:"token,omitempty"`
	// Also are the answers to more samples of the same request
	// (SampleRequest.Also), sent in this one message: one message, one
	// store and one ack for a wave's answers instead of one a sample.
	// Each carries its own index, outcome, usage and token and is
	// checked and counted on its own (Parts); the rest (the job, step,
	// epoch, attempt, branch, model and voter) is this result's. Not on
	// an unserved notice. At most MaxSamplesPerCall − 1, each index once.
	Also []ResultMember `json:"also,omitempty"`
}

// ResultMember is the answer to one more sample of a request, sent in
// its result (SampleResult.Also): its sample id is the result's with
// this index.
type ResultMember struct {
	// Index is the sample's position in the step's vote order.
	Index int `json:"index"`
	// Outcome is vote, red_flag, skipped or cancelled.
	Outcome string `json:"outcome" jsonschema:"enum=vote,enum=red_flag,enum=skipped,enum=cancelled"`
	// VoteKey, RedFlag, Detail, FinishReason, the token counts and
	// LatencyMS are as in SampleResult.
	VoteKey            string  `json:"vote_key,omitempty"`
	RedFlag            string  `json:"red_flag,omitempty"`
	Detail             string  `json:"detail,omitempty"`
	FinishReason       string  `json:"finish_reason,omitempty"`
	PromptTokens       int     `json:"prompt_tokens"`
	CompletionTokens   int     `json:"completion_tokens"`
	CachedPromptTokens int     `json:"cached_prompt_tokens,omitempty"`
	LatencyMS          float64 `json:"latency_ms"`
	// Token echoes the sample's own token (SampleMember.Token).
	Token string `json:"token,omitempty"`
}

// AppendParts appends the answers r holds to dst, r's own first, each a
// result of its own (no Also): what a coordinator checks and counts one
// by one.
func (r *SampleResult) AppendParts(dst []SampleResult) []SampleResult {
	one := *r
	one.Also = nil
	dst = append(dst, one)
	for _, m := range r.Also {
		dst = append(dst, r.Part(m))
	}
	return dst
}

// Part is member m of r as a result of its own.
func (r *SampleResult) Part(m ResultMember) SampleResult {
	one := *r
	one.Also = nil
	one.SampleID = BranchSampleID(r.Tenant, r.JobID, r.Step, r.Epoch, m.Index, r.Attempt, r.Branch)
	one.Index, one.Outcome, one.VoteKey, one.RedFlag, one.Detail, one.FinishReason = m.Index, m.Outcome, m.VoteKey, m.RedFlag, m.Detail, m.FinishReason
	one.PromptTokens, one.CompletionTokens, one.CachedPromptTokens, one.LatencyMS, one.Token = m.PromptTokens, m.CompletionTokens, m.CachedPromptTokens, m.LatencyMS, m.Token
	one.Cause = ""
	return one
}

// Member is r as a member of another result (the inverse of
// Part, for the voter that sends several answers in one message).
func (r *SampleResult) Member() ResultMember {
	return ResultMember{
		Index: r.Index, Outcome: r.Outcome, VoteKey: r.VoteKey, RedFlag: r.RedFlag, Detail: r.Detail, FinishReason: r.FinishReason,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, CachedPromptTokens: r.CachedPromptTokens, LatencyMS: r.LatencyMS, Token: r.Token,
	}
}

// MessageKind implements Message.
func (*SampleResult) MessageKind() string { return KindSampleResult }

// Validate implements Message.
func (r *SampleResult) Validate() error {
	if err := r.validateOne(); err != nil {
		return err
	}
	if len(r.Also) == 0 {
		return nil
	}
	const k = KindSampleResult
	if len(r.Also) >= MaxSamplesPerCall {
		return invalid(k, "also holds %d answers, at most %d", len(r.Also), MaxSamplesPerCall-1)
	}
	if r.Outcome == OutcomeUnserved {
		return invalid(k, "an unserved notice has no also")
	}
	for i, m := range r.Also {
		if m.Index == r.Index || slices.ContainsFunc(r.Also[:i], func(o ResultMember) bool { return o.Index == m.Index }) {
			return invalid(k, "also[%d]: index %d given twice", i, m.Index)
		}
		if m.Outcome == OutcomeUnserved {
			return invalid(k, "also[%d]: an unserved notice is sent alone", i)
		}
		part := r.Part(m)
		if err := part.validateOne(); err != nil {
			return fmt.Errorf("also[%d]: %w", i, err)
		}
	}
	return nil
}

// validateOne checks r's own answer, not its Also.
func (r *SampleResult) validateOne() error {
	const k = KindSampleResult
	if err := r.Header.checkJob(k, r.Tenant, r.JobID); err != nil {
		return err
	}
	if err := checkPosition(k, r.Tenant, r.JobID, r.SampleID, r.Step, r.Epoch, r.Index, r.Attempt, r.Branch); err != nil {
		return err
	}
	if len(r.Detail) > MaxResultDetail {
		return invalid(k, "detail is %d bytes, over %d", len(r.Detail), MaxResultDetail)
	}
	switch r.Outcome {
	case OutcomeVote:
		if r.VoteKey == "" {
			return invalid(k, "a vote needs a vote_key")
		}
		if r.RedFlag != "" {
			return invalid(k, "a vote has no red_flag")
		}
	case OutcomeRedFlag:
		// The voter's own reasons (length, too_long, parse, empty,
		// refused, policy) or a task spec's red flag names: one pattern.
		if !ValidRedFlagName(r.RedFlag) {
			return invalid(k, "red_flag %q is not a red flag reason (1-40 of a-z, 0-9 and '_')", r.RedFlag)
		}
		if r.VoteKey != "" {
			return invalid(k, "a red-flagged sample has no vote_key")
		}
	case OutcomeSkipped, OutcomeCancelled, OutcomeUnserved:
		if r.VoteKey != "" || r.RedFlag != "" {
			return invalid(k, "a %s sample has no vote_key or red_flag", r.Outcome)
		}
	default:
		return invalid(k, "unknown outcome %q", r.Outcome)
	}
	switch {
	case r.Cause != "" && r.Outcome != OutcomeUnserved:
		return invalid(k, "only an unserved notice has a cause")
	case r.Cause != "" && r.Cause != UnservedProvider && r.Cause != UnservedTask:
		return invalid(k, "cause %q is not provider or task", truncate(r.Cause, 40))
	}
	if err := nonNegative(k, count{"prompt_tokens", int64(r.PromptTokens)}, count{"completion_tokens", int64(r.CompletionTokens)}); err != nil {
		return err
	}
	if r.CachedPromptTokens < 0 || r.CachedPromptTokens > r.PromptTokens {
		return invalid(k, "cached_prompt_tokens %d outside [0, prompt_tokens %d]", r.CachedPromptTokens, r.PromptTokens)
	}
	if r.Token != "" && !ValidSampleToken(r.Token) {
		return invalid(k, "token must be %d characters of A-Z, a-z, 0-9, '-' and '_' (got %d bytes)", SampleTokenLen, len(r.Token))
	}
	return nonNegativeFigures(k, figure{"latency_ms", r.LatencyMS})
}

// TallyEntry is one candidate's valid votes.
type TallyEntry struct {
	// VoteKey is the candidate answer, Votes its valid votes.
	VoteKey string `json:"vote_key"`
	Votes   int    `json:"votes"`
}

// StepDecided announces a decided step. Voters use it to skip and cancel
// samples of that step.
type StepDecided struct {
	Header
	// Tenant and JobID name the job, Step and Epoch the decided step.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	Step   int64  `json:"step"`
	Epoch  int64  `json:"epoch"`
	// VoteKey is the winning answer.
	VoteKey string `json:"vote_key"`
	// Votes is the winner's valid votes; Lead its margin over the runner-up
	// (at least the job's k).
	Votes int `json:"votes"`
	Lead  int `json:"lead"`
	// Samples counts the step's samples that were counted, valid or
	// red-flagged; RedFlagged the red-flagged ones.
	Samples    int `json:"samples"`
	RedFlagged int `json:"red_flagged"`
	// Tally lists every candidate's votes, most votes first.
	Tally []TallyEntry `json:"tally"`
	// DecidedAt is when the step was decided.
	DecidedAt time.Time `json:"decided_at"`
}

// MessageKind implements Message.
func (*StepDecided) MessageKind() string { return KindStepDecided }

// Validate implements Message.
func (d *StepDecided) Validate() error {
	const k = KindStepDecided
	if err := d.Header.checkJob(k, d.Tenant, d.JobID); err != nil {
		return err
	}
	if err := nonNegative(k, count{"step", d.Step}, count{"epoch", d.Epoch}, count{"red_flagged", int64(d.RedFlagged)}); err != nil {
		return err
	}
	if d.VoteKey == "" {
		return invalid(k, "a decision needs a vote_key")
	}
	if d.Votes < 1 {
		return invalid(k, "votes must be >= 1, got %d", d.Votes)
	}
	if d.Lead < 1 || d.Lead > d.Votes {
		return invalid(k, "lead must be between 1 and votes (%d), got %d", d.Votes, d.Lead)
	}
	// Samples are valid votes (the winner's among them) plus red flags.
	if d.Samples < d.Votes+d.RedFlagged {
		return invalid(k, "samples (%d) must cover the winner's votes (%d) plus red_flagged (%d)", d.Samples, d.Votes, d.RedFlagged)
	}
	return checkTally(k, d.Tally)
}
