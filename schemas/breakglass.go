package schemas

import (
	"strings"
	"time"
)

// Break-glass message kinds: the judge role's requests, answers, audit
// records and approvals, and the arbiter decision a voting step records
// when the judge settles it (arbitration.go has the arbitration kinds).
const (
	KindBreakGlassRequest  = "break_glass_request"
	KindBreakGlassResponse = "break_glass_response"
	KindBreakGlassAudit    = "break_glass_audit"
	KindBreakGlassApproval = "break_glass_approval"
	KindApprovalDecision   = "approval_decision"
	KindArbiterDecision    = "arbiter_decision"
)

// BreakGlassTrigger is the prefix every break-glass problem must start with
// (case-insensitive, after leading space).
const BreakGlassTrigger = "break glass:"

// Problem types a break-glass request is classified into.
const (
	ProblemLeanProof    = "lean_proof"
	ProblemCodeBug      = "code_bug"
	ProblemArchitecture = "architecture"
	ProblemMathNovel    = "math_novel"
	ProblemInfraDebug   = "infra_debug"
)

// ProblemTypes lists the problem types in a fixed order. The slice is the
// caller's.
func ProblemTypes() []string {
	return []string{ProblemLeanProof, ProblemCodeBug, ProblemArchitecture, ProblemMathNovel, ProblemInfraDebug}
}

// ValidProblemType reports whether t is one of ProblemTypes.
func ValidProblemType(t string) bool {
	for _, p := range ProblemTypes() {
		if t == p {
			return true
		}
	}
	return false
}

// Prior attempt kinds: the trigger protocol requires one of each before a
// panel is called.
const (
	AttemptLocalModel    = "local_model"
	AttemptFrontierModel = "frontier_model"
	AttemptTools         = "tools"
)

// RequiredAttempts lists the prior attempt kinds every request must record.
func RequiredAttempts() []string {
	return []string{AttemptLocalModel, AttemptFrontierModel, AttemptTools}
}

// Break-glass outcomes, in responses and audit records.
const (
	// BreakGlassAnswered: the judge synthesised a valid answer.
	BreakGlassAnswered = "answered"
	// BreakGlassDegraded: the judge's output stayed invalid after a retry
	// (or there was no budget left for one); the answer carries the raw
	// panel responses and Reason.
	BreakGlassDegraded = "degraded"
	// BreakGlassRefused: a gate refused the request (trigger, prior
	// attempts, recursion, cost, session limits); Reason says which.
	BreakGlassRefused = "refused"
	// BreakGlassHeld: the estimate needs a person's approval; not final.
	BreakGlassHeld = "held"
	// BreakGlassApproved: a person approved a held request (audit only).
	BreakGlassApproved = "approved"
	// BreakGlassDenied: a person denied a held request.
	BreakGlassDenied = "denied"
	// BreakGlassFailed: every panel member (or the pass-through endpoint)
	// failed.
	BreakGlassFailed = "failed"
)

// FinalBreakGlassOutcome reports whether a response with outcome o ends its
// request (everything but held).
func FinalBreakGlassOutcome(o string) bool {
	switch o {
	case BreakGlassAnswered, BreakGlassDegraded, BreakGlassRefused, BreakGlassDenied, BreakGlassFailed:
		return true
	}
	return false
}

// Arbiter decision outcomes.
const (
	// ArbiterDecided: the judge chose a candidate with enough confidence;
	// the step takes VoteKey as an arbiter decision (not as votes).
	ArbiterDecided = "decided"
	// ArbiterNeedsHuman: no usable choice or confidence below the
	// threshold; the job pauses for a person.
	ArbiterNeedsHuman = "needs_human"
)

// Limits on break-glass fields.
const (
	// MaxProblemBytes bounds a problem statement.
	MaxProblemBytes = 64 << 10
	// MaxBreakGlassBudgetUSD bounds a break-glass request's budget_usd.
	MaxBreakGlassBudgetUSD = 1e4
)

// PriorAttempt is one approach that already failed on the problem.
type PriorAttempt struct {
	// Kind is local_model, frontier_model or tools.
	Kind string `json:"kind" jsonschema:"enum=local_model,enum=frontier_model,enum=tools"`
	// Note says what was tried and how it failed.
	Note string `json:"note"`
}

// ContextFile is one file the requester sends as context, read from the
// requester's configured root.
type ContextFile struct {
	// Path is the file's path relative to that root, slash-separated.
	Path string `json:"path"`
	// Content is the file's text.
	Content string `json:"content"`
}

