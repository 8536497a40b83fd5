package schemas

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The bodies of the HTTP API (maker serve, internal/api) and its clients
// (client/httpapi). They are not bus messages: no header, no kind, no
// Validate (the server checks a request by turning it into a JobSpec and
// preparing that). Their field comments feed the OpenAPI document.

// JobRequest is the body of POST /v1/jobs: a job to submit, the
// submittable fields of a JobSpec. The tenant is always the API key's.
type JobRequest struct {
	// JobID names the job within the tenant (optional: a fresh id is
	// chosen). Submitting the same job under the same id again is a no-op
	// (duplicate); another job under a taken id is refused (409).
	JobID string `json:"job_id,omitempty"`
	// Tenant is optional: when given it must be the API key's tenant (any
	// other is refused with 422); a job always runs as the key's tenant.
	Tenant string `json:"tenant,omitempty"`
	// Task is the task's name: a built-in (e.g. "hanoi") or a registered
	// task spec; TaskVersion pins a registered spec's version (default:
	// the latest).
	Task        string `json:"task"`
	TaskVersion string `json:"task_version,omitempty"`
	// Params configure the task: a JSON object only the task can judge.
	Params json.RawMessage `json:"params"`
	// K is the voting margin: a step is decided when one candidate leads
	// every other by K valid votes. Optional: left out, the server
	// plans the smallest k that solves the whole task with chance
	// reliability_target (default 0.95) when a valid sample is right with
	// chance p_estimate (from calibration when named; default 0.95), as the
	// CLI does; the answer's k and k_basis say which k and why.
	K int `json:"k,omitempty"`
	// Seed makes sampling reproducible (default 0).
	Seed int64 `json:"seed,omitempty"`
	// StepLimit stops the job after this many decided steps (a trial run);
	// 0 leaves the task's own most steps.
	StepLimit int64 `json:"step_limit,omitempty"`
	// MaxSamplesPerStep caps the samples one step may draw (default 100).
	MaxSamplesPerStep int `json:"max_samples_per_step,omitempty"`
	// MaxOutputTokens is the red-flag limit on a reply (default 750).
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// TemperatureFirst is a step's first sample's temperature (default 0),
	// TemperatureRest every other's (default 0.1).
	TemperatureFirst float64  `json:"temperature_first,omitempty"`
	TemperatureRest  *float64 `json:"temperature_rest,omitempty"`
	// SampleTimeoutMS re-samples a sample with no result after this long
	// (default 60000).
	SampleTimeoutMS int64 `json:"sample_timeout_ms,omitempty"`
	// PEstimate is the expected chance a valid sample is right, in
	// (0.5, 1); ValidFraction the expected share of samples that survive
	// red-flagging, in (0, 1]. Both feed the forecast.
	PEstimate     float64 `json:"p_estimate,omitempty"`
	ValidFraction float64 `json:"valid_fraction,omitempty"`
	// Pricing prices the model's tokens (needed by BudgetUSD).
	Pricing *Pricing `json:"pricing,omitempty"`
	// Escalation is what a step that spends MaxSamplesPerStep without a
	// decision does next (optional).
	Escalation *EscalationPolicy `json:"escalation,omitempty"`
	// BudgetUSD caps what the job may spend, in US dollars (optional;
	// needs Pricing). A budget below the forecast's lowest cost is refused
	// (422); a job that would go over pauses as budget_exhausted.
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// Priority orders the tenant's own jobs, 0 (default) to 9, higher
	// first.
	Priority int `json:"priority,omitempty"`
	// ReliabilityTarget asks for adaptive k: the wanted chance that every
	// step is right, in (0, 1); KFloor the smallest margin it may choose
	// (default 2). Decorrelate (auto, on, off), DecorrelateTemperature and
	// Models say what a correlated step's remaining samples are drawn
	// with. As in a job spec (docs/statistics.md).
	ReliabilityTarget      float64  `json:"reliability_target,omitempty"`
	KFloor                 int      `json:"k_floor,omitempty"`
	Decorrelate            string   `json:"decorrelate,omitempty" jsonschema:"enum=,enum=auto,enum=on,enum=off"`
	DecorrelateTemperature float64  `json:"decorrelate_temperature,omitempty"`
	Models                 []string `json:"models,omitempty"`
	// SpeculationDepth and SpeculationMaxWaste: sampling steps ahead, as in
	// a job spec (0 or omitted: off).
	SpeculationDepth    int     `json:"speculation_depth,omitempty"`
	SpeculationMaxWaste float64 `json:"speculation_max_waste,omitempty"`
	// Calibration takes p_estimate, valid_fraction and the tokens a call
	// uses from a calibration stored on the fleet (maker calibrate), as the
	// CLI's --calibration-model does: the forecast, admission and k's
	// defaults then use what the model measured. Refused beside
	// p_estimate or valid_fraction; a calibration the fleet does not hold
	// is refused (422) naming the prompt versions it holds.
	Calibration *CalibrationRef `json:"calibration,omitempty"`
	// Webhook is a URL the job's end is POSTed to (optional): an absolute
	// http or https URL without user info, at most 2 KiB; a job.finished
	// event signed with the tenant's secret (docs/api.md, "Webhooks").
	Webhook string `json:"webhook,omitempty"`
}

