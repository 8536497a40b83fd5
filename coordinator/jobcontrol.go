package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// What the job registry asks of a running job: its control (run, pause,
// cancel), kept current by a watch, and a person's answer for the step it
// waits at.

// watchControl follows the job's registry record, so a pause or cancel is
// seen at the next step boundary without a read per step.
func (r *jobRun) watchControl(ctx context.Context) (stop func(), err error) {
	w, err := r.topo.Jobs.Watch(ctx, bus.JobKey(r.spec.Tenant, r.spec.JobID))
	if err != nil {
		return nil, fmt.Errorf("coordinator: watch job record: %w", err)
	}
	done := make(chan struct{})
	go func() { // owned: stop ends the watch and waits for this
		defer close(done)
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var rec schemas.JobRecord
			if schemas.Decode(e.Value(), &rec) == nil {
				r.control.Store(rec.Control)
				r.notePerson(rec)
				select {
				case r.controlled <- struct{}{}:
				default:
				}
			}
		}
	}()
	return func() {
		_ = w.Stop()
		<-done
	}, nil
}

// notePerson notes the step a person's answer in rec is for.
func (r *jobRun) notePerson(rec schemas.JobRecord) {
	if rec.Decision != nil {
		r.personAt.Store(rec.Decision.Step)
	} else {
		r.personAt.Store(-1)
	}
}

// personDecision journals a person's answer (maker decide) for the step the
// job is at, if the registry holds one, instead of sampling the step.
func (r *jobRun) personDecision(ctx context.Context) error {
	rec, _, err := r.c.registry.Get(ctx, r.spec.Tenant, r.spec.JobID)
	if err != nil {
		return err
	}
	d := rec.Decision
	if d == nil || d.Step != r.m.Step {
		return nil
	}
	acts, _ := r.m.Person(time.Now(), *d)
	return r.do(ctx, acts)
}
