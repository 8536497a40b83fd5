package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
)

// NoCoordinator is QueuedReason's answer when no coordinator runs.
const NoCoordinator = "no coordinator has taken it yet"

// Submitted says what Submit did.
type Submitted struct {
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// Duplicate is true when this very job was submitted before: nothing
	// new runs, and it has (or will have) the one report.
	Duplicate bool `json:"duplicate"`
}

// Submit validates spec completely (defaults filled, its task pinned:
// a registered spec's latest version unless spec names one) and queues
// it. An empty spec.Tenant is the client's tenant, an empty JobID a fresh
// one. A job id is taken once: submitting the same job again is a no-op
// (Duplicate), a different job under a taken id is ErrConflict naming
// what differs; an invalid spec is ErrInvalid, and nothing is sent.
func (c *Client) Submit(ctx context.Context, spec schemas.JobSpec) (Submitted, error) {
	if c.closed.Load() {
		return Submitted{}, ErrClosed
	}
	if spec.Tenant == "" {
		spec.Tenant = c.tenant
	}
	if spec.Header == (schemas.Header{}) {
		spec.Header = schemas.NewHeader(schemas.KindJobSpec)
	}
	// A budget below the forecast's lowest cost is refused (ErrInvalid)
	// before anything is sent: forecast at the job's own prices (a client
	// does not read the fleet's price table; the coordinators hold the
	// job to the fleet's).
	opts := []jobs.SubmitOption{jobs.Admission(pricing.Table{}), jobs.Compile(c.compile)}
	if c.intake {
		opts = append(opts, jobs.IntakeOnly())
	}
	sub, err := jobs.Submit(ctx, c.js, c.cfg, &spec, c.builtin, opts...)
	if err != nil {
		return Submitted{}, wrap(err)
	}
	return Submitted(sub), nil
}

// JobInfo is a job's registry record (its spec, state and the control
// asked of it) and its latest status (progress and figures).
type JobInfo struct {
	Record schemas.JobRecord `json:"record"`
	Status schemas.JobStatus `json:"status"`
}

// Job returns the job's record and status. id is "id" (in the client's
// tenant) or "tenant/id"; an unknown job is ErrNotFound.
func (c *Client) Job(ctx context.Context, id string) (JobInfo, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return JobInfo{}, err
	}
	rec, _, err := jobs.Get(ctx, topo, tenant, job)
	if err != nil {
		return JobInfo{}, wrap(err)
	}
	st, err := jobs.Status(ctx, topo, tenant, job)
	if err != nil {
		return JobInfo{}, wrap(err)
	}
	return JobInfo{Record: rec, Status: st}, nil
}

// Status returns the job's state and progress. A registered job no
// coordinator has taken yet is queued.
func (c *Client) Status(ctx context.Context, id string) (schemas.JobStatus, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return schemas.JobStatus{}, err
	}
	st, err := jobs.Status(ctx, topo, tenant, job)
	return st, wrap(err)
}

// Result returns a finished job's report: ErrNotFinished (naming its
// state) before it has one, ErrNotFound for an unknown job.
func (c *Client) Result(ctx context.Context, id string) (schemas.JobReport, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return schemas.JobReport{}, err
	}
	rep, err := jobs.Result(ctx, topo, tenant, job)
	return rep, wrap(err)
}

// Wait blocks until the job has a report and returns it, or ctx ends.
// onStatus, if not nil, receives each status update meanwhile, from the
// calling goroutine. The job need not be registered yet: a job queued by
// an intake-only client is registered by the coordinator that takes it.
func (c *Client) Wait(ctx context.Context, id string, onStatus func(schemas.JobStatus)) (schemas.JobReport, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return schemas.JobReport{}, err
	}
	rep, err := jobs.Wait(ctx, topo, tenant, job, onStatus)
	return rep, wrap(err)
}

// ListOptions select the jobs List returns.
type ListOptions struct {
	// Tenant whose jobs to list. Default: the client's.
	Tenant string
	// AllTenants lists every tenant's jobs (what an admin may read);
	// Tenant must then be empty.
	AllTenants bool
	// State keeps only jobs in this state (schemas.StateQueued, ...).
	// Default: every state.
	State string
	// Limit keeps the first Limit jobs. Default 0: all.
	Limit int
}