// CalibrationRef names a stored calibration (schemas.Calibration).
type CalibrationRef struct {
	// Model is the model the calibration measured (as maker calibrate
	// --model named it).
	Model string `json:"model"`
	// PromptVersion picks the calibration of that prompt version; default
	// the job's own (a built-in task's current prompt, a task spec's
	// hash), else the newest stored for the model and task.
	PromptVersion string `json:"prompt_version,omitempty"`
}

// MaxCalibrationRefBytes bounds a CalibrationRef's model and prompt
// version.
const MaxCalibrationRefBytes = 256

// Check checks r's shape (what the fleet holds is the lookup's to say).
func (r CalibrationRef) Check() error {
	switch {
	case strings.TrimSpace(r.Model) == "" || len(r.Model) > MaxCalibrationRefBytes:
		return fmt.Errorf("%w: calibration.model must name the calibrated model (1 to %d bytes)", ErrInvalid, MaxCalibrationRefBytes)
	case len(r.PromptVersion) > MaxCalibrationRefBytes:
		return fmt.Errorf("%w: calibration.prompt_version is over %d bytes", ErrInvalid, MaxCalibrationRefBytes)
	}
	return nil
}

// Spec is the job spec r asks for, run as tenant (defaults not applied:
// jobs.Prepare does that).
func (r JobRequest) Spec(tenant string) JobSpec {
	return JobSpec{
		Header: NewHeader(KindJobSpec), JobID: r.JobID, Tenant: tenant,
		Task: r.Task, TaskVersion: r.TaskVersion, Params: r.Params, K: r.K, Seed: r.Seed, StepLimit: r.StepLimit,
		MaxSamplesPerStep: r.MaxSamplesPerStep, MaxOutputTokens: r.MaxOutputTokens,
		TemperatureFirst: r.TemperatureFirst, TemperatureRest: r.TemperatureRest, SampleTimeoutMS: r.SampleTimeoutMS,
		PEstimate: r.PEstimate, ValidFraction: r.ValidFraction, Pricing: r.Pricing, Escalation: r.Escalation,
		BudgetUSD: r.BudgetUSD, Priority: r.Priority,
		ReliabilityTarget: r.ReliabilityTarget, KFloor: r.KFloor, Decorrelate: r.Decorrelate,
		DecorrelateTemperature: r.DecorrelateTemperature, Models: r.Models,
		SpeculationDepth: r.SpeculationDepth, SpeculationMaxWaste: r.SpeculationMaxWaste,
		Webhook: r.Webhook,
	}
}

