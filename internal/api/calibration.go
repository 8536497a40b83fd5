package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// maxCalibrationRef bounds a calibration reference's model and prompt
// version, in bytes.
const maxCalibrationRef = 256

// calibrated gives spec what the stored calibration req names measured
// (calibrate.Apply): p, the valid fraction and the tokens a call uses, for
// the job's task with its own prompt version unless the request names one.
func (s *Server) calibrated(ctx context.Context, req *schemas.JobRequest, spec *schemas.JobSpec) error {
	ref := req.Calibration
	switch {
	case req.PEstimate != 0 || req.ValidFraction != 0:
		return invalidField("/calibration", "give p_estimate and valid_fraction, or a calibration to take them from, not both")
	case strings.TrimSpace(ref.Model) == "" || len(ref.Model) > maxCalibrationRef:
		return invalidField("/calibration/model", "model must name the calibrated model (1 to %d bytes)", maxCalibrationRef)
	case len(ref.PromptVersion) > maxCalibrationRef:
		return invalidField("/calibration/prompt_version", "prompt_version is over %d bytes", maxCalibrationRef)
	}
	// The task as the job will run it (a spec pinned to its hash), for
	// its prompt version.
	probe := *spec
	if err := jobs.Prepare(ctx, &probe, s.tasks); err != nil {
		return specProblem(err)
	}
	tref := jobs.TaskRef(probe)
	version := ref.PromptVersion
	if version == "" {
		inst, err := task.BindRef(ctx, s.tasks, tref, probe.Params)
		if err != nil {
			return specProblem(fmt.Errorf("%w: %w", jobs.ErrInvalid, err))
		}
		version = calibrate.PromptVersion(tref, inst)
	}
	js, err := jetstream.New(s.deps.NC)
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	kv, err := calibrate.OpenBucket(ctx, js, s.deps.Topo.NS, false)
	if err != nil && !errors.Is(err, calibrate.ErrNotFound) {
		return fmt.Errorf("%w: calibrations: %w", jobs.ErrUnavailable, err)
	}
	c, err := calibrate.Find(ctx, kv, tref.Name, ref.Model, version)
	switch {
	case errors.Is(err, calibrate.ErrNotFound):
		return invalidField("/calibration", "%v: measure one with maker calibrate --task %s --model %s", err, tref.Name, clipRef(ref.Model))
	case err != nil:
		return fmt.Errorf("%w: calibrations: %w", jobs.ErrUnavailable, err)
	case c.Valid == 0:
		return invalidField("/calibration", "the calibration of %s on %s counted no valid sample: it gives no p", clipRef(ref.Model), tref.Name)
	}
	calibrate.Apply(spec, c)
	return nil
}

// clipRef shortens a name for a problem's detail.
func clipRef(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
