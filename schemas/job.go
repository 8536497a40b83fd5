package schemas

import (
	"bytes"
	"encoding/json"
	"math"
	"time"
)

// Job spec defaults and limits.
const (
	DefaultMaxSamplesPerStep = 100
	DefaultMaxOutputTokens   = 750
	DefaultTemperatureRest   = 0.1
	DefaultSampleTimeoutMS   = 60_000
	DefaultTarget            = 0.95
	// DefaultP is the chance a valid sample is right that k is planned for
	// when a submitter leaves k out and gives no p_estimate or calibration.
	DefaultP = 0.95
	// MaxKBasis bounds a job's k_basis.
	MaxKBasis           = 512
	MaxK                = 1000
	MaxSpeculationDepth = 64
	MaxSamplesLimit     = 100_000

	// MaxOutputTokensLimit bounds a job's max_output_tokens.
	MaxOutputTokensLimit = 1_000_000
	maxTokensEstimate    = 10_000_000 // a call's usage, as the model client bounds it
	// MaxTemperature bounds every sampling temperature.
	MaxTemperature = 2
	// MinSampleTimeoutMS is the shortest sample_timeout_ms a job may ask.
	MinSampleTimeoutMS = 10
	// MaxPriceUSDPerMTok bounds a price per million tokens.
	MaxPriceUSDPerMTok = 1e6
)

// Pricing is a model's price in US dollars per million tokens.
type Pricing struct {
	// InputUSDPerMTok prices prompt tokens, OutputUSDPerMTok completion
	// tokens.
	InputUSDPerMTok  float64 `json:"input_usd_per_mtok"`
	OutputUSDPerMTok float64 `json:"output_usd_per_mtok"`
	// CachedInputUSDPerMTok prices prompt tokens the provider served from
	// its cache (0: at InputUSDPerMTok).
	CachedInputUSDPerMTok float64 `json:"cached_input_usd_per_mtok,omitempty"`
}