// JobSpecOnly are the JobSpec fields a JobRequest does not carry: the
// envelope, what the fleet fills in itself (the task's hash, the submit
// time, a batch's place) and a calibration's token estimates.
var JobSpecOnly = []string{"Header", "TaskHash", "ParamsRef", "KBasis", "PromptTokensEstimate", "CompletionTokensEstimate", "BatchID", "BatchLine", "SubmittedAt"}

// JobRequestOnly are the JobRequest fields a JobSpec does not carry: what
// the server resolves into spec fields before it prepares the job (a
// calibration, into p_estimate, valid_fraction and the token estimates).
var JobRequestOnly = []string{"Calibration"}

// Request is the request that submits s over the HTTP API: Spec's
// inverse, every field but those in JobSpecOnly. Its Tenant is s's; leave
// it empty to run as the API key's tenant.
func (s JobSpec) Request() JobRequest {
	return JobRequest{
		JobID: s.JobID, Tenant: s.Tenant,
		Task: s.Task, TaskVersion: s.TaskVersion, Params: s.Params, K: s.K, Seed: s.Seed, StepLimit: s.StepLimit,
		MaxSamplesPerStep: s.MaxSamplesPerStep, MaxOutputTokens: s.MaxOutputTokens,
		TemperatureFirst: s.TemperatureFirst, TemperatureRest: s.TemperatureRest, SampleTimeoutMS: s.SampleTimeoutMS,
		PEstimate: s.PEstimate, ValidFraction: s.ValidFraction, Pricing: s.Pricing, Escalation: s.Escalation,
		BudgetUSD: s.BudgetUSD, Priority: s.Priority,
		ReliabilityTarget: s.ReliabilityTarget, KFloor: s.KFloor, Decorrelate: s.Decorrelate,
		DecorrelateTemperature: s.DecorrelateTemperature, Models: s.Models,
		SpeculationDepth: s.SpeculationDepth, SpeculationMaxWaste: s.SpeculationMaxWaste,
		Webhook: s.Webhook,
	}
}

// Forecast is the planner's estimate of what a job will take, with a band:
// the expected figure and a low and a high one.
type Forecast struct {
	// Steps is the task's number of steps (at most the job's step limit).
	Steps int64 `json:"steps"`
	// SamplesExpected is the expected number of samples over all steps.
	SamplesExpected float64 `json:"samples_expected"`
	// CostUSD is the expected cost in US dollars, CostLowUSD and
	// CostHighUSD its band (0 without pricing).
	CostUSD     float64 `json:"cost_usd"`
	CostLowUSD  float64 `json:"cost_low_usd"`
	CostHighUSD float64 `json:"cost_high_usd"`
	// Seconds is the expected run time at the tenant's rate limit,
	// SecondsLow and SecondsHigh its band (absent when the tenant has no
	// rate limit to reckon with).
	Seconds     float64 `json:"seconds,omitempty"`
	SecondsLow  float64 `json:"seconds_low,omitempty"`
	SecondsHigh float64 `json:"seconds_high,omitempty"`
	// Basis says where the figures come from, e.g. "p=0.99 (default),
	// pricing from the job".
	Basis string `json:"basis,omitempty"`
	// Calibrated: p and the tokens of a call were measured (a
	// calibration), so CostUSD holds (within 25 % on the simulated model)
	// and admission compares a budget with it; otherwise they are
	// assumed, and only CostLowUSD, a floor, refuses a budget.
	Calibrated bool `json:"calibrated,omitempty"`
}

// JobCreated is the answer to POST /v1/jobs (201, or 200 for a
// duplicate).
type JobCreated struct {
	// ID is the job's id within Tenant, the key's tenant.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Duplicate is true when this job was submitted before: it is not
	// queued twice.
	Duplicate bool `json:"duplicate"`
	// K is the job's voting margin; KBasis says how the server planned it
	// when the request left k out (empty when the request gave it).
	K      int    `json:"k"`
	KBasis string `json:"k_basis,omitempty"`
	// Forecast is the planner's estimate at submit (absent when the task
	// gives no basis for one).
	Forecast *Forecast `json:"forecast,omitempty"`
}

