package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Batch message kinds: a batch's record (bucket maker_batches) and one
// stored input line (stream MAKER_BATCHES).
const (
	KindBatchRecord = "batch_record"
	KindBatchItem   = "batch_item"
)

// Batch states. A batch is queued until a coordinator's batch runner takes
// it, running while it feeds its jobs into the fleet, and completed once
// every line has an outcome; cancel moves a queued batch to cancelled at
// once and a running one through cancelling (its unfinished jobs are
// cancelled) to cancelled.
const (
	BatchQueued     = "queued"
	BatchRunning    = "running"
	BatchCancelling = "cancelling"
	BatchCompleted  = "completed"
	BatchCancelled  = "cancelled"
)

// BatchTerminal reports whether a batch in state s has ended.
func BatchTerminal(s string) bool { return s == BatchCompleted || s == BatchCancelled }

// Batch bounds.
const (
	// MaxBatchWindow bounds a batch's window: its jobs unfinished at once.
	MaxBatchWindow = 1000
	// MaxCustomIDBytes bounds a line's custom_id.
	MaxCustomIDBytes = 256
	// MaxBatchErrorBytes bounds a line error's message.
	MaxBatchErrorBytes = 2048
)

// Line error codes: why a line has no report (BatchError.Code).
const (
	// The line was refused when the batch was created.
	BatchErrLineTooLong     = "line_too_long"
	BatchErrInvalidJSON     = "invalid_json"
	BatchErrInvalidLine     = "invalid_line"
	BatchErrInvalidCustomID = "invalid_custom_id"
	BatchErrWrongTenant     = "wrong_tenant"
	BatchErrUnknownTask     = "unknown_task"
	BatchErrInvalidParams   = "invalid_params"
	BatchErrInvalidSpec     = "invalid_spec"
	// The line's job ran (or not) and did not succeed.
	BatchErrJobFailed      = "job_failed"
	BatchErrJobCancelled   = "job_cancelled"
	BatchErrBatchCancelled = "batch_cancelled"
	BatchErrNotFinished    = "not_finished"
	BatchErrJobConflict    = "job_conflict"
)

var batchErrCodes = []string{
	BatchErrLineTooLong, BatchErrInvalidJSON, BatchErrInvalidLine, BatchErrInvalidCustomID, BatchErrWrongTenant,
	BatchErrUnknownTask, BatchErrInvalidParams, BatchErrInvalidSpec,
	BatchErrJobFailed, BatchErrJobCancelled, BatchErrBatchCancelled, BatchErrNotFinished, BatchErrJobConflict,
}

var batchIDRE = regexp.MustCompile(`^batch_[a-z0-9]{1,34}$`)

// ValidBatchID checks a batch id: "batch_" and 1-34 of a-z and 0-9, so
// that a job id <batch>-<line> is a job id and a batch id never reads as
// anything else in the batches bucket.
func ValidBatchID(id string) error {
	if !batchIDRE.MatchString(id) {
		return fmt.Errorf("%w: batch id %q must be batch_ and 1-34 of a-z and 0-9", ErrInvalid, id)
	}
	return nil
}

// BatchJobID is the job id of a batch's line: <batch>-<line>.
func BatchJobID(batch string, line int64) string { return fmt.Sprintf("%s-%d", batch, line) }

// BatchCounts are a batch's lines by outcome. Once the batch has ended,
// Completed + Failed + Cancelled = Total.
type BatchCounts struct {
	// Total is the batch's lines (blank lines are not counted); Valid
	// those that make a job, Invalid those refused (each in the error
	// file, by line number).
	Total   int64 `json:"total"`
	Valid   int64 `json:"valid"`
	Invalid int64 `json:"invalid"`
	// Submitted is the jobs fed into the fleet so far.
	Submitted int64 `json:"submitted"`
	// Completed is the jobs that ran to an end (solved, unsolved or
	// no_consensus: the report says which).
	Completed int64 `json:"completed"`
	// Failed is the invalid lines plus the jobs that failed.
	Failed int64 `json:"failed"`
	// Cancelled is the jobs cancelled plus the valid lines never fed
	// because the batch was cancelled.
	Cancelled int64 `json:"cancelled"`
}

