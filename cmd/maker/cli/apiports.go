package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/client/httpapi"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/spec"
)

// The HTTP API adapters of the ports (ports.go): maker serve, as a
// tenant reaches the fleet, with an API key. Every error is apiErr's.

var (
	_ jobsPort        = apiFleet{}
	_ batchesPort     = apiFleet{}
	_ deadLettersPort = apiFleet{}
	_ judgePort       = apiFleet{}
	_ tasksPort       = apiTasks{}
	_ budgetsPort     = apiBudgets{}
)

// apiQueuedReason is why a queued job waits, as far as a tenant can
// tell: the coordinators' leases are the fleet's, not a tenant's to read.
const apiQueuedReason = "waiting for a coordinator"

// batchPollEvery is how often WaitBatch asks for the batch's record.
const batchPollEvery = time.Second

// apiFleet is the fleet through the HTTP API, as the key's tenant.
type apiFleet struct{ c *httpapi.Client }

func (a apiFleet) Close() {}

// in is the client acting on tenant's jobs ("" the key's own): for
// another tenant, an admin key's (?tenant=).
func (a apiFleet) in(tenant string) *httpapi.Client {
	if tenant == "" {
		return a.c
	}
	return a.c.ForTenant(tenant)
}

// job is the client acting on tenant's job, whose id is checked first
// as package client checks it (a malformed id is invalid, not unknown).
func (a apiFleet) job(tenant, job string) (*httpapi.Client, error) {
	if err := schemas.ValidJobID(job); err != nil {
		return nil, fmt.Errorf("%w: job id %q: %w", client.ErrInvalid, job, err)
	}
	return a.in(tenant), nil
}

// Tasks are the built-ins and, when task names a registered spec, that
// spec as the API serves it (GET /v1/tasks/{name}), compiled here: the
// spec is checked and k chosen before anything is sent, as on NATS.
func (a apiFleet) Tasks(ctx context.Context, task string) (jobs.Tasks, error) {
	reg := builtinTasks()
	name, version, err := taskreg.ParseRef(task)
	if err != nil {
		return reg, nil // Resolve says what is wrong with it
	}
	if _, err := reg.Resolve(ctx, name, version); err == nil {
		return reg, nil
	}
	info, err := a.c.Task(ctx, name, version)
	if errors.Is(err, httpapi.ErrNotFound) {
		return reg, nil // reported unknown by Resolve
	}
	if err != nil {
		return nil, apiErr(err)
	}
	t, err := spec.Compile([]byte(info.Source))
	if err != nil {
		return nil, fmt.Errorf("task %s@%s as the API serves it: %w", info.Name, info.Version, err)
	}
	if t.Hash() != info.Hash {
		return nil, fmt.Errorf("task %s@%s as the API serves it hashes to %s, not %s", info.Name, info.Version, t.Hash(), info.Hash)
	}
	reg.Add(t)
	return reg, nil
}

func (a apiFleet) Submit(ctx context.Context, s schemas.JobSpec) (client.Submitted, error) {
	c, err := a.c.Submit(ctx, s.Request())
	if err != nil {
		return client.Submitted{}, apiErr(err)
	}
	return client.Submitted{Tenant: c.Tenant, JobID: c.ID, Duplicate: c.Duplicate}, nil
}

func (a apiFleet) Status(ctx context.Context, tenant, job string) (schemas.JobStatus, error) {
	c, err := a.job(tenant, job)
	if err != nil {
		return schemas.JobStatus{}, err
	}
	v, err := c.Job(ctx, job)
	if err != nil {
		return schemas.JobStatus{}, apiErr(err)
	}
	return v.Status(), nil
}

func (a apiFleet) Webhook(ctx context.Context, tenant, job string) (*schemas.WebhookView, error) {
	c, err := a.job(tenant, job)
	if err != nil {
		return nil, err
	}
	v, err := c.Job(ctx, job)
	if err != nil {
		return nil, apiErr(err)
	}
	return v.Webhook, nil
}

func (a apiFleet) QueuedReason(context.Context, string, string) (string, error) {
	return apiQueuedReason, nil
}

func (a apiFleet) Wait(ctx context.Context, tenant, job string, onStatus func(schemas.JobStatus)) (schemas.JobReport, error) {
	c, err := a.job(tenant, job)
	if err != nil {
		return schemas.JobReport{}, err
	}
	rep, err := c.Wait(ctx, job, onStatus)
	return rep, apiErr(err)
}

func (a apiFleet) Result(ctx context.Context, tenant, job string) (schemas.JobReport, error) {
	c, err := a.job(tenant, job)
	if err != nil {
		return schemas.JobReport{}, err
	}
	rep, err := c.Result(ctx, job)
	return rep, apiErr(err)
}