// JobSpec is a submitted job. Submitters fill every field; ApplyDefaults
// fills the optional ones.
type JobSpec struct {
	Header
	// JobID names the job within its tenant.
	JobID string `json:"job_id"`
	// Tenant owns the job; "default" when empty.
	Tenant string `json:"tenant"`
	// Task is the registry name, e.g. "hanoi"; Params configure it: a JSON
	// object only the task can judge.
	Task   string          `json:"task"`
	Params json.RawMessage `json:"params"`
	// ParamsRef names params stored in the fleet's inputs store
	// (InputRef) when they are larger than InlineParamsMax: Params is
	// then empty. Submit sets it.
	ParamsRef string `json:"params_ref,omitempty"`
	// TaskVersion and TaskHash pin a registered task spec (maker task
	// register): its version and content hash, filled in at submit; empty
	// for a built-in task.
	TaskVersion string `json:"task_version,omitempty"`
	TaskHash    string `json:"task_hash,omitempty"`
	// StepLimit stops the job after this many decided steps, a trial run
	// (maker task test); 0 leaves the task's own most steps.
	StepLimit int64 `json:"step_limit,omitempty"`
	// K is the voting margin: a step is decided when one candidate leads
	// every other by K valid votes.
	K int `json:"k"`
	// KBasis says how the fleet chose K for a submitter that left it out
	// (jobs.PlanK: the p, steps and target it planned for); empty when the
	// submitter gave K. It is shown, never used.
	KBasis string `json:"k_basis,omitempty"`
	// MaxSamplesPerStep caps the samples (valid or red-flagged) one step may
	// draw; a step that reaches it without a decision ends the job with
	// status no_consensus. Default 100.
	MaxSamplesPerStep int `json:"max_samples_per_step"`
	// MaxOutputTokens is the red-flag limit on a reply. Default 750.
	MaxOutputTokens int `json:"max_output_tokens"`
	// Seed makes sampling reproducible: each request's seed derives from it.
	Seed int64 `json:"seed"`
	// TemperatureFirst is used for a step's first sample (default 0),
	// TemperatureRest for every other (default 0.1 when omitted).
	TemperatureFirst float64  `json:"temperature_first"`
	TemperatureRest  *float64 `json:"temperature_rest,omitempty"`
	// SpeculationDepth lets the job sample up to this many steps beyond the
	// open one before they are reached, each from a guess of the step
	// before's winner (its leader once it leads, else the task's reference
	// answer); a guess that loses throws its samples away. Decisions are
	// unchanged: a speculative step's samples count only when its guess
	// became the real chain's state. 0 (the default) turns it off; at most
	// MaxSpeculationDepth.
	SpeculationDepth int `json:"speculation_depth,omitempty"`
	// SpeculationMaxWaste bounds the samples lost speculation may throw
	// away, as a share of the job's samples: above it the job stops
	// speculating until the share falls again. Default 0.1; in (0, 1].
	SpeculationMaxWaste float64 `json:"speculation_max_waste,omitempty"`
	// SampleTimeoutMS: a sample with no result after this long is re-sampled
	// under a new sample id. Default 60000.
	SampleTimeoutMS int64 `json:"sample_timeout_ms"`
	// PEstimate is the expected chance a valid sample is right, used for the
	// report's theory figures (optional, in (0.5, 1)).
	PEstimate float64 `json:"p_estimate,omitempty"`
	// ValidFraction is the expected share of samples that survive
	// red-flagging (optional, in (0, 1]; 1 when omitted).
	ValidFraction float64 `json:"valid_fraction,omitempty"`
	// PromptTokensEstimate and CompletionTokensEstimate are a call's
	// expected usage (optional, >= 0; a model's calibration, maker
	// calibrate): the forecast prices a sample with them rather than with
	// the first prompt's bytes and a share of MaxOutputTokens.
	PromptTokensEstimate     float64 `json:"prompt_tokens_estimate,omitempty"`
	CompletionTokensEstimate float64 `json:"completion_tokens_estimate,omitempty"`
	// ReliabilityTarget asks for adaptive k (optional, in (0, 1)): the
	// wanted chance that every step is right. Each step's margin is then
	// the smallest that keeps P(all steps right) >= the target at the
	// lower confidence bound of p estimated from the job's own votes so
	// far (PEstimate as a weak prior), the steps left and the margins
	// already used (docs/statistics.md); K is the margin while the votes
	// cannot yet bound p above 0.5. Without it every step uses K.
	ReliabilityTarget float64 `json:"reliability_target,omitempty"`
	// KFloor is the smallest margin adaptive k may choose (needs
	// ReliabilityTarget; default DefaultKFloor, 2).
	KFloor int `json:"k_floor,omitempty"`
	// Decorrelate says what the job does with the rest of a step whose
	// samples run far past what p predicts (a correlated step): on draws
	// them with a paraphrased prompt (SampleRequest.PromptVariant), at
	// DecorrelateTemperature and cycling through Models; off only counts
	// such steps. auto (the default) is on with a ReliabilityTarget, off
	// without.
	Decorrelate string `json:"decorrelate,omitempty" jsonschema:"enum=,enum=auto,enum=on,enum=off"`
	// DecorrelateTemperature is the temperature of a correlated step's
	// decorrelated samples (optional, in (0, 2]; 0 keeps the rest
	// temperature).
	DecorrelateTemperature float64 `json:"decorrelate_temperature,omitempty"`
	// Models is the job's model mix for decorrelation (optional, at most
	// MaxJobModels): a correlated step's decorrelated samples ask them in
	// turn instead of the voters' own model. Voters must allow them
	// (their model policy).
	Models []string `json:"models,omitempty"`
	// Pricing is the job's own claim of what its model's tokens cost
	// (optional, kept for compatibility). The fleet prices every sample
	// with its own price table (ModelPrice), never with this: it counts
	// only on a fleet without a price table, for a job under no budget and
	// no spend limit, and then only as the report's unverified_cost_usd,
	// against nothing.
	Pricing *Pricing `json:"pricing,omitempty"`
	// Escalation is what a step that spends MaxSamplesPerStep without a
	// decision does next (optional; without it the job ends no_consensus):
	// a stronger model votes, then, if Panel is set, the judge's panel
	// arbitrates.
	Escalation *EscalationPolicy `json:"escalation,omitempty"`
	// BudgetUSD caps what the job may spend, in US dollars (optional; 0:
	// no cap of its own). Each wave reserves its expected cost before it is
	// published; a job that would go over pauses as budget_exhausted.
	// Needs the fleet's price table to price every model the job may ask
	// (a job it does not is refused at submit, or paused).
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// Priority orders a tenant's own jobs: higher runs first, from 0 (the
	// default) to 9.
	Priority int `json:"priority,omitempty"`
	// BatchID and BatchLine name the batch and the input line (from 1) a
	// job was submitted from; empty for a job submitted alone.
	BatchID   string `json:"batch_id,omitempty"`
	BatchLine int64  `json:"batch_line,omitempty"`
	// Webhook is a URL the job's end is POSTed to, signed (optional;
	// ValidWebhookURL; docs/api.md, "Webhooks").
	Webhook string `json:"webhook,omitempty"`
	// SubmittedAt is when the job was submitted.
	SubmittedAt time.Time `json:"submitted_at"`
}

