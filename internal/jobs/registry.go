package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// More sentinel errors.
var (
	// ErrExists: the job is registered already (the same job).
	ErrExists = errors.New("job already registered")
	// ErrNotFound: no job has this id.
	ErrNotFound = errors.New("unknown job")
	// ErrFinished: the job has ended; it cannot be paused, resumed or
	// cancelled.
	ErrFinished = errors.New("job has finished")
	// ErrNotFinished: the job has no report yet.
	ErrNotFinished = errors.New("job has not finished")
	// ErrNotWaiting: a person's answer names a step that is not waiting
	// for a person (a healthy step, one decided already, one not reached).
	ErrNotWaiting = errors.New("step is not waiting for a person")
	// ErrUnavailable: the fleet could not be asked, or could not read or
	// write the registry; asking again may succeed.
	ErrUnavailable = errors.New("fleet unavailable")
)

// Register adds rec to the job registry. A registered job with the same
// id is ErrExists if it is the same job (the same spec, see SpecDiff), else
// ErrConflict; either way nothing is written.
func Register(ctx context.Context, topo *topology.Topology, rec *schemas.JobRecord) error {
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := registry(topo).Create(ctx, bus.JobKey(rec.Tenant, rec.JobID), rec); err == nil {
		return nil
	} else if !errors.Is(err, bus.ErrConflict) {
		return fmt.Errorf("register job: %w", err)
	}
	cur, _, err := Get(ctx, topo, rec.Tenant, rec.JobID)
	if err != nil {
		return err
	}
	return sameAs(cur, rec.Spec)
}

// registry is the typed view of the job registry bucket.
func registry(topo *topology.Topology) *bus.KV[schemas.JobRecord] {
	return bus.NewKV(topo.Jobs, bus.MessageCodec[schemas.JobRecord]())
}

// sameAs is ErrExists when spec is the job registered as cur (its whole
// spec but when it was submitted), else ErrConflict naming what differs.
func sameAs(cur schemas.JobRecord, spec schemas.JobSpec) error {
	diffs, err := SpecDiff(cur.Spec, spec)
	if err != nil {
		return err
	}
	if len(diffs) > 0 {
		return conflictErr(cur.Tenant, cur.JobID, diffs)
	}
	return ErrExists
}

// Get returns the registry record of tenant/job and its revision.
func Get(ctx context.Context, topo *topology.Topology, tenant, job string) (schemas.JobRecord, uint64, error) {
	if err := checkRef(tenant, job); err != nil {
		return schemas.JobRecord{}, 0, err
	}
	rec, rev, err := registry(topo).Get(ctx, bus.JobKey(tenant, job))
	if errors.Is(err, bus.ErrNotFound) {
		return schemas.JobRecord{}, 0, fmt.Errorf("%w: %s/%s", ErrNotFound, tenant, job)
	}
	if err != nil {
		return schemas.JobRecord{}, 0, fmt.Errorf("read job %s/%s: %w", tenant, job, err)
	}
	return *rec, rev, nil
}

func checkRef(tenant, job string) error {
	if err := schemas.ValidTenant(tenant); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := schemas.ValidJobID(job); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// update applies fn to tenant/job's record with compare-and-set, retrying
// when another writer got in between, and returns the record written.
// fn may return bus.ErrAbort to write nothing: update returns errUnchanged.
func update(ctx context.Context, topo *topology.Topology, tenant, job string, fn func(*schemas.JobRecord) error) (schemas.JobRecord, error) {
	if err := checkRef(tenant, job); err != nil {
		return schemas.JobRecord{}, err
	}
	rec, err := registry(topo).Update(ctx, bus.JobKey(tenant, job), func(cur *schemas.JobRecord) (*schemas.JobRecord, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, tenant, job)
		}
		if err := fn(cur); err != nil {
			return nil, err
		}
		cur.UpdatedAt = time.Now().UTC()
		return cur, nil
	})
	if err != nil {
		return schemas.JobRecord{}, err
	}
	if rec == nil { // fn returned bus.ErrAbort: nothing written
		return schemas.JobRecord{}, errUnchanged
	}
	return *rec, nil
}

// MarkFinished records that tenant/job ended in state.
func MarkFinished(ctx context.Context, topo *topology.Topology, tenant, job, state string) error {
	_, err := update(ctx, topo, tenant, job, func(r *schemas.JobRecord) error {
		r.Finished, r.State = true, state
		return nil
	})
	return err
}

// MarkState records the state a job was left in (running, paused).
func MarkState(ctx context.Context, topo *topology.Topology, tenant, job, state string) error {
	_, err := update(ctx, topo, tenant, job, func(r *schemas.JobRecord) error {
		if !r.Finished {
			r.State = state
		}
		return nil
	})
	return err
}

