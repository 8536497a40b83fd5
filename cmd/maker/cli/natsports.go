package cli

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// The NATS adapters of the ports (ports.go): the fleet's bus, as its
// roles and the operator reach it.

var (
	_ jobsPort        = (*natsClient)(nil)
	_ batchesPort     = (*natsClient)(nil)
	_ deadLettersPort = (*fleetConn)(nil)
	_ judgePort       = natsJudge{}
	_ tasksPort       = natsTasks{}
	_ budgetsPort     = redisBudgets{}
)

// natsClient is the public client (package client) on a connection of
// the command's own.
type natsClient struct {
	c  *client.Client
	nc *nats.Conn
}

func (n *natsClient) Close() { n.nc.Close() }

// ref is a job or batch as package client names it: "id" in the client's
// tenant, or "tenant/id".
func ref(tenant, id string) string {
	if tenant == "" {
		return id
	}
	return tenant + "/" + id
}

func (n *natsClient) Tasks(ctx context.Context, _ string) (jobs.Tasks, error) { return n.c.Tasks(ctx) }

func (n *natsClient) Submit(ctx context.Context, spec schemas.JobSpec) (client.Submitted, error) {
	return n.c.Submit(ctx, spec)
}

func (n *natsClient) Status(ctx context.Context, tenant, job string) (schemas.JobStatus, error) {
	return n.c.Status(ctx, ref(tenant, job))
}

func (n *natsClient) QueuedReason(ctx context.Context, tenant, job string) (string, error) {
	return n.c.QueuedReason(ctx, ref(tenant, job))
}

func (n *natsClient) Webhook(ctx context.Context, tenant, job string) (*schemas.WebhookView, error) {
	return n.c.Webhook(ctx, ref(tenant, job))
}

func (n *natsClient) Wait(ctx context.Context, tenant, job string, onStatus func(schemas.JobStatus)) (schemas.JobReport, error) {
	return n.c.Wait(ctx, ref(tenant, job), onStatus)
}

func (n *natsClient) Result(ctx context.Context, tenant, job string) (schemas.JobReport, error) {
	return n.c.Result(ctx, ref(tenant, job))
}

func (n *natsClient) Control(ctx context.Context, tenant, job, action string) (schemas.ControlResult, error) {
	control := map[string]func(*client.Client, context.Context, string) (client.Outcome, error){
		schemas.ActionPause: (*client.Client).Pause, schemas.ActionResume: (*client.Client).Resume,
		schemas.ActionCancel: (*client.Client).Cancel,
	}[action]
	out, err := control(n.c, ctx, ref(tenant, job))
	if err != nil {
		return schemas.ControlResult{}, err
	}
	return schemas.ControlResultOf(out.Record, out.Changed), nil
}

func (n *natsClient) Decide(ctx context.Context, tenant, job string, d client.Decision) (schemas.ControlResult, error) {
	out, err := n.c.Decide(ctx, ref(tenant, job), d)
	if err != nil {
		return schemas.ControlResult{}, err
	}
	return schemas.ControlResultOf(out.Record, out.Changed), nil
}

func (n *natsClient) List(ctx context.Context, tenant string, all bool) ([]jobRow, error) {
	recs, err := n.c.List(ctx, client.ListOptions{Tenant: tenant, AllTenants: all})
	if err != nil {
		return nil, err
	}
	rows := make([]jobRow, 0, len(recs))
	for _, r := range recs {
		rows = append(rows, jobRow{r.Tenant, r.JobID, r.Spec.Task, r.Spec.K, r.State, r.Control, r.Spec.SubmittedAt})
	}
	return rows, nil
}

func (n *natsClient) SubmitBatch(ctx context.Context, r io.Reader, o client.BatchOptions) (schemas.BatchRecord, error) {
	return n.c.SubmitBatch(ctx, r, o)
}

func (n *natsClient) Batch(ctx context.Context, tenant, id string) (schemas.BatchRecord, error) {
	return n.c.Batch(ctx, ref(tenant, id))
}

func (n *natsClient) ListBatches(ctx context.Context, tenant string) ([]schemas.BatchRecord, error) {
	return n.c.ListBatches(ctx, tenant)
}