// List returns registered jobs, oldest submission first.
func (c *Client) List(ctx context.Context, o ListOptions) ([]schemas.JobRecord, error) {
	tenant := o.Tenant
	switch {
	case o.AllTenants && tenant != "":
		return nil, fmt.Errorf("%w: give a tenant or all tenants, not both", ErrInvalid)
	case o.AllTenants:
	case tenant == "":
		tenant = c.tenant
	}
	if o.Limit < 0 {
		return nil, fmt.Errorf("%w: limit %d must be >= 0", ErrInvalid, o.Limit)
	}
	topo, err := c.topology(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := jobs.List(ctx, topo, tenant)
	if err != nil {
		return nil, wrap(err)
	}
	out := recs[:0]
	for _, r := range recs {
		if o.State != "" && r.State != o.State {
			continue
		}
		out = append(out, r)
		if o.Limit > 0 && len(out) == o.Limit {
			break
		}
	}
	return out, nil
}

// Outcome is what a control or a decision left in the job's record.
type Outcome struct {
	// Record is the job's registry record afterwards.
	Record schemas.JobRecord
	// Changed is false when the job already was as asked: nothing was
	// written.
	Changed bool
}

// Pause asks the job to pause at its next step boundary.
func (c *Client) Pause(ctx context.Context, id string) (Outcome, error) {
	return c.control(ctx, id, schemas.ActionPause)
}

// Resume asks a paused job to run on (from where it stopped).
func (c *Client) Resume(ctx context.Context, id string) (Outcome, error) {
	return c.control(ctx, id, schemas.ActionResume)
}

// Cancel asks the job to end at its next step boundary, with a cancelled
// report.
func (c *Client) Cancel(ctx context.Context, id string) (Outcome, error) {
	return c.control(ctx, id, schemas.ActionCancel)
}

// Decision is a person's answer for a step the fleet could not settle.
type Decision struct {
	// Step is the step; VoteKey its answer, as the task's vote key.
	Step    int64
	VoteKey string
	// By names who decides, for the journal.
	By string
}

// Decide records a person's answer for the step the job waits at
// (paused for a person, or waiting for the judge's panel), and the job
// runs on from it. Any other step is ErrNotWaiting, and nothing changes.
func (c *Client) Decide(ctx context.Context, id string, d Decision) (Outcome, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	req := schemas.DecideRequest{Step: d.Step, VoteKey: d.VoteKey, By: d.By}
	actx, cancel := context.WithTimeout(ctx, jobs.DefaultAskTimeout)
	defer cancel()
	out, err := jobs.AskDecide(actx, c.nc, topo.NS, tenant, job, req)
	if errors.Is(err, nats.ErrNoResponders) {
		// No coordinator runs: the registry is written directly, with
		// the same checks.
		rec, err := jobs.Decide(ctx, topo, tenant, job, req.Decision())
		return Outcome{Record: rec, Changed: err == nil}, wrap(err)
	}
	return Outcome(out), wrap(err)
}

// control sends a pause, resume or cancel to the fleet's coordinators,
// which check it against the job's record; when none runs, it writes the
// registry itself with the same checks (where this connection may: the
// admin, or a server without authorization).
func (c *Client) control(ctx context.Context, id, action string) (Outcome, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	req := schemas.ControlRequest{Action: action}
	actx, cancel := context.WithTimeout(ctx, jobs.DefaultAskTimeout)
	defer cancel()
	out, err := jobs.Ask(actx, c.nc, topo.NS, tenant, job, req)
	if errors.Is(err, nats.ErrNoResponders) {
		out, err = jobs.Apply(ctx, topo, tenant, job, req)
	}
	return Outcome(out), wrap(err)
}

// QueuedReason says, for a person, why a queued job has not started:
// no coordinator runs (NoCoordinator), all are busy, or the job is held
// off after a failed attempt. An intake-only client, which may not read
// the coordinators' leases, tells only whether any coordinator takes in
// jobs.
func (c *Client) QueuedReason(ctx context.Context, id string) (string, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return "", err
	}
	if !c.intake {
		why, err := jobs.QueuedReason(ctx, topo, tenant, job)
		if why == jobs.NoCoordinator {
			why = NoCoordinator
		}
		return why, wrap(err)
	}
	cons, err := topo.JS.Consumer(ctx, topo.NS.JobsStream(), bus.ConsumerCoordinators)
	if err != nil {
		return "", fmt.Errorf("coordinators' consumer: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("coordinators' consumer: %w", err)
	}
	if info.NumWaiting == 0 {
		return NoCoordinator, nil
	}
	return "waiting for a coordinator with a free slot", nil
}

// jobRef reads id and binds the fleet.
func (c *Client) jobRef(ctx context.Context, id string) (tenant, job string, topo *topology.Topology, err error) {
	if tenant, job, err = c.ref(id, schemas.ValidJobID); err != nil {
		return "", "", nil, err
	}
	topo, err = c.topology(ctx)
	return tenant, job, topo, err
}

// Webhook is the job's webhook and how its delivery stands (nil when the
// job names none): pending until the job ends and a maker serve makes
// it, then delivered or failed, with every attempt.
func (c *Client) Webhook(ctx context.Context, id string) (*schemas.WebhookView, error) {
	tenant, job, topo, err := c.jobRef(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, _, err := jobs.Get(ctx, topo, tenant, job)
	if err != nil {
		return nil, wrap(err)
	}
	sp := rec.Spec
	if sp.Webhook == "" {
		return nil, nil
	}
	return webhook.View(ctx, topo.Webhooks, tenant, schemas.WebhookJobDeliveryID(sp.JobID, sp.SubmittedAt), sp.Webhook)
}