func (a apiFleet) Control(ctx context.Context, tenant, job, action string) (schemas.ControlResult, error) {
	control := map[string]func(*httpapi.Client, context.Context, string) (schemas.ControlResult, error){
		schemas.ActionPause: (*httpapi.Client).Pause, schemas.ActionResume: (*httpapi.Client).Resume,
		schemas.ActionCancel: (*httpapi.Client).Cancel,
	}[action]
	c, err := a.job(tenant, job)
	if err != nil {
		return schemas.ControlResult{}, err
	}
	out, err := control(c, ctx, job)
	return out, apiErr(err)
}

// Decide sends the step and answer; who decides is the API key's to say,
// not the body's: d.By is not sent.
func (a apiFleet) Decide(ctx context.Context, tenant, job string, d client.Decision) (schemas.ControlResult, error) {
	c, err := a.job(tenant, job)
	if err != nil {
		return schemas.ControlResult{}, err
	}
	out, err := c.Decide(ctx, job, schemas.DecideBody{Step: d.Step, Answer: d.VoteKey})
	return out, apiErr(err)
}

// List reads every page (GET /v1/jobs, next_cursor), all tenants' with
// "*" (an admin key's).
func (a apiFleet) List(ctx context.Context, tenant string, all bool) ([]jobRow, error) {
	o := httpapi.ListOptions{}
	c := a.c
	switch {
	case all:
		o.Tenant = "*"
	case tenant != "":
		c = a.c.ForTenant(tenant)
	}
	rows := []jobRow{}
	for {
		page, err := c.List(ctx, o)
		if err != nil {
			return nil, apiErr(err)
		}
		for _, v := range page.Jobs {
			rows = append(rows, jobRow{v.Tenant, v.ID, v.Task, v.K, v.State, v.Asked, v.SubmittedAt})
		}
		if page.NextCursor == "" {
			return rows, nil
		}
		o.Cursor = page.NextCursor
	}
}

// SubmitBatch submits as the key's tenant; the server's own line limits
// apply (o.MaxLines and MaxLineBytes are the NATS client's).
func (a apiFleet) SubmitBatch(ctx context.Context, r io.Reader, o client.BatchOptions) (schemas.BatchRecord, error) {
	rec, err := a.c.SubmitBatch(ctx, r, httpapi.BatchOptions{Priority: o.Priority, Window: o.Window, Webhook: o.Webhook})
	return rec, apiErr(err)
}

// Batch reads the batch, which the API finds in the key's own tenant
// only: a tenant named (a batch ID tenant/id) must be the batch's.
func (a apiFleet) Batch(ctx context.Context, tenant, id string) (schemas.BatchRecord, error) {
	rec, err := a.c.Batch(ctx, id)
	if err != nil {
		return schemas.BatchRecord{}, apiErr(err)
	}
	if tenant != "" && rec.Tenant != tenant {
		return schemas.BatchRecord{}, fmt.Errorf("%w: no batch %s in tenant %s (the API key's tenant is %s, whose batches alone it reaches)", client.ErrNotFound, id, tenant, rec.Tenant)
	}
	return rec, nil
}

func (a apiFleet) ListBatches(ctx context.Context, _ string) ([]schemas.BatchRecord, error) {
	recs, err := a.c.ListBatches(ctx)
	return recs, apiErr(err)
}

// WaitBatch asks for the batch's record every batchPollEvery until it
// has ended.
func (a apiFleet) WaitBatch(ctx context.Context, tenant, id string, onUpdate func(schemas.BatchRecord)) (schemas.BatchRecord, error) {
	t := time.NewTicker(batchPollEvery)
	defer t.Stop()
	for {
		rec, err := a.Batch(ctx, tenant, id)
		if err != nil {
			return schemas.BatchRecord{}, err
		}
		if onUpdate != nil {
			onUpdate(rec)
		}
		if schemas.BatchTerminal(rec.State) {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return schemas.BatchRecord{}, ctx.Err()
		case <-t.C:
		}
	}
}

// BatchOutput and BatchErrors check a tenant named first (Batch).
func (a apiFleet) BatchOutput(ctx context.Context, tenant, id string, w io.Writer) error {
	if _, err := a.named(ctx, tenant, id); err != nil {
		return err
	}
	return apiErr(a.c.BatchOutput(ctx, id, w))
}

func (a apiFleet) BatchErrors(ctx context.Context, tenant, id string, w io.Writer) error {
	if _, err := a.named(ctx, tenant, id); err != nil {
		return err
	}
	return apiErr(a.c.BatchErrors(ctx, id, w))
}

func (a apiFleet) CancelBatch(ctx context.Context, tenant, id string) (schemas.BatchRecord, error) {
	if _, err := a.named(ctx, tenant, id); err != nil {
		return schemas.BatchRecord{}, err
	}
	rec, err := a.c.CancelBatch(ctx, id)
	return rec, apiErr(err)
}