// BatchRecord is a batch of jobs, one per line of a JSONL input, stored in
// the batches bucket under <tenant>.<batch>; its lines are in the batch
// stream, one message (BatchItem) per line, in input order. A
// coordinator's batch runner feeds its jobs into the fleet, at most Window
// unfinished at once, and counts their outcomes here, resuming from
// Cursor and Pending after a coordinator's death.
type BatchRecord struct {
	Header
	// ID names the batch (ValidBatchID); Tenant owns it and every job of it.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// State is queued, running, cancelling, completed or cancelled.
	State string `json:"state" jsonschema:"enum=queued,enum=running,enum=cancelling,enum=completed,enum=cancelled"`
	// Priority is the priority of the batch's jobs whose line sets none
	// (0 to 9, higher first).
	Priority int `json:"priority"`
	// Window is the most jobs of the batch unfinished at once (1 to 1000;
	// lowered to the tenant's max_running_jobs when that is set).
	Window int `json:"window"`
	// Counts are the lines by outcome.
	Counts BatchCounts `json:"counts"`
	// Cursor is how many lines (valid or not) the runner has gone past, in
	// input order; NextSeq the batch stream's sequence to read from next
	// (0: from the start).
	Cursor  int64 `json:"cursor"`
	NextSeq int64 `json:"next_seq"`
	// Pending are the lines whose jobs were fed and have not been counted
	// yet, at most Window of them.
	Pending []int64 `json:"pending,omitempty"`
	// StoredBytes is what the batch's lines take in the batch stream: a
	// tenant's open batches together hold at most its limit (512 MiB by
	// default).
	StoredBytes int64 `json:"stored_bytes,omitempty"`
	// CreatedAt, UpdatedAt and CompletedAt (set once ended) are when the
	// batch was created, last changed and ended.
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Webhook is a URL the batch's end is POSTed to (optional;
	// ValidWebhookURL): a batch.finished event.
	Webhook string `json:"webhook,omitempty"`
	// WebhookDelivery is how that delivery stands: filled in by the API
	// when it shows the batch, never stored.
	WebhookDelivery *WebhookView `json:"webhook_delivery,omitempty"`
}

// MessageKind implements Message.
func (*BatchRecord) MessageKind() string { return KindBatchRecord }

// Validate implements Message.
func (b *BatchRecord) Validate() error {
	const k = KindBatchRecord
	if err := b.Header.check(k); err != nil {
		return err
	}
	if err := ValidTenant(b.Tenant); err != nil {
		return err
	}
	if err := ValidBatchID(b.ID); err != nil {
		return err
	}
	switch b.State {
	case BatchQueued, BatchRunning, BatchCancelling, BatchCompleted, BatchCancelled:
	default:
		return invalid(k, "state must be queued, running, cancelling, completed or cancelled, got %q", b.State)
	}
	if b.StoredBytes < 0 {
		return invalid(k, "stored_bytes must not be negative, got %d", b.StoredBytes)
	}
	if b.Priority < MinPriority || b.Priority > MaxPriority {
		return invalid(k, "priority must be between %d and %d, got %d", MinPriority, MaxPriority, b.Priority)
	}
	if b.Window < 1 || b.Window > MaxBatchWindow {
		return invalid(k, "window must be between 1 and %d, got %d", MaxBatchWindow, b.Window)
	}
	c := b.Counts
	if err := nonNegative(k, count{"cursor", b.Cursor}, count{"next_seq", b.NextSeq},
		count{"counts.total", c.Total}, count{"counts.valid", c.Valid}, count{"counts.invalid", c.Invalid},
		count{"counts.submitted", c.Submitted}, count{"counts.completed", c.Completed},
		count{"counts.failed", c.Failed}, count{"counts.cancelled", c.Cancelled}); err != nil {
		return err
	}
	switch {
	case c.Valid+c.Invalid != c.Total:
		return invalid(k, "counts.valid %d + counts.invalid %d != counts.total %d", c.Valid, c.Invalid, c.Total)
	case c.Submitted > c.Valid:
		return invalid(k, "counts.submitted %d > counts.valid %d", c.Submitted, c.Valid)
	case c.Completed+c.Failed+c.Cancelled > c.Total:
		return invalid(k, "counts.completed + failed + cancelled exceed counts.total %d", c.Total)
	case b.Cursor > c.Total:
		return invalid(k, "cursor %d beyond counts.total %d", b.Cursor, c.Total)
	case len(b.Pending) > MaxBatchWindow:
		return invalid(k, "pending holds %d lines, over %d", len(b.Pending), MaxBatchWindow)
	}
	for _, l := range b.Pending {
		if l < 1 {
			return invalid(k, "pending line %d must be >= 1", l)
		}
	}
	if BatchTerminal(b.State) != (b.CompletedAt != nil) {
		return invalid(k, "completed_at is set exactly when the batch has ended")
	}
	if b.Webhook != "" {
		if err := ValidWebhookURL(b.Webhook); err != nil {
			return err
		}
	}
	return nil
}

// BatchError says why a batch line has no report, or why its job did not
// succeed: a code (BatchErr*) and a message for people.
type BatchError struct {
	// Code is the kind of error, e.g. invalid_json, unknown_task,
	// job_failed.
	Code string `json:"code"`
	// Message explains it.
	Message string `json:"message"`
}

