// Package jobs is the client side of the job API: it validates and submits
// job specs to the job stream and waits for their status and report. It
// also holds the job registry (registry.go) and the one set of checks on
// a person's pause, resume, cancel and decide (control.go), used by the
// coordinators' control service and by a client writing the registry
// itself; Ask and AskDecide send such requests to the coordinators.
package jobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Sentinel errors.
var (
	// ErrInvalid marks a job spec refused before anything was sent.
	ErrInvalid = errors.New("invalid job")
	// ErrConflict marks a job id already taken by a different job.
	ErrConflict = errors.New("job id taken by a different job")
	// ErrTooBig marks params (or a task's state) over the fleet's limits
	// (schemas.MaxParamsBytes, schemas.MaxStateBytes); it wraps ErrInvalid.
	ErrTooBig = fmt.Errorf("%w: too big", ErrInvalid)
)

// SameJob reports whether rep is the report of the job spec describes: the
// same task, params and k.
func SameJob(spec schemas.JobSpec, rep schemas.JobReport) bool {
	return rep.Task == spec.Task && rep.K == spec.K && rep.ParamsRef == spec.ParamsRef && bytes.Equal(compact(rep.Params), compact(spec.Params))
}

// paramsText is params for a message: inline, or their reference.
func paramsText(params json.RawMessage, ref string) string {
	if ref != "" {
		return "params " + ref
	}
	return string(params)
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// CheckReport returns an ErrConflict error when rep is not the report of
// the job spec describes (the id was used before for another job).
func CheckReport(spec schemas.JobSpec, rep schemas.JobReport) error {
	if SameJob(spec, rep) {
		return nil
	}
	return fmt.Errorf("%w: %s/%s ran as task %s %s with k=%d, not %s %s with k=%d; choose another --job-id",
		ErrConflict, spec.Tenant, spec.JobID, rep.Task, paramsText(rep.Params, rep.ParamsRef), rep.K, spec.Task, paramsText(spec.Params, spec.ParamsRef), spec.K)
}

// NewJobID returns a fresh job id: time-ordered, then random.
func NewJobID() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "j" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

// Tasks pins and loads the tasks jobs name: *taskreg.Registry.
type Tasks interface {
	task.Source
	// Resolve pins name (at version, or the latest registered): a
	// built-in's name, or a spec's name, version and hash.
	Resolve(ctx context.Context, name, version string) (task.Ref, error)
}

// Prepare fills defaults (and a job id), pins the job's task (a registered
// spec's version and hash; the latest version unless spec names one) and
// checks spec completely, including the task's own params, without
// sending anything. With tasks that cannot compile specs
// (taskreg.ErrNoCompiler) a spec's params are left to the coordinator.
func Prepare(ctx context.Context, spec *schemas.JobSpec, tasks Tasks) error {
	return prepare(ctx, spec, tasks, false, pricing.Table{})
}

// PrepareAdmitted is Prepare, and admission: a budget below the lowest
// cost the planner forecasts for the job at the prices of the fleet's
// table (pricing.Admit) is refused with an error wrapping ErrInvalid and
// pricing.ErrOverBudget. Submitters use it (the CLI and the public client
// through the Admission option, the HTTP API, batch lines); the fleet
// itself enforces a budget however it was set, so tests and tools may
// still queue a job with a smaller one.
func PrepareAdmitted(ctx context.Context, spec *schemas.JobSpec, tasks Tasks, prices pricing.Table) error {
	return prepare(ctx, spec, tasks, true, prices)
}

func prepare(ctx context.Context, spec *schemas.JobSpec, tasks Tasks, admit bool, prices pricing.Table) error {
	spec.ApplyDefaults()
	if spec.JobID == "" {
		spec.JobID = NewJobID()
	}
	if spec.SubmittedAt.IsZero() {
		spec.SubmittedAt = time.Now().UTC()
	}
	if spec.Task == "" {
		// Said as missing (Validate's words), not as an unknown task "".
		if err := spec.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	var err error
	if spec.Task, spec.TaskVersion, err = SplitTask(spec.Task, spec.TaskVersion); err != nil {
		return err
	}
	if spec.TaskHash == "" {
		ref, err := tasks.Resolve(ctx, spec.Task, spec.TaskVersion)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		spec.TaskVersion, spec.TaskHash = ref.Version, ref.Hash
	}
	if err := PlanK(ctx, spec, tasks); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if spec.ParamsRef != "" {
		// Only Submit names params by reference, after this.
		return fmt.Errorf("%w: params_ref is set by the fleet at submit; send the params themselves", ErrInvalid)
	}
	if err := checkParamsSize(spec.Params); err != nil {
		return err
	}
	inst, err := task.BindRef(ctx, tasks, TaskRef(*spec), spec.Params)
	if errors.Is(err, taskreg.ErrNoCompiler) {
		// A program that links no spec language (the public client) pins
		// a task spec and leaves its params to the coordinator that takes
		// the job: it binds the task and fails the job, saying why, when
		// they do not fit.
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	spec.Params = inst.Params()
	if err := checkParamsSize(spec.Params); err != nil {
		return err
	}
	if admit && spec.BudgetUSD > 0 {
		if err := pricing.Admit(*spec, pricing.Forecast(*spec, inst, schemas.TenantQuota{}, prices)); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// TaskRef is the task a job pinned.
func TaskRef(spec schemas.JobSpec) task.Ref {
	return task.Ref{Name: spec.Task, Version: spec.TaskVersion, Hash: spec.TaskHash}
}

// Submitted says what Submit did.
type Submitted struct {
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// Duplicate is true when this job was submitted before: it is not
	// queued twice.
	Duplicate bool `json:"duplicate"`
}

// SubmitOption changes how Submit sends a job.
type SubmitOption func(*submitSettings)

type submitSettings struct {
	intakeOnly, admit bool
	prices            pricing.Table
	compile           task.Compiler
}

// Compile makes Submit check a job naming a task spec completely before
// anything is sent, params included, with the spec compiled by c
// (task/spec.CompileSpec). Without it such a job is pinned (the spec's
// version and hash) and its params are checked by the coordinator that
// takes it.
func Compile(c task.Compiler) SubmitOption { return func(s *submitSettings) { s.compile = c } }

// Admission makes Submit refuse a budget below the forecast's lowest cost
// (PrepareAdmitted) before anything is sent, the forecast at prices (the
// fleet's table; the zero Table when the client cannot read it).
func Admission(prices pricing.Table) SubmitOption {
	return func(s *submitSettings) { s.admit, s.prices = true, prices }
}

// IntakeOnly makes Submit only queue the job on the job stream, the
// fleet's intake, where a coordinator registers it: what a tenant's
// identity may do on a secured fleet (it may read its own registry keys,
// never write them, nor create the topology). The topology is bound, never
// created: on a server without a fleet Submit fails with topology.ErrNoFleet. A
// resubmission is found in the registry once a coordinator has registered
// the job, and before that by the job stream's Nats-Msg-Id deduplication
// (checked against the registry: see below).
func IntakeOnly() SubmitOption { return func(s *submitSettings) { s.intakeOnly = true } }

// Submit prepares spec, registers it in the job registry and queues it on
// the job stream, creating the fleet's streams if no role has yet (with
// IntakeOnly: binds them, and only queues it). A job id is taken once:
// resubmitting the same job (the same spec, but for when it was submitted)
// is a no-op (Duplicate), and a different job under a taken id is
// ErrConflict naming what differs, with nothing written.
//
// builtin are the tasks that ship; a job may also name a task spec
// registered in the fleet's task registry (see Compile).
func Submit(ctx context.Context, js jetstream.JetStream, cfg topology.Config, spec *schemas.JobSpec, builtin *task.Registry, opts ...SubmitOption) (Submitted, error) {
	var set submitSettings
	for _, o := range opts {
		o(&set)
	}
	// A built-in task is checked before anything is touched; a spec task
	// needs the fleet's task registry.
	_, lookupErr := builtin.Lookup(spec.Task)
	isBuiltin := lookupErr == nil && spec.TaskVersion == ""
	if isBuiltin {
		if err := prepare(ctx, spec, taskreg.New(nil, builtin, set.compile), set.admit, set.prices); err != nil {
			return Submitted{}, err
		}
	}
	bind := topology.Ensure
	if set.intakeOnly {
		bind = topology.Open
	}
	topo, err := bind(ctx, js, cfg)
	if err != nil {
		return Submitted{}, err
	}
	if !isBuiltin {
		if err := prepare(ctx, spec, taskreg.New(topo.Tasks, builtin, set.compile), set.admit, set.prices); err != nil {
			return Submitted{}, err
		}
	}
	if err := Externalize(ctx, inputs.New(js, cfg.Namespace, inputs.Config{}), spec); err != nil {
		return Submitted{}, err
	}
	data, err := schemas.Encode(spec)
	if err != nil {
		return Submitted{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// A job id is taken once, by one job: a resubmission of the same job
	// changes nothing. The registry holds the whole spec; the report of a
	// finished job no longer registered speaks for it too (task, params
	// and k: what a report keeps).
	if sub, done, err := registered(ctx, topo, spec); done {
		return sub, err
	}
	if e, err := topo.Reports.Get(ctx, bus.JobKey(spec.Tenant, spec.JobID)); err == nil {
		var rep schemas.JobReport
		if err := schemas.Decode(e.Value(), &rep); err == nil {
			if err := CheckReport(*spec, rep); err != nil {
				return Submitted{}, err
			}
			return Submitted{Tenant: spec.Tenant, JobID: spec.JobID, Duplicate: true}, nil
		}
	}
	msg := &nats.Msg{Subject: cfg.Namespace.JobSubject(spec.Tenant), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, spec.Tenant+"/"+spec.JobID)
	if set.intakeOnly {
		// The coordinator that takes it registers it. The same id queued
		// within the stream's duplicate window (not registered yet) is
		// dropped by the server: a duplicate.
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			return Submitted{}, fmt.Errorf("queue job %s/%s: %w", spec.Tenant, spec.JobID, err)
		}
		if !ack.Duplicate {
			return Submitted{Tenant: spec.Tenant, JobID: spec.JobID}, nil
		}
		// Anyone who may publish on the job stream can send a message id:
		// another tenant could have taken this one first (its message is
		// then refused by the coordinators) to have this job dropped. So a
		// duplicate counts only once the registry holds the job; otherwise
		// it is queued again without an id (registering is idempotent, so
		// a true duplicate still runs once).
		if sub, done, err := registered(ctx, topo, spec); done {
			return sub, err
		}
		msg.Header.Del(jetstream.MsgIDHeader)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return Submitted{}, fmt.Errorf("queue job %s/%s: %w", spec.Tenant, spec.JobID, err)
		}
		return Submitted{Tenant: spec.Tenant, JobID: spec.JobID}, nil
	}
	rec := schemas.JobRecord{
		Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: spec.Tenant, JobID: spec.JobID, Spec: *spec,
		Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: time.Now().UTC(),
	}
	switch err := Register(ctx, topo, &rec); {
	case errors.Is(err, ErrExists):
		return Submitted{Tenant: spec.Tenant, JobID: spec.JobID, Duplicate: true}, nil
	case err != nil:
		return Submitted{}, err
	}
	// Also queue it on the job stream, the fleet's intake: the registry
	// already holds it, so a coordinator that takes it finds it there.
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		// Registered, so it runs anyway: coordinators scan the registry.
		return Submitted{Tenant: spec.Tenant, JobID: spec.JobID}, nil
	}
	return Submitted{Tenant: spec.Tenant, JobID: spec.JobID}, nil
}

// Wait blocks until the job's report exists and returns it. onStatus, if
// set, receives each status update meanwhile (from this goroutine).
func Wait(ctx context.Context, topo *topology.Topology, tenant, job string, onStatus func(schemas.JobStatus)) (schemas.JobReport, error) {
	key := bus.JobKey(tenant, job)
	reports, err := topo.Reports.Watch(ctx, key)
	if err != nil {
		return schemas.JobReport{}, fmt.Errorf("watch report: %w", err)
	}
	defer func() { _ = reports.Stop() }()
	var statusUpdates <-chan jetstream.KeyValueEntry
	if onStatus != nil {
		w, err := topo.Status.Watch(ctx, key)
		if err != nil {
			return schemas.JobReport{}, fmt.Errorf("watch status: %w", err)
		}
		defer func() { _ = w.Stop() }()
		statusUpdates = w.Updates()
	}
	for {
		select {
		case e, ok := <-reports.Updates():
			if !ok {
				return schemas.JobReport{}, fmt.Errorf("report watch closed: %w", ctx.Err())
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var rep schemas.JobReport
			if err := schemas.Decode(e.Value(), &rep); err != nil {
				return schemas.JobReport{}, fmt.Errorf("read report: %w", err)
			}
			return rep, nil
		case e, ok := <-statusUpdates:
			if !ok {
				statusUpdates = nil
				continue
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st schemas.JobStatus
			if err := json.Unmarshal(e.Value(), &st); err == nil && st.JobID == job {
				onStatus(st)
			}
		case <-ctx.Done():
			return schemas.JobReport{}, ctx.Err()
		}
	}
}

// registered looks spec's job up in the registry: done is true when the
// registry decides the submission (the same job: a duplicate; another
// job under its id: ErrConflict; a failed read), false when the id is
// free.
func registered(ctx context.Context, topo *topology.Topology, spec *schemas.JobSpec) (sub Submitted, done bool, err error) {
	switch cur, _, err := Get(ctx, topo, spec.Tenant, spec.JobID); {
	case err == nil:
		if err := sameAs(cur, *spec); !errors.Is(err, ErrExists) {
			return Submitted{}, true, err
		}
		return Submitted{Tenant: spec.Tenant, JobID: spec.JobID, Duplicate: true}, true, nil
	case !errors.Is(err, ErrNotFound):
		return Submitted{}, true, err
	}
	return Submitted{}, false, nil
}
