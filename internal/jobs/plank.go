package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// ErrNoK marks a spec that names no k and whose k cannot be planned (p
// not above 0.5, a task spec this program cannot read); it wraps
// ErrInvalid.
var ErrNoK = fmt.Errorf("%w: k is missing and cannot be planned", ErrInvalid)

// PlanK gives a spec that names no k (K == 0) the smallest k with which
// every one of its task's planned steps is decided right with chance
// ReliabilityTarget (else schemas.DefaultTarget), when a valid sample is
// right with chance PEstimate (else schemas.DefaultP): the k the CLI
// picks. KBasis says so. A spec that names k is left as it is.
//
// The task's planned steps need the task bound to the spec's params, so
// the spec's task must be resolved (Prepare does it first).
func PlanK(ctx context.Context, spec *schemas.JobSpec, tasks Tasks) error {
	if spec.K != 0 {
		return nil
	}
	p, pFrom := spec.PEstimate, fmt.Sprintf("p_estimate %v", spec.PEstimate)
	if p == 0 {
		p, pFrom = schemas.DefaultP, fmt.Sprintf("p %v, the default (give p_estimate or a calibration to plan for your model)", schemas.DefaultP)
	}
	if !(p > 0.5 && p < 1) {
		return fmt.Errorf("%w: p_estimate %v is not in (0.5, 1), and voting converges only when a valid sample is more likely right than wrong; give k to run anyway", ErrNoK, p)
	}
	target, tFrom := spec.ReliabilityTarget, "reliability_target"
	if target == 0 {
		target, tFrom = schemas.DefaultTarget, "the default target"
	}
	if !(target > 0 && target < 1) {
		return fmt.Errorf("%w: reliability_target %v is not in (0, 1)", ErrNoK, target)
	}
	inst, err := task.BindRef(ctx, tasks, TaskRef(*spec), spec.Params)
	if errors.Is(err, taskreg.ErrNoCompiler) {
		return fmt.Errorf("%w: this program cannot read task spec %s to plan it: give k", ErrNoK, spec.Task)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	steps := task.PlannedSteps(inst)
	k, err := plan.KMin(p, steps, target)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoK, err)
	}
	spec.K = k
	spec.KBasis = fmt.Sprintf("k %d planned: the smallest k that decides all %d planned steps right with chance %v (%s) at %s",
		k, steps, target, tFrom, pFrom)
	return nil
}