// MessageKind implements Message.
func (*JobSpec) MessageKind() string { return KindJobSpec }

// ApplyDefaults fills the optional fields that are unset.
func (s *JobSpec) ApplyDefaults() {
	if s.Version == 0 && s.Kind == "" {
		s.Header = NewHeader(KindJobSpec)
	}
	if s.Tenant == "" {
		s.Tenant = DefaultTenant
	}
	if s.MaxSamplesPerStep == 0 {
		s.MaxSamplesPerStep = DefaultMaxSamplesPerStep
	}
	if s.MaxOutputTokens == 0 {
		s.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if s.TemperatureRest == nil {
		t := DefaultTemperatureRest
		s.TemperatureRest = &t
	}
	if s.SampleTimeoutMS == 0 {
		s.SampleTimeoutMS = DefaultSampleTimeoutMS
	}
	if s.ValidFraction == 0 {
		s.ValidFraction = 1
	}
}

// Rest returns the temperature for samples after the first.
func (s *JobSpec) Rest() float64 {
	if s.TemperatureRest == nil {
		return DefaultTemperatureRest
	}
	return *s.TemperatureRest
}

// Validate implements Message. It checks everything but the task params,
// which only the task can judge.
func (s *JobSpec) Validate() error {
	const k = KindJobSpec
	if err := s.Header.checkJob(k, s.Tenant, s.JobID); err != nil {
		return err
	}
	if s.Task == "" {
		return invalid(k, "task is missing: name a built-in (hanoi) or a registered task spec")
	}
	if !taskRE.MatchString(s.Task) {
		return invalid(k, "task %q is not a task name", s.Task)
	}
	if s.ParamsRef == "" && (len(bytes.TrimSpace(s.Params)) == 0 || string(bytes.TrimSpace(s.Params)) == "null") {
		return invalid(k, "params are missing: a JSON object the task reads (e.g. {\"disks\": 10} for hanoi)")
	}
	if err := checkParams(k, s.Params, s.ParamsRef, true); err != nil {
		return err
	}
	if err := checkTaskPin(k, s.TaskVersion, s.TaskHash); err != nil {
		return err
	}
	if s.StepLimit < 0 {
		return invalid(k, "step_limit must be >= 0, got %d", s.StepLimit)
	}
	if s.K == 0 {
		return invalid(k, "k is missing: give the voting margin, or submit through a path that plans it (the CLI, the HTTP API)")
	}
	if s.K < 1 || s.K > MaxK {
		return invalid(k, "k must be between 1 and %d, got %d", MaxK, s.K)
	}
	if len(s.KBasis) > MaxKBasis {
		return invalid(k, "k_basis is %d bytes, at most %d", len(s.KBasis), MaxKBasis)
	}
	if s.MaxSamplesPerStep < s.K || s.MaxSamplesPerStep > MaxSamplesLimit {
		return invalid(k, "max_samples_per_step must be between k (%d) and %d, got %d", s.K, MaxSamplesLimit, s.MaxSamplesPerStep)
	}
	if s.MaxOutputTokens < 1 || s.MaxOutputTokens > MaxOutputTokensLimit {
		return invalid(k, "max_output_tokens must be between 1 and %d, got %d", MaxOutputTokensLimit, s.MaxOutputTokens)
	}
	if !inRange(s.TemperatureFirst, 0, MaxTemperature) {
		return invalid(k, "temperature_first must be between 0 and %d, got %v", MaxTemperature, s.TemperatureFirst)
	}
	if !inRange(s.Rest(), 0, MaxTemperature) {
		return invalid(k, "temperature_rest must be between 0 and %d, got %v", MaxTemperature, s.Rest())
	}
	if s.SampleTimeoutMS < MinSampleTimeoutMS {
		return invalid(k, "sample_timeout_ms must be >= %d, got %d", MinSampleTimeoutMS, s.SampleTimeoutMS)
	}
	if err := s.checkSpeculation(k); err != nil {
		return err
	}
	if s.PEstimate != 0 && !(s.PEstimate > 0.5 && s.PEstimate < 1) {
		return invalid(k, "p_estimate must be in (0.5, 1), got %v", s.PEstimate)
	}
	// 0 is "omitted", as the omitempty tag writes it; ApplyDefaults makes it 1.
	if s.ValidFraction != 0 && !(s.ValidFraction > 0 && s.ValidFraction <= 1) {
		return invalid(k, "valid_fraction must be in (0, 1], got %v", s.ValidFraction)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"prompt_tokens_estimate", s.PromptTokensEstimate}, {"completion_tokens_estimate", s.CompletionTokensEstimate}} {
		if !(t.v >= 0 && t.v <= maxTokensEstimate) { // NaN too
			return invalid(k, "%s must be between 0 and %d, got %v", t.name, maxTokensEstimate, t.v)
		}
	}
	if e := s.Escalation; e != nil {
		if len(e.StrongerModel) > maxModelName {
			return invalid(k, "escalation.stronger_model longer than %d bytes", maxModelName)
		}
		if n := e.WithDefaults().StrongerSamples; e.StrongerSamples < 0 || n > MaxSamplesLimit || (e.StrongerModel != "" && n < s.K) {
			return invalid(k, "escalation.stronger_samples must be between k (%d) and %d, got %d", s.K, MaxSamplesLimit, n)
		}
		if !inRange(e.MinConfidence, 0, 1) {
			return invalid(k, "escalation.min_confidence must be in [0, 1], got %v", e.MinConfidence)
		}
		if e.StrongerModel == "" && !e.Panel {
			return invalid(k, "escalation names no stronger_model and no panel: leave it out instead")
		}
		if err := e.StrongerPricing.check(k, "escalation.stronger_pricing"); err != nil {
			return err
		}
		if e.StrongerPricing != nil && e.StrongerModel == "" {
			return invalid(k, "escalation.stronger_pricing prices no stronger_model")
		}
	}
	if !inRange(s.BudgetUSD, 0, MaxBudgetUSD) {
		return invalid(k, "budget_usd must be between 0 and %g, got %v", float64(MaxBudgetUSD), s.BudgetUSD)
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		return invalid(k, "priority must be between %d and %d, got %d", MinPriority, MaxPriority, s.Priority)
	}
	if (s.BatchID == "") != (s.BatchLine == 0) {
		return invalid(k, "batch_id and batch_line go together")
	}
	if s.BatchID != "" && (len(s.BatchID) > MaxBatchIDLen || !jobIDRE.MatchString(s.BatchID)) {
		return invalid(k, "batch_id %q is not an id", s.BatchID)
	}
	if s.BatchLine < 0 {
		return invalid(k, "batch_line must be >= 1, got %d", s.BatchLine)
	}
	if err := s.checkReliability(k); err != nil {
		return err
	}
	if s.Webhook != "" {
		if err := ValidWebhookURL(s.Webhook); err != nil {
			return err
		}
	}
	return s.Pricing.check(k, "pricing")
}