// JobView is a job as GET /v1/jobs/{id} shows it: what was submitted and
// where it stands.
type JobView struct {
	// ID and Tenant name the job.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Task, TaskVersion, K, Priority and BudgetUSD are the job's, as
	// submitted.
	Task        string  `json:"task"`
	TaskVersion string  `json:"task_version,omitempty"`
	K           int     `json:"k"`
	Priority    int     `json:"priority,omitempty"`
	BudgetUSD   float64 `json:"budget_usd,omitempty"`
	// KBasis says how the server planned K when the request left it out.
	KBasis string `json:"k_basis,omitempty"`
	// State is queued, running, paused, budget_exhausted or a final state
	// (solved, unsolved, no_consensus, failed, cancelled); Finished is true
	// once the job has a report (GET /v1/jobs/{id}/result).
	State    string `json:"state" jsonschema:"enum=queued,enum=running,enum=paused,enum=budget_exhausted,enum=solved,enum=unsolved,enum=no_consensus,enum=failed,enum=cancelled"`
	Finished bool   `json:"finished"`
	// Control is pause or cancel while asked and not yet obeyed.
	Control string `json:"control,omitempty" jsonschema:"enum=,enum=pause,enum=cancel"`
	// Progress is the share of the task done, in [0, 1]; Steps decided
	// out of TotalSteps.
	Progress   float64 `json:"progress" jsonschema:"minimum=0,maximum=1"`
	Steps      int64   `json:"steps"`
	TotalSteps int64   `json:"total_steps"`
	// Samples, Votes, RedFlagged and Errors so far.
	Samples    int64 `json:"samples"`
	Votes      int64 `json:"votes"`
	RedFlagged int64 `json:"red_flagged"`
	Errors     int64 `json:"errors"`
	// Asked is what the job was last asked, run, pause or cancel, obeyed
	// or not (Control shows it only while not yet obeyed).
	Asked string `json:"asked,omitempty" jsonschema:"enum=,enum=run,enum=pause,enum=cancel"`
	// Rung is set while the open step is escalated.
	Rung string `json:"rung,omitempty" jsonschema:"enum=,enum=stronger_model,enum=panel"`
	// Coordinator names the fleet process running the job (absent while
	// it is queued or paused).
	Coordinator string `json:"coordinator,omitempty"`
	// SpentUSD is what the job has cost so far, ReservedUSD what its
	// samples in flight may still cost; FinishCostUSD (budget_exhausted
	// only) what finishing is expected to cost from here.
	SpentUSD      float64 `json:"spent_usd,omitempty"`
	ReservedUSD   float64 `json:"reserved_usd,omitempty"`
	FinishCostUSD float64 `json:"finish_cost_usd,omitempty"`
	// Reason says why a budget_exhausted job stopped, or why a running
	// one waits (its status's).
	Reason string `json:"reason,omitempty"`
	// Waiting is why a running job waits on the fleet (its status's).
	Waiting *JobWaiting `json:"waiting,omitempty"`
	// BatchID and BatchLine name the batch and input line the job came
	// from (absent for a job submitted alone).
	BatchID   string `json:"batch_id,omitempty"`
	BatchLine int64  `json:"batch_line,omitempty"`
	// Webhook is the job's webhook and how its delivery stands (absent
	// when the job names none).
	Webhook *WebhookView `json:"webhook,omitempty"`
	// SubmittedAt is when the job was submitted, UpdatedAt when its
	// figures were taken.
	SubmittedAt time.Time `json:"submitted_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Status is the job's state and progress as a job_status message (the
// events route's and the fleet's own): every JobStatus field is one of
// v's.
func (v JobView) Status() JobStatus {
	return JobStatus{
		Header: NewHeader(KindJobStatus), Tenant: v.Tenant, JobID: v.ID, State: v.State,
		Steps: v.Steps, TotalSteps: v.TotalSteps, Progress: v.Progress,
		Samples: v.Samples, Votes: v.Votes, RedFlagged: v.RedFlagged, Errors: v.Errors,
		Coordinator: v.Coordinator, Rung: v.Rung, Control: v.Control,
		SpentUSD: v.SpentUSD, ReservedUSD: v.ReservedUSD, FinishCostUSD: v.FinishCostUSD, Reason: v.Reason, Waiting: v.Waiting, UpdatedAt: v.UpdatedAt,
	}
}

// JobList is a page of GET /v1/jobs, by job id (generated ids are
// time-ordered, so oldest first).
type JobList struct {
	Jobs []JobView `json:"jobs"`
	// NextCursor fetches the next page (?cursor=); absent on the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// DecideBody is the body of POST /v1/jobs/{id}/decide: a person's answer
// for a step waiting for one. Who decides is the API key's (an approver
// or admin key): its name, else its prefix; the body cannot say.
type DecideBody struct {
	// Step is the waiting step; Answer its answer, as the task's canonical
	// key.
	Step   int64  `json:"step" jsonschema:"minimum=0"`
	Answer string `json:"answer"`
}

// ControlResult is the answer to POST /v1/jobs/{id}/pause, resume,
// cancel and decide.
type ControlResult struct {
	// ID and Tenant name the job; State is where it stands now and
	// Control what it was asked (run, pause or cancel).
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	State   string `json:"state"`
	Control string `json:"control" jsonschema:"enum=run,enum=pause,enum=cancel"`
	// Changed is false when the job already was as asked.
	Changed bool `json:"changed"`
	// Decision is the person's answer the job holds for a step (decide's),
	// when it holds one.
	Decision *PersonDecision `json:"decision,omitempty"`
}

// ControlResultOf is the answer to a control or a decision that left the
// job's record rec; changed says whether it changed it.
func ControlResultOf(rec JobRecord, changed bool) ControlResult {
	return ControlResult{ID: rec.JobID, Tenant: rec.Tenant, State: rec.State, Control: rec.Control, Changed: changed, Decision: rec.Decision}
}

// BudgetBody is the body of PUT /v1/jobs/{id}/budget: the job's new
// budget. Raising it lets a budget_exhausted job go on once resumed.
type BudgetBody struct {
	// BudgetUSD is the job's budget in US dollars (0: no cap of its own;
	// the tenant's spend per day still holds).
	BudgetUSD float64 `json:"budget_usd"`
}

// JobBudget is a job's budget as the fleet keeps it: GET and PUT
// /v1/jobs/{id}/budget.
type JobBudget struct {
	// ID and Tenant name the job.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// LimitUSD is the job's budget (0: none of its own); SpentUSD what its
	// counted samples cost; ReservedUSD what its samples in flight may
	// still cost.
	LimitUSD    float64 `json:"limit_usd"`
	SpentUSD    float64 `json:"spent_usd"`
	ReservedUSD float64 `json:"reserved_usd"`
}

// BatchCreated is the answer to POST /v1/batches (201): the stored
// batch's record, queued; its invalid lines are in GET
// /v1/batches/{id}/errors, the rest runs.
type BatchCreated = BatchRecord

// BatchList is the answer to GET /v1/batches: the tenant's batches,
// oldest first.
type BatchList struct {
	Batches []BatchRecord `json:"batches"`
}

// Usage is the answer to GET /v1/usage: what a tenant uses now and may
// use.
type Usage struct {
	// Tenant is the key's tenant.
	Tenant string `json:"tenant"`
	// Day is the UTC day SpentTodayUSD and ReservedTodayUSD count, as
	// YYYY-MM-DD.
	Day string `json:"day"`
	// SpentTodayUSD is what the tenant's jobs spent this UTC day;
	// ReservedTodayUSD what their samples in flight may still cost.
	SpentTodayUSD    float64 `json:"spent_today_usd"`
	ReservedTodayUSD float64 `json:"reserved_today_usd"`
	// Jobs counts the tenant's registered jobs by state.
	Jobs map[string]int64 `json:"jobs"`
	// RunningJobs is the number of its jobs running now: those holding
	// one of its running-job slots when it has max_running_jobs (what the
	// quota counts), else those the registry records as running.
	RunningJobs int64 `json:"running_jobs"`
	// InflightSamples is its sample requests published and not yet
	// answered.
	InflightSamples int64 `json:"inflight_samples"`
	// Quota is the tenant's quota record (zero limits: none).
	Quota TenantQuota `json:"quota"`
}

// TaskInfo is a task as GET /v1/tasks lists it.
type TaskInfo struct {
	// Name is the task's name; Builtin is true for a task that ships with
	// the fleet, false for a registered task spec.
	Name    string `json:"name"`
	Builtin bool   `json:"builtin"`
	// Version and Hash name a registered spec's latest version.
	Version string `json:"version,omitempty"`
	Hash    string `json:"hash,omitempty"`
	// Versions lists a registered spec's versions, oldest first, and
	// Source is the spec file of Version (GET /v1/tasks/{name} only).
	Versions []string `json:"versions,omitempty"`
	Source   string   `json:"source,omitempty"`
	// By names who registered a spec's Version, RegisteredAt when.
	By           string    `json:"by,omitempty"`
	RegisteredAt time.Time `json:"registered_at,omitzero"`
}

// TaskInfoOf is a registered spec's record as the API shows it (its
// versions and source left out).
func TaskInfoOf(rec TaskRecord) TaskInfo {
	return TaskInfo{Name: rec.Name, Version: rec.TaskVersion, Hash: rec.Hash, By: rec.By, RegisteredAt: rec.At}
}

// Record is a registered spec's record as the fleet keeps it (the
// answer of GET /v1/tasks/{name}).
func (t TaskInfo) Record() TaskRecord {
	return TaskRecord{Header: NewHeader(KindTaskRecord), Name: t.Name, TaskVersion: t.Version, Hash: t.Hash, Source: t.Source, By: t.By, At: t.RegisteredAt}
}

// TaskList is the answer to GET /v1/tasks.
type TaskList struct {
	Tasks []TaskInfo `json:"tasks"`
}

// DeadLetterList is the answer to GET /v1/dlq: the tenant's dead
// letters (requests the fleet gave up on, with why), oldest first.
type DeadLetterList struct {
	DeadLetters []StoredDeadLetter `json:"dead_letters"`
}

// BreakGlassAccepted is the answer to POST /v1/breakglass (202): the
// request is queued for the judges; GET /v1/breakglass/{id} reads its
// answer.
type BreakGlassAccepted struct {
	// RequestID names the request within the tenant.
	RequestID string `json:"request_id"`
	// Tenant is the API key's; Requester the key's name (its prefix
	// mk_<key id> when it has none): the audit trail's requester.
	Tenant    string `json:"tenant"`
	Requester string `json:"requester"`
}

// Problem is an error answer (RFC 9457 problem details,
// application/problem+json).
type Problem struct {
	// Type is a URI naming the kind of problem (see docs/api.md), Title
	// its short summary, Status the HTTP status code.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail explains this occurrence; Instance is the request's path.
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Errors lists the failing fields of an invalid request (422).
	Errors []FieldError `json:"errors,omitempty"`
	// State is the job's state when the problem is that it has not
	// finished (409).
	State string `json:"state,omitempty"`
}

// FieldError is one failing field of a request.
type FieldError struct {
	// Path is the field's JSON pointer in the request, e.g.
	// "/params/disks"; "" for the whole body.
	Path    string `json:"path"`
	Message string `json:"message"`
}