// FusionPlugin is the OpenRouter fusion plugin shape: a panel of analysis
// models and the model that judges them.
type FusionPlugin struct {
	// ID is always "fusion".
	ID string `json:"id"`
	// Model is the judge model (optional: the configured judge).
	Model string `json:"model,omitempty"`
	// AnalysisModels is the panel (optional: the type's configured panel).
	AnalysisModels []string `json:"analysis_models,omitempty"`
}

// BreakGlassRequest asks the judge to put a panel of strong models on a
// problem that resisted everything else. Published on the judge subject of
// its tenant; its Nats-Msg-Id is the request id.
type BreakGlassRequest struct {
	Header
	// RequestID names the request; the answer is stored under it.
	RequestID string `json:"request_id"`
	// Tenant owns the request.
	Tenant string `json:"tenant"`
	// Session groups requests for the per-session limits.
	Session string `json:"session"`
	// Requester names the person, agent or role asking (for the audit).
	Requester string `json:"requester,omitempty"`
	// Problem is the statement, starting with "break glass:".
	Problem string `json:"problem"`
	// ProblemType is the classification; detected when omitted.
	ProblemType string `json:"problem_type,omitempty" jsonschema:"enum=lean_proof,enum=code_bug,enum=architecture,enum=math_novel,enum=infra_debug"`
	// PriorAttempts records what already failed: one of each required kind.
	PriorAttempts []PriorAttempt `json:"prior_attempts"`
	// Files are context files; the judge re-checks them for secrets.
	Files []ContextFile `json:"files,omitempty"`
	// ExcludedFiles lists files the requester's own guard withheld (outside
	// its root, credential-like); the judge audits them.
	ExcludedFiles []ExcludedFile `json:"excluded_files,omitempty"`
	// BuildLog is build or test output (optional).
	BuildLog string `json:"build_log,omitempty"`
	// Constraints are the project's operating rules, AGENTS.md style
	// (optional).
	Constraints string `json:"constraints,omitempty"`
	// BudgetUSD caps this call's actual cost; 0 means the judge's default
	// (1.00).
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// Plugins takes the OpenRouter fusion shape: at most one plugin, id
	// "fusion", naming the panel and judge models.
	Plugins []FusionPlugin `json:"plugins,omitempty"`
	// ParentRequestID is set on a request made from inside a panel; the
	// judge refuses those (panels never open panels).
	ParentRequestID string `json:"parent_request_id,omitempty"`
	// SubmittedAt is when the request was sent.
	SubmittedAt time.Time `json:"submitted_at"`
}

// MessageKind implements Message.
func (*BreakGlassRequest) MessageKind() string { return KindBreakGlassRequest }

// Validate implements Message. The trigger and the prior attempts are not
// checked here: the judge refuses requests without them, with a reason.
func (r *BreakGlassRequest) Validate() error {
	const k = KindBreakGlassRequest
	if err := r.Header.check(k); err != nil {
		return err
	}
	if err := checkRequestIDs(k, r.RequestID, r.Tenant, r.Session); err != nil {
		return err
	}
	if strings.HasPrefix(r.RequestID, ArbitrationIDPrefix) {
		return invalid(k, "request_id %q: the prefix %q names arbitration requests", r.RequestID, ArbitrationIDPrefix)
	}
	if strings.TrimSpace(r.Problem) == "" {
		return invalid(k, "problem is empty")
	}
	if len(r.Problem) > MaxProblemBytes {
		return invalid(k, "problem is %d bytes, over the %d-byte limit", len(r.Problem), MaxProblemBytes)
	}
	if r.ProblemType != "" && !ValidProblemType(r.ProblemType) {
		return invalid(k, "problem_type %q is not one of %s", r.ProblemType, strings.Join(ProblemTypes(), ", "))
	}
	for i, a := range r.PriorAttempts {
		switch a.Kind {
		case AttemptLocalModel, AttemptFrontierModel, AttemptTools:
		default:
			return invalid(k, "prior_attempts[%d].kind %q is not one of %s", i, a.Kind, strings.Join(RequiredAttempts(), ", "))
		}
	}
	for i, f := range r.Files {
		if f.Path == "" {
			return invalid(k, "files[%d].path is empty", i)
		}
	}
	if err := nonNegativeFigures(k, figure{"budget_usd", r.BudgetUSD}); err != nil {
		return err
	}
	if r.BudgetUSD > MaxBreakGlassBudgetUSD {
		return invalid(k, "budget_usd %v is over %v", r.BudgetUSD, MaxBreakGlassBudgetUSD)
	}
	if len(r.Plugins) > 1 {
		return invalid(k, "plugins holds %d entries; at most one (fusion)", len(r.Plugins))
	}
	for _, p := range r.Plugins {
		if p.ID != "fusion" {
			return invalid(k, "plugin id %q: only \"fusion\" is supported", p.ID)
		}
	}
	if r.ParentRequestID != "" {
		if err := ValidJobID(r.ParentRequestID); err != nil {
			return invalid(k, "parent_request_id: %v", err)
		}
	}
	return nil
}