// Budget and priority bounds.
const (
	// MaxBudgetUSD bounds a job's budget_usd.
	MaxBudgetUSD = 1_000_000
	// MaxBatchIDLen bounds a batch id, so that its jobs' ids
	// (<batch_id>-<line>) are job ids.
	MaxBatchIDLen = 40
	// MinPriority and MaxPriority bound a job's priority.
	MinPriority, MaxPriority = 0, 9
)

// check validates a price (nil: none) named field in a message of kind k.
func (p *Pricing) check(k, field string) error {
	if p == nil {
		return nil
	}
	if !inRange(p.InputUSDPerMTok, 0, MaxPriceUSDPerMTok) {
		return invalid(k, "%s.input_usd_per_mtok must be between 0 and %g, got %v", field, MaxPriceUSDPerMTok, p.InputUSDPerMTok)
	}
	if !inRange(p.OutputUSDPerMTok, 0, MaxPriceUSDPerMTok) {
		return invalid(k, "%s.output_usd_per_mtok must be between 0 and %g, got %v", field, MaxPriceUSDPerMTok, p.OutputUSDPerMTok)
	}
	return nil
}

// Cost is the price of the given token counts in US dollars (0 for nil).
func (p *Pricing) Cost(prompt, completion int64) float64 {
	if p == nil {
		return 0
	}
	return (float64(prompt)*p.InputUSDPerMTok + float64(completion)*p.OutputUSDPerMTok) / 1e6
}

