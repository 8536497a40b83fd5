package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// A person's controls and decisions are checked here, against the job's
// real state, whichever path writes them: the coordinators' control
// service (a request on the job's control or decide subject) or a client
// writing the registry itself when no coordinator answers. The checks:
//
//   - the job exists (ErrNotFound) and has not ended (ErrFinished); a job
//     being cancelled can only be cancelled;
//   - asking for what already holds writes nothing (Outcome.Changed is
//     false), so a repeated or replayed request is harmless;
//   - a person's answer is taken only for the step the job's owner last
//     reported open, and only while that step is escalated to the judge's
//     panel: paused for a person, or waiting for the panel's answer
//     (ErrNotWaiting otherwise: a healthy step, a step decided already or
//     one not reached, or a replay after the step moved on).

// Outcome is what a control or a decision left in the registry.
type Outcome struct {
	// Record is the job's registry record afterwards.
	Record schemas.JobRecord
	// Changed is false when the job already was as asked: nothing was
	// written.
	Changed bool
}

// Control asks tenant/job to run, pause or cancel. Its owner obeys at the
// next step boundary; a paused job has no owner and is resumed by any
// coordinator once asked to run, and a paused job that is cancelled is
// ended by the next coordinator that looks. Asking for the control the job
// already has writes nothing.
func Control(ctx context.Context, topo *topology.Topology, tenant, job, control string) (schemas.JobRecord, error) {
	out, err := setControl(ctx, topo, tenant, job, control)
	return out.Record, err
}