// named checks, when a tenant is named, that the batch is its.
func (a apiFleet) named(ctx context.Context, tenant, id string) (schemas.BatchRecord, error) {
	if tenant == "" {
		return schemas.BatchRecord{}, nil
	}
	return a.Batch(ctx, tenant, id)
}

func (a apiFleet) DeadLetters(ctx context.Context, tenant string, all bool, job string, limit int) ([]schemas.StoredDeadLetter, error) {
	if all {
		tenant = "*"
	}
	dls, err := a.in(tenant).DeadLetters(ctx, job, limit)
	return dls, apiErr(err)
}

// Ask posts req as the key's tenant and holder (POST /v1/breakglass:
// neither is sent, the key says both) and waits for the final answer.
func (a apiFleet) Ask(ctx context.Context, req *schemas.BreakGlassRequest, onHeld func(*schemas.BreakGlassResponse)) (*schemas.BreakGlassResponse, error) {
	body := *req
	body.Tenant, body.Requester = "", ""
	// Sent whole, as natsJudge's (sendWhole).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendWhole)
	defer cancel()
	acc, err := a.c.BreakGlass(sctx, body)
	if err != nil {
		return nil, apiErr(err)
	}
	resp, err := a.c.WaitBreakGlass(ctx, acc.RequestID, func(r schemas.BreakGlassResponse) {
		if onHeld != nil {
			onHeld(&r)
		}
	})
	if err != nil {
		return nil, apiErr(err)
	}
	return &resp, judgeclient.ResponseError(&resp)
}

// Answer reads the key's tenant's answer (GET /v1/breakglass/{id}); a
// tenant named must be the answer's.
func (a apiFleet) Answer(ctx context.Context, tenant, id string) (schemas.BreakGlassResponse, error) {
	resp, err := a.c.BreakGlassAnswer(ctx, id, 0)
	if err != nil {
		return resp, apiErr(err)
	}
	if tenant != "" && resp.Tenant != tenant {
		return schemas.BreakGlassResponse{}, fmt.Errorf("%w: no answer to %s for tenant %s (the API key reads its own tenant's, %s's)", judgeclient.ErrNoAnswer, id, tenant, resp.Tenant)
	}
	return resp, nil
}

// apiTasks is the task registry through the API.
type apiTasks struct{ c *httpapi.Client }

func (apiTasks) Close() {}

// List is GET /v1/tasks?versions=all: the built-ins, then every version
// of each spec, by name, then version.
func (t apiTasks) List(ctx context.Context) ([]schemas.TaskInfo, error) {
	infos, err := t.c.TaskVersions(ctx)
	return infos, apiErr(err)
}

func (t apiTasks) Get(ctx context.Context, name, version string) (schemas.TaskRecord, error) {
	info, err := t.c.Task(ctx, name, version)
	if err != nil {
		return schemas.TaskRecord{}, apiErr(err)
	}
	return info.Record(), nil
}

// apiBudgets are the budgets through the API: a job's (GET and PUT
// /v1/jobs/{id}/budget) and the key's tenant's spend today (GET
// /v1/usage).
type apiBudgets struct{ c *httpapi.Client }

func (apiBudgets) Close() {}

func (b apiBudgets) Job(ctx context.Context, tenant, job string) (accountJSON, error) {
	jb, err := apiFleet(b).in(tenant).Budget(ctx, job)
	return jobAccount(jb), apiErr(err)
}

func (b apiBudgets) SetJob(ctx context.Context, tenant, job string, usd float64) (accountJSON, error) {
	jb, err := apiFleet(b).in(tenant).SetBudget(ctx, job, usd)
	return jobAccount(jb), apiErr(err)
}

func jobAccount(b schemas.JobBudget) accountJSON {
	return accountOf(b.Tenant, b.ID, "", store.Account{Limit: pricing.USD(b.LimitUSD), Spent: pricing.USD(b.SpentUSD), Reserved: pricing.USD(b.ReservedUSD)})
}

// TenantDay is the key's tenant's spend today: the API shows no other
// day, and no other tenant's.
func (b apiBudgets) TenantDay(ctx context.Context, tenant, day string) (accountJSON, error) {
	u, err := b.c.Usage(ctx)
	if err != nil {
		return accountJSON{}, apiErr(err)
	}
	if tenant != "" && tenant != u.Tenant {
		return accountJSON{}, fmt.Errorf("the API shows the spend of the key's own tenant, %s, not %s's (ask the operator: maker budget show --tenant %s)", u.Tenant, tenant, tenant)
	}
	if day != "" && day != u.Day {
		return accountJSON{}, fmt.Errorf("%w: the API shows today's spend (%s), not %s's (ask the operator: maker budget show --day %s)", client.ErrInvalid, u.Day, day, day)
	}
	return accountOf(u.Tenant, "", u.Day, store.Account{Limit: pricing.USD(u.Quota.SpendPerDayUSD), Spent: pricing.USD(u.SpentTodayUSD), Reserved: pricing.USD(u.ReservedTodayUSD)}), nil
}