func inRange(v, lo, hi float64) bool {
	return !math.IsNaN(v) && v >= lo && v <= hi
}

// isObject reports whether raw is one JSON object.
func isObject(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

// Job states.
const (
	StateQueued      = "queued"
	StateRunning     = "running"
	StateSolved      = "solved"
	StateUnsolved    = "unsolved"
	StateNoConsensus = "no_consensus"
	StateFailed      = "failed"
	// StatePaused: stopped at a step boundary until resumed.
	StatePaused = "paused"
	// StateCancelled: stopped for good at a step boundary by a person.
	StateCancelled = "cancelled"
	// StateBudgetExhausted: paused at a step boundary because the next
	// wave would go over the job's or the tenant's budget; resumed like a
	// paused job once the budget is raised.
	StateBudgetExhausted = "budget_exhausted"
)

// Terminal reports whether a job in state s has ended.
func Terminal(s string) bool {
	switch s {
	case StateSolved, StateUnsolved, StateNoConsensus, StateFailed, StateCancelled:
		return true
	}
	return false
}

// JobStatus is a running job's progress, updated a few times a second.
type JobStatus struct {
	Header
	// Tenant and JobID name the job.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// State is queued, running, paused, solved, unsolved, no_consensus,
	// failed or cancelled.
	State string `json:"state" jsonschema:"enum=queued,enum=running,enum=paused,enum=budget_exhausted,enum=solved,enum=unsolved,enum=no_consensus,enum=failed,enum=cancelled"`
	// Steps decided so far, out of TotalSteps at most.
	Steps      int64 `json:"steps"`
	TotalSteps int64 `json:"total_steps"`
	// Progress is the share of the task done, in [0, 1]: the task's own
	// measure of the current state when it has one, else Steps/TotalSteps.
	Progress float64 `json:"progress" jsonschema:"minimum=0,maximum=1"`
	// Samples, Votes, RedFlagged and Errors so far, counted as in the job
	// report.
	Samples    int64 `json:"samples"`
	Votes      int64 `json:"votes"`
	RedFlagged int64 `json:"red_flagged"`
	Errors     int64 `json:"errors"`
	// Coordinator names the process running the job.
	Coordinator string `json:"coordinator,omitempty"`
	// Rung is set while the open step is escalated: the stronger model
	// votes on it, or the judge's panel arbitrates it.
	Rung string `json:"rung,omitempty" jsonschema:"enum=,enum=stronger_model,enum=panel"`
	// Control is set while a pause or cancel is asked and not yet obeyed
	// (at the next step boundary).
	Control string `json:"control,omitempty" jsonschema:"enum=,enum=pause,enum=cancel"`
	// SpentUSD is what the job's counted samples cost so far; ReservedUSD
	// what its samples in flight may still cost (budgets reserve it).
	SpentUSD    float64 `json:"spent_usd,omitempty"`
	ReservedUSD float64 `json:"reserved_usd,omitempty"`
	// FinishCostUSD is set on a budget_exhausted job: what finishing it is
	// expected to cost from here.
	FinishCostUSD float64 `json:"finish_cost_usd,omitempty"`
	// Reason says why a budget_exhausted job stopped: the budget that
	// cannot pay for its next samples, or the model the fleet's price
	// table does not price; or why a running job waits: its open step's
	// samples unanswered past the sample timeout (no voter serves them, or
	// the provider refuses the voters), and since when; or, once a job
	// has ended, why, as its report says.
	Reason string `json:"reason,omitempty"`
	// Waiting is set while a running job waits on the fleet, not on
	// itself: why, and since when. It clears by itself at the next answer.
	Waiting *JobWaiting `json:"waiting,omitempty"`
	// UpdatedAt is when these figures were taken.
	UpdatedAt time.Time `json:"updated_at"`
}

// Reasons a running job waits (JobWaiting.Reason).
const (
	// WaitProviderUnavailable: voters hand the open step's samples back
	// unanswered because the provider does not serve the model to them
	// (the key or the model refused, every deployment of it out).
	WaitProviderUnavailable = "provider_unavailable"
	// WaitUnanswered: the open step's samples go unanswered past the
	// sample timeout with no word from any voter (none running or ready?).
	WaitUnanswered = "unanswered"
	// WaitTaskRefused: voters refuse the open step's requests because
	// they cannot run them (the task, its params or the state: params no
	// longer in the inputs store, say), and dead-letter them.
	WaitTaskRefused = "task_refused"
)

// JobWaiting is why a running job waits on the fleet.
type JobWaiting struct {
	// Reason is provider_unavailable, task_refused or unanswered.
	Reason string `json:"reason" jsonschema:"enum=provider_unavailable,enum=task_refused,enum=unanswered"`
	// Model is the model that could not be served, as the voter names it,
	// Error the provider's last answer as a voter saw it
	// (provider_unavailable), or why a voter cannot run the request
	// (task_refused).
	Model string `json:"model,omitempty"`
	Error string `json:"error,omitempty"`
	// Since is when the wait began: the first sample unanswered past the
	// sample timeout, or the first notice of an unserved sample.
	Since time.Time `json:"since"`
}

// MessageKind implements Message.
func (*JobStatus) MessageKind() string { return KindJobStatus }

// Validate implements Message.
func (s *JobStatus) Validate() error {
	if err := s.Header.checkJob(KindJobStatus, s.Tenant, s.JobID); err != nil {
		return err
	}
	if !knownState(s.State) {
		return invalid(KindJobStatus, "unknown state %q", s.State)
	}
	if !inRange(s.Progress, 0, 1) {
		return invalid(KindJobStatus, "progress %v outside [0, 1]", s.Progress)
	}
	if s.Rung != "" && s.Rung != RungStrongerModel && s.Rung != RungPanel {
		return invalid(KindJobStatus, "rung is %s or %s, got %q", RungStrongerModel, RungPanel, s.Rung)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"spent_usd", s.SpentUSD}, {"reserved_usd", s.ReservedUSD}, {"finish_cost_usd", s.FinishCostUSD}} {
		if !inRange(f.v, 0, math.MaxFloat64) {
			return invalid(KindJobStatus, "%s must be >= 0, got %v", f.name, f.v)
		}
	}
	return nonNegative(KindJobStatus,
		count{"steps", s.Steps}, count{"total_steps", s.TotalSteps}, count{"samples", s.Samples},
		count{"votes", s.Votes}, count{"red_flagged", s.RedFlagged}, count{"errors", s.Errors})
}