func checkRequestIDs(k, requestID, tenant, session string) error {
	if !jobIDRE.MatchString(requestID) {
		return invalid(k, "request_id %q must be 1-64 characters of A-Z, a-z, 0-9, '_' and '-', starting with a letter or digit", requestID)
	}
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	if !jobIDRE.MatchString(session) {
		return invalid(k, "session %q must be 1-64 characters of A-Z, a-z, 0-9, '_' and '-', starting with a letter or digit", session)
	}
	return nil
}

// Solution is the judge's proposed fix.
type Solution struct {
	// Approach describes the fix.
	Approach string `json:"approach"`
	// Confidence is the judge's confidence in it, 0 to 1.
	Confidence float64 `json:"confidence"`
	// FilesToChange lists the paths the fix touches.
	FilesToChange []string `json:"files_to_change"`
	// CodeSnippets maps a path to the code to put there.
	CodeSnippets map[string]string `json:"code_snippets"`
	// VoteKey is the chosen candidate of an arbitration request (never
	// set in a break-glass response).
	VoteKey string `json:"vote_key,omitempty"`
}

// PanelAnalysis is the judge's reading of the panel's answers.
type PanelAnalysis struct {
	// Consensus lists what most members agree on.
	Consensus []string `json:"consensus"`
	// Contradictions lists where members disagree.
	Contradictions []string `json:"contradictions"`
	// PartialCoverage lists parts of the problem only some members
	// addressed.
	PartialCoverage []string `json:"partial_coverage"`
	// UniqueInsights lists points one member alone made.
	UniqueInsights []string `json:"unique_insights"`
	// BlindSpots lists what no member addressed.
	BlindSpots []string `json:"blind_spots"`
}