func (e *BatchError) check(k string) error {
	if !slices.Contains(batchErrCodes, e.Code) {
		return invalid(k, "error.code %q is not a batch error code", e.Code)
	}
	if e.Message == "" || len(e.Message) > MaxBatchErrorBytes || !utf8.ValidString(e.Message) {
		return invalid(k, "error.message must be 1-%d bytes of UTF-8", MaxBatchErrorBytes)
	}
	return nil
}

// BatchItem is one input line of a batch as stored in the batch stream
// (subject <ns>.v1.batch.<tenant>.<batch>), in input order: the prepared
// job spec of a valid line, or the error of an invalid one.
type BatchItem struct {
	Header
	// Tenant and BatchID name the batch; Line is the input line's number
	// (from 1; blank lines have none but count).
	Tenant  string `json:"tenant"`
	BatchID string `json:"batch_id"`
	Line    int64  `json:"line"`
	// CustomID is the line's custom_id (empty when unreadable).
	CustomID string `json:"custom_id,omitempty"`
	// Spec is the job of a valid line (job id <batch>-<line>); Error why
	// the line was refused. Exactly one is set.
	Spec  *JobSpec    `json:"spec,omitempty"`
	Error *BatchError `json:"error,omitempty"`
}

// MessageKind implements Message.
func (*BatchItem) MessageKind() string { return KindBatchItem }

// Validate implements Message.
func (it *BatchItem) Validate() error {
	const k = KindBatchItem
	if err := it.Header.check(k); err != nil {
		return err
	}
	if err := ValidTenant(it.Tenant); err != nil {
		return err
	}
	if err := ValidBatchID(it.BatchID); err != nil {
		return err
	}
	if it.Line < 1 {
		return invalid(k, "line must be >= 1, got %d", it.Line)
	}
	if len(it.CustomID) > MaxCustomIDBytes || !utf8.ValidString(it.CustomID) {
		return invalid(k, "custom_id must be at most %d bytes of UTF-8", MaxCustomIDBytes)
	}
	if (it.Spec == nil) == (it.Error == nil) {
		return invalid(k, "exactly one of spec and error is set")
	}
	if it.Error != nil {
		return it.Error.check(k)
	}
	if err := it.Spec.Validate(); err != nil {
		return err
	}
	if it.Spec.Tenant != it.Tenant || it.Spec.BatchID != it.BatchID || it.Spec.BatchLine != it.Line ||
		it.Spec.JobID != BatchJobID(it.BatchID, it.Line) {
		return invalid(k, "spec must be job %s of tenant %s, batch line %d", BatchJobID(it.BatchID, it.Line), it.Tenant, it.Line)
	}
	return nil
}

// BatchLine is one line of a batch's JSONL input: a job as a submit names
// it, with the caller's custom_id. The tenant is the caller's; a line
// naming another is refused. Fields left out take the job spec's defaults
// (priority: the batch's).
type BatchLine struct {
	// CustomID is the caller's id for the line (1-256 bytes, no control
	// characters), unique in the batch; output lines carry it.
	CustomID string `json:"custom_id"`
	// Tenant, if set, must be the caller's.
	Tenant string `json:"tenant,omitempty"`
	// Task, TaskVersion, Params, K, Seed and the rest are the job spec's
	// fields of the same names.
	Task              string            `json:"task"`
	TaskVersion       string            `json:"task_version,omitempty"`
	Params            json.RawMessage   `json:"params"`
	K                 int               `json:"k"`
	Seed              int64             `json:"seed,omitempty"`
	StepLimit         int64             `json:"step_limit,omitempty"`
	MaxSamplesPerStep int               `json:"max_samples_per_step,omitempty"`
	MaxOutputTokens   int               `json:"max_output_tokens,omitempty"`
	TemperatureFirst  float64           `json:"temperature_first,omitempty"`
	TemperatureRest   *float64          `json:"temperature_rest,omitempty"`
	SampleTimeoutMS   int64             `json:"sample_timeout_ms,omitempty"`
	PEstimate         float64           `json:"p_estimate,omitempty"`
	ValidFraction     float64           `json:"valid_fraction,omitempty"`
	Pricing           *Pricing          `json:"pricing,omitempty"`
	Escalation        *EscalationPolicy `json:"escalation,omitempty"`
	BudgetUSD         float64           `json:"budget_usd,omitempty"`
	Priority          *int              `json:"priority,omitempty"`
	// ReliabilityTarget, KFloor, Decorrelate, DecorrelateTemperature and
	// Models: adaptive k and decorrelation, as in a job spec.
	ReliabilityTarget      float64  `json:"reliability_target,omitempty"`
	KFloor                 int      `json:"k_floor,omitempty"`
	Decorrelate            string   `json:"decorrelate,omitempty" jsonschema:"enum=,enum=auto,enum=on,enum=off"`
	DecorrelateTemperature float64  `json:"decorrelate_temperature,omitempty"`
	Models                 []string `json:"models,omitempty"`
	// SpeculationDepth and SpeculationMaxWaste: sampling steps ahead, as
	// in a job spec (0 or omitted: off).
	SpeculationDepth    int     `json:"speculation_depth,omitempty"`
	SpeculationMaxWaste float64 `json:"speculation_max_waste,omitempty"`
	// Calibration takes p_estimate, valid_fraction and the tokens a call
	// uses from a stored calibration, as a JobRequest's does (refused
	// beside p_estimate or valid_fraction).
	Calibration *CalibrationRef `json:"calibration,omitempty"`
	// Webhook is a URL this line's job's end is POSTed to, as a
	// JobRequest's (optional).
	Webhook string `json:"webhook,omitempty"`
}