// NoConsensus describes the step that ended a job without a decision.
type NoConsensus struct {
	// Step is the undecided step, Samples the samples it drew and Tally its
	// candidates, most votes first.
	Step    int64        `json:"step"`
	Samples int          `json:"samples"`
	Tally   []TallyEntry `json:"tally"`
	// Rung is the ladder rung that drew Samples and Tally (own_model, or
	// stronger_model for an escalated step); Prior the rungs below it.
	Rung  string      `json:"rung,omitempty" jsonschema:"enum=,enum=own_model,enum=stronger_model"`
	Prior []RungTally `json:"prior,omitempty"`
}

// JobReport is a finished job's report.
type JobReport struct {
	Header
	// Tenant and JobID name the job; Task and Params are the job's.
	Tenant string          `json:"tenant"`
	JobID  string          `json:"job_id"`
	Task   string          `json:"task"`
	Params json.RawMessage `json:"params"`
	// ParamsRef names the job's params in the inputs store when they
	// travelled by reference (JobSpec.ParamsRef); Params is then empty.
	ParamsRef string `json:"params_ref,omitempty"`
	// TaskVersion and TaskHash name the registered task spec the job ran
	// (empty for a built-in task).
	TaskVersion string `json:"task_version,omitempty"`
	TaskHash    string `json:"task_hash,omitempty"`
	// FinalState is the state the job ended at, in the task's encoding
	// (canonical JSON for a spec task): where a task's result is (a
	// product's digits, a ledger's closing balances, every record's
	// label). Empty when the job failed before its first step.
	FinalState json.RawMessage `json:"final_state,omitempty"`
	// Result is the task's answer read from FinalState by its spec's
	// result expression (multiply's product as a decimal string), for a
	// solved job of a spec that has one; at most MaxStateBytes.
	Result json.RawMessage `json:"result,omitempty"`
	// State is solved, unsolved, no_consensus, failed or cancelled; Solved
	// is true exactly when the task reached its goal and the verifier (if
	// any) found no wrong step.
	State  string `json:"state" jsonschema:"enum=solved,enum=unsolved,enum=no_consensus,enum=failed,enum=cancelled"`
	Solved bool   `json:"solved"`
	// Reason explains a state other than solved.
	Reason string `json:"reason,omitempty"`
	// K is the job's voting margin (with a reliability target, the one it
	// started from; Receipt.KSchedule has every step's).
	K int `json:"k"`
	// TotalSteps bounds the steps the task can take.
	TotalSteps int64 `json:"total_steps"`
	// Figures are the job's counts: steps, errors, samples, votes, red
	// flags, wasted samples, tokens, escalations.
	Figures
	// WastedSamples counts published samples that took no part in a step:
	// SkippedSamples + CancelledSamples + LateSamples + DuplicateResults +
	// SpeculativeWasted.
	WastedSamples int64 `json:"wasted_samples"`
	// Timing: WallSeconds from the job's first start to its finish (across
	// owners), StepsPerSecond decided steps per second of it.
	WallSeconds    float64 `json:"wall_seconds"`
	StepsPerSecond float64 `json:"steps_per_second"`
	// Per-step figures against MAKER theory: SamplesPerStep and VotesPerStep
	// as measured, ExpectedSamplesPerStep and ExpectedVotesPerStep in theory
	// (which needs p_estimate).
	SamplesPerStep         float64 `json:"samples_per_step"`
	VotesPerStep           float64 `json:"votes_per_step"`
	ExpectedSamplesPerStep float64 `json:"expected_samples_per_step"`
	ExpectedVotesPerStep   float64 `json:"expected_votes_per_step"`
	// PEstimate is the p used for theory.
	PEstimate float64 `json:"p_estimate"`
	// TraceSHA256 is the sha256 of the decided vote keys in step order, one
	// per line ("\n"-terminated).
	TraceSHA256 string `json:"trace_sha256"`
	// CostUSD is the job's cost at the fleet's prices: each answer's
	// tokens at the fleet's price of the model its request named
	// (SampleCostNanoUSD), plus ArbiterCostUSD. What budgets and the
	// tenant's spend for the day counted. Tokens the fleet does not price
	// count nothing here.
	CostUSD float64 `json:"cost_usd"`
	// UnverifiedCostUSD is what the answers the fleet did not price cost
	// at the job's own pricing (UnverifiedCostNanoUSD): on a fleet without
	// a price table only. The job's own claim, never counted against a
	// budget or quota.
	UnverifiedCostUSD float64 `json:"unverified_cost_usd,omitempty"`
	// NoConsensus is set when State is no_consensus.
	NoConsensus *NoConsensus `json:"no_consensus,omitempty"`
	// Receipt is the job's reliability receipt: p estimated from its votes
	// with its interval, the k schedule and the bound on P(all steps
	// right) it achieved (absent from a job that never ran).
	Receipt *Receipt `json:"receipt,omitempty"`
	// StartedAt and FinishedAt bound the run.
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// MessageKind implements Message.
func (*JobReport) MessageKind() string { return KindJobReport }

// Validate implements Message.
func (r *JobReport) Validate() error {
	const k = KindJobReport
	if err := r.Header.checkJob(k, r.Tenant, r.JobID); err != nil {
		return err
	}
	if !Terminal(r.State) {
		return invalid(k, "state %q is not a final state", r.State)
	}
	if r.Solved != (r.State == StateSolved) {
		return invalid(k, "solved must be true exactly when state is solved")
	}
	if r.State == StateNoConsensus && r.NoConsensus == nil {
		return invalid(k, "a no_consensus report names the step")
	}
	if !taskRE.MatchString(r.Task) {
		return invalid(k, "task %q is not a task name", r.Task)
	}
	if err := checkTaskPin(k, r.TaskVersion, r.TaskHash); err != nil {
		return err
	}
	// Params are the job's (nil is written as null), or its reference.
	if err := checkParams(k, r.Params, r.ParamsRef, false); err != nil {
		return err
	}
	if len(r.Result) > 0 && (len(r.Result) > MaxStateBytes || !json.Valid(r.Result)) {
		return invalid(k, "result must be JSON of at most %d bytes", MaxStateBytes)
	}
	if r.K < 1 || r.K > MaxK {
		return invalid(k, "k must be between 1 and %d, got %d", MaxK, r.K)
	}
	if err := nonNegative(k, count{"total_steps", r.TotalSteps}, count{"wasted_samples", r.WastedSamples}); err != nil {
		return err
	}
	if err := r.Figures.check(k, ""); err != nil {
		return err
	}
	if r.StrongerPromptTokens > r.PromptTokens || r.StrongerCompletionTokens > r.CompletionTokens {
		return invalid(k, "the stronger model's tokens (%d, %d) are part of prompt_tokens (%d) and completion_tokens (%d)",
			r.StrongerPromptTokens, r.StrongerCompletionTokens, r.PromptTokens, r.CompletionTokens)
	}
	if err := nonNegativeFigures(k,
		figure{"wall_seconds", r.WallSeconds}, figure{"steps_per_second", r.StepsPerSecond},
		figure{"samples_per_step", r.SamplesPerStep}, figure{"votes_per_step", r.VotesPerStep},
		figure{"expected_samples_per_step", r.ExpectedSamplesPerStep},
		figure{"expected_votes_per_step", r.ExpectedVotesPerStep},
		figure{"p_estimate", r.PEstimate}, figure{"cost_usd", r.CostUSD}, figure{"unverified_cost_usd", r.UnverifiedCostUSD},
	); err != nil {
		return err
	}
	if r.PEstimate > 1 {
		return invalid(k, "p_estimate must be <= 1, got %v", r.PEstimate)
	}
	if nc := r.NoConsensus; nc != nil {
		if err := nonNegative(k, count{"no_consensus.step", nc.Step}, count{"no_consensus.samples", int64(nc.Samples)}); err != nil {
			return err
		}
		if err := checkTally(k, nc.Tally); err != nil {
			return err
		}
		if nc.Rung != "" && nc.Rung != RungOwnModel && nc.Rung != RungStrongerModel {
			return invalid(k, "no_consensus.rung is %s or %s, got %q", RungOwnModel, RungStrongerModel, nc.Rung)
		}
		if err := validPrior(k, nc.Prior); err != nil {
			return err
		}
	}
	if r.Receipt != nil {
		return r.Receipt.check(k, "receipt.")
	}
	return nil
}

// checkTaskPin checks a task spec's pinned version and hash: both or
// neither (a built-in task).
func checkTaskPin(k, version, hash string) error {
	switch {
	case version == "" && hash == "":
		return nil
	case !ValidTaskSpecVersion(version):
		return invalid(k, "task_version %q is not a task version", version)
	case !ValidTaskHash(hash):
		return invalid(k, "task_hash %q is not sha256:<64 hex digits>", hash)
	}
	return nil
}