// BreakGlassCost is a call's cost in US dollars and tokens.
type BreakGlassCost struct {
	// EstimateUSD is the worst case estimated before calling: every model's
	// prompt plus its full output allowance at the configured prices.
	EstimateUSD float64 `json:"estimate_usd"`
	// ActualUSD is what the calls used, from the reported token counts.
	ActualUSD float64 `json:"actual_usd"`
	// BudgetUSD is the call's budget; ActualUSD never exceeds it.
	BudgetUSD float64 `json:"budget_usd"`
	// PromptTokens and CompletionTokens sum every model call.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// MemberResult is one panel member's (or the judge's) call.
type MemberResult struct {
	// Model is the member's model name; Role is panel or judge.
	Model string `json:"model"`
	Role  string `json:"role" jsonschema:"enum=panel,enum=judge"`
	// OK is false when the call failed; Error says why.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// PromptTokens and CompletionTokens are the reported usage, CostUSD its
	// price, LatencyMS the call's wall time.
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CostUSD          float64 `json:"cost_usd"`
	LatencyMS        int64   `json:"latency_ms"`
	// Response is the member's raw answer.
	Response string `json:"response,omitempty"`
}

// ExcludedFile is a context file the judge did not send, and why.
type ExcludedFile struct {
	// Path is the file as named; Reason why it was left out.
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// BreakGlassResponse is the judge's answer to a request, stored in the
// answers bucket under <tenant>.<request id>. A held answer is replaced by
// the final one.
type BreakGlassResponse struct {
	Header
	// RequestID, Tenant and Session are the request's.
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Session   string `json:"session"`
	// Outcome is answered, degraded, refused, held, denied or failed.
	Outcome string `json:"outcome" jsonschema:"enum=answered,enum=degraded,enum=refused,enum=held,enum=denied,enum=failed"`
	// Reason explains every outcome but answered.
	Reason string `json:"reason,omitempty"`
	// ProblemType is the classification; TypeSource says whether the
	// request gave it or the judge detected it.
	ProblemType string `json:"problem_type,omitempty"`
	TypeSource  string `json:"type_source,omitempty" jsonschema:"enum=request,enum=detected"`
	// Mode is panel (the judge fans out itself) or passthrough (a
	// fusion-capable endpoint did).
	Mode string `json:"mode,omitempty" jsonschema:"enum=panel,enum=passthrough"`
	// Panel lists the panel's models, JudgeModel the synthesising model.
	Panel      []string `json:"panel,omitempty"`
	JudgeModel string   `json:"judge_model,omitempty"`
	// Diagnosis is the root cause as the judge sees it.
	Diagnosis string `json:"diagnosis"`
	// Solution is the proposed fix.
	Solution Solution `json:"solution"`
	// Alternatives and Risks list other approaches and caveats.
	Alternatives []string `json:"alternatives"`
	Risks        []string `json:"risks"`
	// PanelAnalysis is the judge's reading of the panel.
	PanelAnalysis PanelAnalysis `json:"panel_analysis"`
	// Cost is the estimate and the actual cost.
	Cost BreakGlassCost `json:"cost"`
	// Members are the individual model calls.
	Members []MemberResult `json:"members,omitempty"`
	// FailedMembers lists panel members that gave no answer.
	FailedMembers []string `json:"failed_members,omitempty"`
	// ExcludedFiles lists context files withheld by the secret guard.
	ExcludedFiles []ExcludedFile `json:"excluded_files,omitempty"`
	// Approver is who approved a held request.
	Approver string `json:"approver,omitempty"`
	// AnsweredAt is when the judge wrote this response.
	AnsweredAt time.Time `json:"answered_at"`
}

// MessageKind implements Message.
func (*BreakGlassResponse) MessageKind() string { return KindBreakGlassResponse }

// Validate implements Message.
func (r *BreakGlassResponse) Validate() error {
	const k = KindBreakGlassResponse
	if err := r.Header.check(k); err != nil {
		return err
	}
	if err := checkRequestIDs(k, r.RequestID, r.Tenant, r.Session); err != nil {
		return err
	}
	if err := checkOutcome(k, r.Outcome, r.Reason, false); err != nil {
		return err
	}
	if r.Outcome == BreakGlassAnswered && strings.TrimSpace(r.Diagnosis) == "" {
		return invalid(k, "an answered response needs a diagnosis")
	}
	if r.ProblemType != "" && !ValidProblemType(r.ProblemType) {
		return invalid(k, "problem_type %q is not a problem type", r.ProblemType)
	}
	if !inRange(r.Solution.Confidence, 0, 1) {
		return invalid(k, "solution.confidence must be between 0 and 1, got %v", r.Solution.Confidence)
	}
	return checkCost(k, r.Cost, r.Members)
}

// checkCost checks a response's cost and its model calls: no figure
// negative.
func checkCost(k string, c BreakGlassCost, members []MemberResult) error {
	if err := nonNegativeFigures(k, figure{"cost.estimate_usd", c.EstimateUSD}, figure{"cost.actual_usd", c.ActualUSD}, figure{"cost.budget_usd", c.BudgetUSD}); err != nil {
		return err
	}
	if err := nonNegative(k, count{"cost.prompt_tokens", c.PromptTokens}, count{"cost.completion_tokens", c.CompletionTokens}); err != nil {
		return err
	}
	for i, m := range members {
		if err := nonNegative(k, count{"members.prompt_tokens", m.PromptTokens}, count{"members.completion_tokens", m.CompletionTokens}, count{"members.latency_ms", m.LatencyMS}); err != nil {
			return invalid(k, "members[%d]: %v", i, err)
		}
		if err := nonNegativeFigures(k, figure{"members.cost_usd", m.CostUSD}); err != nil {
			return invalid(k, "members[%d]: %v", i, err)
		}
	}
	return nil
}

// checkOutcome checks a break-glass outcome and that it has a reason when
// it needs one. audit allows approved, an audit-only event.
func checkOutcome(k, outcome, reason string, audit bool) error {
	switch outcome {
	case BreakGlassAnswered, BreakGlassHeld:
	case BreakGlassApproved:
		if !audit {
			return invalid(k, "outcome approved is for audit records only")
		}
	case BreakGlassDegraded, BreakGlassRefused, BreakGlassDenied, BreakGlassFailed:
		if strings.TrimSpace(reason) == "" {
			return invalid(k, "a %s outcome needs a reason", outcome)
		}
	default:
		return invalid(k, "unknown outcome %q", outcome)
	}
	return nil
}

// BreakGlassAudit is one entry of the judge's audit trail: every request
// that reached the judge, every refusal, hold, approval, denial and answer.
type BreakGlassAudit struct {
	Header
	// RequestID, Tenant, Session and Requester are the request's.
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Session   string `json:"session"`
	Requester string `json:"requester,omitempty"`
	// RequestKind is the audited request's kind: break_glass_request
	// (also when empty, as older records are) or arbitration_request
	// (whose session is the job id).
	RequestKind string `json:"request_kind,omitempty" jsonschema:"enum=,enum=break_glass_request,enum=arbitration_request"`
	// Outcome is what happened: answered, degraded, refused, held,
	// approved, denied or failed.
	Outcome string `json:"outcome" jsonschema:"enum=answered,enum=degraded,enum=refused,enum=held,enum=approved,enum=denied,enum=failed"`
	// Reason explains the outcome.
	Reason string `json:"reason,omitempty"`
	// Problem is the statement with key-like strings redacted, cut to 2000
	// bytes; for an arbitration, a line naming the step.
	Problem string `json:"problem"`
	// ProblemType is the classification.
	ProblemType string `json:"problem_type,omitempty"`
	// Panel and JudgeModel are the models used.
	Panel      []string `json:"panel,omitempty"`
	JudgeModel string   `json:"judge_model,omitempty"`
	// EstimateUSD and ActualUSD are the estimated and actual cost.
	EstimateUSD float64 `json:"estimate_usd"`
	ActualUSD   float64 `json:"actual_usd"`
	// Confidence is the answer's confidence (answered and degraded).
	Confidence float64 `json:"confidence,omitempty"`
	// Diagnosis is the answer's diagnosis, cut to 2000 bytes, so later
	// requests in the session see what was tried.
	Diagnosis string `json:"diagnosis,omitempty"`
	// Approver is who approved or denied (the person, as they gave their
	// name); ApproverIdentity is the identity they did it as, the one the
	// approval's subject proves.
	Approver         string `json:"approver,omitempty"`
	ApproverIdentity string `json:"approver_identity,omitempty"`
	// FailedMembers and ExcludedFiles are the response's.
	FailedMembers []string       `json:"failed_members,omitempty"`
	ExcludedFiles []ExcludedFile `json:"excluded_files,omitempty"`
	// At is when the event happened.
	At time.Time `json:"at"`
}

// MessageKind implements Message.
func (*BreakGlassAudit) MessageKind() string { return KindBreakGlassAudit }

// Validate implements Message.
func (a *BreakGlassAudit) Validate() error {
	const k = KindBreakGlassAudit
	if err := a.Header.check(k); err != nil {
		return err
	}
	if err := checkRequestIDs(k, a.RequestID, a.Tenant, a.Session); err != nil {
		return err
	}
	switch a.RequestKind {
	case "", KindBreakGlassRequest, KindArbitrationRequest:
	default:
		return invalid(k, "request_kind %q is not %s or %s", a.RequestKind, KindBreakGlassRequest, KindArbitrationRequest)
	}
	if err := checkOutcome(k, a.Outcome, a.Reason, true); err != nil {
		return err
	}
	if err := nonNegativeFigures(k, figure{"estimate_usd", a.EstimateUSD}, figure{"actual_usd", a.ActualUSD}, figure{"confidence", a.Confidence}); err != nil {
		return err
	}
	if a.Confidence > 1 {
		return invalid(k, "confidence must be <= 1, got %v", a.Confidence)
	}
	return nil
}

// EscalationPolicy is a job's ladder for a voting step that exhausts its
// max samples without consensus: first one stronger model votes, then, only
// when Panel is set, the judge's panel arbitrates. Not a message on its own;
// the coordinator reads it from the job.
type EscalationPolicy struct {
	// StrongerModel is the model that votes once the job's own model is
	// exhausted ("" skips that rung).
	StrongerModel string `json:"stronger_model,omitempty"`
	// StrongerSamples caps the stronger model's samples. Default 10.
	StrongerSamples int `json:"stronger_samples,omitempty"`
	// StrongerPricing is the job's own claim of the stronger model's
	// price (optional; without it, the job's pricing), used as Pricing is:
	// only where the fleet has no price table, and only for the report's
	// unverified_cost_usd. The fleet prices the stronger model's samples
	// with its own table.
	StrongerPricing *Pricing `json:"stronger_pricing,omitempty"`
	// Panel opts the job in to the break-glass panel as the last rung.
	Panel bool `json:"panel,omitempty"`
	// MinConfidence is the least judge confidence that decides the step;
	// below it the job pauses for a person. Default 0.7.
	MinConfidence float64 `json:"min_confidence,omitempty"`
}

// Escalation policy defaults.
const (
	DefaultStrongerSamples = 10
	DefaultMinConfidence   = 0.7
)

// WithDefaults returns p with its zero fields at their defaults.
func (p EscalationPolicy) WithDefaults() EscalationPolicy {
	if p.StrongerSamples == 0 {
		p.StrongerSamples = DefaultStrongerSamples
	}
	if p.MinConfidence == 0 {
		p.MinConfidence = DefaultMinConfidence
	}
	return p
}
