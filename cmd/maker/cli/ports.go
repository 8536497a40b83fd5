package cli

import (
	"context"
	"io"
	"time"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// The ports the tenant-facing commands use, each with a NATS adapter
// (natsports.go) and an HTTP API adapter (apiports.go), returning the
// types the commands print. In every method a tenant "" is the client's
// own: the --tenant the NATS client was made for, or the API key's.

// jobsPort is the job commands' fleet: submit, status, result, pause,
// resume, cancel, decide, jobs list, and maker mcp's job tools.
type jobsPort interface {
	// Tasks finds the tasks a job may name, task (a --task value) among
	// them when the fleet has it, for checking a spec before it is sent.
	Tasks(ctx context.Context, task string) (jobs.Tasks, error)
	Submit(ctx context.Context, spec schemas.JobSpec) (client.Submitted, error)
	Status(ctx context.Context, tenant, job string) (schemas.JobStatus, error)
	// QueuedReason says why a queued job has not started.
	QueuedReason(ctx context.Context, tenant, job string) (string, error)
	// Webhook is the job's webhook and its delivery (nil: it names none).
	Webhook(ctx context.Context, tenant, job string) (*schemas.WebhookView, error)
	Wait(ctx context.Context, tenant, job string, onStatus func(schemas.JobStatus)) (schemas.JobReport, error)
	Result(ctx context.Context, tenant, job string) (schemas.JobReport, error)
	// Control asks for schemas.ActionPause, ActionResume or ActionCancel.
	Control(ctx context.Context, tenant, job, action string) (schemas.ControlResult, error)
	Decide(ctx context.Context, tenant, job string, d client.Decision) (schemas.ControlResult, error)
	// List lists tenant's jobs, or every tenant's (all).
	List(ctx context.Context, tenant string, all bool) ([]jobRow, error)
	Close()
}

// jobRow is a line of maker jobs list.
type jobRow struct {
	Tenant      string    `json:"tenant"`
	JobID       string    `json:"job_id"`
	Task        string    `json:"task"`
	K           int       `json:"k"`
	State       string    `json:"state"`
	Control     string    `json:"control"`
	SubmittedAt time.Time `json:"submitted_at"`
}

// batchesPort is maker batch's fleet.
type batchesPort interface {
	SubmitBatch(ctx context.Context, r io.Reader, o client.BatchOptions) (schemas.BatchRecord, error)
	Batch(ctx context.Context, tenant, id string) (schemas.BatchRecord, error)
	ListBatches(ctx context.Context, tenant string) ([]schemas.BatchRecord, error)
	// WaitBatch waits until the batch has ended, passing its record to
	// onUpdate as it changes.
	WaitBatch(ctx context.Context, tenant, id string, onUpdate func(schemas.BatchRecord)) (schemas.BatchRecord, error)
	BatchOutput(ctx context.Context, tenant, id string, w io.Writer) error
	BatchErrors(ctx context.Context, tenant, id string, w io.Writer) error
	CancelBatch(ctx context.Context, tenant, id string) (schemas.BatchRecord, error)
	Close()
}

// deadLettersPort is maker dlq list's fleet.
type deadLettersPort interface {
	// DeadLetters lists tenant's dead letters (every tenant's: all), of
	// job when not "", oldest first, at most limit.
	DeadLetters(ctx context.Context, tenant string, all bool, job string, limit int) ([]schemas.StoredDeadLetter, error)
	Close()
}

// judgePort asks the judges' panel: maker breakglass, judge answer and
// maker mcp's break_glass tool.
type judgePort interface {
	// Ask sends req and waits for its final answer: the response and nil,
	// or for a refused, denied or failed one the response and its error
	// (judgeclient.ResponseError); a nil response when it could not ask.
	// onHeld hears of a request held for a person's approval.
	Ask(ctx context.Context, req *schemas.BreakGlassRequest, onHeld func(*schemas.BreakGlassResponse)) (*schemas.BreakGlassResponse, error)
	// Answer is the stored answer to tenant's request id, held or final.
	Answer(ctx context.Context, tenant, id string) (schemas.BreakGlassResponse, error)
}

// tasksPort is maker task list and show's fleet.
type tasksPort interface {
	// List is every task: the built-ins, then every registered version of
	// each spec.
	List(ctx context.Context) ([]schemas.TaskInfo, error)
	// Get is a registered spec's record (version "": the latest).
	Get(ctx context.Context, name, version string) (schemas.TaskRecord, error)
	Close()
}

// budgetsPort is maker budget's: the accounts the coordinators keep.
type budgetsPort interface {
	Job(ctx context.Context, tenant, job string) (accountJSON, error)
	SetJob(ctx context.Context, tenant, job string, usd float64) (accountJSON, error)
	// TenantDay is tenant's spend on day (YYYY-MM-DD, UTC).
	TenantDay(ctx context.Context, tenant, day string) (accountJSON, error)
	Close()
}