// Keys returns the registry keys (<tenant>.<job>) of tenant's jobs (""
// for every tenant's), sorted. It reads keys only, not records: a
// listing pages by key and reads just its page's records (Get). One
// tenant's keys are listed by a key filter, so the listing reads only
// that tenant's keys (what a tenant's identity may read).
func Keys(ctx context.Context, topo *topology.Topology, tenant string) ([]string, error) {
	var lister jetstream.KeyLister
	var err error
	if tenant == "" {
		lister, err = topo.Jobs.ListKeys(ctx)
	} else if err = schemas.ValidTenant(tenant); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	} else {
		lister, err = topo.Jobs.ListKeysFiltered(ctx, bus.JobKey(tenant, "*"))
	}
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []string
	for key := range lister.Keys() {
		t, _, ok := strings.Cut(key, ".")
		if !ok || (tenant != "" && t != tenant) {
			continue
		}
		out = append(out, key)
	}
	slices.Sort(out)
	return slices.Compact(out), nil // a listing may name a key twice
}

// List returns every registered job of tenant ("" for all tenants), oldest
// submission first. It reads every record, one by one: a tenant's
// listing in pages reads Keys and Gets only its page.
func List(ctx context.Context, topo *topology.Topology, tenant string) ([]schemas.JobRecord, error) {
	keys, err := Keys(ctx, topo, tenant)
	if err != nil {
		return nil, err
	}
	var out []schemas.JobRecord
	for _, key := range keys {
		t, id, _ := strings.Cut(key, ".")
		rec, _, err := Get(ctx, topo, t, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b schemas.JobRecord) int {
		if c := a.Spec.SubmittedAt.Compare(b.Spec.SubmittedAt); c != 0 {
			return c
		}
		return strings.Compare(bus.JobKey(a.Tenant, a.JobID), bus.JobKey(b.Tenant, b.JobID))
	})
	return out, nil
}

// Status returns tenant/job's latest progress. A registered job no
// coordinator has reported on yet is queued (or paused, or finished) as
// its record says. A queued or paused job names no coordinator.
func Status(ctx context.Context, topo *topology.Topology, tenant, job string) (schemas.JobStatus, error) {
	rec, _, err := Get(ctx, topo, tenant, job)
	if err != nil {
		return schemas.JobStatus{}, err
	}
	st := schemas.JobStatus{Header: schemas.NewHeader(schemas.KindJobStatus), Tenant: tenant, JobID: job, State: rec.State, UpdatedAt: rec.UpdatedAt}
	if e, err := topo.Status.Get(ctx, bus.JobKey(tenant, job)); err == nil {
		var cur schemas.JobStatus
		if schemas.Decode(e.Value(), &cur) == nil {
			st = cur
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, fmt.Errorf("read status of %s/%s: %w", tenant, job, err)
	} else if rec.Finished {
		// Retention sweeps statuses before reports: the figures of a
		// finished job whose status is gone come from its report.
		if rep, err := Result(ctx, topo, tenant, job); err == nil {
			st.Steps, st.TotalSteps, st.Samples, st.Votes = rep.Steps, rep.TotalSteps, rep.Samples, rep.Votes
			st.RedFlagged, st.Errors, st.SpentUSD, st.UpdatedAt = rep.RedFlagged, rep.Errors, rep.CostUSD, rep.FinishedAt
			if rep.Solved {
				st.Progress = 1
			} else if rep.TotalSteps > 0 {
				st.Progress = min(1, float64(rep.Steps)/float64(rep.TotalSteps))
			}
		}
	}
	// The record is the authority on where the job stands; the status
	// holds the figures. But an owner publishes a final status, then the
	// report, then marks the record finished: a final status is already
	// where the job stands (a paused job cancelled, say, whose record
	// still says paused a moment longer).
	ended := schemas.Terminal(st.State)
	if rec.Finished || !ended && (rec.State == schemas.StatePaused || rec.State == schemas.StateQueued && st.State == "") {
		st.State = rec.State
	}
	if st.State == schemas.StatePaused || st.State == schemas.StateQueued {
		// No coordinator holds a paused or queued job; the last status may
		// still name the one that ran it.
		st.Coordinator = ""
	}
	if !rec.Finished && !ended && rec.Control != schemas.ControlRun && !(rec.Control == schemas.ControlPause && (st.State == schemas.StatePaused || st.State == schemas.StateBudgetExhausted)) {
		st.Control = rec.Control // asked, not yet obeyed
	}
	return st, nil
}

// Result returns tenant/job's final report.
func Result(ctx context.Context, topo *topology.Topology, tenant, job string) (schemas.JobReport, error) {
	if err := checkRef(tenant, job); err != nil {
		return schemas.JobReport{}, err
	}
	e, err := topo.Reports.Get(ctx, bus.JobKey(tenant, job))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		rec, _, gerr := Get(ctx, topo, tenant, job)
		if gerr != nil {
			return schemas.JobReport{}, gerr
		}
		return schemas.JobReport{}, fmt.Errorf("%w: %s/%s is %s", ErrNotFinished, tenant, job, rec.State)
	}
	if err != nil {
		return schemas.JobReport{}, fmt.Errorf("read report of %s/%s: %w", tenant, job, err)
	}
	var rep schemas.JobReport
	if err := schemas.Decode(e.Value(), &rep); err != nil {
		return schemas.JobReport{}, fmt.Errorf("read report of %s/%s: %w", tenant, job, err)
	}
	return rep, nil
}
