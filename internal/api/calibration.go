package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// calibrated gives spec what the stored calibration req names measured
// (schemas.Calibration.ApplyTo): p, the valid fraction and the tokens a call uses, for
// the job's task with its own prompt version unless the request names one.
func (s *Server) calibrated(ctx context.Context, req *schemas.JobRequest, spec *schemas.JobSpec) error {
	ref := req.Calibration
	if req.PEstimate != 0 || req.ValidFraction != 0 {
		return invalidField("/calibration", "give p_estimate and valid_fraction, or a calibration to take them from, not both")
	}
	if err := ref.Check(); err != nil {
		return invalidField("/calibration", "%s", strings.TrimPrefix(err.Error(), schemas.ErrInvalid.Error()+": "))
	}
	// The task as the job will run it (a spec pinned to its hash).
	probe := *spec
	if err := jobs.Prepare(ctx, &probe, s.tasks); err != nil {
		return specProblem(err)
	}
	tref := jobs.TaskRef(probe)
	kv, err := s.calibrations(ctx)
	if err != nil {
		return err
	}
	c, err := calibrate.ForJob(ctx, kv, s.tasks, tref, probe.Params, ref.Model, ref.PromptVersion)
	switch {
	case errors.Is(err, calibrate.ErrNotFound):
		return invalidField("/calibration", "%v", err)
	case errors.Is(err, calibrate.ErrUnreadable):
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	case err != nil:
		return specProblem(fmt.Errorf("%w: %w", jobs.ErrInvalid, err))
	}
	c.ApplyTo(spec)
	return nil
}

// lineCalibrations finds the calibrations a batch's lines name, opening
// the fleet's bucket once for the batch.
func (s *Server) lineCalibrations() func(context.Context, task.Ref, json.RawMessage, schemas.CalibrationRef) (schemas.Calibration, error) {
	var (
		mu     sync.Mutex
		kv     jetstream.KeyValue
		opened bool
	)
	return func(ctx context.Context, ref task.Ref, params json.RawMessage, c schemas.CalibrationRef) (schemas.Calibration, error) {
		mu.Lock()
		if !opened {
			var err error
			if kv, err = s.calibrations(ctx); err != nil {
				mu.Unlock()
				return schemas.Calibration{}, err
			}
			opened = true
		}
		mu.Unlock()
		cal, err := calibrate.ForJob(ctx, kv, s.tasks, ref, params, c.Model, c.PromptVersion)
		if errors.Is(err, calibrate.ErrUnreadable) {
			return cal, fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
		}
		return cal, err
	}
}

// calibrations is the fleet's calibrations bucket (nil when nothing was
// ever stored: every lookup is then calibrate.ErrNotFound).
func (s *Server) calibrations(ctx context.Context) (jetstream.KeyValue, error) {
	js, err := jetstream.New(s.deps.NC)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	kv, err := calibrate.OpenBucket(ctx, js, s.deps.Topo.NS, false)
	if err != nil && !errors.Is(err, calibrate.ErrNotFound) {
		return nil, fmt.Errorf("%w: calibrations: %w", jobs.ErrUnavailable, err)
	}
	return kv, nil
}