// DecodeBatchLine reads one batch line as strictly as Decode reads a
// message: size limit, UTF-8, one JSON object, known fields only, matched
// case-sensitively, none repeated. It checks the custom_id; the job itself
// is checked when it is prepared (Spec, then the job API's Prepare).
func DecodeBatchLine(data []byte) (BatchLine, error) {
	var l BatchLine
	if len(data) > MaxMessageBytes {
		return l, fmt.Errorf("%w: line of %d bytes exceeds the %d-byte limit", ErrInvalid, len(data), MaxMessageBytes)
	}
	if !utf8.Valid(data) {
		return l, fmt.Errorf("%w: line is not UTF-8", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return BatchLine{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0 {
		return BatchLine{}, fmt.Errorf("%w: trailing data after the line's JSON object", ErrInvalid)
	}
	if bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
		return BatchLine{}, fmt.Errorf("%w: a line must be a JSON object", ErrInvalid)
	}
	if err := checkKeys(data, reflect.TypeOf(&l)); err != nil {
		return BatchLine{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l, nil
}

// CheckCustomID checks a line's custom_id: 1-256 bytes of UTF-8 without
// control characters.
func CheckCustomID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: custom_id is missing", ErrInvalid)
	case len(id) > MaxCustomIDBytes:
		return fmt.Errorf("%w: custom_id is %d bytes, over %d", ErrInvalid, len(id), MaxCustomIDBytes)
	case !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Errorf("%w: custom_id holds a control character or is not UTF-8", ErrInvalid)
	}
	return nil
}

// Spec is the job the line asks for, of tenant, with priority taken from
// the line or else batchPriority; the job id and batch fields are the
// caller's to set.
func (l BatchLine) Spec(tenant string, batchPriority int) JobSpec {
	s := JobSpec{
		Header: NewHeader(KindJobSpec), Tenant: tenant, Task: l.Task, TaskVersion: l.TaskVersion, Params: l.Params,
		K: l.K, Seed: l.Seed, StepLimit: l.StepLimit, MaxSamplesPerStep: l.MaxSamplesPerStep,
		MaxOutputTokens: l.MaxOutputTokens, TemperatureFirst: l.TemperatureFirst, TemperatureRest: l.TemperatureRest,
		SampleTimeoutMS: l.SampleTimeoutMS, PEstimate: l.PEstimate, ValidFraction: l.ValidFraction,
		Pricing: l.Pricing, Escalation: l.Escalation, BudgetUSD: l.BudgetUSD, Priority: batchPriority,
		ReliabilityTarget: l.ReliabilityTarget, KFloor: l.KFloor, Decorrelate: l.Decorrelate,
		DecorrelateTemperature: l.DecorrelateTemperature, Models: l.Models,
		SpeculationDepth: l.SpeculationDepth, SpeculationMaxWaste: l.SpeculationMaxWaste, Webhook: l.Webhook,
	}
	if l.Priority != nil {
		s.Priority = *l.Priority
	}
	return s
}

// BatchOutputLine is one line of a batch's output (and error) file, in
// input order: the line's job report, or why it has none. The shape
// follows the OpenAI Batch API's output where it fits.
type BatchOutputLine struct {
	// ID is the line's request id, <batch>-<line> (its job's id).
	ID string `json:"id"`
	// CustomID is the input line's custom_id; Line its number.
	CustomID string `json:"custom_id"`
	Line     int64  `json:"line"`
	// JobID is the line's job (empty for an invalid line).
	JobID string `json:"job_id,omitempty"`
	// Response is the job's report, null when it has none (yet).
	Response *JobReport `json:"response"`
	// Error says why the line has no report, or why its job failed or was
	// cancelled; null otherwise.
	Error *BatchError `json:"error"`
}