// Apply carries out a person's control request for tenant/job (pause,
// resume or cancel), with Control's checks.
func Apply(ctx context.Context, topo *topology.Topology, tenant, job string, req schemas.ControlRequest) (Outcome, error) {
	if req.Header == (schemas.Header{}) {
		req.Header = schemas.NewHeader(schemas.KindControlRequest)
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return setControl(ctx, topo, tenant, job, schemas.ControlOf(req.Action))
}

func setControl(ctx context.Context, topo *topology.Topology, tenant, job, control string) (Outcome, error) {
	switch control {
	case schemas.ControlRun, schemas.ControlPause, schemas.ControlCancel:
	default:
		return Outcome{}, fmt.Errorf("%w: unknown control %q", ErrInvalid, control)
	}
	if err := checkRef(tenant, job); err != nil {
		return Outcome{}, err
	}
	// The report is out before its owner marks the registry finished: a
	// control asked in between (right after a Wait, say) is refused too.
	if e, err := topo.Reports.Get(ctx, bus.JobKey(tenant, job)); err == nil {
		var rep schemas.JobReport
		if schemas.Decode(e.Value(), &rep) == nil && rep.Tenant == tenant && rep.JobID == job {
			return Outcome{}, fmt.Errorf("%w: %s/%s ended %s", ErrFinished, tenant, job, rep.State)
		}
	}
	var cur schemas.JobRecord
	rec, err := update(ctx, topo, tenant, job, func(r *schemas.JobRecord) error {
		cur = *r
		if r.Finished {
			return fmt.Errorf("%w: %s/%s ended %s", ErrFinished, tenant, job, r.State)
		}
		if r.Control == schemas.ControlCancel && control != schemas.ControlCancel {
			return fmt.Errorf("%w: %s/%s is being cancelled", ErrFinished, tenant, job)
		}
		if r.Control == control {
			return bus.ErrAbort // already asked: a repeat changes nothing
		}
		r.Control = control
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return Outcome{Record: cur}, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Record: rec, Changed: true}, nil
}

// Decide records a person's answer for step of tenant/job and asks the job
// to run: its owner journals the answer (as an arbiter decision) when it
// reaches that step, instead of sampling it. It is taken only for a step
// the fleet could not settle: the open step, escalated to the judge's
// panel (paused for a person, or waiting for the panel); anything else is
// ErrNotWaiting. The open step and its rung are read from the status the
// job's owner publishes (only a coordinator writes it).
func Decide(ctx context.Context, topo *topology.Topology, tenant, job string, d schemas.PersonDecision) (schemas.JobRecord, error) {
	if d.Step < 0 || d.VoteKey == "" || d.By == "" {
		return schemas.JobRecord{}, fmt.Errorf("%w: a decision needs a step >= 0, a vote key and who decides", ErrInvalid)
	}
	return update(ctx, topo, tenant, job, func(r *schemas.JobRecord) error {
		if r.Finished {
			return fmt.Errorf("%w: %s/%s ended %s", ErrFinished, tenant, job, r.State)
		}
		if r.Control == schemas.ControlCancel {
			return fmt.Errorf("%w: %s/%s is being cancelled", ErrFinished, tenant, job)
		}
		if err := waiting(ctx, topo, tenant, job, d.Step); err != nil {
			return err
		}
		d.At = time.Now().UTC()
		r.Decision, r.Control = &d, schemas.ControlRun
		return nil
	})
}

// waiting is nil when step is the step tenant/job waits for a person at,
// as its owner last reported; else ErrNotWaiting saying where the job is.
func waiting(ctx context.Context, topo *topology.Topology, tenant, job string, step int64) error {
	e, err := topo.Status.Get(ctx, bus.JobKey(tenant, job))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s/%s has not started: no step of it waits for a person", ErrNotWaiting, tenant, job)
	}
	if err != nil {
		return fmt.Errorf("%w: read status of %s/%s: %w", ErrUnavailable, tenant, job, err)
	}
	var st schemas.JobStatus
	if err := schemas.Decode(e.Value(), &st); err != nil {
		return fmt.Errorf("%w: status of %s/%s: %w", ErrUnavailable, tenant, job, err)
	}
	open := st.Steps // steps decided: the next is open
	switch {
	case schemas.Terminal(st.State):
		return fmt.Errorf("%w: %s/%s ended %s", ErrFinished, tenant, job, st.State)
	case step < open:
		return fmt.Errorf("%w: step %d of %s/%s was decided already (the job is at step %d)", ErrNotWaiting, step, tenant, job, open)
	case step > open:
		return fmt.Errorf("%w: step %d of %s/%s has not been reached (the job is at step %d)", ErrNotWaiting, step, tenant, job, open)
	case st.Rung != schemas.RungPanel:
		return fmt.Errorf("%w: step %d of %s/%s is being voted on (the job is %s; a person decides only a step the fleet could not settle)",
			ErrNotWaiting, step, tenant, job, st.State)
	}
	return nil
}

// errUnchanged is what update returns when its change was aborted.
var errUnchanged = errors.New("jobs: unchanged")

// ProblemOf is how a refusal is put in a control reply.
func ProblemOf(err error) *schemas.ControlProblem {
	code := schemas.CodeUnavailable
	switch {
	case errors.Is(err, ErrInvalid):
		code = schemas.CodeInvalid
	case errors.Is(err, ErrNotFound):
		code = schemas.CodeNotFound
	case errors.Is(err, ErrFinished):
		code = schemas.CodeFinished
	case errors.Is(err, ErrNotWaiting):
		code = schemas.CodeNotWaiting
	}
	return &schemas.ControlProblem{Code: code, Message: err.Error()}
}

// refusal is a problem in a control reply, as an error: its message is the
// coordinator's, and it wraps the sentinel of its code.
type refusal struct {
	sentinel error
	msg      string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.sentinel }

// errOf turns a reply's problem back into the error the coordinator met.
func errOf(p *schemas.ControlProblem) error {
	sentinel := ErrUnavailable
	switch p.Code {
	case schemas.CodeInvalid:
		sentinel = ErrInvalid
	case schemas.CodeNotFound:
		sentinel = ErrNotFound
	case schemas.CodeFinished:
		sentinel = ErrFinished
	case schemas.CodeNotWaiting:
		sentinel = ErrNotWaiting
	}
	return &refusal{sentinel: sentinel, msg: p.Message}
}

// Reply is the control reply for what Apply or Decide returned.
func Reply(tenant, job string, out Outcome, err error) *schemas.ControlReply {
	rep := &schemas.ControlReply{Header: schemas.NewHeader(schemas.KindControlReply), Tenant: tenant, JobID: job}
	if err != nil {
		rep.Problem = ProblemOf(err)
		return rep
	}
	rec := out.Record
	rep.Record, rep.Changed = &rec, out.Changed
	return rep
}

// DefaultAskTimeout bounds a control or decide request whose context has
// no deadline.
const DefaultAskTimeout = 10 * time.Second

// Ask sends a person's control request for tenant/job to the fleet's
// coordinators and returns what they did. When no coordinator serves
// the namespace, the error wraps nats.ErrNoResponders (the caller may
// then Apply it to the registry itself); a refusal wraps the sentinel of
// its reason (ErrNotFound, ErrFinished, ...).
func Ask(ctx context.Context, nc *nats.Conn, ns bus.Namespace, tenant, job string, req schemas.ControlRequest) (Outcome, error) {
	req.Header = schemas.NewHeader(schemas.KindControlRequest)
	return ask(ctx, nc, ns.ControlSubject(tenant, job), tenant, job, &req)
}

// AskDecide sends a person's answer for a step of tenant/job to the
// fleet's coordinators, as Ask does.
func AskDecide(ctx context.Context, nc *nats.Conn, ns bus.Namespace, tenant, job string, req schemas.DecideRequest) (Outcome, error) {
	req.Header = schemas.NewHeader(schemas.KindDecideRequest)
	return ask(ctx, nc, ns.DecideSubject(tenant, job), tenant, job, &req)
}

func ask(ctx context.Context, nc *nats.Conn, subject, tenant, job string, req schemas.Message) (Outcome, error) {
	if err := checkRef(tenant, job); err != nil {
		return Outcome{}, err
	}
	data, err := schemas.Encode(req)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultAskTimeout)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return Outcome{}, fmt.Errorf("no coordinator answers on %s: %w", subject, err)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: ask the coordinators on %s: %w", ErrUnavailable, subject, err)
	}
	var rep schemas.ControlReply
	if err := schemas.Decode(msg.Data, &rep); err != nil {
		return Outcome{}, fmt.Errorf("%w: reply on %s: %w", ErrUnavailable, subject, err)
	}
	if rep.Problem != nil {
		return Outcome{}, errOf(rep.Problem)
	}
	if rep.Tenant != tenant || rep.JobID != job {
		return Outcome{}, fmt.Errorf("%w: reply on %s names job %s/%s", ErrUnavailable, subject, rep.Tenant, rep.JobID)
	}
	return Outcome{Record: *rep.Record, Changed: rep.Changed}, nil
}