func (n *natsClient) WaitBatch(ctx context.Context, tenant, id string, onUpdate func(schemas.BatchRecord)) (schemas.BatchRecord, error) {
	return n.c.WaitBatch(ctx, ref(tenant, id), onUpdate)
}

func (n *natsClient) BatchOutput(ctx context.Context, tenant, id string, w io.Writer) error {
	return n.c.BatchOutput(ctx, ref(tenant, id), w)
}

func (n *natsClient) BatchErrors(ctx context.Context, tenant, id string, w io.Writer) error {
	return n.c.BatchErrors(ctx, ref(tenant, id), w)
}

func (n *natsClient) CancelBatch(ctx context.Context, tenant, id string) (schemas.BatchRecord, error) {
	return n.c.CancelBatch(ctx, ref(tenant, id))
}

// DeadLetters reads the DLQ stream (fleetConn: connect.go).
func (f *fleetConn) DeadLetters(ctx context.Context, tenant string, all bool, job string, limit int) ([]schemas.StoredDeadLetter, error) {
	if all {
		tenant = ""
	}
	return bus.ListDeadLetters(ctx, f.topo.JS, f.topo.NS, tenant, job, limit)
}

// natsJudge asks the judges on the bus as the connection's identity.
type natsJudge struct {
	js jetstream.JetStream
	ns bus.Namespace
	// identity is the connection's NATS identity ("" without auth); notes
	// hears that Ask waits for the judge's topology.
	identity string
	notes    io.Writer
}

func (j natsJudge) Ask(ctx context.Context, req *schemas.BreakGlassRequest, onHeld func(*schemas.BreakGlassResponse)) (*schemas.BreakGlassResponse, error) {
	if err := awaitJudge(ctx, j.js, j.identity, j.notes); err != nil {
		return nil, err
	}
	return judgeclient.Ask(ctx, j.js, j.ns, req, judgeclient.OnHeld(onHeld), judgeclient.SendWhole(sendWhole))
}

// sendWhole bounds sending a break-glass request once asked: a caller
// that gives up meanwhile (Ctrl-C, an MCP client's timeout) does not
// leave a request that may or may not be on the bus; it runs, once, and
// a retry with its request id joins it.
const sendWhole = 30 * time.Second

func (j natsJudge) Answer(ctx context.Context, tenant, id string) (schemas.BreakGlassResponse, error) {
	var resp schemas.BreakGlassResponse
	err := judgeclient.Answer(ctx, j.js, j.ns, tenant, id, &resp)
	return resp, err
}

// natsTasks is the fleet's task registry.
type natsTasks struct {
	reg   *taskreg.Registry
	close func()
}

func (t natsTasks) Close() { t.close() }

func (t natsTasks) List(ctx context.Context) ([]schemas.TaskInfo, error) {
	recs, err := t.reg.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []schemas.TaskInfo
	for _, n := range builtin.Registry().Names() {
		out = append(out, schemas.TaskInfo{Name: n, Builtin: true})
	}
	for _, r := range recs {
		out = append(out, schemas.TaskInfoOf(r))
	}
	return out, nil
}

func (t natsTasks) Get(ctx context.Context, name, version string) (schemas.TaskRecord, error) {
	return t.reg.Get(ctx, name, version)
}

// redisBudgets are the accounts in the fleet's Redis (internal/quota).
type redisBudgets struct {
	b     *store.Budgets
	close func()
}

func (r redisBudgets) Close() { r.close() }

func (r redisBudgets) Job(ctx context.Context, tenant, job string) (accountJSON, error) {
	a, err := r.b.Job(ctx, store.JobRef{Tenant: tenant, JobID: job})
	return accountOf(tenant, job, "", a), err
}

func (r redisBudgets) SetJob(ctx context.Context, tenant, job string, usd float64) (accountJSON, error) {
	if err := r.b.SetJobLimit(ctx, store.JobRef{Tenant: tenant, JobID: job}, pricing.USD(usd)); err != nil {
		return accountJSON{}, err
	}
	return r.Job(ctx, tenant, job)
}

func (r redisBudgets) TenantDay(ctx context.Context, tenant, day string) (accountJSON, error) {
	if day == "" {
		day = store.Day(time.Now())
	}
	a, err := r.b.TenantDay(ctx, tenant, day)
	return accountOf(tenant, "", day, a), err
}
